"""The client SDK against a real gRPC server on a localhost port.

The server runs a deterministic stand-in for the coordinator's Generation servicer (the
completion cycles through the prompt's tokens from an offset set by the seed, three tokens
per chunk), plus grpc.health.v1.  Knobs on the fakes script failures: UNAVAILABLE for the
next N calls, UNAVAILABLE in the middle of a stream, a delay, any status code."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import re
import subprocess
import sys
import threading
import time
from concurrent import futures
from types import SimpleNamespace

import grpc
import msgpack
import numpy as np
import pytest

from rayspec.client import (
    AsyncClient,
    Client,
    Completion,
    CompletionChunk,
    DeadlineExceededError,
    GenerateRequest,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    RayspecError,
    RetryPolicy,
    ServerError,
    TokenLogprob,
    UnavailableError,
    Usage,
)
from rayspec.client.types import GENERATION_FEATURES, GenerationParams
from rayspec.rpc.generated import generation_pb2 as pb
from rayspec.rpc.generated import generation_pb2_grpc, health_pb2, health_pb2_grpc
from tests.loopback import free_port

FAST = RetryPolicy(max_retries=3, initial_backoff=0.01, max_backoff=0.04)
VERIFIERS = ("", "sps", "rrsw")


def _wait_while_active(context, seconds: float) -> None:
    """Sleep up to `seconds`, waking when the call ends (cancelled, past its deadline)."""
    end = time.monotonic() + seconds
    while context.is_active() and time.monotonic() < end:
        time.sleep(0.005)


class FakeGeneration(generation_pb2_grpc.GenerationServicer):
    CHUNK = 3

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self):
        self.requests: list[pb.GenerateRequest] = []  # every attempt, retries included
        self.unavailable = 0  # fail the next N calls with UNAVAILABLE
        self.unavailable_after_chunks: int | None = None
        self.abort_with: tuple[grpc.StatusCode, str] | None = None
        self.crash = False
        self.delay = 0.0
        self.chunk_delay = 0.0
        self.end_delay = 0.0  # between a stream's completion message and its end
        self.interrupted = threading.Event()  # a call ended before its handler finished
        self.last_finished = threading.Event()  # set once the last call's handler has finished
        self.features: tuple[str, ...] | None = GENERATION_FEATURES  # None: a server without Info
        self.info_calls = 0
        self.info_delay = 0.0

    def _admit(self, request, context) -> threading.Event:
        """Check and record a call; returns the event its handler sets when it has finished."""
        finished = threading.Event()
        self.last_finished = finished
        # the termination callback, not a check after `yield`: the server stops iterating a
        # cancelled stream at its pending yield, and never resumes the handler
        context.add_callback(lambda: finished.is_set() or self.interrupted.set())
        with self._lock:
            self.requests.append(request)
            fail = self.unavailable > 0
            self.unavailable -= fail
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
        if self.abort_with:
            context.abort(*self.abort_with)
        if self.crash:
            raise RuntimeError("boom")
        if self.delay:
            _wait_while_active(context, self.delay)
        if request.max_tokens > 4096:  # the SDK refuses one below 1 itself
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"max_tokens must be at most 4096, got {request.max_tokens}")
        if request.verifier not in VERIFIERS:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown verifier {request.verifier!r}")
        if not (request.prompt or request.prompt_ids):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "empty prompt")
        return finished

    @staticmethod
    def _complete(request) -> pb.GenerateResponse:
        prompt = list(request.prompt_ids) or [ord(c) for c in request.prompt]
        seed = request.seed if request.HasField("seed") else 424242
        tokens = [prompt[(seed + i) % len(prompt)] for i in range(request.max_tokens or 8)]
        text, finish = "".join(map(chr, tokens)), "length"
        cuts = [text.find(s) for s in request.stop if s in text]
        if cuts:  # one token per character: cut text and tokens at the first stop string
            text, tokens, finish = text[: min(cuts)], tokens[: min(cuts)], "stop"
        steps = -(-len(tokens) // FakeGeneration.CHUNK)
        usage = pb.Usage(prompt_tokens=len(prompt), completion_tokens=len(tokens),
                         accepted_draft_tokens=len(tokens) - steps, rejected_draft_tokens=steps, steps=steps)
        return pb.GenerateResponse(text=text, token_ids=tokens, finish_reason=finish, usage=usage,
                                   seed=seed, request_id=request.request_id)

    def Info(self, request, context):
        self.info_calls += 1
        if self.info_delay:
            _wait_while_active(context, self.info_delay)
        if self.features is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")  # as grpc answers an unknown method
        return pb.GenerationInfo(features=self.features)

    def Generate(self, request, context):
        finished = self._admit(request, context)
        response = self._complete(request)
        finished.set()
        return response

    def GenerateStream(self, request, context):
        finished = self._admit(request, context)
        complete = self._complete(request)
        for n, start in enumerate(range(0, len(complete.token_ids), self.CHUNK)):
            if n == self.unavailable_after_chunks:
                context.abort(grpc.StatusCode.UNAVAILABLE, "drafter lost")
            ids = complete.token_ids[start: start + self.CHUNK]
            yield pb.GenerateStreamResponse(chunk=pb.Chunk(text="".join(map(chr, ids)), token_ids=ids,
                                                           accepted=len(ids) - 1))
            if self.chunk_delay:
                _wait_while_active(context, self.chunk_delay)
        complete.ClearField("text")  # the final message repeats no text (the token ids it does)
        yield pb.GenerateStreamResponse(complete=complete)
        if self.end_delay:
            _wait_while_active(context, self.end_delay)
        finished.set()


class FakeHealth(health_pb2_grpc.HealthServicer):
    def __init__(self):
        self.reset()

    def reset(self):
        self.status = health_pb2.HealthCheckResponse.SERVING
        self.unavailable = 0
        self.calls = 0

    def Check(self, request, context):
        self.calls += 1
        if self.unavailable > 0:
            self.unavailable -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        if request.service not in ("", "rayspec.v1.Generation"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=self.status)


@pytest.fixture(scope="module")
def _server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    generation, health = FakeGeneration(), FakeHealth()
    generation_pb2_grpc.add_GenerationServicer_to_server(generation, server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield SimpleNamespace(address=f"127.0.0.1:{port}", generation=generation, health=health)
    server.stop(None)


@pytest.fixture
def server(_server):
    _server.generation.reset()
    _server.health.reset()
    return _server


@pytest.fixture
def client(server):
    with Client(server.address, timeout=5, retries=FAST) as client:
        yield client


def closed_port() -> str:
    return f"127.0.0.1:{free_port()}"


def expected_text(prompt: str, seed: int, n: int) -> str:
    return "".join(prompt[(seed + i) % len(prompt)] for i in range(n))


# ---------------------------------------------------------------- sync: results and typing

def test_generate_returns_a_typed_completion(client, server):
    completion = client.generate("abcdef", max_tokens=7, seed=2, temperature=0.5, top_p=0.9, top_k=5,
                                 verifier="sps", tree="kary:2x2")
    assert isinstance(completion, Completion) and isinstance(completion.usage, Usage)
    assert completion.text == expected_text("abcdef", 2, 7) == "cdefabc"
    assert completion.token_ids == tuple(map(ord, "cdefabc"))
    assert completion.finish_reason == "length" and completion.seed == 2
    assert completion.usage == Usage(prompt_tokens=6, completion_tokens=7, accepted_draft_tokens=4,
                                     rejected_draft_tokens=3, steps=3)
    [sent] = server.generation.requests
    assert completion.request_id == sent.request_id and len(sent.request_id) == 32
    assert (sent.prompt, sent.max_tokens, sent.top_k, sent.seed) == ("abcdef", 7, 5, 2)
    assert sent.temperature == pytest.approx(0.5) and sent.top_p == pytest.approx(0.9)
    assert (sent.verifier, sent.tree) == ("sps", "kary:2x2")


def test_token_id_prompt_and_server_defaults(client, server):
    completion = client.generate([100, 101, 102], request_id="mine")
    [sent] = server.generation.requests
    assert list(sent.prompt_ids) == [100, 101, 102] and sent.prompt == ""
    assert not any(sent.HasField(f) for f in ("temperature", "top_p", "seed"))  # left to the server
    assert (sent.max_tokens, sent.top_k, sent.verifier, sent.tree, sent.verifier_params) == (0, 0, "", "", b"")
    assert completion.seed == 424242 and completion.request_id == "mine"
    assert len(completion.token_ids) == 8


def test_the_methods_keywords_are_the_requests_fields_and_a_typo_is_named(client, server):
    """generate and stream (both clients) take GenerationParams, the request's fields but the
    prompt: a misspelt one is refused before any call with the nearest name, and None is the
    default of each, as if left out."""
    fields = [f.name for f in dataclasses.fields(GenerateRequest)]
    assert list(GenerationParams.__annotations__) == [f for f in fields if f != "prompt"]
    typo = r"unexpected keyword argument 'tempature' \(did you mean 'temperature'\?\)"
    unknown = r"unexpected keyword argument 'prompt_text'; the parameters are GenerateRequest's"

    async def refused_by_the_async_client():
        async with AsyncClient(server.address) as async_client:
            for message, kwargs in ((typo, {"tempature": 0.5}), (unknown, {"prompt_text": "x"})):
                with pytest.raises(TypeError, match=message):
                    await async_client.generate("abc", **kwargs)
                with pytest.raises(TypeError, match=message):
                    async_client.stream("abc", **kwargs)
        return True

    for call in (client.generate, client.stream):
        with pytest.raises(TypeError, match=typo):
            call("abc", tempature=0.5)
        with pytest.raises(TypeError, match=unknown):
            call("abc", prompt_text="x")
    assert run(refused_by_the_async_client()) and server.generation.requests == []
    client.generate("abc", **dict.fromkeys(GenerationParams.__annotations__))
    [sent] = server.generation.requests
    assert sent == GenerateRequest("abc", request_id=sent.request_id).to_proto() and len(sent.request_id) == 32


def test_verifier_params_arrive_intact_as_msgpack(client, server):
    params = {"kl_budget": 0.125, "alphabet_size": 40, "within_target_support": False,
              "weights": [0.5, 0.25], "nested": {"name": "é", "none": None}, "raw": b"\x00\xff"}
    client.generate("abc", verifier="sps", verifier_params=params)
    [sent] = server.generation.requests
    assert msgpack.unpackb(sent.verifier_params, raw=False) == params
    assert GenerateRequest.from_proto(sent).verifier_params == params


def test_stream_yields_chunks_then_the_completion(client, server):
    unary = client.generate("hello world", max_tokens=10, seed=3)
    stream = client.stream("hello world", max_tokens=10, seed=3)
    assert stream.completion is None
    chunks = list(stream)
    assert all(isinstance(c, CompletionChunk) for c in chunks)
    assert [len(c.token_ids) for c in chunks] == [3, 3, 3, 1] and [c.accepted for c in chunks] == [2, 2, 2, 0]
    assert "".join(c.text for c in chunks) == unary.text
    done = stream.completion
    assert (done.text, done.token_ids, done.finish_reason, done.usage, done.seed) == (
        unary.text, unary.token_ids, unary.finish_reason, unary.usage, unary.seed)
    assert done.request_id == server.generation.requests[-1].request_id


def test_stop_strings(client):
    completion = client.generate("abcdef", max_tokens=12, seed=0, stop=["zz", "de"])
    assert (completion.text, completion.finish_reason) == ("abc", "stop")
    with client.stream("abcdef", max_tokens=12, seed=0, stop="de") as stream:
        assert "".join(c.text for c in stream) == "abc"
    assert stream.completion.finish_reason == "stop"


# ---------------------------------------------------------------- sync: errors and deadlines

def test_invalid_argument_maps_to_invalid_request_error(client, server):
    with pytest.raises(InvalidRequestError) as info:
        client.generate("abc", max_tokens=5000, seed=1)
    assert info.value.message == "max_tokens must be at most 4096, got 5000"
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT and isinstance(info.value, RayspecError)
    assert "INVALID_ARGUMENT" in str(info.value)
    with pytest.raises(InvalidRequestError, match="unknown verifier 'nope'"):
        list(client.stream("abc", verifier="nope", seed=1))
    assert len(server.generation.requests) == 2  # seeded, yet not replayed
    assert client.generate("abc", max_tokens=2).text  # and the server keeps serving


@pytest.mark.parametrize("code, error", [
    (grpc.StatusCode.NOT_FOUND, NotFoundError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, OverloadedError),
    (grpc.StatusCode.INTERNAL, ServerError),
    (grpc.StatusCode.UNIMPLEMENTED, ServerError),
    (grpc.StatusCode.PERMISSION_DENIED, RayspecError),
])
def test_status_codes_map_to_exceptions(client, server, code, error):
    server.generation.abort_with = (code, f"says {code.name}")
    with pytest.raises(error) as info:
        client.generate("abc", seed=1)
    assert type(info.value) is error and info.value.code is code and info.value.message == f"says {code.name}"
    assert len(server.generation.requests) == 1


def test_a_request_over_the_message_size_limit_is_an_invalid_request_not_an_overload(server):
    with Client(server.address, timeout=5, retries=FAST, max_message_bytes=1000) as client:
        with pytest.raises(InvalidRequestError) as info:
            client.generate("a" * 2000, seed=1)
    assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Sent message larger than max" in info.value.message and "max_message_bytes" in info.value.message
    assert len(server.generation.requests) == 0  # refused here, never sent


def test_a_server_exception_is_a_server_error(client, server):
    server.generation.crash = True
    with pytest.raises(ServerError) as info:
        client.generate("abc")
    assert info.value.code is grpc.StatusCode.UNKNOWN


def test_per_call_deadline(server):
    server.generation.delay = 5.0
    with Client(server.address, timeout=10, retries=FAST) as client:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            client.generate("abc", seed=1, timeout=0.3)
        assert time.monotonic() - start < 1.5
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            list(client.stream("abc", seed=1, timeout=0.3))
        assert time.monotonic() - start < 1.5
    assert len(server.generation.requests) == 2  # never replayed
    assert server.generation.interrupted.wait(2)  # the server saw the client give up


def test_client_default_deadline_and_override(server):
    server.generation.delay = 0.4
    with Client(server.address, timeout=0.2, retries=FAST) as client:
        with pytest.raises(DeadlineExceededError):
            client.generate("abc")
        assert client.generate("abc", max_tokens=2, timeout=5).text


@pytest.mark.parametrize("timeout", [float("inf"), 1e10, float("nan"), 0, -1.0])
def test_a_timeout_grpc_cannot_carry_is_refused_before_anything_is_sent(server, timeout):
    """gRPC reads a deadline past about 7e9 s (infinity too) as expired, and a NaN or negative
    one likewise: every call would fail DEADLINE_EXCEEDED at once, and health() say False."""
    refused = rf"^timeout must be above 0 and at most 1e\+08 seconds \(every call has a deadline\), got {timeout}$"
    with pytest.raises(ValueError, match=refused):
        Client(server.address, timeout=timeout)
    with pytest.raises(ValueError, match=refused):
        AsyncClient(server.address, timeout=timeout)
    with Client(server.address, retries=FAST) as client:
        for call in (client.generate, client.stream):
            with pytest.raises(ValueError, match=refused):
                call("abc", timeout=timeout)
        with pytest.raises(ValueError, match=refused):
            client.health(timeout=timeout)

    async def refused_by_the_async_client():
        async with AsyncClient(server.address, retries=FAST) as client:
            with pytest.raises(ValueError, match=refused):
                await client.generate("abc", timeout=timeout)
            with pytest.raises(ValueError, match=refused):
                client.stream("abc", timeout=timeout)
            with pytest.raises(ValueError, match=refused):
                await client.health(timeout=timeout)
        return True

    assert run(refused_by_the_async_client()) and server.generation.requests == []
    with pytest.raises(TypeError, match="^timeout must be a number of seconds, got str$"):
        Client(server.address, timeout="60")


def test_the_longest_timeout_reaches_a_healthy_server(server):
    with Client(server.address, timeout=1e8, retries=FAST) as client:
        assert client.generate("abcdef", max_tokens=2, seed=1).text == "bc" and client.health(timeout=1e8)
        assert [c.text for c in client.stream("abcdef", max_tokens=2, seed=1, timeout=1e8)] == ["bc"]


@pytest.mark.parametrize("target, why", [
    ("127.0.0.1:99999", "target '127.0.0.1:99999': a port is a whole number from 1 to 65535, got '99999'"),
    ("127.0.0.1:0", "target '127.0.0.1:0': a port is a whole number from 1 to 65535, got '0'"),
    ("[::1]:70000", "target '[::1]:70000': a port is a whole number from 1 to 65535, got '70000'"),
    ("localhost:", "target 'localhost:': a port is a whole number from 1 to 65535, got ''"),
    (":9000", "target ':9000' names no host: give HOST:PORT or [IPv6]:PORT"),
    ("", "target must be the server's address, HOST:PORT or [IPv6]:PORT, got ''"),
])
def test_an_address_no_server_has_is_refused_by_the_constructor(target, why):
    """gRPC would dial port 99999 as 34463, and fail every call to "" as a server error (UNKNOWN)."""
    for client_class in (Client, AsyncClient):
        with pytest.raises(ValueError, match=f"^{re.escape(why)}$"):
            client_class(target)


@pytest.mark.parametrize("key, why", [
    ("ключ", "api_key holds 'к': a key is printable ASCII, as HTTP headers and gRPC metadata carry it"),
    ("secret\n", "api_key holds '\\n': a key is printable ASCII, as HTTP headers and gRPC metadata carry it"),
    (" secret", "api_key begins or ends with a space, which HTTP and gRPC strip from what a client sends"),
])
def test_an_api_key_metadata_cannot_carry_is_refused_by_the_constructor_without_showing_it(key, why):
    """gRPC would fail every call INTERNAL ("Invalid metadata"), as if the server had a bug.
    The message names the character, not the key: it is a secret, and errors reach logs."""
    for client_class in (Client, AsyncClient):
        with pytest.raises(ValueError, match=f"^{re.escape(why)}$") as refused:
            client_class("127.0.0.1:9000", api_key=key)
        assert "secret" not in str(refused.value) and "ключ" not in str(refused.value)


def test_grpc_target_uris_are_left_to_grpc(server):
    port = server.address.rpartition(":")[2]
    for target in (f"dns:///127.0.0.1:{port}", f"ipv4:127.0.0.1:{port}"):
        with Client(target, timeout=5, retries=FAST, api_key="sk-a b") as client:
            assert client.target == target and client.health()
    for target in ("[::1]:9000", "::1", "localhost", "unix:/tmp/rayspec.sock", "unix-abstract:rayspec"):
        with Client(target) as client:
            assert client.target == target


# ---------------------------------------------------------------- sync: retries

def test_seeded_generate_is_retried_on_unavailable(client, server):
    server.generation.unavailable = 2
    assert client.generate("abcdef", max_tokens=4, seed=1).text == "bcde"
    ids = {r.request_id for r in server.generation.requests}
    assert len(server.generation.requests) == 3 and len(ids) == 1  # one request, replayed


def test_unseeded_generate_is_not_retried(client, server):
    server.generation.unavailable = 1
    with pytest.raises(UnavailableError, match="warming up"):
        client.generate("abcdef")
    assert len(server.generation.requests) == 1


def test_retries_are_bounded_by_count_and_deadline(server):
    server.generation.unavailable = 100
    with Client(server.address, retries=RetryPolicy(2, 0.01, 0.02)) as client:
        with pytest.raises(UnavailableError):
            client.generate("abc", seed=1)
    assert len(server.generation.requests) == 3
    server.generation.reset()
    server.generation.unavailable = 100
    with Client(server.address, retries=RetryPolicy(5, initial_backoff=1.0)) as client:
        start = time.monotonic()
        with pytest.raises(UnavailableError):
            client.generate("abc", seed=1, timeout=0.3)  # a 1 s pause would overrun the deadline
        assert time.monotonic() - start < 0.9  # below the pause, with room for a loaded CI machine
    assert len(server.generation.requests) == 1
    server.generation.unavailable = 100
    with Client(server.address, retries=0) as client, pytest.raises(UnavailableError):
        client.generate("abc", seed=1)
    assert len(server.generation.requests) == 2


def test_stream_retried_only_before_its_first_chunk(client, server):
    server.generation.unavailable = 1
    assert "".join(c.text for c in client.stream("abcdef", max_tokens=4, seed=1)) == "bcde"
    assert len(server.generation.requests) == 2

    server.generation.reset()
    server.generation.unavailable = 1
    with pytest.raises(UnavailableError):
        list(client.stream("abcdef", max_tokens=4))  # no seed: not replayed
    assert len(server.generation.requests) == 1

    server.generation.reset()
    server.generation.unavailable_after_chunks = 1
    stream = client.stream("abcdef", max_tokens=9, seed=1)
    received = []
    with pytest.raises(UnavailableError, match="drafter lost"):
        for chunk in stream:
            received.append(chunk.text)
    assert received == ["bcd"] and stream.completion is None
    assert len(server.generation.requests) == 1


# ---------------------------------------------------------------- sync: health and lifecycle

def test_health(client, server):
    assert client.health() and client.health("rayspec.v1.Generation")
    assert not client.health("no.such.Service")
    server.health.status = health_pb2.HealthCheckResponse.NOT_SERVING
    assert not client.health()
    server.health.reset()
    server.health.unavailable = 2
    assert client.health() and server.health.calls == 3  # health checks are always retried
    with Client(closed_port(), retries=FAST) as nowhere:
        start = time.monotonic()
        assert not nowhere.health(timeout=2)
        assert time.monotonic() - start < 1.5


def test_context_managers_close_channel_and_cancel_stream(server):
    server.generation.chunk_delay = 5.0
    with Client(server.address, retries=FAST) as client:
        with client.stream("abcdef", max_tokens=9) as stream:
            assert next(stream).text == "abc"
        assert list(stream) == [] and stream.completion is None
        assert server.generation.interrupted.wait(2)  # the server saw the cancellation
    raw = generation_pb2_grpc.GenerationStub(client._channel)
    with pytest.raises(ValueError, match="closed channel"):
        raw.Generate(pb.GenerateRequest(prompt="abc"), timeout=1)


def test_cancel_from_another_thread_ends_the_stream_quietly(client, server):
    server.generation.chunk_delay = 5.0
    stream = client.stream("abcdef", max_tokens=9)
    received = []
    for chunk in stream:  # blocks waiting for the second chunk until the timer cancels
        received.append(chunk.text)
        threading.Timer(0.1, stream.cancel).start()
    assert received == ["abc"] and stream.completion is None
    assert server.generation.interrupted.wait(2)


INT32 = "from -2147483648 to 2147483647"


@pytest.mark.parametrize("fields, why", [
    ({"seed": 2**64}, f"seed must fit int64 (from {-2**63} to {2**63 - 1}), got 18446744073709551616"),
    ({"top_k": 2**40}, f"top_k must fit int32 ({INT32}), got 1099511627776"),
    ({"max_tokens": 2.5}, "max_tokens must be an integer, got float 2.5"),
    ({"max_tokens": "4"}, "max_tokens must be an integer, got str '4'"),
    ({"max_tokens": 0}, "max_tokens must be at least 1 (None: the server's default), got 0"),
    ({"max_tokens": -5}, "max_tokens must be at least 1 (None: the server's default), got -5"),
    ({"seed": True}, "seed must be an integer, got bool True"),
    ({"temperature": True}, "temperature must be a number, got bool True"),
    ({"top_p": "0.5"}, "top_p must be a number, got str '0.5'"),
    # float32 fields: these crossed as infinities, refused "must be ... finite, got inf" or taken as -inf
    ({"temperature": 1e300}, "temperature must fit float32 (at most 3.4028235e+38 in magnitude), got 1e+300"),
    ({"presence_penalty": -3.5e38}, "presence_penalty must fit float32 (at most 3.4028235e+38 in magnitude), "
                                    "got -3.5e+38"),
    # text UTF-8 cannot encode: protobuf's own error ("'utf-8' codec can't encode ...") named no field
    ({"stop": ["ok", "a\ud800"]}, "stop is not valid Unicode text: it holds a lone surrogate (U+D800) at character 1"),
    ({"verifier": "\udfff"}, "verifier is not valid Unicode text: it holds a lone surrogate (U+DFFF) at character 0"),
    ({"structured_output": {"choice": ["a", "\ud800"]}},
     "structured_output is not valid Unicode text: it holds a lone surrogate (U+D800) at character 0"),
    ({"ignore_eos": "false"}, "ignore_eos must be True or False, got str 'false'"),
    ({"include_stop_str_in_output": "no"}, "include_stop_str_in_output must be True or False, got str 'no'"),
    ({"skip_special_tokens": 0}, "skip_special_tokens must be True or False, got int 0"),
    ({"verifier": 5}, "verifier must be a string, got int 5"),
    ({"request_id": 5}, "request_id must be a string, got int 5"),
    # the server's and HTTP's rule (rayspec.request_id): any string crossed, a 10-MB or control-character one too
    ({"request_id": "x" * 257}, "request_id must be 1 to 256 printable ASCII characters, no spaces"),
    ({"request_id": "a\nb"}, "request_id must be 1 to 256 printable ASCII characters, no spaces"),
    ({"request_id": ""}, "request_id must be 1 to 256 printable ASCII characters, no spaces"),
    ({"stop_token_ids": [2**31]}, f"stop_token_ids has token id 2147483648, outside int32 ({INT32})"),
    ({"logit_bias": {-2**31 - 1: 1.0}}, f"logit_bias has token id -2147483649, outside int32 ({INT32})"),
    # the request's own checks of a field's type (a bare TypeError out of generate and stream before)
    ({"bad_words": [[500, 7]]}, "bad_words must be a string or a sequence of strings"),
    ({"stop": 5}, "stop must be a string or a sequence of strings"),  # was "'int' object is not iterable"
    ({"logit_bias": {"a": 1}}, "logit_bias must map integer token ids to numbers"),
    ({"verifier_params": 3}, "verifier_params must be a mapping, got int"),
    ({"allowed_token_ids": ["a"]}, "allowed_token_ids must be a sequence of integer token ids"),
])
def test_a_value_the_message_cannot_carry_is_an_invalid_request_before_anything_is_sent(client, server, fields, why):
    """Each error names its field (protobuf's own name none), and a string is no boolean
    (bool("false") is true)."""
    for call in (client.generate, lambda *a, **k: next(client.stream(*a, **k))):
        with pytest.raises(InvalidRequestError, match=f"^this request cannot be sent: {re.escape(why)}$"):
            call("abc", **fields)
    assert server.generation.requests == []


def test_a_tiny_float_crosses_as_the_smallest_float32_not_as_zero():
    """float32 rounds 1e-50 to 0: top_p=1e-50 was refused "got 0.0" and temperature=1e-50 sent
    as 0 (greedy), where HTTP takes both as they are; 0 itself still crosses as 0."""
    TINY = 1.401298464324817e-45  # the smallest positive float32
    message = GenerateRequest(prompt="x", temperature=1e-50, top_p=1e-50, repetition_penalty=1e-50,
                              presence_penalty=-1e-50, frequency_penalty=0.0).to_proto()
    assert (message.temperature, message.top_p, message.repetition_penalty) == (TINY,) * 3
    assert (message.presence_penalty, message.frequency_penalty) == (-TINY, 0.0)
    assert GenerateRequest.from_proto(message).top_p == TINY > 0


def test_a_prompt_utf8_cannot_encode_is_refused_naming_it_as_the_server_does(client, server):
    # the server's words for HTTP's "a\ud800" (JSON can spell a lone surrogate); the SDK's were protobuf's
    with pytest.raises(InvalidRequestError, match=r"^this request cannot be sent: the prompt is not valid Unicode "
                                                  r"text: it holds a lone surrogate \(U\+D800\) at character 1$"):
        client.generate("a\ud800b")
    assert server.generation.requests == []


def test_a_value_the_message_cannot_carry_is_refused_before_the_servers_features_are_asked():
    """A field newer than some servers (bad_words) makes `generate` ask the server's Info
    first: the request's own values are checked before that call, as the README says, so an
    unreachable server does not hide them behind UnavailableError."""
    fields = dict(max_tokens=0, bad_words=["z"])
    with Client(closed_port(), timeout=5, retries=0) as client:
        with pytest.raises(InvalidRequestError, match="max_tokens must be at least 1"):
            client.generate("abc", **fields)

    async def refused():
        async with AsyncClient(closed_port(), timeout=5, retries=0) as client:
            with pytest.raises(InvalidRequestError, match="max_tokens must be at least 1"):
                await client.generate("abc", **fields)

    asyncio.run(refused())


def test_numpy_scalars_and_zero_dimensional_arrays_cross_as_the_fields_types():
    request = GenerateRequest(np.array([5, 6]), max_tokens=np.array(3), top_k=np.int8(2), seed=np.uint64(7),
                              temperature=np.float16(0.5), ignore_eos=np.True_, skip_special_tokens=np.array(False),
                              verifier=np.str_("sps"), stop_token_ids=np.array([1, 2]))
    sent = pb.GenerateRequest.FromString(request.to_proto().SerializeToString())
    assert (list(sent.prompt_ids), sent.max_tokens, sent.top_k, sent.seed, sent.temperature) == ([5, 6], 3, 2, 7, 0.5)
    assert (sent.ignore_eos, sent.HasField("skip_special_tokens"), sent.skip_special_tokens) == (True, True, False)
    assert (sent.verifier, list(sent.stop_token_ids)) == ("sps", [1, 2])


@contextlib.contextmanager
def no_cycle_collection():
    """What a dropped stream frees must be freed by reference counting alone: a reference
    cycle waits for the collector, and its call generated on meanwhile."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_stream_dropped_or_closed_before_its_end_is_cancelled_on_the_server(client, server):
    server.generation.chunk_delay = 5.0
    with no_cycle_collection():
        for chunk in client.stream("abcdef", max_tokens=9):
            break  # the caller stops reading, and drops the stream
        assert server.generation.interrupted.wait(2)
    server.generation.interrupted.clear()
    stream = client.stream("abcdef", max_tokens=9)
    assert next(stream).text == "abc"
    stream.close()
    assert server.generation.interrupted.wait(2) and list(stream) == [] and stream.completion is None


def test_a_stream_read_to_its_completion_reads_its_end_rather_than_drop_the_call(client, server):
    """The stream returned at the completion message and dropped the call: the server saw a
    call that got all it asked for end CANCELLED (as its `/metrics` counts it)."""
    server.generation.end_delay = 0.3
    with no_cycle_collection():
        stream = client.stream("abcdef", max_tokens=4)
        assert "".join(chunk.text for chunk in stream) == expected_text("abcdef", 424242, 4)
        assert stream.completion is not None
        # the iteration ended with the call, not at the completion message 0.3 s before it
        assert server.generation.last_finished.is_set()
        del stream
        assert not server.generation.interrupted.wait(1)


# ---------------------------------------------------------------- async twin

def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 10))


