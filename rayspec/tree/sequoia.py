"""Sequoia's optimal draft tree (Chen et al. 2024, "Sequoia: Scalable, Robust, and
Hardware-aware Speculative Decoding", §3.1 and Algorithm 1).

The model: at a node, the verifier accepts the child of draw rank j with probability a[j]
(the events "rank j is the accepted one" are disjoint, sum(a) <= 1, the rest is "none
accepted"), independently of the path so far and of how many siblings were drafted.  A
step's tokens are the accepted drafts plus one bonus token, so

    E[tokens per step] = sum over nodes v of  prod over the edges on the root->v path of a[rank],

the root counting 1 (it stands for the bonus token).  A depth-aware vector is a matrix
A[k, j]: the acceptance of rank j+1 at a node of depth k (the last row serves every deeper
node).

Conventions (those of `rayspec.tree.structure`):
  * `budget` counts nodes INCLUDING the root: budget 1 is target-only decoding;
  * `max_depth` counts drafted levels below the root: the root alone has depth 0, a chain of
    3 drafts has depth 3, and it is `TreeShape.max_depth`.  (Sequoia's code counts the root's
    level too: its "4 levels" is our max_depth 3.)
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from rayspec.tree.structure import TreeShape

_TIE = 1e-12  # relative: choices within this of the best are ties, broken toward fewer nodes


def acceptance_rows(acceptance, max_children: int | None = None) -> np.ndarray:
    """The acceptance vector [W] or depth-aware matrix [R, W] as float64 rows [R, W], checked,
    cut to `max_children` ranks (a verifier that takes at most k drafts per node)."""
    rows = np.atleast_2d(np.asarray(acceptance, dtype=np.float64))
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise ValueError(f"an acceptance vector is [W] or [depths, W], got shape {np.shape(acceptance)}")
    if max_children is not None:
        if max_children < 0:
            raise ValueError(f"max_children must be >= 0, got {max_children}")
        rows = rows[:, :max_children]
    if not np.isfinite(rows).all() or (rows < 0).any():
        raise ValueError("acceptance probabilities must be finite and non-negative")
    if (rows.sum(axis=1) > 1 + 1e-9).any():
        raise ValueError(f"acceptance probabilities of a node sum to at most 1, got {rows.sum(axis=1).max():.6f}")
    return rows


def reach_probabilities(shape: TreeShape, acceptance) -> np.ndarray:
    """P(the walk reaches node i) for every node: the product of a[rank] along its path."""
    rows = acceptance_rows(acceptance)
    # A zero column for ranks beyond the vector's width: such children are never accepted.
    padded = np.concatenate([rows, np.zeros((rows.shape[0], 1))], axis=1)
    parents, ranks = np.asarray(shape.parents), np.asarray(shape.child_rank)
    depth = np.asarray(shape.depth)
    reach = np.ones(shape.size)
    for level in shape.levels[1:]:
        nodes = np.arange(level.start, level.stop)
        up = parents[nodes]
        row = np.minimum(depth[up], rows.shape[0] - 1)
        column = np.minimum(ranks[nodes], rows.shape[1] + 1) - 1
        reach[nodes] = reach[up] * padded[row, column]
    return reach


def expected_tokens(shape: TreeShape, acceptance) -> float:
    """Expected tokens per target step of any tree under the positional acceptance model."""
    return float(reach_probabilities(shape, acceptance).sum())


def _first_best(candidates: np.ndarray) -> np.ndarray:
    """Per row, the first column within the tie tolerance of the row's maximum."""
    best = candidates.max(axis=1, keepdims=True)
    return np.argmax(candidates >= best - _TIE * np.maximum(1.0, np.abs(best)), axis=1)


@dataclass
class _State:
    """The best subtrees rooted at one (depth row, remaining levels): value[n] for at most n
    nodes, and the choices that achieve it."""

    value: np.ndarray  # [N+1], value[0] = -inf (a subtree has its root)
    children: np.ndarray  # [N+1] number of the root's children
    split: np.ndarray  # [W, N]: split[b-1, m] nodes of child b when children 1..b share m nodes


