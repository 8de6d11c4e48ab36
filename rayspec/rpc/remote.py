"""gRPC handles to remote workers, implementing the engine's `Target` and `Drafter`.

The engine runs unchanged over these: `SpeculativeEngine(RemoteTarget(addr), RemoteDrafter(addr))`
is the distributed coordinator.  Per step, two calls cross the network: Draft (the planned
shape and the previous outcome out; the tree and the internal nodes' q rows back) and Verify
(the tree and the q rows, forwarded as they arrived, out; the outcome back).  By default a
session sends them as messages on one bidirectional `Steps` stream per worker, opened at its
first step, rather than as unary calls: the same messages, without setting up an HTTP/2
stream per call.

Where the verifier runs (`verify_at`):
  "target"       (default) in the target worker: it holds the target's rows, so only the
                 drafter's q rows of internal nodes travel — fewer than the tree's nodes —
                 and for greedy and the couplings nothing but token ids;
  "coordinator"  here: the target returns what the verifier needs (every node's p row, or
                 every node's own sample for token-only verifiers) and then commits the
                 path the coordinator chose.  More bytes for q-reading verifiers; the same
                 tokens, because the verifier's randomness stream is the same.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
import weakref

import grpc
import torch

from rayspec.engine.interfaces import (
    Draft, DrafterBusy, DrafterUnavailable, GenerationCancelled, Outcome, SequenceSpec, TargetUnavailable,
    stream_generator,
)
from rayspec.models.cancellation import caller_watch
from rayspec.coupling import KeyedNoise
from rayspec.rpc import codec
from rayspec.rpc.generated import health_pb2, worker_pb2, worker_pb2_grpc
from rayspec.rpc.server import GRPC_OPTIONS, RemoteError
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import TreeShape
from rayspec.verify import get_verifier

DEFAULT_TIMEOUT = 60.0
# A drafter's step drafts a tree over a committed prefix: milliseconds on a GPU, well under a
# second on a CPU or across a WAN, though it may also wait behind other sequences' prompt
# prefills on a shared drafter.  Past this, the drafter is taken as hung (`RemoteDrafter`),
# which costs the sequence its drafts, never its law.
DRAFT_TIMEOUT = 10.0


def check_draft_timeout(seconds, name: str = "draft_timeout") -> None:
    """A clear error for a draft timeout that is not a positive number of seconds, naming the setting `name`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")


_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def failure(code: grpc.StatusCode | int, details: str) -> Exception:
    """What a failed call raises: INVALID_ARGUMENT a ValueError (the caller's input was bad),
    every other status a RemoteError naming it."""
    code = _STATUS_CODES.get(code, grpc.StatusCode.UNKNOWN) if isinstance(code, int) else code
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ValueError(details)
    return RemoteError(f"{code.name}: {details}", code)


def worker_info(stub, address: str, role: str, timeout: float):
    """A worker's `Info`, a failure naming the worker: UNIMPLEMENTED means another kind of
    server (a drafter given as the target, a coordinator) listens there."""
    try:
        return call(stub.Info, worker_pb2.InfoRequest(), timeout)
    except RemoteError as error:
        hint = (f" (is it a {role} worker? it serves no rayspec {role} service)"
                if error.code == grpc.StatusCode.UNIMPLEMENTED else "")
        raise RemoteError(f"the {role} worker at {address}{hint}: {error}", error.code) from None


def call(method, request, timeout: float):
    """One unary RPC with a deadline, failing as `failure` says."""
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as error:
        raise failure(error.code(), error.details()) from None


# How often a call that its caller may leave (`call_while_wanted`) looks whether it has.
CALLER_POLL_SECONDS = 0.05


def call_while_wanted(method, request, timeout: float, when: str = "while its prompt was prefilled"):
    """`call`, cancelled (`GenerationCancelled`: its caller left `when`) once its caller left
    (`caller_left`, polled every `CALLER_POLL_SECONDS`): a target's Open waits for the prompt's
    prefill, queued behind the others', which a client that left no longer wants.  An answer
    that came first is returned all the same; the engine then closes what it opened."""
    left = caller_watch()
    if left is None:
        return call(method, request, timeout)
    future = method.future(request, timeout=timeout)
    answered = threading.Event()
    future.add_done_callback(lambda _: answered.set())
    while not answered.wait(CALLER_POLL_SECONDS):
        if left() and future.cancel():
            raise GenerationCancelled(f"its caller left {when}")
    try:
        return future.result()
    except grpc.RpcError as error:
        raise failure(error.code(), error.details()) from None


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=GRPC_OPTIONS)


