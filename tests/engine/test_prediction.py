"""A prediction of the completion (OpenAI's Predicted Outputs) drafted as chains: where the
completion stands in it and where it resumes after an edit; the first tokens follow the
target's law exactly whatever the prediction (chi-square against the exact law, verifiers
that read q and one that does not, with and without a drafter model); the greedy output is
the target's; an exact prediction takes ceil(n / (L + 1)) steps."""

from __future__ import annotations

import math
import re

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import DrafterBusy, Outcome, SequenceSpec
from rayspec.engine.prediction import GraftChoice, Prediction, prediction_chain
from rayspec.engine.calibrate import Costs
from rayspec.tree.planner import CostModel, MeasuredTimes
from rayspec.tree.structure import TreeShape
from rayspec.verify.processing import SamplingParams
from tests.engine.test_engine import exact_law_of_first_tokens
from tests.drafters import WatchedDrafter
from tests.stats import assert_frequencies_match
from tests.steps import uncut_steps
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


def test_a_prediction_longer_than_the_context_is_refused():
    """A prediction's token ids were taken however many (a text one is capped by its
    characters): more than the context holds is refused, as a prompt is."""
    engine = SpeculativeEngine(LocalTarget(tiny_llama(vocab=64, seed=0, context=32)), None)
    too_long = "the prediction has 33 tokens, more than the model's context of 32 tokens can hold"
    with pytest.raises(ValueError, match=f"^{too_long}$"):
        list(engine.generate([1, 2, 3], max_new_tokens=4, temperature=0, prediction=[5] * 33))
    assert len([t for c in engine.generate([1, 2, 3], max_new_tokens=4, temperature=0, prediction=[5] * 32)
                for t in c.tokens]) == 4


def test_a_prediction_in_a_chain_of_none_is_refused():
    """`chain:0` with a prediction names a chain of no predicted tokens: the prediction was
    silently never drafted (each step the drafter's trees, or none), where the README has
    `chain:N` set the chain's length."""
    engine = SpeculativeEngine(LocalTarget(tiny_llama(vocab=64, seed=0, context=32)), None)
    none = ("with a prediction the tree is a chain of predicted tokens: give chain:N (N at least 1) or no tree "
            "(chain:8), not 'chain:0'")
    with pytest.raises(ValueError, match=re.escape(none)):
        prediction_chain("chain:0")
    with pytest.raises(ValueError, match=re.escape(none)):
        list(engine.generate([1, 2, 3], max_new_tokens=4, temperature=0, tree="chain:0", prediction=[5, 6]))
    assert prediction_chain("chain:1") == TreeShape.chain(1)
    assert len(list(engine.generate([1, 2, 3], max_new_tokens=4, temperature=0, tree="chain:0"))) == 4  # no prediction


@pytest.fixture(scope="module")
def small():
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    return target, noisy_copy(target, noise=0.8), exact_law_of_first_tokens(target, [0, 1, 2], 3)


# sps as rrsw, drafting differently, and gumbel, whose tokens are target-only decoding's (below,
# exactly and in a tenth of the time): `make test-all` only, to keep `make test` short
@pytest.mark.parametrize("verifier, with_drafter", [("rrsw", True), ("rrsw", False),
                                                   pytest.param("gumbel", True, marks=pytest.mark.slow),
                                                   pytest.param("sps", True, marks=pytest.mark.slow)])
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


def test_a_couplings_tokens_with_a_prediction_are_target_only_decodings(small):
    """Right about a quarter of the time at each place, the prediction's drafts are taken or
    not; either way a seed gives the tokens decoding without drafts gives."""
    target, drafter, _ = small
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="gumbel", tree="chain:2")
    target_only = SpeculativeEngine(LocalTarget(target), None, verifier="gumbel")
    accepted = 0
    for seed in range(300):
        prediction = [(seed + i) % 4 for i in range(3)]
        out = engine.run([0, 1, 2], max_new_tokens=3, temperature=1.0, seed=seed, prediction=prediction)
        assert out.tokens == target_only.run([0, 1, 2], max_new_tokens=3, temperature=1.0, seed=seed).tokens, seed
        accepted += out.stats.steps[0].accepted > 0
    assert 30 <= accepted <= 290, accepted  # predictions taken and refused


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


