"""Worker messages made up by hypothesis, half of them valid and half spoiled in a field or
two: every decoder either returns what the message says, checked (shape, range, vocabulary),
or raises `CodecError` / `ValueError` with a message — the INVALID_ARGUMENT a worker answers —
never another exception.  A valid message always decodes."""

from __future__ import annotations

import math

import msgpack
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rayspec.rpc import codec
from rayspec.rpc.generated import worker_pb2
from rayspec.verify.processing import half_precision
from tests.fuzzing import EXAMPLES, fuzz_settings

VOCAB = 50
FUZZ = fuzz_settings(5 * EXAMPLES)  # these are cheap

int32s = st.one_of(st.integers(-3, 12), st.integers(-2**31, 2**31 - 1))
int64s = st.one_of(st.integers(-3, 12), st.integers(-2**63, 2**63 - 1))
floats32 = st.floats(width=32)  # NaN and infinities included
spoiled = st.booleans()  # whether an example spoils its valid message


def _decodes_or_refuses(decode, *args, valid: bool):
    """decode(*args), or None when it refused the message with a ValueError saying why; a
    `valid` message must decode."""
    try:
        decoded = decode(*args)
    except ValueError as error:  # CodecError is one
        assert not valid, f"{decode.__name__} refused a valid message: {error}"
        assert str(error), decode
        event("refused")
        return None
    event("decoded")
    return decoded


# ------------------------------------------------------------------------------- tensors


@st.composite
def tensors(draw, dtypes=tuple(codec.DTYPES), rows: int | None = None, values=None):
    """(a Tensor message, whether it is known to be valid): a tensor of one of `dtypes`
    (shape [rows] when given), its values from `values` when given; or, spoiled, any dtype,
    shape and bytes."""
    dtype = draw(st.sampled_from(sorted(dtypes)))
    shape = [rows] if rows is not None else draw(st.lists(st.integers(0, 4), max_size=3))
    torch_dtype = codec.DTYPES[dtype]
    count = math.prod(shape)
    if values is None:
        values = st.floats(-1e3, 1e3) if torch_dtype.is_floating_point else st.integers(-1000, 1000)
    drawn = draw(st.lists(values, min_size=count, max_size=count))
    if not torch_dtype.is_floating_point and not all(type(v) is int for v in drawn):
        drawn = draw(st.lists(st.integers(-1000, 1000), min_size=count, max_size=count))  # floats asked of ints
    tensor = torch.tensor(drawn, dtype=torch.float64 if torch_dtype.is_floating_point else torch.int64)
    message = codec.encode_tensor(tensor.to(torch_dtype).reshape(shape))
    if not draw(spoiled):
        return message, True
    part = draw(st.sampled_from(["dtype", "shape", "data"]))
    if part == "dtype":
        message.dtype = draw(st.sampled_from(["", "float64", "FLOAT32", "int8", *codec.DTYPES]))
    elif part == "shape":
        message.shape[:] = draw(st.lists(st.one_of(st.integers(-2, 6), int64s), max_size=4))
    else:
        message.data = draw(st.binary(max_size=64))
    return message, False  # spoiled, though perhaps still valid: nothing is asserted of its validity


@FUZZ
@given(made=tensors())
def test_a_made_up_tensor_decodes_to_its_shape_and_dtype_or_is_refused(made):
    message, valid = made
    tensor = _decodes_or_refuses(codec.decode_tensor, message, valid=valid)
    if tensor is not None:
        assert tuple(tensor.shape) == tuple(message.shape)
        assert tensor.dtype == codec.DTYPES[message.dtype]
        assert codec.encode_tensor(tensor).data == message.data  # what came in, bit for bit


FLOATS = ("float32", "float16", "bfloat16")
probabilities = st.floats(0, 1)


