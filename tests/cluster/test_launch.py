"""The whole service as `rayspec serve` starts it: a real local Ray cluster, a placement group
with the target and drafter worker actors serving gRPC, the gRPC coordinator actor and the
Ray Serve HTTP app (each coordinator also running a drafter of its own, `where: coordinator`).  Same seed, same request => the tokens of the in-process engine, over
HTTP (the official openai client) and the gRPC SDK; bad input is refused and the service
keeps serving; a short locust run has no failures, nor a short soak of every kind of request,
after which no worker session is left."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.launching import (
    PROMPT, assert_both_coordinators_plan_from_one_calibration, assert_metrics_count_both_apis,
    assert_serves_in_process_tokens, in_process_tokens, launched,
)
from tests.cluster.mixed_traffic import KINDS, idle, run_traffic, worker_infos

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    # a drafter worker and, taken by every other request, a drafter in the coordinators
    with launched(tmp_path_factory.mktemp("pair"), {"threads": 1}, [{"threads": 1}, {"where": "coordinator"}],
                  tree="sequoia:auto") as running:
        yield running


def test_http_and_grpc_give_the_in_process_tokens(service):
    # a drafter worker and a drafter in the coordinators, taken in turn
    assert_serves_in_process_tokens(*service)


def test_both_coordinators_plan_from_one_calibration_so_a_seed_gives_the_same_tokens_through_either(service):
    """The service's tree is sequoia:auto: the gRPC coordinator measures the step costs at
    start-up and the HTTP one plans from them."""
    assert_both_coordinators_plan_from_one_calibration(service[0])


def test_metrics_count_the_generations_of_both_apis(service):
    """The gRPC API's generations are the `GenerationActor`'s, a coordinator of its own: the
    replica's /metrics adds its metrics."""
    assert_metrics_count_both_apis(service[0])


def test_the_coordinators_run_on_the_targets_node(service):
    import ray
    from ray import serve

    running, _, _ = service
    target_node = ray.get(running.target.node_id.remote())
    assert running.target_node == target_node
    replica = serve.get_deployment_handle("rayspec-coordinator", app_name="rayspec")
    assert replica.node_id.remote().result(timeout_s=60) == target_node
    assert ray.get(running.generation.node_id.remote()) == target_node


def test_the_placement_group_and_worker_actors_carry_one_name_of_the_services_own(service):
    """Unique in the cluster, so that a second service beside this one does not meet its
    names; the gRPC coordinator finds the workers by them after a restart."""
    import ray
    from ray.util.placement_group import placement_group_table

    running, _, _ = service
    name = placement_group_table(running.group)["name"]
    assert name.startswith("rayspec-") and len(name) == len("rayspec-") + 8
    assert ray.get_actor(f"{name}-target")._actor_id == running.target._actor_id
    assert ray.get_actor(f"{name}-drafter-0")._actor_id == running.drafters[0]._actor_id


def test_a_placement_group_the_cluster_cannot_place_ends_the_start_saying_what_it_has(service, capsys):
    import pytest
    from ray.util.placement_group import placement_group, remove_placement_group

    from rayspec.cluster.actors import ServiceStartError, wait_for_group

    spec = [{"CPU": 0.5, "GPU": 1.0}]
    group = placement_group(spec)
    try:
        with pytest.raises(ServiceStartError, match=r"did not place bundles \[\{'CPU': 0.5, 'GPU': 1.0\}\] \(PACK\) "
                                                    r"within 3 s; it has \{'CPU': 2.0\} on 1 node\(s\)"):
            wait_for_group(group, spec, "PACK", timeout=3, notice_after=1)
        assert "rayspec: waiting for the cluster to place bundles [{'CPU': 0.5, 'GPU': 1.0}] (PACK)" in capsys.readouterr().err
    finally:
        remove_placement_group(group)


def test_the_http_coordinator_is_pinned_to_a_node_by_its_ray_node_id_label():
    from rayspec.serve.app import coordinator_actor_options

    assert coordinator_actor_options(None) == {"num_cpus": 0}
    assert coordinator_actor_options("ab12") == {"num_cpus": 0, "label_selector": {"ray.io/node-id": "ab12"}}


def test_with_no_address_serve_starts_a_new_local_ray_unless_ray_address_is_set(monkeypatch):
    from rayspec.cluster.launch import ray_to_join

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # not None: ray.init(None) would join a dead `ray start` cluster named in ray_current_cluster
    assert ray_to_join(None) == "local"
    assert ray_to_join("auto") == "auto"
    assert ray_to_join("10.0.0.5:6379") == "10.0.0.5:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    assert ray_to_join(None) == "10.0.0.7:6379"
    assert ray_to_join("auto") == "auto"


