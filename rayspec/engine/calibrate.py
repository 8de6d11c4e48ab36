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
    precision, shipped where the drafter is remote);
  * under load (`CostModel.under_load`): B = `LOAD_SEQUENCES` sessions of each model step at
    once (one thread each, as concurrent requests do), their forwards batched by the model's
    batcher: the round's time beyond one call of all B sessions' rows is the part of a call
    that batching does not share, per other sequence.
Each figure is a median over repeats (these machines are noisy).

A sampling verifier prices what most requests do.  Calibrated with `greedy` instead, whose
walk and drafts are a few operations, the planner priced sampling verifiers' steps up to 27 %
short on the demo pair (bench/results/cost_model_bench_cpu.md); greedy's own steps are
priced a little high now, which costs greedy plans little (they draft the likeliest tokens).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec
from rayspec.tree.planner import MeasuredTimes
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.processing import SamplingParams, half_precision

TARGET_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
DRAFT_WIDTHS = (1, 2, 4, 8, 16, 32)
LOAD_SEQUENCES = 8  # sessions at once for the load terms


@dataclass(frozen=True)
class Costs:
    target: MeasuredTimes  # seconds to verify an n-node tree
    draft_level: MeasuredTimes  # seconds per drafted level expanding w nodes
    draft_base: float  # seconds of a draft call besides its levels (prefill, transport)
    # Seconds each further concurrent sequence adds to a target call and to a drafted level
    # beyond its rows: what batching does not share (0: not measured, load costs rows only).
    target_per_sequence: float = 0.0
    draft_per_sequence: float = 0.0

    def to_json(self) -> dict:
        return {
            "target_seconds": dict(zip(self.target.sizes, self.target.seconds)),
            "draft_level_seconds": dict(zip(self.draft_level.sizes, self.draft_level.seconds)),
            "draft_base_seconds": self.draft_base,
            "target_per_sequence_seconds": self.target_per_sequence,
            "draft_per_sequence_seconds": self.draft_per_sequence,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Costs":
        return cls(
            MeasuredTimes.from_dict(data["target_seconds"]),
            MeasuredTimes.from_dict(data["draft_level_seconds"]),
            float(data["draft_base_seconds"]),
            float(data.get("target_per_sequence_seconds", 0.0)),  # absent from older coordinators' costs
            float(data.get("draft_per_sequence_seconds", 0.0)),
        )

    def draft_seconds(self, width: int) -> float:
        """Seconds of a drafted level expanding `width` nodes (beyond the widest measured,
        `MeasuredTimes.extrapolated`)."""
        return self.draft_level.extrapolated(max(width, self.draft_level.sizes[0]))


def _binary(n: int) -> TreeShape:
    return TreeShape((-1, *((i - 1) // 2 for i in range(1, n))))


def _parallel_chains(width: int, depth: int) -> TreeShape:
    parents = [-1] + [0] * width
    for level in range(1, depth):
        start = 1 + (level - 1) * width
        parents += list(range(start, start + width))
    return TreeShape(tuple(parents))


CALIBRATION_VERIFIER = "rrsw"


def _spec(vocab_size: int, length: int = 64) -> SequenceSpec:
    prompt = tuple(1 + (7 * i) % (vocab_size - 1) for i in range(length))
    return SequenceSpec(prompt, SamplingParams(temperature=1.0), seed=0, verifier=CALIBRATION_VERIFIER)


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
    return statistics.median(times[1:])  # the first call warms up


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
                  load_sequences: int = LOAD_SEQUENCES) -> Costs:
    """The costs of the module docstring; `load_sequences` < 2 leaves the load terms 0."""
    generator = torch.Generator().manual_seed(0)
    sizes = [n for n in sizes if n < target.context_length // 4]
    loaded = load_sequences >= 2

    def uniform_rows(internal: int):
        if not internal:
            return None, None
        return half_precision(torch.full((internal, target.vocab_size), 1.0 / target.vocab_size))

    # Built once, outside the timed calls: a drafter builds a step's rows, not the target.
    trees = {}
    for n in {*sizes, 1}:
        shape = _binary(n)
        trees[n] = (shape, *uniform_rows(len(shape.internal_nodes)))

    def verify(stepper: _Stepper, n: int) -> None:
        stepper.room(n)
        tokens = torch.randint(target.vocab_size, (n,), generator=generator)
        tokens[0] = stepper.last
        shape, q_rows, divisors = trees[n]
        outcome = stepper.session.verify(Draft(DraftTree(shape, tokens), q_rows, q_divisors=divisors))
        stepper.last, stepper.length = outcome.tokens[-1], stepper.length + len(outcome.tokens)

    verifying = [_Stepper(target, _spec(target.vocab_size)) for _ in range(max(load_sequences, 1))]
    try:
        target_times = MeasuredTimes(tuple(sizes), tuple(_median_seconds(lambda: verify(verifying[0], n), repeats)
                                                         for n in sizes))
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
        return Costs(target_times, MeasuredTimes((1,), (0.0,)), 0.0, target_per_sequence)

    # drafters know the target's context length
    drafting = [_Stepper(drafter, _spec(drafter.vocab_size)) for _ in range(max(load_sequences, 1))]

    def draft(stepper: _Stepper, shape: TreeShape) -> None:
        # Steady state: commit one emitted token (nothing accepted), then draft.
        fresh = stepper.session is None or stepper.length + shape.max_depth + 2 >= drafter.context_length
        stepper.room(shape.max_depth)
        previous = None if fresh else Outcome([int(torch.randint(drafter.vocab_size, (1,), generator=generator))], [], [0])
        if fresh:  # the first draft of a session prefills the prompt: not a step's cost
            stepper.session.draft(TreeShape.chain(1), None)
            previous = Outcome([1], [], [0])
        stepper.session.draft(shape, previous)
        stepper.length += 1

    per_level, bases = [], []
    draft_per_sequence = 0.0
    try:
        for width in widths:
            one = _median_seconds(lambda: draft(drafting[0], _parallel_chains(width, 1)), repeats)
            three = _median_seconds(lambda: draft(drafting[0], _parallel_chains(width, 3)), repeats)
            per_level.append(max((three - one) / 2, 0.0))
            bases.append(max(one - per_level[-1], 0.0))
        levels, base = MeasuredTimes(tuple(widths), tuple(per_level)), statistics.median(bases)
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
    return Costs(target_times, levels, base, target_per_sequence, draft_per_sequence)