class _OlderTarget:
    """A target whose sessions cannot verify a predicted chain (a worker that predates it)."""

    def __init__(self, target):
        self.target, self.verifies_predictions = target, False
        self.vocab_size, self.context_length, self.eos_token_ids = target.vocab_size, target.context_length, target.eos_token_ids

    def open(self, spec):
        return self.target.open(spec)


def test_above_temperature_0_the_drafters_tree_goes_beside_the_chain_and_serves_where_the_sample_leaves_it():
    target_model = tiny_llama(vocab=64, hidden=32, layers=2, seed=1)
    drafts = []  # for each tree drafted, the committed tokens and the root's q row
    target, drafter = LocalTarget(target_model), WatchedDrafter(
        LocalDrafter(noisy_copy(target_model, noise=0.5)),
        lambda session, _, draft: drafts.append((list(session.tokens), draft.q_rows[0].clone())))
    engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="kary:2x2")
    prompt = [3, 1, 4, 1, 5]
    greedy = engine.run(prompt, max_new_tokens=40, temperature=0.0, seed=0).tokens
    drafts.clear()
    steps = []  # this small random pair's samples soon leave the greedy path: several runs
    for seed in range(6):
        out = engine.run(prompt, max_new_tokens=40, temperature=0.5, seed=seed, prediction=greedy, tree="chain:4")
        steps += uncut_steps(out.stats.steps, 40, depth=4)
    grafted = [s for s in steps if s.drafted > 6]  # the chain beside the drafter's kary:2x2
    assert len(grafted) >= 6 and all(s.drafted - 6 in range(5) for s in steps)
    roots = [s.ranks[0] for s in grafted]
    assert 1 in roots and any(r > 1 for r in roots), roots  # the chain's head taken; refused, a drafted child
    # The drafter keeps the cache rows of its own nodes that were accepted, none of the chain's:
    # every tree's root law is the one a fresh drafter computes from the committed tokens.
    fresh = LocalDrafter(drafter.drafter.model)
    for committed, root_law in drafts:
        spec = SequenceSpec(tuple(committed), SamplingParams(temperature=0.5), 0, "rrsw")
        session = fresh.open(spec)
        assert torch.allclose(session.draft(TreeShape.kary(2, 1), None).q_rows[0], root_law, atol=2e-3)
        session.close()
    # A target that cannot verify a predicted chain is sent the chain alone, as at T = 0.
    older = SpeculativeEngine(_OlderTarget(target), drafter.drafter, verifier="rrsw", tree="kary:2x2")
    alone = older.run(prompt, max_new_tokens=40, temperature=0.5, seed=0, prediction=greedy, tree="chain:4")
    alone_steps = uncut_steps(alone.stats.steps, 40, depth=4)
    assert {s.drafted for s in alone_steps} <= {4, 6} and 4 in {s.drafted for s in alone_steps}


def test_a_drafter_refuses_to_draft_a_predicted_chain():
    session = LocalDrafter(tiny_llama(vocab=16, hidden=16, layers=1, seed=0)).open(
        SequenceSpec((1, 2), SamplingParams(), 0, "rrsw"))
    with pytest.raises(ValueError, match="a drafter drafts no predicted chain"):
        session.draft(TreeShape((-1, 0, 0), predicted=1), None)


