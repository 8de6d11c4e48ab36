"""Tree policies: Sequoia trees planned per verifier from measured vectors, hardware-aware
sizes from measured costs, and re-planning from the ranks accepted while serving."""

from __future__ import annotations

import json
import logging
import re
import threading
import time

import numpy as np
import pytest

from rayspec.demo import DEMO_DIR
from rayspec.engine.calibrate import Costs
from rayspec.engine.interfaces import Outcome
from rayspec.engine.policy import (
    MAX_REQUEST_PLAN_CELLS, AcceptanceLibrary, LoadGauge, PlanTooBig, SequoiaSpec, SequoiaTrees, TreeTrial,
    check_tree_spec, load_level, parse_sequoia, plan_cells, vector_file_name,
)
from rayspec.engine.trees import MAX_TREE_NODES, parse_tree_spec
from rayspec.tree.planner import MeasuredTimes
from rayspec.tree.sequoia import solve
from rayspec.tree.structure import TreeShape


def write_vector(directory, verifier, temperature, vector):
    (directory / vector_file_name(verifier, temperature)).write_text(
        json.dumps({"acceptance": list(vector), "setting": {"verifier": verifier, "temperature": temperature}})
    )


def test_a_temperature_plans_the_same_tree_whether_it_came_as_a_double_or_a_float32():
    """The gRPC API's temperature is a float32 (0.65 arrives as 0.6499999762), HTTP's a double:
    the same seed must draft the same tree through both."""
    for temperature in np.arange(0.0, 2.2, 0.005):
        assert SequoiaTrees._key("rrsw", temperature) == SequoiaTrees._key("rrsw", float(np.float32(temperature)))
    assert SequoiaTrees._key("rrsw", 0.65) == ("rrsw", 0.6) and SequoiaTrees._key("rrsw", 7.0) == ("rrsw", 2.0)


@pytest.mark.parametrize("acceptance, message", [
    ([0.7, 0.5], "sum to at most 1, got 1.200000"), ([0.5, float("nan")], "finite and non-negative"),
    ([0.5, -0.1], "finite and non-negative"), ([[0.5], [0.6, 0.1]], None), ([], "has no ranks (shape (0,))"),
    ([[]], "has no ranks (shape (1, 0))")])
def test_a_malformed_vector_file_is_refused_when_read_naming_it(tmp_path, acceptance, message):
    """Not at each request planned from it, long after start-up."""
    write_vector(tmp_path, "rrsw", 0.6, [0.5, 0.2])
    write_vector(tmp_path, "rrsw", 1.0, acceptance)
    with pytest.raises(ValueError, match=re.escape(f"acceptance vector {tmp_path / vector_file_name('rrsw', 1.0)}: ")
                       + (".*" + re.escape(message) if message else "")):
        AcceptanceLibrary(tmp_path)
    (tmp_path / "broken.json").write_text('{"acceptance": [0.5,')
    (tmp_path / vector_file_name("rrsw", 1.0)).unlink()
    with pytest.raises(ValueError, match="acceptance vector .*broken.json: Expecting value"):
        AcceptanceLibrary(tmp_path)


def test_library_takes_the_nearest_temperature_of_the_verifier(tmp_path):
    write_vector(tmp_path, "rrsw", 0.6, [0.5, 0.2])
    write_vector(tmp_path, "rrsw", 1.0, [0.4, 0.1])
    library = AcceptanceLibrary(tmp_path)
    assert library.lookup("rrsw", 0.7)[0].tolist() == [0.5, 0.2]
    assert library.lookup("rrsw", 0.9)[0].tolist() == [0.4, 0.1]
    vector, source = library.lookup("spechub", 0.6)
    assert source == "default prior" and vector[0] > vector[1]


def test_parse():
    assert parse_sequoia("sequoia:auto") == SequoiaSpec(None)
    assert parse_sequoia("sequoia:64x8") == SequoiaSpec(64, 8)
    assert parse_sequoia(" sequoia:064 ") == SequoiaSpec(64, 10)
    assert parse_sequoia("kary:2x3") is None
    for spec in ("sequoia:0", "sequoia:1025", "sequoia:8x1025"):
        with pytest.raises(ValueError, match="a Sequoia tree has 1 to 1024 nodes"):
            parse_sequoia(spec)
    for spec in ("sequoia:Auto", "sequoia:32x", "sequoia:"):  # no longer "give the spec to the engine"
        with pytest.raises(ValueError, match=rf"^bad tree spec '{spec}'; a Sequoia tree is sequoia:auto, sequoia:B "
                                             rf"or sequoia:BxD"):
            parse_sequoia(spec)


def test_requests_may_name_only_sequoia_trees_cheap_enough_to_plan_while_they_wait():
    demo = AcceptanceLibrary(DEMO_DIR / "acceptance").planning_shape("rrsw")
    assert demo == (1, 16)
    for spec in ("sequoia:256x32", "sequoia:512x8", "sequoia:1024x2", "sequoia:8x1024", "sequoia:auto", "sequoia:64",
                 "sequoia:32x10", "kary:4x4"):
        check_tree_spec(spec, demo)
        check_tree_spec(spec)
    with pytest.raises(PlanTooBig, match=r"'sequoia:1024x10' is too big to plan per request: its dynamic program "
                                         r"fills 167772160 cells .* on the acceptance vector of 16 rank\(s\) x 1 "
                                         r"depth row\(s\) .*; put bigger Sequoia trees in the service's config"):
        check_tree_spec("sequoia:1024x10", demo)
    with pytest.raises(ValueError, match="at most 1024"):
        check_tree_spec("kary:4x8")
    with pytest.raises(ValueError, match="'file:/etc/passwd': file: trees name a file on the server"):
        check_tree_spec(" file:/etc/passwd")