def _solve_state(a: np.ndarray, child: np.ndarray, budget: int) -> _State:
    """One step of Sequoia's recursion, vectorised over the node count.

    forest_b[m] = best sum_{i<=b} a[i] * value_child(s_i) with sum s_i <= m, s_i >= 1
                = max_s forest_{b-1}[m - s] + a[b] * child[s]
    value[n]    = 1 + max_b forest_b[n - 1]

    forest_{b-1}[m - s] for every (m, s) is read through a window over the forest behind
    `budget` entries of -inf (s > m: no room for the child), not gathered and masked: a
    rank's candidates are then one addition of the same sums (the same trees), and the
    program is faster: 6.6 against 9.4 ms for sequoia:auto's 128 nodes and 10 levels, 0.31
    against 0.78 s for 1024 nodes (this CPU, a 16-rank vector)."""
    nodes = np.arange(budget)  # m: nodes available to the root's children
    give = np.arange(1, budget + 1)  # s: nodes of the last child's subtree (s = budget: never valid)
    # padded[budget + i] = forest[i], so padded[m + budget - s] is forest[m - s] for s <= m and
    # -inf beyond; windows[m, s - 1] is that entry, a view that follows each rank's forest.
    padded = np.full(2 * budget, -np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, budget)[:budget, ::-1]
    forest = np.zeros(budget)
    forests = [forest]
    split = np.zeros((a.size, budget), dtype=np.int64)
    for b, a_b in enumerate(a):
        padded[budget:] = forest
        candidates = windows + a_b * child[1:][None, :]
        pick = _first_best(candidates)
        forest = candidates[nodes, pick]
        split[b] = give[pick]
        forests.append(forest)
    stacked = np.stack(forests, axis=1)  # [N, W+1]: forests by number of children
    children = _first_best(stacked)
    value = np.concatenate([[-np.inf], 1.0 + stacked[nodes, children]])
    return _State(value, np.concatenate([[0], children]), split)


def _same_state(a: _State, b: _State) -> bool:
    return np.array_equal(a.value, b.value) and np.array_equal(a.children, b.children) and \
        np.array_equal(a.split, b.split)


@dataclass
class SequoiaSolution:
    """The DP over every budget n <= `budget` and depth d <= `max_depth` at once.

    values[n, d] is the best E[tokens per step] of a tree of at most n nodes and at most d
    drafted levels (values[0] = 0: no tree); `tree(n, d)` rebuilds that tree from the
    argmax choices.  A tree has fewer than n nodes only when more nodes could not add
    value (zero acceptance, or the width and depth caps)."""

    acceptance: np.ndarray  # [R, W]
    budget: int
    max_depth: int
    values: np.ndarray  # [budget+1, max_depth+1]
    _states: dict = field(repr=False)

    def _point(self, budget: int | None, max_depth: int | None) -> tuple[int, int]:
        n = self.budget if budget is None else int(budget)
        d = self.max_depth if max_depth is None else int(max_depth)
        if not (1 <= n <= self.budget and 0 <= d <= self.max_depth):
            raise ValueError(f"solved for budgets 1..{self.budget} and depths 0..{self.max_depth}, asked ({n}, {d})")
        return n, d

    def value(self, budget: int | None = None, max_depth: int | None = None) -> float:
        return float(self.values[self._point(budget, max_depth)])

    def tree(self, budget: int | None = None, max_depth: int | None = None) -> TreeShape:
        n, d = self._point(budget, max_depth)
        last_row = self.acceptance.shape[0] - 1

        def subtree(row: int, levels: int, nodes: int) -> list:
            state = self._states[row, levels]
            kids, left = [], nodes - 1
            for b in range(int(state.children[nodes]), 0, -1):  # the last rank holds split[b-1, left]
                size = int(state.split[b - 1, left])
                kids.append(subtree(min(row + 1, last_row), levels - 1, size))
                left -= size
            return kids[::-1]

        return _breadth_first(subtree(0, d, n))


