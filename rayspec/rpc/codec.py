"""Between engine objects and protobuf messages: tensors as raw bytes, metadata as msgpack.

Tensors travel as row-major little-endian bytes with their dtype and shape in band
(`rayspec.v1.Tensor`); probability rows either dense or, when they are truncated laws (top-k
or top-p sampling, or a sharp law in half precision), as their non-zero entries only — exact,
not an approximation.  A drafter's q rows are a half-precision law
(`rayspec.verify.processing.half_precision`) and cross as float16 values and a float32
divisor per row, half the bytes of float32 rows, decoding to the same law bit for bit.  Every
decoder validates what it reads and raises `CodecError` (a ValueError: the servers answer
INVALID_ARGUMENT) with a message, never a crash.
"""

from __future__ import annotations

import math
import sys

import msgpack
import torch

from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec, TokenLogprobs
from rayspec.rpc.generated import tensor_pb2, worker_pb2
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.base import positive_part_normalized
from rayspec.verify.processing import SamplingParams

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_LITTLE = sys.byteorder == "little"
# A sparse table is sent when it holds at most this share of non-zeros: an entry then costs an
# int32 index and its value (2x a dense float32 entry, 3x a float16 one), so below 1/3 it is
# smaller either way; 1/4 leaves margin for offsets.
SPARSE_BELOW = 0.25
MAX_DIMS, MAX_DIM = 8, 2**31 - 1


class CodecError(ValueError):
    """A message that does not decode: wrong dtype, shape, size or content."""


# ------------------------------------------------------------------------------- tensors


def encode_tensor(tensor: torch.Tensor, out: tensor_pb2.Tensor | None = None) -> tensor_pb2.Tensor:
    """`tensor` as a Tensor message, written into `out` when given: large tables are filled in
    place in the message that is sent, since every message-to-message copy copies their bytes."""
    if tensor.dtype not in _NAMES:
        raise CodecError(f"cannot send a tensor of dtype {tensor.dtype}; supported: {', '.join(DTYPES)}")
    flat = tensor.detach().contiguous().cpu()
    raw = flat.view(torch.int16) if flat.dtype == torch.bfloat16 else flat  # numpy has no bfloat16
    out = tensor_pb2.Tensor() if out is None else out
    out.dtype = _NAMES[flat.dtype]
    out.shape[:] = flat.shape
    out.data = raw.numpy().tobytes() if _LITTLE else raw.numpy().byteswap().tobytes()
    return out


def decode_tensor(message: tensor_pb2.Tensor, expect: set[str] | None = None, what: str = "tensor") -> torch.Tensor:
    if message.dtype not in DTYPES:
        raise CodecError(f"{what}: unknown dtype {message.dtype!r}; supported: {', '.join(DTYPES)}")
    if expect is not None and message.dtype not in expect:
        raise CodecError(f"{what}: dtype {message.dtype} not allowed here; expected {' or '.join(sorted(expect))}")
    shape = tuple(int(d) for d in message.shape)
    if any(d < 0 for d in shape):
        raise CodecError(f"{what}: negative dimension in shape {shape}")
    if len(shape) > MAX_DIMS or any(d > MAX_DIM for d in shape):  # an empty tensor too: torch sizes overflow
        raise CodecError(f"{what}: shape {list(shape)} beyond {MAX_DIMS} dimensions of at most {MAX_DIM}")
    if math.prod(max(d, 1) for d in shape) >= 2**63:  # an empty one's strides, int64 in torch, would overflow
        raise CodecError(f"{what}: shape {list(shape)} has more than 2^63 - 1 entries, its zero dimensions left out")
    dtype = DTYPES[message.dtype]
    count = 1
    for d in shape:
        count *= d
    itemsize = torch.tensor([], dtype=dtype).element_size()
    if len(message.data) != count * itemsize:
        raise CodecError(
            f"{what}: {len(message.data)} bytes do not hold a {message.dtype} tensor of shape {list(shape)} "
            f"({count * itemsize} bytes)"
        )
    if count == 0:
        return torch.zeros(shape, dtype=dtype)
    storage = torch.int16 if dtype == torch.bfloat16 else dtype
    tensor = torch.frombuffer(bytearray(message.data), dtype=storage)
    if not _LITTLE:
        tensor = tensor.byteswap()
    return tensor.view(dtype).reshape(shape)


# ------------------------------------------------------------------------ probability rows


