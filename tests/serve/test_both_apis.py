"""The HTTP app and the gRPC Generation API side by side.  Over one service, as `rayspec serve`
runs them in one process (`Service.serve_generation_api`), one engine runs the generations of
both: they wait in one line for the same `limits.max_concurrent_requests` slots, and the
service's `/metrics` counts both.  With the gRPC API in a coordinator of its own (the
`GenerationActor`), `/metrics` adds that coordinator's metrics to the HTTP one's
(`Metrics.add_coordinator`)."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rayspec.client import AsyncClient, Client, GenerateRequest, OverloadedError
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.serve.config import LimitsConfig
from rayspec.serve.metrics import Metrics
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

    async def streamed_async() -> list:
        async with AsyncClient(sdk.target, timeout=60, retries=0) as client:
            return [chunk async for chunk in client.stream(PROMPT, max_tokens=6, seed=4)]

    assert asyncio.run(streamed_async())
    with sdk.stream(PROMPT, max_tokens=50, seed=3) as left:  # a client that leaves after its first chunk
        next(iter(left))
    left_call = ("rayspec_grpc_requests_total", (("code", "CANCELLED"), ("method", "GenerateStream")))
    # its count comes last, as its handler returns: after its generation's end
    eventually(lambda: samples(http).get(left_call, 0) - before.get(left_call, 0) == 1, what="the left stream to end")
    after = samples(http)
    assert after[("rayspec_generations_in_flight", ())] == 0

    def added(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert whole.finish_reason == "length" and len(whole.token_ids) == 6
    assert added("rayspec_generations_ended_total", reason="length") == 3
    assert added("rayspec_generations_ended_total", reason="abort") == 1
    assert added("rayspec_prompt_tokens_total") == 4 * prompt_tokens
    assert added("rayspec_time_to_first_token_seconds_count") == 4
    assert added("rayspec_request_queue_seconds_count") == 4
    streamed_steps = sum(1 for chunk in chunks if chunk.token_ids)
    assert added("rayspec_inter_chunk_seconds_count") >= streamed_steps - 1 > 0
    assert added("rayspec_generated_tokens_total") >= 12
    assert added("rayspec_http_requests_total", endpoint="/v1/completions", status="200") == 0
    assert added("rayspec_grpc_requests_total", method="Generate", code="OK") == 1
    assert added("rayspec_grpc_requests_total", method="GenerateStream", code="OK") == 2  # the SDKs read its end
    assert added("rayspec_grpc_requests_total", method="GenerateStream", code="CANCELLED") == 1


def test_grpc_calls_are_counted_by_method_and_status_refused_ones_too(parts):
    """As HTTP requests are by endpoint and status: a call refused for its input, for its key,
    for bytes that are no message, or for its deadline, each under its status."""
    import grpc

    from rayspec.client import AuthenticationError, InvalidRequestError
    from rayspec.rpc.generated import generation_pb2_grpc

    target, drafter, tokenizer = parts
    engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), tokenizer=tokenizer,
                               **SETTING)
    service = Service(engine, tokenizer, MODEL, api_key="sesame")
    server, port = service.serve_generation_api("127.0.0.1:0")
    try:
        with Client(f"127.0.0.1:{port}", timeout=60, retries=0, api_key="sesame") as sdk:
            assert len(sdk.generate(PROMPT, max_tokens=3, seed=1).token_ids) == 3
            with pytest.raises(InvalidRequestError):
                sdk.generate(PROMPT, max_tokens=3, verifier="nope")
            with pytest.raises(InvalidRequestError):
                list(sdk.stream(PROMPT, max_tokens=4, verifier="nope"))
        with Client(f"127.0.0.1:{port}", timeout=60, retries=0) as keyless, pytest.raises(AuthenticationError):
            keyless.generate(PROMPT, max_tokens=3)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            raw = channel.unary_unary("/rayspec.v1.Generation/Generate")
            with pytest.raises(grpc.RpcError) as undecodable:
                raw(b"\xff\xff\xff", timeout=60, metadata=(("authorization", "Bearer sesame"),))
            assert undecodable.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            stub = generation_pb2_grpc.GenerationStub(channel)
            with pytest.raises(grpc.RpcError) as late:  # prefilled and stepping past a 50-ms deadline
                stub.Generate(GenerateRequest(PROMPT, max_tokens=400, seed=1, ignore_eos=True).to_proto(),
                              timeout=0.05, metadata=(("authorization", "Bearer sesame"),))
            assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        expected = {("Generate", "OK"): 1, ("Generate", "INVALID_ARGUMENT"): 2, ("GenerateStream", "INVALID_ARGUMENT"): 1,
                    ("Generate", "UNAUTHENTICATED"): 1, ("Generate", "DEADLINE_EXCEEDED"): 1}

        def counted() -> dict:
            return {(dict(labels)["method"], dict(labels)["code"]): value
                    for (name, labels), value in parsed(service.metrics.exposition()).items()
                    if name == "rayspec_grpc_requests_total"}

        eventually(lambda: counted() == expected, what="each call counted under its status")
        assert counted() == expected
    finally:
        server.stop(None)


def parsed(exposition: bytes) -> dict:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(exposition.decode()) for sample in family.samples}


class Plans:
    """A stand-in for `SpeculativeEngine.tree_plans`: one Sequoia tree of `nodes` nodes."""

    def __init__(self, nodes: int):
        self.nodes = nodes

    def __call__(self):
        from rayspec.engine.policy import PlanReport

        return [("rrsw", 0.6, PlanReport(spec="sequoia:auto", nodes=self.nodes, depth=3, replans=0, checks=1,
                                         check_seconds=0.01))]


def test_another_coordinators_metrics_are_summed_into_the_scrape_but_not_its_trees():
    http_side, grpc_side = Metrics(), Metrics()
    http_side.tokens.inc(3)
    http_side.ended.labels("length").inc()
    http_side.queue_seconds.observe(0.2)
    http_side.watch_plans(Plans(nodes=9))
    grpc_side.tokens.inc(4)
    grpc_side.ended.labels("length").inc()
    grpc_side.ended.labels("stop").inc(2)  # a label value the HTTP side has not seen
    grpc_side.queue_seconds.observe(3.0)
    grpc_side.in_flight.inc()
    grpc_side.batch_size.labels("target").observe(2)
    grpc_side.watch_plans(Plans(nodes=5))
    http_side.add_coordinator(grpc_side.exposition)

    merged = parsed(http_side.exposition())
    assert merged[("rayspec_generated_tokens_total", ())] == 7
    assert merged[("rayspec_generations_ended_total", (("reason", "length"),))] == 2
    assert merged[("rayspec_generations_ended_total", (("reason", "stop"),))] == 2
    assert merged[("rayspec_request_queue_seconds_count", ())] == 2
    assert merged[("rayspec_request_queue_seconds_sum", ())] == pytest.approx(3.2)
    assert merged[("rayspec_request_queue_seconds_bucket", (("le", "0.25"),))] == 1  # 0.2 s only
    assert merged[("rayspec_request_queue_seconds_bucket", (("le", "5.0"),))] == 2
    assert merged[("rayspec_generations_in_flight", ())] == 1
    assert merged[("rayspec_forward_batch_size_count", (("model", "target"),))] == 1
    tree = ("rayspec_tree_nodes", (("temperature", "0.6"), ("tree", "sequoia:auto"), ("verifier", "rrsw")))
    assert merged[tree] == 9  # the HTTP coordinator's tree, not 9 + 5
    assert parsed(Metrics().exposition()).keys() <= merged.keys()  # nothing of its own left out


def test_a_coordinator_that_does_not_answer_adds_what_it_answered_last():
    """A scrape while the gRPC coordinator is restarting or slow must not make its counters
    seem to go back to zero (Prometheus would read that as a reset, and count its total again
    once it answers)."""
    http_side, grpc_side = Metrics(), Metrics()
    grpc_side.tokens.inc(4)
    answers = [grpc_side.exposition]

    def exposition() -> bytes:
        return answers[0]()

    http_side.add_coordinator(exposition)
    assert parsed(http_side.exposition())[("rayspec_generated_tokens_total", ())] == 4

    def down() -> bytes:
        raise TimeoutError("the actor did not answer")

    answers[0] = down
    grpc_side.tokens.inc(10)
    assert parsed(http_side.exposition())[("rayspec_generated_tokens_total", ())] == 4
    answers[0] = grpc_side.exposition
    assert parsed(http_side.exposition())[("rayspec_generated_tokens_total", ())] == 14
