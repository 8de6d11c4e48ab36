"""Which tree to draft at each step.

    chain:4, kary:2x3, file:T.json   a static tree
    dynamic:32                       an EAGLE-2 tree chosen by the drafter each step
    sequoia:64, sequoia:64x10        Sequoia's optimal tree for the budget (and depth)
    sequoia:auto                     the budget and depth minimising seconds per token on this
                                     deployment (Sequoia's hardware-aware planner)

Sequoia trees are verifier-aware: the dynamic program runs on the acceptance vector measured
for the request's verifier near its temperature (`AcceptanceLibrary`), with the verifier's
limit on children per node.  They adapt while serving: the engine reports each step's
accepted ranks, a running estimate of the vector builds up (`RunningAcceptance`), and every
`replan_every` steps the tree is re-planned if the new vector predicts a gain above
`threshold`; `history` records when and by how much (the latest `HISTORY_KEPT` re-plans).

A check runs the dynamic program (sequoia:auto's, over 128 nodes and 10 levels, took 12 ms
on the demo pair's CPU: 4 % of decoding at a check per 32 steps; over 1024 nodes, 0.3 s),
for an estimate whose counts halve only every 2000 steps.  So each check that keeps the tree
doubles the steps to the next one, up to `max_replan_every` (8 x `replan_every` by default),
and a change brings the checks back to every `replan_every` steps.  A check runs on a thread
of its own (`background_checks`): the step that brings it does not wait for it, and steps
go on drafting the current tree until it lands.  That pays where the steps' time is in
kernels (a sequoia:1024 check cost 19-ms target forwards 21 ms beside them, not its 305 ms);
where the steps hold Python's lock, as the demo pair's small CPU steps do, the check and the
steps take turns and the check costs them what it would in the step
(bench/results/replan_bench.md).

A plan of one node (target-only decoding: drafting was predicted not to pay) drafts nothing
to learn from, so every `explore_every`-th step then drafts a small probe tree
(`explore_budget` nodes) whose accepted ranks feed the estimate and can bring drafting back;
each re-planning check that confirms the one-node plan halves the probing rate (down to one
step in 16 x explore_every), so that a plan that is right costs little to keep checking.
Its checks, which only probes bring, keep to every `replan_every` probes.

sequoia:auto trees are also load-aware.  With B sequences decoding at once, their forwards
batched, a tree is priced at what a round of B steps costs (`CostModel.under_load`, from the
per-sequence costs `rayspec.engine.calibrate` measures), so that trees shrink under load.
Whether drafting pays at all under load is then measured rather than modelled (the model
misses host work that grows with load, such as each sequence's verification of its draft
laws): a `TreeTrial` serves the priced tree and target-only decoding in turn, keeps the one
that gave more tokens per second, and re-measures the other now and then.  A level's first
trial starts from what the nearest level chose.  B is
the larger of the sequences the engine decodes now and the recent sequences per target
forward (which counts other coordinators' too), rounded to a power of two.  Requests that
give a seed keep the tree planned for one sequence: their tokens must not depend on what
else is served.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rayspec.engine.interfaces import RequestFieldError
from rayspec.tree.acceptance import AcceptanceEstimate, RunningAcceptance
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.planner import (
    Candidate, CostModel, Plan, candidates_from_solution, payload_bytes, plan_tree, price, replan_decision,
)
from rayspec.tree.sequoia import acceptance_rows, expected_tokens, solve, solve_cells
from rayspec.tree.structure import TreeShape
from rayspec.verify import verifier_class

log = logging.getLogger("rayspec.trees")

# Used when no vector was measured for a verifier: a cautious prior (most mass on rank 1),
# close to what small code drafters reach; `rayspec tree measure` replaces it.
DEFAULT_VECTOR = (0.55, 0.12, 0.05, 0.03, 0.02, 0.01, 0.01, 0.01)
DEFAULT_SHAPE = (1, len(DEFAULT_VECTOR))  # (depth rows, ranks)
DEFAULT_DEPTH = 10
AUTO_MAX_BUDGET = 128
MAX_LOAD = 64  # sequences a load-aware plan is made for, at most
TRIAL_WINDOW = 128  # steps per turn of a `TreeTrial`, at least


@dataclass(frozen=True)
class SequoiaSpec:
    budget: int | None  # None: auto
    depth: int = DEFAULT_DEPTH

    def __str__(self) -> str:
        return "sequoia:auto" if self.budget is None else f"sequoia:{self.budget}x{self.depth}"


# A request's Sequoia tree is planned while the request waits (and re-planned as it adapts):
# its dynamic program fills `solve_cells` cells, budget^2 per rank of each (depth row, levels)
# state, at 2-5 ns a cell on a 2-core VM.  The cap is sequoia:256x32's on the demo's vectors
# (16 ranks, one row: 0.12-0.17 s), counted on the vectors the service plans the request's
# verifier from, which the request does not choose: a vector of 32 ranks x 10 depth rows fills
# 17 times the cells for sequoia:256x32 (1.1 s), and admits smaller trees.  Bigger Sequoia trees
# belong in the service's config.
MAX_REQUEST_PLAN_CELLS = solve_cells(256, 32, 1, 16)


def parse_sequoia(text: str) -> SequoiaSpec | None:
    """The Sequoia spec `text` names, or None when it names another kind of tree (ValueError
    for a malformed "sequoia:" spec)."""
    text = text.strip()
    if text == "sequoia:auto":
        return SequoiaSpec(None)
    if match := re.fullmatch(r"sequoia:(\d+)(?:x(\d+))?", text):
        from rayspec.engine.trees import MAX_TREE_NODES

        budget, depth = int(match[1]), DEFAULT_DEPTH if match[2] is None else int(match[2])
        if not 1 <= budget <= MAX_TREE_NODES or depth > MAX_TREE_NODES:
            raise ValueError(f"tree spec {text!r}: a Sequoia tree has 1 to {MAX_TREE_NODES} nodes "
                             f"(the root counts) and at most {MAX_TREE_NODES} levels")
        return SequoiaSpec(budget, depth)
    if text.startswith("sequoia:"):
        raise ValueError(f"bad tree spec {text!r}; a Sequoia tree is sequoia:auto, sequoia:B or sequoia:BxD (B nodes, "
                         f"D levels at most)")
    return None


class PlanTooBig(RequestFieldError):
    """A request's Sequoia tree whose planning would hold it up too long (`check_tree_spec`)."""

    def __init__(self, message: str, field: str = "tree"):
        super().__init__(message, field)


