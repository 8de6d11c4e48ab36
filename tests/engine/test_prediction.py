"""A prediction of the completion (OpenAI's Predicted Outputs) drafted as chains: where the
completion stands in it and where it resumes after an edit; the first tokens follow the
target's law exactly whatever the prediction (chi-square against the exact law, verifiers
that read q and one that does not, with and without a drafter model); the greedy output is
the target's; an exact prediction takes ceil(n / (L + 1)) steps."""

from __future__ import annotations

import math

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.engine.prediction import Prediction, prediction_chain
from rayspec.tree.structure import TreeShape
from rayspec.verify.processing import SamplingParams
from tests.engine.test_engine import exact_law_of_first_tokens
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, tiny_llama


def _prediction(tokens, verifier="rrsw", prompt=(1, 2)) -> Prediction:
    return Prediction(tokens, SequenceSpec(prompt, SamplingParams(), 0, verifier), vocab_size=100)


def test_the_chain_follows_the_completion_and_resumes_after_an_edit():
    predicted = _prediction([10, 11, 12, 13, 14, 15, 16, 17])
    first = predicted.draft(3)
    assert first.tree.tokens.tolist() == [2, 10, 11, 12] and first.tree.shape == TreeShape.chain(3)
    assert first.q_rows.shape == (3, 100) and first.q_rows.argmax(-1).tolist() == [10, 11, 12]
    assert first.q_rows.sum(-1).tolist() == [1.0, 1.0, 1.0]  # point masses: the drafts' laws
    predicted.follow([10, 11])
    assert predicted.draft(3).tree.tokens.tolist() == [11, 12, 13, 14]
    predicted.follow([12, 99])  # an edit: lost until the completion's end recurs in the prediction
    assert predicted.draft(3) is None
    predicted.follow([98, 14])  # one token in common is not enough to resume
    assert predicted.draft(3) is None
    predicted.follow([15])  # "14 15" recurs: resume after it
    assert predicted.draft(8).tree.tokens.tolist() == [15, 16, 17]
    predicted.follow([16, 17])
    assert predicted.draft(3) is None  # past the prediction's end


def test_resuming_prefers_the_longest_recurrence_then_the_first_after_where_it_left():
    predicted = _prediction([5, 6, 7, 1, 2, 5, 6, 8, 5, 6, 9])
    predicted.follow([5, 6, 7])  # followed to position 3
    predicted.follow([0, 5, 6])  # "5 6" at 0, 5 and 8; "0 5 6" nowhere: the first at or after 3
    assert predicted.draft(1).tree.tokens.tolist() == [6, 8]
    predicted = _prediction([1, 5, 6, 7, 3, 5, 6, 8])
    predicted.follow([4, 5, 6])  # lost from the start; "4 5 6" nowhere, "5 6" first at 1
    assert predicted.draft(2).tree.tokens.tolist() == [6, 7, 3]
    predicted.follow([7, 3, 9, 3, 5, 6])  # "3 5 6" recurs at 4: longer beats earlier
    assert predicted.draft(2).tree.tokens.tolist() == [6, 8]


def test_a_verifier_that_never_reads_q_gets_no_rows_and_bad_predictions_are_refused():
    assert _prediction([3, 4], verifier="gumbel").draft(2).q_rows is None
    with pytest.raises(ValueError, match="prediction token ids out of the vocabulary"):
        _prediction([3, 400])
    with pytest.raises(ValueError, match="at least one token"):
        _prediction([])
    assert prediction_chain(None) == TreeShape.chain(8) and prediction_chain("chain:3") == TreeShape.chain(3)
    for tree in ("kary:2x3", "sequoia:32", "dynamic:8x3x2"):
        with pytest.raises(ValueError, match="with a prediction the tree is a chain of predicted tokens"):
            prediction_chain(tree)


@pytest.fixture(scope="module")
def small():
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    return target, noisy_copy(target, noise=0.8), exact_law_of_first_tokens(target, [0, 1, 2], 3)


@pytest.mark.parametrize("verifier, with_drafter", [("rrsw", True), ("rrsw", False), ("gumbel", True), ("sps", True)])
def test_the_first_tokens_follow_the_target_whatever_the_prediction(small, verifier, with_drafter):
    target, drafter, law = small
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter) if with_drafter else None, verifier=verifier,
                               tree="chain:2")
    samples, accepted, rejected = [], 0, 0
    for seed in range(2500):
        prediction = [(seed + i) % 4 for i in range(3)]  # right about a quarter of the time at each place
        out = engine.run([0, 1, 2], max_new_tokens=3, temperature=1.0, seed=seed, prediction=prediction)
        samples.append(tuple(out.tokens))
        first = out.stats.steps[0]
        accepted += first.accepted > 0
        rejected += first.accepted < first.drafted
    assert accepted >= 200 and rejected >= 200, (accepted, rejected)  # both ways are exercised
    assert_frequencies_match(samples, law, what=f"{verifier}, prediction drafts, drafter {with_drafter}")


def test_greedy_output_is_the_targets_and_an_exact_prediction_takes_few_steps():
    target = tiny_llama(vocab=64, hidden=32, layers=2, seed=1)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, noise=0.5)), tree="kary:2x2")
    prompt, n = [3, 1, 4, 1, 5], 40
    plain = engine.run(prompt, max_new_tokens=n, temperature=0.0, seed=0)
    edited = plain.tokens[:15] + [7, 7, 7] + plain.tokens[18:]
    for prediction in (plain.tokens, edited, [9, 9, 9, 9], plain.tokens[5:]):
        out = engine.run(prompt, max_new_tokens=n, temperature=0.0, seed=0, prediction=prediction, tree="chain:4")
        assert out.tokens == plain.tokens
    exact = engine.run(prompt, max_new_tokens=n, temperature=0.0, seed=0, prediction=plain.tokens, tree="chain:4")
    assert len(exact.stats.steps) == math.ceil(n / 5) < len(plain.stats.steps)
    assert all(s.drafted == 4 and s.accepted == 4 for s in exact.stats.steps[:-1])
    with pytest.raises(ValueError, match="with a prediction the tree is a chain"):
        engine.run(prompt, max_new_tokens=4, prediction=[1], tree="kary:2x2")
