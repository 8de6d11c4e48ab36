"""Log-probabilities of the emitted tokens: for every verifier and tree, each token's is the
target's raw law at its position, as a plain forward over the finished sequence gives it, and
asking for them changes no token."""

from __future__ import annotations

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.verify import available_verifiers
from tests.engine.test_engine import VERIFIER_TREES
from tests.tiny_models import noisy_copy, tiny_llama

PROMPT = [5, 9, 14, 20, 33]


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, seed=0)
    return target, noisy_copy(target, noise=0.05)


def plain_log_probs(target, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens), V]: the target's log-softmax at each completion token's position, from one
    forward over the whole sequence (no cache, no tree)."""
    with torch.no_grad():
        logits = target(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1)


def assert_logprobs_of(target, prompt, chunks, top: int) -> None:
    tokens = [t for c in chunks for t in c.tokens]
    assert all(len(c.logprobs) == len(c.tokens) for c in chunks)
    chosen = [v for c in chunks for v in c.logprobs.chosen]
    top_ids = [row for c in chunks for row in c.logprobs.top_ids]
    top_values = [row for c in chunks for row in c.logprobs.top_values]
    oracle = plain_log_probs(target, prompt, tokens)
    assert torch.tensor(chosen) == pytest.approx(oracle.gather(-1, torch.tensor(tokens)[:, None])[:, 0], abs=1e-4)
    assert torch.tensor(top_values) == pytest.approx(oracle.topk(top, -1).values, abs=1e-4)
    # the ids name those values (ties aside, they are the oracle's top ids)
    assert torch.tensor(top_values) == pytest.approx(oracle.gather(-1, torch.tensor(top_ids)), abs=1e-4)


@pytest.mark.parametrize("name", available_verifiers())
def test_every_verifier_gives_the_targets_raw_log_probabilities_and_the_same_tokens(pair, name):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    temperature = 0.0 if name == "greedy" else 0.8
    kwargs = dict(max_new_tokens=30, temperature=temperature, seed=4)
    chunks = list(engine.generate(PROMPT, logprobs=3, **kwargs))
    assert [t for c in chunks for t in c.tokens] == engine.run(PROMPT, **kwargs).tokens
    assert max(len(c.tokens) for c in chunks) > 1  # drafts were accepted: paths deeper than the root
    assert_logprobs_of(target, PROMPT, chunks, top=3)


@pytest.mark.parametrize("sampling", [dict(temperature=0.5, top_k=4, top_p=0.7), dict(temperature=1.3)])
def test_the_log_probabilities_are_of_the_raw_law_whatever_the_sampling(pair, sampling):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3")
    chunks = list(engine.generate(PROMPT, max_new_tokens=24, seed=1, logprobs=5, **sampling))
    assert_logprobs_of(target, PROMPT, chunks, top=5)


def test_target_only_decoding_and_logprobs_zero_give_the_chosen_tokens_only(pair):
    target = pair[0]
    chunks = list(SpeculativeEngine(LocalTarget(target)).generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=2,
                                                                   logprobs=0))
    assert all(c.logprobs.top_ids == [[]] * len(c.tokens) for c in chunks)
    assert_logprobs_of(target, PROMPT, chunks, top=0)


def test_a_step_cut_by_a_stop_token_or_max_tokens_keeps_the_log_probabilities_of_its_tokens(pair):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3")
    full = engine.run(PROMPT, max_new_tokens=40, temperature=0.8, seed=6).tokens
    stop = next(t for i, t in enumerate(full) if i >= 5 and t not in full[:i])  # a token first emitted mid-step, or later
    cut = list(engine.generate(PROMPT, max_new_tokens=40, temperature=0.8, seed=6, stop=[stop], logprobs=2))
    assert [t for c in cut for t in c.tokens] == full[: full.index(stop)] and cut[-1].finish_reason == "stop"
    assert_logprobs_of(target, PROMPT, cut, top=2)
    short = list(engine.generate(PROMPT, max_new_tokens=7, temperature=0.8, seed=6, logprobs=2))
    assert sum(len(c.tokens) for c in short) == 7
    assert_logprobs_of(target, PROMPT, short, top=2)


@pytest.mark.parametrize("logprobs", [-1, 21])
def test_logprobs_out_of_range_are_refused_with_a_message(pair, logprobs):
    engine = SpeculativeEngine(LocalTarget(pair[0]))
    with pytest.raises(ValueError, match="logprobs must be between 0 and 20"):
        next(engine.generate(PROMPT, logprobs=logprobs))