def test_the_plan_cap_counts_the_ranks_and_depth_rows_of_the_vector_the_service_plans_from(tmp_path):
    """The cap counted budget^2 x depth alone: a service whose vector has 32 ranks and 10 depth
    rows planned a request's sequoia:256x32 over 17 times the cells (577 million, 1.1 s on a
    2-core VM; 4 s with another load) that the cap allows for the demo's 16 ranks and one row."""
    row = np.full(32, 0.005 / 32)
    row[0] = 0.99  # trees that keep deepening: the program's early stop does not help
    write_vector(tmp_path, "rrsw", 1.0, np.tile(row, (10, 1)).tolist())
    write_vector(tmp_path, "rrsw", 0.0, [0.5, 0.2])
    library = AcceptanceLibrary(tmp_path)
    assert library.planning_shape("rrsw") == (10, 32)  # the largest at any temperature
    assert library.planning_shape("spechub") == (1, 2)  # the default prior, cut to its two drafts per node
    assert plan_cells(SequoiaSpec(256, 32), 10, 32) == 275 * 32 * 256**2 == 576716800 > MAX_REQUEST_PLAN_CELLS
    with pytest.raises(PlanTooBig, match=r"^tree spec 'sequoia:256x32' is too big to plan per request: its dynamic "
                                         r"program fills 576716800 cells .* vector of 32 rank\(s\) x 10 depth "
                                         r"row\(s\) it is planned from here, and at most 33554432 are allowed"):
        check_tree_spec("sequoia:256x32", library.planning_shape("rrsw"))
    for spec in ("sequoia:64", "sequoia:auto", "sequoia:32x10"):  # within the cap on this vector too
        check_tree_spec(spec, library.planning_shape("rrsw"))
    assert plan_cells(SequoiaSpec(None), 10, 32) == 55 * 32 * 128**2 <= MAX_REQUEST_PLAN_CELLS


def test_a_requests_planning_shape_is_read_from_the_vectors_checked_at_load(tmp_path, monkeypatch):
    """The vectors were checked again (`acceptance_rows`) for each request naming a tree (28 us
    on the demo pair's); they are checked once, when loaded, and not changed after."""
    write_vector(tmp_path, "rrsw", 1.0, np.full((3, 16), 0.01).tolist())
    write_vector(tmp_path, "rrsw", 0.6, [0.5, 0.2] + [0.01] * 30)
    write_vector(tmp_path, "sps", 1.0, [[0.5], [0.6]])
    library = AcceptanceLibrary(tmp_path)

    def checked(*args, **kwargs):
        raise AssertionError("a vector checked again per request")

    monkeypatch.setattr("rayspec.engine.policy.acceptance_rows", checked)
    assert library.planning_shape("rrsw") == (3, 32)  # the most rows and ranks, of either temperature's
    assert library.planning_shape("sps") == (2, 1)
    assert library.planning_shape("spechub") == (1, 2)  # the default prior's, cut to two drafts per node
    assert library.planning_shape("nope") == (1, 8)  # the verifier is refused by its own check
    assert library.planning_shape(["rrsw"]) == (1, 8)  # as a YAML list: no name either
    assert AcceptanceLibrary().planning_shape("rrsw") == (1, 8)


@pytest.mark.parametrize("spec, nodes", [("kary:1x1023", 1024), ("kary:2x9", 1023), ("kary:32x1", 33), ("kary:7x0", 1),
                                         ("kary:1023x1", 1024)])
def test_a_kary_tree_within_the_node_cap_is_built_whatever_its_shape(spec, nodes):
    assert parse_tree_spec(spec).size == nodes


@pytest.mark.parametrize("spec", ["kary:1x1024", "kary:1x3000000", "kary:2x10", "kary:1024x1", "kary:2x999999999"])
def test_a_kary_tree_past_the_node_cap_is_refused_at_once_however_deep(spec):
    """kary:1xD counted 65 nodes whatever D (k**level summed over 64 levels at most): a request
    naming kary:1x3000000 drafted a chain of three million nodes (14 s, 900 MB)."""
    started = time.monotonic()
    with pytest.raises(ValueError, match=f"has over {MAX_TREE_NODES} nodes"):
        check_tree_spec(spec)
    with pytest.raises(ValueError, match=f"at most {MAX_TREE_NODES} are allowed"):
        parse_tree_spec(spec)
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("data, message", [
    ([], 'a tree is a JSON object with "parents", got list'),
    ({"child_rank": [0]}, 'a tree needs "parents": the parent of each node, -1 for the root'),
    ({"parents": None}, "a tree's parents must be a list of node indices, got None"),
    ({"parents": 5}, "a tree's parents must be a list of node indices, got 5"),
    ({"parents": [-1, None]}, "node 1's parent must be an integer, got None"),
    ({"parents": [-1, [0]]}, r"node 1's parent must be an integer, got \[0\]"),
    ({"parents": [-1, 0.7]}, "node 1's parent must be an integer, got 0.7"),
    ({"parents": [-1, 0, True]}, "node 2's parent must be an integer, got True"),
    ({"parents": [-1, 0], "predicted": None}, "a tree's predicted chain length must be an integer, got None"),
    ({"parents": [-1, 0], "predicted": 1.9}, "a tree's predicted chain length must be an integer, got 1.9"),
    ({"parents": [-1, 0], "predicted": True}, "a tree's predicted chain length must be an integer, got True"),
    ({"parents": [-1, 0, 0], "child_rank": 5}, "child_rank must be a list, got 5"),
])
def test_a_malformed_tree_file_is_a_bad_tree_spec_not_a_type_error_nor_truncated(tmp_path, data, message):
    """A tree file's values went through int() and tuple(): `[]`, null or a number where a list
    belongs escaped parse_tree_spec as bare TypeErrors, and parents [-1, 0.7] or predicted 1.9
    were truncated to (-1, 0) and 1."""
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"^bad tree spec 'file:{re.escape(str(path))}': {message}$"):
        parse_tree_spec(f"file:{path}")
    with pytest.raises(ValueError, match=rf"^{message}$"):
        TreeShape.from_json(data)