def solve_cells(budget: int, max_depth: int, rows: int, ranks: int) -> int:
    """The most cells `solve` fills for a vector of `rows` depth rows and `ranks` ranks (after
    any max_children cut): budget^2 per rank of each (depth row, levels) state it solves.  Its
    early stop can leave out deep levels but is not counted on: a vector whose trees keep
    deepening (rank 1 near 1) solves every level."""
    budget, max_depth = int(budget), int(max_depth)
    last = min(int(rows), max(max_depth, 1)) - 1  # `solve` keeps the first max(max_depth, 1) rows
    levels = np.arange(1, min(max_depth, budget - 1) + 1)  # deeper levels share the last one solved
    states = int((np.minimum(last, max_depth - levels) + 1).sum())
    return states * int(ranks) * budget**2


def solve(acceptance, budget: int, max_depth: int, max_children: int | None = None) -> SequoiaSolution:
    """Sequoia's dynamic program, for every budget <= `budget` and depth <= `max_depth`: at
    most `solve_cells` cells, budget^2 * max_depth * W for a vector of W ranks (times its
    depth rows, fewer when max_depth is near them, for a depth-aware matrix)."""
    budget, max_depth = int(budget), int(max_depth)
    if budget < 1 or max_depth < 0:
        raise ValueError(f"need budget >= 1 (the root counts) and max_depth >= 0, got {budget}, {max_depth}")
    rows = acceptance_rows(acceptance, max_children)
    rows = rows[: max(max_depth, 1)]  # a node at depth max_depth has no children
    last = rows.shape[0] - 1
    leaf = _State(np.concatenate([[-np.inf], np.ones(budget)]), np.zeros(budget + 1, dtype=np.int64),
                  np.zeros((rows.shape[1], budget), dtype=np.int64))
    # State (k, r): subtree rooted at depth k (rows beyond the last share it) with r levels
    # below; the tree itself is (0, d), and (0, d) needs (min(k+1, last), d-1).
    states = {(k, 0): leaf for k in range(last + 1)}
    # A subtree of at most `budget` nodes is at most budget - 1 levels deep, so the states of
    # more levels equal those of budget - 1 exactly (their extra child values, for subtrees of
    # `budget` nodes below a root, are never read): solve those levels only, share the rest.
    solved_depth = min(max_depth, budget - 1)
    for levels in range(1, max_depth + 1):
        for k in range(min(last, max_depth - levels) + 1):
            if levels > solved_depth:
                states[k, levels] = states[k, solved_depth]
                continue
            child = states[min(k + 1, last), levels - 1].value
            states[k, levels] = _solve_state(rows[k], child, budget)
        if levels <= solved_depth and all(_same_state(states[k, levels], states[k, levels - 1])
                                          for k in range(min(last, max_depth - levels) + 1)):
            # A level that changed no state changes none below it either (each state is a
            # function of the next level's): the rest share it.  The optimal trees stop
            # deepening after some 20-70 levels on measured vectors, so sequoia:1024x1024
            # solves those, not 1023 (0.7 against 30 s on this CPU).
            solved_depth = levels
    values = np.stack([states[0, d].value for d in range(max_depth + 1)], axis=1)
    values[0] = 0.0
    return SequoiaSolution(rows, budget, max_depth, values, states)


def optimal_tree(acceptance, budget: int, max_depth: int, max_children: int | None = None) -> tuple[TreeShape, float]:
    """The tree of at most `budget` nodes and `max_depth` drafted levels maximising the
    expected tokens per step, and that value."""
    solution = solve(acceptance, budget, max_depth, max_children)
    return solution.tree(), solution.value()


