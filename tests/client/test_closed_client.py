"""Every call on a closed client, blocking or asyncio, raises the SDK's `ClientClosedError`, not
the closed gRPC channel's own ValueError or UsageError.  No server: nothing is dialled."""

from __future__ import annotations

import asyncio

import pytest

import rayspec.client as sdk
from tests.loopback import free_port

WHY = r"^the client of 127\.0\.0\.1:\d+ was closed \(close\(\), or the end of its with block\): make a new one$"

CALLS = {
    "generate": lambda client: client.generate("abc", max_tokens=1),
    "generate, asking the server's features first": lambda client: client.generate("abc", max_tokens=1,
                                                                                     bad_words=["x"]),
    "stream": lambda client: list(client.stream("abc", max_tokens=1)),
    "health": lambda client: client.health(),
    "server_features": lambda client: client.server_features(),
}


def _assert_client_closed_error(error: BaseException) -> None:
    assert type(error) is sdk.ClientClosedError and isinstance(error, ValueError) and error.code is None


@pytest.mark.parametrize("call", CALLS)
def test_a_call_on_a_closed_client_raises_client_closed_error(call):
    with sdk.Client(f"127.0.0.1:{free_port()}") as client:
        stream = client.stream("abc", max_tokens=1)  # made while open, read once closed
    with pytest.raises(sdk.RayspecError, match=WHY) as raised:
        CALLS[call](client)
    _assert_client_closed_error(raised.value)
    with pytest.raises(sdk.RayspecError, match=WHY) as raised:
        next(stream)
    _assert_client_closed_error(raised.value)


async def _drain(stream: sdk.AsyncCompletionStream) -> list:
    return [chunk async for chunk in stream]


ASYNC_CALLS = {**CALLS, "stream": lambda client: _drain(client.stream("abc", max_tokens=1))}


@pytest.mark.parametrize("call", ASYNC_CALLS)
def test_a_call_on_a_closed_async_client_raises_client_closed_error(call):
    async def closed_call():
        async with sdk.AsyncClient(f"127.0.0.1:{free_port()}") as client:
            stream = client.stream("abc", max_tokens=1)
        with pytest.raises(sdk.RayspecError, match=WHY) as raised:
            await ASYNC_CALLS[call](client)
        _assert_client_closed_error(raised.value)
        with pytest.raises(sdk.RayspecError, match=WHY) as raised:
            await stream.__anext__()
        _assert_client_closed_error(raised.value)

    asyncio.run(closed_call())


def test_closing_twice_is_harmless():
    client = sdk.Client(f"127.0.0.1:{free_port()}")
    client.close()
    client.close()

    async def twice():
        async_client = sdk.AsyncClient(f"127.0.0.1:{free_port()}")
        await async_client.close()
        await async_client.close()

    asyncio.run(twice())



class _ClosingFirst:
    """A stub whose methods close the client before gRPC takes their call."""

    def __init__(self, stub, client: sdk.Client):
        self._stub, self._client = stub, client

    def __getattr__(self, method: str):
        def close_then_call(*args, **kwargs):
            self._client.close()  # what another thread's close() does in the gap
            return getattr(self._stub, method)(*args, **kwargs)
        return close_then_call


@pytest.mark.parametrize("call", CALLS)
def test_a_call_racing_a_close_on_another_thread_raises_client_closed_error(call):
    """The client is shared between threads: one may close it after another's call checked it
    was open but before gRPC took the call, whose closed channel then refuses with a bare
    ValueError.  Made deterministic by closing in that gap."""
    client = sdk.Client(f"127.0.0.1:{free_port()}")
    client._generation = _ClosingFirst(client._generation, client)
    client._health = _ClosingFirst(client._health, client)
    with pytest.raises(sdk.RayspecError, match=WHY) as raised:
        CALLS[call](client)
    _assert_client_closed_error(raised.value)
