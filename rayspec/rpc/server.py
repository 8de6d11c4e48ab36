"""What every rayspec gRPC server shares: options, error mapping, sessions, health.

Errors: bad input (a `ValueError`, codec errors included) is INVALID_ARGUMENT with its
message; an unknown session NOT_FOUND; too many sessions, a Generation call past a full
line of calls waiting for a slot, or a shared resource at capacity (`AtCapacity`),
RESOURCE_EXHAUSTED; the service shutting down (`ShuttingDown`) UNAVAILABLE; a call whose
caller left (`GenerationCancelled`) CANCELLED; a worker of a coordinator that failed
(`RemoteError`) UNAVAILABLE, or RESOURCE_EXHAUSTED when the worker was full, or INTERNAL
when it failed on the call itself (`RemoteError.worker_fault`); anything else INTERNAL with
the exception's message — the server keeps serving in every case.

Sizes: the transport accepts messages up to `TRANSPORT_LIMIT`; requests above the service's
own `max_request_bytes` are refused with INVALID_ARGUMENT and a message saying so, rather
than left to the transport's generic RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import functools
import hmac
import inspect
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent import futures

import grpc

from rayspec.engine.interfaces import AtCapacity, GenerationCancelled, SessionClosedError, ShuttingDown
from rayspec.engine.slots import QueueFull
from rayspec.models.cancellation import watching_caller
from rayspec.models.threads import honour_torch_threads
from rayspec.rpc.generated import health_pb2, health_pb2_grpc, worker_pb2

log = logging.getLogger("rayspec.rpc")

TRANSPORT_LIMIT = 1024 * 1024 * 1024  # 1 GiB: above every application limit
DEFAULT_MAX_REQUEST_BYTES = 256 * 1024 * 1024
KEEPALIVE_MS = 30_000  # an idle connection is pinged this often, so a dead peer is noticed
MAX_RECONNECT_BACKOFF_MS = 2_000  # a channel tries its lost peer again at least this often


def grpc_options(keepalive_ms: int = KEEPALIVE_MS) -> list[tuple[str, int]]:
    """The channel arguments of rayspec's servers and of the channels to them.

    Both ends ping an idle connection every `keepalive_ms`, calls or none, and a server
    accepts pings twice that often.  It must: a gRPC server's default is one ping per five
    minutes without data, and after two pings more frequent than that it closes the
    connection with GOAWAY "too_many_pings", failing a session stream that waited on a slow
    client.  A channel whose worker went away tries to reconnect at least every 2 s, however
    long the worker was gone: gRPC backs its tries off to 120 s by default, and a call on a
    channel between tries fails at once, so a target worker back after a long restart would
    keep its waiting sequences (`SequenceSpec.resumed`) paused for up to that long more.
    Compression stays off (the default): probability rows compress poorly and cost CPU time.
    A server does not share its port (gRPC's default sets SO_REUSEPORT): a second worker
    started on a port in use, or a restarted one whose old port another process took, fails
    to bind rather than split the calls — and the sessions — with the other."""
    return [
        ("grpc.max_send_message_length", TRANSPORT_LIMIT),
        ("grpc.max_receive_message_length", TRANSPORT_LIMIT),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", keepalive_ms // 2),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
        ("grpc.so_reuseport", 0),
    ]


GRPC_OPTIONS = grpc_options()


class SessionLimitError(RuntimeError):
    pass


class RemoteError(RuntimeError):
    """A worker failed or could not be reached; `code` is the status its call ended with."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE):
        super().__init__(message)
        self.code = code

    @property
    def worker_full(self) -> bool:
        """The worker refused for want of room (a session or call limit), not for a failure."""
        return self.code == grpc.StatusCode.RESOURCE_EXHAUSTED

    @property
    def worker_fault(self) -> bool:
        """The worker failed on the call itself (an error in it, not a worker gone or full): the
        same call would fail again, so it is no outage to retry."""
        return self.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


class UnknownSessionError(KeyError):
    pass


def status_of(error: Exception, where: str) -> tuple[grpc.StatusCode, str]:
    """The gRPC status a servicer's exception stands for, with its message."""
    if isinstance(error, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error)
    if isinstance(error, UnknownSessionError):
        return grpc.StatusCode.NOT_FOUND, str(error.args[0])
    if isinstance(error, SessionClosedError):
        return grpc.StatusCode.NOT_FOUND, str(error)
    if isinstance(error, (SessionLimitError, AtCapacity, QueueFull)):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)
    if isinstance(error, ShuttingDown):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    if isinstance(error, GenerationCancelled):  # its caller left: nobody reads this status
        log.info("%s: %s", where, error)
        return grpc.StatusCode.CANCELLED, str(error)
    if isinstance(error, RemoteError):  # a coordinator's worker: this service is unavailable, full, or at fault
        log.warning("%s: a worker call failed: %s", where, error)
        code = (grpc.StatusCode.RESOURCE_EXHAUSTED if error.worker_full else
                grpc.StatusCode.INTERNAL if error.worker_fault else grpc.StatusCode.UNAVAILABLE)
        return code, f"a model worker failed: {error}"
    log.error("internal error in %s", where, exc_info=error)
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


