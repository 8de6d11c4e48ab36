"""The two small interfaces the speculative loop talks to, and what crosses them.

The engine (`rayspec.engine.SpeculativeEngine`) owns the loop; a `Drafter` and a `Target`
own the models.  Each `open`s a session per sequence.  Per step, exactly this crosses:

    drafter.draft(shape, last outcome) -> Draft(tree tokens, q rows of internal nodes or None)
    target.verify(tree, q rows)        -> Outcome(emitted tokens, accepted path, ranks
                                                  [, the tokens' log-probabilities if asked])

Verification runs on the target's side: it holds the target's rows, and the only other
input — the drafter's rows of the internal nodes — is the smaller side (a tree has more
nodes than internal nodes; verifiers that never read q, greedy and the couplings, ship
token ids only).  In-process models implement these interfaces (`rayspec.engine.local`),
and so do gRPC handles to remote workers (`rayspec.rpc`): the same loop runs both, so a seed
gives the same tokens in-process and distributed.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from rayspec.models.cancellation import GenerationCancelled  # noqa: F401 — the loop's callers catch it from here
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.processing import SamplingParams, token_logprobs


# The most alternatives a request may ask log-probabilities of, per token (vLLM's default cap).
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class SequenceSpec:
    """Everything both sides must agree on for one sequence."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    seed: int
    verifier: str
    verifier_params: dict = field(default_factory=dict)
    logprobs: int | None = None  # None: none; k: each emitted token's and the k most likely's (`TokenLogprobs`)
    prompt_logprobs: int | None = None  # the same for the prompt's tokens after the first, from the prefill
    # Tokens already generated: the session resumes the sequence after them (`resumed`).
    completion_ids: tuple[int, ...] = ()
    # The width of the laws both sides draw from and verify over: the target's vocabulary
    # (None: each model's own).  A drafter whose embeddings are padded to another size fits
    # its logits to it (`rayspec.engine.local.fit_vocabulary`).
    vocab_size: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        object.__setattr__(self, "completion_ids", tuple(int(t) for t in self.completion_ids))
        if not self.prompt_ids:
            raise ValueError("the prompt must contain at least one token")
        check_logprobs(self.logprobs)
        check_logprobs(self.prompt_logprobs, "prompt_logprobs")
        if self.vocab_size is not None and (isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int)
                                            or self.vocab_size < 1):
            raise ValueError(f"vocab_size must be a whole number of tokens, 1 or more, or None; "
                             f"got {self.vocab_size!r}")
        if self.completion_ids and self.prompt_logprobs is not None:
            raise ValueError("a resumed sequence does not score its prompt again: prompt_logprobs must be None")

    def resumed(self, completion_ids: Sequence[int]) -> "SequenceSpec":
        """This sequence opened again after `completion_ids` were generated (its session was
        lost with its worker's process): the same prompt and sampling, the completion so far
        counted as such by penalties and structured output, and randomness streams of its own
        (`stream_generator`), since the first session's draws were spent on what it produced."""
        return replace(self, completion_ids=tuple(completion_ids), prompt_logprobs=None)


def check_logprobs(logprobs: int | None, name: str = "logprobs") -> None:
    """A count of alternatives: True or 2.5 is refused, not read as 1 or 2."""
    if logprobs is None:
        return
    if isinstance(logprobs, bool) or not isinstance(logprobs, numbers.Integral) or not 0 <= logprobs <= MAX_LOGPROBS:
        raise ValueError(f"{name} must be a whole number between 0 and {MAX_LOGPROBS}, got {logprobs!r}")


