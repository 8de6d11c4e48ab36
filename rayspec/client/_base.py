"""What `Client` and `AsyncClient` share: settings, the channel, and the stubs."""

from __future__ import annotations

import difflib
import numbers
import uuid
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import grpc

from rayspec.client.errors import ClientClosedError, InvalidRequestError, RayspecError
from rayspec.client.retry import Deadline, RetryPolicy
from rayspec.client.types import GenerateRequest, GenerationParams
from rayspec.rpc.checks import BAD_PORT, NO_HOST, host_port_problem
from rayspec.rpc.checks import check_api_key as sendable_api_key
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, health_pb2_grpc

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# gRPC target schemes (dns:///host:port, unix:/path, ipv4:addr,addr, ...): gRPC's to read
GRPC_TARGET_SCHEMES = ("dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds", "google-c2p")
MAX_TIMEOUT = 1e8  # seconds, over three years: gRPC's deadline overflows past about 7e9 s
USER_AGENT = f"rayspec-client/{metadata.version('rayspec')}"
INFO_REQUEST = generation_pb2.GenerationInfoRequest()  # the same every time


class StreamState:
    """What a stream and the generator that reads its call share.  The generator holds this
    and never the stream: a stream its caller drops (a `break` out of its loop) is freed at
    once, closing the generator, whose `finally` cancels the call on the server.  A generator
    holding its stream would make a cycle, left to Python's cycle collector, and the server
    would generate on, up to `max_tokens`."""

    __slots__ = ("call", "cancelled", "completion")

    def __init__(self):
        self.call = None  # the gRPC call in flight
        self.cancelled = False
        self.completion = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.call is not None:
            self.call.cancel()


class BaseClient:
    """Settings (all keyword-only):

    timeout: the default deadline of every call, in seconds (a stream's covers the whole
        stream); each method's `timeout=` overrides it for one call.  Both are positive and at
        most `MAX_TIMEOUT` (1e8 s); infinity is refused, as gRPC cannot carry it.
    retries: how many times an idempotent call is replayed after UNAVAILABLE (an int), or a
        `RetryPolicy` for the backoff too; 0 turns retries off.  See `rayspec.client.retry`.
        The channel redials a lost server at the policy's pace too (its initial and maximum
        backoff), so that a replay reaches a server that is back.
    options: extra gRPC channel arguments, e.g. [("grpc.keepalive_time_ms", 30000)]; they
        override the client's own.
    max_message_bytes: the largest message sent or received.
    credentials: `grpc.ssl_channel_credentials(...)` for TLS; plaintext when None.
    api_key: the server's API key (`ServiceConfig.api_key`), sent with every call as metadata
        `authorization: Bearer <key>`; a server that needs one refuses calls without it
        (`AuthenticationError`).  Over plaintext the key crosses the network in the clear.

    The target is HOST:PORT or [IPv6]:PORT (a port from 1 to 65535), or a gRPC target URI
    (dns:///HOST:PORT, unix:/PATH, ...); ValueError for an empty one or a port out of range, and
    for an api_key that is not printable ASCII without surrounding whitespace.

    Compression is off: requests and token chunks are small, and latency is what counts.
    """

    _grpc: Any = grpc  # the module whose channels this client uses: grpc or grpc.aio

    def __init__(
        self,
        target: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 3,
        options: Sequence[tuple[str, Any]] = (),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        credentials: grpc.ChannelCredentials | None = None,
        api_key: str | None = None,
    ):
        check_target(target)
        check_api_key(api_key)
        self.target = target
        self.timeout = check_timeout(timeout)
        # sent with every call; None: none (a server started without a key takes any call)
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        self.retry = RetryPolicy.coerce(retries)
        channel_args = dict(
            [
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.primary_user_agent", USER_AGENT),
                # gRPC waits 1 s (growing to 120 s) before dialling a lost server again, and fails
                # every call until then at once: the replays, paced by the policy, would all
                # fail on a server that is back, so the channel redials at the policy's pace
                ("grpc.initial_reconnect_backoff_ms", max(1, round(self.retry.initial_backoff * 1000))),
                ("grpc.max_reconnect_backoff_ms", max(1, round(self.retry.max_backoff * 1000))),
            ]
            + list(options)
        )
        args, compression = list(channel_args.items()), grpc.Compression.NoCompression
        if credentials is None:
            self._channel = self._grpc.insecure_channel(target, args, compression)
        else:
            self._channel = self._grpc.secure_channel(target, credentials, args, compression)
        self._generation = generation_pb2_grpc.GenerationStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._features: frozenset[str] | None = None  # the server's `GENERATION_FEATURES`, once asked
        self._closed = False

    def _check_open(self) -> None:
        """ClientClosedError after `close()`: the closed channel's own refusal is a ValueError
        (grpc) or a UsageError (grpc.aio), neither of them the SDK's."""
        if self._closed:
            raise ClientClosedError(f"the client of {self.target} was closed (close(), or the end of its with "
                                    f"block): make a new one")

    def _open_stream(self, message: generation_pb2.GenerateRequest, timeout: float):
        """A stream's gRPC call, opened at its first iteration and again for each replay."""
        self._check_open()
        try:
            return self._generation.GenerateStream(message, timeout=timeout, metadata=self._metadata)
        except ValueError:
            self._check_open()  # closed by another thread since the check above: not grpc's refusal
            raise

    def _learn_features(self, info: generation_pb2.GenerationInfo | None, error: RayspecError | None = None) -> None:
        """Keep the features an `Info` reply lists; a server without `Info` (its call failed
        UNIMPLEMENTED) has none.  Any other failure is raised."""
        if error is not None and error.code != grpc.StatusCode.UNIMPLEMENTED:
            raise error
        self._features = frozenset(() if info is None else info.features)

    def _refuse_unknown_features(self, request: GenerateRequest, known: frozenset[str]) -> None:
        missing = [feature for feature in request.features if feature not in known]
        if missing:
            fields = ", ".join(missing)
            raise InvalidRequestError(f"the server at {self.target} predates {fields}, and would ignore "
                                      f"{'them' if len(missing) > 1 else 'it'}: upgrade the server, or leave "
                                      f"{'them' if len(missing) > 1 else 'the field'} out")

    @staticmethod
    def _request(prompt: str | Sequence[int], params: GenerationParams) -> GenerateRequest:
        """`generate`'s and `stream`'s request, with an id made here when none is given."""
        known = GenerationParams.__annotations__
        for name in params:
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise TypeError(f"unexpected keyword argument {name!r}{hint}; the parameters are GenerateRequest's")
        try:
            # None alone is no id: "" is one, refused as the server and HTTP refuse it, not replaced
            named = params.get("request_id")
            return GenerateRequest(prompt, **{**params, "request_id": new_request_id() if named is None else named})
        except (TypeError, ValueError) as error:  # a value of the wrong type or shape, as to_proto refuses them
            raise InvalidRequestError(f"this request cannot be sent: {error}") from None

    def _timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else check_timeout(timeout)

    def _deadline(self, timeout: float | None) -> Deadline:
        """The one deadline of a call, from now: its `Info` question (when it asks one), its
        attempts and the pauses between them all spend it."""
        return Deadline(self._timeout(timeout))

    def __repr__(self) -> str:
        name, retries = type(self).__name__, self.retry.max_retries
        return f"{name}({self.target!r}, timeout={self.timeout}, retries={retries})"


