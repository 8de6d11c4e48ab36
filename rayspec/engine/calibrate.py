"""Measure what a step costs on this deployment, through the engine's own interfaces.

Sequoia's planner needs t_target(n), the target's verification of an n-node tree, and the
drafter's time per drafted level as a function of how many nodes that level expands.  Both
are timed through `Target`/`Drafter` sessions, so the figures include whatever the
deployment adds — gRPC and the network for remote workers.

  * target: binary trees (node i's parent (i - 1) // 2) of n = 1, 2, 4, ... nodes, random
    tokens under a uniform draft law in every internal node (in half precision, as drafters
    ship their rows, so a remote target is sent a step's bytes), verified with `rrsw` at
    temperature 1 (every row's processing and the rejection walk included).  The walk tries
    at most two children per level it reaches, as a planned tree's walk is bounded by its
    path and a few siblings, not by its size.  Star trees, measured before, made the walk
    try up to n - 1 children in turn, a few sequential operations each: on an H100, where
    each costs a kernel launch or a synchronisation, the 128-node star cost 82 ms against
    8 ms scoring and 6 ms verifying a planned 128-node tree (bench/results/
    cost_model_bench_gpu.md, 2026-11-27), so the planner kept its trees small;
  * drafter: w parallel chains of depth 1 and of depth 3 — the difference is two levels
    that each expand w nodes — drafted for `rrsw` (draws without replacement, q rows in half
    precision, shipped where the drafter is remote); every other verifier's levels likewise at
    `VERIFIER_DRAFT_WIDTHS` (width 1 for chains), from a session opened for it: coupled drafts
    cost more than draws (on this CPU minhash drafted a 128-node tree in 105 ms, where rrsw's
    levels price 17);
  * each verifier's walk: the verify phase alone (the `verify_seconds` the session reports,
    timed where the verifier runs: the target worker, or a coordinator verifying there) on
    target-only steps and on real speculative steps — the drafter's trees, verified by the
    target, from sessions opened for that verifier — of about `WALK_SIZES` nodes
    (`CHAIN_WALK_SIZES` for a verifier that takes one draft per node), shaped as the planner
    would plan them (the engine passes `walk_trees`).  A verifier's target time is the one
    measured above with the calibration trees' walk swapped for its own (`Costs.target_for`):
    walks differ where forwards do not, and grow with the levels they accept and the
    children they try, which random tokens under a uniform law never show.  On one H100 `is`
    verified a planned 128-node tree in 11 ms and rrsw in 4.6, beside an 8 ms forward, and the
    planner had priced both alike.  The walks are timed at T = 1 and again at
    `COOL_TEMPERATURE`, on the trees planned for each, and a request's temperature mixes the two
    (`Costs.target_for`): below T = 1 walks accept more levels;
  * under load (`CostModel.under_load`): B = `LOAD_SEQUENCES` sessions of each model step at
    once (one thread each, as concurrent requests do), their forwards batched by the model's
    batcher: the round's time beyond one call of all B sessions' rows is the part of a call
    that batching does not share, per other sequence.
Each figure is a median over repeats (these machines are noisy).

The target's forwards are timed under a sampling verifier, whose q rows and rows'
processing are what most requests pay.  Calibrated with `greedy` instead, whose walk and
drafts are a few operations, the planner priced sampling verifiers' steps up to 27 % short on
the demo pair (bench/results/cost_model_bench_cpu.md); other verifiers differ from rrsw by
their walks and drafts, timed apart as above.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec
from rayspec.tree.planner import MeasuredTimes
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify import available_verifiers, verifier_class
from rayspec.verify.processing import SamplingParams, half_precision

CALIBRATION_VERIFIER = "rrsw"
CALIBRATION_TEMPERATURE = 1.0
TARGET_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
DRAFT_WIDTHS = (1, 2, 4, 8, 16, 32)
# A few sizes per verifier (each costs forwards as well as walks), small ones among them: a
# 2-node tree's walk tries one child, a 4-node plan's may try three at its root, and on this
# CPU plans are often that small.
WALK_SIZES = (2, 4, 16, 64)
CHAIN_WALK_SIZES = (2, 5, 11)  # chains up to the planner's default depth of 10 drafts
# Walks are timed at the calibration temperature and again at this one: a walk grows with the
# levels it accepts, and below T = 1 more are accepted (on this CPU is-weighted walked a
# 64-node plan in 7 ms at T = 1 and in 15-16 ms at T = 0.6 and 0.3: walk_temperature_probe.md).
COOL_TEMPERATURE = 0.5
VERIFIER_DRAFT_WIDTHS = (1, 4, 16)  # other verifiers' drafted levels
LOAD_SEQUENCES = 8  # sessions at once for the load terms
# The calibration prompt's tokens: a quarter of a context shorter than 4 times this (what the
# sizes timed leave room for: `_prompt_tokens`).
CALIBRATION_PROMPT_TOKENS = 64


def _table(times: MeasuredTimes) -> dict:
    return dict(zip(times.sizes, times.seconds))


@dataclass(frozen=True)
class Costs:
    target: MeasuredTimes  # seconds to verify an n-node tree
    draft_level: MeasuredTimes  # seconds per drafted level expanding w nodes
    draft_base: float  # seconds of a draft call besides its levels (prefill, transport)
    # Seconds each further concurrent sequence adds to a target call and to a drafted level
    # beyond its rows: what batching does not share (0: not measured, load costs rows only).
    target_per_sequence: float = 0.0
    draft_per_sequence: float = 0.0
    # Seconds of each verifier's walk (the verify phase) by tree size, on speculative steps.
    # Empty: every verifier is priced at the calibration trees' walk, which `target` holds.
    walks: dict[str, MeasuredTimes] = field(default_factory=dict)
    # Seconds per drafted level by width for each verifier but the calibration one (whose
    # are `draft_level`): each verifier draws its drafts its own way.  Missing: priced as it.
    verifier_levels: dict[str, MeasuredTimes] = field(default_factory=dict)
    calibration_walk: MeasuredTimes | None = None  # the walk inside `target`, by size
    # The same walks as `walks`, timed at COOL_TEMPERATURE.  Missing: priced at T = 1's.
    cool_walks: dict[str, MeasuredTimes] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "target_seconds": _table(self.target),
            "draft_level_seconds": _table(self.draft_level),
            "draft_base_seconds": self.draft_base,
            "target_per_sequence_seconds": self.target_per_sequence,
            "draft_per_sequence_seconds": self.draft_per_sequence,
            "walk_seconds": {name: _table(walk) for name, walk in self.walks.items()},
            "verifier_draft_level_seconds": {name: _table(levels) for name, levels in self.verifier_levels.items()},
            **({"calibration_walk_seconds": _table(self.calibration_walk)} if self.calibration_walk else {}),
            "cool_walk_seconds": {name: _table(walk) for name, walk in self.cool_walks.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> "Costs":
        return cls(
            MeasuredTimes.from_dict(data["target_seconds"]),
            MeasuredTimes.from_dict(data["draft_level_seconds"]),
            float(data["draft_base_seconds"]),
            float(data.get("target_per_sequence_seconds", 0.0)),  # absent from older coordinators' costs
            float(data.get("draft_per_sequence_seconds", 0.0)),
            # absent from older coordinators' costs, as are the next
            {name: MeasuredTimes.from_dict(walk) for name, walk in data.get("walk_seconds", {}).items()},
            {name: MeasuredTimes.from_dict(lv) for name, lv in data.get("verifier_draft_level_seconds", {}).items()},
            MeasuredTimes.from_dict(data["calibration_walk_seconds"]) if "calibration_walk_seconds" in data else None,
            {name: MeasuredTimes.from_dict(walk) for name, walk in data.get("cool_walk_seconds", {}).items()},
        )

    def target_for(self, verifier: str, temperature: float = CALIBRATION_TEMPERATURE) -> MeasuredTimes:
        """Seconds to verify an n-node tree with `verifier` at `temperature`: the measured
        target time with the calibration trees' walk (which stops near the root) taken out and
        `verifier`'s walk on speculative steps put in, interpolated between the sizes measured
        (past the largest, `MeasuredTimes.extrapolated`).  The walk is the one timed at T = 1
        and the one timed at COOL_TEMPERATURE mixed linearly in the temperature, the nearer
        of the two outside them.  Unchanged when either walk is unmeasured."""
        own, inside = self.walks.get(verifier), self.calibration_walk
        if own is None or inside is None:
            return self.target
        cool = self.cool_walks.get(verifier)
        share = 0.0 if cool is None else min(max((CALIBRATION_TEMPERATURE - temperature)
                                                 / (CALIBRATION_TEMPERATURE - COOL_TEMPERATURE), 0.0), 1.0)

        def walk(n: int) -> float:
            seconds = own.extrapolated(n)
            return seconds if share == 0 else (1 - share) * seconds + share * cool.extrapolated(n)

        return MeasuredTimes(self.target.sizes, tuple(
            max(seconds - inside.extrapolated(n) + walk(n), 0.0)
            for n, seconds in zip(self.target.sizes, self.target.seconds)))

    def levels_for(self, verifier: str) -> MeasuredTimes:
        """Seconds per drafted level by width for `verifier`: its own, else the calibration
        verifier's."""
        return self.verifier_levels.get(verifier, self.draft_level)

    def draft_seconds(self, width: int, verifier: str = CALIBRATION_VERIFIER) -> float:
        """Seconds of a drafted level expanding `width` nodes for `verifier` (beyond the widest
        measured, `MeasuredTimes.extrapolated`)."""
        levels = self.levels_for(verifier)
        return levels.extrapolated(max(width, levels.sizes[0]))