def plan_cells(spec: SequoiaSpec, rows: int = 1, ranks: int = 1) -> int:
    """The most cells the dynamic program that plans `spec` fills (`rayspec.tree.sequoia.solve`)
    on a vector of `rows` depth rows and `ranks` ranks; sequoia:auto's solves its largest
    candidate budget."""
    return solve_cells(AUTO_MAX_BUDGET if spec.budget is None else spec.budget, spec.depth, rows, ranks)


def check_tree_spec(text: str, vector_shape: tuple[int, int] = (1, 1)) -> None:
    """Raise ValueError, with a message, unless a request may name the tree `text`: a tree
    spec within the size cap, not a file on the server, whose planning, if it is a Sequoia
    tree, is cheap enough to run while the request waits on a vector of `vector_shape`
    (depth rows, ranks: `AcceptanceLibrary.planning_shape`'s; the default, the smallest
    vector, refuses only what no vector would admit)."""
    if text.strip().startswith("file:"):
        raise ValueError(f"tree spec {text.strip()!r}: file: trees name a file on the server; the service's "
                         "config may use them, requests may not")
    sequoia = parse_sequoia(text)
    if sequoia is None:
        from rayspec.engine.trees import parse_tree_spec

        parse_tree_spec(text)
    elif (cells := plan_cells(sequoia, *vector_shape)) > MAX_REQUEST_PLAN_CELLS:
        rows, ranks = vector_shape
        raise PlanTooBig(
            f"tree spec {text.strip()!r} is too big to plan per request: its dynamic program fills {cells} cells "
            f"(budget^2 x ranks x depth rows and levels) on the acceptance vector of {ranks} rank(s) x {rows} "
            f"depth row(s) it is planned from here, and at most {MAX_REQUEST_PLAN_CELLS} are allowed (sequoia:256x32 "
            "or sequoia:512x8 on a vector of 16 ranks and one row); put bigger Sequoia trees in the service's "
            "config and leave the request's tree out"
        )


def vector_file_name(verifier: str, temperature: float) -> str:
    return f"{verifier}_t{temperature:.2f}.json"


