"""Hardware- and network-aware tree size (Sequoia, Chen et al. 2024, §3.2 "hardware-aware
tree optimizer"): among candidate trees, the one minimising the expected seconds per token

    seconds/token = (t_draft(tree) + t_target(n) + network(tree) + overhead) / E[tokens/step]

where n is the tree's node count (root included: the target scores the root too) and
  * t_draft(tree) = sum over drafted levels of t_level(nodes expanded for that level):
    Sequoia's D * t_draft when t_level is a constant;
  * network(tree) = rtt + [draft_rtt + bytes(tree) / bandwidth if the tree drafts]: `rtt` is
    the round trip every step pays (a remote target, target-only decoding included; large
    trees amortise it), `draft_rtt` and the bytes the extra traffic of drafting (a drafter
    on another machine, draft laws shipped to the verifier).
The baseline is target-only decoding: t_target(1) + rtt + overhead per token.  Measuring
the timings is the caller's job.

Under load (`CostModel.under_load`): with B sequences decoding at once and their forwards
batched (`rayspec.models.batching`), a step's forwards carry every sequence's tree, so a
sequence's step costs what a round of B steps costs:

    t_target(B n) + (B - 1) h_target,   per drafted level  t_level(B w) + (B - 1) h_level

where h is the part of a sequence's step that batching does not share (its own host work:
sampling, verification, the call itself), measured once by running B sessions at once.  On
a machine whose forward grows with its rows this shrinks the best tree as B grows — down to
target-only decoding, as serving systems switch speculation off under load (vLLM's
`speculative_disable_by_batch_size`), here by price rather than by a threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rayspec.tree.sequoia import SequoiaSolution, expected_tokens, solve
from rayspec.tree.structure import TreeShape


@dataclass(frozen=True)
class MeasuredTimes:
    """Seconds measured at some sizes, linearly interpolated in between; outside the
    measured range it refuses rather than guess."""

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        order = np.argsort(self.sizes)
        sizes = tuple(int(self.sizes[i]) for i in order)
        seconds = tuple(float(self.seconds[i]) for i in order)
        if not sizes or len(sizes) != len(seconds) or len(set(sizes)) != len(sizes):
            raise ValueError("need one time per distinct measured size")
        if min(seconds) < 0 or not np.isfinite(seconds).all():
            raise ValueError("times must be finite and non-negative")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "seconds", seconds)

    @classmethod
    def from_dict(cls, table: dict) -> "MeasuredTimes":
        return cls(tuple(int(k) for k in table), tuple(float(v) for v in table.values()))

    def __call__(self, size: float) -> float:
        if not self.sizes[0] <= size <= self.sizes[-1]:
            raise ValueError(f"size {size} is outside the measured range {self.sizes[0]}..{self.sizes[-1]}")
        return float(np.interp(size, self.sizes, self.seconds))

    def extrapolated(self, size: float) -> float:
        """Beyond the largest measured size, the line through the two largest (never falling):
        a forward past the measured sizes costs at least its largest's per extra row.  Below
        the smallest, the smallest's time."""
        if size <= self.sizes[-1] or len(self.sizes) == 1:
            return float(np.interp(size, self.sizes, self.seconds))
        slope = max((self.seconds[-1] - self.seconds[-2]) / (self.sizes[-1] - self.sizes[-2]), 0.0)
        return self.seconds[-1] + slope * (size - self.sizes[-1])


def _at(times: Callable[[int], float], size: float) -> float:
    return times.extrapolated(size) if isinstance(times, MeasuredTimes) else float(times(size))


