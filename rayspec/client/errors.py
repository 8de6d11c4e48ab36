"""Exceptions of the client SDK, one class per kind of failure a caller handles differently.

    RayspecError                  any failed call; .code (grpc.StatusCode or None), .message
    ├── InvalidRequestError       INVALID_ARGUMENT, or a message over a size limit: fix the request,
    │                             do not retry it
    ├── NotFoundError             NOT_FOUND: unknown session, model or health service
    ├── OverloadedError           RESOURCE_EXHAUSTED: the server sheds load; back off
    ├── DeadlineExceededError     DEADLINE_EXCEEDED: the call's timeout ran out
    ├── UnavailableError          UNAVAILABLE: the server, or a model worker behind it, cannot be reached
    ├── AuthenticationError       UNAUTHENTICATED: no API key, or not the server's (`api_key=`)
    ├── ServerError               INTERNAL / UNKNOWN / UNIMPLEMENTED / DATA_LOSS: a server bug
    └── ClientClosedError         a call on a client after its `close()`: nothing was sent; also a
                                  ValueError

Other status codes (CANCELLED, PERMISSION_DENIED, ...) raise a plain `RayspecError`.  The
original `grpc.RpcError` is chained as `__cause__`.
"""

from __future__ import annotations

import grpc


class RayspecError(Exception):
    """A call to a rayspec server failed; `message` is the server's status message."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" if self.code is not None else self.message


class InvalidRequestError(RayspecError):
    """The server refused the request's content (unknown verifier, negative max_tokens, ...)."""


class NotFoundError(RayspecError):
    """The named thing (session, model, health service) does not exist on the server."""


class OverloadedError(RayspecError):
    """The server is at capacity; retry later, with backoff.  A call that finds every
    generation slot taken waits in line for one (within its deadline); this is raised when
    the line is full too (`limits.max_queued_requests`, a plain coordinator's
    `--max-queued-requests`), or what the server shares behind it (a model worker's sessions,
    the structured-output compilers) has no room for the call."""


class DeadlineExceededError(RayspecError):
    """The call did not finish within its timeout."""


class UnavailableError(RayspecError):
    """The server could not be reached or dropped the connection, or a model worker behind it
    failed or could not be reached."""


class AuthenticationError(RayspecError):
    """The server needs an API key and the client sent none, or another (`Client(api_key=...)`)."""


class ServerError(RayspecError):
    """The server failed while handling a valid request."""


class ClientClosedError(RayspecError, ValueError):
    """A call on a client that was closed (`close()`, or the end of its `with` block); nothing
    was sent, and `code` is None.  Make a new client.  A ValueError as well, as the closed gRPC
    channel's own refusal was before the SDK had this class."""


_BY_CODE: dict[grpc.StatusCode, type[RayspecError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: OverloadedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.INTERNAL: ServerError,
    grpc.StatusCode.UNKNOWN: ServerError,
    grpc.StatusCode.UNIMPLEMENTED: ServerError,
    grpc.StatusCode.DATA_LOSS: ServerError,
}


def error_from_rpc(error: grpc.RpcError) -> RayspecError:
    """The SDK exception for a failed gRPC call (sync `grpc.RpcError` or `grpc.aio.AioRpcError`)."""
    code, details = error.code(), error.details() or error.code().name
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "message larger than max" in details:
        # gRPC's own refusal of a message over a size limit (this client's max_message_bytes, or
        # the server's): no server shedding load, and the same request would be refused again.
        return InvalidRequestError(f"{details}: a message over the size limit (the client's is max_message_bytes)",
                                   code)
    return _BY_CODE.get(code, RayspecError)(details, code)