def test_a_tree_or_vector_file_nested_too_deeply_is_refused_naming_it_not_a_recursion_error(tmp_path):
    """json.loads raises RecursionError past ~1000 levels of [[[...]]]: it escaped the service's
    tree spec and acceptance vectors as no ValueError."""
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "tree.json"
    path.write_text(deep)
    with pytest.raises(ValueError, match=rf"^bad tree spec 'file:{re.escape(str(path))}': the JSON nests too deeply"):
        parse_tree_spec(f"file:{path}")
    with pytest.raises(ValueError, match="^the JSON nests too deeply to be a tree"):
        TreeShape.from_json(deep)
    (tmp_path / vector_file_name("rrsw", 1.0)).write_text('{"acceptance": ' + deep + "}")
    with pytest.raises(ValueError, match=re.escape(f"acceptance vector {tmp_path / vector_file_name('rrsw', 1.0)}: ")
                       + "maximum recursion depth"):
        AcceptanceLibrary(tmp_path)


def test_tree_shapes_take_integers_of_any_kind_as_they_did():
    shape = TreeShape(np.array([-1, 0, 0, 2]), np.int64(1))
    assert shape.parents == (-1, 0, 0, 2) and shape.predicted == 1
    assert all(type(parent) is int for parent in shape.parents) and type(shape.predicted) is int
    assert TreeShape.from_json('{"parents": [-1, 0, 0], "child_rank": [0, 1, 2]}') == TreeShape((-1, 0, 0))


@pytest.mark.parametrize("verifier, width", [("rrsw", None), ("spechub", 2), ("sps", 1)])
def test_sequoia_trees_are_the_dp_optimum_within_the_verifiers_limits(tmp_path, verifier, width):
    vector = [0.55, 0.15, 0.08, 0.05]
    write_vector(tmp_path, verifier, 0.6, vector)
    policy = SequoiaTrees(SequoiaSpec(32, 6), AcceptanceLibrary(tmp_path), adaptive=False)
    shape = policy.shape_for(verifier, 0.6)
    assert shape == solve(vector, 32, 6, width).tree()
    assert shape.max_depth <= 6 and shape.size <= 32 and shape.max_children <= (width or 4)


def test_temperatures_are_planned_to_a_tenth_and_those_above_two_together(tmp_path):
    """A plan (and its /metrics series) per temperature a client sends would grow without bound."""
    write_vector(tmp_path, "rrsw", 0.6, [0.55, 0.15, 0.08, 0.05])
    write_vector(tmp_path, "rrsw", 2.0, [0.3, 0.1, 0.05])
    policy = SequoiaTrees(SequoiaSpec(32, 6), AcceptanceLibrary(tmp_path), adaptive=False)
    shapes = {t: policy.shape_for("rrsw", t) for t in (0.6, 0.61, 0.64, 2.0, 2.04, 3.0, 7.5, 1e12)}
    assert sorted(temperature for _, temperature, _ in policy.plans()) == [0.6, 2.0]
    assert shapes[0.61] == shapes[0.64] == shapes[0.6] == solve([0.55, 0.15, 0.08, 0.05], 32, 6).tree()
    assert shapes[3.0] == shapes[7.5] == shapes[1e12] == shapes[2.0] == solve([0.3, 0.1, 0.05], 32, 6).tree()


def test_an_acceptance_dir_that_is_no_directory_is_said_in_the_log(tmp_path, caplog):
    missing = tmp_path / "acceptnace"
    with caplog.at_level("WARNING", logger="rayspec.trees"):
        library = AcceptanceLibrary(missing)
    assert library.lookup("rrsw", 0.6)[1] == "default prior"
    assert f"acceptance vectors: {missing} is not a directory" in caplog.text
    caplog.clear()
    AcceptanceLibrary(None)
    AcceptanceLibrary(tmp_path)
    assert caplog.text == ""


def costs(target, level=0.001):
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    return Costs(MeasuredTimes(sizes, tuple(target(n) for n in sizes)), MeasuredTimes((1, 32), (level, level)), 0.0)


def test_auto_grows_the_tree_when_the_target_costs_the_same_for_any_size(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.6, 0.15, 0.05])
    flat = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), costs(lambda n: 0.02), adaptive=False)
    steep = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), costs(lambda n: 0.02 * n), adaptive=False)
    drafter_costly = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), costs(lambda n: 0.01, level=0.05), adaptive=False)
    assert flat.shape_for("rrsw", 1.0).size >= 32
    assert steep.shape_for("rrsw", 1.0).size <= 4
    assert drafter_costly.shape_for("rrsw", 1.0).size == 1  # drafting never pays: target-only