_STEPS = {  # call message -> (the Steps method's path, its result message)
    worker_pb2.TargetCall: ("/rayspec.v1.TargetService/Steps", worker_pb2.TargetResult),
    worker_pb2.DrafterCall: ("/rayspec.v1.DrafterService/Steps", worker_pb2.DrafterResult),
}


class CallStream:
    """A session's per-step calls on one `Steps` bidirectional stream, opened at the first call.

    `send(call)` sends a call message (a `TargetCall` or `DrafterCall` holding one request)
    and waits for its result, failing as a unary call does (`failure`: INVALID_ARGUMENT a
    ValueError, any other status a RemoteError), and so does a broken stream (the next call
    opens a new one — the session lives in the worker, not in the stream).  A call
    unanswered after `timeout` seconds is cancelled by a shared watchdog thread: the per-call
    deadline of unary calls, which a stream that lives as long as its session cannot carry
    itself.  So is one whose caller left (`caller_watch`: the engine's client gave up), within
    the watchdog's period, raising `GenerationCancelled`: a hung worker, or a first draft's
    prefill, does not hold a departed client's slot until the deadline.  `sent` and
    `received`: the bytes of the last call's two messages, counted as they are serialised and
    parsed (asking a message its size would serialise it again)."""

    _END = None

    def __init__(self, channel: grpc.Channel, call_type, timeout: float, what: str):
        path, self.result_type = _STEPS[call_type]
        self.method = channel.stream_stream(path, request_serializer=self._serialize,
                                            response_deserializer=self._parse)
        self.timeout, self.what = timeout, what
        self.call_timeout = timeout  # the deadline of the call under way
        self.waiting_since: float | None = None
        self.caller_left = None  # the call under way's `caller_watch`
        self.sent = self.received = 0
        self._requests: queue.SimpleQueue | None = None
        self._results = None
        self._expired = False
        self._abandoned = False  # the call under way was cancelled for its caller, who left
        self._lock = threading.Lock()  # the watchdog's check-and-cancel against a call's start and end

    def _serialize(self, message) -> bytes:
        data = message.SerializeToString()
        self.sent = len(data)
        return data

    def _parse(self, data: bytes):
        self.received = len(data)
        return self.result_type.FromString(data)

    def send(self, message, timeout: float | None = None):
        """Send a call message, return the reply it gets (the result's `kind` field).
        timeout: this call's deadline, in place of the stream's `timeout`."""
        kind = message.WhichOneof("call")
        if self._results is None:
            self._requests = queue.SimpleQueue()
            self._results = self.method(iter(self._requests.get, self._END))
            _watchdog.watch(self)
        with self._lock:
            self._expired = self._abandoned = False
            self.call_timeout = self.timeout if timeout is None else timeout
            self.caller_left = caller_watch()
            self.waiting_since = time.monotonic()
        self._requests.put(message)
        try:
            result = next(self._results)
        except (grpc.RpcError, StopIteration) as error:
            expired = self._end_wait()
            self._close_stream()
            if self._abandoned:
                raise GenerationCancelled(f"its caller left while it waited for {self.what}") from None
            if expired:
                raise RemoteError(f"DEADLINE_EXCEEDED: {self.what} did not answer within {self.call_timeout:g} s",
                                  grpc.StatusCode.DEADLINE_EXCEEDED) from None
            if isinstance(error, StopIteration):
                raise RemoteError(f"UNAVAILABLE: {self.what} ended the session stream") from None
            raise failure(error.code(), error.details()) from None
        if self._end_wait() or self._abandoned:
            # The deadline or the caller's leaving struck as the reply came in: the reply
            # stands, the cancelled stream goes.
            self._close_stream()
        which = result.WhichOneof("result")
        if which == "error":
            raise failure(result.error.code, result.error.message)
        if which != kind:
            raise RemoteError(f"{self.what} answered a {kind} call with {which!r}")
        return getattr(result, which)

    def _end_wait(self) -> bool:
        """The call is over: no deadline applies any more.  Whether it expired."""
        with self._lock:
            self.waiting_since = None
            return self._expired

    def expire(self, since: float, abandoned: bool = False) -> None:
        """Cancel the call waiting since `since` (what the watchdog read), if it still waits:
        not one that has had its reply, nor a later one.  abandoned: for its caller, who left,
        rather than past its deadline."""
        with self._lock:
            # answered (None), a later call, or cancelled already (its thread not yet awake)
            if self.waiting_since != since or self._expired or self._abandoned:
                return
            self._expired, self._abandoned = not abandoned, abandoned
            results = self._results
            if results is not None:
                results.cancel()

    def _close_stream(self) -> None:
        if self._results is not None:
            self._requests.put(self._END)
            self._results.cancel()
            self._results = None

    def close(self) -> None:
        _watchdog.forget(self)
        self._close_stream()


