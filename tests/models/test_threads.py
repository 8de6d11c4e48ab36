"""Torch's thread count holds in threads started after it was set (rayspec.models.threads),
observed through OpenMP's own count for the calling thread.  The count set is one a new
thread would not get by itself, so each test fails if the count is left to OpenMP."""

from __future__ import annotations

import threading

import grpc
import pytest

from rayspec.models.threads import honour_torch_threads
from rayspec.rpc.generated import health_pb2, health_pb2_grpc
from rayspec.rpc.server import HealthServicer, start_server
from tests.openmp import AVAILABLE, OPENMP_DEFAULT, UNUSUAL, openmp_threads, torch_threads

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="torch runs without OpenMP here")


def openmp_threads_in_new_thread(prepare=None) -> int:
    seen = []

    def run():
        if prepare:
            prepare()
        seen.append(openmp_threads())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen[0]


def test_a_new_thread_ignores_the_count_unless_it_applies_it():
    with torch_threads(UNUSUAL):
        # the reason the module exists: left alone, a new thread computes with OpenMP's default
        assert openmp_threads_in_new_thread() == OPENMP_DEFAULT
        assert openmp_threads_in_new_thread(honour_torch_threads) == UNUSUAL


class _ThreadCountHealth(HealthServicer):
    def Check(self, request, context):
        # the handler thread's count, carried in the status field (an open enum takes any number)
        return health_pb2.HealthCheckResponse(status=openmp_threads())


def test_grpc_handlers_compute_with_the_process_count():
    with torch_threads(UNUSUAL):
        server, port = start_server(
            lambda s: health_pb2_grpc.add_HealthServicer_to_server(_ThreadCountHealth([]), s), "127.0.0.1:0"
        )
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert reply.status == UNUSUAL
        finally:
            server.stop(None)


class _Seen(Exception):
    def __init__(self, threads: int):
        super().__init__(threads)
        self.threads = threads


class _ThreadCountRequest:
    """A request whose generation only reports its thread's OpenMP count, as an error."""

    request_id = "threads-probe"
    prompt_ids = (0,)

    def run(self):
        raise _Seen(openmp_threads())
        yield  # a generator, as GenerationRequest.run is


def test_http_generation_threads_compute_with_the_process_count():
    import asyncio

    from rayspec.serve.service import Service

    async def generate():
        stream = await Service(engine=None, tokenizer=None, model_id="probe").start(_ThreadCountRequest())
        with pytest.raises(_Seen) as seen:
            async for _ in stream:
                pass
        return seen.value.threads

    with torch_threads(UNUSUAL):
        assert asyncio.run(generate()) == UNUSUAL
