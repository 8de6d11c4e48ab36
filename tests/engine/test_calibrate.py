"""Step costs for the planner: the per-sequence load terms measured with sessions at once."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget
from rayspec.engine.calibrate import Costs, measure_costs
from rayspec.engine.interfaces import Outcome
from rayspec.tree.planner import MeasuredTimes
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
