"""`rayspec serve` with the target `where: coordinator`: the Serve replica owns the placement
group, loads the target, starts the drafter worker in the other bundle and serves the gRPC
Generation API itself.  A real local Ray cluster, real gRPC and HTTP: same seed => the
in-process engine's tokens over HTTP and the gRPC SDK, one process holding the target (no
target worker, only the drafter crosses a process boundary), and bad input refused."""

from __future__ import annotations

import pytest

from rayspec.serve.config import ServiceConfig
from tests.cluster.launching import assert_metrics_count_both_apis, assert_serves_in_process_tokens, launched


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with launched(tmp_path_factory.mktemp("pair"), {"threads": 1, "where": "coordinator"}, [{"threads": 1}]) as running:
        yield running


def test_http_and_grpc_give_the_in_process_tokens(service):
    assert_serves_in_process_tokens(*service)


def test_metrics_count_the_generations_of_both_apis(service):
    """One process serves both APIs from one engine, and observes both in one registry."""
    assert_metrics_count_both_apis(service[0])


def test_one_process_holds_the_target_and_serves_both_apis(service):
    import httpx
    import ray
    from ray import serve

    running, _, _ = service
    assert running.target is None and running.generation is None  # no target worker, no second coordinator
    replica = serve.get_deployment_handle("rayspec-coordinator", app_name="rayspec")
    assert replica.grpc_address.remote().result(timeout_s=60) == running.grpc_address
    assert running.target_node == ray.get_runtime_context().get_node_id()
    with httpx.Client(base_url=running.http_address, timeout=60) as http:
        health = http.get("/health")
        assert health.status_code == 200
        workers = health.json()["workers"]  # the drafter is the only worker the coordinator calls
        assert len(workers) == 1 and next(iter(workers)).startswith("drafter ")
        bad = http.post("/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": -1})
        assert bad.status_code == 400 and "max_tokens" in bad.json()["error"]["message"]
        assert http.post("/v1/completions", json={"model": "tiny", "prompt": "ok", "max_tokens": 3}).status_code == 200


def test_a_bad_target_placement_is_refused_with_a_message():
    with pytest.raises(ValueError, match="target.where must be worker or coordinator, got 'edge'"):
        ServiceConfig.from_dict({"target": {"where": "edge"}})