class AcceptanceLibrary:
    """Measured acceptance vectors, one file per (verifier, temperature) in a directory."""

    def __init__(self, directory: str | Path | None = None):
        self.vectors: dict[str, list[tuple[float, np.ndarray]]] = {}
        # (depth rows, ranks) of each verifier's largest vectors, taken as they are checked here: a
        # request's tree is counted on them (`planning_shape`), and the vectors are not changed
        # after (adapted trees keep their running estimates, `SequoiaTrees`)
        self._shapes: dict[str, tuple[int, int]] = {}
        if directory is None:
            return
        if not Path(directory).is_dir():  # a misspelt path would only show as worse trees
            log.warning("acceptance vectors: %s is not a directory; trees are planned from the default prior",
                        directory)
            return
        for path in sorted(Path(directory).glob("*.json")):
            try:
                estimate = AcceptanceEstimate.from_json(json.loads(path.read_text()))
                rows, ranks = acceptance_rows(estimate.acceptance).shape
                if not ranks:
                    # The DP plans target-only decoding from it, but adapting a tree needs a rank to
                    # count, and every request planned from it failed (reshaping a vector of no ranks).
                    raise ValueError(f"the vector has no ranks (shape {np.shape(estimate.acceptance)})")
            except (ValueError, KeyError, TypeError, RecursionError) as error:  # (Recursion: JSON nested too deep)
                raise ValueError(f"acceptance vector {path}: {error}") from None
            setting = estimate.setting
            if "verifier" in setting and "temperature" in setting:
                self.vectors.setdefault(setting["verifier"], []).append((float(setting["temperature"]), estimate.acceptance))
                largest = self._shapes.get(setting["verifier"], (0, 0))
                self._shapes[setting["verifier"]] = max(largest[0], rows), max(largest[1], ranks)

    def planning_shape(self, verifier: str) -> tuple[int, int]:
        """(depth rows, ranks) of the largest vector `verifier`'s trees are planned from, at any
        temperature, its ranks cut to the verifier's drafts per node: the running estimates
        that re-plan them keep their vector's shape."""
        rows, ranks = (self._shapes.get(verifier) if isinstance(verifier, str) else None) or DEFAULT_SHAPE
        try:
            max_children = verifier_class(verifier).max_drafts
        except ValueError:  # an unknown verifier is refused by its own check, with its own message
            max_children = None
        return rows, ranks if max_children is None else min(ranks, max_children)

    def lookup(self, verifier: str, temperature: float) -> tuple[np.ndarray, str]:
        """The vector measured for `verifier` nearest `temperature`, and where it came from."""
        measured = self.vectors.get(verifier)
        if not measured:
            return np.asarray(DEFAULT_VECTOR), "default prior"
        found_temperature, vector = min(measured, key=lambda tv: abs(tv[0] - temperature))
        return vector, f"measured ({verifier}, T = {found_temperature:g})"


# Trees are planned (and adapted, and shown in /metrics) per verifier and temperature to a tenth,
# those above this one together: OpenAI's largest, past which distributions are near flat alike.
# A plan per value that clients send would grow without bound.
MAX_PLANNED_TEMPERATURE = 2.0


def step_cost_model(costs, verifier: str, vocab_size: int, rtt: float = 0.0, draft_rtt: float = 0.0,
                    bandwidth: float = float("inf"), sequences: int = 1, draft_top_k: int = 0,
                    temperature: float = 1.0) -> CostModel:
    """The planner's cost of a step from measured costs (`rayspec.engine.calibrate.Costs`),
    plus optional network terms, with `sequences` decoding at once; the verifier and the
    temperature decide its walk's time, the verifier whether the q rows travel, and a
    drafter's `draft_top_k` how large they are."""
    ships_q = verifier_class(verifier).needs_draft_probs
    return CostModel(
        target_seconds=costs.target_for(verifier, temperature),
        draft_seconds=lambda width: costs.draft_seconds(width, verifier),
        overhead=costs.draft_base,
        rtt=rtt,
        draft_rtt=draft_rtt,
        bandwidth=bandwidth,
        bytes_per_step=lambda shape: payload_bytes(shape, vocab_size, ships_q, draft_top_k),
    ).under_load(sequences, costs.target_per_sequence, costs.draft_per_sequence)


def planned_tree(library: AcceptanceLibrary, verifier: str, temperature: float, budget: int,
                 depth: int = DEFAULT_DEPTH) -> TreeShape:
    """Sequoia's tree of `budget` nodes for a verifier at a temperature, from the library's
    vector: the tree a plan of that size drafts (what the calibration times walks on)."""
    vector, _ = library.lookup(verifier, temperature)
    return solve(vector, budget, depth, verifier_class(verifier).max_drafts).tree()


def load_level(sequences: float) -> int:
    """The power of two nearest `sequences` (in ratio), within 1..MAX_LOAD: plans are made
    per level, so that a load that wavers between neighbours does not re-plan each step."""
    if not sequences > 1:
        return 1
    return int(min(2 ** round(float(np.log2(sequences))), MAX_LOAD))


class LoadGauge:
    """A count of sequences (in flight, or per target forward) smoothed over about `span`
    steps of every sequence together, so that a request ending just before the next begins
    does not move the load level."""

    def __init__(self, span: int = 16):
        self.weight = 1.0 / span
        self.mean = 1.0

    def observe(self, sequences: float) -> None:
        if sequences > 0:  # 0: the target did not say
            self.mean += self.weight * (sequences - self.mean)


