"""EAGLE-2's dynamic draft tree (Li et al. 2024, "EAGLE-2: Faster Inference of Language
Models with Dynamic Draft Trees", the expansion and reranking phases): the drafter expands candidates level by
level, each scored by its cumulative draft log-probability (the sum along its path), and the
tree verified is the `budget` best candidates.  A child's score is its parent's plus a log
probability <= 0, so the best candidates always form a connected tree.

The selection here is that reranking as a pure function; how candidates are drafted (and
whether the verifier's draft law matches a selection made from the drafted probabilities —
EAGLE-2 treats the kept drafts as deterministic, q = 1) is the engine's business.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayspec.tree.structure import TreeShape


@dataclass(frozen=True)
class DynamicPlan:
    """Draft an EAGLE-2 tree each step: `depth` levels, expanding the `top_k` best frontier
    candidates into their `top_k` most likely children, then keep the `budget` best nodes
    (root included).  Quacks like a `TreeShape` where the engine asks for sizes."""

    budget: int
    depth: int = 6
    top_k: int = 8

    def __post_init__(self):
        if self.budget < 1 or self.depth < 0 or self.top_k < 1:
            raise ValueError(f"a dynamic tree needs budget >= 1, depth >= 0, top_k >= 1; got {self}")

    @property
    def size(self) -> int:
        return self.budget if self.depth else 1

    @property
    def max_depth(self) -> int:
        return self.depth

    @property
    def max_children(self) -> int:
        return self.top_k

    def truncated(self, max_depth: int) -> "DynamicPlan":
        return self if max_depth >= self.depth else DynamicPlan(self.budget, max(max_depth, 0), self.top_k)


@dataclass(frozen=True)
class DynamicTree:
    shape: TreeShape
    candidates: np.ndarray  # [N]: the candidate each node is (-1 for the root)


def candidate_depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every candidate (the root's children have depth 1), refusing cycles."""
    up = np.where(parents >= 0, parents, 0)
    depth = np.ones(parents.size, dtype=np.int64)
    for _ in range(parents.size + 1):
        deeper = np.where(parents >= 0, depth[up] + 1, 1)
        if np.array_equal(deeper, depth):
            return depth
        depth = deeper
    raise ValueError("the candidates' parent links contain a cycle")


def select_dynamic_tree(parents, log_probs, budget: int) -> DynamicTree:
    """The best `budget` - 1 candidates by cumulative log-probability, plus the root, as a
    tree in breadth-first order (`budget` counts the root, like every rayspec budget).

    parents[c]: the candidate whose child c is (-1: a child of the root); log_probs[c]: c's
    cumulative draft log-probability.  A score above the parent's (rounding, or a caller's
    own scores) is clamped to the parent's, so the selection stays connected; equal scores
    go to the shallower candidate, then to the earlier one.  Siblings keep their candidate
    order: drafted in decreasing probability, the kept children are the leading ranks."""
    parents = np.asarray(parents, dtype=np.int64).reshape(-1)
    scores = np.asarray(log_probs, dtype=np.float64).reshape(-1)
    if scores.shape != parents.shape:
        raise ValueError(f"{parents.size} parents for {scores.size} scores")
    if np.isnan(scores).any() or (scores == np.inf).any():
        raise ValueError("scores must be log-probabilities: no NaN, no +inf")
    if ((parents < -1) | (parents >= parents.size) | (parents == np.arange(parents.size))).any():
        raise ValueError("a parent is -1 (the root) or another candidate's index")
    if budget < 1:
        raise ValueError(f"the budget counts the root: it is at least 1, got {budget}")
    depth = candidate_depths(parents)
    clamped = scores.copy()
    for d in range(2, int(depth.max(initial=1)) + 1):
        level = np.flatnonzero(depth == d)
        clamped[level] = np.minimum(scores[level], clamped[parents[level]])
    order = np.lexsort((np.arange(parents.size), depth, -clamped))
    chosen = np.zeros(parents.size, dtype=bool)
    chosen[order[: budget - 1]] = True

    node_of = np.full(parents.size, -1, dtype=np.int64)  # candidate -> node index
    tree_parents, candidates = [-1], [-1]
    for d in range(1, int(depth.max(initial=0)) + 1):
        level = np.flatnonzero(chosen & (depth == d))
        parent_nodes = np.where(parents[level] >= 0, node_of[np.maximum(parents[level], 0)], 0)
        by_parent = np.lexsort((level, parent_nodes))
        level, parent_nodes = level[by_parent], parent_nodes[by_parent]
        node_of[level] = np.arange(len(candidates), len(candidates) + level.size)
        tree_parents.extend(parent_nodes.tolist())
        candidates.extend(level.tolist())
    return DynamicTree(TreeShape(tuple(tree_parents)), np.asarray(candidates, dtype=np.int64))
