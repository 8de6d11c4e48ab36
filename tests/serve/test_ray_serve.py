"""The Ray Serve application end to end: a real local Ray cluster (2 CPUs), the coordinator
deployment behind Serve's HTTP proxy, and drafter and target gRPC workers as plain
processes.  One cluster for the module, a few requests: same seed => the tokens of the
in-process engine (through the official openai client), streaming through the proxy, an
error, /health and /metrics, and a disconnect mid-stream stopping the generation."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
import ray
from ray import serve

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.models import load_causal_lm
from rayspec.serve.config import ServiceConfig
from tests.local_ray import start_ray
from tests.loopback import free_port, stalled_request
from tests.rpc.processes import Worker, save_tiny_pair

MODEL = "tiny-pair"
PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from rayspec.serve.app import build_serve_app

    tmp = tmp_path_factory.mktemp("serve")
    target_path, drafter_path = save_tiny_pair(tmp)
    workers = [
        Worker(tmp / "target.log", "--role", "target", "--model", str(target_path)),
        Worker(tmp / "drafter.log", "--role", "drafter", "--model", str(drafter_path)),
    ]
    port = free_port()
    config = ServiceConfig.from_dict({
        "model_id": MODEL, "target": {"path": str(target_path)}, "drafters": [{"path": str(drafter_path)}] * 2,
        "verifier": "rrsw", "tree": "kary:2x3", "http": {"port": port}, "limits": {"body_timeout": 2},
    })
    head = None
    try:
        head = start_ray(num_cpus=2)
        serve.start(http_options={"host": config.http.host, "port": config.http.port})
        # two drafters (a DrafterPool) served by one worker process, to spare the CPU
        drafters = [workers[1].address] * 2
        serve.run(build_serve_app(config, workers[0].address, drafters), name="rayspec", route_prefix="/")
        yield {"url": f"http://{config.http.host}:{port}", "paths": (target_path, drafter_path)}
    finally:
        if ray.is_initialized():
            serve.shutdown()
        if head is not None:
            head.stop()
        for worker in workers:
            worker.stop()


@pytest.fixture(scope="module")
def reference(cluster):
    target_path, drafter_path = cluster["paths"]
    target, tokenizer = load_causal_lm(target_path, "cpu", "float32")
    drafter, _ = load_causal_lm(drafter_path, "cpu", "float32")
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3", tokenizer=tokenizer)
    return engine, tokenizer


@pytest.fixture
def http(cluster):
    with httpx.Client(base_url=cluster["url"], timeout=60) as client:
        yield client


def metrics(http) -> dict[str, float]:
    """Unlabelled samples and label-summed counters of /metrics, by sample name."""
    values: dict[str, float] = {}
    for line in http.get("/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{")[0]
            values[name] = values.get(name, 0.0) + float(value)
    return values


def test_completion_through_serve_is_the_in_process_engine_output(cluster, reference):
    engine, tokenizer = reference
    prompt_ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    local = engine.run(prompt_ids, max_new_tokens=30, temperature=0.8, seed=7)
    client = openai.OpenAI(base_url=f"{cluster['url']}/v1", api_key="x", max_retries=0)
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=30, temperature=0.8, seed=7)
    assert completion.choices[0].text == tokenizer.decode(local.tokens, skip_special_tokens=True).rstrip("\ufffd")
    accepted = sum(s.accepted_in_completion for s in local.stats.steps)
    assert completion.usage.completion_tokens == 30
    assert completion.usage.completion_tokens_details.accepted_prediction_tokens == accepted
    assert completion.rayspec["seed"] == 7 and completion.rayspec["steps"] == len(local.stats.steps)


def test_streaming_through_serve_delivers_each_step(http, reference):
    engine, tokenizer = reference
    request = GenerationRequest(engine, tokenizer, Limits(), prompt=PROMPT, max_tokens=40, seed=4)
    deltas = [added.text for added in request.run() if added.text]
    arrivals, events = [], []
    started = time.perf_counter()
    with http.stream("POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 40, "seed": 4, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(line[len("data: "):])
                arrivals.append(time.perf_counter() - started)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["text"] for c in chunks[:-1]] == deltas
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert arrivals[0] < arrivals[-2]  # the proxy passes events on as they come, not at the end


def test_errors_health_and_metrics_through_serve(http):
    before = metrics(http)
    bad = http.post("/v1/completions", json={"prompt": "x", "rayspec": {"verifier": "nope"}})
    assert bad.status_code == 400 and "unknown verifier" in bad.json()["error"]["message"]
    malformed = http.post("/v1/completions", content="{", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"
    ok = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8}, headers={"X-Request-Id": "trace-7"})
    # one X-Request-Id (Ray Serve's proxy writes it; the app does not write a second), naming the completion
    assert ok.status_code == 200 and ok.headers.get_list("x-request-id") == ["trace-7"]
    assert ok.json()["id"] == "cmpl-trace-7"
    health = http.get("/health")
    assert health.status_code == 200 and len(health.json()["workers"]) == 2
    assert set(health.json()["workers"].values()) == {"SERVING"}
    after = metrics(http)
    assert after["rayspec_generated_tokens_total"] - before.get("rayspec_generated_tokens_total", 0) == 8
    assert after["rayspec_http_requests_total"] - before.get("rayspec_http_requests_total", 0) >= 3
    assert after["rayspec_phase_seconds_total"] > 0 and after["rayspec_step_wire_bytes_sum"] > 0


def test_a_disconnect_through_serve_stops_the_generation(http):
    before = metrics(http).get("rayspec_generated_tokens_total", 0)
    # target-only decoding, one token per step: ~500 steps to fill the 512-token context
    body = {"prompt": PROMPT, "max_tokens": 480, "stream": True, "rayspec": {"tree": "none"}}
    with http.stream("POST", "/v1/completions", json=body) as response:
        next(line for line in response.iter_lines() if line)
    deadline = time.monotonic() + 30
    while metrics(http)["rayspec_generations_in_flight"] > 0:  # 0 once the sessions are released
        assert time.monotonic() < deadline, "the generation did not stop after the client left"
        time.sleep(0.05)
    assert metrics(http)["rayspec_generated_tokens_total"] - before < 400


def test_a_body_stalled_halfway_through_serve_gets_a_408(cluster, http):
    """Serve's proxy streams a body on to the replica as it comes: one that stops halfway is
    answered 408 at `limits.body_timeout` (2 s here), not held while its connection lives."""
    body = json.dumps({"prompt": PROMPT, "max_tokens": 4}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    reply, answered = stalled_request(cluster["url"], head, [body[:10]], pause=0.2)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", reply
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert 1.5 < answered < 8, answered
    assert http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4}).status_code == 200