def rpc_errors(method):
    """Map exceptions raised by a servicer method to gRPC status codes with messages."""

    def abort(context, error):
        if not context.is_active():
            # Cancelled, past its deadline, or the server stopping (its process exiting under a
            # request's calibration): nobody reads the status, and it is no internal error.
            log.info("%s ended after its call did: %s: %s", method.__name__, type(error).__name__, error)
            context.abort(grpc.StatusCode.CANCELLED, "the call ended before its answer")
        context.abort(*status_of(error, method.__name__))

    @functools.wraps(method)
    def unary(self, request, context):
        try:
            self.check_size(request)
            return method(self, request, context)
        except Exception as error:  # noqa: BLE001 — every failure becomes a status
            abort(context, error)

    @functools.wraps(method)
    def streaming(self, request, context):
        try:
            self.check_size(request)
            yield from method(self, request, context)
        except Exception as error:  # noqa: BLE001
            abort(context, error)

    return streaming if inspect.isgeneratorfunction(method) else unary


class _Opening:
    """The place of a session whose Open is still running, one of its own per Open: a session id
    released while it opens may be opened again meanwhile, and the first Open, ending, must
    neither take the second's place nor drop it."""


class Servicer:
    """Base of rayspec servicers: request size limit, sessions with idle expiry.

    A session untouched for `idle_seconds` is closed (its KV cache freed) by a sweeper thread
    that looks every quarter of that time (at most 30 s apart), so that the sessions of a
    coordinator that died without releasing them go even when no other request ever comes."""

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_sessions: int = 256,
                 idle_seconds: float = 600.0):
        if not idle_seconds > 0:
            raise ValueError(f"idle_seconds must be positive, got {idle_seconds}")
        self.max_request_bytes = max_request_bytes
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._sessions: dict[str, tuple[object, float]] = {}
        self._sessions_lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    def serve_steps(self, calls, context, result_type, handlers: dict):
        """A `Steps` stream: each call message dispatched to the unary handler its `call` field
        names (`handlers`: field -> method decorated with `rpc_errors`, run here without it,
        given the reply inside the result message to fill), answered in order by a
        `result_type` holding the reply or, when the call failed, a `CallError` with the
        status the unary call would have ended with.  A failed call leaves the stream open."""
        for call in calls:
            kind = call.WhichOneof("call")
            try:
                if kind is None:
                    raise ValueError("an empty call: set one of " + ", ".join(handlers))
                request = getattr(call, kind)
                self.check_size(request)
                result = result_type()
                reply = getattr(result, kind)
                reply.SetInParent()
                inspect.unwrap(handlers[kind])(self, request, context, reply)
                yield result
            except Exception as error:  # noqa: BLE001 — every failure becomes a CallError
                code, message = status_of(error, f"Steps.{kind}")
                yield result_type(error=worker_pb2.CallError(code=code.value[0], message=message))

    def check_size(self, request) -> None:
        size = request.ByteSize()
        if size > self.max_request_bytes:
            raise ValueError(f"request of {size} bytes exceeds this server's limit of {self.max_request_bytes} bytes")

    def open_session(self, session_id: str, make, context=None):
        """Open `session_id` with `make()` (which may prefill a prompt) and return the session:
        its place is taken first, so that an Open refused for a duplicate id or a full server
        costs no compute.  An Open whose caller is gone (`context`: past its deadline, or
        cancelled, before or while the session was made) keeps no session: the caller cannot
        know of it, and its Release may have come before the Open did; and `make` is watching
        that caller (`rayspec.models.cancellation`), so its prefill stops where it can."""
        if not session_id:
            raise ValueError("a session id is required")
        self.expire_idle_sessions()
        with self._sessions_lock:
            if session_id in self._sessions:
                raise ValueError(f"session {session_id!r} is already open")
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimitError(f"{len(self._sessions)} sessions open, the limit is {self.max_sessions}")
            place = _Opening()
            self._sessions[session_id] = (place, time.monotonic())
            if self._sweeper is None:
                every = min(self.idle_seconds / 4, 30.0)
                self._sweeper = threading.Thread(target=_sweep_idle_sessions, args=(weakref.ref(self), every),
                                                 name="rayspec-session-sweeper", daemon=True)
                self._sweeper.start()
        try:
            if context is not None and not context.is_active():
                raise GenerationCancelled(f"the caller of Open {session_id!r} left before it began")
            with watching_caller(None if context is None else lambda: not context.is_active()):
                session = make()
        except BaseException:
            with self._sessions_lock:
                if self._sessions.get(session_id, (None,))[0] is place:
                    del self._sessions[session_id]
            raise
        with self._sessions_lock:
            if self._sessions.get(session_id, (None,))[0] is place:  # not released while it opened
                if context is None or context.is_active():
                    self._sessions[session_id] = (session, time.monotonic())
                    return session
                del self._sessions[session_id]
        session.close()
        return session

    def open_sessions(self) -> int:
        """How many sessions this server holds now, those still opening included."""
        with self._sessions_lock:
            return len(self._sessions)

    def session(self, session_id: str):
        with self._sessions_lock:
            if isinstance(self._sessions.get(session_id, (None,))[0], (type(None), _Opening)):
                raise UnknownSessionError(f"no open session {session_id!r} (released, expired, still opening "
                                          "or never opened)")
            session, _ = self._sessions[session_id]
            self._sessions[session_id] = (session, time.monotonic())
            return session

    @rpc_errors
    def Release(self, request, context):
        """The `Release` RPC of the worker services: drop a session (unknown ids too)."""
        self.release(request.session_id)
        return worker_pb2.ReleaseReply()

    def release(self, session_id: str) -> None:
        with self._sessions_lock:
            entry = self._sessions.pop(session_id, None)
        if entry is not None and not isinstance(entry[0], _Opening):
            entry[0].close()

    def expire_idle_sessions(self) -> None:
        """Close the sessions idle for longer than `idle_seconds` (outside the sessions' lock:
        closing waits for the model's step in flight)."""
        now = time.monotonic()
        with self._sessions_lock:
            idle = [s for s, (session, used) in self._sessions.items()
                    if not isinstance(session, _Opening) and now - used > self.idle_seconds]
            expired = [self._sessions.pop(session_id)[0] for session_id in idle]
        for session_id, session in zip(idle, expired):
            try:  # a session that fails to close must not fail the Open or the sweep that found it
                session.close()
            except Exception:  # noqa: BLE001
                log.exception("session %s expired after %.0f s idle; closing it failed", session_id, self.idle_seconds)
            else:
                log.info("session %s expired after %.0f s idle", session_id, self.idle_seconds)