def test_a_wildcard_host_is_advertised_as_the_nodes_ip():
    import ray

    from rayspec.cluster.actors import advertised_address

    assert advertised_address("127.0.0.1", 9000) == "127.0.0.1:9000"
    for wildcard in ("0.0.0.0", "::"):
        assert advertised_address(wildcard, 9000) == f"{ray.util.get_node_ip_address()}:9000"
    assert not ray.util.get_node_ip_address().startswith("0.0.0.0")


def test_bad_input_is_refused_and_the_service_keeps_serving(service):
    import httpx

    from rayspec.client import Client, InvalidRequestError

    running, _, _ = service
    with httpx.Client(base_url=running.http_address, timeout=60) as http:
        assert http.post("/v1/completions", content=b"{not json").status_code == 400
        bad = http.post("/v1/completions", json={"model": "tiny", "prompt": "x", "rayspec": {"verifier": "nope"}})
        assert bad.status_code == 400 and "unknown verifier" in bad.json()["error"]["message"]
        assert http.post("/v1/completions", json={"model": "tiny", "prompt": [1] * 600}).status_code == 400
        assert http.post("/v1/completions", json={"model": "tiny", "prompt": "ok", "max_tokens": 4}).status_code == 200
        assert http.get("/health").status_code == 200
    with Client(running.grpc_address) as sdk:
        with pytest.raises(InvalidRequestError, match="max_tokens"):
            sdk.generate("x", max_tokens=-2)
        assert sdk.health() and len(sdk.generate("ok", max_tokens=3).token_ids) == 3


def test_a_short_locust_run_has_no_failures(service, tmp_path):
    running, _, _ = service
    env = {**os.environ, "RAYSPEC_GRPC": running.grpc_address, "RAYSPEC_MAX_TOKENS": "16"}
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest/locustfile.py"), "--headless", "-u", "2", "-r", "2",
         "-t", "12s", "--host", running.http_address, "--only-summary", "--exit-code-on-error", "1",
         "--csv", str(tmp_path / "run")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = (tmp_path / "run_stats.csv").read_text().splitlines()
    assert any("TTFT ms" in row for row in rows) and any(",HTTP," in row or "POST" in row for row in rows)


def test_a_mix_of_requests_and_clients_that_leave_fails_none_and_leaves_no_session_behind(service):
    """A short soak (`bench/soak.py` runs it for minutes): every kind of request of
    `mixed_traffic.KINDS` from three users for 20 s, clients leaving streams and timing out
    among them; each answer is the due one, and once they stop every worker session is released
    and nothing is in flight or waiting."""
    running, _, _ = service
    tally = run_traffic(running.http_address, running.grpc_address, seconds=20, users=3, seed=1)
    assert not tally.failures, tally.examples
    assert set(tally.counts) == set(KINDS)
    assert idle(running, timeout=60)
    infos = worker_infos(running)
    assert {role: info.open_sessions for role, info in infos.items()} == {"target": 0, "drafter 0": 0}
    # /metrics tells what the workers do (the HTTP coordinator asks them at each scrape)
    scraped = {(sample.name, sample.labels["worker"]): sample.value
               for family in text_string_to_metric_families(httpx.get(f"{running.http_address}/metrics").text)
               for sample in family.samples if "worker" in sample.labels}
    for role, info in infos.items():
        assert scraped[("rayspec_worker_up", role)] == 1
        assert scraped[("rayspec_worker_open_sessions", role)] == 0
        assert scraped[("rayspec_prefix_cache_bytes", role)] == info.prefix_cache_bytes
        assert scraped[("rayspec_prefix_cache_queried_tokens_total", role)] == info.prefix_cache_queried_tokens > 0


def _wait_until(condition, what: str, timeout: float = 120.0) -> float:
    """Seconds until `condition()` holds."""
    import time

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"waited {timeout:g} s for {what}")


def _wait_for_health(url: str, status: str, timeout: float = 120.0) -> float:
    """Seconds until GET /health answers `status` ("ok", "degraded", "unavailable")."""
    import httpx

    def answers():
        try:
            return httpx.get(f"{url}/health", timeout=10).json()["status"] == status
        except (httpx.HTTPError, ValueError):
            return False

    return _wait_until(answers, f"/health to answer {status!r}", timeout)


def test_a_stream_whose_target_worker_is_killed_resumes_with_the_uninterrupted_tokens(service):
    """The target actor's process is killed under a gRPC stream (a seeded gumbel decode of 480
    tokens on kary:4x4 trees, some seconds here); Ray restarts it at its address and the
    sequence resumes there: the stream pauses, then gives exactly the in-process tokens, which
    gumbel's draws fix whatever the drafts and the session they came from."""
    import time

    import ray

    from rayspec.client import Client

    running, target_path, drafter_path = service
    request = dict(max_tokens=480, temperature=0.8, seed=3, ignore_eos=True)
    expected, _ = in_process_tokens(target_path, drafter_path, "gumbel", "kary:4x4", **request)
    _wait_for_health(running.http_address, "ok")
    address = ray.get(running.target.ready.remote(), timeout=60)
    tokens, gaps = [], []
    with Client(running.grpc_address) as sdk:
        stream = iter(sdk.stream(PROMPT, **request, verifier="gumbel", tree="kary:4x4", timeout=300))
        tokens += next(stream).token_ids
        ray.kill(running.target, no_restart=False)
        last = time.monotonic()
        for chunk in stream:
            tokens += chunk.token_ids
            gaps.append(time.monotonic() - last)
            last = time.monotonic()
    assert len(tokens) == 480 and tokens == expected
    assert max(gaps) > 1.0, f"no pause: the kill landed after the stream ({len(gaps)} chunks after it)"
    assert ray.get(running.target.ready.remote(), timeout=60) == address