def test_auto_prices_the_walk_at_the_request_s_temperature(tmp_path):
    """The same vector at T = 1 and 0.5, a target that costs the same for any size, and a walk
    that is free at T = 1 and grows with the tree at 0.5 (as is-weighted's does): the planner
    grows the tree at T = 1 and keeps it small at 0.5, and its re-planning checks price it so."""
    vector = [0.6, 0.15, 0.05]
    for temperature in (1.0, 0.5):
        write_vector(tmp_path, "is", temperature, vector)
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    free, growing = MeasuredTimes(sizes, (0.0,) * 8), MeasuredTimes(sizes, tuple(0.002 * n for n in sizes))
    walked = Costs(MeasuredTimes(sizes, (0.02,) * 8), MeasuredTimes((1, 32), (0.001, 0.001)), 0.0,
                   walks={"is": free}, calibration_walk=free, cool_walks={"is": growing})
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), walked, adaptive=False)
    warm, cool = policy.shape_for("is", 1.0), policy.shape_for("is", 0.5)
    assert warm.size >= 32 and cool.size <= 8
    assert policy._replan("is", warm, vector, temperature=0.5)[0].size <= 8
    assert policy._replan("is", cool, vector, temperature=1.0)[0].size >= 32


def simulate_walk(shape, vector, rng):
    """One step of a walk whose acceptance follows `vector` exactly."""
    node, path, ranks = 0, [], []
    while shape.children[node]:
        rank = rng.choice(len(vector) + 1, p=[*vector, 1 - sum(vector)]) + 1
        if rank > len(vector) or rank > len(shape.children[node]):
            ranks.append(0)
            break
        ranks.append(rank)
        node = shape.children[node][rank - 1]
        path.append(node)
    return Outcome([0] * (len(path) + 1), path, ranks)


def serve_planned_trees(policy, served, rng, steps: int = 600) -> None:
    """`steps` steps of rrsw at T = 1, each drafting the tree the policy plans now and walked
    as the acceptance vector `served` has it."""
    for _ in range(steps):
        shape = policy.shape_for("rrsw", 1.0)
        policy.observe("rrsw", 1.0, shape, simulate_walk(shape, served, rng))


def test_adaptive_trees_replan_when_the_served_vector_differs(tmp_path):
    prior, served = [0.3, 0.3, 0.2], [0.85, 0.05, 0.02]
    write_vector(tmp_path, "rrsw", 1.0, prior)
    policy = SequoiaTrees(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                          min_samples=100, background_checks=False)
    rng = np.random.default_rng(0)
    first = policy.shape_for("rrsw", 1.0)
    serve_planned_trees(policy, served, rng)
    final = policy.shape_for("rrsw", 1.0)
    assert policy.history and final != first
    assert final.max_depth > first.max_depth  # rank 1 dominates: a deeper, narrower tree
    assert all(event.gain > policy.threshold for event in policy.history)


def test_a_replan_does_not_hold_up_the_sequences_drafting_meanwhile(tmp_path):
    """Re-planning runs Sequoia's dynamic program (seconds for big trees): the sequences
    sharing the policy must keep getting their current tree while it runs."""
    write_vector(tmp_path, "rrsw", 1.0, [0.3, 0.3, 0.2])
    replanning, release = threading.Event(), threading.Event()

    class SlowReplans(SequoiaTrees):
        def plan(self, verifier, vector, temperature=1.0):
            if self._plans:  # the first plan is made at once; re-plans wait for the test
                replanning.set()
                assert release.wait(30)
            return super().plan(verifier, vector, temperature)

    policy = SlowReplans(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                         min_samples=10, background_checks=False)
    rng = np.random.default_rng(0)
    first = policy.shape_for("rrsw", 1.0)

    def serve():
        while not replanning.is_set():
            policy.observe("rrsw", 1.0, first, simulate_walk(first, [0.85, 0.05, 0.02], rng))

    observer = threading.Thread(target=serve)
    observer.start()
    assert replanning.wait(30)
    meanwhile = []
    drafter = threading.Thread(target=lambda: meanwhile.append(policy.next_shape("rrsw", 1.0)))
    drafter.start()
    drafter.join(10)
    blocked = drafter.is_alive()
    release.set()
    observer.join(30)
    drafter.join(30)
    assert not blocked, "next_shape waited for the re-planning"
    assert meanwhile == [first]
    assert policy.history and policy.shape_for("rrsw", 1.0) != first  # the re-plan still lands


def test_adaptive_trees_stay_put_when_the_served_vector_matches(tmp_path):
    vector = [0.6, 0.15, 0.05]
    write_vector(tmp_path, "rrsw", 1.0, vector)
    policy = SequoiaTrees(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                          min_samples=100, background_checks=False)
    rng = np.random.default_rng(1)
    serve_planned_trees(policy, vector, rng)
    assert not policy.history


