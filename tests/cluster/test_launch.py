"""The whole service as `rayspec serve` starts it: a real local Ray cluster, a placement group
with the target and drafter worker actors serving gRPC, the gRPC coordinator actor and the
Ray Serve HTTP app (each coordinator also running a drafter of its own, `where: coordinator`).  Same seed, same request => the tokens of the in-process engine, over
HTTP (the official openai client) and the gRPC SDK; bad input is refused and the service
keeps serving; a short locust run has no failures."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models import load_causal_lm
from rayspec.serve.config import ServiceConfig
from tests.rpc.processes import save_tiny_pair

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    import ray

    from rayspec.cluster.launch import Service

    target_path, drafter_path = save_tiny_pair(tmp_path_factory.mktemp("pair"))
    config = ServiceConfig.from_dict({
        "model_id": "tiny",
        "target": {"path": str(target_path), "threads": 1},
        # a drafter worker and, taken by every other request, a drafter in the coordinators
        "drafters": [{"path": str(drafter_path), "threads": 1}, {"path": str(drafter_path), "where": "coordinator"}],
        "verifier": "rrsw", "tree": "kary:2x3", "adaptive_trees": False,
        "http": {"port": free_port()}, "grpc": {"port": free_port()},
    })
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    running = Service(config)
    yield running, target_path, drafter_path
    running.stop()
    ray.shutdown()


@pytest.fixture(scope="module")
def local_engine(service):
    _, target_path, drafter_path = service
    target, tokenizer = load_causal_lm(target_path, "cpu", "float32")
    drafter, _ = load_causal_lm(drafter_path, "cpu", "float32")
    return SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3"), tokenizer


def test_http_and_grpc_give_the_in_process_tokens(service, local_engine):
    from openai import OpenAI

    from rayspec.client import Client

    running, _, _ = service
    engine, tokenizer = local_engine
    prompt = "def add(a, b):"
    expected = engine.run(tokenizer.encode(prompt, add_special_tokens=False), max_new_tokens=24,
                          temperature=0.8, seed=17).tokens
    client = OpenAI(base_url=f"{running.http_address}/v1", api_key="unused")
    http = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0.8, seed=17)
    assert http.choices[0].text == tokenizer.decode(expected, skip_special_tokens=True)
    assert http.usage.completion_tokens == 24
    http_again = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0.8, seed=17)
    assert http_again.choices[0].text == http.choices[0].text  # the other drafter: the coordinator's
    with Client(running.grpc_address) as sdk:  # the worker's drafter, then the coordinator's
        completion = sdk.generate(prompt, max_tokens=24, temperature=0.8, seed=17)
        assert list(completion.token_ids) == expected
        streamed = list(sdk.stream(prompt, max_tokens=24, temperature=0.8, seed=17))
        assert [t for chunk in streamed for t in chunk.token_ids] == expected


def test_the_coordinators_run_on_the_targets_node(service):
    import ray
    from ray import serve

    running, _, _ = service
    target_node = ray.get(running.target.node_id.remote())
    assert running.target_node == target_node
    replica = serve.get_deployment_handle("rayspec-coordinator", app_name="rayspec")
    assert replica.node_id.remote().result(timeout_s=60) == target_node
    assert ray.get(running.generation.node_id.remote()) == target_node


def test_the_http_coordinator_is_pinned_to_a_node_by_its_ray_node_id_label():
    from rayspec.serve.app import coordinator_actor_options

    assert coordinator_actor_options(None) == {"num_cpus": 0}
    assert coordinator_actor_options("ab12") == {"num_cpus": 0, "label_selector": {"ray.io/node-id": "ab12"}}


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