def test_an_async_stream_dropped_or_closed_before_its_end_is_cancelled_on_the_server(server):
    server.generation.chunk_delay = 5.0

    async def main():
        async with AsyncClient(server.address, timeout=5, retries=FAST) as client:
            with no_cycle_collection():
                async for chunk in client.stream("abcdef", max_tokens=9):
                    break
                dropped = await asyncio.to_thread(server.generation.interrupted.wait, 2)
            server.generation.interrupted.clear()
            stream = client.stream("abcdef", max_tokens=9)
            assert (await stream.__anext__()).text == "abc"
            await stream.close()
            closed = await asyncio.to_thread(server.generation.interrupted.wait, 2)
            return dropped, closed, [chunk async for chunk in stream], stream.completion

    assert run(main()) == (True, True, [], None)


def test_an_async_stream_read_to_its_completion_reads_its_end_rather_than_drop_the_call(server):
    server.generation.end_delay = 0.3

    async def main():
        async with AsyncClient(server.address, timeout=5, retries=FAST) as client:
            with no_cycle_collection():
                stream = client.stream("abcdef", max_tokens=4)
                texts = [chunk.text async for chunk in stream]
                completed = stream.completion is not None
                ended_with_the_call = server.generation.last_finished.is_set()
                del stream
                return texts, completed, ended_with_the_call, await asyncio.to_thread(server.generation.interrupted.wait, 1)

    texts, completed, ended_with_the_call, interrupted = run(main())
    assert "".join(texts) == expected_text("abcdef", 424242, 4) and completed and not interrupted
    # grpc.aio lets a call dropped at its completion message run to its end, so `interrupted`
    # alone would not tell: the iteration must end with the call, not 0.3 s before it
    assert ended_with_the_call


