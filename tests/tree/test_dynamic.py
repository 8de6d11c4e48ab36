"""EAGLE-2 reranking: the best candidates by cumulative log-probability, as a connected tree."""

from __future__ import annotations

import numpy as np
import pytest

from rayspec.tree.dynamic import select_dynamic_tree


def eagle_expansion(rng, depth: int = 4, top_k: int = 4):
    """EAGLE-2's expansion: each level, the top_k frontier nodes by cumulative score each get
    top_k children (a random draft law's largest probabilities, in decreasing order)."""
    parents, scores = [], []
    frontier = [(-1, 0.0)]
    for _ in range(depth):
        level = []
        for parent, score in frontier:
            law = np.sort(rng.dirichlet(np.full(50, 0.3)))[::-1][:top_k]
            for q in law:
                level.append((len(parents), score + np.log(q)))
                parents.append(parent)
                scores.append(score + np.log(q))
        frontier = sorted(level, key=lambda item: -item[1])[:top_k]
    return np.array(parents), np.array(scores)


def check_tree(result, parents, scores):
    shape, kept = result.shape, result.candidates
    assert kept[0] == -1 and len(set(kept[1:].tolist())) == shape.size - 1
    for node in range(1, shape.size):
        parent = shape.parents[node]
        assert parents[kept[node]] == kept[parent]  # the tree's edges are the candidates' edges
        if parent:
            assert scores[kept[node]] <= scores[kept[parent]] + 1e-12
    for kids in shape.children:  # siblings keep candidate (draw) order
        assert list(kept[list(kids)]) == sorted(kept[list(kids)])


@pytest.mark.parametrize("budget", [1, 2, 8, 16, 32, 60])
def test_selects_the_top_candidates_as_a_tree(budget):
    rng = np.random.default_rng(budget)
    parents, scores = eagle_expansion(rng)
    result = select_dynamic_tree(parents, scores, budget)
    assert result.shape.size == min(budget, parents.size + 1)
    check_tree(result, parents, scores)
    best = np.sort(np.argsort(-scores, kind="stable")[: budget - 1])
    assert sorted(result.candidates[1:].tolist()) == best.tolist()


def test_ties_go_to_the_parent_and_raised_scores_are_clamped():
    # candidate 1 has probability 1 under 0 (same score); 2 claims more than its parent 0
    parents = np.array([-1, 0, 0, -1])
    scores = np.array([-1.0, -1.0, -0.5, -0.7])
    result = select_dynamic_tree(parents, scores, 3)
    assert result.candidates.tolist() == [-1, 0, 3]  # 3 (-0.7) before 0's children, clamped to -1
    result = select_dynamic_tree(parents, scores, 4)
    assert result.shape.parents == (-1, 0, 0, 1) and result.candidates.tolist() == [-1, 0, 3, 1]
    check_tree(select_dynamic_tree(parents, scores, 5), parents, np.minimum(scores, [-1, -1, -1, -0.7]))


def test_bad_candidates_are_refused():
    with pytest.raises(ValueError):
        select_dynamic_tree([-1, 2, 1], [-1.0, -2.0, -3.0], 3)  # cycle 1 <-> 2
    with pytest.raises(ValueError):
        select_dynamic_tree([-1, 0], [-1.0, np.nan], 3)
    with pytest.raises(ValueError):
        select_dynamic_tree([-1, 5], [-1.0, -2.0], 3)
    with pytest.raises(ValueError):
        select_dynamic_tree([-1], [-1.0], 0)
    assert select_dynamic_tree([], [], 5).shape.size == 1
