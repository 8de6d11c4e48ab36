"""A gRPC coordinator's health checks ask its target worker, which may hang: they still answer
in time, and leave the server's threads to its other calls."""

from __future__ import annotations

import queue
import socket
import threading
import time

import grpc
import pytest

from rayspec.engine import LocalTarget
from rayspec.rpc.coordinator import serve_generation_from_workers
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, health_pb2, health_pb2_grpc
from rayspec.rpc.remote import RemoteTarget, worker_statuses
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
        # One connection for every probe, as a load balancer keeps one: a channel per probe
        # spends the probe's second on 72 handshakes when the machine is loaded, which says
        # nothing about the coordinator.
        probes = grpc.insecure_channel(f"127.0.0.1:{coordinator_port}")
        health = health_pb2_grpc.HealthStub(probes)

        def probe():
            try:
                codes.append(health.Check(health_pb2.HealthCheckRequest(), timeout=1.0).status)
            except grpc.RpcError as error:
                codes.append(error.code())

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
        probes.close()
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


@pytest.fixture
def coordinator_over_a_target():
    worker, port = serve_target(LocalTarget(tiny_llama(vocab=VOCAB, seed=0)), "127.0.0.1:0")
    target = RemoteTarget(f"127.0.0.1:{port}")
    coordinator, coordinator_port = serve_generation_from_workers("127.0.0.1:0", target, None)
    yield target, f"127.0.0.1:{port}", coordinator_port
    coordinator.stop(0)
    worker.stop(0)
    target.close()


class Statuses:
    """A watch's messages, read by one thread as they come."""

    def __init__(self, watch):
        self.watch, self.messages = watch, queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for message in self.watch:
                self.messages.put(message.status)
        except grpc.RpcError as error:
            self.messages.put(error.code())

    def next(self, within: float):
        """The next status, waiting at most `within` seconds (None: none came)."""
        try:
            return self.messages.get(timeout=within)
        except queue.Empty:
            return None


def test_a_health_watch_reports_each_change_and_stays_open(coordinator_over_a_target, black_hole):
    """grpc.health.v1 Watch: the status at once, then a message at each change — the target
    hanging, then answering again — on the one open call (a watch that answered once and
    ended left watchers, e.g. Envoy's or a client channel's health checking, blind)."""
    target, target_address, port = coordinator_over_a_target
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = health_pb2.HealthCheckRequest(service="rayspec.v1.Generation")
        watch = health_pb2_grpc.HealthStub(channel).Watch(request)
        statuses = Statuses(watch)
        assert statuses.next(10) == SERVING
        assert statuses.next(1.5) is None, "no message while nothing changes"
        target.move_to(black_hole)
        assert statuses.next(8) == NOT_SERVING
        target.move_to(target_address)
        assert statuses.next(8) == SERVING
        watch.cancel()
        assert statuses.next(5) == grpc.StatusCode.CANCELLED


def test_a_watch_of_an_unknown_service_says_so_and_stays_open(coordinator_over_a_target):
    _, _, port = coordinator_over_a_target
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service="no.such.Service"),
                                                          timeout=3)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        with pytest.raises(grpc.RpcError) as ended:
            next(watch)
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # open until the caller's deadline


def test_watches_beyond_their_limit_are_refused_and_leave_checks_and_calls_their_threads(coordinator_over_a_target):
    """Each watch holds a server thread for its life: beyond `MAX_WATCHES` they are
    RESOURCE_EXHAUSTED, checks and Info still answer, and a watch that ended frees its place."""
    from rayspec.rpc.server import HealthServicer

    _, _, port = coordinator_over_a_target
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest()) for _ in range(HealthServicer.MAX_WATCHES)]
        assert [Statuses(watch).next(10) for watch in watches] == [SERVING] * HealthServicer.MAX_WATCHES
        refused = health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as error:
            next(refused)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"at most {HealthServicer.MAX_WATCHES} health watches at once" in error.value.details()
        for _ in range(4):  # the server's threads for checks and Info are all still there
            assert _check(port, 5) == SERVING
        assert generation_pb2_grpc.GenerationStub(channel).Info(generation_pb2.GenerationInfoRequest(), timeout=5)
        watches[0].cancel()
        deadline = time.monotonic() + 5
        while True:  # the cancelled watch's thread notices within its period
            again = health.Watch(health_pb2.HealthCheckRequest(), timeout=10)
            try:
                assert next(again).status == SERVING
                break
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline
                time.sleep(0.2)
        again.cancel()
        for watch in watches[1:]:
            watch.cancel()


def test_hung_workers_hold_a_health_answer_one_timeout_not_one_each(black_hole):
    """Three workers that never answer and one that serves: asked all at once, the answer
    comes after one timeout, the hung ones UNREACHABLE and the live one SERVING (one after
    another, it took three); a channel closed meanwhile is UNREACHABLE too, not an error."""
    from rayspec.rpc.server import HealthServicer, start_server

    server, port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(
        HealthServicer(["rayspec.v1.TargetService"]), s), "127.0.0.1:0")
    channels = {f"drafter {i}": grpc.insecure_channel(black_hole) for i in range(3)}
    channels["target"] = grpc.insecure_channel(f"127.0.0.1:{port}")
    closed = grpc.insecure_channel(f"127.0.0.1:{port}")
    closed.close()
    channels["drafter 3"] = closed
    try:
        worker_statuses({"target": channels["target"]}, timeout=5)  # connected: the clock is the hung ones'
        started = time.monotonic()
        statuses = worker_statuses(channels, timeout=0.5)
        seconds = time.monotonic() - started
        assert statuses["target"] == "SERVING"
        assert [statuses[f"drafter {i}"] for i in range(3)] == ["UNREACHABLE: DEADLINE_EXCEEDED"] * 3
        assert statuses["drafter 3"].startswith("UNREACHABLE: ") and "closed" in statuses["drafter 3"]
        assert 0.5 <= seconds < 1.25, seconds  # one after another: 1.5
    finally:
        for channel in channels.values():
            channel.close()
        server.stop(0)