def test_async_generate_and_stream(server):
    async def main():
        async with AsyncClient(server.address, timeout=5, retries=FAST) as client:
            unary = await client.generate("hello world", max_tokens=10, seed=3, verifier_params={"k": [1, 2]})
            stream = client.stream("hello world", max_tokens=10, seed=3)
            chunks = [chunk async for chunk in stream]
            return unary, chunks, stream.completion

    unary, chunks, done = run(main())
    assert isinstance(unary, Completion) and unary.text == expected_text("hello world", 3, 10)
    assert all(isinstance(c, CompletionChunk) for c in chunks) and len(chunks) == 4
    assert "".join(c.text for c in chunks) == unary.text
    assert (done.token_ids, done.usage, done.seed, done.finish_reason) == (
        unary.token_ids, unary.usage, unary.seed, unary.finish_reason)
    assert msgpack.unpackb(server.generation.requests[0].verifier_params) == {"k": [1, 2]}


def test_async_errors_and_deadline(server):
    async def main():
        async with AsyncClient(server.address, retries=FAST) as client:
            with pytest.raises(InvalidRequestError) as info:
                await client.generate("abc", verifier="nope", seed=1)
            assert info.value.message == "unknown verifier 'nope'"
            with pytest.raises(InvalidRequestError, match="max_tokens"):
                async for _ in client.stream("abc", max_tokens=5000):
                    pass
            server.generation.delay = 5.0
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                await client.generate("abc", seed=1, timeout=0.3)
            assert time.monotonic() - start < 1.5

    run(main())
    assert len(server.generation.requests) == 3


