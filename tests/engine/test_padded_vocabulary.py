"""A drafter and a target that share a tokenizer but pad their embeddings to different sizes
(Qwen2.5-0.5B's 151,936 rows against 7B's 152,064): the drafter's laws are fitted to the
target's width, and the output keeps the target's law, padding ids included — exactly for
the couplings (the same tokens as target-only decoding, for a seed), in law for the others,
and equal to the target's greedy decoding at T = 0 for every verifier."""

from __future__ import annotations

import math

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.engine.local import PADDING_LOGIT_GAP, fit_vocabulary
from rayspec.engine.pool import DrafterPool
from rayspec.tree.structure import TreeShape
from rayspec.verify import available_verifiers
from rayspec.verify.processing import SamplingParams, logits_to_probs
from tests.engine.test_engine import VERIFIER_TREES, exact_law_of_first_tokens
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, padded, tiny_llama, word_tokenizer

VOCAB, PADDING = 64, 8  # the tokenizer has 60 tokens: ids 60-71 are padding rows


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(vocab=VOCAB, seed=0)
    drafter = noisy_copy(target, noise=0.05)
    return {
        "target": target, "drafter": drafter,
        # the drafter padded beyond the target: its columns past the target's are cut
        "padded drafter": padded(drafter, PADDING),
        # the target padded beyond the drafter, emitting its padding ids often: the drafter
        # is then fed ids it has no row for
        "padded target": padded(target, PADDING, favoured=True),
    }


PAIRS = {"drafter padded": ("target", "padded drafter"), "target padded": ("padded target", "drafter")}


def _engines(models, pair: str, verifier: str, tree: str):
    target, drafter = (models[name] for name in PAIRS[pair])
    return (SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=verifier, tree=tree,
                              tokenizer=word_tokenizer(VOCAB - 4)),
            SpeculativeEngine(LocalTarget(target), None, verifier=verifier))


def test_fitted_logits_cut_the_drafters_padding_and_give_the_targets_no_mass():
    logits = torch.randn(3, 5)
    assert torch.equal(fit_vocabulary(logits, 5), logits)
    assert torch.equal(fit_vocabulary(logits, 3), logits[:, :3])
    wider = fit_vocabulary(logits, 7)
    assert torch.equal(wider[:, :5], logits)
    assert torch.equal(wider[:, 5:], (logits.amax(-1, keepdim=True) - PADDING_LOGIT_GAP).expand(3, 2))
    assert torch.equal(torch.softmax(wider, -1)[:, :5], torch.softmax(logits, -1))
    for dtype in (torch.float16, torch.bfloat16):  # still no mass, and finite, in half precision
        half = fit_vocabulary(logits.to(dtype), 7)
        assert bool(half.isfinite().all()) and bool((torch.softmax(half.float(), -1)[:, 5:] == 0).all())
    # A float16 overflow: the row's law is uniform over its +inf entries, the padding's not among them
    overflowed = fit_vocabulary(torch.tensor([[1.0, math.inf, 2.0, math.inf]]), 6)
    assert overflowed[0, 4:].tolist() == [2.0 - PADDING_LOGIT_GAP] * 2
    assert logits_to_probs(overflowed, SamplingParams(1.0)).tolist() == [[0.0, 0.5, 0.0, 0.5, 0.0, 0.0]]


@pytest.mark.parametrize("verifier", ["gumbel", "minhash"])
@pytest.mark.parametrize("pair", PAIRS)
def test_a_coupling_emits_the_targets_own_tokens_whatever_the_padding(models, pair, verifier):
    """Drafter-invariance makes the check exact: for a seed, target-only decoding's tokens."""
    speculative, target_only = _engines(models, pair, verifier, "kary:2x3")
    steps = emitted = padding_ids = 0
    for seed in range(4):
        out = speculative.run([1, 2, 3], max_new_tokens=40, temperature=1.0, seed=seed, ignore_eos=True)
        assert out.tokens == target_only.run([1, 2, 3], max_new_tokens=40, temperature=1.0, seed=seed,
                                             ignore_eos=True).tokens, (pair, seed)
        steps, emitted = steps + len(out.stats.steps), emitted + len(out.tokens)
        padding_ids += sum(t >= VOCAB for t in out.tokens)
    assert steps < 0.6 * emitted, "drafts must be accepted: the drafter drafts after the fitting"
    if pair == "target padded":
        assert padding_ids >= 5, "the drafter must have been fed ids past its rows"


@pytest.mark.parametrize("verifier", available_verifiers())
@pytest.mark.parametrize("pair", PAIRS)
def test_temperature_zero_equals_the_targets_greedy_decoding_for_every_verifier(models, pair, verifier):
    tree = VERIFIER_TREES[verifier]
    speculative, target_only = _engines(models, pair, verifier, tree)
    for prompt in ([1, 2, 3], [5, 9, 14, 20, 33]):
        out = speculative.run(prompt, max_new_tokens=24, temperature=0, ignore_eos=True)
        assert out.tokens == target_only.run(prompt, max_new_tokens=24, temperature=0, ignore_eos=True).tokens
        assert len(out.stats.steps) < len(out.tokens), "no draft was ever accepted: the test would be vacuous"