class _Watchdog:
    """One daemon thread cancelling the stream calls that outlived their deadline or their
    caller."""

    PERIOD = 0.25

    def __init__(self):
        self._streams: weakref.WeakSet[CallStream] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, stream: CallStream) -> None:
        with self._lock:
            self._streams.add(stream)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rayspec-call-deadlines", daemon=True)
                self._thread.start()

    def forget(self, stream: CallStream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def _run(self) -> None:
        while True:
            time.sleep(self.PERIOD)
            now = time.monotonic()
            with self._lock:
                streams = list(self._streams)
            for stream in streams:
                since, left = stream.waiting_since, stream.caller_left
                if since is None:
                    continue
                if now - since > stream.call_timeout:
                    stream.expire(since)
                elif left is not None and left():
                    stream.expire(since, abandoned=True)


_watchdog = _Watchdog()


class _WorkerHandle:
    """A gRPC worker's channel and stub, which may move to another address."""

    _stub_type = None

    def _connect(self, address: str) -> None:
        self.address, self.channel = address, _channel(address)
        self.stub = self._stub_type(self.channel)

    def move_to(self, address: str) -> None:
        """Dial the worker at `address` from now on: it was restarted there (a Ray actor whose
        node was lost, `rayspec.cluster.actors.WorkerWatch`).  Sessions opened at the old
        address are lost with the old worker's process: they fail on the old channel as calls to
        a dead worker do (closing it would fail them as if they were bad requests), and it goes
        with the last of them."""
        self._connect(address)

    def close(self) -> None:
        self.channel.close()

    def info_future(self, timeout: float) -> grpc.Future:
        """The worker's `Info` call, started: its `result()` is the `WorkerInfo` now (its
        sessions, its prefix cache), or raises the call's `grpc.RpcError`.  Started at once,
        so that asking several workers takes as long as the slowest, not as all of them."""
        return self.stub.Info.future(worker_pb2.InfoRequest(), timeout=timeout)

    def _open(self, request: worker_pb2.OpenRequest, timeout: float) -> worker_pb2.OpenReply:
        """The Open call, given up when its caller leaves (`call_while_wanted`).  One that ended
        not knowing whether the worker opened the session (given up; past its deadline the
        worker still finishes the prefill; a connection cut mid-call) has the session released,
        or each such Open would hold a session, KV cache and all, until the worker's idle
        expiry: and a client retries them."""
        try:
            return call_while_wanted(self.stub.Open, request, timeout)
        except GenerationCancelled:
            release_unwatched(self.stub, request.session_id)
            raise
        except RemoteError as error:
            if error.code in UNSETTLED_CODES:
                release_unwatched(self.stub, request.session_id)
            raise


# The codes of a call that may or may not have reached the worker and done its work.
UNSETTLED_CODES = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                             grpc.StatusCode.UNAVAILABLE})