@dataclass(frozen=True)
class CostModel:
    """Seconds of one speculative step (see the module docstring).  target_seconds(n): the
    target's forward and verification of an n-node tree; draft_seconds: per drafted level, a
    constant or a function of the number of nodes that level expands; bandwidth in bytes/s
    with bytes_per_step(tree): the drafting traffic of a step; overhead: per step."""

    target_seconds: Callable[[int], float]
    draft_seconds: float | Callable[[int], float] = 0.0
    rtt: float = 0.0
    draft_rtt: float = 0.0
    bandwidth: float = float("inf")
    bytes_per_step: Callable[[TreeShape], float] | None = None
    overhead: float = 0.0

    def __post_init__(self):
        if not self.bandwidth > 0 or min(self.rtt, self.draft_rtt, self.overhead) < 0:
            raise ValueError("need bandwidth > 0 and non-negative rtt, draft_rtt and overhead")

    def draft(self, shape: TreeShape) -> float:
        # the nodes of depth d with children are what the drafter expands for level d + 1
        expanded = np.bincount(np.array([shape.depth[i] for i in shape.internal_nodes], dtype=np.int64),
                               minlength=shape.max_depth)
        if callable(self.draft_seconds):
            return float(sum(self.draft_seconds(int(w)) for w in expanded))
        return float(self.draft_seconds) * shape.max_depth

    def network(self, shape: TreeShape) -> float:
        if shape.size == 1:
            return self.rtt
        payload = 0.0 if self.bytes_per_step is None else float(self.bytes_per_step(shape))
        return self.rtt + self.draft_rtt + payload / self.bandwidth

    def target(self, size: int) -> float:
        """Seconds of the target's step on a `size`-node tree, measured times extrapolated past
        their largest size (`MeasuredTimes.extrapolated`): the trees priced are not all the
        planner's (a prediction's chain grafted beside a 128-node tree has more nodes than any
        measured), and a refusal there failed the request mid-stream."""
        return _at(self.target_seconds, size)

    def step(self, shape: TreeShape) -> float:
        return self.draft(shape) + self.network(shape) + self.target(shape.size) + self.overhead

    @property
    def baseline(self) -> float:
        """Seconds per token of target-only decoding."""
        return self.step(TreeShape.chain(0))

    def under_load(self, sequences: float, target_per_sequence: float = 0.0,
                   draft_per_sequence: float = 0.0) -> "CostModel":
        """One sequence's step while `sequences` decode at once, their forwards batched (see
        the module docstring): each forward carries every sequence's rows, plus the part of
        each other sequence's call that batching does not share (`target_per_sequence`, and
        `draft_per_sequence` per drafted level); the link carries every sequence's bytes.
        Measured times are extrapolated past their largest size (`MeasuredTimes.extrapolated`)."""
        if sequences < 1 or min(target_per_sequence, draft_per_sequence) < 0:
            raise ValueError(f"need sequences >= 1 and non-negative per-sequence costs, got {sequences}, "
                             f"{target_per_sequence}, {draft_per_sequence}")
        if sequences == 1:
            return self
        others = sequences - 1
        target, draft = self.target_seconds, self.draft_seconds
        if callable(draft):
            def draft_seconds(width):
                return _at(draft, sequences * width) + others * draft_per_sequence
        else:  # a constant per level: its rows are not known, only the unshared part grows
            draft_seconds = float(draft) + others * draft_per_sequence
        payload = self.bytes_per_step
        return replace(
            self,
            target_seconds=lambda n: _at(target, sequences * n) + others * target_per_sequence,
            draft_seconds=draft_seconds,
            bytes_per_step=None if payload is None else (lambda shape: sequences * payload(shape)),
        )


def q_row_bytes(vocab_size: int, draft_top_k: int = 0) -> float:
    """Bytes of one internal node's draft law on the wire, as `rayspec.rpc.codec.encode_rows`
    writes rows taken in half precision (`rayspec.verify.processing.half_precision`): float16
    values and a float32 divisor per row; a law kept to its k likeliest tokens (`draft_top_k`,
    k at most a quarter of V: the codec's sparse form) crosses as k int32 columns and k values
    with an int64 offset instead of V values."""
    if draft_top_k < 0:
        raise ValueError(f"draft_top_k must be 0 (whole rows) or more, got {draft_top_k}")
    if 0 < draft_top_k <= vocab_size // 4:
        return float(draft_top_k * (4 + 2) + 8 + 4)
    return float(vocab_size * 2 + 4)