@dataclass(frozen=True)
class PlanReport:
    """A Sequoia policy's tree for one (verifier, temperature) and what adapting it did, for `/metrics`."""
    spec: str  # the policy's tree spec: "sequoia:auto", "sequoia:16x10"
    nodes: int  # the tree a sequence decodes with now (its root included)
    depth: int
    replans: int  # changes of tree while serving
    checks: int  # re-planning checks run (each runs the dynamic program)
    check_seconds: float  # their wall time: on threads of their own by default, not time the steps waited


@dataclass(frozen=True)
class TrialReport:
    """What a `TreeTrial` measured and chose, for `/metrics`."""
    sequences: int
    drafting_nodes: int  # the drafting tree's nodes (its root included)
    rates: tuple  # tokens per second measured for (drafting, target-only); None: no settled turn yet
    turns: tuple  # settled turns each has been measured over
    choice: str | None  # "drafting" or "target_only"; None until both have been measured


class TreeTrial:
    """Two trees for one load of `sequences` at once, served in turn and kept by the tokens
    per second they gave.

    By the count of steps handed out: the first `window` steps draft `trees[first]`, the next
    `window` the other; then, cycle after cycle, `exploit` steps draft the tree with the
    higher measured rate and `window` steps the other, so that a change of conditions is
    noticed; each cycle that confirms the same tree doubles the next one's `exploit` steps
    (up to 8 times), so that a clear choice costs little to keep checking.  `warm`: the trial
    starts from a choice made elsewhere (a neighbouring load level's), `trees[first]`, and
    goes straight to its first cycle.

    The choice compares point estimates and does not wait for a significant difference: a
    switch between two trees of equal speed costs nothing, while serving the slower of two
    that differ costs their difference.  A rule that kept the incumbent unless Welch's t-test
    over samples of each tree found the other faster was tried (commit bf88833): on a fake
    clock with a sample's rate off by 22 %, as the demo pair's is under load, it gave the
    faster of two trees 10 % apart 53–65 % of the steps, against this rule's 67–81 %
    (`bench/trial_sim.py`).

    A tree's rate is measured over the wall clock, as throughput: the tokens of its steps
    that ended after its turn settled, over the time from then to the last of them.  A turn
    settles once `sequences` of its steps have ended — each sequence's steps follow one
    another, so by then the other tree's steps have drained and no longer share its forwards.
    Each turn's tokens and seconds add to the tree's earlier ones halved, so that the rate
    follows its recent turns.  `interrupt()` (the load left this level) drops the turn under
    way: the time until the load comes back is not the tree's."""

    def __init__(self, trees: tuple, sequences: int, window: int = 128, exploit: int = 896, first: int = 0,
                 warm: bool = False, clock=time.monotonic):
        if window < 1 or exploit < 0 or sequences < 1 or first not in (0, 1):
            raise ValueError(f"need window >= 1, exploit >= 0, sequences >= 1 and first 0 or 1, "
                             f"got {window}, {exploit}, {sequences} and {first}")
        self.trees, self.sequences, self.window, self.exploit = tuple(trees), sequences, window, exploit
        self.clock = clock
        self.tokens, self.seconds, self.turns = [0.0, 0.0], [0.0, 0.0], [0, 0]
        self.handed = 0
        self.first = self.best = first
        self.decided = warm  # a choice stands: made here once both trees were measured, or elsewhere
        self.serving: int | None = None  # the tree of the turn under way
        self._opening = 0 if warm else 2 * window  # the first turns, one of each tree
        self._cycle_start, self._cycle_exploit = self._opening, exploit
        self._ended = 0  # steps of the turn's tree ended since it began
        self._settled_at: float | None = None
        self._last_end = 0.0
        self._turn_tokens = 0

    def rate(self, arm: int) -> float | None:
        """Tokens per second measured for `trees[arm]` (None: no settled turn yet)."""
        return self.tokens[arm] / self.seconds[arm] if self.seconds[arm] > 0 else None

    @property
    def choice(self) -> str | None:
        """"drafting" (`trees[0]`) or "target_only"; None until the first choice."""
        return ("drafting", "target_only")[self.best] if self.decided else None

    def report(self) -> TrialReport:
        return TrialReport(self.sequences, self.trees[0].size, (self.rate(0), self.rate(1)), tuple(self.turns),
                           self.choice)

    def next(self):
        """The tree of the next step handed out."""
        n, self.handed = self.handed, self.handed + 1
        if n < self._opening:
            arm = self.first if n < self.window else 1 - self.first
        else:
            if n == self._cycle_start + self._cycle_exploit + self.window:  # a cycle ends
                self._cycle_start = n
            if n == self._cycle_start:
                self._close_turn()  # the turn under way is measured before the trees are compared
                rates = [self.rate(0), self.rate(1)]
                if None not in rates:
                    best = int(rates[1] > rates[0])
                    confirmed = best == self.best and self.decided
                    self._cycle_exploit = min(2 * self._cycle_exploit, 8 * self.exploit) if confirmed else self.exploit
                    self.best, self.decided = best, True
            arm = self.best if n - self._cycle_start < self._cycle_exploit else 1 - self.best
        if arm != self.serving:
            self._close_turn()
            self.serving = arm
        return self.trees[arm]

    def _close_turn(self) -> None:
        """Add the turn under way to its tree's figures; the next turn settles anew."""
        if self.serving is not None and self._settled_at is not None and self._last_end > self._settled_at:
            self.tokens[self.serving] = self.tokens[self.serving] / 2 + self._turn_tokens
            self.seconds[self.serving] = self.seconds[self.serving] / 2 + (self._last_end - self._settled_at)
            self.turns[self.serving] += 1
        self.interrupt()

    def interrupt(self) -> None:
        """The load left this level: drop the turn under way."""
        self._ended, self._settled_at, self._turn_tokens = 0, None, 0

    def record(self, tree, tokens: int) -> None:
        """A step of `tree` that emitted `tokens` ended now."""
        if self.serving is None or tree != self.trees[self.serving]:
            return
        self._ended += 1
        if self._settled_at is not None:
            self._turn_tokens += tokens
            self._last_end = self.clock()
        elif self._ended >= self.sequences:
            self._settled_at = self.clock()


