"""The hardware/network-aware planner on timing tables whose answer is known."""

from __future__ import annotations

import pytest

from rayspec.tree.planner import (
    Candidate,
    CostModel,
    MeasuredTimes,
    payload_bytes,
    plan,
    plan_tree,
    price,
    replan_decision,
    should_replan,
)
from rayspec.tree.sequoia import expected_tokens, optimal_tree
from rayspec.tree.structure import TreeShape

MS = 1e-3
SEQUOIA_BUDGETS = [1, 2, 4, 8, 16, 32]  # Sequoia's demo-config.json sizes and times
SEQUOIA_TIMES = MeasuredTimes(tuple(SEQUOIA_BUDGETS), tuple(t * MS for t in (10, 10, 10, 12, 14, 18)))


def test_hand_computed_chain_choice_on_sequoia_timings():
    """a = [0.5]: only chains; a chain of k drafts yields 2 - 2^-k tokens.  (4 nodes, 3
    drafts): (3 * 0.3 + 10) / 1.875 = 5.813 ms/token beats (2, 1): 6.867, (8, 7): 7.078 and
    (8, 4): 5 nodes at 10.5 ms, (1.2 + 10.5) / 1.9375 = 6.039."""
    best = plan_tree([0.5], CostModel(SEQUOIA_TIMES, 0.3 * MS), SEQUOIA_BUDGETS, max_depth=10)
    assert (best.budget, best.max_depth, best.shape) == (4, 3, TreeShape.chain(3))
    assert best.tokens_per_step == pytest.approx(1.875)
    assert best.seconds_per_token == pytest.approx(10.9 * MS / 1.875)
    assert best.speedup == pytest.approx(10 / (10.9 / 1.875))


def test_flat_target_cost_takes_the_largest_tree():
    flat = MeasuredTimes((1, 64), (10 * MS, 10 * MS))
    best = plan_tree([0.8, 0.1, 0.05], CostModel(flat, 0.1 * MS), range(1, 65), max_depth=12)
    assert best.shape.size == 64 and best.shape.max_children > 1


def test_steep_target_cost_takes_a_short_chain():
    """10 ms + 2 ms per node: the chain of k drafts costs (10 + 2.3k) / sum(0.8^i); k = 4 is
    the best of them (5.712 ms/token) and no branching tree beats it."""
    steep = MeasuredTimes((1, 64), (10 * MS, (10 + 2 * 63) * MS))
    best = plan_tree([0.8, 0.1, 0.05], CostModel(steep, 0.3 * MS), range(1, 65), max_depth=12)
    assert best.shape == TreeShape.chain(4)
    assert best.seconds_per_token == pytest.approx(19.2 * MS / 3.3616)
    very_steep = MeasuredTimes((1, 64), (10 * MS, (10 + 20 * 63) * MS))
    assert plan_tree([0.8, 0.1], CostModel(very_steep, 0.3 * MS), range(1, 65), 12).shape.size == 1


def test_round_trips_are_amortised_by_larger_trees():
    steep = MeasuredTimes((1, 64), (10 * MS, (10 + 2 * 63) * MS))
    sizes = [
        plan_tree([0.6, 0.2, 0.1], CostModel(steep, 0.3 * MS, rtt=rtt * MS), range(1, 65), 12).shape.size
        for rtt in (0, 5, 20, 50)
    ]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    # A drafter on another machine (an extra round trip only when drafting) shrinks the tree.
    near = plan_tree([0.6, 0.2, 0.1], CostModel(steep, 0.3 * MS, rtt=20 * MS), range(1, 65), 12)
    far = plan_tree([0.6, 0.2, 0.1], CostModel(steep, 0.3 * MS, rtt=20 * MS, draft_rtt=20 * MS), range(1, 65), 12)
    assert far.speedup < near.speedup