def derive_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one consumer of randomness (drafter, verifier) of a request seed.

    Drafter and target draw from independent streams, so neither's consumption shifts the
    other's: the same seed gives the same tokens whether they share a process or not."""
    digest = hashlib.sha256(f"{int(seed)}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def stream_generator(seed: int, stream: str, spec: "SequenceSpec | None" = None) -> torch.Generator:
    """The generator of one consumer of a request seed's randomness; for a resumed `spec`, a
    stream of its own, named after the completion's length (draws that already decided tokens
    of the completion must not decide the next ones too)."""
    if spec is not None and spec.completion_ids:
        stream = f"{stream}@{len(spec.completion_ids)}"
    return torch.Generator().manual_seed(derive_seed(seed, stream))


@dataclass
class Draft:
    """A drafted tree and the draft law of each internal node (`shape.internal_nodes` order)."""

    tree: DraftTree
    q_rows: torch.Tensor | None  # [I, V] float32, None when the verifier never reads q
    seconds: float = 0.0  # drafter compute time, as measured where the drafter runs
    wire_bytes: int = 0  # bytes that crossed a process boundary to get it (0 in-process)
    # [I] float32 when q_rows came from `rayspec.verify.processing.half_precision`: they
    # then cross a wire as float16 values and these divisors, exactly.
    q_divisors: torch.Tensor | None = None
    batch_size: float = 0.0  # sequences per forward of the drafter's for it, on average (0: none, or not said)


@dataclass
class TokenLogprobs:
    """Per emitted token: its log-probability under the target's raw law at its position
    (`rayspec.verify.processing.token_logprobs`: temperature 1, no top-k or top-p, whatever the
    request samples with), the `top` most likely tokens there, most likely first, and its rank
    there (1 + how many tokens are more likely; None when unknown: from a worker that predates
    ranks)."""

    chosen: list[float]
    top_ids: list[list[int]]
    top_values: list[list[float]]
    ranks: list[int] | None = None

    @classmethod
    def of(cls, logits: torch.Tensor, tokens: list[int], top: int) -> "TokenLogprobs":
        """The log-probabilities of `tokens`, token i drawn from row i of `logits` [n, V]."""
        chosen, values, ids, ranks = token_logprobs(logits, torch.tensor(tokens), top)
        return cls(chosen.tolist(), ids.tolist(), values.tolist(), ranks.tolist())

    @classmethod
    def empty(cls) -> "TokenLogprobs":
        return cls([], [], [], [])

    def __len__(self) -> int:
        return len(self.chosen)

    def head(self, n: int) -> "TokenLogprobs":
        return TokenLogprobs(self.chosen[:n], self.top_ids[:n], self.top_values[:n],
                             None if self.ranks is None else self.ranks[:n])

    def narrowed(self, top: int) -> "TokenLogprobs":
        """The same tokens with at most `top` alternatives each."""
        return TokenLogprobs(self.chosen, [ids[:top] for ids in self.top_ids], [v[:top] for v in self.top_values],
                             self.ranks)

    def extend(self, later: "TokenLogprobs") -> None:
        self.chosen += later.chosen
        self.top_ids += later.top_ids
        self.top_values += later.top_values
        self.ranks = None if self.ranks is None or later.ranks is None else self.ranks + later.ranks


@dataclass
class Outcome:
    """What verification of one tree emitted.

    tokens: accepted draft tokens then one correction or bonus token; path: accepted node
    indices; ranks: at each visited internal node, the rank of the child descended into
    (0 = none)."""

    tokens: list[int]
    path: list[int]
    ranks: list[int]
    score_seconds: float = 0.0  # target forward
    verify_seconds: float = 0.0  # the verifier's walk
    wire_bytes: int = 0  # bytes that crossed a process boundary to get it (0 in-process)
    logprobs: TokenLogprobs | None = None  # of `tokens`, when the sequence asked for them
    batch_size: int = 0  # sequences that shared the target's forward (1: alone; 0: not said)

    def then(self, later: "Outcome") -> "Outcome":
        """This outcome followed by a later step's that drafted nothing (a 1-node tree): what
        a drafter that skipped that step must commit — this tree's path, both steps' tokens."""
        if later.path:
            raise ValueError("only an outcome with no accepted draft can follow without a draft in between")
        return Outcome(self.tokens + later.tokens, self.path, self.ranks)


class RequestFieldError(ValueError):
    """Bad input (a ValueError) that names the request's field at fault, `field`: the keyword
    of `GenerationRequest` ("tree", "verifier", "verifier_params"), which the front ends name
    as their clients spell it (OpenAI's `param`: "rayspec.tree"), or, raised by a front end,
    the field of its own request.  Carried rather than read back from the message, which may
    be reworded."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # BaseException's pickles `args` alone: it was unpickled without its field
        return type(self), (str(self), self.field)


class ContextLengthExceeded(ValueError):
    """A request the target's context cannot hold, its prompt alone or with the length asked
    for: bad input (a ValueError), said in OpenAI's words ("This model's maximum context length
    is ..."), which the HTTP front end answers with OpenAI's code `context_length_exceeded`:
    clients that shorten a conversation and try again look for either."""

    @classmethod
    def of_prompt(cls, context: int, prompt: str) -> ContextLengthExceeded:
        """`prompt` (e.g. "the prompt has 600 tokens") leaves no room for a completion."""
        return cls(f"This model's maximum context length is {context} tokens. However, {prompt}, leaving no room "
                   f"for a completion. Please reduce the length of the prompt.")

    @classmethod
    def of_request(cls, context: int, prompt_tokens: int, max_tokens: int) -> ContextLengthExceeded:
        return cls(f"This model's maximum context length is {context} tokens. However, you requested "
                   f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} in the "
                   f"completion). Please reduce the length of the prompt or completion: at most "
                   f"{context - prompt_tokens} new tokens fit.")


class SessionClosedError(RuntimeError):
    """A session was closed (released, or expired) while a call on it waited for the model."""


class DrafterUnavailable(RuntimeError):
    """The drafter could not open a session or draft a step: unreachable, out of time, or its
    session gone (a restarted worker).  The engine decodes the sequence on without drafts —
    target-only steps, whose law is the target's all the same — rather than fail a request
    over its accelerator; other errors (a refused request, a bug) still end it."""


class TargetUnavailable(RuntimeError):
    """The target could not open a session or verify a step for want of its worker (gone, or
    restarted without the session).  The engine opens the sequence again (`SequenceSpec.
    resumed`) once the target answers, within its `target_resume_timeout`."""


class AtCapacity(RuntimeError):
    """A resource the service shares between requests has no room for this one now (its own
    limit, not the request's fault): refused as the service's capacity answer — HTTP 429,
    gRPC RESOURCE_EXHAUSTED — for the client to ask again later."""


class ShuttingDown(RuntimeError):
    """The service is stopping: a generation in flight is ended, and a new one refused, as
    vLLM aborts its requests on shutdown — HTTP 503 (an error event in a stream already
    under way), gRPC UNAVAILABLE — for the client to retry elsewhere or later."""

    def __init__(self, message: str = "the service is shutting down"):
        super().__init__(message)


class ShutdownSignal(threading.Event):
    """The event a service sets as it stops, which also calls the hooks of those that serve
    over it (`on_set`): a front end of its own — the gRPC Generation API beside the HTTP app —
    ends what it runs and refuses what waits at once, not at its next look at the event."""

    def __init__(self):
        super().__init__()
        self._hooks: list = []
        self._hooks_lock = threading.Lock()

    def on_set(self, hook) -> None:
        """Call `hook()` once this is set (now, if it is)."""
        with self._hooks_lock:
            if not self.is_set():
                self._hooks.append(hook)
                return
        hook()

    def set(self) -> None:
        with self._hooks_lock:
            super().set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()


class DrafterBusy(RuntimeError):
    """The drafter has no room for another sequence now (its session limit): the request is
    refused as the service's capacity answer (429), unless a pool has another drafter."""


class DrafterSession(Protocol):
    def draft(self, shape: TreeShape, previous: Outcome | None) -> Draft:
        """Commit the previous step's outcome, then draft a tree of (at most) `shape`;
        `DrafterUnavailable` when the drafter is lost."""

    def close(self) -> None: ...


class TargetSession(Protocol):
    # Of the prompt's tokens after the first (the first has no context to be drawn from), when
    # the sequence asks for them: the prefill computed the rows at open.
    prompt_logprobs: TokenLogprobs | None

    def verify(self, draft: Draft) -> Outcome:
        """Score the tree in one forward pass, verify it, commit what was accepted."""

    def close(self) -> None: ...


# Padding rounds a vocabulary up to a multiple of 64-256 rows, by a multiple or two (Qwen2.5's
# pair: 128 rows apart); sizes further apart are taken for another tokenizer.
MAX_PADDING_ROWS = 1024


def check_vocabularies(drafter_vocab_size: int, target_vocab_size: int, tokenizer=None) -> None:
    """ValueError unless a drafter can draft for a target: the same vocabulary size, or sizes
    that differ in padding rows only — embeddings padded past the tokenizer's ids, which
    neither model's tokenizer ever gives (Qwen2.5-0.5B's 151,936 rows against 7B's 152,064,
    of a 151,665-token tokenizer).  The drafter's laws are then fitted to the target's width
    (`SequenceSpec.vocab_size`).  Another tokenizer, whose ids name other tokens, would have its
    drafts hardly ever accepted: sizes that differ within the target's tokenizer's ids, or by
    more than `MAX_PADDING_ROWS`, are refused (and tokenizers that both sides name are compared
    by `check_tokenizers`, whatever the sizes)."""
    drafter_vocab_size, target_vocab_size = int(drafter_vocab_size), int(target_vocab_size)
    if drafter_vocab_size == target_vocab_size:
        return
    sizes = f"the drafter's vocab_size ({drafter_vocab_size}) differs from the target's ({target_vocab_size})"
    if tokenizer is None:
        raise ValueError(f"{sizes}: give the engine the target's tokenizer, to check that they differ only in "
                         f"padding rows past its ids")
    if len(tokenizer) > min(drafter_vocab_size, target_vocab_size):
        raise ValueError(f"{sizes}, and the tokenizer has {len(tokenizer)} tokens: a drafter must share its "
                         f"target's tokenizer, its embeddings differing at most in padding rows past the "
                         f"tokenizer's ids")
    if abs(drafter_vocab_size - target_vocab_size) > MAX_PADDING_ROWS:
        raise ValueError(f"{sizes} by more than padding rounds a vocabulary up ({MAX_PADDING_ROWS} rows at most): "
                         f"a drafter must share its target's tokenizer")


# A tokenizer's fingerprint digests its id -> token table in blocks of this many ids, so that
# two tokenizers can be compared across processes (`WorkerInfo.tokenizer_fingerprint`) in a few
# kB: 19 kB for Qwen2.5's 151,665 tokens.
FINGERPRINT_BLOCK_IDS = 64
_DIGEST_BYTES = 8
# The share of blocks of token ids two tokenizers may name differently: a fine-tune's few
# special tokens of its own (a chat model's added roles), not another tokenizer.
MAX_OTHER_TOKENS_SHARE = 0.01


def tokenizer_fingerprint(tokenizer) -> bytes | None:
    """A digest of each block of `FINGERPRINT_BLOCK_IDS` ids of the tokenizer's id -> token
    table, its added tokens included, concatenated: equal blocks name the same tokens.  None
    for a tokenizer that tells no such table (no `get_vocab`, or ids that are not integers):
    nothing is compared then."""
    try:
        table = {int(token_id): token for token, token_id in tokenizer.get_vocab().items()}
    except (AttributeError, TypeError, ValueError):
        return None
    try:
        size = len(tokenizer)
    except TypeError:  # a bare `tokenizers.Tokenizer`
        size = 0
    size = max(size, max(table, default=-1) + 1)  # ids past len() (a table with gaps) name tokens too
    tokens = [""] * size
    for token_id, token in table.items():
        if token_id >= 0:
            # Tiktoken-style tables name tokens by their bytes.
            tokens[token_id] = token if isinstance(token, str) else "bytes:" + bytes(token).hex()
    blocks = (tokens[start:start + FINGERPRINT_BLOCK_IDS] for start in range(0, size, FINGERPRINT_BLOCK_IDS))
    return b"".join(hashlib.blake2b(json.dumps(block, ensure_ascii=False).encode("utf-8", "surrogatepass"),
                                    digest_size=_DIGEST_BYTES).digest() for block in blocks)


_SIDES = {  # whose tokenizer, whose it is compared with, what would follow
    "drafter": ("the drafter's tokenizer", "the target's", "so its drafts would hardly ever be accepted: a drafter "
                "must share its target's tokenizer"),
    "engine": ("the tokenizer given the engine", "the target's", "so stop strings, bad words and the text returned "
               "would be another tokenizer's: give the engine (a coordinator's --tokenizer) the target's"),
    # A target that tells no tokenizer: two drafters that disagree cannot both have the target's.
    "pool": ("the drafter's tokenizer", "the pool's first drafter's", "so one of them is not the target's, and its "
             "drafts would hardly ever be accepted: a pool's drafters must share their target's tokenizer"),
}


def check_tokenizers(fingerprint: bytes, target_fingerprint: bytes, side: str = "drafter") -> int:
    """ValueError when a tokenizer is not the target's (`tokenizer_fingerprint`s): more than
    `MAX_OTHER_TOKENS_SHARE` of the ids either names are another token in the other (or in
    neither).  A drafter's (`side` "drafter") would have its drafts hardly ever accepted: the
    output's law stays the target's, but the decode runs slower than the target alone, with no
    error.  The engine's own ("engine") would read and write the target's ids as other text.
    Returns how many ids may name other tokens (whole blocks of `FINGERPRINT_BLOCK_IDS` are
    compared: an upper bound), 0 for the same table."""
    def blocks(fingerprint: bytes) -> list[bytes]:
        return [fingerprint[at:at + _DIGEST_BYTES] for at in range(0, len(fingerprint), _DIGEST_BYTES)]

    ours, targets = blocks(fingerprint), blocks(target_fingerprint)
    compared = max(len(ours), len(targets))  # a block only one side has differs
    differing = sum(ours[at:at + 1] != targets[at:at + 1] for at in range(compared))
    if differing > MAX_OTHER_TOKENS_SHARE * compared:
        whose, whom, consequence = _SIDES[side]
        raise ValueError(f"{whose} is not {whom}: {differing} of {compared} blocks of {FINGERPRINT_BLOCK_IDS} "
                         f"token ids name other tokens (at most {MAX_OTHER_TOKENS_SHARE:.0%} may), {consequence}")
    return differing * FINGERPRINT_BLOCK_IDS


class Drafter(Protocol):
    vocab_size: int
    context_length: int  # the drafter model's own: the engine drafts only while a sequence fits it

    def open(self, spec: SequenceSpec) -> DrafterSession:
        """A session for one sequence; `DrafterUnavailable` when the drafter is lost,
        `DrafterBusy` when it is full."""


class Target(Protocol):
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    verifies_predictions: bool  # whether its sessions verify trees with a predicted chain

    def open(self, spec: SequenceSpec) -> TargetSession: ...
