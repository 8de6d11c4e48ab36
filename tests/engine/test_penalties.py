"""Logit bias and the presence, frequency and repetition penalties through the engine.

A penalty makes the target's law at a tree node depend on the drafted tokens on the node's
path, so these tests check what exactness means then: greedy decoding equals HF's own
`generate(repetition_penalty=...)` and a plain autoregressive loop that applies the
definitions by hand, for every verifier; and sampled sequences follow the law computed by
enumeration (chi-square, fixed seeds)."""

from __future__ import annotations

import itertools

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import TreeShape
from rayspec.verify import available_verifiers
from rayspec.verify.processing import SamplingParams
from tests.engine.test_engine import VERIFIER_TREES
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, tiny_llama
from tests.verify.test_processing import _penalised_by_hand

PENALTIES = dict(presence_penalty=0.6, frequency_penalty=0.4, repetition_penalty=1.3, logit_bias={7: 2.0, 52: -100.0})


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, seed=0)
    return target, noisy_copy(target, noise=0.05)


def _next_logits(model, tokens: list[int]) -> list[float]:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].tolist()


def greedy_by_hand(model, prompt: list[int], length: int, params: SamplingParams) -> list[int]:
    """Autoregressive greedy decoding with the whole sequence re-run at each token (no cache)."""
    completion = []
    for _ in range(length):
        adjusted = _penalised_by_hand(_next_logits(model, prompt + completion), prompt, completion, params)
        completion.append(max(range(len(adjusted)), key=adjusted.__getitem__))
    return completion


def test_greedy_with_a_repetition_penalty_equals_hf_generate_for_every_verifier(pair):
    target, drafter = pair
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        hf = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, pad_token_id=0,
                             repetition_penalty=1.5)[0, len(prompt):].tolist()
    plain = SpeculativeEngine(LocalTarget(target)).run(prompt, max_new_tokens=24, temperature=0).tokens
    assert hf != plain, "the penalty must change the output for this test to mean anything"
    for name in available_verifiers():
        engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
        out = engine.run(prompt, max_new_tokens=24, temperature=0, repetition_penalty=1.5)
        assert out.tokens == hf, name
        assert out.stats.tokens_per_step > 1.5, f"{name}: drafts should still be accepted under the penalty"


@pytest.mark.parametrize("name", ["greedy", "rrsw", "sps", "gumbel", "spectr"])
def test_greedy_with_every_penalty_and_a_bias_equals_the_definitions_applied_by_hand(pair, name):
    target, drafter = pair
    params = SamplingParams(0.0, **PENALTIES)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    for prompt in ([3, 1, 4, 1, 5], [60], [7, 7, 7, 7]):
        expected = greedy_by_hand(target, prompt, 20, params)
        assert engine.run(prompt, max_new_tokens=20, temperature=0, **PENALTIES).tokens == expected, (name, prompt)
        assert 52 not in expected


def test_dynamic_trees_verified_by_topk_follow_the_penalised_greedy_law(pair):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="topk", tree="dynamic:8x3x2")
    expected = greedy_by_hand(target, [3, 1, 4], 16, SamplingParams(0.0, **PENALTIES))
    assert engine.run([3, 1, 4], max_new_tokens=16, temperature=0, **PENALTIES).tokens == expected


def test_a_bias_outside_the_vocabulary_or_a_bad_penalty_is_refused(pair):
    engine = SpeculativeEngine(LocalTarget(pair[0]), LocalDrafter(pair[1]), verifier="rrsw", tree="kary:2x2")
    with pytest.raises(ValueError, match="logit_bias names token 64, outside the vocabulary of 64 tokens"):
        list(engine.generate([1, 2], max_new_tokens=4, logit_bias={64: 1.0}))
    with pytest.raises(ValueError, match="presence_penalty must be in"):
        list(engine.generate([1, 2], max_new_tokens=4, presence_penalty=-3))


