"""Step costs for the planner: the per-sequence load terms measured with sessions at once."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.calibrate import (
    CALIBRATION_VERIFIER, CHAIN_WALK_SIZES, COOL_TEMPERATURE, WALK_SIZES, Costs, _parallel_chains, measure_costs,
)
from rayspec.engine.engine import resolve_priced_verifiers
from rayspec.engine.interfaces import DrafterUnavailable, Outcome
from rayspec.engine.policy import step_cost_model
from rayspec.tree.planner import MeasuredTimes
from rayspec.tree.structure import TreeShape
from rayspec.verify import available_verifiers
from tests.tiny_models import noisy_copy, tiny_llama


class SleepingTarget:
    """A target whose verification sleeps `seconds` whatever the tree: with `serial`, its calls
    take turns (nothing shared: each other sequence adds a whole call), without, concurrent
    calls overlap (everything shared, as a perfectly batched forward)."""

    vocab_size, context_length, eos_token_ids = 64, 10_000, ()

    def __init__(self, seconds: float, serial: bool):
        self.seconds, self.lock = seconds, threading.Lock() if serial else None

    def open(self, spec):
        target = self

        class Session:
            def verify(self, draft):
                if target.lock is None:
                    time.sleep(target.seconds)
                else:
                    with target.lock:
                        time.sleep(target.seconds)
                return Outcome([1], [], [])

            def close(self):
                pass

        return Session()


def test_a_call_batching_shares_nothing_of_costs_each_other_sequence_a_whole_call():
    serial = measure_costs(SleepingTarget(0.01, serial=True), sizes=(1, 2, 4, 8), repeats=3)
    shared = measure_costs(SleepingTarget(0.01, serial=False), sizes=(1, 2, 4, 8), repeats=3)
    assert serial.target_per_sequence == pytest.approx(0.01, rel=0.5)
    assert shared.target_per_sequence < 0.003
    unloaded = measure_costs(SleepingTarget(0.01, serial=True), sizes=(1, 2), repeats=1, load_sequences=1)
    assert unloaded.target_per_sequence == 0.0


def test_the_demo_sized_calibration_measures_non_negative_load_terms_and_round_trips_them():
    target = tiny_llama(vocab=64, seed=0, context=256)
    costs = measure_costs(LocalTarget(target), LocalDrafter(noisy_copy(target)), sizes=(1, 2, 4, 8),
                          widths=(1, 2, 4), repeats=2)
    assert costs.target_per_sequence >= 0 and costs.draft_per_sequence >= 0
    assert Costs.from_json(costs.to_json()) == costs
    older = {key: value for key, value in costs.to_json().items() if "per_sequence" not in key}
    assert Costs.from_json(older).target_per_sequence == 0.0  # costs from a coordinator predating load terms
    assert costs.draft_seconds(8) == pytest.approx(costs.draft_level.extrapolated(8))  # past the widest measured


@pytest.mark.parametrize("target_context, drafter_context", [(64, 64), (128, 24), (66, 66)])
def test_models_of_small_contexts_are_calibrated_within_them(target_context, drafter_context):
    """The calibration prompt fits the models' contexts, and so do the trees timed after it:
    its 64 tokens filled a context of 64 (and a 24-position drafter's), and left no room for the
    trees timed in one of 66, so that sequoia:auto failed at start-up with such models."""
    target = tiny_llama(vocab=64, seed=0, context=target_context)
    drafter = noisy_copy(tiny_llama(vocab=64, seed=0, context=drafter_context))
    costs = measure_costs(LocalTarget(target), LocalDrafter(drafter), sizes=(1, 2, 4, 8), widths=(1, 2), repeats=1,
                          load_sequences=1, verifiers=[])
    assert costs.target.sizes == (1, 2, 4, 8) and costs.draft_level.sizes == (1, 2) and costs.walks["rrsw"].sizes


def test_costs_from_json_with_measured_times():
    costs = Costs(MeasuredTimes((1, 2), (0.01, 0.02)), MeasuredTimes((1,), (0.001,)), 0.0, 0.002, 0.0005)
    assert Costs.from_json(costs.to_json()) == costs


class RecordingTarget:
    """A local target that keeps every draft it is asked to verify."""

    def __init__(self, target):
        self.target, self.drafts = target, []
        self.vocab_size, self.context_length = target.vocab_size, target.context_length

    def open(self, spec):
        session, drafts = self.target.open(spec), self.drafts

        class Session:
            def verify(self, draft):
                drafts.append(draft)
                return session.verify(draft)

            def close(self):
                session.close()

        return Session()


def test_the_target_is_timed_on_trees_whose_walk_tries_two_children_per_level_not_every_node():
    model = tiny_llama(vocab=64, seed=0, context=512)
    recording = RecordingTarget(LocalTarget(model))
    measure_costs(recording, sizes=(1, 2, 4, 8, 32), repeats=1, load_sequences=1)
    sizes = {draft.tree.shape.size for draft in recording.drafts}
    assert sizes == {1, 2, 4, 8, 32}
    for draft in recording.drafts:
        shape = draft.tree.shape
        children = [shape.parents.count(node) for node in range(shape.size)]
        assert max(children) <= 2  # a star's root had size - 1
        internal = len(shape.internal_nodes)
        if internal == 0:
            assert draft.q_rows is None
        else:  # the draft law of every internal node, uniform
            assert draft.q_rows.shape == (internal, 64)
            assert torch.allclose(draft.q_rows, torch.full_like(draft.q_rows, 1 / 64))
            assert draft.q_divisors.shape == (internal,)  # half precision, as a drafter ships them
    widest = max(recording.drafts, key=lambda draft: draft.tree.shape.size).tree.shape
    assert widest.max_depth == 5  # 32 nodes filled level by level: 1 + 2 + 4 + 8 + 16, and one more


def _priced_costs() -> Costs:
    return Costs(
        MeasuredTimes((1, 4, 16, 64), (0.010, 0.012, 0.016, 0.030)),
        MeasuredTimes((1, 4, 16), (0.001, 0.002, 0.004)), 0.0005,
        walks={"is": MeasuredTimes((1, 4, 16, 64), (0.0003, 0.003, 0.007, 0.015)),
               CALIBRATION_VERIFIER: MeasuredTimes((1, 4, 16, 64), (0.0002, 0.0012, 0.0015, 0.0020))},
        verifier_levels={"minhash": MeasuredTimes((1, 4, 16), (0.003, 0.006, 0.012))},
        calibration_walk=MeasuredTimes((1, 4, 16, 64), (0.0002, 0.0010, 0.0011, 0.0012)),
        cool_walks={"is": MeasuredTimes((1, 4, 16, 64), (0.0003, 0.005, 0.011, 0.031))},
    )


def test_a_verifier_is_priced_with_its_own_walk_in_place_of_the_calibration_trees_walk():
    costs = _priced_costs()
    priced = costs.target_for("is")
    assert priced.sizes == costs.target.sizes
    assert priced(1) == pytest.approx(0.010 - 0.0002 + 0.0003)  # target-only: the root's sample
    assert priced(4) == pytest.approx(0.012 - 0.0010 + 0.003)
    assert priced(16) == pytest.approx(0.016 - 0.0011 + 0.007)
    assert priced(64) == pytest.approx(0.030 - 0.0012 + 0.015)
    # the calibration verifier too: its walk on speculative steps, not on the calibration's random trees
    assert costs.target_for(CALIBRATION_VERIFIER)(64) == pytest.approx(0.030 - 0.0012 + 0.0020)
    assert costs.target_for("spectr") == costs.target  # no walk measured: priced as before
    model = step_cost_model(costs, "is", vocab_size=64)
    assert model.target_seconds(16) == pytest.approx(priced(16))


def test_a_walk_is_priced_at_the_request_s_temperature_between_the_two_timed():
    """Timed at T = 1 and at COOL_TEMPERATURE (0.5): mixed linearly between, the nearer outside."""
    costs = _priced_costs()
    assert COOL_TEMPERATURE == 0.5
    forward = 0.030 - 0.0012  # the 64-node target time without the calibration trees' walk
    assert costs.target_for("is", 1.0)(64) == pytest.approx(forward + 0.015) == costs.target_for("is")(64)
    assert costs.target_for("is", 0.5)(64) == pytest.approx(forward + 0.031)
    assert costs.target_for("is", 0.75)(64) == pytest.approx(forward + 0.023)  # halfway
    assert costs.target_for("is", 0.6)(16) == pytest.approx(0.016 - 0.0011 + 0.2 * 0.007 + 0.8 * 0.011)
    assert costs.target_for("is", 0.0)(64) == costs.target_for("is", 0.3)(64) == costs.target_for("is", 0.5)(64)
    assert costs.target_for("is", 1.5)(64) == costs.target_for("is", 1.0)(64)
    # a verifier with no cool walk timed (costs kept before 2026-11-28) is priced at T = 1's at any temperature
    assert costs.target_for(CALIBRATION_VERIFIER, 0.3) == costs.target_for(CALIBRATION_VERIFIER, 1.0)
    assert step_cost_model(costs, "is", 64, temperature=0.5).target_seconds(64) == pytest.approx(forward + 0.031)


def test_a_verifier_is_priced_with_its_own_drafted_levels():
    costs = _priced_costs()
    assert costs.draft_seconds(4, "minhash") == pytest.approx(0.006)
    assert costs.draft_seconds(4) == costs.draft_seconds(4, "spectr") == pytest.approx(0.002)
    chain = TreeShape.chain(3)
    assert step_cost_model(costs, "minhash", 64).draft(chain) == pytest.approx(3 * 0.003)
    assert step_cost_model(costs, "rrsw", 64).draft(chain) == pytest.approx(3 * 0.001)


def test_costs_with_walks_round_trip_and_older_costs_price_every_verifier_alike():
    costs = _priced_costs()
    assert Costs.from_json(costs.to_json()) == costs
    older = {key: value for key, value in costs.to_json().items() if "walk" not in key and "verifier" not in key}
    restored = Costs.from_json(older)
    assert restored.walks == restored.cool_walks == {} and restored.verifier_levels == {}
    assert restored.calibration_walk is None
    assert restored.target_for("is") == restored.target
    assert restored.draft_seconds(4, "minhash") == pytest.approx(0.002)


def test_a_verifier_s_levels_are_timed_below_a_fan_out_it_can_draft():
    for width, most in ((4, None), (4, 2), (3, 2), (1, 1)):
        one, three = _parallel_chains(width, 1, most), _parallel_chains(width, 3, most)
        assert max(three.parents.count(node) for node in range(three.size)) <= (most or width)
        assert three.size - one.size == 2 * width  # two more levels, each expanding `width` nodes
        assert three.max_depth - one.max_depth == 2
    assert _parallel_chains(4, 3).parents == (-1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)  # one level of fan-out


class RecordingDrafter:
    """A local drafter that keeps the verifier of every session it opens."""

    def __init__(self, drafter):
        self.drafter, self.verifiers, self.params = drafter, [], []
        self.vocab_size, self.context_length = drafter.vocab_size, drafter.context_length

    def open(self, spec):
        self.verifiers.append(spec.verifier)
        self.params.append((spec.verifier, spec.verifier_params))
        return self.drafter.open(spec)


def test_walks_are_timed_on_the_drafter_s_trees_of_the_shapes_asked_for_each_verifier():
    model = tiny_llama(vocab=64, seed=0, context=512)
    recording = RecordingTarget(LocalTarget(model))
    drafter = RecordingDrafter(LocalDrafter(noisy_copy(model)))
    asked = []

    def walk_trees(verifier, n, temperature):
        asked.append((verifier, n, temperature))
        return TreeShape.chain(n - 1) if verifier == "sps" else TreeShape((-1, *((i - 1) // 2 for i in range(1, n))))

    costs = measure_costs(recording, drafter, sizes=(1, 2, 4), widths=(1, 2, 4), repeats=2, load_sequences=1,
                          verifiers=["spechub", "sps"], walk_trees=walk_trees)
    assert sorted(asked) == sorted([(v, n, t) for t in (1.0, COOL_TEMPERATURE)
                                    for v, sizes in (("rrsw", WALK_SIZES), ("spechub", WALK_SIZES),
                                                     ("sps", CHAIN_WALK_SIZES)) for n in sizes])
    assert set(costs.walks) == set(costs.cool_walks) == {"rrsw", "spechub", "sps"}
    assert set(costs.verifier_levels) == {"spechub", "sps"}
    assert costs.walks["sps"].sizes == (1, *CHAIN_WALK_SIZES) and costs.walks["spechub"].sizes == (1, *WALK_SIZES)
    assert costs.cool_walks["sps"].sizes == costs.walks["sps"].sizes
    assert costs.verifier_levels["sps"].sizes == (1,)  # a one-draft verifier's trees are chains
    assert costs.verifier_levels["spechub"].sizes == (1, 4)
    assert costs.calibration_walk.sizes == (1, 2, 4)
    assert {"spechub", "sps", "rrsw"} <= set(drafter.verifiers)
    walked = [d for d in recording.drafts if d.tree.shape.size in (16, 64) and d.tree.shape.max_children == 2]
    assert walked  # spechub's and rrsw's: the drafter's trees, with its own (not uniform) q rows
    for draft in walked:
        assert not torch.allclose(draft.q_rows.float(), torch.full_like(draft.q_rows.float(), 1 / 64))
    assert all(seconds > 0 for walk in costs.walks.values() for seconds in walk.seconds)


def test_an_engine_prices_its_own_verifier_apart_or_those_it_is_told():
    model = tiny_llama(vocab=64, seed=0, context=256)
    target, drafter = LocalTarget(model), LocalDrafter(noisy_copy(model))
    own = SpeculativeEngine(target, drafter, verifier="spectr", tree="chain:1").costs()
    assert set(own.walks) == {"rrsw", "spectr"} and set(own.verifier_levels) == {"spectr"}
    told = SpeculativeEngine(target, drafter, verifier="spectr", tree="chain:1", priced_verifiers=["gumbel"]).costs()
    assert set(told.walks) == {"rrsw", "gumbel"} and set(told.verifier_levels) == {"gumbel"}
    with pytest.raises(ValueError, match="unknown verifier 'nope'"):
        SpeculativeEngine(target, drafter, tree="chain:1", priced_verifiers=["nope"])
    assert resolve_priced_verifiers("all", "rrsw") == tuple(available_verifiers())


def test_a_verifier_is_timed_with_the_parameters_it_is_given():
    model = tiny_llama(vocab=64, seed=0, context=256)
    drafter = RecordingDrafter(LocalDrafter(noisy_copy(model)))
    measure_costs(LocalTarget(model), drafter, sizes=(1, 2), widths=(1,), repeats=1, load_sequences=1,
                  verifiers=["is"], verifier_params={"is": {"alphabet_size": 8}})
    assert {params["alphabet_size"] for verifier, params in drafter.params if verifier == "is"} == {8}
    assert all(params == {} for verifier, params in drafter.params if verifier == "rrsw")


def test_costs_kept_in_a_file_are_read_back_instead_of_measured_again(tmp_path, monkeypatch):
    """A coordinator started again (a Ray actor's restart) plans from the costs it measured
    before, not from a new measurement's: the same trees, so the same tokens for a seed."""
    import rayspec.engine.engine as engine

    target = tiny_llama(vocab=64, seed=0)
    drafter = noisy_copy(target, noise=0.3)
    kept = tmp_path / "kept" / "costs.json"
    first = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tree="sequoia:auto", kept_costs=kept)
    assert kept.exists() and not kept.with_suffix(".partial").exists()  # sequoia:auto measured at start-up

    def measured_again(*args, **kwargs):
        raise AssertionError("the costs were measured again")

    monkeypatch.setattr(engine, "measure_costs", measured_again)
    again = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tree="sequoia:auto", kept_costs=kept)
    assert again.measured_costs == first.measured_costs
    request = dict(max_new_tokens=24, temperature=0.8, seed=4)
    assert again.run([3, 9, 27, 17], **request).tokens == first.run([3, 9, 27, 17], **request).tokens


