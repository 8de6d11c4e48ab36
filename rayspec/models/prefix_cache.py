"""Automatic prefix caching: the key and value rows of token sequences a model has read, kept
so that a later prefill starts where the longest cached prefix of its tokens ends (vLLM's
automatic prefix caching, SGLang's radix cache).  Causal attention makes the rows of
positions [0, k) a function of tokens [0, k) alone, so any cached sequence that shares a new
prompt's first k tokens gives them — a long system prompt shared by many requests, the
earlier turns of a conversation.

Reuse is exact in law, not in bits: the rows were computed in a forward of another shape (a
longer prefill, a tree step), and a matrix product's rounding depends on its shape (relative
differences of about 1e-7), so a sample whose uniform falls that close to a boundary may
differ from a cold run's.  A service that must repeat a seed's tokens byte for byte runs with
the cache off (`prefix_cache_mb: 0`).
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import torch

DEFAULT_PREFIX_CACHE_MB = 1024
# Shorter shared prefixes are computed again: copying their rows saves next to nothing.
MIN_REUSED_TOKENS = 16


def check_prefix_cache_mb(size, name: str) -> float:
    """`size`, or ValueError naming the setting `name`: a finite number of megabytes, 0 or more."""
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not 0 <= size < math.inf:
        raise ValueError(f"{name} must be a finite number of megabytes, 0 or more, got {size!r}")
    return size


Rows = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [batch, heads, tokens, dim]


@dataclass
class _Entry:
    rows: Rows
    nbytes: int


class PrefixCache:
    """Rows of token sequences, least recently used dropped beyond `capacity_bytes`.  Safe to
    share between the threads of one model's sessions.

    The cached sequences' tokens form a radix tree (`_RadixIndex`, SGLang's radix cache), so
    that the longest one a prompt shares is found in time that grows with the prompt, not with
    how many are held: a loop over them cost 8 ms a lookup and 19 ms a store at 1,000, about
    what 1 GiB holds of the demo target's sequences, and 87 and 214 ms at 10,000, about what it
    holds of its drafter's; the tree takes 0.01-0.05 ms (`bench/results/prefix_index_bench.md`).
    The tree's own memory, tens of bytes a token, is not counted in `capacity_bytes` (one
    token's keys and values take kilobytes on every model this serves)."""

    def __init__(self, capacity_bytes: int, min_tokens: int = MIN_REUSED_TOKENS):
        if capacity_bytes < 0:
            raise ValueError(f"a prefix cache holds a non-negative number of bytes, got {capacity_bytes}")
        self.capacity_bytes, self.min_tokens = capacity_bytes, min_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._index = _RadixIndex()
        self._next_key = 0
        self._lock = threading.Lock()
        self.nbytes = 0
        # what vLLM's prefix-cache metrics count: lookups and hits, and tokens of the prompts
        # looked up and of the prefixes found
        self.lookups = self.hits = self.queried_tokens = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens) -> tuple[int, Rows | None]:
        """(k, rows): the longest prefix of `tokens` some cached sequence begins with, when at
        least `min_tokens` long, and views of its first k rows per layer; (0, None) otherwise.
        Of sequences sharing as much, the most recently used gives its rows."""
        query = _token_ids(tokens)
        with self._lock:
            self.lookups += 1
            self.queried_tokens += len(query)
            best, best_key = self._index.longest(query)
            if best < self.min_tokens or best_key is None:
                return 0, None
            self._use(best_key)
            self.hits += 1
            self.reused_tokens += best
            return best, [(keys[..., :best, :], values[..., :best, :]) for keys, values in self._entries[best_key].rows]

    def store(self, tokens, rows: Rows) -> None:
        """Keep copies of `rows`, the rows of `tokens` (one per token per layer).  A cached
        sequence that `tokens` extends is dropped (the new one gives all it gave); one that
        extends `tokens` makes storing them needless."""
        tokens = _token_ids(tokens)
        n = len(tokens)
        if n < self.min_tokens or any(keys.shape[-2] != n or values.shape[-2] != n for keys, values in rows):
            return
        nbytes = sum(keys.nbytes + values.nbytes for keys, values in rows)
        if nbytes > self.capacity_bytes:
            return
        with self._lock:
            if self._held_or_superseded(tokens):
                return
        copied = [(keys.clone(), values.clone()) for keys, values in rows]  # outside the lock: large copies
        with self._lock:
            # again: another thread may have stored this sequence, or a prefix of it, meanwhile
            if self._held_or_superseded(tokens):
                return
            while self._entries and self.nbytes + nbytes > self.capacity_bytes:
                self._drop(next(iter(self._entries)))
            key = self._next_key
            self._next_key += 1
            self._entries[key] = _Entry(copied, nbytes)
            self._index.add(key, tokens)
            self.nbytes += nbytes

    def _held_or_superseded(self, tokens: array) -> bool:
        """Whether `tokens` are held already, as themselves or within a longer sequence (that
        entry then counts as used); else the entry they extend, if any, is dropped (called
        holding the lock).  No cached sequence is a prefix of another (`store` keeps it so):
        at most one is a prefix of `tokens`, and none when one holds them."""
        holder, prefix = self._index.holder_and_prefix(tokens)
        if holder is not None:
            self._use(holder)
            return True
        if prefix is not None:
            self._drop(prefix)
        return False

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._index = _RadixIndex()
            self.nbytes = 0

    def _use(self, key: int) -> None:
        self._entries.move_to_end(key)
        self._index.touch(key)

    def _drop(self, key: int) -> None:
        self.nbytes -= self._entries.pop(key).nbytes
        self._index.remove(key)


