"""The HTTP app and the gRPC Generation API side by side over one service, as `rayspec serve`
runs them (`Service.serve_generation_api`): one engine runs the generations of both, so they
wait in one line for the same `limits.max_concurrent_requests` slots, and the service's
`/metrics` counts both."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rayspec.client import Client, OverloadedError
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.serve.config import LimitsConfig
from rayspec.serve.http import create_app
from rayspec.serve.service import Service
from tests.loopback import ServerThread
from tests.serve.served import MODEL, PROMPT, SETTING, Watched, eventually

FULL = ("the service runs 1 generation at once, all of its slots are taken, and its queue is full: 1 request "
        "waits for them (limits.max_queued_requests: 1); retry later")


@pytest.fixture
def front_doors(parts):
    """A service of one slot and a line of one, its target held step by step (`permits`),
    served over HTTP and gRPC."""
    target, drafter, tokenizer = parts
    watched = Watched(LocalTarget(target, tokenizer))
    engine = SpeculativeEngine(watched, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(max_concurrent_requests=1, max_queued_requests=1))
    grpc_server, port = service.serve_generation_api("127.0.0.1:0")
    try:
        with (ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as http,
              Client(f"127.0.0.1:{port}", timeout=60, retries=0) as sdk):
            yield service, watched, http, sdk
    finally:
        if watched.permits is not None:
            watched.permits.release(1000)
        grpc_server.stop(None)


def samples(http) -> dict:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(http.get("/metrics").text) for sample in family.samples}


def completion(http, max_tokens: int = 6) -> httpx.Response:
    return http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, "seed": 1})


@pytest.mark.parametrize("first", ["http", "grpc"])
def test_http_and_grpc_generations_wait_in_one_line_for_the_same_slots(front_doors, first):
    """Each API had a line and `max_concurrent_requests` slots of its own over the one engine:
    a gRPC call ran beside an HTTP generation that held the only slot (two generations at
    once, where the limit said one), and neither line counted the other's."""
    service, target, http, sdk = front_doors
    target.permits = threading.Semaphore(0)  # the first generation is held at its first step
    run = {"http": lambda: completion(http), "grpc": lambda: sdk.generate(PROMPT, max_tokens=6, seed=1)}
    second = "grpc" if first == "http" else "http"
    with ThreadPoolExecutor(2) as pool:
        try:
            running = pool.submit(run[first])
            eventually(lambda: target.open_sessions == 1, what="the first generation to start")
            waiting = pool.submit(run[second])  # in line behind it, whichever API it came through
            eventually(lambda: samples(http)[("rayspec_requests_waiting", ())] == 1, what="the second to wait")
            assert target.opened == 1 and not waiting.done()

            refused = completion(http)  # the line of one is full, for either API
            assert refused.status_code == 429 and refused.json()["error"]["message"] == FULL
            with pytest.raises(OverloadedError, match=f"^RESOURCE_EXHAUSTED: {re.escape(FULL)}$"):
                sdk.generate(PROMPT, max_tokens=6, seed=1)
        finally:
            target.permits.release(1000)
        answers = {first: running.result(timeout=60), second: waiting.result(timeout=60)}
    assert answers["http"].status_code == 200
    assert answers["http"].json()["choices"][0]["text"] == answers["grpc"].text  # one seed, one engine
    assert target.most_open == 1 and target.opened == 2
    assert samples(http)[("rayspec_request_queue_seconds_count", ())] == 2  # each API's request that ran


def test_grpc_generations_are_counted_in_the_services_metrics(front_doors):
    """/metrics counted the HTTP API's generations only: a gRPC one added no step, no time to
    first token, no prompt token and no end."""
    service, target, http, sdk = front_doors
    prompt_tokens = len(service.tokenizer(PROMPT)["input_ids"])
    before = samples(http)
    whole = sdk.generate(PROMPT, max_tokens=6, seed=1)
    chunks = list(sdk.stream(PROMPT, max_tokens=6, seed=2))
    with sdk.stream(PROMPT, max_tokens=50, seed=3) as left:  # a client that leaves after its first chunk
        next(iter(left))
    eventually(lambda: samples(http)[("rayspec_generations_in_flight", ())] == 0, what="the left stream to end")
    after = samples(http)

    def added(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert whole.finish_reason == "length" and len(whole.token_ids) == 6
    assert added("rayspec_generations_ended_total", reason="length") == 2
    assert added("rayspec_generations_ended_total", reason="abort") == 1
    assert added("rayspec_prompt_tokens_total") == 3 * prompt_tokens
    assert added("rayspec_time_to_first_token_seconds_count") == 3
    assert added("rayspec_request_queue_seconds_count") == 3
    streamed_steps = sum(1 for chunk in chunks if chunk.token_ids)
    assert added("rayspec_inter_chunk_seconds_count") >= streamed_steps - 1 > 0
    assert added("rayspec_generated_tokens_total") >= 12
    assert added("rayspec_http_requests_total", endpoint="/v1/completions", status="200") == 0