def test_a_costs_file_that_cannot_be_read_is_measured_over(tmp_path):
    target = tiny_llama(vocab=64, seed=0)
    kept = tmp_path / "costs.json"
    kept.write_text('{"target_seconds": ')  # cut short
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, noise=0.3)), tree="sequoia:auto",
                               kept_costs=kept)
    assert engine.measured_costs is not None
    assert Costs.from_json(json.loads(kept.read_text())) == engine.measured_costs


class _Keeper:
    """Keeps costs in memory, as `rayspec.cluster.actors.KeptCosts` keeps them in Ray's store."""

    def __init__(self, fails: bool = False):
        self.kept, self.fails = None, fails

    def load(self):
        return self.kept

    def save(self, costs):
        if self.fails:
            raise OSError("disk full")
        self.kept = costs


def test_costs_are_kept_by_any_keeper_and_one_that_cannot_keep_them_is_logged(caplog):
    target = tiny_llama(vocab=64, seed=0)
    drafter = noisy_copy(target, noise=0.3)
    keeper = _Keeper()
    first = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tree="sequoia:auto", kept_costs=keeper)
    assert keeper.kept is first.measured_costs is not None
    again = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tree="sequoia:auto", kept_costs=keeper)
    assert again.measured_costs is keeper.kept  # read back, not measured

    with caplog.at_level("WARNING", logger="rayspec.engine.engine"):
        engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tree="sequoia:auto",
                                   kept_costs=_Keeper(fails=True))
    assert engine.measured_costs is not None  # it plans from them all the same
    assert "cannot keep the step costs" in caplog.text and "disk full" in caplog.text