def encode_rows(rows: torch.Tensor, out: tensor_pb2.ProbabilityRows | None = None,
                divisors: torch.Tensor | None = None) -> tensor_pb2.ProbabilityRows:
    """[R, V] float32 probability rows, dense, or as exact sparse rows when at most
    `SPARSE_BELOW` of their entries are non-zero; written into `out` when given.  With
    `divisors` (rows from `rayspec.verify.processing.half_precision`) the values travel as
    float16 and each row's divisor as float32, which decode to the same rows bit for bit."""
    out = tensor_pb2.ProbabilityRows() if out is None else out
    if divisors is not None:
        encode_tensor(divisors.float(), out.divisors)
        rows = (rows * divisors.unsqueeze(-1)).to(torch.float16)
    rows = rows.cpu()  # off a GPU once: the sparse form is built where its bytes are written
    if int(torch.count_nonzero(rows)) > SPARSE_BELOW * rows.numel():
        encode_tensor(rows, out.dense)
        return out
    nonzero = rows != 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), nonzero.sum(-1).cumsum(0)])
    row_index, column = nonzero.nonzero(as_tuple=True)
    values = rows.reshape(-1).index_select(0, row_index * rows.shape[1] + column)
    out.sparse.width = rows.shape[1]
    encode_tensor(offsets, out.sparse.offsets)
    encode_tensor(column.to(torch.int32), out.sparse.indices)
    encode_tensor(values, out.sparse.values)
    return out


# Float32 sums of a law's V entries, each rounded once (and float16 rows divided by their sum),
# are 1 to well within this; a row of another mass is no law.
LAW_MASS_TOLERANCE = 1e-3
_HALF_FLOATS = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def decode_rows(message, rows: int, width: int, what: str = "probability rows") -> torch.Tensor | None:
    """The [rows, width] float32 table of a ProbabilityRows message, None if it is empty; rows
    sent as float16 or bfloat16 values without divisors, each over its own mass."""
    kind = message.WhichOneof("rows")
    if kind is None:
        return None
    floats = {"float32", "float16", "bfloat16"}
    if kind == "dense":
        table = decode_tensor(message.dense, floats, what)
        if tuple(table.shape) != (rows, width):
            raise CodecError(f"{what}: shape {list(table.shape)}, expected [{rows}, {width}]")
        half = _HALF_FLOATS.get(message.dense.dtype)
        table = table.float()
    else:
        sparse = message.sparse
        if sparse.width != width:
            raise CodecError(f"{what}: width {sparse.width}, expected {width}")
        offsets = decode_tensor(sparse.offsets, {"int64"}, f"{what} offsets")
        indices = decode_tensor(sparse.indices, {"int32", "int64"}, f"{what} indices").long()
        half = _HALF_FLOATS.get(sparse.values.dtype)
        values = decode_tensor(sparse.values, floats, f"{what} values").float()
        if offsets.shape != (rows + 1,) or int(offsets[0]) != 0 or bool((offsets.diff() < 0).any()):
            raise CodecError(f"{what}: offsets must be {rows + 1} non-decreasing values from 0")
        if indices.shape != values.shape or int(offsets[-1]) != indices.numel():
            raise CodecError(f"{what}: {indices.numel()} indices, {values.numel()} values, offsets end at {int(offsets[-1])}")
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= width):
            raise CodecError(f"{what}: column indices outside [0, {width})")
        row_of = torch.repeat_interleave(torch.arange(rows), offsets.diff())
        table = torch.zeros(rows * width)
        table.index_put_((row_of * width + indices,), values, accumulate=True)
        table = table.reshape(rows, width)
    if message.HasField("divisors"):
        divisors = decode_tensor(message.divisors, {"float32"}, f"{what} divisors")
        if tuple(divisors.shape) != (rows,) or not bool(((divisors > 0) & divisors.isfinite()).all()):
            raise CodecError(f"{what}: divisors must be {rows} positive finite values")
        table = table / divisors.unsqueeze(-1)
        half = None  # a drafter's law itself, exactly
    if table.numel():
        low, high = table.aminmax()  # one pass; a NaN makes both comparisons fail
        if not (bool(low >= 0) and bool(high <= 1 + 1e-5)):
            raise CodecError(f"{what}: probabilities must lie in [0, 1] (found values in [{float(low)}, {float(high)}])")
        # Each row a law: a verifier fed rows of another mass would emit another law, silently.
        # Rows of half-precision values sum to 1 within their rounding only (bfloat16's
        # (0.99, 0.006, 0.004) to 0.99829), and are read as the walk reads such rows in
        # process (`rayspec.verify.tree_walk.as_law`): each over its own mass.
        off = (table.sum(-1) - 1).abs()
        tolerance = LAW_MASS_TOLERANCE if half is None else max(LAW_MASS_TOLERANCE, torch.finfo(half).eps)
        if bool((off > tolerance).any()):
            row = int(off.argmax())
            raise CodecError(f"{what}: each row must sum to 1 (row {row} sums to {float(table[row].sum()):.6g})")
        if half is not None:
            table = positive_part_normalized(table)
    return table


