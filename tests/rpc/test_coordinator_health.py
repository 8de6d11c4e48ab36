"""A gRPC coordinator's health checks ask its target worker, which may hang: they still answer
in time, and leave the server's threads to its other calls."""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest

from rayspec.engine import LocalTarget
from rayspec.rpc.coordinator import serve_generation_from_workers
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, health_pb2, health_pb2_grpc
from rayspec.rpc.remote import RemoteTarget
from rayspec.rpc.worker import serve_target
from tests.tiny_models import tiny_llama

VOCAB = 64
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def black_hole():
    """An address that accepts TCP connections and never answers (a hung or partitioned host)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _check(port: int, timeout: float):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
        except grpc.RpcError as error:
            return error.code()


def test_health_checks_of_a_coordinator_whose_target_hangs_do_not_hold_its_threads(black_hole):
    """A target that stops answering (hung, or cut off): probes (1-s timeouts) each get an
    answer in time, checks do not hold the coordinator's server threads for the 2-s worker
    check (refusing its other calls RESOURCE_EXHAUSTED), and NOT_SERVING comes within
    seconds."""
    worker, port = serve_target(LocalTarget(tiny_llama(vocab=VOCAB, seed=0)), "127.0.0.1:0")
    target = RemoteTarget(f"127.0.0.1:{port}")
    coordinator, coordinator_port = serve_generation_from_workers("127.0.0.1:0", target, None)
    try:
        assert _check(coordinator_port, 10) == SERVING
        target.move_to(black_hole)  # the worker hangs
        codes, info = [], []

        def probe():
            codes.append(_check(coordinator_port, 1.0))

        def call_info():
            with grpc.insecure_channel(f"127.0.0.1:{coordinator_port}") as channel:
                try:
                    generation_pb2_grpc.GenerationStub(channel).Info(generation_pb2.GenerationInfoRequest(), timeout=5)
                    info.append("OK")
                except grpc.RpcError as error:
                    info.append(error.code())

        threads = []
        for _ in range(72):  # probes arriving over a second (load balancers, kubelets)
            threads.append(threading.Thread(target=probe))
            threads[-1].start()
            time.sleep(1 / 72)
        threads.append(threading.Thread(target=call_info))
        threads[-1].start()
        for thread in threads:
            thread.join()
        deadline = time.monotonic() + 6
        while (status := _check(coordinator_port, 1.0)) != NOT_SERVING and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = (info, sorted({str(c) for c in codes}), status)
        assert info == ["OK"], seen
        assert all(code in (SERVING, NOT_SERVING) for code in codes), seen
        assert status == NOT_SERVING, seen
    finally:
        coordinator.stop(0)
        worker.stop(0)
        target.close()