@st.composite
def probability_rows(draw, rows: int, width: int):
    """(a ProbabilityRows message of [rows, width] laws, whether it is known to be valid): dense or
    sparse, with divisors or not, then perhaps a part of it spoiled."""
    table = torch.tensor(draw(st.lists(st.lists(probabilities, min_size=width, max_size=width),
                                       min_size=rows, max_size=rows)))
    table = table * torch.tensor(draw(st.lists(st.booleans(), min_size=rows * width, max_size=rows * width)),
                                 dtype=torch.float32).reshape(rows, width)  # zeros, for the sparse form
    table[:, 0] += 0.5  # every row has mass to normalise
    law = table / table.sum(-1, keepdim=True)
    if draw(st.booleans()):  # a drafter's half-precision law: float16 values and a divisor per row
        law, divisors = half_precision(law)
        message = codec.encode_rows(law, divisors=divisors)
    else:
        message = codec.encode_rows(law)
    if not draw(spoiled):
        return message, True
    kind = message.WhichOneof("rows")
    parts = ["dense"] if kind == "dense" else ["width", "offsets", "indices", "values"]
    part = draw(st.sampled_from(parts + ["divisors"]))
    if part == "width":
        message.sparse.width = draw(st.integers(-2, 10))
    elif part == "divisors":
        message.divisors.CopyFrom(draw(tensors(("float32", "int64"), values=st.one_of(st.floats(0.5, 2), floats32)))[0])
    else:
        target = message.dense if part == "dense" else getattr(message.sparse, part)
        ints = part in ("offsets", "indices")
        values = st.integers(-3, width + 3) if ints else st.one_of(probabilities, floats32)
        target.CopyFrom(draw(tensors(("int32", "int64") if ints else FLOATS, values=values))[0])
    return message, False


@FUZZ
@given(data=st.data(), rows=st.integers(1, 4), width=st.integers(1, 6))
def test_made_up_probability_rows_decode_to_a_checked_table_or_are_refused(data, rows, width):
    message, valid = data.draw(probability_rows(rows, width))
    table = _decodes_or_refuses(codec.decode_rows, message, rows, width, valid=valid)
    if table is not None:
        assert table.shape == (rows, width) and table.dtype == torch.float32
        assert bool(((table >= 0) & (table <= 1 + 1e-5)).all())
        assert bool(((table.sum(-1) - 1).abs() <= codec.LAW_MASS_TOLERANCE).all())  # laws, each row


# ------------------------------------------------------------------------------- trees


@st.composite
def trees(draw):
    """(a Tree message, whether it is known to be valid): nodes in breadth-first order (each node's
    parent an earlier node, parents never decreasing), tokens in the vocabulary; or one parent
    or token spoiled."""
    size = draw(st.integers(1, 10))
    parents = [-1]
    for node in range(1, size):
        parents.append(draw(st.integers(max(parents[-1], 0), node - 1)))
    tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=size, max_size=size))
    valid = not draw(spoiled)
    if not valid:
        spoil = draw(st.sampled_from([parents, tokens]))
        if draw(st.booleans()) and len(spoil) > 1:
            spoil.pop()  # one fewer token than nodes, or a parent pointing past the end
        else:
            spoil[draw(st.integers(0, len(spoil) - 1))] = draw(st.one_of(st.integers(-3, size + VOCAB), int32s))
    return worker_pb2.Tree(parents=parents, tokens=tokens), valid


@FUZZ
@given(made=trees())
def test_a_made_up_tree_decodes_to_a_tree_over_the_vocabulary_or_is_refused(made):
    message, valid = made
    tree = _decodes_or_refuses(codec.decode_tree, message, VOCAB, valid=valid)
    if tree is not None:
        assert tree.shape.size == len(message.tokens) and list(tree.shape.parents) == list(message.parents)
        assert all(0 <= parent < node for node, parent in enumerate(message.parents) if node > 0)
        assert bool(((tree.tokens >= 0) & (tree.tokens < VOCAB)).all())


@FUZZ
@given(budget=st.one_of(st.integers(-1, 5000), int32s), depth=int32s, top_k=int32s)
def test_a_made_up_dynamic_plan_is_decoded_within_the_work_cap_or_refused(budget, depth, top_k):
    request = worker_pb2.DraftRequest(dynamic=worker_pb2.DynamicPlan(budget=budget, depth=depth, top_k=top_k))
    valid = budget >= 1 and depth >= 0 and top_k >= 1 and max(budget, depth * top_k**2) <= 4096
    plan = _decodes_or_refuses(codec.decode_plan, request, 4096, valid=valid)
    if plan is not None:
        assert (plan.budget, plan.depth, plan.top_k) == (budget, depth, top_k)
        assert max(plan.budget, plan.depth * plan.top_k**2) <= 4096


# ------------------------------------------------------------------------------- outcomes


