"""Several drafters serving one target (`DrafterPool`): which drafter a sequence gets, and what
that means for a seed's tokens."""

from __future__ import annotations

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.pool import DrafterPool
from tests.tiny_models import noisy_copy, tiny_llama

PROMPT = [1, 2, 3]


class _CountedDrafter(LocalDrafter):
    def __init__(self, model):
        super().__init__(model)
        self.opened = 0

    def open(self, spec):
        self.opened += 1
        return super().open(spec)


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(vocab=64, seed=0)
    # Two different drafters: their drafts, and so (but for the couplings) a seed's tokens, differ.
    return target, noisy_copy(target, noise=0.05, seed=1), noisy_copy(target, noise=0.3, seed=2)


@pytest.mark.parametrize("verifier, tree", [("rrsw", "kary:2x3"), ("spectr", "kary:3x2"), ("spechub", "kary:2x3"),
                                            ("is", "kary:3x2")])
def test_a_seed_gives_its_tokens_whatever_the_pool_served_before(models, verifier, tree):
    """A seeded request drafts with the drafter its seed names, not the next in turn: round robin
    gave seed 5 one drafter's tokens on the first request and the other's on the second."""
    target, *drafters = models
    pool = DrafterPool([LocalDrafter(d) for d in drafters])
    engine = SpeculativeEngine(LocalTarget(target), pool, verifier=verifier, tree=tree)
    request = dict(max_new_tokens=24, temperature=1.0, seed=5, ignore_eos=True)
    first = engine.run(PROMPT, **request).tokens
    assert engine.run(PROMPT, **request).tokens == first
    engine.run(PROMPT, **{**request, "seed": 6})
    engine.run(PROMPT, **{**request, "seed": None})
    assert engine.run(PROMPT, **request).tokens == first
    # Each seed's drafter is the same in every process: the in-process engine of that drafter.
    alone = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafters[5 % 2]), verifier=verifier, tree=tree)
    assert alone.run(PROMPT, **request).tokens == first


def test_seeded_requests_spread_by_seed_and_unseeded_ones_in_turn(models):
    """Choice i of an `n` request is seeded seed + i: its choices go to the drafters in turn, as
    requests with those seeds would; unseeded requests still take the drafters in turn."""
    target, *drafters = models
    counted = [_CountedDrafter(d) for d in drafters]
    engine = SpeculativeEngine(LocalTarget(target), DrafterPool(counted), verifier="rrsw", tree="kary:2x2")
    for seed in (10, 11, 12, 13):
        engine.run(PROMPT, max_new_tokens=4, seed=seed)
    assert [d.opened for d in counted] == [2, 2]
    for _ in range(4):
        engine.run(PROMPT, max_new_tokens=4, seed=None)
    assert [d.opened for d in counted] == [4, 4]
    engine.run(PROMPT, max_new_tokens=4, seed=7)
    engine.run(PROMPT, max_new_tokens=4, seed=-3)  # a negative seed names a drafter too
    assert [d.opened for d in counted] == [4, 6]
