"""Draft-tree structure: the shape (who is whose parent) and the drafted tokens.

Conventions used by the drafter, the target, the verifiers and the tree files:
  * node 0 is the root: the last committed token, already known, not verified;
  * nodes are in breadth-first order: `parents[i] < i` and `parents[1:]` is non-decreasing,
    so every level is a contiguous slice and the children of a node are contiguous;
  * the children of a node are in draw order: `child_rank[i]` is 1 for the first draft of
    its parent, 2 for the second, ...; the root has rank 0;
  * a shape with `predicted = n > 0` has a chain of n *predicted* nodes under the root: its
    first child and that child's line of only children, down to a leaf.  Their tokens are
    a fixed function of the committed tokens (a client's prediction of the completion), not
    draws; the root's other children and their subtrees are the drafter's
    (`graft_prediction`; verified by `rayspec.verify.tree_walk`).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import torch


def _integer(value, what: str) -> int:
    """`value` as an int: an integer of any kind (numpy's included), not a bool nor a float,
    which int() would have truncated."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):  # True is an int to operator.index, but no node index a user meant
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ValueError(f"{what} must be an integer, got {value!r}")


def _node_indices(parents) -> tuple[int, ...]:
    """A parent list as a tuple of ints (see `_integer`)."""
    try:
        parents = tuple(parents)
    except TypeError:
        raise ValueError(f"a tree's parents must be a list of node indices, got {parents!r}") from None
    # The usual case, checked in C: plain ints, nothing to convert (TreeShape is built at every step).
    if set(map(type, parents)) <= {int}:
        return parents
    return tuple(_integer(parent, f"node {i}'s parent") for i, parent in enumerate(parents))


@dataclass(frozen=True)
class TreeShape:
    """The shape of a draft tree, given by its parent list (see the module conventions)."""

    parents: tuple[int, ...]
    predicted: int = 0  # nodes of the predicted chain under the root (see the module conventions)

    def __post_init__(self):
        parents = _node_indices(self.parents)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "predicted", _integer(self.predicted, "a tree's predicted chain length"))
        if not parents or parents[0] != -1:
            raise ValueError("a tree's node 0 is the root and has parent -1")
        for i, parent in enumerate(parents[1:], start=1):
            if not 0 <= parent < i:
                raise ValueError(f"node {i} has parent {parent}; parents must precede children")
            if parent < parents[i - 1]:
                raise ValueError(
                    f"nodes must be in breadth-first order: node {i} (parent {parent}) comes "
                    f"after node {i - 1} (parent {parents[i - 1]})"
                )
        if self.predicted:
            self._check_predicted_chain()

    def _check_predicted_chain(self) -> None:
        if self.predicted < 0:
            raise ValueError(f"a tree's predicted chain has n >= 0 nodes, got {self.predicted}")
        node = 0
        for _ in range(self.predicted):
            kids = self.children[node]
            if not kids or (node and len(kids) > 1):
                raise ValueError(f"a predicted chain of {self.predicted} nodes needs the root's first child and "
                                 f"a line of only children below it; node {node} has {len(kids)} children")
            node = kids[0]
        if self.children[node]:  # the chain's last node
            raise ValueError(f"the predicted chain of {self.predicted} nodes ends at node {node}, which has children")

    # ------------------------------------------------------------ constructors
    @classmethod
    def chain(cls, n: int) -> "TreeShape":
        """The root and n drafted tokens in a line."""
        if n < 0:
            raise ValueError(f"a chain needs n >= 0 drafted tokens, got {n}")
        return cls((-1, *range(n)))

    @classmethod
    def kary(cls, k: int, depth: int) -> "TreeShape":
        """k children under every node, `depth` drafted levels below the root."""
        if k < 1 or depth < 0:
            raise ValueError(f"a k-ary tree needs k >= 1 and depth >= 0, got k={k}, depth={depth}")
        parents, level = [-1], [0]
        for _ in range(depth):
            next_level = []
            for node in level:
                for _ in range(k):
                    next_level.append(len(parents))
                    parents.append(node)
            level = next_level
        return cls(tuple(parents))

    @classmethod
    def from_json(cls, text_or_dict) -> "TreeShape":
        """The shape of a tree file's object, {"parents": [...], "child_rank": [...], "predicted": n}
        (`to_dict`; child_rank and predicted optional).  Anything else is a ValueError, for the
        file comes from a user (`rayspec.engine.trees`, file: specs)."""
        try:
            data = json.loads(text_or_dict) if isinstance(text_or_dict, str) else text_or_dict
        except RecursionError:  # json's decoder recurses per level: [[[...]]] 100k deep escaped as no ValueError
            raise ValueError("the JSON nests too deeply to be a tree (its lists are of numbers)") from None
        if not isinstance(data, Mapping):
            raise ValueError(f'a tree is a JSON object with "parents", got {type(data).__name__}')
        if "parents" not in data:
            raise ValueError('a tree needs "parents": the parent of each node, -1 for the root')
        shape = cls(data["parents"], data.get("predicted", 0))
        if "child_rank" in data:
            try:
                child_rank = list(data["child_rank"])
            except TypeError:
                raise ValueError(f"child_rank must be a list, got {data['child_rank']!r}") from None
            if child_rank != list(shape.child_rank):
                raise ValueError("child_rank does not match the parent list's draw order")
        return shape

    def to_dict(self) -> dict:
        data = {"parents": list(self.parents), "child_rank": list(self.child_rank)}
        return {**data, "predicted": self.predicted} if self.predicted else data

    def truncated(self, max_depth: int) -> "TreeShape":
        """The nodes at depth <= max_depth (a prefix, by the breadth-first order)."""
        if max_depth >= self.max_depth:
            return self
        max_depth = max(max_depth, 0)
        return TreeShape(self.parents[: sum(1 for d in self.depth if d <= max_depth)], min(self.predicted, max_depth))

    # -------------------------------------------------------------- structure
    @property
    def size(self) -> int:
        return len(self.parents)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        depth = [0] * self.size
        for i in range(1, self.size):
            depth[i] = depth[self.parents[i]] + 1
        return tuple(depth)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def child_rank(self) -> tuple[int, ...]:
        rank = [0] * self.size
        for kids in self.children:
            for r, child in enumerate(kids, start=1):
                rank[child] = r
        return tuple(rank)

    @cached_property
    def num_children(self) -> tuple[int, ...]:
        return tuple(len(k) for k in self.children)

    @cached_property
    def first_child(self) -> tuple[int, ...]:
        """Index of each node's first child (children are contiguous); -1 for a leaf."""
        return tuple(k[0] if k else -1 for k in self.children)

    @cached_property
    def max_children(self) -> int:
        return max(len(k) for k in self.children)

    @cached_property
    def levels(self) -> tuple[range, ...]:
        """Node index ranges of each depth (contiguous by the breadth-first order)."""
        bounds, start = [], 0
        for d in range(self.max_depth + 1):
            end = start
            while end < self.size and self.depth[end] == d:
                end += 1
            bounds.append(range(start, end))
            start = end
        return tuple(bounds)

    @cached_property
    def predicted_chain(self) -> tuple[int, ...]:
        """The nodes of the predicted chain, from the root's first child down (none when
        `predicted` is 0)."""
        chain, node = [], 0
        for _ in range(self.predicted):
            node = self.children[node][0]
            chain.append(node)
        return tuple(chain)

    @cached_property
    def internal_nodes(self) -> tuple[int, ...]:
        return tuple(i for i, kids in enumerate(self.children) if kids)

    @cached_property
    def internal_index(self) -> tuple[int, ...]:
        """Row of each internal node among `internal_nodes` (-1 for a leaf): where a node's
        draft law sits in a table holding rows for internal nodes only."""
        index = [-1] * self.size
        for row, node in enumerate(self.internal_nodes):
            index[node] = row
        return tuple(index)

    def ancestor_mask(self) -> torch.Tensor:
        """Bool [N, N]: entry (i, j) is true iff j is i or an ancestor of i."""
        mask = torch.zeros(self.size, self.size, dtype=torch.bool)
        for i in range(self.size):
            if i:
                mask[i] = mask[self.parents[i]]
            mask[i, i] = True
        return mask

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's first child down to `node` (the root excluded)."""
        return root_path(self.parents, node)


