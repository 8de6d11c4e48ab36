"""Concurrent generations over one engine share their models' forwards (cross-request
batching) and lose nothing for it: each still follows the target's law exactly, greedy
decoding still gives the target's greedy tokens, and with batching off a seed's tokens under
load are those it gets alone, bit for bit."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from tests.engine.test_engine import exact_law_of_first_tokens
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, tiny_llama


def _slowed(model, seconds: float = 0.001):
    """Each forward of `model` lasts `seconds` longer: tiny models forward in well under a
    millisecond, so that without it the threads would rarely find the model busy."""
    inner = model.forward

    @functools.wraps(inner)  # TreeLM reads the names of the forward's arguments
    def forward(*args, **kwargs):
        time.sleep(seconds)
        return inner(*args, **kwargs)

    model.forward = forward
    return model


def _assert_shared(batcher, what: str) -> None:
    """A good part of the calls went in forwards with others, some of them four or more."""
    stats = batcher.stats
    assert stats.mean_batch >= 1.3 and max(stats.sizes) >= 4, f"{what}: forwards were rarely shared: {stats}"


def _run_concurrently(engine, requests: list[dict], threads: int = 8) -> list:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda request: engine.run(**request), requests))


@pytest.mark.parametrize("verifier, tree", [("rrsw", "kary:2x3"),
                                            pytest.param("sps", "chain:3", marks=pytest.mark.slow)])
def test_concurrent_generations_share_forwards_and_follow_the_target_law(verifier, tree):
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    law = exact_law_of_first_tokens(target, [0, 1, 2], 3)
    drafter = noisy_copy(target, noise=0.8)
    local_target, local_drafter = LocalTarget(_slowed(target)), LocalDrafter(_slowed(drafter))
    engine = SpeculativeEngine(local_target, local_drafter, verifier=verifier, tree=tree)
    outs = _run_concurrently(engine, [dict(prompt_ids=[0, 1, 2], max_new_tokens=3, temperature=1.0, seed=seed)
                                      for seed in range(1000)])
    _assert_shared(local_target.batcher, "target")
    _assert_shared(local_drafter.batcher, "drafter")
    steps = [step for out in outs for step in out.stats.steps]
    assert sum(step.accepted >= 2 for step in steps) >= 30, "deep paths must occur often enough to be tested"
    assert_frequencies_match([tuple(out.tokens) for out in outs], law,
                             what=f"{verifier}: first 3 tokens of concurrent, batched generations")


def test_concurrent_greedy_generations_give_the_targets_greedy_tokens():
    target = tiny_llama(vocab=64, seed=0)
    drafter = noisy_copy(target, noise=0.05)
    prompts = [[1 + i, 2, 3 + 2 * i][: 1 + i % 3] for i in range(16)]
    alone = SpeculativeEngine(LocalTarget(target))
    reference = [alone.run(p, max_new_tokens=20, temperature=0).tokens for p in prompts]
    local_target, local_drafter = LocalTarget(_slowed(target)), LocalDrafter(_slowed(drafter))
    engine = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3")
    # Every prompt at once: with 8 threads for 16 short generations the forwards shared were
    # 1.27-1.49 a batch on this VM, about the bar; all 16 at once share 1.8-2.9.
    outs = _run_concurrently(engine, [dict(prompt_ids=p, max_new_tokens=20, temperature=0) for p in prompts],
                             threads=len(prompts))
    assert [out.tokens for out in outs] == reference
    _assert_shared(local_target.batcher, "target")


def test_with_batching_off_a_seed_gives_its_tokens_alone_bit_for_bit_under_load():
    target = tiny_llama(seed=3)
    drafter = noisy_copy(target, seed=4)
    local_target = LocalTarget(_slowed(target), max_batch_sequences=1)
    local_drafter = LocalDrafter(_slowed(drafter), max_batch_sequences=1)
    engine = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x2")
    requests = [dict(prompt_ids=[1 + i, 7, 20 + i], max_new_tokens=12, temperature=0.8, seed=i) for i in range(6)]
    alone = [engine.run(**request).tokens for request in requests]
    together = [out.tokens for out in _run_concurrently(engine, requests, threads=6)]
    assert together == alone
    assert local_target.batcher.stats.sizes.keys() == {1}


def test_one_forward_runs_at_a_time_on_a_model_however_many_sequences_share_it():
    target = tiny_llama(seed=3)
    running = most = 0
    lock = threading.Lock()
    inner = target.forward

    @functools.wraps(inner)
    def counting(*args, **kwargs):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            time.sleep(0.002)
            return inner(*args, **kwargs)
        finally:
            with lock:
                running -= 1

    target.forward = counting
    local_target = LocalTarget(target)
    engine = SpeculativeEngine(local_target, LocalDrafter(noisy_copy(tiny_llama(seed=3), seed=4)), verifier="rrsw",
                               tree="kary:2x2")
    _run_concurrently(engine, [dict(prompt_ids=[1 + i, 7], max_new_tokens=10, temperature=0.8, seed=i)
                               for i in range(8)])
    assert most == 1
    assert local_target.batcher.stats.mean_batch > 1


def test_a_prompt_of_several_prefill_chunks_decodes_the_targets_greedy_tokens():
    target = tiny_llama(vocab=64, seed=0)
    drafter = noisy_copy(target, noise=0.05)
    prompt = [(7 * i + 3) % 64 for i in range(45)]
    reference = SpeculativeEngine(LocalTarget(target)).run(prompt, max_new_tokens=16, temperature=0).tokens
    engine = SpeculativeEngine(LocalTarget(target, prefill_chunk_tokens=8),
                               LocalDrafter(drafter, prefill_chunk_tokens=8), verifier="rrsw", tree="kary:2x2")
    assert engine.run(prompt, max_new_tokens=16, temperature=0).tokens == reference