class RemoteTarget(_WorkerHandle):
    """A target worker at `address` (host:port)."""

    _stub_type = worker_pb2_grpc.TargetServiceStub

    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT, verify_at: str = "target",
                 streams: bool = True):
        """streams: each session's steps on one `Steps` stream (default) rather than unary calls."""
        if verify_at not in ("target", "coordinator"):
            raise ValueError(f"verify_at must be 'target' or 'coordinator', got {verify_at!r}")
        self.timeout, self.verify_at, self.streams = timeout, verify_at, streams
        self._connect(address)
        info = worker_info(self.stub, address, "target", timeout)
        self.model_id = info.model_id
        self.features = frozenset(info.features)
        self.vocab_size = int(info.vocab_size)
        self.context_length = int(info.context_length)
        self.eos_token_ids = tuple(info.eos_token_ids)
        self.tokenizer_fingerprint = info.tokenizer_fingerprint or None  # none: loaded without one, or older

    @property
    def verifies_predictions(self) -> bool:
        """Whether a tree may carry a predicted chain: verified here, or by a worker that knows it."""
        return self.verify_at == "coordinator" or "predicted_chain" in self.features

    def open(self, spec: SequenceSpec) -> "RemoteTargetSession":
        codec.check_worker_features(spec, self.features, f"target worker at {self.address}")
        session_id = uuid.uuid4().hex
        request = worker_pb2.OpenRequest(session_id=session_id, spec=codec.encode_spec(spec))
        reply = target_guarded(lambda: self._open(request, self.timeout))
        session = RemoteTargetSession(self, session_id, spec)
        session.cached_tokens = reply.cached_tokens
        if spec.prompt_logprobs is not None and reply.HasField("prompt_logprobs"):
            try:
                session.prompt_logprobs = codec.decode_logprobs(reply.prompt_logprobs, len(spec.prompt_ids) - 1,
                                                                self.vocab_size)
            except BaseException:
                session.close()
                raise
        return session


class _RemoteSession:
    """What both kinds of remote session share: per-step calls on the session's `Steps` stream
    (or as unary calls), and the release of the worker's session."""

    def __init__(self, channel, stub, call_type, timeout: float, what: str, streams: bool, session_id: str):
        self.stub, self.call_type, self.timeout, self.session_id = stub, call_type, timeout, session_id
        self.what = what
        self.steps = CallStream(channel, call_type, timeout, what) if streams else None
        self.lost = False  # its worker stopped answering: closing asks nothing of it

    def _new(self, kind: str):
        """A call message and its `kind` request, to be filled in place: building the request
        apart and then setting it in a call message would copy its rows once more."""
        message = self.call_type()
        request = getattr(message, kind)
        request.SetInParent()
        request.session_id = self.session_id
        return message, request

    def _step(self, message, timeout: float | None = None):
        """Send a call message (see `_new`): its reply and the bytes both ways.  timeout: its
        deadline (None: the session's)."""
        timeout = self.timeout if timeout is None else timeout
        try:
            if self.steps is not None:
                reply = self.steps.send(message, timeout)
                return reply, self.steps.sent + self.steps.received
            kind = message.WhichOneof("call")
            request = getattr(message, kind)
            reply = call_while_wanted(getattr(self.stub, kind.capitalize()), request, timeout,
                                      f"while it waited for {self.what}")
        except GenerationCancelled:
            self.lost = True  # its worker may be hung: the session's release must not wait for it
            raise
        return reply, request.ByteSize() + reply.ByteSize()

    @contextlib.contextmanager
    def _faulting_the_service(self, kind: str):
        """A step's bad input (INVALID_ARGUMENT at the worker, a reply that does not decode
        here) as the service's fault, INTERNAL: after the Open, steps carry only what the
        workers and this coordinator made (trees, rows, outcomes), so it is not the request's,
        and its client must not be told so (a 400)."""
        try:
            yield
        except ValueError as error:
            raise RemoteError(f"INTERNAL: a {kind} step with {self.what} failed on what the service's own "
                              f"processes sent, not on the request: {error}", grpc.StatusCode.INTERNAL) from None

    def close(self) -> None:
        if self.steps is not None:
            self.steps.close()
        if self.lost:
            # Lost may be only late (a missed deadline, a broken stream): its session would hold
            # the worker's KV cache and a session slot until the idle expiry.  Waiting for a
            # worker that is gone or hung would stall the sequence's end, so the Release goes
            # unwatched.
            release_unwatched(self.stub, self.session_id)
            return
        # Waited for (up to `RELEASE_TIMEOUT`) only while the generation's caller is there
        # (`caller_watch`): one that left while a worker hangs — a generation cancelled with
        # its drafter and target both stopped, or between two calls — is let go at once, its
        # Release going on unwatched.
        answered = threading.Event()
        release_unwatched(self.stub, self.session_id).add_done_callback(lambda _: answered.set())
        left = caller_watch()
        until = time.monotonic() + RELEASE_TIMEOUT
        while not answered.wait(CALLER_POLL_SECONDS) and time.monotonic() < until:
            if left is not None and left():
                return