def _token_ids(tokens) -> array:
    """Token ids (a tensor or any sequence of ints) as the tree's edges hold them."""
    return array("q", tokens.tolist() if isinstance(tokens, torch.Tensor) else [int(t) for t in tokens])


class _Node:
    """A node of the radix tree: the tokens on the edge from its parent, its children by their
    edges' first tokens, the sequence ending here (only at leaves: no sequence is a prefix of
    another), and the most recently used sequence at or below it, with that use's tick."""

    __slots__ = ("edge", "parent", "children", "key", "best_key", "best_tick")

    def __init__(self, edge: array, parent: _Node | None, key: int | None = None):
        self.edge, self.parent, self.children, self.key = edge, parent, {}, key
        self.best_key: int | None = key
        self.best_tick = -1

    def take_best_of_children(self) -> None:
        best = max(self.children.values(), key=lambda child: child.best_tick, default=None)
        self.best_key, self.best_tick = (None, -1) if best is None else (best.best_key, best.best_tick)


class _RadixIndex:
    """The cached sequences' tokens as a radix tree: a walk from the root along a query's tokens
    ends where the longest shared prefix does, and every sequence below that point shares
    exactly that many tokens with it; each node names the most recently used of them.  A walk
    costs a dictionary lookup and an edge comparison per branching point passed, a use or a
    removal a step per ancestor.  Internal nodes other than the root have two children or
    more (a removal merges a node left with one into it)."""

    def __init__(self):
        self._root = _Node(array("q"), None)
        self._leaves: dict[int, _Node] = {}
        self._tick = 0

    def _walk(self, query: array) -> tuple[_Node, int, _Node, int]:
        """(node, its depth, point, depth): the deepest node whose whole path `query` begins
        with; the node below which every sequence shares exactly `depth` tokens with `query`
        (`node` itself, or the child whose edge `query` leaves or ends within), and that depth."""
        node, depth = self._root, 0
        while depth < len(query):
            child = node.children.get(query[depth])
            if child is None:
                break
            edge = child.edge
            if query[depth: depth + len(edge)] != edge:
                shared, end = 1, min(len(edge), len(query) - depth)
                while shared < end and edge[shared] == query[depth + shared]:
                    shared += 1
                return node, depth, child, depth + shared
            node, depth = child, depth + len(edge)
        return node, depth, node, depth

    def longest(self, query: array) -> tuple[int, int | None]:
        """(k, key): the most first tokens of `query` a sequence shares, and the most recently
        used sequence sharing them; (0, None) when none shares a token."""
        _, _, point, depth = self._walk(query)
        return (depth, point.best_key) if depth else (0, None)

    def holder_and_prefix(self, tokens: array) -> tuple[int | None, int | None]:
        """(key, key): the most recently used sequence that begins with `tokens` (or None), and
        else the sequence that `tokens` begin with (or None)."""
        node, _, point, depth = self._walk(tokens)
        if depth == len(tokens) and point.best_key is not None:
            return point.best_key, None
        return None, node.key if point is node else None

    def add(self, key: int, tokens: array) -> None:
        """A sequence that none held begins with (`holder_and_prefix` found no holder), and that
        begins with none held (its prefix was dropped)."""
        node, node_depth, point, depth = self._walk(tokens)
        if point is not node:  # the tokens leave `point`'s edge: it is split where they do
            within = depth - node_depth
            middle = _Node(point.edge[:within], node)
            middle.children[point.edge[within]] = point
            middle.best_key, middle.best_tick = point.best_key, point.best_tick
            node.children[middle.edge[0]] = middle
            point.edge, point.parent = point.edge[within:], middle
            node = middle
        leaf = _Node(tokens[depth:], node, key)
        node.children[leaf.edge[0]] = leaf
        self._leaves[key] = leaf
        self.touch(key)

    def touch(self, key: int) -> None:
        self._tick += 1
        node = self._leaves[key]
        while node is not None:
            node.best_key, node.best_tick = key, self._tick
            node = node.parent

    def remove(self, key: int) -> None:
        leaf = self._leaves.pop(key)
        node = leaf.parent
        del node.children[leaf.edge[0]]
        if node is not self._root and len(node.children) == 1:  # merged into its one child
            [child] = node.children.values()
            child.edge, child.parent = node.edge + child.edge, node.parent
            node.parent.children[child.edge[0]] = child
            node = child.parent
        while node is not None and node.best_key == key:
            node.take_best_of_children()
            node = node.parent
