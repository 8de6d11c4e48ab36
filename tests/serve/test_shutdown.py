"""A service that stops (`Service.shut_down`, as `rayspec serve` stopping asks of its
coordinators) ends its generations in flight with a 503-like error, at once: a stream under
way with an error event and `[DONE]`, a request not yet answered with a 503 body; and
refuses new ones with 503."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.serve.config import LimitsConfig
from rayspec.serve.http import create_app
from rayspec.serve.service import Service
from tests.loopback import ServerThread
from tests.serve.served import MODEL, SETTING, Watched, eventually

SHUTTING_DOWN = {"message": "the service is shutting down", "type": "service_unavailable", "param": None,
                 "code": None}


@pytest.fixture
def stopping(parts):
    """A service of its own (a shut-down one stays so), its target held step by step."""
    target, drafter, tokenizer = parts
    watched = Watched(LocalTarget(target, tokenizer))
    engine = SpeculativeEngine(watched, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(max_tokens=256, max_concurrent_requests=4))
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        yield service, watched, http
        watched.permits.release(1000)  # the threads held at a step stop after it
        eventually(lambda: watched.open_sessions == 0, what="the sessions to be released")


def _events(lines) -> list:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "def fibonacci(n):"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]}),
])
def test_streams_in_flight_end_with_an_error_event_at_once_and_new_requests_get_503(stopping, path, body):
    service, target, http = stopping
    target.permits = threading.Semaphore(3)  # a few steps, then the generations wait
    body = {"model": MODEL, "max_tokens": 200, "seed": 1, **body}
    with ThreadPoolExecutor(1) as pool, http.stream("POST", path, json={**body, "stream": True}) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert "choices" in json.loads(first.removeprefix("data: "))
        unanswered = pool.submit(http.post, path, json=body)  # held at its first step
        eventually(lambda: target.open_sessions == 2, what="the second generation to start")
        began = time.monotonic()
        service.shut_down()
        *_, error, done = _events(lines)
        assert time.monotonic() - began < 5  # not after a grace of 20 s: the steps are still held
        assert json.loads(error) == {"error": SHUTTING_DOWN}
        assert done == "[DONE]"
        answer = unanswered.result(timeout=5)
        assert answer.status_code == 503 and answer.json() == {"error": SHUTTING_DOWN}
    late = http.post(path, json=body)
    assert late.status_code == 503 and late.json() == {"error": SHUTTING_DOWN}
    health = http.get("/health")  # a load balancer's probe sends the traffic elsewhere
    assert health.status_code == 503 and health.json() == {"status": "shutting_down", "workers": {}}
    assert target.opened == 2  # the late one was refused before it opened a session


def test_a_responses_stream_in_flight_fails_with_the_shutdown(stopping):
    service, target, http = stopping
    target.permits = threading.Semaphore(3)
    body = {"model": MODEL, "input": "hello", "max_output_tokens": 200, "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if "output_text.delta" in line)
        service.shut_down()
        events = [json.loads(event) for event in _events(lines)]
    error, failed = events[-2:]
    assert (error["type"], error["message"]) == ("error", "the service is shutting down")
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"]["message"] == "the service is shutting down"


def test_grpc_streams_in_flight_end_unavailable_and_new_calls_are_refused(stopping):
    """The Generation API over the same service (as a replica hosting the target, or the
    `GenerationActor`, serves it): its stream ends UNAVAILABLE after its current step."""
    import grpc

    from rayspec.client.types import GenerateRequest
    from rayspec.rpc.generated import generation_pb2_grpc, health_pb2, health_pb2_grpc

    service, target, _ = stopping
    target.permits = threading.Semaphore(3)
    server, port = service.serve_generation_api("127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = generation_pb2_grpc.GenerationStub(channel)
            message = GenerateRequest(prompt="def fibonacci(n):", max_tokens=200, seed=1).to_proto()
            stream = stub.GenerateStream(message, timeout=30)
            assert next(stream).HasField("chunk")
            service.shut_down()
            target.permits.release(1000)
            with pytest.raises(grpc.RpcError) as ended:
                for _ in stream:
                    pass
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert ended.value.details() == "the service is shutting down"
            for call in (stub.Generate, lambda m, timeout: list(stub.GenerateStream(m, timeout=timeout))):
                with pytest.raises(grpc.RpcError) as refused:
                    call(message, timeout=30)
                assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.UNAVAILABLE,
                                                                          "the service is shutting down")
            health = health_pb2_grpc.HealthStub(channel)
            for service_name in ("", "rayspec.v1.Generation"):  # a load balancer's probe goes elsewhere
                answer = health.Check(health_pb2.HealthCheckRequest(service=service_name), timeout=5)
                assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        server.stop(grace=None)


def test_a_request_queued_for_a_slot_is_refused_at_once_not_after_the_steps_in_flight(stopping):
    """Queued behind four generations whose steps are held, a request waits for their slots;
    the shutdown refuses it now, though those generations' threads are still in their steps."""
    service, target, http = stopping
    target.permits = threading.Semaphore(0)  # every generation held at its first step
    body = {"model": MODEL, "prompt": "def fibonacci(n):", "max_tokens": 20, "seed": 1}
    with ThreadPoolExecutor(5) as pool:
        running = [pool.submit(http.post, "/v1/completions", json=body) for _ in range(4)]
        eventually(lambda: target.open_sessions == 4, what="the four generations to start")
        queued = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: service._slots.waiting == 1, what="the fifth request to queue")
        began = time.monotonic()
        service.shut_down()
        answer = queued.result(timeout=5)
        assert time.monotonic() - began < 2
        assert answer.status_code == 503 and answer.json() == {"error": SHUTTING_DOWN}
        assert service._slots.waiting == 0
        assert target.opened == 4  # the queued one opened no session
        for reply in running:
            assert reply.result(timeout=5).json() == {"error": SHUTTING_DOWN}


def test_a_grpc_call_waiting_in_line_is_refused_at_once_though_the_steps_in_flight_are_held(stopping):
    """The Generation API's own line (one slot here, held by a generation whose step does not
    end): the shutdown refuses the call waiting in it at once, through its hook on the
    service's `shutting_down`, not once the running generation gives its slot back."""
    import grpc

    from rayspec.client.types import GenerateRequest
    from rayspec.rpc.coordinator import serve_generation
    from rayspec.rpc.generated import generation_pb2_grpc

    service, target, _ = stopping
    target.permits = threading.Semaphore(0)  # the running generation is held at its first step
    server, port = serve_generation(service.engine, service.tokenizer, "127.0.0.1:0", service.request_limits,
                                    max_concurrent_requests=1, shutting_down=service.shutting_down)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, ThreadPoolExecutor(2) as pool:
            stub = generation_pb2_grpc.GenerationStub(channel)
            message = GenerateRequest(prompt="def fibonacci(n):", max_tokens=20, seed=1).to_proto()
            running = pool.submit(stub.Generate, message, timeout=60)
            eventually(lambda: target.open_sessions == 1, what="the first generation to start")
            queued = pool.submit(stub.Generate, message, timeout=60)
            time.sleep(0.5)  # in line behind it
            assert not queued.done()
            began = time.monotonic()
            service.shut_down()
            with pytest.raises(grpc.RpcError) as refused:
                queued.result(timeout=5)
            assert time.monotonic() - began < 2
            assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.UNAVAILABLE,
                                                                      "the service is shutting down")
            assert target.opened == 1  # the queued call opened no session
            target.permits.release(1000)
            with pytest.raises(grpc.RpcError) as ended:
                running.result(timeout=10)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(grace=None)
