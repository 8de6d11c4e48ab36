"""Automatic prefix caching: the longest shared prefix is found among the cached sequences,
superseded and least recently used sequences make room, a cache started from cached rows
continues as a full prefill would (to rounding), and sessions report what they reused."""

from __future__ import annotations

import threading
from array import array

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models import TreeLM
from rayspec.models.prefix_cache import PrefixCache, _RadixIndex
from tests.tiny_models import noisy_copy, tiny_llama

LAYERS, HEADS, DIM = 2, 2, 4


def rows_of(tokens) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Fake rows whose every entry is the token's value: a slice's content names its tokens."""
    values = torch.tensor(tokens, dtype=torch.float32).view(1, 1, -1, 1).expand(1, HEADS, len(tokens), DIM)
    return [(values.clone(), -values.clone()) for _ in range(LAYERS)]


def nbytes(n: int) -> int:
    return LAYERS * 2 * HEADS * n * DIM * 4


def test_lookup_gives_the_longest_shared_prefix_and_its_rows():
    cache = PrefixCache(10**6, min_tokens=4)
    system = list(range(100, 120))
    cache.store(system + [1, 2, 3], rows_of(system + [1, 2, 3]))
    cache.store(system[:10] + [7] * 10, rows_of(system[:10] + [7] * 10))
    k, rows = cache.lookup(system + [1, 9, 9])  # shares 21 tokens with the first, 10 with the second
    assert k == 21 and len(rows) == LAYERS
    assert rows[0][0][0, 0, :, 0].tolist() == system + [1] and torch.equal(rows[1][1], -rows[1][0])
    assert cache.lookup([5, 6, 7, 8, 9]) == (0, None)
    assert cache.lookup(system[:3] + [0]) == (0, None)  # 3 shared tokens: fewer than min_tokens
    assert (cache.lookups, cache.hits, cache.queried_tokens, cache.reused_tokens) == (3, 1, 23 + 5 + 4, 21)


def test_a_longer_sequence_supersedes_its_prefix_and_a_shorter_one_is_not_stored_twice():
    cache = PrefixCache(10**6, min_tokens=2)
    cache.store([1, 2, 3], rows_of([1, 2, 3]))
    cache.store([1, 2, 3, 4, 5], rows_of([1, 2, 3, 4, 5]))  # a conversation's next turn
    assert len(cache) == 1 and cache.nbytes == nbytes(5)
    cache.store([1, 2], rows_of([1, 2]))
    assert len(cache) == 1 and cache.lookup([1, 2, 3, 4, 5, 6])[0] == 5


class _CopiedTogether(torch.Tensor):
    """Rows whose copy waits for the other thread's: both stores pass the check for a held
    sequence before either has stored."""

    meeting: threading.Barrier

    def clone(self, *args, **kwargs):
        _CopiedTogether.meeting.wait(timeout=10)
        return torch.Tensor.clone(self.as_subclass(torch.Tensor), *args, **kwargs)


@pytest.mark.parametrize("lengths", [(32, 20), (20, 32), (32, 32)])
def test_sequences_stored_at_once_are_stored_once(lengths):
    """Two sessions storing one prompt, or a prompt and its prefix, at the same moment."""
    cache = PrefixCache(10**6, min_tokens=2)
    tokens = list(range(100, 132))
    _CopiedTogether.meeting = threading.Barrier(2)
    stores = [threading.Thread(target=cache.store, args=(
        tokens[:n], [tuple(r.as_subclass(_CopiedTogether) for r in layer) for layer in rows_of(tokens[:n])][:1]))
        for n in lengths]
    for store in stores:
        store.start()
    for store in stores:
        store.join()
    assert len(cache) == 1 and cache.nbytes == nbytes(32) // LAYERS
    assert cache.lookup(tokens)[0] == 32


def test_least_recently_used_sequences_make_room_within_the_capacity():
    cache = PrefixCache(nbytes(8) * 2, min_tokens=2)
    a, b, c = [1] * 8, [2] * 8, [3] * 8
    cache.store(a, rows_of(a))
    cache.store(b, rows_of(b))
    assert cache.lookup(a + [0])[0] == 8  # a is used: b is now the least recent
    cache.store(c, rows_of(c))
    assert cache.nbytes == nbytes(8) * 2 and len(cache) == 2
    assert cache.lookup(b + [0]) == (0, None) and cache.lookup(a + [0])[0] == 8 and cache.lookup(c + [0])[0] == 8
    cache.store([4] * 20, rows_of([4] * 20))  # larger than the whole capacity: not kept
    assert len(cache) == 2 and cache.lookup([4] * 20) == (0, None)
    with pytest.raises(ValueError, match="non-negative number of bytes"):
        PrefixCache(-1)


class LoopedCache:
    """The cache's law written as a loop over its sequences, least recently used first: the
    oracle of its radix tree (`_RadixIndex`)."""

    def __init__(self, capacity_bytes: int, min_tokens: int):
        self.capacity, self.min_tokens, self.held = capacity_bytes, min_tokens, []

    @staticmethod
    def shared(a, b) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    def lookup(self, query) -> tuple[int, tuple | None]:
        best, found = 0, None
        for sequence in self.held:  # of those sharing as much, the most recently used
            if 0 < self.shared(sequence, query) >= best:
                best, found = self.shared(sequence, query), sequence
        if best < self.min_tokens:
            return 0, None
        self.held.remove(found)
        self.held.append(found)
        return best, found[:best]

    def store(self, tokens) -> None:
        if len(tokens) < self.min_tokens or nbytes(len(tokens)) > self.capacity:
            return
        holders = [sequence for sequence in self.held if self.shared(sequence, tokens) == len(tokens)]
        if holders:
            self.held.remove(holders[-1])
            self.held.append(holders[-1])
            return
        for sequence in list(self.held):
            if self.shared(sequence, tokens) == len(sequence):
                self.held.remove(sequence)
        while self.held and sum(nbytes(len(s)) for s in self.held) + nbytes(len(tokens)) > self.capacity:
            self.held.pop(0)
        self.held.append(tuple(tokens))


def held_in_order(cache: PrefixCache) -> list[tuple]:
    return [tuple(int(t) for t in entry.rows[0][0][0, 0, :, 0]) for entry in cache._entries.values()]


def assert_a_sound_tree(cache: PrefixCache) -> None:
    """Each cached sequence is the path to a leaf of its own; internal nodes (but the root)
    branch in two or more; each node names the most recently used sequence below it."""
    index = cache._index
    paths, last_use = {}, {}

    def visit(node, path) -> tuple[int, int]:  # (tick, key) of the most recent use below
        if node.key is not None:
            assert not node.children
            paths[node.key], last_use[node.key] = tuple(path + list(node.edge)), node.best_tick
            return node.best_tick, node.key
        assert node is index._root or len(node.children) >= 2
        for first, child in node.children.items():
            assert child.edge[0] == first and child.parent is node
        newest = max((visit(child, path + list(node.edge)) for child in node.children.values()), default=(-1, None))
        assert (node.best_tick, node.best_key) == newest
        return newest

    visit(index._root, [])
    assert set(paths) == set(index._leaves) == set(cache._entries)
    assert [paths[key] for key in cache._entries] == held_in_order(cache)
    assert sorted(cache._entries, key=last_use.get) == list(cache._entries)  # the tree's uses are the cache's


@pytest.mark.parametrize("seed", range(3))
def test_the_radix_tree_finds_what_a_loop_over_the_sequences_finds(seed):
    """Thousands of stores and lookups of short sequences over three tokens (many shared
    prefixes, ties, sequences extending others, evictions): every lookup's length and rows,
    and the sequences held in their order of use, are the loop's, and the tree stays sound."""
    generator = torch.Generator().manual_seed(seed)
    cache, looped = PrefixCache(nbytes(60), min_tokens=3), LoopedCache(nbytes(60), min_tokens=3)
    for step in range(6000):
        tokens = torch.randint(0, 3, (int(torch.randint(1, 14, (1,), generator=generator)),), generator=generator).tolist()
        if torch.rand(1, generator=generator) < 0.6:
            cache.store(tokens, rows_of(tokens))
            looped.store(tokens)
        else:
            k, rows = cache.lookup(tokens)
            want_k, want_tokens = looped.lookup(tokens)
            assert k == want_k
            assert (rows is None) == (want_tokens is None)
            if rows is not None:
                assert rows[0][0][0, 0, :, 0].tolist() == list(want_tokens)
        assert held_in_order(cache) == looped.held
        assert cache.nbytes == sum(nbytes(len(s)) for s in looped.held)
        if step % 50 == 0:
            assert_a_sound_tree(cache)
    assert_a_sound_tree(cache)


