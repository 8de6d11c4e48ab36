"""The blocking client.

    with Client("127.0.0.1:9000") as client:
        print(client.generate("Once upon a time", max_tokens=32, seed=1).text)
        with client.stream("Once upon a time", max_tokens=32) as stream:
            for chunk in stream:
                print(chunk.text, end="", flush=True)
        print(stream.completion.usage)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from rayspec.client._base import INFO_REQUEST, BaseClient, StreamState
from rayspec.client.errors import (
    DeadlineExceededError,
    NotFoundError,
    ServerError,
    UnavailableError,
    error_from_rpc,
)
from rayspec.client.retry import Deadline, RetryPolicy
from rayspec.client.types import Completion, CompletionChunk, GenerateRequest, GenerationParams
from rayspec.rpc.generated import health_pb2

if TYPE_CHECKING:
    from typing_extensions import Unpack


class Client(BaseClient):
    """A blocking client of a rayspec server's `rayspec.v1.Generation` gRPC service.

    `Client("host:port", timeout=60.0, retries=3, options=(), max_message_bytes=16 MiB,
    credentials=None, api_key=None)`; see `BaseClient` for the settings.  Thread-safe: share one client
    (one channel) between threads.  Failed calls raise `rayspec.client.errors.RayspecError`
    subclasses.
    """

    def generate(
        self, prompt: str | Sequence[int], *, timeout: float | None = None, **params: Unpack[GenerationParams]
    ) -> Completion:
        """Generate a completion; the parameters are `GenerateRequest`'s.  Replayed after
        UNAVAILABLE only when `seed` is given (see `rayspec.client.retry`)."""
        request = self._request(prompt, params)
        message = request.to_proto()  # a field it cannot carry is refused before any call, the Info one too
        deadline = self._deadline(timeout)  # the Info question, when asked, spends it too
        self._check_features(request, deadline)
        response = self._call(self._generation.Generate, message, deadline, idempotent=request.idempotent)
        return Completion.from_proto(response)

    def stream(
        self, prompt: str | Sequence[int], *, timeout: float | None = None, **params: Unpack[GenerationParams]
    ) -> CompletionStream:
        """Generate, chunk by chunk as the server verifies them: a `CompletionStream` to
        iterate, whose `.completion` holds the totals once it is exhausted.  The call starts
        at the first iteration; `timeout` bounds the whole stream."""
        self._check_open()
        request = self._request(prompt, params)
        message = request.to_proto()
        return CompletionStream(
            lambda remaining: self._open_stream(message, remaining),
            self._timeout(timeout),
            self.retry if request.idempotent else None,
            check=lambda deadline: self._check_features(request, deadline),
        )

    def server_features(self, *, timeout: float | None = None) -> frozenset[str]:
        """The `GENERATION_FEATURES` the server knows, asked once per client (on the first
        request that uses one); none for a server without `Info`, which predates them all."""
        return self._server_features(self._deadline(timeout))

    def _server_features(self, deadline: Deadline) -> frozenset[str]:
        if self._features is None:
            try:
                self._learn_features(self._call(self._generation.Info, INFO_REQUEST, deadline, idempotent=True))
            except ServerError as error:
                self._learn_features(None, error)
        return self._features

    def _check_features(self, request: GenerateRequest, deadline: Deadline) -> None:
        """Refuse, before sending it, a request using a field the server would ignore."""
        if request.features:
            self._refuse_unknown_features(request, self._server_features(deadline))

    def health(self, service: str = "", *, timeout: float | None = None) -> bool:
        """Whether the server reports SERVING for `service` ("" is the whole server).  False
        when it is not serving, does not know the service, or cannot be reached in time."""
        request = health_pb2.HealthCheckRequest(service=service)
        try:
            response = self._call(self._health.Check, request, self._deadline(timeout), idempotent=True)
        except (UnavailableError, DeadlineExceededError, NotFoundError):
            return False
        return response.status == health_pb2.HealthCheckResponse.SERVING

    def _call(self, method: Callable, request, deadline: Deadline, idempotent: bool):
        retries = 0
        while True:
            self._check_open()  # before each try: a retry's pause may outlast the client
            try:
                return method(request, timeout=deadline.remaining(), metadata=self._metadata)
            except grpc.RpcError as error:
                pause = self.retry.pause(retries, error.code(), deadline) if idempotent else None
                if pause is None:
                    raise error_from_rpc(error) from error
            except ValueError:
                self._check_open()  # closed by another thread since the check above: not grpc's refusal
                raise
            retries += 1
            time.sleep(pause)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled (each raises a `RayspecError` with
        code CANCELLED), and later ones raise `ClientClosedError`."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CompletionStream(Iterator[CompletionChunk]):
    """The chunks of one streamed generation, in order.

    After the last chunk, `completion` is the whole `Completion`: its text is the
    concatenation of the chunks', the rest (token_ids, finish_reason, usage, seed,
    request_id) comes from the server's final message.  It is None until then, and stays
    None if the stream fails or is cancelled.

    `cancel()` (from any thread) or leaving a `with` block cancels the call on the server;
    iteration then ends quietly.  Before its first message arrives, a seeded stream is
    replayed after UNAVAILABLE like `generate`; once a chunk is out, never.
    """

    def __init__(self, open_call: Callable[[float], Any], timeout: float, retry: RetryPolicy | None,
                 check: Callable[[Deadline], None] | None = None):
        self._state = StreamState()
        self._chunks = _stream_chunks(self._state, open_call, timeout, retry, check)

    @property
    def completion(self) -> Completion | None:
        return self._state.completion

    def __next__(self) -> CompletionChunk:
        return next(self._chunks)

    def cancel(self) -> None:
        self._state.cancel()

    def close(self) -> None:
        """Cancel the call, if it is still running, and end the iteration."""
        self.cancel()
        self._chunks.close()

    def __enter__(self) -> CompletionStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stream_chunks(state: StreamState, open_call: Callable[[float], Any], timeout: float, retry: RetryPolicy | None,
                   check: Callable[[Deadline], None] | None) -> Iterator[CompletionChunk]:
    """A `CompletionStream`'s chunks (see `StreamState` for why this is no method of it)."""
    deadline = Deadline(timeout)  # from the first iteration, when the call starts
    if check is not None:
        check(deadline)  # at the first iteration, before the call, within its deadline
    chunks: list[CompletionChunk] = []
    retries = 0
    try:
        while not state.cancelled:
            state.call = open_call(deadline.remaining())
            if state.cancelled:  # cancel() ran while the call was being opened
                state.call.cancel()
            try:
                for message in state.call:
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
            except grpc.RpcError as error:
                if state.cancelled or state.completion is not None:  # all it asked for came
                    return
                replayable = retry is not None and not chunks  # nothing handed out yet
                pause = retry.pause(retries, error.code(), deadline) if replayable else None
                if pause is None:
                    raise error_from_rpc(error) from error
                retries += 1
                time.sleep(pause)
                continue
            raise ServerError("the stream ended without its completion message")
    finally:
        if state.completion is None and state.call is not None:
            state.call.cancel()  # a stream closed or dropped before its end: the server stops too
