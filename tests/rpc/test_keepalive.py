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