def test_a_worker_whose_process_dies_is_restarted_at_its_address_and_served_again(service):
    """Last in this module: kills its workers.  Ray restarts a killed worker actor, which binds
    the port it had, so both coordinators take it back without being told: first the drafter
    worker (the service decodes on meanwhile, `degraded`), then the target (`unavailable`
    until it is back); and the gRPC coordinator, at its configured port and with the step
    costs it had measured.  Afterwards a seed gives the in-process engine's tokens again,
    through both APIs and both drafters."""
    import ray

    from rayspec.client import Client
    from rayspec.cluster.actors import KeptCosts
    from rayspec.engine.calibrate import Costs

    running, target_path, drafter_path = service
    url = running.http_address
    _wait_for_health(url, "ok")
    for worker, while_down in ((running.drafters[0], "degraded"), (running.target, "unavailable")):
        address = ray.get(worker.ready.remote(), timeout=60)
        ray.kill(worker, no_restart=False)  # as the kernel's OOM killer would: the process goes at once
        _wait_for_health(url, while_down, timeout=30)
        assert ray.get(worker.ready.remote(), timeout=120) == address
        _wait_for_health(url, "ok")
    costs = ray.get(running.generation.costs.remote(), timeout=60)
    # kept in the cluster's key-value store, which a restart reads on whichever node it runs
    assert KeptCosts(running.generation._actor_id.hex()).load() == Costs.from_json(costs)
    ray.kill(running.generation, no_restart=False)
    with Client(running.grpc_address, retries=0) as sdk:
        _wait_until(lambda: not sdk.health(timeout=5), "the gRPC coordinator to go", timeout=30)
        _wait_until(lambda: sdk.health(timeout=5), "the gRPC coordinator to come back")
    assert ray.get(running.generation.ready.remote(), timeout=60) == running.grpc_address
    # it plans from the costs it measured before, which the HTTP coordinator holds too
    assert costs is not None and ray.get(running.generation.costs.remote(), timeout=60) == costs
    assert_both_coordinators_plan_from_one_calibration(running)
    assert_serves_in_process_tokens(running, target_path, drafter_path)


def test_a_worker_restarted_at_another_address_is_followed_by_both_coordinators(service):
    """As when its node is lost and Ray places its bundle on another: the port a killed worker
    had is taken before it restarts, so it listens elsewhere; both coordinators' `WorkerWatch`
    dials it there.  The drafter, then the target."""
    import ray

    running, target_path, drafter_path = service
    url = running.http_address
    _wait_for_health(url, "ok")
    for worker in (running.drafters[0], running.target):
        address = ray.get(worker.ready.remote(), timeout=60)
        port = int(address.rsplit(":", 1)[1])
        ray.kill(worker, no_restart=False)
        squatter = socket.socket()
        try:
            _wait_until(lambda: _bound(squatter, port), f"port {port} to be free", timeout=30)
            moved = ray.get(worker.ready.remote(), timeout=120)
            assert moved != address
            _wait_for_health(url, "ok", timeout=60)
        finally:
            squatter.close()
        workers = httpx.get(f"{url}/health", timeout=10).json()["workers"]
        assert any(name.endswith(moved) for name in workers) and not any(name.endswith(address) for name in workers)
        # the gRPC coordinator's watch keeps its own period: /health answering "ok" says only
        # that the HTTP one has followed
        _wait_until(lambda: any(name.endswith(moved) for name in _grpc_dials(running)),
                    f"the gRPC coordinator to dial {moved}", timeout=60)
        assert not any(name.endswith(address) for name in _grpc_dials(running))
    assert_serves_in_process_tokens(running, target_path, drafter_path)


def _grpc_dials(running) -> list[str]:
    """The workers the gRPC coordinator dials now ("target host:port", ...)."""
    import ray

    return ray.get(running.generation.workers.remote(), timeout=30)


def _bound(sock, port: int) -> bool:
    """Whether `sock` now listens on `port` (the killed worker's connections may hold it in
    TIME_WAIT for a while: SO_REUSEADDR; no SO_REUSEPORT, so that gRPC cannot bind it beside)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))
    except OSError:
        return False
    sock.listen()
    return True
