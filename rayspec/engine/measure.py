"""Measuring positional acceptance vectors on a model pair (Sequoia §3.1, `tests/test_accept.py`).

A star tree — the root and W children drafted by the verifier's own scheme — is decoded over
held-out prompts; each step tells which child, by draw rank, was the accepted one (or none).
The counts give the vector a[1..W] with its confidence intervals.  With `depth_aware`, a
spine of depth D is drafted instead — W children under the root and under every rank-1 child
— and the counts are kept per depth (a node is observed only when the walk reaches it).
"""

from __future__ import annotations

from rayspec.engine.policy import StaticTrees
from rayspec.tree.acceptance import AcceptanceEstimate, RankCounts, estimate
from rayspec.tree.structure import TreeShape


def star(width: int) -> TreeShape:
    return TreeShape((-1, *([0] * width)))


def spine(width: int, depth: int) -> TreeShape:
    """W children under the root and under each level's first child, `depth` levels."""
    parents, first = [-1], 0
    for _ in range(depth):
        start = len(parents)
        parents += [first] * width
        first = start
    return TreeShape(tuple(parents))


class CountingTrees(StaticTrees):
    """A static tree whose policy hook counts the accepted ranks per depth."""

    def __init__(self, shape: TreeShape, depths: int = 1):
        super().__init__(shape)
        self.counts = RankCounts.zeros(shape.max_children, depths)

    def observe(self, verifier, temperature, shape, outcome):
        visited = (0, *outcome.path)
        for depth, rank in enumerate(outcome.ranks):
            self.counts.add(int(rank), shape.num_children[visited[depth]], depth)


def measure_acceptance(engine, prompts, verifier: str, temperature: float, width: int, max_new_tokens: int = 64,
                       depth_aware: int = 0, seed: int = 0, setting: dict | None = None) -> AcceptanceEstimate:
    """Run `engine` (its drafter and target) over `prompts` (token id lists) and estimate."""
    shape = spine(width, depth_aware) if depth_aware else star(width)
    trees = CountingTrees(shape, max(depth_aware, 1))
    for i, prompt in enumerate(prompts):
        for _ in engine.generate(prompt, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + i,
                                 verifier=verifier, tree=trees):
            pass
    setting = {"verifier": verifier, "temperature": temperature, "width": width, "prompts": len(prompts),
               "max_new_tokens": max_new_tokens, "depth_aware": depth_aware, **(setting or {})}
    return estimate(trees.counts, setting=setting, depth_aware=bool(depth_aware))
