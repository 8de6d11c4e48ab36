"""Worker hangs under real processes (found by a stress run): a coordinator's clients that
leave while a worker is stopped (SIGSTOP: a frozen host, a GPU stall, a partition) are let go
at once, and the sessions they held on the hung worker are released once it runs again."""

from __future__ import annotations

import os
import signal
import time
from contextlib import ExitStack
from datetime import datetime

import grpc
import pytest

from rayspec.client import Client
from rayspec.client.errors import UnavailableError
from rayspec.engine.interfaces import SequenceSpec
from rayspec.rpc import codec
from rayspec.rpc.generated import worker_pb2, worker_pb2_grpc
from rayspec.verify.processing import SamplingParams
from tests.rpc.processes import start_tiny_pair_workers

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")

MAX_SESSIONS = 256  # a worker's (`Servicer`)


@pytest.fixture
def cluster(tmp_path):
    with ExitStack() as started:
        workers = start_tiny_pair_workers(started, tmp_path)
        target, drafter = workers["target"], workers["drafter"]
        try:
            yield {**workers, "logs": tmp_path}
        finally:
            for worker in (target, drafter):  # never leave one stopped
                if worker.process.poll() is None:
                    os.kill(worker.process.pid, signal.SIGCONT)


def _open_sessions(address: str) -> int:
    """How many sessions the target worker holds: its free places counted by opening them."""
    with grpc.insecure_channel(address) as channel:
        stub = worker_pb2_grpc.TargetServiceStub(channel)
        spec = codec.encode_spec(SequenceSpec((5,), SamplingParams(temperature=1.0), 0, "rrsw"))
        opened = []
        try:
            for i in range(MAX_SESSIONS):
                try:
                    stub.Open(worker_pb2.OpenRequest(session_id=f"probe-{i}", spec=spec), timeout=30)
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
                    break
                opened.append(f"probe-{i}")
        finally:
            for session_id in opened:
                stub.Release(worker_pb2.ReleaseRequest(session_id=session_id), timeout=30)
    return MAX_SESSIONS - len(opened)


def _streams(address: str, count: int):
    client = Client(address, timeout=120)
    streams = []
    for seed in range(count):
        stream = client.stream([11, 500, 7, 40], max_tokens=400, seed=seed, ignore_eos=True, verifier="rrsw",
                               tree="kary:2x2")
        next(stream)
        streams.append(stream)
    return client, streams


def _left_lines(log, since: int) -> list[float]:
    """When the coordinator logged each generation whose caller left, after byte `since`."""
    times = []
    for line in log.read_text()[since:].splitlines():
        if "its caller left" in line:
            times.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return times


def test_the_sessions_of_clients_that_left_while_the_target_hung_are_released_once_it_runs_again(cluster):
    """The coordinator's Release of such a session goes unwatched; one with the 5-s deadline
    of a watched Release expired before a target stopped longer woke, and the session held
    its place (and KV cache) until the worker's idle expiry, 10 minutes."""
    target = cluster["target"]
    client, streams = _streams(cluster["coordinator"].address, 4)
    os.kill(target.process.pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        for stream in streams:
            stream.cancel()
        time.sleep(7.0)
    finally:
        os.kill(target.process.pid, signal.SIGCONT)
    client.close()
    deadline = time.monotonic() + 10
    while (held := _open_sessions(target.address)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert held == 0


def test_clients_that_left_while_both_workers_hung_are_let_go_at_once(cluster):
    """A generation cancelled while its drafter and target are both stopped ends within the
    watchdog's period: its sessions' Releases go unwatched, rather than each waiting up to
    5 s for a worker that does not answer (the client's slot and server thread held)."""
    log = cluster["logs"] / "coordinator.log"
    client, streams = _streams(cluster["coordinator"].address, 4)
    time.sleep(0.5)
    since = log.stat().st_size
    workers = (cluster["drafter"], cluster["target"])
    for worker in workers:
        os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        left = time.time()
        for stream in streams:
            stream.cancel()
        time.sleep(6.0)
    finally:
        for worker in workers:
            os.kill(worker.process.pid, signal.SIGCONT)
    client.close()
    ended = _left_lines(log, since)
    assert len(ended) == 4, log.read_text()[since:]
    assert max(ended) - left < 2.5, [round(t - left, 2) for t in ended]



@pytest.mark.slow
def test_the_sessions_of_steps_past_their_deadline_on_a_hung_target_are_released_once_it_runs_again(cluster):
    """A target stopped past a step's deadline (60 s) fails its streams UNAVAILABLE, and their
    sessions' Releases wait for it; its connection is dropped meanwhile (its keepalive ping
    unanswered), and with it the Releases: they are sent again, rather than each session held
    until the worker's idle expiry (`test_unwatched_release.py` is the short version).  The
    keepalive's drop comes at about the deadline too: a stream whose call it ends first
    (UNAVAILABLE, "ping timeout", 0.2 s before the deadline in one run) reads its target as
    lost, waits for it (`resume_timeout`, 60 s), resumes when it wakes at 72 s and ends whole;
    2 of 6 runs went so, with all four streams."""
    target = cluster["target"]
    client, streams = _streams(cluster["coordinator"].address, 4)
    os.kill(target.process.pid, signal.SIGSTOP)
    try:
        time.sleep(72.0)
    finally:
        os.kill(target.process.pid, signal.SIGCONT)
    for stream in streams:
        try:
            for _ in stream:
                pass
        except UnavailableError as error:
            assert "did not answer within 60 s" in str(error), error
        else:
            assert (stream.completion.finish_reason, len(stream.completion.token_ids)) == ("length", 400)
    client.close()
    deadline = time.monotonic() + 10
    while (held := _open_sessions(target.address)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert held == 0