RELEASE_TIMEOUT = 5.0
# An unwatched Release waits longer: it is sent to a worker that may be hung (stopped, stalled,
# cut off) and nobody waits for it, so a deadline past the worker's hang costs nothing, while
# one that expires first leaves the session, KV cache and all, until the worker's idle expiry.
UNWATCHED_RELEASE_TIMEOUT = DEFAULT_TIMEOUT
_unwatched_releases: set = set()  # their calls, kept from garbage collection (which cancels a call)
_unwatched_lock = threading.Lock()


def release_unwatched(stub, session_id: str) -> grpc.Future:
    """Ask a worker to release `session_id` without waiting for its answer (the call's future,
    which `_RemoteSession.close` waits on while its caller is there): after a call that failed
    in a way that leaves the session's fate unknown (an Open or a step past its deadline, a
    broken stream), to a worker that may be gone, hung or merely slow.  Releasing an id the
    worker does not know, or one still opening, is harmless (`Servicer.release`).  One that
    fails UNAVAILABLE is sent again, waiting for the channel to connect, until its deadline: a
    worker hung past the channel's keepalive has its connection dropped, and with it the
    Releases queued for it, which its waking would otherwise never see."""
    request = worker_pb2.ReleaseRequest(session_id=session_id)
    return _send_release(stub, request, time.monotonic() + UNWATCHED_RELEASE_TIMEOUT, wait_for_ready=False)


def _send_release(stub, request: worker_pb2.ReleaseRequest, until: float, wait_for_ready: bool) -> grpc.Future:
    future = stub.Release.future(request, timeout=max(until - time.monotonic(), 0.0), wait_for_ready=wait_for_ready)
    with _unwatched_lock:
        _unwatched_releases.add(future)
    future.add_done_callback(lambda done: _released(done, stub, request, until))
    return future


def _released(future, stub, request: worker_pb2.ReleaseRequest, until: float) -> None:
    with _unwatched_lock:
        _unwatched_releases.discard(future)
    if future.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < until:
        with contextlib.suppress(ValueError):  # the channel closed meanwhile (its coordinator stopping)
            _send_release(stub, request, until, wait_for_ready=True)


class RemoteTargetSession(_RemoteSession):
    def __init__(self, target: RemoteTarget, session_id: str, spec: SequenceSpec):
        super().__init__(target.channel, target.stub, worker_pb2.TargetCall, target.timeout,
                         f"target {target.address}", target.streams, session_id)
        self.target = target
        self.prompt_logprobs = None  # set by `RemoteTarget.open` from the Open reply, when asked for
        self.cached_tokens = 0  # likewise: the prompt's rows the worker took from its prefix cache
        if target.verify_at == "coordinator":
            self.verifier = get_verifier(spec.verifier, **spec.verifier_params)
            self.generator = stream_generator(spec.seed, "verify", spec)  # the target side's stream
            self.seed, self.length = spec.seed, len(spec.prompt_ids) + len(spec.completion_ids)

    def verify(self, draft: Draft) -> Outcome:
        try:
            return target_guarded(lambda: self._verify(draft))
        except TargetLost:
            self.lost = True
            raise

    def _verify(self, draft: Draft) -> Outcome:
        if self.target.verify_at == "coordinator":
            with self._faulting_the_service("score"):
                return self._verify_here(draft)
        with self._faulting_the_service("verify"):
            return self._verify_there(draft)

    def _verify_there(self, draft: Draft) -> Outcome:
        message, request = self._new("verify")
        request.tree.CopyFrom(codec.encode_tree(draft.tree))
        request.draft_seconds = draft.seconds
        if isinstance(draft, ReceivedDraft) and draft.q_message is not None:
            request.q_rows.CopyFrom(draft.q_message)  # forwarded as the drafter sent them
        elif draft.q_rows is not None:
            codec.encode_rows(draft.q_rows, request.q_rows, draft.q_divisors)
        reply, wire_bytes = self._step(message)
        outcome = codec.decode_outcome(reply.outcome, self.target.vocab_size, draft.tree)
        outcome.wire_bytes = wire_bytes
        return outcome

    def _verify_here(self, draft: Draft) -> Outcome:
        message, request = self._new("score")
        request.tree.CopyFrom(codec.encode_tree(draft.tree))
        reply, score_bytes = self._step(message)
        size = draft.tree.shape.size
        if self.verifier.token_only:  # each node's own sample as a point mass: the walk emits exactly those
            node_tokens = codec.decode_node_tokens(reply.node_tokens, size, self.target.vocab_size)
            p_rows = torch.nn.functional.one_hot(node_tokens, self.target.vocab_size).float()
        else:
            p_rows = codec.decode_rows(reply.p_rows, size, self.target.vocab_size, "p rows")
        randomness = KeyedNoise(self.seed, self.length) if self.verifier.drafter_invariant else self.generator
        started = time.perf_counter()
        verdict = self.verifier.verify_tree(draft.tree, p_rows, draft.q_rows, randomness)
        outcome = Outcome(verdict.tokens, verdict.path, verdict.ranks, score_seconds=reply.seconds,
                          verify_seconds=time.perf_counter() - started, batch_size=reply.batch_size)
        message, commit = self._new("commit")
        commit.outcome.CopyFrom(codec.encode_outcome(outcome))
        committed, commit_bytes = self._step(message)
        if committed.HasField("logprobs"):
            outcome.logprobs = codec.decode_logprobs(committed.logprobs, len(verdict.tokens), self.target.vocab_size)
        self.length += len(verdict.tokens)
        outcome.wire_bytes = score_bytes + commit_bytes
        return outcome