def test_a_dropped_sequence_is_named_by_no_node_of_the_tree():
    """A store drops the sequence it extends before it copies its rows, outside the lock: a
    lookup meanwhile must not be handed the dropped one (its rows are gone), though it was the
    most recently used below the node where the lookup ends."""
    index = _RadixIndex()
    for key, tail in enumerate([3, 4, 5]):
        index.add(key, array("q", [1, 2, tail]))
    index.touch(0)
    index.remove(0)
    assert index.longest(array("q", [1, 2, 9])) == (2, 2)
    index.remove(2)
    assert index.longest(array("q", [1, 2, 9])) == (2, 1) and index.holder_and_prefix(array("q", [1, 2])) == (1, None)
    index.remove(1)
    assert index.longest(array("q", [1, 2, 9])) == (0, None) and index._root.best_key is None


def test_stored_rows_are_copies_the_session_may_not_change():
    cache = PrefixCache(10**6, min_tokens=2)
    rows = rows_of([5, 6, 7])
    cache.store([5, 6, 7], rows)
    rows[0][0].fill_(0)
    assert cache.lookup([5, 6, 7, 8])[1][0][0][0, 0, :, 0].tolist() == [5, 6, 7]


def test_a_cache_started_from_a_prefix_continues_as_a_full_prefill():
    model = tiny_llama(vocab=96, layers=3, context=256)
    tokens = torch.randint(0, 96, (90,), generator=torch.Generator().manual_seed(0)).tolist()
    full = TreeLM(model)
    expected = full.prefill(tokens, last=4)
    first = TreeLM(model)
    first.prefill(tokens[:60])
    resumed = TreeLM(model)
    resumed.start_from([(keys[..., :50, :], values[..., :50, :]) for keys, values in first.committed_rows()])
    assert resumed.committed == resumed.cached == 50
    logits = resumed.prefill(tokens[50:], last=4)
    assert torch.allclose(logits, expected, atol=1e-5, rtol=0)
    for (keys, values), (full_keys, full_values) in zip(resumed.committed_rows(), full.committed_rows()):
        assert torch.allclose(keys, full_keys, atol=1e-5) and torch.allclose(values, full_values, atol=1e-5)
    with pytest.raises(ValueError, match="only when empty"):
        resumed.start_from(first.committed_rows())