# ------------------------------------------------------------------------ engine objects


def encode_spec(spec: SequenceSpec) -> worker_pb2.SequenceSpec:
    return worker_pb2.SequenceSpec(
        prompt_ids=list(spec.prompt_ids),
        params=encode_params(spec.params),
        seed=spec.seed,
        verifier=spec.verifier,
        verifier_params=msgpack.packb(spec.verifier_params),
        logprobs=spec.logprobs,
        prompt_logprobs=spec.prompt_logprobs,
        completion_ids=list(spec.completion_ids),
        vocab_size=spec.vocab_size or 0,
    )


# What this code's workers implement beyond the first protocol, announced in `WorkerInfo`.  A
# worker ignores fields it does not know (proto3), so a coordinator must not send a sequence
# whose law depends on them to a target worker that does not list them.  (A drafter that
# ignored them would only draft less well: verification corrects any draft law.)  A target
# that lists "predicted_chain" verifies trees with a predicted chain (`Tree.predicted`); one
# that does not would walk the chain as drafts and is never sent one.
WORKER_FEATURES = ("penalties", "min_p", "min_tokens", "allowed_token_ids", "bad_words", "predicted_chain",
                   "structured_output", "resume", "padded_vocabulary")


def check_worker_features(spec: SequenceSpec, features: frozenset[str], worker: str) -> None:
    """Refuse to open `spec` on a worker that would silently ignore a part of it."""
    params = spec.params
    needed = [
        ("penalties", params.penalised or params.logit_bias, "penalties and logit_bias, and would ignore them"),
        ("min_p", params.min_p, "min_p, and would ignore it"),
        ("min_tokens", params.bans_stops, "min_tokens, and would ignore it"),
        ("allowed_token_ids", params.allowed_token_ids, "allowed_token_ids, and would ignore them"),
        ("bad_words", params.bad_words_ids, "bad_words, and would ignore them"),
        ("structured_output", params.regex, "structured output, and would ignore it"),
        ("resume", spec.completion_ids, "resuming a sequence, and would start it again"),
    ]
    for feature, used, what in needed:
        if used and feature not in features:
            raise RuntimeError(f"the {worker} predates {what}: upgrade it")


_FLOAT32 = torch.finfo(torch.float32)


def _float32_range(value: float) -> float:
    """A positive `value` within float32's finite normal numbers, where the proto's float
    fields carry it: 1e-50 would arrive as 0 and 1e39 as inf, both refused by the worker,
    while `logits_to_probs` clamps to this very range, so the law is unchanged."""
    return min(max(value, float(_FLOAT32.tiny)), float(_FLOAT32.max)) if value > 0 else value


def encode_params(params: SamplingParams) -> worker_pb2.SamplingParams:
    message = worker_pb2.SamplingParams(
        temperature=_float32_range(params.temperature), top_p=_float32_range(params.top_p), top_k=params.top_k,
        presence_penalty=params.presence_penalty, frequency_penalty=params.frequency_penalty,
        logit_bias=dict(params.logit_bias), min_p=params.min_p, min_tokens=params.min_tokens,
        stop_token_ids=params.stop_token_ids, allowed_token_ids=params.allowed_token_ids,
        bad_words=[worker_pb2.TokenIds(ids=word) for word in params.bad_words_ids], regex=params.regex,
    )
    if params.repetition_penalty != 1:
        message.repetition_penalty = _float32_range(params.repetition_penalty)
    return message


def decode_params(message: worker_pb2.SamplingParams) -> SamplingParams:
    """The sampling parameters, checked (`SamplingParams`: a bad value is a ValueError)."""
    return SamplingParams(
        message.temperature, message.top_p, message.top_k,
        presence_penalty=message.presence_penalty, frequency_penalty=message.frequency_penalty,
        repetition_penalty=message.repetition_penalty if message.HasField("repetition_penalty") else 1.0,
        logit_bias=dict(message.logit_bias),
        min_p=message.min_p, min_tokens=message.min_tokens, stop_token_ids=tuple(message.stop_token_ids),
        allowed_token_ids=tuple(message.allowed_token_ids),
        bad_words_ids=tuple(tuple(word.ids) for word in message.bad_words), regex=message.regex,
    )