class CountedChecks(SequoiaTrees):
    """Records the running estimate's step count at each re-planning check."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.checks = []

    def _check(self, key, verifier, current, vector, steps, at, background):
        self.checks.append(at)
        return super()._check(key, verifier, current, vector, steps, at, background)


def test_replanning_checks_back_off_while_the_tree_holds(tmp_path):
    vector = [0.6, 0.15, 0.05]
    write_vector(tmp_path, "rrsw", 1.0, vector)
    policy = CountedChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25, min_samples=100,
                           max_replan_every=100, background_checks=False)
    rng = np.random.default_rng(1)
    serve_planned_trees(policy, vector, rng)
    assert not policy.history
    # the estimate first reaches min_samples at step 50; then 50, 100, and every 100 steps
    assert policy.checks == [50, 100, 200, 300, 400, 500, 600]


def test_a_change_of_tree_brings_the_checks_back_to_every_replan_every_steps(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.3, 0.3, 0.2])
    policy = CountedChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                           min_samples=100, background_checks=False)
    rng = np.random.default_rng(0)
    serve_planned_trees(policy, [0.85, 0.05, 0.02], rng)
    changes = [event.step for event in policy.history]
    assert changes
    for change in changes:  # the check that changed the tree, then one replan_every later
        assert change in policy.checks and policy.checks[policy.checks.index(change) + 1] == change + 25
    gaps = np.diff(policy.checks).tolist()
    assert max(gaps) > 25  # and back off once the new tree holds


def test_adaptive_trees_estimate_a_depth_aware_vector_per_depth_and_rank(tmp_path):
    """A vector of `rayspec tree measure --depth-aware` is [depths, ranks]: the running
    estimate keeps that form, and counts every rank drafted."""
    write_vector(tmp_path, "rrsw", 1.0, [[0.3, 0.3, 0.2], [0.2, 0.2, 0.1]])
    policy = SequoiaTrees(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                          min_samples=100, background_checks=False)
    served = [0.05, 0.05, 0.85]  # the third child is the one taken
    serve_planned_trees(policy, served, np.random.default_rng(0), steps=300)
    estimate = policy._running[("rrsw", 1.0)].vector()
    assert estimate.shape == (2, 3)
    assert estimate[0, 2] > 0.5 and estimate[0, 0] < 0.2  # rank 3 taken, rank 1 rarely, at the root


def test_a_check_that_fails_is_tried_again_replan_every_steps_later_not_at_the_next(tmp_path):
    vector = [0.6, 0.15, 0.05]
    write_vector(tmp_path, "rrsw", 1.0, vector)

    class FailingChecks(CountedChecks):
        def _replan(self, verifier, current, vector, temperature=1.0):
            raise RuntimeError("the planner failed")

    policy = FailingChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                           min_samples=100, background_checks=False)
    rng = np.random.default_rng(1)
    failures = 0
    for _ in range(120):
        shape = policy.shape_for("rrsw", 1.0)
        try:
            policy.observe("rrsw", 1.0, shape, simulate_walk(shape, vector, rng))
        except RuntimeError:
            failures += 1
    assert policy.checks == [50, 75, 100] and failures == 3 and not policy.history


def test_a_check_in_the_background_holds_up_no_step_and_lands_when_done(tmp_path):
    """By default a check runs beside the decoding: the step that brings it returns at once,
    steps go on with the current tree, no second check starts while it runs, and the next
    one is scheduled from the step that brought it."""
    write_vector(tmp_path, "rrsw", 1.0, [0.3, 0.3, 0.2])
    checking, release = threading.Event(), threading.Event()

    class HeldChecks(CountedChecks):
        def _replan(self, verifier, current, vector, temperature=1.0):
            checking.set()
            assert release.wait(30)
            return super()._replan(verifier, current, vector, temperature)

    policy = HeldChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25, min_samples=100)
    rng = np.random.default_rng(0)
    first = policy.shape_for("rrsw", 1.0)
    served = [0.85, 0.05, 0.02]
    for _ in range(350):  # the check comes at step 50 and is held for 300 more steps
        policy.observe("rrsw", 1.0, first, simulate_walk(first, served, rng))
    assert checking.is_set() and policy.checks == [50]
    assert not policy.wait_for_checks(timeout=0.05)  # still held
    assert policy.shape_for("rrsw", 1.0) == first and not policy.history
    release.set()
    assert policy.wait_for_checks(timeout=30)
    assert [event.step for event in policy.history] == [50]
    changed = policy.shape_for("rrsw", 1.0)
    assert changed != first and changed.max_depth > first.max_depth
    policy.observe("rrsw", 1.0, changed, simulate_walk(changed, served, rng))
    assert policy.wait_for_checks(timeout=30)
    assert policy.checks == [50, 351]  # due at 50 + 25, long past: at the first step after


def test_a_check_that_fails_in_the_background_is_logged_and_tried_again_later(tmp_path, caplog):
    vector = [0.6, 0.15, 0.05]
    write_vector(tmp_path, "rrsw", 1.0, vector)

    class FailingChecks(CountedChecks):
        def _replan(self, verifier, current, vector, temperature=1.0):
            raise RuntimeError("the planner failed")

    policy = FailingChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25, min_samples=100)
    rng = np.random.default_rng(1)
    first = policy.shape_for("rrsw", 1.0)
    with caplog.at_level(logging.WARNING, logger="rayspec.trees"):
        for _ in range(120):
            policy.observe("rrsw", 1.0, first, simulate_walk(first, vector, rng))
            assert policy.wait_for_checks(timeout=30)
    assert policy.checks == [50, 75, 100] and not policy.history
    failures = [r for r in caplog.records if "re-planning check of the rrsw tree at T=1.0 failed" in r.getMessage()]
    assert len(failures) == 3 and "the planner failed" in failures[0].exc_text
    assert policy.shape_for("rrsw", 1.0) == first


def test_replan_intervals_are_checked(tmp_path):
    with pytest.raises(ValueError, match="need 1 <= replan_every <= max_replan_every, got 32 and 16"):
        SequoiaTrees(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), max_replan_every=16)


def test_a_one_node_plan_explores_and_returns_to_drafting_when_the_served_vector_is_better(tmp_path):
    # The prior predicts drafting does not pay at these costs; the drafter actually serves far
    # better.  Probe trees must find that out and bring a real tree back.
    write_vector(tmp_path, "rrsw", 1.0, [0.2, 0.05])
    step_costs = costs(lambda n: 0.01 * (1 + n / 16), level=0.002)
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), step_costs, replan_every=16,
                          min_samples=60, explore_every=4, explore_budget=8, background_checks=False)
    assert policy.shape_for("rrsw", 1.0).size == 1
    rng = np.random.default_rng(2)
    sizes = []
    for _ in range(800):
        shape = policy.next_shape("rrsw", 1.0)
        sizes.append(shape.size)
        policy.observe("rrsw", 1.0, shape, simulate_walk(shape, [0.85, 0.08, 0.03], rng))
    assert policy.probes > 0 and 1 < max(sizes[:8]) <= 8  # a probe among the first explore_every steps
    assert policy.history and policy.history[0].before == (1, 0) and policy.history[0].gain > policy.threshold
    assert policy.shape_for("rrsw", 1.0).size > 1 and sizes[-1] > 1


def test_a_one_node_plan_stays_when_the_probes_confirm_it(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.2, 0.05])
    step_costs = costs(lambda n: 0.01 * (1 + n / 16), level=0.002)
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), step_costs, replan_every=16,
                          min_samples=60, explore_every=4, background_checks=False)
    rng = np.random.default_rng(3)
    sizes = []
    for _ in range(800):
        shape = policy.next_shape("rrsw", 1.0)
        sizes.append(shape.size)
        policy.observe("rrsw", 1.0, shape, simulate_walk(shape, [0.2, 0.05], rng))
    assert not policy.history and policy.shape_for("rrsw", 1.0).size == 1
    probes = [i for i, size in enumerate(sizes) if size > 1]
    assert probes[:4] == [3, 7, 11, 15]  # every fourth step at first,
    gaps = np.diff(probes)
    assert (np.diff(gaps) >= 0).all() and gaps[-1] >= 16  # then less often as checks confirm the plan
    assert set(gaps) <= {4, 8, 16, 32, 64}
    assert len(probes) < 800 // 6  # 200 without the back-off


def test_fixed_and_non_adaptive_plans_never_probe(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.2, 0.05])
    step_costs = costs(lambda n: 0.01 * (1 + n / 16), level=0.002)
    frozen = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), step_costs, adaptive=False)
    assert {frozen.next_shape("rrsw", 1.0).size for _ in range(20)} == {1}
    with pytest.raises(ValueError, match="explore_every"):
        SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), step_costs, explore_every=0)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def serve_trial(trial, clock, steps, seconds, tokens):
    """Steps handed out and ended one after another: each tree's step emits `tokens[tree]`
    and advances the clock `seconds[tree]` (a round's share), so tree t's throughput is
    tokens[t] / seconds[t]."""
    served = []
    for _ in range(steps):
        tree = trial.next()
        clock.now += seconds[tree]
        trial.record(tree, tokens[tree])
        served.append(tree)
    return "".join(map(str, served))


def test_a_tree_trial_serves_both_trees_then_keeps_the_faster_and_notices_a_change():
    clock = FakeClock()
    trial = TreeTrial(("D", "T"), sequences=2, window=8, exploit=16, clock=clock)
    seconds, tokens = {"D": 0.1, "T": 0.04}, {"D": 2, "T": 1}  # drafting 20 tokens/s, target-only 25
    assert serve_trial(trial, clock, 16, seconds, tokens) == "D" * 8 + "T" * 8
    assert serve_trial(trial, clock, 24, seconds, tokens) == "T" * 16 + "D" * 8
    # Each turn counts from its settling (2 steps of its tree ended) to its last step.
    assert trial.rate(0) == pytest.approx(20.0) and trial.rate(1) == pytest.approx(25.0)
    assert serve_trial(trial, clock, 40, seconds, tokens) == "T" * 32 + "D" * 8  # confirmed: twice as long
    seconds["D"] = 0.05  # drafting now 40 tokens/s: its next turn shows it, and it is kept
    assert serve_trial(trial, clock, 72, seconds, tokens) == "T" * 64 + "D" * 8
    assert serve_trial(trial, clock, 24, seconds, tokens) == "D" * 16 + "T" * 8
    assert trial.rate(0) > trial.rate(1)


def test_a_tree_trial_counts_neither_the_other_trees_steps_nor_a_turn_before_it_settles_or_across_an_interrupt():
    clock = FakeClock()
    trial = TreeTrial(("D", "T"), sequences=3, window=4, exploit=4, clock=clock)
    assert [trial.next() for _ in range(4)] == ["D"] * 4
    for step in range(4):  # the first three settle the turn; the fourth alone counts
        clock.now += 1.0
        trial.record("D", 10)
        trial.record("T", 1000)  # not the turn's tree: ignored
    assert trial.next() == "T"  # the switch closes D's turn: 10 tokens over the 1 s after settling
    assert trial.rate(0) == pytest.approx(10.0) and trial.rate(1) is None
    clock.now += 5.0
    trial.record("D", 1000)  # a step of the old turn ending late: not T's, not D's any more
    assert trial.rate(0) == pytest.approx(10.0)
    for step in range(4):
        clock.now += 1.0
        trial.record("T", 3)
    trial.interrupt()  # the load left: the turn under way is dropped, time and tokens
    clock.now += 100.0
    assert [trial.next() for _ in range(3)] == ["T"] * 3
    assert trial.rate(1) is None
    with pytest.raises(ValueError, match="sequences >= 1"):
        TreeTrial(("D", "T"), sequences=0)


def test_a_warm_tree_trial_starts_from_the_choice_it_is_given():
    clock = FakeClock()
    trial = TreeTrial(("D", "T"), sequences=2, window=8, exploit=16, first=1, warm=True, clock=clock)
    assert trial.choice == "target_only" and trial.turns == [0, 0]
    seconds, tokens = {"D": 0.1, "T": 0.04}, {"D": 2, "T": 1}
    # Straight to a cycle of the choice, then a turn of the other; the comparison confirms it,
    # and the next cycle is twice as long.
    assert serve_trial(trial, clock, 56, seconds, tokens) == "T" * 16 + "D" * 8 + "T" * 32
    assert trial.rate(0) == pytest.approx(20.0) and trial.rate(1) == pytest.approx(25.0) and trial.turns == [1, 1]
    # Cold, `first` only orders the opening turns; no choice until both are measured.
    cold = TreeTrial(("D", "T"), sequences=2, window=8, exploit=16, first=1, clock=clock)
    assert cold.choice is None and serve_trial(cold, clock, 16, seconds, tokens) == "T" * 8 + "D" * 8
    assert serve_trial(cold, clock, 1, seconds, tokens) == "T" and cold.choice == "target_only"


def test_load_levels_are_powers_of_two_and_the_gauge_follows_the_targets_batches():
    assert [load_level(s) for s in (0, 1, 1.4, 1.5, 3, 5, 6, 11, 12, 1000)] == [1, 1, 1, 2, 4, 4, 8, 8, 16, 64]
    gauge = LoadGauge(span=4)
    for _ in range(40):
        gauge.observe(8)
    gauge.observe(0)  # not said: no change
    assert gauge.mean == pytest.approx(8.0, abs=0.01)


def load_costs(per_sequence):
    """A target whose forward grows with its rows, a drafter level likewise."""
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    return Costs(MeasuredTimes(sizes, tuple(0.005 + 0.0002 * n for n in sizes)),
                 MeasuredTimes((1, 32), (0.0002, 0.0002 * 32)), 0.0, per_sequence, per_sequence)


def test_auto_trees_are_priced_for_the_load_and_seeded_requests_keep_the_one_sequence_tree(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.8, 0.1, 0.05])
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), load_costs(0.001), adaptive=False)
    alone = policy.next_shape("rrsw", 1.0)
    assert policy.load_level(1) == 1 and policy.load_level(13) == 16
    sizes = [policy.shape_under_load("rrsw", 1.0, level).size for level in (1, 2, 4, 8, 16)]
    assert sizes == [alone.size, 4, 4, 2, 1] and alone.size == 8
    under_load = policy.shape_under_load("rrsw", 1.0, 8)
    assert policy.trial("rrsw", 1.0, 8).trees == (under_load, TreeShape.chain(0))
    policy.next_shape("rrsw", 1.0, sequences=8)
    assert policy.load_level() == 2  # one step at 8 moves the smoothed load only so far
    assert [policy.next_shape("rrsw", 1.0, sequences=8) for _ in range(40)][-10:] == [under_load] * 10
    # Priced at one node, the trial still checks drafting, with the tree planned for one sequence.
    assert policy.trial("rrsw", 1.0, 16).trees == (alone, TreeShape.chain(0))
    # A turn is at least 8 steps of every sequence: longer windows at higher loads.
    assert policy.trial("rrsw", 1.0, 16).window == 128 and policy.trial("rrsw", 1.0, 64).window == 512
    assert policy.first_shape("rrsw", 1.0) == alone  # what a seeded request drafts, whatever the load
    # The target's batches count too (other coordinators' sequences): 8 per forward is load 8.
    for _ in range(100):
        policy.served("rrsw", 1.0, TreeShape.chain(0), Outcome([1], [], [], batch_size=4))
    assert policy.load_level(1) == 4
    policy.in_flight.mean = 1.0
    assert policy.next_shape("rrsw", 1.0) == policy.shape_under_load("rrsw", 1.0, 4)


def test_only_auto_trees_are_load_aware(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.8, 0.1, 0.05])
    fixed = SequoiaTrees(SequoiaSpec(32, 6), AcceptanceLibrary(tmp_path), adaptive=False)
    assert fixed.next_shape("rrsw", 1.0, sequences=16) == fixed.shape_for("rrsw", 1.0) and fixed.load_level(16) == 1
    off = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), load_costs(0.001), adaptive=False,
                       load_aware=False)
    assert off.next_shape("rrsw", 1.0, sequences=16) == off.shape_for("rrsw", 1.0)


def _trial_at_four_sequences(tmp_path) -> tuple[SequoiaTrees, TreeTrial, TreeShape, FakeClock]:
    """An auto policy under a load of 4 sequences, its trial there on a fake clock: (policy,
    trial, the trial's drafting tree, clock)."""
    write_vector(tmp_path, "rrsw", 1.0, [0.8, 0.1, 0.05])
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), load_costs(0.001), adaptive=False)
    clock = FakeClock()
    for _ in range(40):  # the load builds up to 4 sequences at once
        policy.next_shape("rrsw", 1.0, sequences=4)
    drafting = policy.shape_under_load("rrsw", 1.0, 4)
    trial = policy._trials[("rrsw", 1.0), 4] = TreeTrial((drafting, TreeShape.chain(0)), 4, window=16, exploit=64,
                                                         clock=clock)
    return policy, trial, drafting, clock