def test_a_drafter_lost_while_walks_are_timed_leaves_no_target_session_open():
    """The walks open the target's session, then the drafter's: a drafter that failed to open
    (a pool's drafters all lost mid-calibration) left the target's open — a worker's holds its
    place and KV cache until its idle expiry."""
    target_model = tiny_llama(vocab=64, context=256)
    drafter_model = noisy_copy(target_model, noise=0.3)
    open_sessions = []

    class CountedTarget(LocalTarget):
        def open(self, spec):
            session = super().open(spec)
            open_sessions.append(session)
            closing = session.close
            session.close = lambda: (open_sessions.remove(session), closing())
            return session

    class LostAfter(LocalDrafter):
        def __init__(self, model, opens: int):
            super().__init__(model)
            self.opens = opens

        def open(self, spec):
            self.opens -= 1
            if self.opens < 0:
                raise DrafterUnavailable("the drafter worker is gone")
            return super().open(spec)

    # Two opens time the drafted levels; the third is the walks' first.
    with pytest.raises(DrafterUnavailable):
        measure_costs(CountedTarget(target_model), LostAfter(drafter_model, opens=2), sizes=(2, 4), widths=(1, 2),
                      repeats=1, load_sequences=2, verifiers=["rrsw"])
    assert open_sessions == []