def _sweep_idle_sessions(servicer_ref, every: float) -> None:
    """Expire a servicer's idle sessions every `every` seconds until the servicer is gone: the
    thread holds no reference to it between sweeps."""
    while True:
        time.sleep(every)
        servicer = servicer_ref()
        if servicer is None:
            return
        servicer.expire_idle_sessions()
        del servicer


class HealthServicer(health_pb2_grpc.HealthServicer):
    """grpc.health.v1: SERVING for the server ("") and the services it hosts — while
    `serving()`, when given, holds: a coordinator asks whether its target workers answer, so
    that a probe or a load balancer sees NOT_SERVING while its requests would fail."""

    # How long a check waits for `serving()` asked on its behalf (counted from when that ask
    # began); past it, the last answer stands.  `serving()` may wait seconds on a hung worker:
    # a probe (often 1-s timeouts) must not time out for it, nor may checks each hold one of
    # the server's few spare threads meanwhile (its generations are then refused).
    SERVING_WAIT = 0.5
    # A watch looks again this often (asking `serving()` each time, one ask for all watches).
    WATCH_PERIOD = 1.0
    MAX_WATCHES = 4

    def __init__(self, services: list[str], serving: Callable[[], bool] | None = None):
        self.statuses = {name: health_pb2.HealthCheckResponse.SERVING for name in ["", *services]}
        self.serving = serving
        self._serves = False  # `serving()`'s last answer (none yet: not known to serve)
        self._asking: tuple[threading.Event, float] | None = None  # the ask in flight: (answered, wait until)
        self._asking_lock = threading.Lock()
        self._watches = threading.BoundedSemaphore(self.MAX_WATCHES)

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in self.statuses:
            self.statuses[name] = status

    def Check(self, request, context):
        if request.service not in self.statuses:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=self._status(request.service))

    def Watch(self, request, context):
        """grpc.health.v1's watch: the status at once, then each change of it, until the caller
        leaves; an unknown service is SERVICE_UNKNOWN and the call stays open (as the protocol
        says).  A watch holds a server thread for its life, so at most `MAX_WATCHES` run at once
        (their threads are added to the server's); more are RESOURCE_EXHAUSTED."""
        if not self._watches.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"at most {self.MAX_WATCHES} health watches at once; use Check, or watch later")
        try:
            left = threading.Event()
            context.add_callback(left.set)
            sent = None
            while context.is_active():
                status = self._status(request.service) if request.service in self.statuses \
                    else health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
                if status != sent:
                    yield health_pb2.HealthCheckResponse(status=status)
                    sent = status
                left.wait(self.WATCH_PERIOD)
        finally:
            self._watches.release()

    def _status(self, service: str):
        status = self.statuses[service]
        if status == health_pb2.HealthCheckResponse.SERVING and self.serving is not None and not self._serving_now():
            return health_pb2.HealthCheckResponse.NOT_SERVING
        return status

    def _serving_now(self) -> bool:
        """`serving()`, asked by one thread at a time: a check joins the ask in flight (or
        starts one) and waits for it until `SERVING_WAIT` after it began, then takes the last
        answer."""
        with self._asking_lock:
            if self._asking is None:
                self._asking = (threading.Event(), time.monotonic() + self.SERVING_WAIT)
                threading.Thread(target=self._ask, args=(self._asking[0],), name="rayspec-health-ask",
                                 daemon=True).start()
            answered, until = self._asking
        answered.wait(max(0.0, until - time.monotonic()))
        return self._serves

    def _ask(self, answered: threading.Event) -> None:
        try:
            serves = bool(self.serving())
        except Exception:  # noqa: BLE001 — a check that fails says nothing serves
            log.warning("the health check's serving() failed", exc_info=True)
            serves = False
        with self._asking_lock:
            self._serves, self._asking = serves, None
        answered.set()


