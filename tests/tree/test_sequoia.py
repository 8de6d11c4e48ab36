"""Sequoia's DP: brute force over all trees, Monte Carlo on the acceptance model it assumes,
monotonicity, edge cases, hand-computed trees, the tree file."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest

from rayspec.tree.sequoia import (
    expected_tokens,
    greedy_tree,
    optimal_tree,
    planned_tree,
    solve,
    solve_cells,
    tree_from_json,
    tree_to_json,
)
from rayspec.tree.structure import TreeShape

RNG = np.random.default_rng(20240215)


def random_vector(width: int, rng=RNG, sort: bool = False) -> np.ndarray:
    a = rng.dirichlet(np.ones(width + 1))[:width]  # the last cell is "none accepted"
    return np.sort(a)[::-1] if sort else a


# ---------------------------------------------------------------- brute force
@lru_cache(maxsize=None)
def ordered_trees(nodes: int, depth: int, width: int) -> tuple:
    """Every ordered tree of exactly `nodes` nodes, at most `depth` levels below its root and
    at most `width` children per node, as nested tuples of children."""
    if depth == 0:
        return ((),) if nodes == 1 else ()
    return tuple(forests(nodes - 1, depth - 1, width, width))


def forests(nodes: int, depth: int, width: int, slots: int):
    """Sequences of at most `slots` trees with `nodes` nodes in all."""
    if nodes == 0:
        yield ()
        return
    if slots == 0:
        return
    for first in range(1, nodes + 1):
        for tree in ordered_trees(first, depth, width):
            for rest in forests(nodes - first, depth, width, slots - 1):
                yield (tree, *rest)


def nested_value(tree: tuple, rows: np.ndarray, depth: int = 0) -> float:
    row = rows[min(depth, len(rows) - 1)]
    return 1.0 + sum(row[j] * nested_value(kid, rows, depth + 1) for j, kid in enumerate(tree))


def brute_force(rows: np.ndarray, budget: int, max_depth: int) -> float:
    rows = np.atleast_2d(rows)
    return max(
        nested_value(tree, rows)
        for n in range(1, budget + 1)
        for tree in ordered_trees(n, max_depth, rows.shape[1])
    )


def test_enumeration_counts_catalan():
    # ordered trees with n nodes and no caps: Catalan(n - 1)
    assert [len(ordered_trees(n, n, n)) for n in range(1, 8)] == [1, 1, 2, 5, 14, 42, 132]


@pytest.mark.parametrize("trial", range(6))
def test_dp_equals_brute_force(trial):
    rng = np.random.default_rng(trial)
    width = int(rng.integers(1, 4))
    a = random_vector(width, rng)
    solution = solve(a, 8, 4)
    for n in range(1, 9):
        for d in range(5):
            expect = brute_force(a, n, d)
            assert solution.value(n, d) == pytest.approx(expect, abs=1e-12), (n, d)
            shape = solution.tree(n, d)
            assert shape.size <= n and shape.max_depth <= d and shape.max_children <= width
            assert expected_tokens(shape, a) == pytest.approx(expect, abs=1e-12)


@pytest.mark.parametrize("trial", range(3))
def test_depth_aware_dp_equals_brute_force(trial):
    rng = np.random.default_rng(100 + trial)
    rows = np.stack([random_vector(3, rng) for _ in range(3)])
    solution = solve(rows, 7, 4)
    for n in range(1, 8):
        for d in range(5):
            expect = brute_force(rows, n, d)
            assert solution.value(n, d) == pytest.approx(expect, abs=1e-12), (n, d)
            assert expected_tokens(solution.tree(n, d), rows) == pytest.approx(expect, abs=1e-12)


def test_depth_aware_with_equal_rows_is_the_plain_dp():
    a = random_vector(4)
    plain, aware = solve(a, 30, 6), solve(np.stack([a] * 4), 30, 6)
    np.testing.assert_allclose(aware.values, plain.values, atol=1e-12)


def test_larger_trees_match_the_greedy_optimum():
    """For non-increasing vectors the top-n reach probabilities form an optimal tree."""
    for width in (2, 5, 16):
        a = random_vector(width, sort=True)
        solution = solve(a, 64, 8)
        for n in (5, 16, 33, 64):
            assert solution.value(n, 8) == pytest.approx(expected_tokens(greedy_tree(a, n, 8), a), abs=1e-10)
    rows = np.stack([random_vector(4, sort=True) for _ in range(3)])
    solution = solve(rows, 40, 6)
    for n in range(1, 41):
        assert solution.value(n) == pytest.approx(expected_tokens(greedy_tree(rows, n, 6), rows), abs=1e-10)


# ---------------------------------------------------------------- Monte Carlo
def simulate_tokens(shape: TreeShape, rows: np.ndarray, steps: int, rng) -> np.ndarray:
    """Tokens per step on the synthetic process the DP assumes: at a node of depth k the
    accepted rank is j with probability rows[k][j-1], none otherwise; descend if that child
    was drafted, else stop; a step yields depth reached + 1 tokens."""
    rows = np.atleast_2d(rows)
    width = rows.shape[1]
    child = np.full((shape.size, width + 1), -1)  # column `width`: none accepted
    for node, kids in enumerate(shape.children):
        child[node, : min(len(kids), width)] = kids[:width]
    node = np.zeros(steps, dtype=np.int64)
    alive = np.ones(steps, dtype=bool)
    tokens = np.ones(steps)
    for depth in range(shape.max_depth):
        cumulative = np.cumsum(rows[min(depth, len(rows) - 1)])
        rank = np.searchsorted(cumulative, rng.random(steps), side="right")  # 0-based; width = none
        nxt = child[node, rank]
        alive &= nxt >= 0
        node = np.where(alive, nxt, node)
        tokens += alive
    return tokens


@pytest.mark.parametrize("vector", [[0.48, 0.074], [0.484, 0.138], "random16", "aware"])
def test_value_matches_monte_carlo(vector):
    rng = np.random.default_rng(7)
    if vector == "random16":
        a = random_vector(16, rng, sort=True)
    elif vector == "aware":
        a = np.array([[0.7, 0.15, 0.05], [0.55, 0.2, 0.1], [0.4, 0.2, 0.1]])
    else:
        a = np.array(vector)
    shape, value = optimal_tree(a, 32, 8)
    tokens = simulate_tokens(shape, a, 200_000, rng)
    error = tokens.std() / np.sqrt(tokens.size)
    assert abs(tokens.mean() - value) < 4 * error, (tokens.mean(), value, error)


# ---------------------------------------------------------------- monotonicity
def rank_paths(shape: TreeShape) -> set:
    paths = [()]
    for node in range(1, shape.size):
        paths.append(paths[shape.parents[node]] + (shape.child_rank[node],))
    return set(paths)


def test_values_are_monotone_in_budget_and_depth():
    for width in (1, 3, 8):
        values = solve(random_vector(width), 40, 7).values
        assert (np.diff(values, axis=0) >= -1e-12).all()
        assert (np.diff(values, axis=1) >= -1e-12).all()


@pytest.mark.parametrize("kind", ["random", "tied", "depth-aware"])
def test_trees_are_nested_in_budget_for_non_increasing_vectors(kind):
    """Not a theorem about the DP's argmax for every tie, but what its tie-breaking (fewest
    children, then fewest nodes to the last child) gives; greedy_tree is nested by design."""
    rng = np.random.default_rng(3)
    for _ in range(6):
        width = int(rng.integers(1, 6))
        if kind == "random":
            a = random_vector(width, rng, sort=True)
        elif kind == "tied":
            a = np.full(width, rng.uniform(0.05, 1 / width))
        else:
            a = np.stack([random_vector(width, rng, sort=True) for _ in range(3)])
        solution = solve(a, 40, 6)
        trees = [rank_paths(solution.tree(n)) for n in range(1, 41)]
        greedy = [rank_paths(greedy_tree(a, n, 6)) for n in range(1, 41)]
        for small, large in zip(trees, trees[1:]):
            assert small <= large
        for small, large in zip(greedy, greedy[1:]):
            assert small <= large


# ---------------------------------------------------------------- edge and hand cases
def test_root_only_cases():
    a = [0.6, 0.2]
    for shape, value in (optimal_tree(a, 1, 5), optimal_tree(a, 10, 0), optimal_tree([0.0, 0.0], 10, 5)):
        assert shape == TreeShape.chain(0) and value == 1.0
    assert solve(a, 5, 3).values[0].tolist() == [0.0] * 4
    assert optimal_tree([], 10, 5) == (TreeShape.chain(0), 1.0)  # width 0: nothing to draft


@pytest.mark.parametrize("a", [[0.7], [0.7, 0.0, 0.0]])
def test_single_nonzero_first_rank_gives_a_chain(a):
    for n, d in ((10, 4), (3, 6), (7, 6)):
        shape, value = optimal_tree(a, n, d)
        drafts = min(n - 1, d)
        assert shape == TreeShape.chain(drafts)
        assert value == pytest.approx(sum(0.7**i for i in range(drafts + 1)), abs=1e-12)


def test_zero_first_rank_needs_a_placeholder_sibling():
    a = [0.0, 0.5]
    assert optimal_tree(a, 2, 3) == (TreeShape.chain(0), 1.0)  # a lone rank-1 child adds nothing
    shape, value = optimal_tree(a, 3, 3)
    assert shape.parents == (-1, 0, 0) and value == pytest.approx(1.5)


def test_hand_computed_small_trees():
    a = [0.6, 0.2]
    # 3 nodes: chain 1 + .6 + .36 = 1.96 beats the star 1 + .6 + .2 = 1.8
    assert optimal_tree(a, 3, 2)[0].parents == (-1, 0, 1)
    assert optimal_tree(a, 3, 2)[1] == pytest.approx(1.96)
    assert optimal_tree(a, 3, 1)[0].parents == (-1, 0, 0)
    assert optimal_tree(a, 3, 1)[1] == pytest.approx(1.8)
    # 4 nodes: chain 2.176 beats (c1, c2) + c1's child 2.16 and c1 with two children 2.08
    assert optimal_tree(a, 4, 3)[0] == TreeShape.chain(3)
    assert optimal_tree(a, 4, 3)[1] == pytest.approx(2.176)
    assert optimal_tree(a, 4, 1)[0].parents == (-1, 0, 0)  # width 2 caps the star


def test_expected_tokens_of_given_trees():
    a = [0.5, 0.3, 0.1]
    assert expected_tokens(TreeShape.kary(2, 2), a) == pytest.approx(1 + 0.8 + 0.8 * 0.8)
    assert expected_tokens(TreeShape.kary(4, 1), a) == pytest.approx(1.9)  # rank 4: never accepted
    rows = [[0.5, 0.3], [0.2, 0.1]]
    assert expected_tokens(TreeShape.kary(2, 2), rows) == pytest.approx(1 + 0.8 + 0.8 * 0.3)


def test_max_children_caps_the_width():
    a = random_vector(8, sort=True)
    shape, value = optimal_tree(a, 40, 5, max_children=2)
    assert shape.max_children <= 2
    assert value == pytest.approx(solve(a[:2], 40, 5).value())


def test_bad_inputs_are_refused():
    for bad in ([0.7, 0.5], [-0.1], [np.nan], [[[0.5]]], np.zeros((0, 2))):
        with pytest.raises(ValueError):
            solve(bad, 4, 2)
    with pytest.raises(ValueError):
        solve([0.5], 0, 2)
    with pytest.raises(ValueError):
        solve([0.5], 4, -1)
    with pytest.raises(ValueError):
        solve([0.5], 4, 2).tree(5, 2)


def test_tree_file_round_trip():
    tree = planned_tree([0.48, 0.074], 16, 8)
    data = json.loads(json.dumps(tree_to_json(tree)))
    assert set(data) >= {"parents", "child_rank", "expected_tokens", "budget", "max_depth", "acceptance"}
    assert data["parents"][0] == -1 and data["child_rank"][0] == 0
    back = tree_from_json(data)
    assert back == tree
    assert TreeShape.from_json(data) == tree.shape
    assert back.expected_tokens == pytest.approx(expected_tokens(back.shape, data["acceptance"]))
    minimal = tree_from_json({"parents": data["parents"], "acceptance": data["acceptance"]})
    assert minimal.expected_tokens == pytest.approx(tree.expected_tokens)
    with pytest.raises(ValueError):
        tree_from_json({**data, "child_rank": [0] * len(data["parents"])})


@pytest.mark.parametrize("kind", ["vector", "depth-aware"])
def test_levels_beyond_budget_minus_one_are_shared_not_solved(kind, monkeypatch):
    """A tree of n nodes is at most n - 1 levels deep: solving more levels must change
    nothing, and must cost nothing (sequoia:8x1024 is as cheap as sequoia:8x7)."""
    import rayspec.tree.sequoia as sequoia

    rng = np.random.default_rng(11)
    a = random_vector(4, rng) if kind == "vector" else np.stack([random_vector(4, rng) for _ in range(9)])
    budget, shallow, deep = 8, 7, 300
    reference = solve(a, budget, shallow)
    calls = []
    real = sequoia._solve_state
    monkeypatch.setattr(sequoia, "_solve_state", lambda *args: calls.append(1) or real(*args))
    solution = solve(a, budget, deep)
    rows = 1 if kind == "vector" else 9
    assert len(calls) <= shallow * rows
    assert np.array_equal(solution.values[:, : shallow + 1], reference.values)
    assert (solution.values[:, shallow + 1:] == reference.values[:, -1:]).all()
    for n in range(1, budget + 1):
        assert solution.tree(n, deep) == reference.tree(n, shallow)


@pytest.mark.parametrize("kind", ["vector", "depth-aware"])
def test_levels_past_the_trees_deepening_are_shared_not_solved(kind, monkeypatch):
    """Once a level changes no state, none below it does: the program stops solving there and
    gives every deeper level that level's states, with exactly the values and trees of the full
    program (sequoia:1024x1024 solved 1,023 levels, 30 s, where its trees stop deepening after
    some 20)."""
    import rayspec.tree.sequoia as sequoia

    rng = np.random.default_rng(12)
    a = random_vector(6, rng, sort=True) if kind == "vector" else \
        np.stack([random_vector(6, rng, sort=True) for _ in range(3)])
    budget, deep = 96, 95
    calls = []
    real = sequoia._solve_state
    monkeypatch.setattr(sequoia, "_solve_state", lambda *args: calls.append(1) or real(*args))
    solution = solve(a, budget, deep)
    stopped = len(calls)
    monkeypatch.setattr(sequoia, "_same_state", lambda *_: False)  # every level solved: the full program
    full = solve(a, budget, deep)
    assert stopped < (len(calls) - stopped) / 2, (stopped, len(calls) - stopped)
    assert np.array_equal(solution.values, full.values)
    for n in (1, 2, 10, 50, 96):
        for d in (1, 5, 30, 95):
            assert solution.tree(n, d) == full.tree(n, d)


@pytest.mark.parametrize("budget, depth, ranks, rows", [(1, 5, 3, 1), (6, 0, 3, 2), (9, 4, 3, 1), (9, 4, 3, 7),
                                                        (7, 20, 2, 4), (12, 3, 5, 9), (5, 1, 4, 3)])
def test_solve_cells_counts_the_cells_the_program_fills_when_it_cannot_stop_early(budget, depth, ranks, rows,
                                                                               monkeypatch):
    """The request-time plan cap counts `solve_cells`: budget^2 per rank of each (depth row,
    levels) state solved, which a vector whose trees keep deepening fills in full; a vector the
    early stop helps fills no more."""
    import rayspec.tree.sequoia as sequoia

    cells = []
    real = sequoia._solve_state
    monkeypatch.setattr(sequoia, "_solve_state", lambda a, child, n: cells.append(a.size * n * n) or real(a, child, n))
    row = np.full(ranks, 0.005 / ranks)
    row[0] = 0.99
    deepening = np.tile(row, (rows, 1)) * np.linspace(1.0, 0.999, rows)[:, None]
    solve(deepening, budget, depth)
    assert sum(cells) == solve_cells(budget, depth, rows, ranks)
    cells.clear()
    solve(np.stack([random_vector(ranks, np.random.default_rng(rows)) for _ in range(rows)]), budget, depth)
    assert sum(cells) <= solve_cells(budget, depth, rows, ranks)