@st.composite
def outcomes(draw):
    """(an Outcome message with log-probabilities, whether it is known to be valid), or one field spoiled."""
    accepted = draw(st.integers(0, 4))
    tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=accepted + 1, max_size=accepted + 1))
    path = draw(st.lists(st.integers(1, 20), min_size=accepted, max_size=accepted))
    top = draw(st.integers(0, 3))
    count = len(tokens)
    logprobs = worker_pb2.TokenLogprobs(
        chosen=draw(st.lists(st.floats(-50.0, 0.0, width=32), min_size=count, max_size=count)), top=top,
        top_ids=draw(st.lists(st.integers(0, VOCAB - 1), min_size=count * top, max_size=count * top)),
        top_values=draw(st.lists(st.floats(-50.0, 0.0, width=32), min_size=count * top, max_size=count * top)),
        ranks=draw(st.lists(st.integers(1, VOCAB), min_size=count, max_size=count)))
    message = worker_pb2.Outcome(tokens=tokens, path=path, logprobs=logprobs)
    if not draw(spoiled):
        return message, True
    field = draw(st.sampled_from(["tokens", "path", "chosen", "top", "top_ids", "top_values", "ranks"]))
    owner = message if field in ("tokens", "path") else message.logprobs
    if field == "top":
        owner.top = draw(st.integers(-2, 5))
    else:
        values = getattr(owner, field)
        spoil = st.one_of(floats32, st.floats(0.5, 5.0, width=32)) if field in ("chosen", "top_values") \
            else st.one_of(int32s, st.integers(-1, VOCAB + 2))
        if values and draw(st.booleans()):
            values[draw(st.integers(0, len(values) - 1))] = draw(spoil)
        else:
            values.append(draw(spoil))
    return message, False


@FUZZ
@given(made=outcomes())
def test_a_made_up_outcome_decodes_to_tokens_of_the_vocabulary_or_is_refused(made):
    message, valid = made
    outcome = _decodes_or_refuses(codec.decode_outcome, message, VOCAB, valid=valid)
    if outcome is not None:
        assert list(outcome.tokens) == list(message.tokens) and len(message.tokens) == len(message.path) + 1
        assert all(0 <= t < VOCAB for t in message.tokens) and all(node >= 1 for node in message.path)
    tokens = len(message.tokens)
    logprobs = _decodes_or_refuses(codec.decode_logprobs, message.logprobs, tokens, VOCAB, valid=valid)
    if logprobs is not None:
        assert len(message.logprobs.chosen) == tokens and all(v <= 0 for v in message.logprobs.chosen)
        assert all(0 <= t < VOCAB for t in message.logprobs.top_ids)


# ------------------------------------------------------------------------------- specs

msgpack_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(), st.text(max_size=6),
              st.binary(max_size=6)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@st.composite
def specs(draw):
    """(a SequenceSpec message, whether it is known to be valid): sampling settings within their ranges
    and a msgpack map of verifier parameters; or one of them spoiled."""
    params = worker_pb2.SamplingParams(
        temperature=draw(st.floats(0.0, 2.0, width=32)), top_p=draw(st.floats(0.25, 1.0, width=32)),
        top_k=draw(st.integers(0, 50)), min_p=draw(st.floats(0.0, 1.0, width=32)),
        presence_penalty=draw(st.floats(-2.0, 2.0, width=32)),
        logit_bias=draw(st.dictionaries(st.integers(0, VOCAB - 1), st.floats(-100.0, 100.0, width=32), max_size=3)),
        min_tokens=draw(st.integers(0, 5)), stop_token_ids=draw(st.lists(st.integers(0, VOCAB - 1), max_size=3)))
    message = worker_pb2.SequenceSpec(
        prompt_ids=draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8)), params=params,
        seed=draw(int64s), verifier="rrsw",
        verifier_params=msgpack.packb(draw(st.dictionaries(st.text(max_size=4), msgpack_values, max_size=3))))
    if not draw(spoiled):
        return message, True
    field = draw(st.sampled_from(["temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty",
                                  "logit_bias", "min_tokens", "verifier_params"]))
    if field == "verifier_params":
        message.verifier_params = draw(st.one_of(msgpack_values.map(msgpack.packb), st.binary(max_size=16)))
    elif field == "logit_bias":
        message.params.logit_bias[draw(int32s)] = draw(floats32)
    elif field in ("top_k", "min_tokens"):
        setattr(message.params, field, draw(int32s))
    else:
        setattr(message.params, field, draw(floats32))
    return message, False


@FUZZ
@given(made=specs())
def test_a_made_up_sequence_spec_decodes_to_checked_settings_or_is_refused(made):
    message, valid = made
    spec = _decodes_or_refuses(codec.decode_spec, message, valid=valid)
    if spec is not None:
        assert isinstance(spec.verifier_params, dict) and list(spec.prompt_ids) == list(message.prompt_ids)
        assert 0 <= spec.params.temperature < math.inf and 0 < spec.params.top_p <= 1
        assert 0 <= spec.params.min_p <= 1 and spec.params.repetition_penalty > 0