def test_sessions_reuse_a_shared_prompt_and_report_it():
    """A second request sharing a long prefix is prefilled from where it ends, on both sides;
    greedy decoding gives the same tokens as without a cache; prompt log-probabilities, which
    need every prompt row's logits, are computed in full."""
    target, drafter = tiny_llama(vocab=96, layers=2, context=256), None
    drafter = noisy_copy(target, noise=0.3)
    system = torch.randint(0, 96, (64,), generator=torch.Generator().manual_seed(1)).tolist()
    cached = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="greedy", tree="kary:2x2")
    plain = SpeculativeEngine(LocalTarget(target, prefix_cache_mb=0), LocalDrafter(drafter, prefix_cache_mb=0),
                              verifier="greedy", tree="kary:2x2")
    for question in ([3, 4, 5], [6, 7], [3, 4, 5]):
        with_cache = cached.run(system + question, max_new_tokens=12, temperature=0)
        without = plain.run(system + question, max_new_tokens=12, temperature=0)
        assert with_cache.tokens == without.tokens
    assert plain.target.prefix_cache is None and plain.drafter.prefix_cache is None
    assert cached.target.prefix_cache.hits == 2 and cached.drafter.prefix_cache.hits == 2
    stats = cached.run(system + [9, 9], max_new_tokens=4, temperature=0).stats
    assert stats.cached_prompt_tokens == 64  # the system prompt; the target prefills all but the last token
    scored = cached.run(system + [9, 9], max_new_tokens=1, prompt_logprobs=0).stats
    assert scored.cached_prompt_tokens == 0