def _handler_like(handler, behaviour, request_deserializer):
    """A method handler of `handler`'s shape (how many messages come in and go out) running
    `behaviour`."""
    make = {(False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler}
    return make[handler.request_streaming, handler.response_streaming](
        behaviour, request_deserializer=request_deserializer, response_serializer=handler.response_serializer)


class RefuseUndecodable(grpc.ServerInterceptor):
    """A request that is not a valid message of its type is INVALID_ARGUMENT, saying so,
    rather than gRPC's INTERNAL "Exception deserializing request!": the bytes are the
    caller's fault, not the server's.  Every rayspec server has it (`start_server`); each
    method's wrapped handler is built once, not on every call of a worker's hot path."""

    def __init__(self):
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:  # a race builds it twice, alike: harmless
            wrapped = self._wrap(continuation(handler_call_details), method)
            # Only the server's own methods are kept: a method name is the caller's to choose, and
            # one kept per unknown name (UNIMPLEMENTED, each up to the header limit) would grow the
            # process with every name a caller makes up, before any API key is checked.
            if wrapped is not None:
                self._wrapped[method] = wrapped
        return wrapped

    @staticmethod
    def _wrap(handler, method: str):
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer
        kind = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
        name = kind.full_name if kind is not None else method

        def decoded(raw: bytes, context):
            try:
                return parse(raw)
            except Exception as error:  # noqa: BLE001 — protobuf's DecodeError, or worse bytes
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {name} message: {error}")

        if handler.request_streaming:
            inner = handler.stream_stream or handler.stream_unary

            def behaviour(raws, context):
                return inner((decoded(raw, context) for raw in raws), context)
        else:
            inner = handler.unary_stream or handler.unary_unary

            def behaviour(raw, context):
                return inner(decoded(raw, context), context)

        return _handler_like(handler, behaviour, request_deserializer=None)


class CountCalls(grpc.ServerInterceptor):
    """Tells `answered(method, code)` how each call to `service` (a full name, such as
    "rayspec.v1.Generation") ended: the method's short name and the status code's name (OK,
    INVALID_ARGUMENT, CANCELLED when its caller left, DEADLINE_EXCEEDED past its deadline).
    First among a server's interceptors, it counts the calls the others refuse too (an API
    key missing, a message that does not decode)."""

    def __init__(self, answered: Callable[[str, str], None], service: str):
        self.answered, self.prefix = answered, f"/{service}/"

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self.prefix):
            return handler
        name, answered = method[len(self.prefix):], self.answered
        inner = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream

        if handler.response_streaming:
            def behaviour(request, context):
                failed = True
                try:
                    yield from inner(request, context)
                    failed = False
                finally:
                    answered(name, _status_name(context, failed))
        else:
            def behaviour(request, context):
                failed = True
                try:
                    answer = inner(request, context)
                    failed = False
                    return answer
                finally:
                    answered(name, _status_name(context, failed))

        return _handler_like(handler, behaviour, handler.request_deserializer)