def test_async_retries(server):
    async def main():
        async with AsyncClient(server.address, retries=FAST) as client:
            server.generation.unavailable = 2
            assert (await client.generate("abcdef", max_tokens=4, seed=1)).text == "bcde"
            assert len(server.generation.requests) == 3
            server.generation.reset()
            server.generation.unavailable = 1
            with pytest.raises(UnavailableError):
                await client.generate("abcdef")
            assert len(server.generation.requests) == 1
            server.generation.reset()
            server.generation.unavailable = 1
            assert [c.text async for c in client.stream("abcdef", max_tokens=4, seed=1)] == ["bcd", "e"]
            assert len(server.generation.requests) == 2
            server.generation.reset()
            server.generation.unavailable_after_chunks = 1
            received = []
            with pytest.raises(UnavailableError):
                async for chunk in client.stream("abcdef", max_tokens=9, seed=1):
                    received.append(chunk.text)
            assert received == ["bcd"] and len(server.generation.requests) == 1

    run(main())


def test_async_health_and_lifecycle(server):
    async def main():
        async with AsyncClient(server.address, retries=FAST) as client:
            assert await client.health()
            server.health.status = health_pb2.HealthCheckResponse.NOT_SERVING
            assert not await client.health()
            server.health.reset()
            server.health.unavailable = 1
            assert await client.health() and server.health.calls == 2
            server.generation.chunk_delay = 5.0
            async with client.stream("abcdef", max_tokens=9) as stream:
                assert (await stream.__anext__()).text == "abc"
            assert [c async for c in stream] == [] and stream.completion is None
        async with AsyncClient(closed_port(), retries=FAST) as nowhere:
            assert not await nowhere.health(timeout=2)
        return client

    client = run(main())
    assert server.generation.interrupted.wait(2)

    async def cancel_from_another_task():
        async with AsyncClient(server.address, retries=FAST) as client:
            stream = client.stream("abcdef", max_tokens=9)
            received = []
            async for chunk in stream:
                received.append(chunk.text)
                asyncio.get_running_loop().call_later(0.1, stream.cancel)
            return received, stream.completion

    server.generation.reset()
    server.generation.chunk_delay = 5.0
    assert run(cancel_from_another_task()) == (["abc"], None)
    assert server.generation.interrupted.wait(2)

    async def call_closed():
        raw = generation_pb2_grpc.GenerationStub(client._channel)
        await raw.Generate(pb.GenerateRequest(prompt="abc"), timeout=1)

    with pytest.raises(grpc.aio.UsageError, match="closed"):
        run(call_closed())