class TreePolicy:
    def shape_for(self, verifier: str, temperature: float) -> TreeShape | DynamicPlan:
        """The planned tree."""
        raise NotImplementedError

    def next_shape(self, verifier: str, temperature: float, sequences: int = 1) -> TreeShape | DynamicPlan:
        """The tree to draft at the next step, with `sequences` decoding at once on this
        engine: the planned one unless the policy explores or plans for load."""
        return self.shape_for(verifier, temperature)

    def first_shape(self, verifier: str, temperature: float) -> TreeShape | DynamicPlan:
        """The tree of a replayable request: one that does not depend on what was served."""
        return self.next_shape(verifier, temperature)

    def observe(self, verifier: str, temperature: float, shape, outcome) -> None:
        """A step drafted `shape` and got `outcome`."""

    def served(self, verifier: str, temperature: float, planned, outcome) -> None:
        """A step of the tree `planned`, as the policy handed it out, ended with `outcome`: a
        drafter may have drafted it narrower (fewer children where top-p, top-k or min-p leave
        q fewer tokens), and the tokens left shallower (`observe` gets what it drafted)."""

    def trials(self) -> list[tuple[str, float, TrialReport]]:
        """What the policy's load trials measured and chose (none: it does not plan for load)."""
        return []

    def plans(self) -> list[tuple[str, float, PlanReport]]:
        """The trees the policy plans per (verifier, temperature) (none: it plans none)."""
        return []


class StaticTrees(TreePolicy):
    def __init__(self, shape: TreeShape | DynamicPlan):
        self.shape = shape

    def shape_for(self, verifier, temperature):
        return self.shape


@dataclass
class Replanned:
    step: int
    verifier: str
    temperature: float
    before: tuple[int, int]  # (nodes, depth)
    after: tuple[int, int]
    gain: float  # predicted relative gain (seconds per token with costs, else tokens per step)


