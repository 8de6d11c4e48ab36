"""The asyncio client (grpc.aio), method for method the twin of `rayspec.client.Client`.

    async with AsyncClient("127.0.0.1:9000") as client:
        completion = await client.generate("Once upon a time", max_tokens=32, seed=1)
        async with client.stream("Once upon a time", max_tokens=32) as stream:
            async for chunk in stream:
                print(chunk.text, end="", flush=True)
        print(stream.completion.usage)

Create the client inside the event loop that uses it: a grpc.aio channel belongs to one loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from rayspec.client._base import INFO_REQUEST, BaseClient, StreamState
from rayspec.client.errors import (
    DeadlineExceededError,
    NotFoundError,
    RayspecError,
    ServerError,
    UnavailableError,
    error_from_rpc,
)
from rayspec.client.retry import Deadline, RetryPolicy
from rayspec.client.types import Completion, CompletionChunk, GenerateRequest, GenerationParams
from rayspec.rpc.generated import health_pb2

if TYPE_CHECKING:
    from typing_extensions import Unpack


class AsyncClient(BaseClient):
    """An asyncio client of a rayspec server's `rayspec.v1.Generation` gRPC service; same
    settings, methods, retries and exceptions as `Client`, awaited."""

    _grpc = grpc.aio

    async def generate(
        self, prompt: str | Sequence[int], *, timeout: float | None = None, **params: Unpack[GenerationParams]
    ) -> Completion:
        """Generate a completion; see `Client.generate`."""
        request = self._request(prompt, params)
        message = request.to_proto()  # a field it cannot carry is refused before any call, the Info one too
        deadline = self._deadline(timeout)  # the Info question, when asked, spends it too
        await self._check_features(request, deadline)
        response = await self._call(self._generation.Generate, message, deadline, idempotent=request.idempotent)
        return Completion.from_proto(response)

    def stream(
        self, prompt: str | Sequence[int], *, timeout: float | None = None, **params: Unpack[GenerationParams]
    ) -> AsyncCompletionStream:
        """An `AsyncCompletionStream` to `async for` over (not awaited); see `Client.stream`."""
        self._check_open()
        request = self._request(prompt, params)
        message = request.to_proto()
        return AsyncCompletionStream(
            lambda remaining: self._open_stream(message, remaining),
            self._timeout(timeout),
            self.retry if request.idempotent else None,
            check=lambda deadline: self._check_features(request, deadline),
            closed=lambda: self._closed,
        )

    async def server_features(self, *, timeout: float | None = None) -> frozenset[str]:
        """See `Client.server_features`."""
        return await self._server_features(self._deadline(timeout))

    async def _server_features(self, deadline: Deadline) -> frozenset[str]:
        if self._features is None:
            try:
                self._learn_features(await self._call(self._generation.Info, INFO_REQUEST, deadline, idempotent=True))
            except ServerError as error:
                self._learn_features(None, error)
        return self._features

    async def _check_features(self, request: GenerateRequest, deadline: Deadline) -> None:
        if request.features:
            self._refuse_unknown_features(request, await self._server_features(deadline))

    async def health(self, service: str = "", *, timeout: float | None = None) -> bool:
        """See `Client.health`."""
        request = health_pb2.HealthCheckRequest(service=service)
        try:
            response = await self._call(self._health.Check, request, self._deadline(timeout), idempotent=True)
        except (UnavailableError, DeadlineExceededError, NotFoundError):
            return False
        return response.status == health_pb2.HealthCheckResponse.SERVING

    async def _call(self, method: Callable, request, deadline: Deadline, idempotent: bool):
        retries = 0
        while True:
            self._check_open()  # before each try: a retry's pause may outlast the client
            try:
                return await method(request, timeout=deadline.remaining(), metadata=self._metadata)
            except asyncio.CancelledError:
                if closed_in_flight(self._closed):
                    raise channel_closed() from None
                raise
            except grpc.RpcError as error:
                pause = self.retry.pause(retries, error.code(), deadline) if idempotent else None
                if pause is None:
                    raise error_from_rpc(error) from error
            retries += 1
            await asyncio.sleep(pause)

    async def close(self) -> None:
        """Close the channel; calls in flight are cancelled (each raises a `RayspecError` with
        code CANCELLED), and later ones raise `ClientClosedError`."""
        self._closed = True
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class AsyncCompletionStream(AsyncIterator[CompletionChunk]):
    """The chunks of one streamed generation; see `rayspec.client.sync.CompletionStream`.
    `cancel()` or leaving an `async with` block cancels the call."""

    def __init__(self, open_call: Callable[[float], Any], timeout: float, retry: RetryPolicy | None,
                 check: Callable[[Deadline], Awaitable[None]] | None = None,
                 closed: Callable[[], bool] = lambda: False):
        self._state = StreamState()
        self._chunks = _stream_chunks(self._state, open_call, timeout, retry, check, closed)

    @property
    def completion(self) -> Completion | None:
        return self._state.completion

    async def __anext__(self) -> CompletionChunk:
        return await self._chunks.__anext__()

    def cancel(self) -> None:
        self._state.cancel()

    async def close(self) -> None:
        """Cancel the call, if it is still running, and end the iteration."""
        self.cancel()
        await self._chunks.aclose()

    async def __aenter__(self) -> AsyncCompletionStream:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def _stream_chunks(state: StreamState, open_call: Callable[[float], Any], timeout: float,
                         retry: RetryPolicy | None, check: Callable[[Deadline], Awaitable[None]] | None,
                         closed: Callable[[], bool]) -> AsyncIterator[CompletionChunk]:
    """An `AsyncCompletionStream`'s chunks (see `rayspec.client._base.StreamState` for why
    this is no method of it)."""
    deadline = Deadline(timeout)
    if check is not None:
        await check(deadline)  # at the first iteration, before the call, within its deadline
    chunks: list[CompletionChunk] = []
    retries = 0
    try:
        while not state.cancelled:
            state.call = open_call(deadline.remaining())
            try:
                async for message in state.call:
                    if state.completion is not None:  # nothing follows the completion but the call's end
                        continue
                    if message.HasField("complete"):
                        # Its end is read too (it follows at once): a call dropped here would end
                        # CANCELLED on the server, though it got all it asked for.
                        state.completion = Completion.from_stream(chunks, message.complete)
                        continue
                    chunks.append(CompletionChunk.from_proto(message.chunk))
                    yield chunks[-1]
                if state.completion is not None:
                    return
            except asyncio.CancelledError:
                if state.cancelled:  # our cancel(), not the task's
                    return
                if closed_in_flight(closed()):
                    raise channel_closed() from None
                raise
            except grpc.RpcError as error:
                if state.cancelled or state.completion is not None:  # all it asked for came
                    return
                replayable = retry is not None and not chunks  # nothing handed out yet
                pause = retry.pause(retries, error.code(), deadline) if replayable else None
                if pause is None:
                    raise error_from_rpc(error) from error
                retries += 1
                await asyncio.sleep(pause)
                continue
            raise ServerError("the stream ended without its completion message")
    finally:
        if state.completion is None and state.call is not None:
            state.call.cancel()  # a stream closed or dropped before its end: the server stops too


def closed_in_flight(client_closed: bool) -> bool:
    """Whether an asyncio.CancelledError out of a gRPC call is its client's `close()` (grpc.aio
    cancels the closed channel's calls so) and not its task's cancellation, which must go on.
    Python 3.10 cannot tell a task being cancelled (no `Task.cancelling`): a client closed is
    taken for the cause there."""
    if not client_closed:
        return False
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return cancelling is None or not cancelling()


def channel_closed() -> RayspecError:
    """What a call in flight raises when its client closes: the blocking client's gRPC error
    (CANCELLED, "Channel closed!"), so that both clients fail alike and `except RayspecError`
    catches it."""
    return RayspecError("Channel closed!", grpc.StatusCode.CANCELLED)