def test_auto_grafting_weighs_the_tokens_a_graft_adds_against_what_it_costs():
    chain, drafter = TreeShape.chain(8), TreeShape.kary(2, 2)
    refused = Outcome([5], [], [0])  # the target refused the chain's head: one token
    taken = Outcome([5, 6, 7, 8], [1, 2, 3], [1, 1, 1, 0])

    def choice(target_seconds, draft_seconds=0.001, outcomes=()):
        grafting = GraftChoice("auto", CostModel(target_seconds=target_seconds, draft_seconds=draft_seconds))
        for outcome, grafted in outcomes:
            grafting.observe(outcome, grafted)
        return grafting

    flat = lambda n: 0.010  # noqa: E731 — a GPU's forward: more nodes cost nothing
    steep = lambda n: 0.001 * n  # a CPU's at this scale: every node costs
    # The head refused at every other step, the drafter's tree then giving 3 tokens.
    often = [(refused, True), (taken, True)] * 4 + [(Outcome([5, 9, 10], [2, 4], [2, 1, 0]), True)] * 4
    assert choice(flat, outcomes=often).grafts(chain, drafter)
    assert not choice(steep, outcomes=often).grafts(chain, drafter)
    # The head always taken: nothing to gain, so not even free nodes are worth the drafter's call.
    assert not choice(flat, outcomes=[(taken, False)] * 20).grafts(chain, drafter)
    # Without measured costs, tokens per step decide: a graft never gives fewer.
    assert GraftChoice("auto").grafts(chain, drafter)
    assert GraftChoice("always", CostModel(target_seconds=steep)).grafts(chain, drafter)
    assert not GraftChoice("never").grafts(chain, drafter)
    with pytest.raises(ValueError, match="graft_predictions must be one of auto, always, never, got 'sometimes'"):
        SpeculativeEngine(LocalTarget(tiny_llama(vocab=16, hidden=16, layers=1, seed=0)), graft_predictions="sometimes")


def test_auto_grafting_prices_a_grafted_tree_larger_than_any_measured():
    """A prediction's chain grafted beside a 127-node tree makes a tree of 131 nodes, past the
    largest measured (128): the choice refused it ("size 131 is outside the measured range"),
    failing unseeded requests mid-stream; it now prices it on the line through the two largest."""
    chain, drafter = TreeShape.chain(4), TreeShape.kary(2, 6)
    refused, taken = Outcome([5], [], [0]), Outcome([5, 6, 7, 8], [1, 2, 3], [1, 1, 1, 0])
    often = [(refused, True), (taken, True)] * 4 + [(Outcome([5, 9, 10], [2, 4], [2, 1, 0]), True)] * 4
    flat = CostModel(target_seconds=MeasuredTimes((1, 64, 128), (0.010, 0.010, 0.010)), draft_seconds=0.0001)
    steep = CostModel(target_seconds=MeasuredTimes((1, 64, 128), (0.001, 0.064, 0.128)), draft_seconds=0.0001)
    decisions = []
    for cost in (flat, steep):
        grafting = GraftChoice("auto", cost)
        for outcome, grafted in often:
            grafting.observe(outcome, grafted)
        decisions.append(grafting.grafts(chain, drafter))
    assert decisions == [True, False]
    assert steep.target(131) == pytest.approx(0.131) and flat.target(131) == pytest.approx(0.010)


def test_an_unseeded_prediction_beside_a_tree_of_the_largest_measured_size_decodes():
    target = tiny_llama(vocab=16, hidden=16, layers=1, seed=0)
    measured = MeasuredTimes((1, 2, 4, 8, 16, 32, 64, 128), (0.01,) * 8)
    costs = Costs(measured, MeasuredTimes((1, 32), (0.001, 0.002)), 0.0)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, 0.1, seed=1)), verifier="rrsw",
                               tree="kary:2x6", costs=costs)
    out = engine.run([3, 1, 4, 1, 5], max_new_tokens=8, temperature=0.5, prediction=[2, 3, 4, 5, 6])
    assert len(out.tokens) == 8


PROMPT = [3, 1, 4, 1, 5]


@pytest.fixture(scope="module")
def served():
    """A target, a drafter of it, and the target's greedy completion of PROMPT."""
    target_model = tiny_llama(vocab=64, hidden=32, layers=2, seed=1)
    target, drafter = LocalTarget(target_model), LocalDrafter(noisy_copy(target_model, noise=0.5))
    return target, drafter, SpeculativeEngine(target).run(PROMPT, max_new_tokens=30, temperature=0.0).tokens


