"""The HTTP front end's ASGI middleware: the API key, request ids, body size limits, response
counts, and an OpenAI-shaped 500 for whatever escapes the endpoints."""

from __future__ import annotations

import asyncio
import uuid

from fastapi.responses import JSONResponse

from rayspec.request_id import usable_request_id
from rayspec.rpc.server import key_refusal
from rayspec.serve.errors import CLIENT_CLOSED_REQUEST, error_body, openai_error



_ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize",
              "/tokenizer_info", "/v1/models", "/health", "/metrics")


class RequireKey:
    """ASGI middleware answering 401, before anything is read, to a request without
    `Authorization: Bearer <key>` — every path but the probes, /health and /metrics."""

    OPEN = ("/health", "/metrics")

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in self.OPEN:
            return await self.app(scope, receive, send)
        message = key_refusal(dict(scope["headers"]).get(b"authorization", b""), self.expected,
                              "it as Authorization: Bearer <key>")
        if message is None:
            return await self.app(scope, receive, send)
        status, body = openai_error(401, message, code="invalid_api_key")
        await JSONResponse(body, status_code=status, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)


class AnswerFailures:
    """ASGI middleware answering an unexpected exception with a 500 and its OpenAI error body,
    and going on.  (Starlette answers those from its outermost layer and then re-raises, so the
    server drops the connection: a client's next request on it, from a connection pool such as
    the `openai` client's, would fail too.)  A failure after the response has started is
    re-raised: nothing else can be sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_and_note(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception as error:
            if started:
                raise
            status, body = error_body(error)
            await JSONResponse(body, status_code=status)(scope, receive, send)


def named_by(state, body_request_id: str | None) -> str:
    """The request's id: its `X-Request-Id` header's, else its body's vLLM `request_id` (as vLLM
    takes them), else the fresh one; the response's `X-Request-Id` header answers it."""
    if body_request_id is not None and not state.request_id_given:
        state.request_id = body_request_id
    return state.request_id


class RequestIds:
    """ASGI middleware giving every request an id — the client's `X-Request-Id` header when it
    sends a usable one (1-256 printable ASCII characters; another is replaced), else a fresh
    one — and answering it in the response's `X-Request-Id`, as vLLM does with
    --enable-request-id-headers.  Generations take it as their request id: it names them in the
    logs and in their responses' ids (`cmpl-<id>`, `chatcmpl-<id>`)."""

    def __init__(self, app, answer: bool = True):
        self.app, self.answer = app, answer

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"x-request-id", b"")
        usable = usable_request_id(given)
        state = scope.setdefault("state", {})
        # given: whether the client named it (else a body's vLLM `request_id` may, `named_by`)
        state["request_id"], state["request_id_given"] = given.decode() if usable else uuid.uuid4().hex, usable

        async def send_with_id(message):
            if self.answer and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", state["request_id"].encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)


class CountResponses:
    """ASGI middleware counting answered requests by endpoint and status (streams included)."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = None

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except asyncio.CancelledError:
            # Ray Serve's proxy cancels the replica's request when its client disconnects (it
            # logs 499 itself); uvicorn alone lets the app see the disconnect (`ClientGone`).
            raise
        except BaseException:
            status = 500 if status is None else status  # failed before any answer: the server's fault
            raise
        finally:
            # No answer and no failure: the client left first (in the middle of its body, say),
            # counted as nginx logs it — not as the server's 500.
            status = CLIENT_CLOSED_REQUEST if status is None else status
            path = scope["path"]
            endpoint = path if path in _ENDPOINTS else "/v1/models/{model}" if path.startswith("/v1/models/") else "other"
            self.metrics.observe_response(endpoint, status)


class _TooLarge(Exception):
    """A body past `LimitBodies`' limit, found while reading it."""


class LimitBodies:
    """ASGI middleware answering 413 to a request whose body is over `limit` bytes, before the
    app reads any of it: by its Content-Length or, for a body sent in chunks, as soon as more
    than `limit` bytes have arrived; and 408 to one whose body has not all arrived `timeout`
    seconds after its headers (None: no limit).  Bodies are read whole here, then handed to
    the app: a client that stops sending halfway would otherwise hold one of the replica's
    ongoing requests for as long as its connection lives (Ray Serve's proxy streams the body
    on, and uvicorn has no body timeout), and a few hundred such clients would fill them all.
    The deadline is for the whole body, not between reads as nginx's `client_body_timeout`,
    so that a client sending a byte now and then cannot hold it either."""

    def __init__(self, app, limit: int, timeout: float | None = None):
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await self._refuse(f"{int(length)} bytes", scope, receive, send)
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if not chunked and not (length.isdigit() and int(length) > 0):
            return await self.app(scope, receive, send)  # no body to wait for
        try:
            body = await asyncio.wait_for(self._whole_body(receive), self.timeout)
        except asyncio.TimeoutError:  # (TimeoutError itself from Python 3.11)
            return await self._time_out(scope, receive, send)
        except _TooLarge:
            return await self._refuse(f"more than {self.limit} bytes", scope, receive, send)
        if body is None:  # the client went away
            return
        whole = {"type": "http.request", "body": body, "more_body": False}

        async def replay():
            nonlocal whole
            if whole is None:
                return await receive()  # after the body: the disconnect, when it comes
            message, whole = whole, None
            return message

        return await self.app(scope, replay, send)

    async def _whole_body(self, receive) -> bytes | None:
        """The body's bytes, None if the client left first; `_TooLarge` past the limit."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                raise _TooLarge
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _time_out(self, scope, receive, send) -> None:
        message = (f"the request body did not all arrive within {self.timeout:g} s of its headers "
                   "(limits.body_timeout)")
        status, body = openai_error(408, message, code="request_timeout")
        await JSONResponse(body, status_code=status, headers={"Connection": "close"})(scope, receive, send)

    async def _refuse(self, size: str, scope, receive, send) -> None:
        message = (f"the request body has {size}, more than this service takes ({self.limit} bytes, "
                   "limits.max_request_bytes)")
        status, body = openai_error(413, message, code="request_too_large")
        response = JSONResponse(body, status_code=status, headers={"Connection": "close"})
        await response(scope, receive, send)