class TargetLost(RemoteError, TargetUnavailable):
    """A target worker's call that failed for want of the worker: it is gone (UNAVAILABLE), or
    restarted and without the session (NOT_FOUND).  The engine resumes the sequence on it once
    it answers again."""


HEALTH_TIMEOUT = 2.0


BUSY = "BUSY"  # a worker whose every thread for calls was busy: it serves, loaded


def _health_check(channel: grpc.Channel):
    """grpc.health.v1's Check on `channel`, as a method the channel does not register: grpcio
    1.85 crashes the process (SIGSEGV) registering one on a closed channel, as a generated
    stub made then does, where this one raises ValueError when called."""
    return channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                               response_deserializer=health_pb2.HealthCheckResponse.FromString)


def worker_statuses(channels: dict[str, grpc.Channel], timeout: float = HEALTH_TIMEOUT) -> dict[str, str]:
    """Each worker's grpc.health.v1 status name, BUSY for one that refused the check for want
    of a free thread (RESOURCE_EXHAUSTED: gRPC's answer past a server's concurrent calls, at
    a load peak), or UNREACHABLE with the reason (blocking).  `channels`: "target
    host:port" / "drafter host:port" -> the channel dialling it.  The workers are asked all at
    once: hung ones hold the answer `timeout`, not that per worker."""
    def ask(channel: grpc.Channel):
        try:
            return _health_check(channel).future(health_pb2.HealthCheckRequest(), timeout=timeout)
        except ValueError as error:  # a channel closed meanwhile (the service closing): nothing to ask
            return error

    asked = {name: ask(channel) for name, channel in channels.items()}
    statuses = {}
    for name, call in asked.items():
        if isinstance(call, ValueError):
            statuses[name] = f"UNREACHABLE: {call}"
            continue
        try:
            statuses[name] = health_pb2.HealthCheckResponse.ServingStatus.Name(call.result().status)
        except grpc.RpcError as error:
            statuses[name] = BUSY if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else \
                f"UNREACHABLE: {error.code().name}"
    return statuses


def overall_status(statuses: dict[str, str]) -> str:
    """"ok" when every worker of `worker_statuses` serves (BUSY ones too: a load peak must not
    turn a load balancer away from the service, nor a drafter's sequences from their drafts);
    "degraded" when only drafters do not (their sequences decode without drafts); else
    "unavailable"."""
    down = [name for name, status in statuses.items() if status not in ("SERVING", BUSY)]
    if not down:
        return "ok"
    return "degraded" if all(name.startswith("drafter ") for name in down) else "unavailable"


def targets_answer(channels: dict[str, grpc.Channel], timeout: float = HEALTH_TIMEOUT) -> bool:
    """Whether every target worker among `channels` (named as for `worker_statuses`) answers
    SERVING (blocking): what a coordinator needs to serve at all, a drafter's absence being
    decoded around."""
    targets = {name: channel for name, channel in channels.items() if name.startswith("target ")}
    return overall_status(worker_statuses(targets, timeout)) == "ok"


LOST_TARGET_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND})


