"""From logits to the distributions verifiers see: the ban of stop tokens before min_tokens,
the logit bias, then the repetition, frequency and presence penalties, allowed_token_ids and
bad words, then temperature, min-p, top-k and top-p (vLLM's order; the bans are -inf, so
where they fall among the others changes nothing).

The same function serves the target and the drafter, so both sides see identically
processed laws (a mismatch between the q drafts are drawn from and the q used in the ratios
would break losslessness).  Temperature 0 means greedy: a one-hot law on the first argmax.

Penalties, min_tokens, bad words of several tokens and structured output (a regular
expression the completion must match) make the law at a tree node depend on
the tokens before it — the completion so far *and* the drafted tokens on the node's path — so
such a law comes with its row of a `RowHistory` (`TokenHistory.rows`).  The target's law at
every node is then the law autoregressive sampling with the same parameters would use after
that node's path, which is all the verifiers' exactness needs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

MAX_LOGIT_BIAS = 100.0  # OpenAI's bound: -100 bans a token, +100 all but forces it
MAX_PRESENCE_OR_FREQUENCY_PENALTY = 2.0  # OpenAI's and vLLM's bound


@dataclass(frozen=True)
class SamplingParams:
    """temperature, top_p, top_k: as everywhere.  presence_penalty (OpenAI's, in [-2, 2]):
    subtracted from the logit of every token that occurs in the completion so far.
    frequency_penalty (OpenAI's, in [-2, 2]): subtracted once per occurrence there.
    repetition_penalty (CTRL's penalized sampling, Keskar et al. 2019, as HF and vLLM apply
    it; > 0, 1 = off): a token of the prompt or the completion has its logit divided by it
    when positive, multiplied by it when negative.  logit_bias: {token: bias in [-100, 100]}
    added to the logits (kept as sorted (token, bias) pairs).  min_p (Nguyen et al. 2024,
    "min-p sampling", as vLLM applies it: after temperature, before top-k and top-p; in
    [0, 1], 0 = off): tokens less likely than min_p times the most likely token are dropped.
    min_tokens (vLLM's): while the completion has fewer tokens, the `stop_token_ids` (the
    tokens that would end it: the engine fills in the model's EOS ids and the request's
    stop ids) cannot be drawn.  allowed_token_ids (vLLM's; empty = all): no other token can
    be drawn — the law is the one the other parameters define, restricted to them and
    renormalised.  bad_words_ids (vLLM's bad_words, tokenized): token sequences the
    completion never contains — a word's last token cannot be drawn where the completion
    (the prompt not counted, as in vLLM) ends in the word's other tokens; a one-token word
    is never drawn.  Where these bans and min_tokens' would leave no token at all (allowed
    ones included), the bad words' ban is lifted for that law alone, so every law is
    defined; the drafter and the target apply the same rule, so exactness holds.  regex
    (structured output, vLLM's guided decoding; empty = off): the completion is a match of
    this regular expression followed by a stop token — at each law, only the tokens that keep
    the text a prefix of a match can be drawn (a stop token only where the text is a whole
    match); the runtime turns the expression into one allowed-token mask per law
    (`RowHistory.allowed`, `rayspec.engine.structured`).  Where the other bans leave no token
    the expression allows, they are lifted for that law and the expression alone restricts
    it (as min_tokens cannot hold a completion open that the expression has closed)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_p: float = 0.0
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    allowed_token_ids: tuple[int, ...] = ()
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    regex: str = ""

    def __post_init__(self):
        # Types before ranges: a comparison with a string or None is a TypeError, and a fractional
        # top_k passed the range check only to fail inside torch.topk.
        for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p"):
            object.__setattr__(self, name, real_number(getattr(self, name), name))
        object.__setattr__(self, "top_k", _integer(self.top_k, "top_k"))
        object.__setattr__(self, "min_tokens", _integer(self.min_tokens, "min_tokens"))
        if not 0 <= self.temperature < float("inf"):  # NaN fails too
            raise ValueError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == -1:  # vLLM's spelling of "off", which its clients send
            object.__setattr__(self, "top_k", 0)
        if not 0 <= self.top_k < 2**31:
            raise ValueError(f"top_k must be in [0, 2^31) (0 or -1 disables it), got {self.top_k}")
        bound = MAX_PRESENCE_OR_FREQUENCY_PENALTY
        for name in ("presence_penalty", "frequency_penalty"):
            if not -bound <= getattr(self, name) <= bound:
                raise ValueError(f"{name} must be in [-{bound:g}, {bound:g}], got {getattr(self, name)}")
        if not 0 < self.repetition_penalty < float("inf"):
            raise ValueError("repetition_penalty must be > 0 and finite (1 disables it), "
                             f"got {self.repetition_penalty}")
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] (0 disables it), got {self.min_p}")
        if not 0 <= self.min_tokens < 2**31:
            raise ValueError(f"min_tokens must be in [0, 2^31), got {self.min_tokens}")
        object.__setattr__(self, "stop_token_ids", _token_ids(self.stop_token_ids, "stop_token_ids"))
        object.__setattr__(self, "allowed_token_ids", _token_ids(self.allowed_token_ids, "allowed_token_ids"))
        object.__setattr__(self, "bad_words_ids", _bad_words(self.bad_words_ids))
        if not isinstance(self.regex, str):
            raise ValueError(f"regex must be a string, got {type(self.regex).__name__}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalised(self) -> bool:
        """Whether a presence, frequency or repetition penalty is on."""
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def uses_history(self) -> bool:
        """Whether the law depends on the tokens before it (a penalty, min_tokens, a bad word
        of several tokens, or a regex is on)."""
        return self.penalised or self.bans_stops or self.bad_word_context > 0 or bool(self.regex)

    @property
    def adjusts_logits(self) -> bool:
        """Whether `adjust_logits` changes anything (a bias, a penalty, min_tokens,
        allowed_token_ids, bad words or a regex are on)."""
        return bool(self.logit_bias or self.allowed_token_ids or self.bad_words_ids) or self.uses_history

    @property
    def bad_word_context(self) -> int:
        """How many of the completion's last tokens the bad words' ban reads (the longest
        word's length less one)."""
        return max(map(len, self.bad_words_ids), default=1) - 1

    @property
    def bans_stops(self) -> bool:
        """Whether stop tokens are banned from the first laws (min_tokens)."""
        return self.min_tokens > 0 and bool(self.stop_token_ids)

    def check_vocabulary(self, vocab_size: int) -> None:
        """Refuse a logit bias, a stop token, an allowed token or a bad word's token the model
        does not have, and a min_tokens that would leave no token to draw."""
        for name, tokens in (("logit_bias", [token for token, _ in self.logit_bias]),
                             ("stop_token_ids", self.stop_token_ids), ("allowed_token_ids", self.allowed_token_ids),
                             ("bad_words", [token for word in self.bad_words_ids for token in word])):
            outside = [token for token in tokens if token >= vocab_size]
            if outside:
                raise ValueError(f"{name} names token {outside[0]}, outside the vocabulary of {vocab_size} tokens")
        stops = set(self.stop_token_ids)
        # (counted, not `set(range(vocab_size))`: a vocabulary of 152k tokens, per request)
        if self.bans_stops and (set(self.allowed_token_ids) <= stops if self.allowed_token_ids else
                                len({t for t in stops if 0 <= t < vocab_size}) >= vocab_size):
            raise ValueError("min_tokens would ban every token that allowed_token_ids allows: all are stop tokens "
                             "(EOS or stop_token_ids)" if self.allowed_token_ids else
                             "min_tokens would ban every token of the vocabulary: stop_token_ids holds them all")


def real_number(value, name: str) -> float:
    """`value` as a float: a real number of any kind (numpy's included), not a bool, a string
    (which float() would parse) or None."""
    if type(value) is float:
        return value
    if not isinstance(value, (bool, str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise ValueError(f"{name} must be a number, got {value!r}")


def _integer(value, name: str) -> int:
    """`value` as an int: an integer of any kind (numpy's included), not a bool nor a float."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):  # True is an int to operator.index, but not a count anyone meant
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ValueError(f"{name} must be an integer, got {value!r}")


def _bias_pairs(bias: Mapping[int, float] | Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    pairs = bias.items() if isinstance(bias, Mapping) else bias
    try:
        checked = {}
        for token, value in pairs:
            # int() would read 1.7 or True as token 1: a bias on a token nobody named
            token = int(token) if isinstance(token, str) else _integer(token, "logit_bias: a token id")
            value = real_number(value, f"logit_bias: the bias of token {token}")
            if token < 0 or token in checked:
                raise ValueError(f"logit_bias: token {token} is negative or given twice")
            if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:  # NaN fails too
                raise ValueError(f"logit_bias: the bias of token {token} must be in [-100, 100], got {value}")
            checked[token] = value
    except (TypeError, ValueError) as error:
        raise ValueError(str(error) if str(error).startswith("logit_bias") else
                         f"logit_bias must map token ids to numbers ({error})") from None
    return tuple(sorted(checked.items()))


def _token_ids(tokens: Iterable[int], name: str) -> tuple[int, ...]:
    """Distinct non-negative token ids, sorted (a bool is no id: operator.index reads True as 1)."""
    try:
        ids = sorted({_integer(token, name) for token in tokens})
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of token ids") from None
    if ids and ids[0] < 0:
        raise ValueError(f"{name}: token ids are >= 0, got {ids[0]}")
    return tuple(ids)


def _bad_words(words: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    """Distinct non-empty sequences of non-negative token ids, sorted."""
    try:
        checked = {tuple(_integer(token, "bad_words_ids") for token in word) for word in words}
    except (TypeError, ValueError):
        raise ValueError("bad_words_ids must be a list of token id sequences") from None
    for word in checked:
        if not word:
            raise ValueError("bad_words_ids: a bad word has no tokens")
        if min(word) < 0:
            raise ValueError(f"bad_words_ids: token ids are >= 0, got {min(word)}")
    return tuple(sorted(checked))


class RowHistory(NamedTuple):
    """The tokens before each of R laws, on the only columns penalties touch — the u tokens of
    the prompt, the completion and the rows' paths: their ids [u], completion counts [R, u]
    (float32) and whether each occurs in the prompt or the completion [R, u] (bool).  u is at
    most the sequence's length plus the paths' tokens, so penalising costs O(R u), not O(R V)
    (an [N, V] pass at V = 128k would outweigh a tree's verification).  positions [R]: how
    many tokens the completion has before each law (min_tokens reads it).  tails [R, c]:
    the completion's last c tokens before each law, -1 where it has fewer (bad words read
    them; c = 0 unless asked for).  allowed [R, V] (bool): the tokens a regex allows after
    each row's path (`SamplingParams.regex`; None without one)."""

    columns: torch.Tensor
    counts: torch.Tensor
    seen: torch.Tensor
    positions: torch.Tensor
    tails: torch.Tensor | None = None
    allowed: torch.Tensor | None = None


class TokenHistory:
    """A sequence's tokens as penalties see them: for each distinct token of the prompt and the
    completion, a column, its completion count and whether the prompt has it; extended as
    tokens are committed (in O(tokens), so a long sequence costs no sort per step)."""

    def __init__(self, prompt_ids: Sequence[int], device=None):
        self.device = device
        self.column: dict[int, int] = {}
        self.counts: list[float] = []
        self.completion: list[int] = []
        for token in prompt_ids:
            self._column_of(int(token))
        self.in_prompt = [True] * len(self.counts)

    def _column_of(self, token: int) -> int:
        if token not in self.column:
            self.column[token] = len(self.counts)
            self.counts.append(0.0)
        return self.column[token]

    @property
    def length(self) -> int:
        """Of the completion."""
        return len(self.completion)

    def extend(self, tokens: Sequence[int]) -> None:
        """Count tokens added to the completion."""
        self.completion += [int(token) for token in tokens]
        for token in tokens:
            self.counts[self._column_of(int(token))] += 1.0
        self.in_prompt += [False] * (len(self.counts) - len(self.in_prompt))

    def rows(self, paths: Sequence[Sequence[int]], tail: int = 0) -> RowHistory:
        """The history before each of len(paths) laws, path r being the tokens drafted after
        the completion so far and before law r (a tree node's path, root excluded), with the
        completion's last `tail` tokens before each."""
        extra = {}  # path tokens seen nowhere before, after the sequence's columns
        for path in paths:
            for token in path:
                if token not in self.column and token not in extra:
                    extra[token] = len(self.column) + len(extra)
        columns = torch.tensor([*self.column, *extra], dtype=torch.long, device=self.device)
        counts = torch.tensor(self.counts + [0.0] * len(extra), device=self.device).expand(len(paths), -1).clone()
        rows = [r for r, path in enumerate(paths) for _ in path]
        if rows:
            cells = [self.column[t] if t in self.column else extra[t] for path in paths for t in path]
            index = (torch.tensor(rows, device=self.device), torch.tensor(cells, device=self.device))
            counts.index_put_(index, torch.ones(len(rows), device=self.device), accumulate=True)
        prompt = torch.tensor(self.in_prompt + [False] * len(extra), device=self.device)
        positions = torch.tensor([self.length + len(path) for path in paths], dtype=torch.long, device=self.device)
        tails = None
        if tail:
            padding, recent = [-1] * tail, self.completion[-tail:]
            tails = torch.tensor([(padding + recent + list(path))[-tail:] for path in paths], dtype=torch.long,
                                 device=self.device).view(len(paths), tail)
        return RowHistory(columns, counts, (counts > 0) | prompt, positions, tails)


def adjust_logits(logits: torch.Tensor, params: SamplingParams, history: RowHistory | None = None) -> torch.Tensor:
    """[R, V] float logits after the logit bias, the penalties, the ban of stop tokens before
    min_tokens, allowed_token_ids, the bad words' ban and a regex's mask (a new tensor if any
    applies).  The repetition penalty is CTRL's as HF and vLLM apply it: on the logit itself,
    so a positive logit shrinks and a negative one grows in magnitude."""
    if params.uses_history and (history is None or len(history.counts) != len(logits)):
        raise ValueError("penalties, min_tokens, bad words and a regex need the history before each law: "
                         "one row per row of logits")
    if params.logit_bias:
        tokens, values = zip(*params.logit_bias)
        values = torch.tensor(values, dtype=logits.dtype, device=logits.device)
        logits = logits.index_add(-1, torch.tensor(tokens, device=logits.device), values.expand(*logits.shape[:-1], -1))
    if params.penalised:
        touched = logits[:, history.columns]
        if params.repetition_penalty != 1:
            # In the logits' dtype, and saturating: a penalty of 1e-300 is 0 in float32 and 1e300
            # infinite, and a logit of 30 / 1e-38 overflows, where 0 / 0, 0 * inf and inf - inf
            # would each make the law NaN.  Ordinary penalties and logits are left exactly as is.
            limits = torch.finfo(logits.dtype)
            penalty = min(max(params.repetition_penalty, limits.tiny), limits.max)
            penalised = torch.where(touched > 0, touched / penalty, touched * penalty).clamp(-limits.max, limits.max)
            touched = torch.where(history.seen, penalised, touched)
        if params.frequency_penalty:
            touched = touched - params.frequency_penalty * history.counts
        if params.presence_penalty:
            touched = touched - params.presence_penalty * (history.counts > 0).to(logits.dtype)
        logits = logits.index_copy(-1, history.columns, touched)
    shaped = logits  # before the bans: a regex's mask falls back on it where they leave nothing
    if params.bans_stops:
        stops = torch.tensor(params.stop_token_ids, device=logits.device)
        early = (history.positions < params.min_tokens).unsqueeze(-1)
        logits = logits.index_copy(-1, stops, logits[:, stops].masked_fill(early, float("-inf")))
    if params.allowed_token_ids:
        allowed = torch.tensor(params.allowed_token_ids, device=logits.device)
        logits = torch.full_like(logits, float("-inf")).index_copy_(-1, allowed, logits[:, allowed])
    if params.bad_words_ids:
        logits = ban_bad_words(logits, params.bad_words_ids, history)
    if params.regex:
        logits = mask_to_regex(logits, shaped, history.allowed)
    return logits


def mask_to_regex(banned: torch.Tensor, shaped: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """`banned` [R, V] with -inf on the tokens a regex does not allow after each row's path
    (`allowed` [R, V]); in rows where the other bans leave none of the allowed tokens, the
    expression restricts `shaped` (the logits before those bans) instead (`SamplingParams`)."""
    if allowed is None or allowed.shape != banned.shape:
        raise ValueError("a regex needs the tokens it allows after each law: one [V] row per row of logits")
    masked = banned.masked_fill(~allowed, float("-inf"))
    empty = masked.amax(-1) == float("-inf")
    if bool(empty.any()):
        masked[empty] = shaped[empty].masked_fill(~allowed[empty], float("-inf"))
    return masked


def ban_bad_words(logits: torch.Tensor, words: tuple[tuple[int, ...], ...], history: RowHistory | None) -> torch.Tensor:
    """`logits` [R, V] with -inf on each token that would complete a bad word after its row's
    history (vLLM's bad_words: a word's last token, where the completion ends in the word's
    other tokens), but in rows the bans would leave with no token (see `SamplingParams`).

    All rows against all words at once: the words' prefixes right-aligned in a [W, c] table
    whose unused cells match anything, compared with the rows' tails [R, c].  The bans are
    (row, token) cells written into a copy of the logits, so beyond the copy the cost is one
    max per row (to find a law left empty), however many words there are."""
    rows, vocab = logits.shape
    device = logits.device
    cells = []
    singles = torch.tensor([word[0] for word in words if len(word) == 1], dtype=torch.long, device=device)
    if len(singles):
        cells.append(torch.arange(rows, device=device).unsqueeze(-1) * vocab + singles)
    longer = [word for word in words if len(word) > 1]
    if longer:
        context = history.tails.shape[-1]
        prefixes = torch.tensor([[-1] * (context - len(w) + 1) + list(w[:-1]) for w in longer], device=device)
        unused = prefixes < 0  # token ids are >= 0 (`_bad_words`)
        matched = (unused | (history.tails.unsqueeze(1) == prefixes)).all(-1).nonzero()  # (row, word) pairs
        last = torch.tensor([word[-1] for word in longer], device=device)
        cells.append(matched[:, 0] * vocab + last[matched[:, 1]])
    cells = torch.cat([c.flatten() for c in cells])
    banned = logits.flatten().index_fill(0, cells, float("-inf")).view(rows, vocab)
    empty = banned.amax(-1) == float("-inf")
    if bool(empty.any()):
        banned[empty] = logits[empty]
    return banned


def _limit_of_infinite_logits(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, their row maxima [..., 1]), each row holding a +inf logit (a float16 model
    overflows) replaced by its T -> 0 limit: 0 on the +inf entries, -inf elsewhere.  At any
    T > 0 the law is then uniform over them, the limit of the argmax's ties as T -> 0, and
    greedy decoding keeps the first of them, as argmax did; inf - inf would make the row NaN.

    A row holding NaN, or nothing above -inf, has no law (any law sampled from it would be
    garbage: token 0, or -1 from the coupling verifiers) and is refused: NaN is the model's
    fault (FloatingPointError, a server error), every token banned the request's (ValueError)."""
    top = logits.amax(-1, keepdim=True)  # NaN where the row holds one
    # One [..., 1] test, and one look from the host, per call: an ordinary batch goes on.
    if bool(torch.isfinite(top).all()):
        return logits, top
    for empty, error, what in ((torch.isnan(top), FloatingPointError, "hold NaN (the model's output)"),
                               (top == -math.inf, ValueError, "ban every token")):
        if bool(empty.any()):
            rows = empty.flatten().nonzero().flatten().tolist()
            raise error(f"logits_to_probs: rows {rows[:8]} of the logits {what}, and so have no law to sample from")
    infinite = top == math.inf
    return _rows_at_their_limit(logits, infinite), top.masked_fill(infinite, 0.0)


def _rows_at_their_limit(logits: torch.Tensor, infinite: torch.Tensor) -> torch.Tensor:
    """`logits` with the rows `infinite` marks ([..., 1]) replaced by their T -> 0 limit: 0 on
    their +inf entries, -inf elsewhere."""
    return torch.where(infinite, torch.full_like(logits, -math.inf).masked_fill(logits == math.inf, 0.0), logits)


def logits_to_probs(logits: torch.Tensor, params: SamplingParams, dtype=torch.float32,
                    history: RowHistory | None = None) -> torch.Tensor:
    """[..., V] logits -> [..., V] probabilities after the ban of stop tokens before
    min_tokens, the logit bias, the penalties (given the `history` before each row when one
    of those is on), allowed_token_ids, temperature, min-p, top-k and top-p.  A row with +inf
    logits is uniform over them at any T > 0; one with NaN (FloatingPointError) or only -inf
    (ValueError) is refused."""
    logits, top = _limit_of_infinite_logits(adjust_logits(logits.to(dtype), params, history))
    if params.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    # Shifted first: logits / T overflows float32 for a tiny T (1e-40), and softmax of inf is NaN.
    # T is kept within the dtype's finite normal numbers: a T below float32's subnormals (1e-46)
    # is 0 in float32, and 0 / 0 is NaN; one above its largest (3.5e38) is inf, and a banned
    # token's -inf / inf is NaN.  The law is the limit either way: the argmax (and its ties),
    # or uniform over the tokens not banned.
    limits = torch.finfo(logits.dtype)
    temperature = min(max(params.temperature, limits.tiny), limits.max)
    logits = (logits - top) / temperature
    if params.min_p > 0:
        # The most likely token has the shifted logit 0, so p / p_max is exp(logit): the
        # comparison needs no softmax.
        logits = logits.masked_fill(logits < math.log(params.min_p), float("-inf"))
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        # Keep the smallest prefix reaching top_p: a token stays if the mass before it is
        # still short of top_p.  The most likely token always stays, even for a top_p of
        # 1e-60, which is 0 in float32.
        keep_sorted = mass_before < params.top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def top_k_ids(q: torch.Tensor, k: int) -> torch.Tensor:
    """[B, k] ids of each row's k largest entries of non-negative `q` [B, V], largest first and
    ties in token-id order: what a stable descending sort gives.

    One top-k over integer keys instead of a sort of every row: a non-negative float's bits
    order as the float does, so (bits, 2^31 - 1 - id) compares as (value, then lower id).  A sort of
    [w, 8192] rows took 0.4-6.6 ms on a CPU where this takes 0.05-1.2 (1 to 32 rows), and it
    was a third of a greedy step drafting 128 nodes.  float64 rows, whose bits leave no room
    for an id, are sorted."""
    if q.dtype == torch.float64 or q.shape[-1] >= 2**31:
        return torch.sort(q, dim=-1, descending=True, stable=True).indices[:, :k]
    # q > 0 also maps -0.0 and NaN to +0.0, whose bits are the smallest key
    bits = torch.where(q > 0, q.float(), 0.0).view(torch.int32).to(torch.int64)
    low = 2**31 - 1
    keys = (bits << 31) | (low - torch.arange(q.shape[-1], device=q.device))
    return low - (torch.topk(keys, k, dim=-1).values & low)


def truncated_law(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Each row of `probs` [B, V] kept to its k most likely tokens (ties in token-id order,
    `top_k_ids`) and renormalised; rows of k or fewer tokens keep their law (up to the
    renormalisation's rounding), and k = 0 or k >= V returns `probs` itself.

    A drafter may draft from this law instead of its full one (`draft_top_k`): every verifier
    stays exact, since it verifies against the very law the drafts were drawn from, and its
    rows cross a wire as sparse rows of k entries (`rayspec.rpc.codec.encode_rows`) instead of
    V — 16 kB a row at V = 8192 in float16, 256 kB at 128k.  What it costs is acceptance (the
    mass outside the k tokens is never drafted) and a top-k of every row drafted from."""
    if k < 0:
        raise ValueError(f"k must be 0 (all tokens) or more, got {k}")
    if k == 0 or k >= probs.shape[-1]:
        return probs
    ids = top_k_ids(probs, k)
    kept = torch.zeros_like(probs).scatter_(-1, ids, probs.gather(-1, ids))
    return kept / kept.sum(-1, keepdim=True).clamp_min(torch.finfo(kept.dtype).tiny)


def half_precision(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`probs` rounded to float16 and renormalised: (the law, its row divisors), the law being
    exactly `weights.float() / divisors` for the float16 `weights = (law * divisors).half()`.

    A drafter drafts from this law so that its rows can cross a wire as float16 values and a
    float32 divisor per row — half the bytes — and decode to the very law it drew from, bit
    for bit (float32 division is correctly rounded everywhere), which exact verification
    needs.  Rounding moves each probability of 6e-5 or more (float16's normal numbers) by at
    most 2^-11 of itself, and each smaller one by at most 3e-8 (half the subnormals' step,
    some per cent of a probability near 1e-6); below 3e-8 a probability rounds to 0 and is
    never drafted.  Recovering
    `weights` from the law is exact: law * divisors is within a few float32 ulps of a
    float16 value, far inside half a float16 step."""
    weights = probs.to(torch.float16).float()
    divisors = weights.sum(-1)
    return weights / divisors.unsqueeze(-1), divisors


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, top: int,
                   rows_at_once: int = 1024) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities of `tokens` [n], row r's token under row r of `logits` [n, V], in the
    model's raw law (the log-softmax of its logits: temperature 1, no top-k or top-p, what
    OpenAI's API and vLLM report), each row's `top` most likely tokens, and each token's rank
    in its row (vLLM's: 1 + how many tokens are strictly more likely, so tied tokens share one).

    Returns (chosen [n], top values [n, k], top ids [n, k], ranks [n]) on the CPU, float32 and
    int64, most likely first, with k = min(top, V).  Rows are taken `rows_at_once` at a time: a
    long prompt's log-softmax then needs one block beside its logits, not a second [n, V]
    tensor (2 GB of float32 for 4k tokens at V = 128k).  A row holding +inf (a float16 model
    overflows) is its limit, as `logits_to_probs` samples it: uniform over its +inf entries (its
    log-softmax would be NaN throughout)."""
    k = min(top, logits.shape[-1])
    tokens = tokens.to(logits.device, torch.long).view(-1)
    blocks = []
    for start in range(0, max(len(logits), 1), rows_at_once):  # blocks of rows, not the vocabulary
        block = logits[start : start + rows_at_once].float()
        block = _rows_at_their_limit(block, block.amax(-1, keepdim=True) == math.inf)  # no look from the host
        log_p = torch.log_softmax(block, dim=-1)
        chosen = log_p.gather(-1, tokens[start : start + rows_at_once].view(-1, 1)).squeeze(-1)
        values, ids = torch.topk(log_p, k, dim=-1)
        ranks = (log_p > chosen.unsqueeze(-1)).sum(-1) + 1
        blocks.append((chosen.cpu(), values.cpu(), ids.cpu(), ranks.cpu()))
    chosen, values, ids, ranks = (torch.cat(parts) for parts in zip(*blocks))
    return chosen, values, ids, ranks