class CostsFile:
    """Step costs kept in a JSON file, for a coordinator started again on the same machine
    to plan the trees it planned before (the engine's `kept_costs`).  Any object with these
    two methods serves as well: `rayspec.cluster.actors` keeps them in the Ray cluster's
    key-value store, found again on whichever node the coordinator restarts."""

    def __init__(self, path):
        self.path = Path(path)

    def load(self) -> Costs | None:
        """The costs kept, None when none were (OSError, ValueError, KeyError or TypeError
        when what is kept cannot be read)."""
        return Costs.from_json(json.loads(self.path.read_text())) if self.path.exists() else None

    def save(self, costs: Costs) -> None:
        """Write `costs` as JSON, whole or not at all (a process killed mid-write leaves no
        half file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(costs.to_json()))
        partial.replace(self.path)

    def __str__(self) -> str:
        return str(self.path)


def _drafts_chains(verifier: str) -> bool:
    """Whether a verifier takes one draft per node: its trees are chains."""
    return verifier_class(verifier).max_drafts == 1


def _walk_sizes(verifier: str) -> tuple[int, ...]:
    return CHAIN_WALK_SIZES if _drafts_chains(verifier) else WALK_SIZES


def _draft_widths(verifier: str, widths) -> tuple[int, ...]:
    """The level widths a verifier's drafts are timed at: those of `VERIFIER_DRAFT_WIDTHS`
    among `widths`, but only 1 for a verifier whose trees are chains."""
    if _drafts_chains(verifier):
        return (1,)
    return tuple(w for w in VERIFIER_DRAFT_WIDTHS if w in widths) or (min(widths),)


def _binary(n: int) -> TreeShape:
    return TreeShape((-1, *((i - 1) // 2 for i in range(1, n))))


def _parallel_chains(width: int, depth: int, max_children: int | None = None) -> TreeShape:
    """`width` chains below a fan-out that reaches `width` nodes: in one level (the root's
    children), or level by level for a verifier that takes at most `max_children` drafts per
    node; then `depth - 1` levels that each expand `width` nodes."""
    parents, level = [-1], [0]
    while len(level) < width or len(parents) == 1:
        grown = []
        for node in level:
            for _ in range(min(max_children or width, width - len(grown))):
                grown.append(len(parents))
                parents.append(node)
        level = grown
    for _ in range(depth - 1):
        start = len(parents)
        parents += level
        level = list(range(start, start + len(level)))
    return TreeShape(tuple(parents))


def _prompt_tokens(context_length: int) -> int:
    """The calibration prompt's length for a context: `CALIBRATION_PROMPT_TOKENS`, or a quarter
    of a smaller context, since the trees timed are kept to a quarter of it (a 64-token prompt
    filled a context of 64, and left no room for a 70-token context's timed trees: sequoia:auto
    failed at start-up with any such model)."""
    return max(min(CALIBRATION_PROMPT_TOKENS, context_length // 4), 1)


def _spec(vocab_size: int, length: int = CALIBRATION_PROMPT_TOKENS, verifier: str = CALIBRATION_VERIFIER,
          verifier_params: dict | None = None, temperature: float = CALIBRATION_TEMPERATURE) -> SequenceSpec:
    """A calibration sequence whose laws are `vocab_size` wide: a drafter padded to another
    size than the target's fits its laws to the target's when both step it."""
    prompt = tuple(1 + (7 * i) % (vocab_size - 1) for i in range(length))
    return SequenceSpec(prompt, SamplingParams(temperature=temperature), seed=0, verifier=verifier,
                        verifier_params=dict(verifier_params or {}), vocab_size=vocab_size)


def _walk_shape(verifier: str, n: int, temperature: float = CALIBRATION_TEMPERATURE) -> TreeShape:
    """The calibration tree of `n` nodes for a verifier, at any temperature: binary, or a chain
    for one that takes a single draft per node."""
    return TreeShape.chain(n - 1) if _drafts_chains(verifier) else _binary(n)


class _Stepper:
    """Sessions driven at steady state, reopened before the context runs out."""

    def __init__(self, handle, spec: SequenceSpec):
        self.handle, self.spec = handle, spec
        self.session, self.length, self.last = None, 0, spec.prompt_ids[-1]

    def room(self, tokens: int) -> None:
        if self.session is None or self.length + tokens + 2 >= self.handle.context_length:
            self.close()
            self.session, self.length, self.last = self.handle.open(self.spec), len(self.spec.prompt_ids), self.spec.prompt_ids[-1]

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return _warm_median(times)


def _concurrent_seconds(calls: list, repeats: int) -> float:
    """Median seconds from releasing every call of `calls` at once (a thread each) to the last
    one's end."""
    times = []
    with ThreadPoolExecutor(len(calls)) as pool:
        for _ in range(repeats + 1):
            start = threading.Barrier(len(calls) + 1)

            def released(call):
                start.wait()
                call()

            running = [pool.submit(released, call) for call in calls]
            start.wait()
            began = time.perf_counter()
            for future in running:
                future.result()
            times.append(time.perf_counter() - began)
    return statistics.median(times[1:])  # the first round warms up