def test_an_auto_trial_measures_what_it_serves_and_switches_to_target_only_when_drafting_is_slower(tmp_path):
    policy, _, _, clock = _trial_at_four_sequences(tmp_path)
    served = []
    for _ in range(96):
        shape = policy.next_shape("rrsw", 1.0, sequences=4)
        drafts = shape.size > 1
        clock.now += 0.03 if drafts else 0.01  # drafting: 2 tokens per 30 ms, target-only 1 per 10 ms
        outcome = Outcome([1, 2], [1], [1]) if drafts else Outcome([1], [], [])
        policy.served("rrsw", 1.0, shape, outcome)
        served.append(drafts)
    assert served[:16] == [True] * 16 and served[16:32] == [False] * 16 and served[32:] == [False] * 64


def test_an_auto_trial_counts_the_steps_of_its_drafting_tree_drafted_narrower(tmp_path):
    """A drafter draws fewer children than planned where top-p, top-k or min-p leave q fewer
    tokens: the step is still the drafting tree's, and its tokens count for it."""
    policy, trial, drafting, clock = _trial_at_four_sequences(tmp_path)
    assert drafting.max_children > 1
    narrow = TreeShape.chain(drafting.max_depth)  # each node's first child alone
    for _ in range(96):
        planned = policy.next_shape("rrsw", 1.0, sequences=4)
        drafts = planned.size > 1
        clock.now += 0.02 if drafts else 0.01  # drafting: 3 tokens per 20 ms, target-only 1 per 10 ms
        outcome = Outcome([1, 2, 3], [1, 2], [1, 1]) if drafts else Outcome([1], [], [])
        policy.served("rrsw", 1.0, planned, outcome)
        policy.observe("rrsw", 1.0, narrow if drafts else planned, outcome)
    assert trial.choice == "drafting"
    assert trial.report().rates == (pytest.approx(150.0), pytest.approx(100.0))