def _small_pair():
    """A 4-token target and a drafter far from it."""
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    return target, noisy_copy(target, noise=0.8)


def test_the_first_tokens_follow_a_padded_targets_law_padding_ids_included():
    """rrsw reads the drafter's rows: fitted to the target's width, its residuals keep the
    target's law; the padded target's padding ids (a sixth of its first tokens here) come out of
    the residual, and the drafter drafts on after them."""
    target, drafter = _small_pair()
    target = padded(target, 2, favoured=True)
    law = exact_law_of_first_tokens(target, [0, 1, 2], 2)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x2",
                               tokenizer=word_tokenizer(4))
    outs = [engine.run([0, 1, 2], max_new_tokens=2, temperature=1.0, seed=seed, ignore_eos=True)
            for seed in range(2000)]
    samples = [tuple(out.tokens) for out in outs]
    assert sum(len(out.stats.steps) < 2 for out in outs) >= 300, "drafts must be accepted"
    assert sum(sample[0] >= 4 for sample in samples) >= 200, "the drafter must draft after padding ids"
    assert_frequencies_match(samples, law, what="rrsw, target padded: first 2 tokens through the engine")


def test_a_drafter_padded_past_its_target_drafts_what_it_drafted_unpadded():
    """Its extra columns cut, its laws are the unpadded drafter's: rrsw, which reads them, gives
    the unpadded pair's tokens for each seed (whose law tests/engine/test_engine.py tests)."""
    target, drafter = _small_pair()
    unpadded = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x2")
    padded_drafter = SpeculativeEngine(LocalTarget(target), LocalDrafter(padded(drafter, 2)), verifier="rrsw",
                                       tree="kary:2x2", tokenizer=word_tokenizer(4))
    accepted = 0
    for seed in range(300):
        kwargs = dict(max_new_tokens=3, temperature=1.0, seed=seed, ignore_eos=True)
        out = padded_drafter.run([0, 1, 2], **kwargs)
        assert out.tokens == unpadded.run([0, 1, 2], **kwargs).tokens, seed
        accepted += sum(step.accepted for step in out.stats.steps)
    assert accepted >= 100, accepted


def test_a_drafter_of_another_tokenizer_or_with_no_tokenizer_to_check_is_refused(models):
    target, drafter = LocalTarget(models["target"]), LocalDrafter(models["padded drafter"])
    with pytest.raises(ValueError, match=r"the drafter's vocab_size \(72\) differs from the target's \(64\): give "
                                         r"the engine the target's tokenizer"):
        SpeculativeEngine(target, drafter)
    with pytest.raises(ValueError, match=r"differs from the target's \(64\), and the tokenizer has 66 tokens: a "
                                         r"drafter must share its target's tokenizer"):
        SpeculativeEngine(target, drafter, tokenizer=word_tokenizer(66))
    SpeculativeEngine(target, drafter, tree="kary:2x2", tokenizer=word_tokenizer(64))  # its ids in both
    # A larger drafter whose rows past the target's are tokens, not padding (GPT-2's 50,257 for
    # Llama 2's 32,000 of 32,000 tokens): its sizes are too far apart, or its tokenizer tells.
    with pytest.raises(ValueError, match=r"the drafter's vocab_size \(1100\) differs from the target's \(64\) by "
                                         r"more than padding rounds a vocabulary up \(1024 rows at most\)"):
        SpeculativeEngine(target, LocalDrafter(tiny_llama(vocab=1100)), tokenizer=word_tokenizer(64))
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the target's: 1 of 1 blocks of 64 "
                                         r"token ids name other tokens"):
        SpeculativeEngine(target, LocalDrafter(models["padded drafter"], word_tokenizer(60, prefix="w")),
                          tokenizer=word_tokenizer(60))
    SpeculativeEngine(target, LocalDrafter(models["padded drafter"], word_tokenizer(60)), tree="kary:2x2",
                      tokenizer=word_tokenizer(60))


def test_sessions_refuse_a_width_that_is_no_vocabulary_and_a_target_refuses_any_but_its_own(models):
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="vocab_size must be a whole number of tokens, 1 or more, or None"):
            SequenceSpec((1, 2), SamplingParams(1.0), 0, "rrsw", vocab_size=bad)
    spec = SequenceSpec((1, 2), SamplingParams(1.0), 0, "rrsw", vocab_size=VOCAB + PADDING)
    with pytest.raises(ValueError, match=r"the sequence's laws are 72 tokens wide; a target's are its vocabulary's "
                                         r"\(64\)"):
        LocalTarget(models["target"]).open(spec)
    # Before anything else: checking the parameters at a width off the wire took time and
    # memory in its size (a target worker built a set of 2^31 ids for a min_tokens request).
    wide = SequenceSpec((1, 2), SamplingParams(1.0, logit_bias={100: 1.0}), 0, "rrsw", vocab_size=VOCAB + PADDING)
    with pytest.raises(ValueError, match=r"^the sequence's laws are 72 tokens wide"):
        LocalTarget(models["target"]).open(wide)
    draft = LocalDrafter(models["drafter"]).open(spec).draft(TreeShape.kary(2, 2), None)
    assert draft.q_rows.shape[-1] == VOCAB + PADDING and bool((draft.q_rows[:, VOCAB:] == 0).all())
    assert int(draft.tree.tokens.max()) < VOCAB