def greedy_tree(acceptance, budget: int, max_depth: int, max_children: int | None = None) -> TreeShape:
    """The `budget` nodes of highest reach probability, taken one at a time.

    Every candidate is offered only once its parent and its left sibling are in, so each
    prefix is a tree and the trees are nested in the budget.  When every row of the vector is
    non-increasing in rank, a node never outscores its parent or its left sibling, and the
    top nodes are an optimal tree (exchange argument): the same value as `solve`."""
    rows = acceptance_rows(acceptance, max_children)
    width = rows.shape[1]
    order = 0
    # Entries: (-reach, tie order, reach, parent, rank, depth); the root's first child first.
    frontier = []

    def offer(reach: float, parent: int, rank: int, depth: int) -> None:
        nonlocal order
        if rank <= width and depth <= max_depth:
            child_reach = reach * rows[min(depth - 1, rows.shape[0] - 1), rank - 1]
            if child_reach > 0:
                heapq.heappush(frontier, (-child_reach, order, child_reach, parent, rank, depth))
                order += 1

    offer(1.0, 0, 1, 1)
    chosen = [(0, 1.0, 0, 0)]  # (parent in selection order, reach, rank, depth)
    while frontier and len(chosen) < budget:
        _, _, reach, parent, rank, depth = heapq.heappop(frontier)
        chosen.append((parent, reach, rank, depth))
        parent_reach = chosen[parent][1]
        offer(reach, len(chosen) - 1, 1, depth + 1)  # first child
        offer(parent_reach, parent, rank + 1, depth)  # next sibling
    kids: list[list[int]] = [[] for _ in chosen]
    for index, (parent, _, _, _) in enumerate(chosen[1:], start=1):
        kids[parent].append(index)  # siblings enter in rank order

    def nested(node: int) -> list:
        return [nested(kid) for kid in kids[node]]

    return _breadth_first(nested(0))


def _breadth_first(nested: list) -> TreeShape:
    """A tree given as nested child lists (children in rank order), in breadth-first order."""
    parents, queue = [-1], deque([(0, nested)])
    while queue:
        node, kids = queue.popleft()
        for kid in kids:
            queue.append((len(parents), kid))
            parents.append(node)
    return TreeShape(tuple(parents))


# ------------------------------------------------------------------------- tree files
@dataclass(frozen=True)
class SequoiaTree:
    """A planned tree with what it was planned from: the content of a tree file."""

    shape: TreeShape
    expected_tokens: float | None  # None: a file that does not say, and no vector to compute it
    budget: int
    max_depth: int
    acceptance: list  # [W] or [R][W]


def planned_tree(acceptance, budget: int, max_depth: int, max_children: int | None = None) -> SequoiaTree:
    shape, value = optimal_tree(acceptance, budget, max_depth, max_children)
    rows = acceptance_rows(acceptance, max_children)
    vector = rows[0].tolist() if np.ndim(acceptance) == 1 else rows.tolist()
    return SequoiaTree(shape, value, int(budget), int(max_depth), vector)


def tree_to_json(tree: SequoiaTree) -> dict:
    """The tree file's JSON object (`TreeShape.from_json` and the engine read it too)."""
    return {
        **tree.shape.to_dict(),
        "expected_tokens": None if tree.expected_tokens is None else float(tree.expected_tokens),
        "budget": int(tree.budget),
        "max_depth": int(tree.max_depth),
        "acceptance": list(tree.acceptance),
    }


def tree_from_json(data: dict) -> SequoiaTree:
    shape = TreeShape.from_json(data)
    acceptance = list(data.get("acceptance", []))
    value = data.get("expected_tokens")
    if value is None and acceptance:
        value = expected_tokens(shape, acceptance)
    return SequoiaTree(
        shape,
        None if value is None else float(value),
        int(data.get("budget", shape.size)),
        int(data.get("max_depth", shape.max_depth)),
        acceptance,
    )