def target_guarded(send):
    """`send()`, a call to a target worker, its failures for want of the worker as `TargetLost`."""
    try:
        return send()
    except RemoteError as error:
        if error.code in LOST_TARGET_CODES:
            raise TargetLost(str(error), error.code) from None
        raise


class DrafterLost(RemoteError, DrafterUnavailable):
    """A drafter worker's call that failed for want of the worker (see `RemoteDrafter`): the
    engine decodes on without drafts."""


class DrafterFull(RemoteError, DrafterBusy):
    """A drafter worker that refused a session for want of room (RESOURCE_EXHAUSTED)."""


# A call that ends so has lost its drafter; UNAVAILABLE and DEADLINE_EXCEEDED (the worker gone
# or hung) also keep the next sequences from trying it for a while.  NOT_FOUND: the session is
# gone from a worker that restarted.  RESOURCE_EXHAUSTED (full) is the service's answer to
# give, and INVALID_ARGUMENT or INTERNAL are errors to show, not to decode around.
LOST_DRAFTER_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                grpc.StatusCode.NOT_FOUND, grpc.StatusCode.CANCELLED})
DOWN_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class RemoteDrafter(_WorkerHandle):
    """A drafter worker at `address` (host:port).

    A drafter that stops answering (`LOST_DRAFTER_CODES`) fails its calls with `DrafterLost`,
    and its sequences decode on target-only.  After it was unreachable or hung (`DOWN_CODES`),
    sessions are not even tried for `retry_after` seconds — doubling at each failure up to
    `max_retry_after`, back to the start at the first draft it answers — so that new requests
    do not each wait for a connection or a deadline first; until then (on probation) an open
    and the first draft of a session it opens have the draft deadline.  A hung model still
    answers Open from the server's threads: taking the drafter back at an open gave each
    session's first draft the call's minute after every rest, and the rests never grew."""

    _stub_type = worker_pb2_grpc.DrafterServiceStub

    def __init__(self, address: str, vocab_size: int, timeout: float = DEFAULT_TIMEOUT, streams: bool = True,
                 retry_after: float = 1.0, max_retry_after: float = 30.0, draft_timeout: float = DRAFT_TIMEOUT):
        """vocab_size: the target's (a drafter serves a target's sequences): a worker whose model
        has another (padded embeddings, `check_vocabularies`) must fit its laws to it (list
        "padded_vocabulary"); `vocab_size` is then the worker's, as a local drafter's is its
        model's, and the engine checks the pair.  The context length is the drafter model's
        own, which the worker tells.  streams: each session's drafts on
        one `Steps` stream (default) rather than unary calls.  draft_timeout: the deadline of
        a session's drafts after its first (which prefills the prompt, and has `timeout`): a
        drafter that hangs loses its sequences that soon, not a minute later."""
        check_draft_timeout(draft_timeout)
        self.timeout, self.streams = timeout, streams
        self.draft_timeout = draft_timeout
        self.retry_after, self.max_retry_after = retry_after, max_retry_after
        self._down_until = 0.0
        self._down_for = 0.0  # the last wait: 0 while the drafter answers
        self._down_lock = threading.Lock()
        self.losses = 0  # calls that lost the drafter
        self._connect(address)
        info = worker_info(self.stub, address, "drafter", timeout)
        self.vocab_size = int(info.vocab_size)
        if self.vocab_size != int(vocab_size) and "padded_vocabulary" not in info.features:
            self.close()
            raise ValueError(f"drafter worker at {address}: its vocab_size ({self.vocab_size}) differs from the "
                             f"target's ({vocab_size}), and it predates fitting its laws to a target's: upgrade it")
        self.model_id = info.model_id
        self.context_length = int(info.context_length)
        self.tokenizer_fingerprint = info.tokenizer_fingerprint or None  # none: loaded without one, or older

    def open(self, spec: SequenceSpec) -> "RemoteDrafterSession":
        wait = self._down_until - time.monotonic()
        if wait > 0:
            raise DrafterLost(f"UNAVAILABLE: drafter {self.address} did not answer lately; next try in {wait:.1f} s",
                              grpc.StatusCode.UNAVAILABLE)
        session_id = uuid.uuid4().hex
        request = worker_pb2.OpenRequest(session_id=session_id, spec=codec.encode_spec(spec))
        # A drafter that was lately down or hung is probed: the draft deadline, not a minute's
        # stall of a sequence that tries to take it back (`rayspec.engine.drafting.Comeback`).
        probation = self._down_for > 0
        timeout = min(self.timeout, self.draft_timeout) if probation else self.timeout
        self.guarded(lambda: self._open(request, timeout))
        return RemoteDrafterSession(self, session_id, spec.vocab_size or self.vocab_size, probation)

    def answered(self) -> None:
        """A draft came back: the drafter is taken back, its next rest the first again."""
        if self._down_for:
            with self._down_lock:
                self._down_for = 0.0

    def guarded(self, send):
        """`send()`, a call to the worker, its failures for want of the worker as `DrafterLost`,
        for want of room as `DrafterFull`."""
        try:
            return send()
        except RemoteError as error:
            if error.worker_full:
                raise DrafterFull(str(error), error.code) from None
            if error.code not in LOST_DRAFTER_CODES:
                raise
            with self._down_lock:
                self.losses += 1
                now = time.monotonic()
                # The sequences that were drafting when it went all fail now: one outage, one wait.
                if error.code in DOWN_CODES and now >= self._down_until:
                    self._down_for = min(max(2 * self._down_for, self.retry_after), self.max_retry_after)
                    self._down_until = now + self._down_for
            message = str(error) if self.address in str(error) else f"{error} (drafter {self.address})"
            raise DrafterLost(message, error.code) from None

    def move_to(self, address: str) -> None:
        """As `_WorkerHandle.move_to`; the worker answers there, so no wait holds sessions back."""
        super().move_to(address)
        with self._down_lock:
            self._down_until, self._down_for = 0.0, 0.0