@pytest.mark.parametrize("pair", PAIRS)
def test_sequoia_auto_calibrates_and_plans_for_a_padded_pair(models, pair):
    """sequoia:auto's calibration verifies the drafter's trees with the target, over the
    target's width (the drafter's own made its first verification fail).  On these tiny
    models it plans target-only steps, so the tokens are checked, not the acceptance."""
    speculative, target_only = _engines(models, pair, "gumbel", "sequoia:auto")
    out = speculative.run([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=5, ignore_eos=True)
    assert out.tokens == target_only.run([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=5,
                                         ignore_eos=True).tokens


@pytest.mark.parametrize("verifier", available_verifiers())
@pytest.mark.parametrize("asked", [dict(allowed_token_ids=[66, 67]),
                                   dict(allowed_token_ids=[66, 67], repetition_penalty=1.2),
                                   dict(allowed_token_ids=[5, 66], presence_penalty=1.0)])
def test_a_request_allowing_the_targets_padding_ids_alone_decodes_with_the_drafter(models, verifier, asked):
    """The drafter has no row for them: its law puts its mass there all the same (a row of
    -inf had none, and failed the request; a penalty's clamp made them drawable, then fed
    them to its embeddings past their end), and a drafted padding id is fed to it as token 0."""
    tree = "dynamic:12x3x8" if verifier == "topk" else VERIFIER_TREES[verifier]
    speculative, target_only = _engines(models, "target padded", verifier, tree)
    kwargs = dict(max_new_tokens=8, temperature=0.9, seed=1, ignore_eos=True, **asked)
    out = speculative.run([1, 66, 3], **kwargs)
    assert set(out.tokens) <= set(asked["allowed_token_ids"]) and len(out.tokens) == 8
    if verifier in ("gumbel", "minhash"):
        assert out.tokens == target_only.run([1, 66, 3], **kwargs).tokens
    greedy = dict(kwargs, temperature=0)
    assert speculative.run([1, 66, 3], **greedy).tokens == target_only.run([1, 66, 3], **greedy).tokens


def test_a_dynamic_tree_under_a_mask_forwards_no_id_past_the_drafters_rows():
    """Where a mask leaves fewer tokens than a level's top-k, top-k takes tokens of no mass too,
    padding ids among them (ids 131-138 of 200 here, past the drafter's 128)."""
    target = tiny_llama(vocab=128, seed=0)
    drafter, padded_target = noisy_copy(target, noise=0.05), padded(target, 72, favoured=True)
    engine = SpeculativeEngine(LocalTarget(padded_target), LocalDrafter(drafter), verifier="topk",
                               tree="dynamic:12x3x8", tokenizer=word_tokenizer(120))
    target_only = SpeculativeEngine(LocalTarget(padded_target), None, verifier="topk")
    for temperature in (0.9, 0):
        kwargs = dict(max_new_tokens=10, temperature=temperature, seed=1, ignore_eos=True, allowed_token_ids=[5, 6])
        out = engine.run([1, 2, 3], **kwargs)
        assert set(out.tokens) <= {5, 6} and len(out.tokens) == 10
    assert out.tokens == target_only.run([1, 2, 3], **kwargs).tokens


def test_a_pool_of_drafters_padded_differently_drafts_for_the_target(models):
    """Each takes sequences in turn, fitting its laws to the target's width; a member of another
    tokenizer is refused all the same."""
    pool = DrafterPool([LocalDrafter(models["drafter"]), LocalDrafter(padded(models["drafter"], 2 * PADDING))])
    engine = SpeculativeEngine(LocalTarget(models["padded target"]), pool, verifier="gumbel", tree="kary:2x3",
                               tokenizer=word_tokenizer(VOCAB - 4))
    target_only = SpeculativeEngine(LocalTarget(models["padded target"]), None, verifier="gumbel")
    for seed in range(4):  # the pool's two drafters in turn
        out = engine.run([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=seed, ignore_eos=True)
        assert out.tokens == target_only.run([1, 2, 3], max_new_tokens=30, temperature=1.0, seed=seed,
                                             ignore_eos=True).tokens
        assert len(out.stats.steps) < len(out.tokens)
    with pytest.raises(ValueError, match=r"the drafter's vocab_size \(56\) differs from the target's \(72\), and the "
                                         r"tokenizer has 60 tokens"):
        SpeculativeEngine(LocalTarget(models["padded target"]),
                          DrafterPool([LocalDrafter(models["drafter"]), LocalDrafter(tiny_llama(vocab=56))]),
                          tokenizer=word_tokenizer(VOCAB - 4))