def test_a_call_in_flight_when_its_client_closes_fails_alike_blocking_or_asyncio(server):
    """A RayspecError (CANCELLED) in the caller, not an asyncio.CancelledError: that would read
    as the caller's own task being cancelled, and slip past `except RayspecError`."""
    server.generation.delay = server.generation.chunk_delay = 5.0
    calls = {"generate": lambda client: client.generate("abcdef", max_tokens=9, seed=1),
             "stream": lambda client: list(client.stream("abcdef", max_tokens=9, seed=1))}
    for name, call in calls.items():
        with Client(server.address, retries=FAST) as client:
            threading.Timer(0.3, client.close).start()
            with pytest.raises(RayspecError) as raised:
                call(client)
            assert raised.value.code == grpc.StatusCode.CANCELLED, name

    async def drain(stream):
        return [chunk async for chunk in stream]

    async_calls = {"generate": lambda client: client.generate("abcdef", max_tokens=9, seed=1),
                   "stream": lambda client: drain(client.stream("abcdef", max_tokens=9, seed=1))}

    async def closed_in_flight(call):
        async with AsyncClient(server.address, retries=FAST) as client:
            asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(client.close()))
            with pytest.raises(RayspecError) as raised:
                await call(client)
            assert raised.value.code == grpc.StatusCode.CANCELLED

    async def cancelled_task(call):  # the task's own cancellation still is one
        async with AsyncClient(server.address, retries=FAST) as client:
            task = asyncio.ensure_future(call(client))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    for call in async_calls.values():
        run(closed_in_flight(call))
        run(cancelled_task(call))