class RemoteDrafterSession(_RemoteSession):
    def __init__(self, drafter: RemoteDrafter, session_id: str, vocab_size: int, probation: bool = False):
        super().__init__(drafter.channel, drafter.stub, worker_pb2.DrafterCall, drafter.timeout,
                         f"drafter {drafter.address}", drafter.streams, session_id)
        self.drafter = drafter
        self.vocab_size = vocab_size  # its laws' width (`SequenceSpec.vocab_size`)
        # The first draft prefills the prompt: it has the longer deadline, but on a drafter on
        # probation (lately down or hung: `RemoteDrafter`), which must answer in time.
        self.drafted = probation

    def draft(self, shape: TreeShape | DynamicPlan, previous: Outcome | None) -> Draft:
        message, request = self._new("draft")
        codec.encode_plan(request, shape)
        if previous is not None:
            request.previous.CopyFrom(codec.encode_outcome(previous))
        timeout = self.drafter.draft_timeout if self.drafted else None
        try:
            with self._faulting_the_service("draft"):
                reply, wire_bytes = self.drafter.guarded(lambda: self._step(message, timeout))
                received = ReceivedDraft(reply, self.vocab_size, wire_bytes)
        except DrafterLost:
            self.lost = True
            raise
        self.drafted = True
        self.drafter.answered()
        return received


class ReceivedDraft(Draft):
    """A draft as a drafter worker sent it.  Its q rows stay encoded until something in this
    process reads `q_rows` (a verifier at the coordinator decodes and checks them then); a
    remote target is sent `q_message` as it arrived and checks it itself.  Decoding and
    re-encoding them here would copy megabytes per step for nothing."""

    def __init__(self, reply: worker_pb2.DraftReply, vocab_size: int, wire_bytes: int):
        self.tree = codec.decode_tree(reply.tree, vocab_size)
        self.seconds, self.wire_bytes, self.batch_size = reply.seconds, wire_bytes, reply.batch_size
        self.q_message = reply.q_rows if reply.HasField("q_rows") else None
        self._vocab_size = vocab_size
        self._q_rows = None

    @property
    def q_divisors(self) -> torch.Tensor | None:
        """The rows' divisors when they came in half precision (checked by `q_rows`)."""
        if self.q_rows is None or not self.q_message.HasField("divisors"):
            return None
        return codec.decode_tensor(self.q_message.divisors, {"float32"}, "q rows divisors")

    @property
    def q_rows(self) -> torch.Tensor | None:
        if self._q_rows is None and self.q_message is not None:
            internal = len(self.tree.shape.internal_nodes)
            self._q_rows = codec.decode_rows(self.q_message, internal, self._vocab_size, "q rows")
        return self._q_rows
