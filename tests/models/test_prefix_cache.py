"""Automatic prefix caching: the longest shared prefix is found among the cached sequences,
superseded and least recently used sequences make room, a cache started from cached rows
continues as a full prefill would (to rounding), and sessions report what they reused."""

from __future__ import annotations

import threading

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models import TreeLM
from rayspec.models.prefix_cache import PrefixCache
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
    assert (cache.lookups, cache.hits, cache.reused_tokens) == (3, 1, 21)


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