# ---------------------------------------------------------------- values, without a server

def test_request_proto_round_trip_and_validation():
    request = GenerateRequest("hi", max_tokens=4, temperature=0.0, seed=0, stop="x", verifier="rrsw",
                              verifier_params={"a": 1}, request_id="r", logprobs=0, prompt_logprobs=3)
    assert request.stop == ("x",)
    message = request.to_proto()
    assert message.HasField("temperature") and message.HasField("seed")  # zeros are values, not defaults
    assert message.HasField("logprobs") and not GenerateRequest("hi").to_proto().HasField("logprobs")
    assert message.prompt_logprobs == 3 and not GenerateRequest("hi").to_proto().HasField("prompt_logprobs")
    assert GenerateRequest.from_proto(message) == request
    assert GenerateRequest([1, 2]).prompt == (1, 2)
    with pytest.raises(TypeError, match="prompt"):
        GenerateRequest(b"bytes")
    with pytest.raises(TypeError, match="token ids"):
        GenerateRequest([1, "2"])
    with pytest.raises(TypeError, match="msgpack"):
        GenerateRequest("hi", verifier_params={"f": object()}).to_proto()
    for bad in (b"\xc1", msgpack.packb([1, 2]), msgpack.packb({1: 2})):
        with pytest.raises(ValueError, match="verifier_params"):
            GenerateRequest.from_proto(pb.GenerateRequest(prompt="a", verifier_params=bad))
    with pytest.raises(ValueError, match="either"):
        GenerateRequest.from_proto(pb.GenerateRequest(prompt="a", prompt_ids=[1]))
    for prediction in ("def f():", (5, 6, 7)):  # text or token ids, each in its own field
        predicted = GenerateRequest("hi", prediction=prediction)
        assert GenerateRequest.from_proto(predicted.to_proto()) == predicted and predicted.features == ("prediction",)
    assert GenerateRequest("hi", prediction=[5, 6]).prediction == (5, 6) and GenerateRequest("hi").features == ()
    with pytest.raises(TypeError, match="prediction token ids must be integers"):
        GenerateRequest("hi", prediction=[5, "6"])
    with pytest.raises(ValueError, match="either prediction or prediction_ids"):
        GenerateRequest.from_proto(pb.GenerateRequest(prompt="a", prediction="x", prediction_ids=[1]))
    for output in ({"json_schema": '{"type": "object"}'}, {"json_object": True}, {"regex": "[a-z]+"},
                   {"choice": ("yes", "no")}):
        structured = GenerateRequest("hi", structured_output=output)
        assert GenerateRequest.from_proto(structured.to_proto()) == structured
        assert structured.features == ("structured_output",)
    assert GenerateRequest("hi", structured_output={"json_schema": {"type": "object"}}).structured_output == {
        "json_schema": '{"type": "object"}'}  # a schema crosses as its JSON text
    assert GenerateRequest("hi", structured_output={"choice": ["a"]}).structured_output == {"choice": ("a",)}
    with pytest.raises(TypeError, match="structured_output must be a mapping with one of json_schema, json_object, "
                                        "regex, choice"):
        GenerateRequest("hi", structured_output={"regex": "a", "choice": ["a"]})
    with pytest.raises(TypeError, match="structured_output choice must be a sequence of strings"):
        GenerateRequest("hi", structured_output={"choice": "yes"})
    with pytest.raises(ValueError, match="structured_output names no kind"):
        GenerateRequest.from_proto(pb.GenerateRequest(prompt="a", structured_output=pb.StructuredOutput()))