def _per_sequence(round_seconds: float, batched_seconds: float, sequences: int) -> float:
    """What each sequence beyond the first added to a round of `sequences` calls at once,
    beyond one call of all their rows."""
    return max((round_seconds - batched_seconds) / (sequences - 1), 0.0)


def measure_costs(target, drafter=None, sizes=TARGET_SIZES, widths=DRAFT_WIDTHS, repeats: int = 5,
                  load_sequences: int = LOAD_SEQUENCES, verifiers=None,
                  walk_trees: Callable[[str, int, float], TreeShape] | None = None,
                  verifier_params: dict[str, dict] | None = None) -> Costs:
    """The costs of the module docstring; `load_sequences` < 2 leaves the load terms 0.
    `verifiers`: those whose walks and drafts are timed beside the calibration verifier's
    (None: every one); walks need a drafter.  `walk_trees(verifier, n, temperature)`: the tree
    of about n nodes a verifier's walk is timed on at a temperature — the planner's, where the
    caller knows it (a walk's cost grows with its nodes' children: is-weighted walked a 32-node
    binary tree in 0.9 ms and the 32-node Sequoia tree planned for it, 16 children at the root,
    in 13 ms); by default binary trees, chains for a one-draft verifier.  `verifier_params`: a verifier's
    parameters to time it with, by name (is-weighted's LP grows with its `alphabet_size`)."""
    generator = torch.Generator().manual_seed(0)
    sizes = [n for n in sizes if n < target.context_length // 4]
    loaded = load_sequences >= 2
    verifiers = [v for v in (available_verifiers() if verifiers is None else verifiers) if v != CALIBRATION_VERIFIER]

    def uniform_rows(internal: int):
        if not internal:
            return None, None
        return half_precision(torch.full((internal, target.vocab_size), 1.0 / target.vocab_size))

    # Built once, outside the timed calls: a drafter builds a step's rows, not the target.
    trees = {}
    for n in {*sizes, 1}:
        shape = _binary(n)
        trees[n] = (shape, *uniform_rows(len(shape.internal_nodes)))
    walk_seconds: dict[int, list[float]] = {}

    def verify(stepper: _Stepper, n: int) -> None:
        stepper.room(n)
        tokens = torch.randint(target.vocab_size, (n,), generator=generator)
        tokens[0] = stepper.last
        shape, q_rows, divisors = trees[n]
        outcome = stepper.session.verify(Draft(DraftTree(shape, tokens), q_rows, q_divisors=divisors))
        stepper.last, stepper.length = outcome.tokens[-1], stepper.length + len(outcome.tokens)
        walk_seconds.setdefault(n, []).append(outcome.verify_seconds)

    verifying = [_Stepper(target, _spec(target.vocab_size, _prompt_tokens(target.context_length)))
                 for _ in range(max(load_sequences, 1))]
    try:
        target_times = MeasuredTimes(tuple(sizes), tuple(_median_seconds(lambda: verify(verifying[0], n), repeats)
                                                         for n in sizes))
        calibration_walk = MeasuredTimes(tuple(sizes), tuple(_warm_median(walk_seconds[n]) for n in sizes))
        target_per_sequence = 0.0
        if loaded:
            for stepper in verifying:
                stepper.room(1)  # each session's prefill, before the timed rounds
            round_seconds = _concurrent_seconds([lambda s=s: verify(s, 1) for s in verifying], repeats)
            target_per_sequence = _per_sequence(round_seconds, target_times.extrapolated(load_sequences),
                                                load_sequences)
    finally:
        for stepper in verifying:
            stepper.close()
    if drafter is None:
        return Costs(target_times, MeasuredTimes((1,), (0.0,)), 0.0, target_per_sequence,
                     calibration_walk=calibration_walk)

    # Drafted at the target's width, as requests are: a pool's drafters may be padded to sizes
    # of their own, and an older worker among them knows no other.
    drafting = [_Stepper(drafter, _spec(target.vocab_size, _prompt_tokens(drafter.context_length)))
                for _ in range(max(load_sequences, 1))]

    def draft(stepper: _Stepper, shape: TreeShape) -> None:
        # Steady state: commit one emitted token (nothing accepted), then draft.
        fresh = stepper.session is None or stepper.length + shape.max_depth + 2 >= drafter.context_length
        stepper.room(shape.max_depth)
        previous = None if fresh else Outcome([int(torch.randint(target.vocab_size, (1,), generator=generator))], [],
                                              [0])
        if fresh:  # the first draft of a session prefills the prompt: not a step's cost
            stepper.session.draft(TreeShape.chain(1), None)
            previous = Outcome([1], [], [0])
        stepper.session.draft(shape, previous)
        stepper.length += 1

    def drafted_levels(stepper: _Stepper, widths) -> tuple[MeasuredTimes, float]:
        """Seconds per drafted level by width, and the median rest of a call (its base)."""
        per_level, bases = [], []
        most = verifier_class(stepper.spec.verifier).max_drafts
        for width in widths:
            one = _median_seconds(lambda: draft(stepper, _parallel_chains(width, 1, most)), repeats)
            three = _median_seconds(lambda: draft(stepper, _parallel_chains(width, 3, most)), repeats)
            per_level.append(max((three - one) / 2, 0.0))
            bases.append(max(one - per_level[-1], 0.0))
        return MeasuredTimes(tuple(widths), tuple(per_level)), statistics.median(bases)

    draft_per_sequence = 0.0
    try:
        levels, base = drafted_levels(drafting[0], widths)
        if loaded:
            one_level = _parallel_chains(1, 1)
            for stepper in drafting:
                draft(stepper, one_level)  # each session's prefill, before the timed rounds
            round_seconds = _concurrent_seconds([lambda s=s: draft(s, one_level) for s in drafting], repeats)
            draft_per_sequence = _per_sequence(round_seconds, base + levels.extrapolated(load_sequences),
                                               load_sequences)
    finally:
        for stepper in drafting:
            stepper.close()
    verifier_levels, walks, cool_walks = {}, {}, {}
    params = verifier_params or {}
    for verifier in [CALIBRATION_VERIFIER, *verifiers]:
        if verifier != CALIBRATION_VERIFIER:
            # Fewer widths than the calibration verifier's: each verifier's drafts cost a few calls.
            stepper = _Stepper(drafter, _spec(target.vocab_size, _prompt_tokens(drafter.context_length),
                                              verifier=verifier, verifier_params=params.get(verifier)))
            try:
                verifier_levels[verifier], _ = drafted_levels(stepper, _draft_widths(verifier, widths))
            finally:
                stepper.close()
        walks[verifier], cool_walks[verifier] = (
            _walks_of_steps(target, drafter, verifier, max(repeats - 2, 1), walk_trees or _walk_shape,
                            params.get(verifier), temperature)
            for temperature in (CALIBRATION_TEMPERATURE, COOL_TEMPERATURE))
    return Costs(target_times, levels, base, target_per_sequence, draft_per_sequence, walks, verifier_levels,
                 calibration_walk, cool_walks)


def _warm_median(seconds: list[float]) -> float:
    return statistics.median(seconds[1:] or seconds)  # the first call warms up


def _walks_of_steps(target, drafter, verifier: str, repeats: int, walk_trees, params: dict | None,
                    temperature: float = CALIBRATION_TEMPERATURE) -> MeasuredTimes:
    """Median seconds of `verifier`'s walk (the verify phase its target session reports) by tree
    size: on target-only steps (one node: minhash's coupled sample of the root costs 1.5 ms on
    this CPU, rrsw's 0.1), and on speculative steps of the calibration's prompt at
    `temperature` — the drafter's trees `walk_trees(verifier, n, temperature)` for n in
    `WALK_SIZES` (`CHAIN_WALK_SIZES` for a one-draft verifier), verified by the target.  A
    walk's cost grows with the levels it accepts, so its trees must be real drafts: on random
    tokens every walk stops at the root."""
    context = min(target.context_length, drafter.context_length)
    spec = _spec(target.vocab_size, _prompt_tokens(context), verifier=verifier, verifier_params=params,
                 temperature=temperature)
    shapes = {}
    for n in _walk_sizes(verifier):
        shape = walk_trees(verifier, n, temperature)
        if shape.size > 1 and shape.max_depth + 2 < context // 4:
            shapes.setdefault(shape.size, shape)  # a planner's chain stops growing at its depth
    seconds = {1: []}
    root = _Stepper(target, spec)  # target-only steps: no drafts, but some verifiers' root sample costs
    try:
        for _ in range(repeats + 1):
            root.room(1)
            outcome = root.session.verify(Draft(DraftTree(TreeShape.chain(0), torch.tensor([root.last])), None))
            root.last, root.length = outcome.tokens[-1], root.length + len(outcome.tokens)
            seconds[1].append(outcome.verify_seconds)
    finally:
        root.close()
    sessions, length, previous = [], 0, None  # the target's, then the drafter's: each kept as it opens
    try:
        for size, shape in sorted(shapes.items()):
            for _ in range(repeats + 1):
                if len(sessions) < 2 or length + shape.max_depth + 2 >= context:
                    while sessions:
                        sessions.pop().close()
                    # A drafter that fails to open (lost, or full) must not leave the target's
                    # session open: a worker's would hold its place until the idle expiry.
                    sessions.append(target.open(spec))
                    sessions.append(drafter.open(spec))
                    length, previous = len(spec.prompt_ids), None
                outcome = sessions[0].verify(sessions[1].draft(shape, previous))
                seconds.setdefault(size, []).append(outcome.verify_seconds)
                length, previous = length + len(outcome.tokens), outcome
    finally:
        for session in sessions:
            session.close()
    return MeasuredTimes(tuple(seconds), tuple(_warm_median(times) for times in seconds.values()))
