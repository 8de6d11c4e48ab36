"""An idle connection to a rayspec server stays up: the server accepts the keepalive pings
its clients send (before, after two of them it answered GOAWAY "too_many_pings" and the
connection dropped — and with it any session stream waiting on a slow client).  Run at a
fast keepalive so that a few seconds hold many pings; the production setting is the same
function's default."""

from __future__ import annotations

import time

import grpc

from rayspec.rpc.generated import health_pb2, health_pb2_grpc
from rayspec.rpc.server import HealthServicer, grpc_options, start_server

KEEPALIVE_MS = 300  # a ping every 0.3 s: a server's default tolerance strikes out within a second


def test_an_idle_connection_survives_its_keepalive_pings():
    options = grpc_options(KEEPALIVE_MS)
    server, port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(HealthServicer([]), s),
                                "127.0.0.1:0", max_workers=2, options=options)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
    states: list[grpc.ChannelConnectivity] = []
    channel.subscribe(states.append, try_to_connect=True)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        time.sleep(20 * KEEPALIVE_MS / 1e3)  # idle: pings and no data (without the fix, GOAWAY within 3 s)
        after_ready = states[states.index(grpc.ChannelConnectivity.READY):]
        assert after_ready == [grpc.ChannelConnectivity.READY], f"the connection dropped while idle: {after_ready}"
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()
        server.stop(grace=None)


def test_the_server_accepts_pings_more_often_than_clients_send_them():
    options = dict(grpc_options())
    assert options["grpc.http2.min_ping_interval_without_data_ms"] < options["grpc.keepalive_time_ms"]
    assert options["grpc.keepalive_permit_without_calls"] == 1


def test_a_second_server_on_a_port_in_use_fails_to_bind_rather_than_share_it():
    """gRPC's default (SO_REUSEPORT) would let both listen and split the calls — and the
    sessions, which live in one process — between them."""
    import pytest

    def register(server):
        health_pb2_grpc.add_HealthServicer_to_server(HealthServicer([]), server)

    first, port = start_server(register, "127.0.0.1:0")
    try:
        with pytest.raises(OSError, match=f"cannot bind a gRPC server to 127.0.0.1:{port}"):
            start_server(register, f"127.0.0.1:{port}")
    finally:
        first.stop(0)
    again, _ = start_server(register, f"127.0.0.1:{port}")  # free once the first is gone
    again.stop(0)


def test_a_worker_process_on_a_port_in_use_says_so_and_exits(tmp_path):
    import subprocess
    import sys

    from tests.loopback import free_port

    port = free_port()
    first, _ = start_server(lambda server: None, f"127.0.0.1:{port}")
    try:
        worker = subprocess.run([sys.executable, "-m", "rayspec.rpc.worker", "--role", "drafter", "--port", str(port)],
                                capture_output=True, text=True, timeout=120)
    finally:
        first.stop(0)
    assert worker.returncode == 1
    assert f"rayspec worker: error: cannot bind a gRPC server to 127.0.0.1:{port}: the port is in use" in worker.stderr
    assert "add_port" not in worker.stderr  # found before the model loaded, not by gRPC's bind after it