@pytest.mark.parametrize("verifier", ["gumbel", "minhash"])
def test_with_penalties_a_couplings_output_still_does_not_depend_on_the_drafter(pair, verifier):
    """The target penalises each node's law given the node's own path, which is the emitted
    text when the walk gets there: so a seed gives the same tokens whatever drafted, or
    whether anything did (the low-communication protocol's promise)."""
    target, drafter = pair
    other = noisy_copy(target, noise=0.5, seed=7)
    outputs = []
    for draft_model, tree in [(drafter, "kary:2x3"), (other, "kary:2x2"), (None, None)]:
        engine = SpeculativeEngine(LocalTarget(target), draft_model and LocalDrafter(draft_model),
                                   verifier=verifier, tree=tree or "none")
        outputs.append(engine.run([2, 7, 1, 8], max_new_tokens=40, temperature=1.0, seed=11, **PENALTIES).tokens)
    plain = SpeculativeEngine(LocalTarget(target), verifier=verifier).run([2, 7, 1, 8], max_new_tokens=40, seed=11)
    assert outputs[0] == outputs[1] == outputs[2] != plain.tokens


# ------------------------------------------------------------------ the law when sampling

SAMPLED = dict(presence_penalty=0.9, frequency_penalty=0.5, repetition_penalty=1.4, logit_bias={3: 0.8})


@pytest.fixture(scope="module")
def small_pair():
    """Four tokens, so that three of them repeat often and the penalties move the law a lot."""
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    return target, noisy_copy(target, noise=0.8)


def penalised_law_of_first_tokens(model, prompt: list[int], length: int, params: SamplingParams) -> dict:
    law = {}
    for tokens in itertools.product(range(model.config.vocab_size), repeat=length):
        prob = 1.0
        for i, token in enumerate(tokens):
            completion = list(tokens[:i])
            adjusted = _penalised_by_hand(_next_logits(model, prompt + completion), prompt, completion, params)
            prob *= float(torch.softmax(torch.tensor(adjusted, dtype=torch.float64), -1)[token])
        law[tokens] = prob
    return law


# a sampling verifier; a coupling (whose tokens are target-only decoding's, above) and spechub,
# which reads the same processed laws, in `make test-all`
@pytest.mark.parametrize("name", ["rrsw", pytest.param("gumbel", marks=pytest.mark.slow),
                                  pytest.param("spechub", marks=pytest.mark.slow)])
def test_sampled_tokens_follow_the_penalised_law_end_to_end(small_pair, name):
    target, drafter = small_pair
    prompt = [0, 1, 2]
    law = penalised_law_of_first_tokens(target, prompt, 3, SamplingParams(**SAMPLED))
    unpenalised = penalised_law_of_first_tokens(target, prompt, 3, SamplingParams())
    assert max(abs(law[o] - unpenalised[o]) for o in law) > 0.05, "the penalties must move the law"
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    outs = [engine.run(prompt, max_new_tokens=3, seed=seed, **SAMPLED) for seed in range(2000)]
    deep = sum(s.accepted >= 2 for out in outs for s in out.stats.steps)
    assert deep >= 40, f"paths through drafted nodes (whose laws the penalties change) must occur often: {deep}"
    assert_frequencies_match([tuple(o.tokens) for o in outs], law, what=f"{name}: first 3 tokens with penalties")


@pytest.mark.parametrize("verifier, plan", [("topk", DynamicPlan(8, 3, 2)), ("greedy", TreeShape.kary(2, 2))])
def test_drafts_leave_out_a_banned_token(pair, verifier, plan):
    """Drafters draft from the biased law, so a banned token is not offered to the target."""
    drafter = LocalDrafter(pair[1])

    def drafted(params: SamplingParams) -> list[int]:
        session = drafter.open(SequenceSpec((3, 1, 4), params, 0, verifier))
        return session.draft(plan, None).tree.tokens[1:].tolist()

    banned = drafted(SamplingParams(0.0))[0]
    assert banned not in drafted(SamplingParams(0.0, logit_bias={banned: -100.0}))
