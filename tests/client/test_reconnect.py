"""Retries across a server restart: a replay must reach a server that is back, not fail fast on
a channel still waiting out gRPC's own reconnection backoff (1 s, then growing to 120 s)."""

from __future__ import annotations

import asyncio
from concurrent import futures

import grpc
import pytest

from rayspec.client import AsyncClient, Client, RetryPolicy
from rayspec.rpc.generated import generation_pb2 as pb
from rayspec.rpc.generated import generation_pb2_grpc, health_pb2_grpc
from tests.client.test_client import FakeGeneration, FakeHealth
from tests.loopback import free_port

# replays within 0.35 s, well inside the 0.8 s gRPC's first reconnection backoff lasts at least
QUICK = RetryPolicy(max_retries=3, initial_backoff=0.05, max_backoff=0.2, jitter=0.0)


def start(address: str) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    generation_pb2_grpc.add_GenerationServicer_to_server(FakeGeneration(), server)
    health_pb2_grpc.add_HealthServicer_to_server(FakeHealth(), server)
    assert server.add_insecure_port(address)
    server.start()
    return server


@pytest.fixture
def address():
    return f"127.0.0.1:{free_port()}"


def test_a_seeded_generate_is_replayed_to_a_server_back_at_its_address(address):
    server = start(address)
    with Client(address, timeout=10, retries=QUICK) as client:
        assert client.generate("abcdef", max_tokens=4, seed=1).text == "bcde"
        server.stop(None).wait()
        stub = generation_pb2_grpc.GenerationStub(client._channel)
        with pytest.raises(grpc.RpcError) as failed:  # a call while it is down: the channel backs off
            stub.Generate(pb.GenerateRequest(prompt="abc", seed=1), timeout=5)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        server = start(address)  # back at once: the replays must reach it
        try:
            assert client.generate("abcdef", max_tokens=4, seed=1).text == "bcde"
            assert client.health()
        finally:
            server.stop(None)


def test_an_async_seeded_generate_is_replayed_to_a_server_back_at_its_address(address):
    async def main():
        server = start(address)
        async with AsyncClient(address, timeout=10, retries=QUICK) as client:
            assert (await client.generate("abcdef", max_tokens=4, seed=1)).text == "bcde"
            server.stop(None).wait()
            assert not await client.health(timeout=0.3)  # while it is down: the channel backs off
            server = start(address)
            try:
                assert (await client.generate("abcdef", max_tokens=4, seed=1)).text == "bcde"
            finally:
                server.stop(None)

    asyncio.run(main())