class _FullDrafter:
    """A drafter with no room for another session (a worker at its session limit)."""

    def __init__(self, target):
        self.vocab_size, self.context_length, self.opens = target.vocab_size, target.context_length, 0

    def open(self, spec):
        self.opens += 1
        raise DrafterBusy("drafter full: 4 sessions open, the limit is 4")


def test_a_drafter_full_before_the_first_token_refuses_the_request_and_after_it_is_decoded_around(served):
    target, _, greedy = served
    drafter = _FullDrafter(target)
    engine = SpeculativeEngine(target, drafter, tree="kary:2x2")
    with pytest.raises(DrafterBusy, match="drafter full"):  # the service's capacity answer: nothing sent yet
        engine.run(PROMPT, max_new_tokens=30, temperature=0.0)
    # The prediction's chain drafts the first step; the drafter is first opened after it, with
    # the stream under way: the sequence decodes on target-only.
    edit = next(t for t in range(64) if t != greedy[4])
    out = engine.run(PROMPT, max_new_tokens=30, temperature=0.0, prediction=greedy[:4] + [edit], tree="chain:4")
    assert out.tokens == greedy and drafter.opens >= 2  # tried again now and then, as a lost drafter is
    assert out.stats.drafter_lost == "drafter full: 4 sessions open, the limit is 4"


class _CostlyDrafts:
    """Step costs (`rayspec.engine.calibrate.Costs`'s face) where a drafter's call takes a
    second and the target's forward 10 ms whatever its size: grafting never pays."""

    draft_base, target_per_sequence, draft_per_sequence = 1.0, 0.0, 0.0

    def target_for(self, verifier, temperature):
        return lambda nodes: 0.010

    def draft_seconds(self, width, verifier):
        return 1.0


def test_a_seeded_request_grafts_alike_whatever_costs_its_engine_measured(served):
    """A seed's tokens do not depend on the costs an engine happened to measure (none until a
    request needs them, and each process its own); a request that is not replayed weighs them."""
    target, drafter, greedy = served
    plain = SpeculativeEngine(target, drafter, tree="kary:2x2")
    costed = SpeculativeEngine(target, drafter, tree="kary:2x2", costs=_CostlyDrafts())
    request = dict(max_new_tokens=30, temperature=0.5, seed=3, prediction=greedy, tree="chain:4")
    grafted = 4 + 6  # the chain beside the drafter's kary:2x2
    seeded = plain.run(PROMPT, **request)
    assert grafted in {step.drafted for step in seeded.stats.steps}
    assert costed.run(PROMPT, **request).tokens == seeded.tokens
    unreplayed = {step.drafted for step in costed.run(PROMPT, **request, replayable=False).stats.steps}
    assert 4 in unreplayed and grafted not in unreplayed


@pytest.mark.parametrize("verifier", ["sps", "mentored"])
def test_a_single_draft_verifier_with_a_prediction_drafts_the_requests_chain(served, verifier):
    """`tree` names the prediction's chain; an engine whose trees branch cannot serve a
    verifier of one draft per node, so its drafter drafts that chain too."""
    target, drafter, greedy = served
    engine = SpeculativeEngine(target, drafter, tree="kary:2x2")
    edit = next(t for t in range(64) if t != greedy[8])
    prediction = greedy[:8] + [edit] * 3
    out = engine.run(PROMPT, max_new_tokens=30, temperature=0.0, verifier=verifier, prediction=prediction,
                     tree="chain:3")
    assert out.tokens == greedy
    assert {step.drafted for step in out.stats.steps} <= {0, 1, 2, 3} and len(out.stats.steps) < 30
    sampled = engine.run(PROMPT, max_new_tokens=30, temperature=0.8, seed=1, verifier=verifier,
                         prediction=prediction, tree="chain:3")
    assert len(sampled.tokens) == 30 and max(step.drafted for step in sampled.stats.steps) <= 6
    with pytest.raises(ValueError, match=f"verifier '{verifier}' takes at most 1 draft"):
        engine.run(PROMPT, max_new_tokens=4, verifier=verifier)  # no prediction: the engine's tree