def decode_spec(message: worker_pb2.SequenceSpec) -> SequenceSpec:
    if not message.HasField("params"):  # (an Open without its spec): not read as all-zero parameters
        raise CodecError("the sequence's spec has no sampling parameters (spec.params): an Open needs its spec")
    params = decode_msgpack_map(message.verifier_params, "verifier_params")
    return SequenceSpec(
        tuple(message.prompt_ids),
        decode_params(message.params),
        message.seed,
        message.verifier,
        params,
        logprobs=message.logprobs if message.HasField("logprobs") else None,
        prompt_logprobs=message.prompt_logprobs if message.HasField("prompt_logprobs") else None,
        completion_ids=tuple(message.completion_ids),
        vocab_size=message.vocab_size or None,
    )


def decode_msgpack_map(data: bytes, what: str) -> dict:
    if not data:
        return {}
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as error:
        raise CodecError(f"{what}: not a msgpack map ({error})") from error
    if not isinstance(value, dict):
        raise CodecError(f"{what}: expected a msgpack map, got {type(value).__name__}")
    return value


def encode_tree(tree: DraftTree | TreeShape) -> worker_pb2.Tree:
    shape = tree.shape if isinstance(tree, DraftTree) else tree
    tokens = tree.tokens.tolist() if isinstance(tree, DraftTree) else []
    return worker_pb2.Tree(parents=list(shape.parents), tokens=tokens, predicted=shape.predicted)


def decode_shape(message: worker_pb2.Tree, max_nodes: int = 4096) -> TreeShape:
    if len(message.parents) > max_nodes:
        raise CodecError(f"tree of {len(message.parents)} nodes exceeds the limit of {max_nodes}")
    try:
        return TreeShape(tuple(message.parents), message.predicted)
    except ValueError as error:
        raise CodecError(f"bad tree: {error}") from error


def encode_plan(request: worker_pb2.DraftRequest, plan: TreeShape | DynamicPlan) -> None:
    if isinstance(plan, DynamicPlan):
        request.dynamic.CopyFrom(worker_pb2.DynamicPlan(budget=plan.budget, depth=plan.depth, top_k=plan.top_k))
    else:
        request.shape.CopyFrom(encode_tree(plan))


def decode_plan(request: worker_pb2.DraftRequest, max_nodes: int = 4096) -> TreeShape | DynamicPlan:
    kind = request.WhichOneof("plan")
    if kind == "dynamic":
        plan = request.dynamic
        # The drafter scores top_k^2 candidates per level: the work, not each field, is capped.
        work = max(plan.budget, plan.depth * plan.top_k**2)
        if work > max_nodes:
            raise CodecError(f"dynamic tree {plan.budget}x{plan.depth}x{plan.top_k} asks for {work} nodes of "
                             f"work (budget, or depth * top_k^2); the limit is {max_nodes}")
        try:
            return DynamicPlan(plan.budget, plan.depth, plan.top_k)
        except ValueError as error:
            raise CodecError(str(error)) from error
    if kind is None:
        raise CodecError("a draft request needs a tree shape or a dynamic plan")
    return decode_shape(request.shape, max_nodes)


def decode_tree(message: worker_pb2.Tree, vocab_size: int, max_nodes: int = 4096) -> DraftTree:
    shape = decode_shape(message, max_nodes)
    if len(message.tokens) != shape.size:
        raise CodecError(f"a tree of {shape.size} nodes needs {shape.size} tokens, got {len(message.tokens)}")
    return DraftTree(shape, _vocabulary_ids(message.tokens, vocab_size, "tree tokens"))


def _vocabulary_ids(values, vocab_size: int, what: str) -> torch.Tensor:
    """Token ids as an int64 tensor, refused (naming `what`) unless all are in the vocabulary."""
    tokens = torch.tensor(list(values), dtype=torch.long)
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise CodecError(f"{what} outside the vocabulary [0, {vocab_size})")
    return tokens


def encode_outcome(outcome: Outcome) -> worker_pb2.Outcome:
    message = worker_pb2.Outcome(
        tokens=outcome.tokens, path=outcome.path, ranks=outcome.ranks,
        score_seconds=outcome.score_seconds, verify_seconds=outcome.verify_seconds, batch_size=outcome.batch_size,
    )
    if outcome.logprobs is not None:
        encode_logprobs(outcome.logprobs, message.logprobs)
    return message


def encode_logprobs(logprobs: TokenLogprobs, out: worker_pb2.TokenLogprobs) -> None:
    out.chosen[:] = logprobs.chosen
    out.top = len(logprobs.top_ids[0]) if logprobs.top_ids else 0
    out.top_ids[:] = [i for row in logprobs.top_ids for i in row]
    out.top_values[:] = [v for row in logprobs.top_values for v in row]
    out.ranks[:] = logprobs.ranks or []