def test_shipping_draft_laws_favours_fewer_internal_nodes():
    flat = MeasuredTimes((1, 64), (10 * MS, 10 * MS))
    a = [0.6, 0.2, 0.1]

    def cost(ships):
        return CostModel(flat, 0.1 * MS, bandwidth=1.25e9,  # 10 GbE
                         bytes_per_step=lambda shape: payload_bytes(shape, 32000, ships))

    ids_only, with_q = (plan_tree(a, cost(ships), range(1, 65), 10) for ships in (False, True))
    assert len(with_q.shape.internal_nodes) < len(ids_only.shape.internal_nodes)
    # A drafter's law kept to 16 tokens crosses in 108 bytes a row instead of 64 kB: the link
    # no longer constrains the tree.
    top_16 = plan_tree(a, CostModel(flat, 0.1 * MS, bandwidth=1.25e9,
                                    bytes_per_step=lambda shape: payload_bytes(shape, 32000, True, 16)),
                       range(1, 65), 10)
    assert len(top_16.shape.internal_nodes) == len(ids_only.shape.internal_nodes)


def test_cost_model_pieces():
    tree = TreeShape.kary(2, 3)  # levels of 1, 2, 4, 8 nodes
    assert CostModel(lambda n: 0.0, draft_seconds=0.5).draft(tree) == pytest.approx(1.5)
    assert CostModel(lambda n: 0.0, draft_seconds=lambda width: width).draft(tree) == pytest.approx(1 + 2 + 4)
    cost = CostModel(lambda n: n * MS, 0.5 * MS, rtt=2 * MS, draft_rtt=1 * MS, bandwidth=1e6,
                     bytes_per_step=lambda shape: 1000.0, overhead=0.25 * MS)
    assert cost.step(tree) == pytest.approx((1.5 + 2 + 1 + 1 + 15 + 0.25) * MS)
    assert cost.baseline == pytest.approx((1 + 2 + 0.25) * MS)  # target-only: no drafting traffic
    assert payload_bytes(tree, 100, ships_q_rows=True) == 15 * 8 + 7 * (100 * 2 + 4) + 4 * 8  # float16 + divisor
    assert payload_bytes(tree, 100, ships_q_rows=True, draft_top_k=5) == 15 * 8 + 7 * (5 * 6 + 8 + 4) + 4 * 8
    assert payload_bytes(tree, 100, ships_q_rows=True, draft_top_k=50) == payload_bytes(tree, 100, True)  # dense
    with pytest.raises(ValueError, match="draft_top_k"):
        payload_bytes(tree, 100, ships_q_rows=True, draft_top_k=-1)
    assert payload_bytes(tree, 100, ships_q_rows=False) == 15 * 8 + 4 * 8


def test_measured_times_interpolate_and_refuse_to_extrapolate():
    times = MeasuredTimes.from_dict({16: 0.014, 1: 0.010, 8: 0.012})
    assert times.sizes == (1, 8, 16)
    assert times(12) == pytest.approx(0.013)
    with pytest.raises(ValueError):
        times(17)
    with pytest.raises(ValueError):
        MeasuredTimes((1, 1), (0.1, 0.2))


def test_arbitrary_candidate_grid():
    a = [0.7, 0.2]
    candidates = [Candidate(s.size, s.max_depth, s, expected_tokens(s, a))
                  for s in (TreeShape.chain(0), TreeShape.chain(3), TreeShape.kary(2, 2))]
    cost = CostModel(MeasuredTimes((1, 7), (10 * MS, 11 * MS)), 0.5 * MS)
    priced = price(candidates, cost)
    assert [p.seconds_per_token for p in priced] == sorted(p.seconds_per_token for p in priced)
    best = plan(candidates, cost)
    assert best == priced[0]
    assert best.speedup == pytest.approx(cost.baseline / best.seconds_per_token)
    with pytest.raises(ValueError):
        plan([], cost)


def test_replanning_decision():
    cost = CostModel(MeasuredTimes((1, 64), (10 * MS, 14 * MS)), 0.3 * MS)
    old = [0.8, 0.02]
    current = plan_tree(old, cost, range(1, 65), 10).shape
    same = replan_decision(current, old, cost, range(1, 65), 10, threshold=0.02)
    assert same.gain == pytest.approx(0.0, abs=1e-12) and not same.replan
    wider = [0.45, 0.3, 0.15]  # a chain wastes the mass now on ranks 2 and 3
    moved = replan_decision(current, wider, cost, range(1, 65), 10, threshold=0.02)
    assert moved.replan and moved.gain > 0.1
    assert moved.current.tokens_per_step == pytest.approx(expected_tokens(current, wider))
    assert moved.best.shape.max_children > 1
    assert should_replan(1.0, 0.9, 0.05) and not should_replan(1.0, 0.97, 0.05)