def check_timeout(timeout: float) -> float:
    """`timeout` in seconds as a float, or ValueError: gRPC reads a deadline past about 7e9 s
    (infinity too) as one that overflowed, and a NaN or negative one as passed, and would fail
    the call DEADLINE_EXCEEDED at once, a healthy server's health check too."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be above 0 and at most {MAX_TIMEOUT:g} seconds (every call has a "
                         f"deadline), got {timeout}")
    return float(timeout)


def check_target(target: str) -> None:
    """ValueError for an address no server has, found here rather than as a call's failure:
    gRPC dials a port past 65535 modulo 65536 (somewhere else), and reads an empty target as a
    malformed URI that every call fails UNKNOWN, as if the server had a bug.  A target with a
    scheme, or without a port (gRPC's default, 443), is left to gRPC.  The HOST:PORT rule is
    the coordinator's for its workers' addresses too (`rayspec.rpc.checks.host_port_problem`)."""
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"target must be the server's address, HOST:PORT or [IPv6]:PORT, got {target!r}")
    if target.split(":", 1)[0] in GRPC_TARGET_SCHEMES:
        return
    problem = host_port_problem(target)
    if problem == NO_HOST:
        raise ValueError(f"target {target!r} names no host: give HOST:PORT or [IPv6]:PORT")
    if problem == BAD_PORT:
        port = target.rpartition(":")[2]
        raise ValueError(f"target {target!r}: a port is a whole number from 1 to 65535, got {port!r}")


def check_api_key(api_key: str | None) -> None:
    """ValueError for a key no client can send (`rayspec.rpc.checks.check_api_key`, the rule
    the server's key obeys too): gRPC metadata carries printable ASCII only, and would fail
    every call INTERNAL, as if the server had a bug; and no server's key has surrounding
    whitespace (HTTP strips it from a header).  None and "" send no key."""
    if api_key is None:
        return
    if not isinstance(api_key, str):
        raise TypeError(f"api_key must be a string, got {type(api_key).__name__}")
    if api_key:
        sendable_api_key(api_key)  # its message names the bad character, never the key: a secret in a log


def new_request_id() -> str:
    """Ids are made on the client, so that every retry of a request carries the same one."""
    return uuid.uuid4().hex