class SequoiaTrees(TreePolicy):
    """Sequoia's optimal trees per (verifier, temperature), optionally hardware-aware, adaptive
    and (sequoia:auto) load-aware."""

    HISTORY_KEPT = 1024  # the latest re-plans `history` keeps: a service runs for months

    def __init__(self, spec: SequoiaSpec, library: AcceptanceLibrary, costs=None, vocab_size: int = 0,
                 adaptive: bool = True, replan_every: int = 32, threshold: float = 0.05, min_samples: float = 200.0,
                 explore_every: int = 4, explore_budget: int = 8, load_aware: bool = True,
                 max_replan_every: int | None = None, background_checks: bool = True):
        """background_checks: run each re-planning check on a thread of its own, so that the
        step that brings it is not held up (False: in that step, as the tests that count
        steps need)."""
        if spec.budget is None and costs is None:
            raise ValueError("sequoia:auto needs measured costs")
        if explore_every < 1 or explore_budget < 2:
            raise ValueError(f"explore_every must be >= 1 and explore_budget >= 2, got {explore_every}, {explore_budget}")
        self.spec, self.library, self.costs, self.vocab_size = spec, library, costs, vocab_size
        max_replan_every = 8 * replan_every if max_replan_every is None else max_replan_every
        if replan_every < 1 or max_replan_every < replan_every:
            raise ValueError(f"need 1 <= replan_every <= max_replan_every, got {replan_every} and {max_replan_every}")
        self.adaptive, self.replan_every, self.threshold, self.min_samples = adaptive, replan_every, threshold, min_samples
        self.max_replan_every, self.background_checks = max_replan_every, background_checks
        self.explore_every, self.explore_budget = explore_every, explore_budget
        self.load_aware = load_aware and spec.budget is None  # only sequoia:auto prices its trees
        self.in_flight = LoadGauge()  # generations decoding on the engine, at each step
        self.batches = LoadGauge()  # sequences per target forward, as the outcomes report them
        self._plans: dict[tuple[str, float], TreeShape] = {}  # for one sequence
        self._vectors: dict[tuple[str, float], np.ndarray] = {}  # what each key's plan was made from
        self._candidates: dict[tuple[str, float], list[Candidate]] = {}  # its DP trees, priced per load
        self._load_plans: dict[tuple[tuple[str, float], int], TreeShape] = {}  # (key, load level) -> tree
        self._trials: dict[tuple[tuple[str, float], int], TreeTrial] = {}  # ... -> it against target-only
        self._levels: dict[tuple[str, float], int] = {}  # the load each key's last step was planned for
        self._first_plans: dict[tuple[str, float], TreeShape] = {}  # before any re-planning
        self._running: dict[tuple[str, float], RunningAcceptance] = {}
        self._idle_steps: dict[tuple[str, float], int] = {}  # steps decoded on a one-node plan
        self._probe_interval: dict[tuple[str, float], int] = {}
        self._replan_interval: dict[tuple[str, float], int] = {}  # steps between re-planning checks
        self._replan_at: dict[tuple[str, float], int] = {}  # the running estimate's step of the next check
        self._replanning: set[tuple[str, float]] = set()  # keys whose re-planning is under way
        self._checks: dict[tuple[str, float], int] = {}  # re-planning checks run
        self._check_seconds: dict[tuple[str, float], float] = {}
        self.probes = 0
        self._lock = threading.Lock()
        self._checks_done = threading.Condition(self._lock)
        self.history: deque[Replanned] = deque(maxlen=self.HISTORY_KEPT)
        self._replans: dict[tuple[str, float], int] = {}  # trees changed, all told (history keeps the latest)
        self.steps = 0

    @staticmethod
    def _key(verifier: str, temperature: float) -> tuple[str, float]:
        # Rounded as the float32 it crosses a wire as: 0.65 is 0.6499999762 in a gRPC message,
        # and a request must plan the tree it plans in-process and over HTTP, where it is a double.
        # + 0.0: a -0.0 (JSON can spell it) is the key 0.0, as reported, not kept as the first spelling.
        return verifier, round(min(float(np.float32(temperature)), MAX_PLANNED_TEMPERATURE), 1) + 0.0

    def cost_model(self, verifier: str, sequences: int = 1, temperature: float = 1.0) -> CostModel:
        return step_cost_model(self.costs() if callable(self.costs) else self.costs, verifier, self.vocab_size,
                               sequences=sequences, temperature=temperature)

    def _budgets(self) -> list[int]:
        """The tree sizes sequoia:auto prices: those whose target time was measured, up to a cap."""
        costs = self.costs() if callable(self.costs) else self.costs
        return [n for n in costs.target.sizes if n <= AUTO_MAX_BUDGET]

    def plan(self, verifier: str, vector, temperature: float = 1.0) -> Plan | TreeShape:
        max_children = verifier_class(verifier).max_drafts
        if self.spec.budget is None:
            return plan_tree(vector, self.cost_model(verifier, temperature=temperature), self._budgets(),
                             self.spec.depth, max_children)
        return solve(vector, self.spec.budget, self.spec.depth, max_children).tree()

    def shape_for(self, verifier, temperature):
        key = self._key(verifier, temperature)
        with self._lock:
            if key not in self._plans:
                vector, source = self.library.lookup(verifier, key[1])
                planned = self.plan(verifier, vector, temperature=key[1])
                self._plans[key] = self._first_plans[key] = planned.shape if isinstance(planned, Plan) else planned
                self._vectors[key] = np.asarray(vector)
                log.info("tree for %s at T=%.1f: %d nodes, depth %d, from the %s vector",
                         verifier, key[1], self._plans[key].size, self._plans[key].max_depth, source)
                if self.adaptive:
                    # A depth-aware vector (`rayspec tree measure --depth-aware`) is [depths, ranks].
                    depths, ranks = self._vectors[key].reshape(-1, self._vectors[key].shape[-1]).shape
                    self._running[key] = RunningAcceptance(ranks, depths, min_samples=self.min_samples, prior=vector,
                                                           prior_weight=self.min_samples)
            return self._plans[key]

    def first_shape(self, verifier, temperature):
        """The tree planned from the measured vector (and costs) before anything was served:
        requests that give a seed draft it, adaptation serves the others."""
        self.shape_for(verifier, temperature)
        with self._lock:
            return self._first_plans[self._key(verifier, temperature)]

    def load_level(self, sequences: float | None = None) -> int:
        """The load trees are planned for: the larger of `sequences` (decoding on this engine;
        None: its recent mean) and the recent sequences per target forward, as a
        `load_level`; 1 unless load-aware."""
        if not self.load_aware:
            return 1
        return load_level(max(self.in_flight.mean if sequences is None else sequences, self.batches.mean))

    def shape_under_load(self, verifier: str, temperature: float, level: int) -> TreeShape:
        """The DP tree (of the current vector) fastest per token with `level` sequences at once."""
        if level <= 1:
            return self.shape_for(verifier, temperature)
        self.shape_for(verifier, temperature)
        key = self._key(verifier, temperature)
        with self._lock:
            shape = self._load_plans.get((key, level))
            if shape is None:
                candidates = self._candidates.get(key)
                if candidates is None:
                    budgets = self._budgets()
                    solution = solve(self._vectors[key], max(budgets), self.spec.depth,
                                     verifier_class(verifier).max_drafts)
                    candidates = self._candidates[key] = candidates_from_solution(solution, budgets)
                shape = self._load_plans[key, level] = price(candidates, self.cost_model(verifier, level, key[1]))[0].shape
                log.info("tree for %s at T=%.1f with %d sequences at once: %d nodes, depth %d",
                         verifier, key[1], level, shape.size, shape.max_depth)
            return shape

    def trial(self, verifier: str, temperature: float, level: int) -> TreeTrial | None:
        """At `level` sequences, the priced tree (or, priced at one node, the tree planned for one
        sequence) against target-only decoding; None when neither drafts."""
        drafting = self.shape_under_load(verifier, temperature, level)
        if drafting.size <= 1:
            drafting = self.shape_for(verifier, temperature)
        if drafting.size <= 1:
            return None
        key = (self._key(verifier, temperature), level)
        with self._lock:
            trial = self._trials.get(key)
            if trial is None or trial.trees[0] != drafting:
                window = max(TRIAL_WINDOW, 8 * level)  # a turn is 8 steps of every sequence or more
                first = trial.best if trial is not None and trial.decided else self._warm_start(key[0], level)
                trial = self._trials[key] = TreeTrial((drafting, TreeShape.chain(0)), level, window, 7 * window,
                                                      first=first or 0, warm=first is not None)
            return trial

    def _warm_start(self, key, level: int) -> int | None:
        """What a new trial at `level` starts from: the choice of the nearest level that has
        chosen (the lower of two as near: loads ramp up more often than down), so that a load
        ramping through the levels does not measure both trees afresh at each; None where no
        level has chosen."""
        decided = sorted((abs(np.log2(other / level)), other, trial.best)
                         for (k, other), trial in self._trials.items() if k == key and trial.decided)
        return decided[0][2] if decided else None

    def trials(self) -> list[tuple[str, float, TrialReport]]:
        """(verifier, temperature, report) of every load level's trial, by verifier and level."""
        with self._lock:
            return [(k[0], k[1], trial.report()) for (k, level), trial in sorted(self._trials.items())]

    def plans(self) -> list[tuple[str, float, PlanReport]]:
        """(verifier, temperature, report) of every tree planned so far, by verifier and temperature."""
        with self._lock:
            return [(key[0], key[1], PlanReport(str(self.spec), shape.size, shape.max_depth,
                                                self._replans.get(key, 0),
                                                self._checks.get(key, 0), self._check_seconds.get(key, 0.0)))
                    for key, shape in sorted(self._plans.items())]

    def next_shape(self, verifier, temperature, sequences=1):
        self.in_flight.observe(sequences)
        level = self.load_level()
        key = self._key(verifier, temperature)
        with self._lock:
            left = self._levels.get(key, 1)
            self._levels[key] = level
            if left != level and (key, left) in self._trials:
                self._trials[key, left].interrupt()
        if level > 1:
            trial = self.trial(verifier, temperature, level)
            if trial is None:
                return TreeShape.chain(0)
            with self._lock:
                return trial.next()
        planned = self.shape_for(verifier, temperature)
        if not self.adaptive or planned.size > 1:
            return planned
        with self._lock:
            self._idle_steps[key] = self._idle_steps.get(key, 0) + 1
            if self._idle_steps[key] % self._probe_interval.get(key, self.explore_every):
                return planned
            self.probes += 1
            running = self._running[key]
            vector = running.vector()
            vector = running.prior if vector is None else vector
        return solve(vector, self.explore_budget, self.spec.depth, verifier_class(verifier).max_drafts).tree()

    def served(self, verifier, temperature, planned, outcome):
        if not self.load_aware:
            return
        self.batches.observe(outcome.batch_size)
        level = self.load_level()
        if level > 1:
            with self._lock:
                trial = self._trials.get((self._key(verifier, temperature), level))
                if trial is not None:  # its turns are of the trees it handed out, as drafted or not
                    trial.record(planned, len(outcome.tokens))

    def observe(self, verifier, temperature, shape, outcome):
        if not self.adaptive or isinstance(shape, DynamicPlan) or shape.size <= 1:
            return
        key = self._key(verifier, temperature)
        with self._lock:
            running = self._running.get(key)
            if running is None:
                return
            running.observe_walk(shape, outcome.path, outcome.ranks)
            self.steps += 1
            if running.steps < self._replan_at.get(key, self.replan_every) or key in self._replanning:
                return
            vector = running.vector()
            if vector is None:
                self._replan_at[key] = running.steps + self.replan_every
                return
            current, steps, at = self._plans[key], self.steps, running.steps
            self._replanning.add(key)
        if self.background_checks:
            threading.Thread(target=self._check, args=(key, verifier, current, vector, steps, at, True),
                             name="rayspec-replan-check", daemon=True).start()
        else:
            self._check(key, verifier, current, vector, steps, at, False)

    def _check(self, key, verifier: str, current: TreeShape, vector, steps: int, at: int, background: bool) -> None:
        """One re-planning check of `key`'s tree `current` against `vector` (the running
        estimate at its step `at`), unlocked: the sequences sharing the policy go on drafting
        the current tree meanwhile.  The next check is scheduled from `at`, so that it comes
        at the same steps whether the check ran in the decode loop or beside it."""
        started = time.perf_counter()
        try:
            better, gain = self._replan(verifier, current, vector, temperature=key[1])
        except BaseException as error:
            handled = background and isinstance(error, Exception)
            if handled:  # before the check ends: `wait_for_checks` returns after its report
                log.warning("re-planning check of the %s tree at T=%.1f failed; the tree stays, the next check "
                            "comes in %d steps", verifier, key[1], self.replan_every, exc_info=True)
            with self._lock:
                self._replan_at[key] = at + self.replan_every  # not again at the next step
                self._end_check(key)
            if not handled:
                raise
            return
        with self._lock:
            self._end_check(key)
            self._checks[key] = self._checks.get(key, 0) + 1
            self._check_seconds[key] = self._check_seconds.get(key, 0.0) + time.perf_counter() - started
            changed = gain > self.threshold and better != current
            # A one-node plan's checks come from its probes, whose rate backs off instead.
            holds = not changed and current.size > 1
            interval = min(2 * self._replan_interval.get(key, self.replan_every), self.max_replan_every) if holds \
                else self.replan_every
            self._replan_interval[key] = interval
            self._replan_at[key] = at + interval
            if changed:
                self._replans[key] = self._replans.get(key, 0) + 1
                self.history.append(Replanned(steps, verifier, key[1], (current.size, current.max_depth),
                                              (better.size, better.max_depth), gain))
                self._plans[key], self._vectors[key] = better, np.asarray(vector)
                self._candidates.pop(key, None)
                for planned in [k for k in self._load_plans if k[0] == key]:
                    del self._load_plans[planned]  # its trials follow: they check their tree
            elif current.size <= 1:
                interval = self._probe_interval.get(key, self.explore_every)
                self._probe_interval[key] = min(2 * interval, 16 * self.explore_every)

    def _end_check(self, key) -> None:
        """(Under the lock.)  `key`'s check is over: the next may start, and `wait_for_checks` return."""
        self._replanning.discard(key)
        self._checks_done.notify_all()

    def wait_for_checks(self, timeout: float | None = None) -> bool:
        """Wait until no re-planning check is under way; whether none is (False: `timeout` passed)."""
        with self._lock:
            return self._checks_done.wait_for(lambda: not self._replanning, timeout)

    def _replan(self, verifier: str, current: TreeShape, vector,
                temperature: float = 1.0) -> tuple[TreeShape, float]:
        """The tree `vector` calls for at `temperature`, and its predicted relative gain over `current`."""
        if self.spec.budget is None:
            decision = replan_decision(current, vector, self.cost_model(verifier, temperature=temperature),
                                       self._budgets(), self.spec.depth, self.threshold,
                                       verifier_class(verifier).max_drafts)
            return decision.best.shape, decision.gain
        better = self.plan(verifier, vector, temperature=temperature)
        return better, 1 - expected_tokens(current, vector) / max(expected_tokens(better, vector), 1e-12)
