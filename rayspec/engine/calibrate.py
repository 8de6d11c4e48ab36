"""Measure what a step costs on this deployment, through the engine's own interfaces.

Sequoia's planner needs t_target(n), the target's verification of an n-node tree, and the
drafter's time per drafted level as a function of how many nodes that level expands.  Both
are timed through `Target`/`Drafter` sessions, so the figures include whatever the
deployment adds — gRPC and the network for remote workers.

  * target: star trees (a root and n - 1 children) of n = 1, 2, 4, ... nodes, verified with
    `greedy` (its walk is negligible next to the forward);
  * drafter: w parallel chains of depth 1 and of depth 3 — the difference is two levels
    that each expand w nodes.
Each figure is a median over repeats (these machines are noisy).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec
from rayspec.tree.planner import MeasuredTimes
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.processing import SamplingParams

TARGET_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
DRAFT_WIDTHS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Costs:
    target: MeasuredTimes  # seconds to verify an n-node tree
    draft_level: MeasuredTimes  # seconds per drafted level expanding w nodes
    draft_base: float  # seconds of a draft call besides its levels (prefill, transport)

    def to_json(self) -> dict:
        return {
            "target_seconds": dict(zip(self.target.sizes, self.target.seconds)),
            "draft_level_seconds": dict(zip(self.draft_level.sizes, self.draft_level.seconds)),
            "draft_base_seconds": self.draft_base,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Costs":
        return cls(
            MeasuredTimes.from_dict(data["target_seconds"]),
            MeasuredTimes.from_dict(data["draft_level_seconds"]),
            float(data["draft_base_seconds"]),
        )

    def draft_seconds(self, width: int) -> float:
        return self.draft_level(min(max(width, self.draft_level.sizes[0]), self.draft_level.sizes[-1]))


def _star(n: int) -> TreeShape:
    return TreeShape((-1, *([0] * (n - 1))))


def _parallel_chains(width: int, depth: int) -> TreeShape:
    parents = [-1] + [0] * width
    for level in range(1, depth):
        start = 1 + (level - 1) * width
        parents += list(range(start, start + width))
    return TreeShape(tuple(parents))


def _spec(vocab_size: int, length: int = 64) -> SequenceSpec:
    prompt = tuple(1 + (7 * i) % (vocab_size - 1) for i in range(length))
    return SequenceSpec(prompt, SamplingParams(temperature=0.0), seed=0, verifier="greedy")


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


def measure_costs(target, drafter=None, sizes=TARGET_SIZES, widths=DRAFT_WIDTHS, repeats: int = 5) -> Costs:
    generator = torch.Generator().manual_seed(0)
    sizes = [n for n in sizes if n < target.context_length // 4]

    verifying = _Stepper(target, _spec(target.vocab_size))

    def verify(n: int) -> None:
        verifying.room(n)
        tokens = torch.randint(target.vocab_size, (n,), generator=generator)
        tokens[0] = verifying.last
        outcome = verifying.session.verify(Draft(DraftTree(_star(n), tokens), None))
        verifying.last, verifying.length = outcome.tokens[-1], verifying.length + len(outcome.tokens)

    try:
        target_times = MeasuredTimes(tuple(sizes), tuple(_median_seconds(lambda: verify(n), repeats) for n in sizes))
    finally:
        verifying.close()
    if drafter is None:
        return Costs(target_times, MeasuredTimes((1,), (0.0,)), 0.0)

    drafting = _Stepper(drafter, _spec(drafter.vocab_size))  # drafters know the target's context length

    def draft(shape: TreeShape) -> None:
        # Steady state: commit one emitted token (nothing accepted), then draft.
        fresh = drafting.session is None or drafting.length + shape.max_depth + 2 >= drafter.context_length
        drafting.room(shape.max_depth)
        previous = None if fresh else Outcome([int(torch.randint(drafter.vocab_size, (1,), generator=generator))], [], [0])
        if fresh:  # the first draft of a session prefills the prompt: not a step's cost
            drafting.session.draft(TreeShape.chain(1), None)
            previous = Outcome([1], [], [0])
        drafting.session.draft(shape, previous)
        drafting.length += 1

    per_level, bases = [], []
    try:
        for width in widths:
            one = _median_seconds(lambda: draft(_parallel_chains(width, 1)), repeats)
            three = _median_seconds(lambda: draft(_parallel_chains(width, 3)), repeats)
            per_level.append(max((three - one) / 2, 0.0))
            bases.append(max(one - per_level[-1], 0.0))
    finally:
        drafting.close()
    return Costs(target_times, MeasuredTimes(tuple(widths), tuple(per_level)), statistics.median(bases))