def payload_bytes(shape: TreeShape, vocab_size: int, ships_q_rows: bool, draft_top_k: int = 0,
                  id_bytes: int = 8) -> float:
    """A step's drafter<->target bytes: the tree's token ids, the draft law of every internal
    node for the verifiers that read q (`q_row_bytes`), and the emitted tokens back."""
    rows = len(shape.internal_nodes) * q_row_bytes(vocab_size, draft_top_k) if ships_q_rows else 0
    return float(shape.size * id_bytes + rows + (shape.max_depth + 1) * id_bytes)


@dataclass(frozen=True)
class Candidate:
    """A tree to price: what it was planned for (budget, depth) and its expected tokens."""

    budget: int
    max_depth: int
    shape: TreeShape
    tokens_per_step: float


@dataclass(frozen=True)
class Plan:
    candidate: Candidate
    step_seconds: float
    seconds_per_token: float
    speedup: float  # over target-only decoding

    @property
    def budget(self) -> int:
        return self.candidate.budget

    @property
    def max_depth(self) -> int:
        return self.candidate.max_depth

    @property
    def shape(self) -> TreeShape:
        return self.candidate.shape

    @property
    def tokens_per_step(self) -> float:
        return self.candidate.tokens_per_step


def candidates_from_solution(solution: SequoiaSolution, budgets: Iterable[int] | None = None,
                             depths: Iterable[int] | None = None) -> list[Candidate]:
    """The DP's trees over a grid (default: every budget and depth it solved)."""
    budgets = range(1, solution.budget + 1) if budgets is None else budgets
    depths = range(solution.max_depth + 1) if depths is None else depths
    return [
        Candidate(int(n), int(d), solution.tree(n, d), solution.value(n, d))
        for n in budgets
        for d in depths
    ]


def price(candidates: Iterable[Candidate], cost: CostModel) -> list[Plan]:
    """Every candidate priced, fastest first (ties: fewer nodes, then shallower)."""
    plans = []
    baseline = cost.baseline  # a step of its own: once, not per candidate
    for candidate in candidates:
        if candidate.tokens_per_step <= 0:
            raise ValueError(f"a tree yields at least 1 token per step, got {candidate.tokens_per_step}")
        step = cost.step(candidate.shape)
        per_token = step / candidate.tokens_per_step
        plans.append(Plan(candidate, step, per_token, baseline / per_token if per_token > 0 else float("inf")))
    if not plans:
        raise ValueError("no candidate trees to plan from")
    return sorted(plans, key=lambda p: (p.seconds_per_token, p.shape.size, p.shape.max_depth))


def plan(candidates: Iterable[Candidate], cost: CostModel) -> Plan:
    """The candidate with the fewest expected seconds per token."""
    return price(candidates, cost)[0]


def plan_tree(acceptance, cost: CostModel, budgets: Sequence[int], max_depth: int,
              max_children: int | None = None) -> Plan:
    """Sequoia's hardware-aware choice: the DP's trees at the given budgets (e.g. the sizes
    whose target time was measured) and every depth up to `max_depth`."""
    solution = solve(acceptance, max(budgets), max_depth, max_children)
    return plan(candidates_from_solution(solution, budgets), cost)


@dataclass(frozen=True)
class Replan:
    current: Plan  # the tree in use, priced under the new vector
    best: Plan
    gain: float  # relative drop in seconds per token: 1 - best / current
    replan: bool


def should_replan(current_seconds_per_token: float, best_seconds_per_token: float, threshold: float) -> bool:
    """Re-plan iff the best tree is faster by more than `threshold` (relative)."""
    return 1.0 - best_seconds_per_token / current_seconds_per_token > threshold


def replan_decision(current: TreeShape, acceptance, cost: CostModel, budgets: Sequence[int], max_depth: int,
                    threshold: float = 0.05, max_children: int | None = None) -> Replan:
    """Price the tree in use and the best planned tree under a newly estimated vector."""
    tokens = expected_tokens(current, acceptance)
    priced = price([Candidate(current.size, current.max_depth, current, tokens)], cost)[0]
    best = plan_tree(acceptance, cost, budgets, max_depth, max_children)
    gain = 1.0 - best.seconds_per_token / priced.seconds_per_token
    return Replan(priced, best, gain, should_replan(priced.seconds_per_token, best.seconds_per_token, threshold))