def test_a_new_levels_trial_starts_from_what_the_nearest_level_chose(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.8, 0.1, 0.05])
    policy = SequoiaTrees(SequoiaSpec(None), AcceptanceLibrary(tmp_path), load_costs(0.001), adaptive=False)
    clock, target_only = FakeClock(), TreeShape.chain(0)
    drafting = policy.shape_under_load("rrsw", 1.0, 8)
    trial = policy._trials[("rrsw", 1.0), 8] = TreeTrial((drafting, target_only), 8, window=24, exploit=24,
                                                          clock=clock)
    assert policy.trial("rrsw", 1.0, 4).choice is None  # before level 8 has chosen: both measured afresh
    serve_trial(trial, clock, 72, {drafting: 0.03, target_only: 0.01}, {drafting: 2, target_only: 1})
    assert trial.choice == "target_only"
    warm = policy.trial("rrsw", 1.0, 16)  # from the nearest level that chose, 8: a cycle of target-only first
    assert warm.choice == "target_only" and [warm.next() for _ in range(7 * 128)] == [target_only] * (7 * 128)
    assert policy.trial("rrsw", 1.0, 4).choice is None  # a level's trial, once made, keeps its own course
    [(verifier, temperature, report)] = [t for t in policy.trials() if t[2].sequences == 8]
    assert (verifier, temperature, report.choice, report.drafting_nodes) == ("rrsw", 1.0, "target_only", drafting.size)
    assert report.rates == (pytest.approx(2 / 0.03), pytest.approx(100.0)) and report.turns == (1, 1)
    assert [t[2].sequences for t in policy.trials()] == [4, 8, 16]