def test_penalties_and_a_bias_cross_as_set_and_unset_values():
    request = GenerateRequest("hi", presence_penalty=0.5, frequency_penalty=-0.25, repetition_penalty=1.0,
                              logit_bias={7: -100, 3: 2.5})
    message = request.to_proto()
    assert message.HasField("repetition_penalty") and dict(message.logit_bias) == {7: -100.0, 3: 2.5}
    assert GenerateRequest.from_proto(message) == request
    plain = GenerateRequest("hi").to_proto()
    assert not plain.HasField("repetition_penalty") and not plain.logit_bias and plain.presence_penalty == 0
    assert GenerateRequest.from_proto(plain) == GenerateRequest("hi")
    with pytest.raises(TypeError, match="logit_bias must map integer token ids to numbers"):
        GenerateRequest("hi", logit_bias={"7": 1.0})
    with pytest.raises(TypeError, match="logit_bias must map"):
        GenerateRequest("hi", logit_bias=[1, 2])


def test_min_p_min_tokens_stop_ids_and_ignore_eos_cross_as_set_and_unset_values():
    request = GenerateRequest("hi", max_tokens=8, min_p=0.125, min_tokens=3, stop_token_ids=[7, 0], ignore_eos=True)
    assert request.stop_token_ids == (7, 0)  # a tuple, in the order given: equal requests compare equal
    message = request.to_proto()
    assert (message.min_p, message.min_tokens, list(message.stop_token_ids), message.ignore_eos) == (0.125, 3, [7, 0], True)
    assert GenerateRequest.from_proto(pb.GenerateRequest.FromString(message.SerializeToString())) == request
    plain = GenerateRequest("hi").to_proto()
    assert (plain.min_p, plain.min_tokens, list(plain.stop_token_ids), plain.ignore_eos) == (0.0, 0, [], False)
    unset = GenerateRequest.from_proto(plain)
    assert (unset.min_p, unset.min_tokens, unset.stop_token_ids, unset.ignore_eos) == (None, None, (), None)
    assert unset == GenerateRequest("hi")
    for bad in (["7"], [1.5], 5, [None]):
        with pytest.raises(TypeError, match="stop_token_ids must be a sequence of integer token ids"):
            GenerateRequest("hi", stop_token_ids=bad)


def test_vllms_extensions_reach_the_server_from_every_call(client, server):
    extensions = dict(min_p=0.25, min_tokens=2, stop_token_ids=[5, 6], ignore_eos=True, include_stop_str_in_output=True,
                      skip_special_tokens=False, allowed_token_ids=[3, 5], bad_words=["de", " f"],
                      add_special_tokens=False, truncate_prompt_tokens=5)
    client.generate("abcdef", max_tokens=4, seed=1, **extensions)
    list(client.stream("abcdef", max_tokens=4, seed=1, **extensions))

    async def main():
        async with AsyncClient(server.address, timeout=5, retries=FAST) as aio:
            await aio.generate("abcdef", max_tokens=4, seed=1, **extensions)
            [chunk async for chunk in aio.stream("abcdef", max_tokens=4, seed=1, **extensions)]

    run(main())
    client.generate("abcdef", max_tokens=4, seed=1)
    sent = server.generation.requests
    assert len(sent) == 5
    for message in sent[:4]:
        assert (message.min_p, message.min_tokens, list(message.stop_token_ids), message.ignore_eos) == (0.25, 2, [5, 6], True)
        assert (message.include_stop_str_in_output, message.HasField("skip_special_tokens"),
                message.skip_special_tokens, list(message.allowed_token_ids)) == (True, True, False, [3, 5])
        assert list(message.bad_words) == ["de", " f"]
        assert (message.HasField("add_special_tokens"), message.add_special_tokens) == (True, False)
        assert message.truncate_prompt_tokens == 5
    assert (list(sent[4].bad_words), sent[4].HasField("add_special_tokens"),
            sent[4].HasField("truncate_prompt_tokens")) == ([], False, False)
    assert (sent[4].min_p, sent[4].min_tokens, list(sent[4].stop_token_ids), sent[4].ignore_eos) == (0.0, 0, [], False)
    assert (sent[4].include_stop_str_in_output, sent[4].HasField("skip_special_tokens")) == (False, False)


def test_text_options_allowed_token_ids_and_bad_words_cross_as_set_and_unset_values():
    request = GenerateRequest("hi", include_stop_str_in_output=True, skip_special_tokens=False,
                              allowed_token_ids=[9, 4], bad_words=["no", "never"])
    message = pb.GenerateRequest.FromString(request.to_proto().SerializeToString())
    assert (message.include_stop_str_in_output, message.HasField("skip_special_tokens"),
            message.skip_special_tokens, list(message.allowed_token_ids)) == (True, True, False, [9, 4])
    assert list(message.bad_words) == ["no", "never"]
    assert GenerateRequest.from_proto(message) == request
    unset = GenerateRequest.from_proto(GenerateRequest("hi").to_proto())
    assert (unset.include_stop_str_in_output, unset.skip_special_tokens, unset.allowed_token_ids,
            unset.bad_words, unset.add_special_tokens, unset.truncate_prompt_tokens) == (None, None, (), (), None, None)
    assert GenerateRequest.from_proto(GenerateRequest("hi", truncate_prompt_tokens=-1).to_proto()) \
        .truncate_prompt_tokens == -1
    for special in (True, False):
        assert GenerateRequest.from_proto(GenerateRequest("hi", add_special_tokens=special).to_proto()) \
            .add_special_tokens is special
    with pytest.raises(TypeError, match="allowed_token_ids must be a sequence of integer token ids"):
        GenerateRequest("hi", allowed_token_ids=[1.5])
    assert GenerateRequest("hi", bad_words="no").bad_words == ("no",)
    with pytest.raises(TypeError, match="bad_words must be a string or a sequence of strings"):
        GenerateRequest("hi", bad_words=[3])
    assert GenerateRequest.from_proto(GenerateRequest("hi", skip_special_tokens=True).to_proto()).skip_special_tokens