def root_path(parents, node: int) -> list[int]:
    """Nodes from the root's child down to `node` (the root excluded) in a tree given by its
    parents, node 0 the root; also for a tree still being grown."""
    path = []
    while node > 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@dataclass
class DraftTree:
    """A tree shape with its tokens: tokens[0] is the root (last committed) token."""

    shape: TreeShape
    tokens: torch.Tensor = field(repr=False)

    def __post_init__(self):
        self.tokens = torch.as_tensor(self.tokens, dtype=torch.long)
        if self.tokens.shape != (self.shape.size,):
            raise ValueError(
                f"a tree of {self.shape.size} nodes needs {self.shape.size} tokens, "
                f"got shape {tuple(self.tokens.shape)}"
            )


def graft_prediction(tree: DraftTree, chain) -> tuple[DraftTree, tuple[int, ...]]:
    """`tree` (the drafter's) with a predicted chain of `chain`'s tokens as the root's first
    child: (the tree with `shape.predicted = len(chain)`, the node each of `tree`'s nodes became).

    Level by level, the chain's node comes first and the drafter's follow in their order, so
    the result is breadth-first with every child after its parent."""
    chain = [int(t) for t in chain]
    if not chain:
        raise ValueError("a predicted chain holds at least one token")
    shape = tree.shape
    parents, tokens = [-1], [int(tree.tokens[0])]
    placed = [0] * shape.size  # the drafter's node -> its node in the result
    above = 0  # the chain's node on the level above (the root to begin with)
    for depth in range(1, max(shape.max_depth, len(chain)) + 1):
        if depth <= len(chain):
            parents.append(above)
            tokens.append(chain[depth - 1])
            above = len(parents) - 1
        for node in shape.levels[depth] if depth <= shape.max_depth else ():
            placed[node] = len(parents)
            parents.append(placed[shape.parents[node]])
            tokens.append(int(tree.tokens[node]))
    grafted = DraftTree(TreeShape(tuple(parents), len(chain)), torch.tensor(tokens))
    return grafted, tuple(placed)