def test_history_keeps_the_latest_replans_and_the_report_counts_them_all(tmp_path, monkeypatch):
    write_vector(tmp_path, "rrsw", 1.0, [0.3, 0.3, 0.2])

    def served():
        policy = CountedChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                               min_samples=100, background_checks=False)
        serve_planned_trees(policy, [0.85, 0.05, 0.02], np.random.default_rng(0))
        return policy

    whole = served()
    monkeypatch.setattr(SequoiaTrees, "HISTORY_KEPT", 1)
    kept = served()
    assert len(whole.history) > 1 and list(kept.history) == [whole.history[-1]]
    assert kept.plans()[0][2].replans == len(whole.history)


def test_plans_report_the_tree_in_use_its_changes_and_the_checks(tmp_path):
    write_vector(tmp_path, "rrsw", 1.0, [0.3, 0.3, 0.2])
    policy = CountedChecks(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=25,
                           min_samples=100, background_checks=False)
    assert policy.plans() == []  # nothing planned before a request
    rng = np.random.default_rng(0)
    serve_planned_trees(policy, [0.85, 0.05, 0.02], rng)
    [(verifier, temperature, report)] = policy.plans()
    final = policy.shape_for("rrsw", 1.0)
    assert (verifier, temperature, report.spec) == ("rrsw", 1.0, "sequoia:16x8")
    assert (report.nodes, report.depth) == (final.size, final.max_depth)
    assert report.replans == len(policy.history) > 0 and report.checks == len(policy.checks)
    assert report.check_seconds > 0