def test_planned_tree_agrees_with_the_dp_at_its_size():
    a = [0.484, 0.138]
    best = plan_tree(a, CostModel(SEQUOIA_TIMES, 0.3 * MS), SEQUOIA_BUDGETS, 8)
    shape, value = optimal_tree(a, best.budget, best.max_depth)
    assert best.shape == shape and best.tokens_per_step == pytest.approx(value)


def test_measured_times_extrapolate_on_the_line_through_the_two_largest():
    times = MeasuredTimes.from_dict({1: 0.010, 8: 0.012, 16: 0.016})
    assert times.extrapolated(12) == pytest.approx(0.014)  # inside: the interpolation
    assert times.extrapolated(32) == pytest.approx(0.016 + 16 * 0.0005)
    assert times.extrapolated(0.5) == pytest.approx(0.010)
    falling = MeasuredTimes.from_dict({1: 0.010, 2: 0.009})
    assert falling.extrapolated(100) == pytest.approx(0.009)  # never cheaper than the largest


def test_under_load_a_round_of_b_steps_is_what_a_step_costs():
    """B sequences at once: the target's forward carries B trees' rows plus (B - 1) times the
    per-sequence part, each drafted level B levels' nodes plus (B - 1) times its own, and the
    link every sequence's bytes."""
    tree = TreeShape.kary(2, 2)  # 7 nodes, levels expanding 1 and 2 nodes
    target = MeasuredTimes.from_dict({1: 1 * MS, 8: 8 * MS, 16: 16 * MS})
    cost = CostModel(target, draft_seconds=lambda width: width * 0.1 * MS, rtt=2 * MS, bandwidth=1e6,
                     bytes_per_step=lambda shape: 1000.0, overhead=0.25 * MS)
    assert cost.under_load(1, 5 * MS, 5 * MS) is cost
    loaded = cost.under_load(4, target_per_sequence=3 * MS, draft_per_sequence=0.5 * MS)
    target_part = 28 * MS + 3 * 3 * MS  # t_target(4 x 7) on the line 8 -> 16, then extended
    draft_part = (4 * 0.1 + 1.5) * MS + (8 * 0.1 + 1.5) * MS
    network = 2 * MS + 4 * 1000.0 / 1e6
    assert loaded.step(tree) == pytest.approx(target_part + draft_part + network + 0.25 * MS)
    assert loaded.baseline == pytest.approx(4 * MS + 9 * MS + 2 * MS + 0.25 * MS)  # target-only: t(4) + 3 h
    constant = CostModel(target, draft_seconds=0.5 * MS).under_load(3, draft_per_sequence=0.25 * MS)
    assert constant.draft(tree) == pytest.approx(2 * (0.5 + 2 * 0.25) * MS)
    with pytest.raises(ValueError, match="sequences >= 1"):
        cost.under_load(0.5)
    with pytest.raises(ValueError, match="non-negative"):
        cost.under_load(2, target_per_sequence=-1.0)


def test_under_load_trees_shrink_where_rows_cost_and_stay_where_they_are_free():
    """A forward growing with its rows (a CPU, or a GPU past saturation) makes the best tree
    smaller as sequences are added, down to target-only; a forward that costs the same for
    any rows (a GPU below saturation) keeps it."""
    vector = [0.6, 0.15, 0.05]
    candidates = [Candidate(n, 4, *optimal_tree(vector, n, 4)) for n in (1, 2, 4, 8, 16, 32)]
    rows = MeasuredTimes.from_dict({1: 1 * MS, 512: 512 * MS})
    steep = CostModel(lambda n: 5 * MS + rows(n), draft_seconds=lambda width: 0.2 * MS * width)
    sizes = [plan(candidates, steep.under_load(b, 0.0, 0.0)).shape.size for b in (1, 4, 16)]
    assert sizes[0] > sizes[1] > sizes[2] == 1, sizes
    flat = CostModel(MeasuredTimes.from_dict({1: 20 * MS, 512: 20 * MS}), draft_seconds=1 * MS)
    assert plan(candidates, flat.under_load(16)).shape == plan(candidates, flat).shape