def decode_logprobs(message: worker_pb2.TokenLogprobs, tokens: int, vocab_size: int) -> TokenLogprobs:
    """The log-probabilities of `tokens` tokens, checked: one per token, `top` alternatives
    each, ids in the vocabulary, values at most 0 (a NaN fails that too), ranks (none from a
    worker that predates them) one per token in [1, V]."""
    top, chosen = message.top, list(message.chosen)
    if len(chosen) != tokens or top < 0 or len(message.top_ids) != tokens * top or len(message.top_values) != tokens * top:
        raise CodecError(f"log-probabilities of {tokens} tokens need {tokens} chosen values and {tokens} x {top} "
                         f"alternatives; got {len(chosen)}, {len(message.top_ids)} ids and {len(message.top_values)} values")
    ids, values = list(message.top_ids), list(message.top_values)
    if ids and (min(ids) < 0 or max(ids) >= vocab_size):
        raise CodecError(f"log-probability token ids outside the vocabulary [0, {vocab_size})")
    if not all(v <= 0 for v in chosen + values):
        raise CodecError("log-probabilities must be <= 0")
    ranks = list(message.ranks)
    if ranks and (len(ranks) != tokens or min(ranks) < 1 or max(ranks) > vocab_size):
        raise CodecError(f"log-probabilities of {tokens} tokens need no ranks or {tokens} of them in [1, {vocab_size}]")
    known = bool(ranks) or not tokens  # of no tokens, no rank is unknown
    return TokenLogprobs(chosen, [ids[i * top : (i + 1) * top] for i in range(tokens)],
                         [values[i * top : (i + 1) * top] for i in range(tokens)], ranks if known else None)


def decode_outcome(message: worker_pb2.Outcome, vocab_size: int, tree: DraftTree | None = None) -> Outcome:
    """An Outcome whose tokens are in the vocabulary and whose path is shorter than them
    (the accepted drafts' tokens, then one more): a session is never handed tokens that
    its next forward cannot embed.  With the `tree` it was verified on (a target's reply),
    also a path down that tree from its root whose nodes hold the tokens it emits: the
    drafter commits those nodes."""
    tokens, path = list(message.tokens), list(message.path)
    if not tokens or len(path) >= len(tokens):
        raise CodecError(f"an outcome emits its {len(path)} accepted drafts' tokens and one more; "
                         f"got {len(tokens)} tokens")
    if min(tokens) < 0 or max(tokens) >= vocab_size:
        raise CodecError(f"outcome tokens outside the vocabulary [0, {vocab_size})")
    if min(path, default=1) < 1:
        raise CodecError("an outcome's path holds tree nodes below the root (indices >= 1)")
    if tree is not None:
        _check_path_on(tree, path, tokens)
    logprobs = decode_logprobs(message.logprobs, len(tokens), vocab_size) if message.HasField("logprobs") else None
    return Outcome(tokens, path, list(message.ranks), message.score_seconds, message.verify_seconds, logprobs=logprobs,
                   batch_size=message.batch_size)


def _check_path_on(tree: DraftTree, path: list[int], tokens: list[int]) -> None:
    parents = tree.shape.parents
    above = 0
    for depth, node in enumerate(path):
        if node >= len(parents) or parents[node] != above:
            raise CodecError(f"an outcome's path {path} does not go down the {len(parents)}-node tree it verified "
                             f"from its root")
        if int(tree.tokens[node]) != tokens[depth]:
            raise CodecError(f"an outcome emits token {tokens[depth]} for tree node {node}, which holds "
                             f"{int(tree.tokens[node])}")
        above = node


def decode_node_tokens(values, size: int, vocab_size: int) -> torch.Tensor:
    """A target's sample at each of a tree's `size` nodes (`ScoreReply.node_tokens`), checked."""
    if len(values) != size:
        raise CodecError(f"{len(values)} node tokens for a tree of {size} nodes")
    return _vocabulary_ids(values, vocab_size, "node tokens")


def encode_draft(draft: Draft, out: worker_pb2.DraftReply | None = None) -> worker_pb2.DraftReply:
    out = worker_pb2.DraftReply() if out is None else out
    out.tree.CopyFrom(encode_tree(draft.tree))
    out.seconds = draft.seconds
    out.batch_size = draft.batch_size
    if draft.q_rows is not None:
        encode_rows(draft.q_rows, out.q_rows, draft.q_divisors)
    return out
