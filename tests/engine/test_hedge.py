"""Steps that go on target-only while their draft is late (`rayspec.engine.hedge`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.hedge import DraftHedge, check_hedge_factor
from tests.faults import LateDrafter
from tests.steps import drafted_steps
from tests.tiny_models import noisy_copy, tiny_llama

PROMPT = [3, 9, 27, 17]


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, seed=0)
    return target, noisy_copy(target, noise=0.3)


def _against_waiting(pair, verifier: str, late: dict, **request):
    """(the run of an engine hedging over a drafter `LateDrafter(**late)` makes late, the tokens
    of one waiting for the punctual drafter)."""
    target, drafter = pair
    hedging = SpeculativeEngine(LocalTarget(target), LateDrafter(LocalDrafter(drafter), **late), verifier=verifier,
                                tree="kary:2x3", draft_hedge=3)
    waiting = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=verifier, tree="kary:2x3")
    return hedging.run(PROMPT, **request), waiting.run(PROMPT, **request).tokens


def test_gumbel_tokens_for_a_seed_are_the_same_hedged_or_waited_for(pair):
    """Drafter-invariant: a step without its draft draws the token it would have drawn."""
    run, waited = _against_waiting(pair, "gumbel", {"late": {8}}, max_new_tokens=64, temperature=0.8, seed=11)
    assert run.stats.hedged_steps >= 1  # the steps after call 8 (the rest, done within its 0.4 s)
    assert run.tokens == waited


def test_a_drafter_that_missed_steps_is_told_them_with_its_next_draft(pair):
    """A drafter that is the target itself, decoding greedily: every draft it makes from a
    state it was told right is accepted whole.  Call 6 is 60 ms late: some steps go on
    without it, then the drafter drafts again, told every token once and in order."""
    target, _ = pair
    late = LateDrafter(LocalDrafter(target), late={6}, delay=0.06)
    engine = SpeculativeEngine(LocalTarget(target), late, verifier="rrsw", tree="chain:3", draft_hedge=3)
    run = engine.run(PROMPT, max_new_tokens=100, temperature=0.0, ignore_eos=True)  # no seed: hedged
    alone = SpeculativeEngine(LocalTarget(target), None).run(PROMPT, max_new_tokens=100, temperature=0.0,
                                                            ignore_eos=True)
    assert run.tokens == alone.tokens
    drafted = drafted_steps(run.stats.steps, 100)
    hedged = drafted.index(False)
    assert run.stats.hedged_steps == drafted.count(False) >= 1 and any(drafted[hedged:])  # drafting resumed
    assert all(step.accepted == step.drafted for step in run.stats.steps)
    told = late.told[0]
    assert told == run.tokens[:len(told)] and len(told) > sum(s.emitted for s in run.stats.steps[:hedged + 1])


def test_a_seeded_request_of_a_drafter_dependent_verifier_waits_for_its_drafts(pair):
    """Its tokens for a seed must not depend on timing."""
    run, waited = _against_waiting(pair, "rrsw", {"late": {5}}, max_new_tokens=40, temperature=0.8, seed=5)
    assert run.stats.hedged_steps == 0
    assert run.tokens == waited


def test_a_late_draft_that_fails_loses_the_drafter_and_the_sequence_decodes_on(pair):
    # Failing after 50 ms: tens of steps go on meanwhile, and more after, which find it failed.
    run, waited = _against_waiting(pair, "gumbel", {"late": {6}, "fails": True, "delay": 0.05},
                                   max_new_tokens=110, temperature=0.8, seed=2, ignore_eos=True)
    assert run.stats.hedged_steps >= 1 and "did not answer" in run.stats.drafter_lost
    assert run.tokens == waited


def test_a_sequence_that_ends_with_a_draft_out_does_not_wait_for_it(pair):
    """Its session closes once the late draft is in, behind its back: a drafter that hangs
    holds up neither the steps nor the end."""
    target, drafter = pair
    late = LateDrafter(LocalDrafter(drafter), late={6}, delay=1.5)
    engine = SpeculativeEngine(LocalTarget(target), late, verifier="gumbel", tree="chain:2", draft_hedge=3)
    started = time.monotonic()
    run = engine.run(PROMPT, max_new_tokens=40, temperature=0.8, seed=1, ignore_eos=True)
    assert time.monotonic() - started < 1.0  # call 6 takes 1.5 s
    assert run.stats.hedged_steps >= 1 and len(run.tokens) == 40 and run.stats.drafter_lost is None
    assert (0, 6, "closed") not in late.calls  # still open under the late call
    time.sleep(1.7)
    assert late.calls[-2:] == [(0, 6, "drafted"), (0, 6, "closed")]


def test_the_deadline_follows_the_drafters_recent_drafts():
    hedge = DraftHedge(3, executor=None)
    for seconds in (0.010, 0.011, 0.009):
        hedge.seconds.append(seconds)
    assert hedge.deadline() is None  # too few drafts yet: waited for
    hedge.seconds.append(0.012)
    assert hedge.deadline() == pytest.approx(3 * 0.0105)
    hedge.seconds.clear()
    hedge.seconds.extend([0.001] * 4)
    assert hedge.deadline() == pytest.approx(0.001 + DraftHedge.MIN_SLACK)  # not a scheduler's hiccup


@pytest.mark.parametrize("factor", [1, 0.5, 0, -2, float("inf"), "3", True])
def test_a_hedge_factor_that_is_not_above_one_is_refused(factor, pair):
    with pytest.raises(ValueError, match="draft_hedge must be a number above 1"):
        check_hedge_factor(factor)
    target, drafter = pair
    with pytest.raises(ValueError, match="draft_hedge"):
        SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), draft_hedge=factor)


def test_a_drafter_grown_slower_for_good_is_soon_waited_for_again():
    """Drafts of 1 ms, then of 30 ms for good: the first slow ones are left behind, then their
    times raise the median, and the drafts are waited for again."""
    class Session:
        calls = 0

        def draft(self, shape, previous):
            self.calls += 1
            time.sleep(0.001 if self.calls <= 6 else 0.03)
            return "a draft"

    hedge, session = DraftHedge(3, ThreadPoolExecutor(max_workers=1)), Session()
    answers = []
    while session.calls < 30:
        drafted, _ = hedge.draft(session, None, None)
        answers.append(drafted is not None)
        time.sleep(0.005)  # a target-only step
    assert not all(answers[6:]), "the first slow drafts must be left behind"
    assert all(answers[-5:]), f"slow drafts are waited for again once the median has risen: {answers}"


def test_closing_an_engine_lets_its_hedge_threads_go_and_it_can_be_used_again(pair):
    import threading
    import time

    def hedge_threads():
        return {t for t in threading.enumerate() if t.name.startswith("rayspec-draft")}

    target, drafter = pair
    others = hedge_threads()  # other engines' (earlier tests'), which stay
    with SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="gumbel", tree="chain:2",
                           draft_hedge=3) as engine:
        first = engine.run(PROMPT, max_new_tokens=40, temperature=0.8, seed=2).tokens
        own = hedge_threads() - others  # drafts waited on with a deadline once their times are known
        assert own
    deadline = time.monotonic() + 10
    while own & hedge_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not own & hedge_threads()
    assert engine.run(PROMPT, max_new_tokens=40, temperature=0.8, seed=2).tokens == first
    engine.close()
