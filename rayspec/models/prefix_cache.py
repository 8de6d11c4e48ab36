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
    tokens: torch.Tensor  # [n] int64, on the CPU
    rows: Rows
    nbytes: int


class PrefixCache:
    """Rows of token sequences, least recently used dropped beyond `capacity_bytes`.  Safe to
    share between the threads of one model's sessions."""

    def __init__(self, capacity_bytes: int, min_tokens: int = MIN_REUSED_TOKENS):
        if capacity_bytes < 0:
            raise ValueError(f"a prefix cache holds a non-negative number of bytes, got {capacity_bytes}")
        self.capacity_bytes, self.min_tokens = capacity_bytes, min_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self._lock = threading.Lock()
        self.nbytes = 0
        self.lookups = self.hits = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens) -> tuple[int, Rows | None]:
        """(k, rows): the longest prefix of `tokens` some cached sequence begins with, when at
        least `min_tokens` long, and views of its first k rows per layer; (0, None) otherwise."""
        query = torch.as_tensor(list(tokens), dtype=torch.long)
        with self._lock:
            self.lookups += 1
            best, best_key = 0, None
            for key, entry in self._entries.items():
                shared = _shared_prefix(entry.tokens, query)
                if shared > best:
                    best, best_key = shared, key
            if best < self.min_tokens or best_key is None:
                return 0, None
            self._entries.move_to_end(best_key)
            entry = self._entries[best_key]
            self.hits += 1
            self.reused_tokens += best
            return best, [(keys[..., :best, :], values[..., :best, :]) for keys, values in entry.rows]

    def store(self, tokens, rows: Rows) -> None:
        """Keep copies of `rows`, the rows of `tokens` (one per token per layer).  A cached
        sequence that `tokens` extends is dropped (the new one gives all it gave); one that
        extends `tokens` makes storing them needless."""
        tokens = torch.as_tensor(list(tokens), dtype=torch.long)
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
            self._entries[self._next_key] = _Entry(tokens, copied, nbytes)
            self._next_key += 1
            self.nbytes += nbytes

    def _held_or_superseded(self, tokens: torch.Tensor) -> bool:
        """Whether `tokens` are held already, as themselves or within a longer sequence (that
        entry then counts as used); else the entries they extend are dropped (called holding
        the lock)."""
        for key, entry in list(self._entries.items()):
            shared = _shared_prefix(entry.tokens, tokens)
            if shared == len(tokens):
                self._entries.move_to_end(key)
                return True
            if shared == len(entry.tokens):
                self._drop(key)
        return False

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0

    def _drop(self, key: int) -> None:
        self.nbytes -= self._entries.pop(key).nbytes


def _shared_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many first tokens `a` and `b` share."""
    n = min(len(a), len(b))
    differs = (a[:n] != b[:n]).nonzero()
    return int(differs[0]) if len(differs) else n