@pytest.mark.parametrize("stop_reason, field", [("###", "stop_string"), ("", "stop_string"), (7, "stop_token_id"),
                                                (0, "stop_token_id"), (None, None)])
def test_the_stop_reason_round_trips_as_a_string_a_token_id_or_nothing(stop_reason, field):
    completion = Completion("ab", (97, 98), "stop", Usage(), seed=7, request_id="r", stop_reason=stop_reason)
    message = completion.to_proto()
    assert message.WhichOneof("stop_reason") == field
    back = Completion.from_proto(pb.GenerateResponse.FromString(message.SerializeToString()))
    assert back == completion and type(back.stop_reason) is type(stop_reason)
    assert Completion.from_stream([], message).stop_reason == stop_reason


def test_completion_proto_round_trip():
    logprobs = (TokenLogprob(97, -0.25, ((97, -0.25), (3, -1.5))), TokenLogprob(98, -2.0, ((5, -0.125), (98, -2.0))))
    completion = Completion("ab", (97, 98), "stop", Usage(1, 2, 3, 4, 5), seed=7, request_id="r", logprobs=logprobs,
                            prompt_logprobs=logprobs[::-1])
    assert Completion.from_proto(completion.to_proto()) == completion
    chunk = CompletionChunk("ab", (97, 98), 1, logprobs=logprobs, prompt_logprobs=logprobs[1:])
    assert CompletionChunk.from_proto(chunk.to_proto()) == chunk
    assert CompletionChunk.from_proto(CompletionChunk("a", (97,), 0).to_proto()).logprobs == ()


def test_retry_policy():
    policy = RetryPolicy(max_retries=5, initial_backoff=0.1, max_backoff=0.5, multiplier=2.0, jitter=0.0)
    assert [policy.backoff(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    jittered = RetryPolicy(initial_backoff=1.0, max_backoff=1.0, jitter=0.2)
    assert all(0.8 <= jittered.backoff(1) <= 1.0 for _ in range(100))
    assert RetryPolicy.coerce(2) == RetryPolicy(max_retries=2) and RetryPolicy.coerce(policy) is policy
    for bad in ({"max_retries": -1}, {"initial_backoff": 0}, {"initial_backoff": 3.0}, {"multiplier": 0.5},
                {"jitter": 1.0}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)
    with pytest.raises(ValueError, match="deadline"):
        Client("127.0.0.1:1", timeout=0)


@pytest.mark.parametrize("features", [None, ("add_special_tokens",)])
def test_a_field_the_server_would_ignore_is_refused_before_it_is_sent(server, features):
    """A server without Info (or one listing too few features) would ignore the newer
    fields and answer another request: every SDK call refuses them, naming them, and sends
    nothing; requests without them, or with add_special_tokens false (an older server's own
    tokenization), go through.  Info is asked once per client."""
    server.generation.features = features
    newer = dict(bad_words=["no"], truncate_prompt_tokens=4, prediction="abc")
    message = (f"the server at {server.address} predates bad_words, truncate_prompt_tokens, prediction, and would "
               "ignore them")
    with Client(server.address, timeout=5, retries=FAST) as client:
        with pytest.raises(InvalidRequestError, match=message):
            client.generate("abc", max_tokens=2, **newer)
        with pytest.raises(InvalidRequestError, match="predates bad_words"):
            list(client.stream("abc", max_tokens=2, bad_words="no"))
        assert client.generate("abc", max_tokens=2, add_special_tokens=False).text
        assert client.server_features() == frozenset(features or ())
    assert server.generation.info_calls == 1

    async def main():
        async with AsyncClient(server.address, timeout=5, retries=FAST) as aio:
            with pytest.raises(InvalidRequestError, match=message):
                await aio.generate("abc", max_tokens=2, **newer)
            with pytest.raises(InvalidRequestError, match="predates truncate_prompt_tokens"):
                [chunk async for chunk in aio.stream("abc", max_tokens=2, truncate_prompt_tokens=1)]
            special = aio.generate("abc", max_tokens=2, add_special_tokens=True)
            if features is None:
                with pytest.raises(InvalidRequestError, match="predates add_special_tokens"):
                    await special
            else:
                assert (await special).text

    run(main())
    assert server.generation.info_calls == 2
    assert len(server.generation.requests) == 1 + (features is not None)


def test_asking_the_servers_features_spends_the_calls_deadline_not_a_deadline_of_its_own(server):
    server.generation.info_delay = server.generation.delay = 0.6  # each well within 1 s, not both
    for call in (lambda client: client.generate("abcdef", max_tokens=4, seed=1, bad_words="x", timeout=1.0),
                 lambda client: list(client.stream("abcdef", max_tokens=4, seed=1, bad_words="x", timeout=1.0))):
        with Client(server.address, retries=FAST) as client:  # a new client asks Info again
            start = time.monotonic()
            with pytest.raises(DeadlineExceededError):
                call(client)
            assert time.monotonic() - start < 1.5

    async def asynchronous(call):
        async with AsyncClient(server.address, retries=FAST) as client:
            with pytest.raises(DeadlineExceededError):
                await call(client)

    async def consume(stream):
        return [chunk async for chunk in stream]

    run(asynchronous(lambda client: client.generate("abcdef", max_tokens=4, seed=1, bad_words="x", timeout=1.0)))
    run(asynchronous(lambda client: consume(client.stream("abcdef", max_tokens=4, seed=1, bad_words="x",
                                                          timeout=1.0))))


def test_a_server_listing_the_features_gets_them(server):
    with Client(server.address, timeout=5, retries=FAST) as client:
        client.generate("abc", max_tokens=2, bad_words=["no"], truncate_prompt_tokens=4, add_special_tokens=True)
        assert client.server_features() == frozenset(GENERATION_FEATURES)
    sent = server.generation.requests[-1]
    assert (list(sent.bad_words), sent.truncate_prompt_tokens, sent.add_special_tokens) == (["no"], 4, True)


def test_importing_the_sdk_imports_neither_torch_nor_the_server_side():
    """The SDK is what a service's callers install; torch alone takes seconds and gigabytes."""
    code = ("import sys, rayspec.client; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith(('rayspec.rpc.server', "
            "'rayspec.engine', 'rayspec.serve', 'rayspec.models'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
