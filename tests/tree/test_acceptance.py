"""Acceptance-vector estimation: histogram, censored (tree) observations, Wilson intervals,
files, the running estimate with its floor, decay and prior."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from rayspec.tree.acceptance import (
    AcceptanceEstimate,
    RankCounts,
    RunningAcceptance,
    estimate,
    estimate_from_counts,
    wilson_interval,
)
from rayspec.tree.structure import TreeShape


def draw_ranks(a, size, rng) -> np.ndarray:
    """Accepted ranks (1-based; 0 = none) under the positional model."""
    rank = np.searchsorted(np.cumsum(a), rng.random(size), side="right") + 1
    return np.where(rank > len(a), 0, rank)


def test_histogram_estimate_and_wilson_interval():
    found = estimate_from_counts([48, 7, 3], 42, setting={"verifier": "rrsw", "temperature": 0.6})
    np.testing.assert_allclose(found.acceptance, [0.48, 0.07, 0.03])
    assert found.none == pytest.approx(0.42) and found.samples == 100
    assert found.trials.tolist() == [100, 100, 100]
    for (lo, hi), hits in zip(found.ci95, (48, 7, 3)):
        ref = stats.binomtest(hits, 100).proportion_ci(0.95, method="wilson")
        assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert wilson_interval(0, 0).tolist() == [0.0, 1.0]
    lo, hi = wilson_interval(0, 50)
    assert lo == 0.0 and 0 < hi < 0.1


def test_wilson_coverage():
    rng = np.random.default_rng(0)
    a = np.array([0.45, 0.12, 0.05])
    covered = []
    for _ in range(400):
        ranks = draw_ranks(a, 300, rng)
        counts = [(ranks == j).sum() for j in (1, 2, 3)]
        ci = estimate_from_counts(counts, (ranks == 0).sum()).ci95
        covered.append((ci[:, 0] <= a) & (a <= ci[:, 1]))
    coverage = np.mean(covered, axis=0)
    assert ((coverage > 0.92) & (coverage < 0.985)).all(), coverage


def test_censored_observations_recover_the_vector():
    """Nodes with fewer children than the vector's width: ranks beyond the node's width are
    never seen, yet the per-rank trials keep each entry unbiased."""
    rng = np.random.default_rng(1)
    a = np.array([0.5, 0.2, 0.1, 0.05])
    counts = RankCounts.zeros(4)
    widths = rng.integers(1, 5, size=20_000)
    for rank, width in zip(draw_ranks(a, widths.size, rng), widths):
        counts.add(int(rank) if rank <= width else 0, int(width))
    found = estimate(counts)
    assert found.samples == widths.size
    np.testing.assert_allclose(found.trials, [(widths >= j).sum() for j in (1, 2, 3, 4)])
    se = np.sqrt(a * (1 - a) / found.trials)
    assert (np.abs(found.acceptance - a) < 4 * se).all(), (found.acceptance, a)
    assert ((found.ci95[:, 0] < found.acceptance) & (found.acceptance < found.ci95[:, 1])).all()


def test_noise_beyond_one_is_rescaled_and_unseen_ranks_are_zero():
    counts = RankCounts(np.array([[9.0, 3.0, 0.0]]), np.array([[10.0, 3.0, 0.0]]))
    found = estimate(counts)
    assert found.acceptance.sum() == pytest.approx(1.0)
    assert found.acceptance[2] == 0.0 and found.none == pytest.approx(0.0)
    assert found.ci95[2].tolist() == [0.0, 1.0]


def test_depth_aware_histograms_and_tree_walks():
    found = estimate_from_counts([[60, 10], [40, 20]], [30, 40])
    assert found.depth_aware and found.acceptance.shape == (2, 2)
    np.testing.assert_allclose(found.acceptance, [[0.6, 0.1], [0.4, 0.2]])
    np.testing.assert_allclose(found.none, [0.3, 0.4])

    # Walks on a binary tree of depth 3 under depth-dependent rows.
    rng = np.random.default_rng(2)
    rows = np.array([[0.6, 0.2], [0.5, 0.2], [0.3, 0.3]])
    shape = TreeShape.kary(2, 3)
    running = RunningAcceptance(2, depths=3, half_life=None, min_samples=1)
    for _ in range(6000):
        node, path, ranks = 0, [], []
        while shape.children[node]:
            rank = int(draw_ranks(rows[len(ranks)], 1, rng)[0])
            ranks.append(rank)
            if rank == 0:
                break
            node = shape.children[node][rank - 1]
            path.append(node)
        running.observe_walk(shape, path, ranks)
    found = running.estimate()
    se = np.sqrt(rows * (1 - rows) / found.trials)
    assert (np.abs(found.acceptance - rows) < 4 * se).all(), found.acceptance


def test_json_round_trip_and_bare_vectors():
    found = estimate_from_counts([48, 7, 3], 42, setting={"verifier": "rrsw", "width": 3})
    data = json.loads(json.dumps(found.to_json()))
    assert set(data) >= {"acceptance", "none", "samples", "ci95", "setting"}
    back = AcceptanceEstimate.from_json(data)
    for name in ("acceptance", "none", "samples", "trials", "ci95"):
        np.testing.assert_allclose(getattr(back, name), getattr(found, name))
    assert back.setting == found.setting
    bare = AcceptanceEstimate.from_json({"acceptance": [0.5, 0.2]})
    assert bare.none == pytest.approx(0.3) and bare.samples == 0 and bare.ci95.tolist() == [[0, 1], [0, 1]]
    aware = estimate_from_counts([[6, 1], [4, 2]], [3, 4])
    back = AcceptanceEstimate.from_json(json.loads(json.dumps(aware.to_json())))
    assert back.depth_aware and back.ci95.shape == (2, 2, 2)
    np.testing.assert_allclose(back.acceptance, aware.acceptance)


def test_running_estimate_floor_prior_and_decay():
    rng = np.random.default_rng(3)
    running = RunningAcceptance(3, half_life=300, min_samples=100)
    old, new = np.array([0.5, 0.2, 0.1]), np.array([0.3, 0.1, 0.05])
    for step, rank in enumerate(draw_ranks(old, 3000, rng)):
        if step == 99:
            assert running.estimate() is None  # 99 decayed samples: below the floor
        running.observe([rank], [3])
    assert np.abs(running.vector() - old).max() < 0.07
    for rank in draw_ranks(new, 3000, rng):  # ten half-lives: the old vector is forgotten
        running.observe([rank], [3])
    assert np.abs(running.vector() - new).max() < 0.07
    assert running.samples[0] == pytest.approx(1 / (1 - running.decay), rel=1e-3)

    prior = np.array([0.6, 0.1, 0.0])
    mixed = RunningAcceptance(3, half_life=None, min_samples=4, prior=prior, prior_weight=10)
    for rank in (1, 1, 2, 0):
        mixed.observe([rank], [3])
    np.testing.assert_allclose(mixed.vector(), (np.array([2, 1, 0]) + 10 * prior) / 14)


def test_running_depth_rows_report_the_measured_prefix():
    running = RunningAcceptance(2, depths=3, half_life=None, min_samples=3)
    for ranks in ([1, 1, 0], [1, 0], [2, 1, 1], [0]):
        running.observe(ranks, [2] * len(ranks))
    assert running.samples.tolist() == [4, 3, 2]
    found = running.estimate()
    assert found.acceptance.shape == (2, 2)  # the third row has 2 visits: not reported
    np.testing.assert_allclose(found.acceptance, [[2 / 4, 1 / 4], [2 / 3, 0]])


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        RunningAcceptance(3, half_life=10, min_samples=100)  # decayed count tops out near 14.9
    with pytest.raises(ValueError):
        RankCounts.zeros(3).add(3, 2)
    with pytest.raises(ValueError):
        RunningAcceptance(3).observe([1, 0], [3])
    with pytest.raises(ValueError):
        estimate_from_counts([1, -1], 3)