def _status_name(context, failed: bool) -> str:
    """The status a call ends with, as its handler leaves it."""
    code = context.code()
    if code is None:
        if not context.is_active():  # its caller went, or its deadline passed, before the answer
            remaining = context.time_remaining()
            code = (grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= 0
                    else grpc.StatusCode.CANCELLED)
        else:  # gRPC answers an exception no handler turned into a status UNKNOWN
            code = grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK
    return code.name


def key_refusal(given: bytes, expected: bytes, how: str) -> str | None:
    """Why a call with credentials `given` (b"Bearer <key>", or b"" for none) is refused, or
    None when they are `expected`: compared in constant time.  `how` tells a caller without a
    key where to send it.  The HTTP app's check and the gRPC servers' share it."""
    if hmac.compare_digest(given, expected):
        return None
    return f"a valid API key is needed: send {how}" if not given else "the API key given is not this service's"


class RequireKey(grpc.ServerInterceptor):
    """Refuses, UNAUTHENTICATED, a call without metadata `authorization: Bearer <key>` to any
    service but `open_services` (full names, such as "grpc.health.v1.Health")."""

    def __init__(self, key: str, open_services: Sequence[str] = ()):
        self.expected = f"Bearer {key}".encode()
        self.open = tuple(f"/{name}/" for name in open_services)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(self.open):
            return handler
        given = dict(handler_call_details.invocation_metadata).get("authorization", "")
        message = key_refusal(given.encode(), self.expected, "metadata authorization: Bearer <key> (the SDK's api_key)")
        if message is None:
            return handler

        def refuse(request_or_iterator, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        return _handler_like(handler, refuse, handler.request_deserializer)


def check_port(port: str | int, where: str | None = None) -> int:
    """`port` as a number, or ValueError (saying `where`, if given): gRPC takes a port past
    65535, or a negative one, modulo 65536 and would serve somewhere else than asked."""
    text = str(port)
    if isinstance(port, bool) or not (text.isascii() and text.isdigit()) or int(text) > 65535:  # not "١٢"
        message = f"a port is a whole number from 0 to 65535 (0: any free one), got {port!r}"
        raise ValueError(f"{where}: {message}" if where else message)
    return int(text)


def host_port(host: str, port: int | str) -> str:
    """The address of `port` on `host`, an IPv6 literal bracketed ("[::1]:9000"): gRPC reads
    a bare "::1:9000" as another address, and a URL needs the brackets too."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def check_port_free(host: str, port: int, server: str = "a gRPC server") -> None:
    """`start_server`'s OSError for a port another server listens on, found before a worker
    loads its model (minutes, for a real checkpoint) rather than after.  The probe reuses
    addresses as gRPC and uvicorn do, so a port left in TIME_WAIT by a stopped server is free."""
    bare = host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bare, port))
        except OSError as error:
            raise _cannot_bind(host_port(host, port), f" ({error.strerror})", server) from None


def _cannot_bind(address: str, detail: str = "", server: str = "a gRPC server") -> OSError:
    return OSError(f"cannot bind {server} to {address}: the port is in use, or the address is not this "
                   f"machine's{detail}")


def start_server(register, address: str, max_workers: int = 16, options=GRPC_OPTIONS,
                 interceptors: Sequence[grpc.ServerInterceptor] = (), refuse_past_threads: bool = True,
                 ) -> tuple[grpc.Server, int]:
    """A started gRPC server; `register(server)` adds the servicers.  Returns (server, port).

    A call holds one of the `max_workers` threads while it runs — a `Steps` stream for its
    session's life — and calls beyond that many are refused with RESOURCE_EXHAUSTED rather
    than queued behind streams that may never end.  A server whose long calls are bounded
    otherwise (`refuse_past_threads=False`: the Generation API, whose line refuses calls past
    it at once) queues the calls beyond its threads instead, each for the moment a thread
    takes to answer a call before it: grpc's own refusal counts every call, and in a storm of
    refused generations it refused health checks too.  Its threads compute with the process's
    torch thread count (`rayspec.models.threads`)."""
    check_port(address.rpartition(":")[2], f"cannot serve gRPC at {address!r}")
    pool = futures.ThreadPoolExecutor(max_workers=max_workers, initializer=honour_torch_threads)
    server = grpc.server(pool, options=options, maximum_concurrent_rpcs=max_workers if refuse_past_threads else None,
                         interceptors=[*interceptors, RefuseUndecodable()])
    register(server)
    try:
        port = server.add_insecure_port(address)  # 0, or RuntimeError in newer gRPC, when it cannot bind
    except RuntimeError:
        port = 0
    if port == 0:
        raise _cannot_bind(address)
    server.start()
    return server, port
