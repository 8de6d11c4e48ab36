"""The client-facing `rayspec.v1.Generation` service: the engine behind gRPC.

The coordinator owns no model: its engine drives remote (or in-process) drafter and target
handles.  `Generate` returns the whole completion; `GenerateStream` yields each verification
step's text (and its tokens' log-probabilities, when asked; the first step's also carries the
prompt's) as soon as it is verified, then a last message with the totals.  Its
`grpc.health.v1` service answers SERVING only while the target worker does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import closing, contextmanager

from rayspec.client.types import GENERATION_FEATURES, GenerateRequest, stop_reason_fields
from rayspec.engine import SpeculativeEngine
from rayspec.engine.interfaces import ShutdownSignal, ShuttingDown, TokenLogprobs
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.engine.slots import QueueFull, SlotQueue
from rayspec.engine.structured import StructuredOutput
from rayspec.models.cancellation import GenerationCancelled, watching_caller
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, health_pb2_grpc
from rayspec.rpc.server import CountCalls, HealthServicer, RequireKey, Servicer, rpc_errors, start_server


class GenerationServicer(Servicer, generation_pb2_grpc.GenerationServicer):
    def __init__(self, engine: SpeculativeEngine, tokenizer, limits: Limits | None = None,
                 max_concurrent_requests: int | None = None, max_queued_requests: int = 0,
                 shutting_down: ShutdownSignal | None = None, queue_setting: str = "limits.max_queued_requests",
                 slots: SlotQueue | None = None, observed: Callable | None = None, **server_limits):
        """max_concurrent_requests: generations running at once (None: no cap but the
        server's), beyond which a request waits for a slot, first come, first served, up to
        `max_queued_requests` waiting; past those it is refused with RESOURCE_EXHAUSTED.
        shutting_down: set when the service stops (`rayspec.serve.service.Service.shut_down`):
        a generation in flight ends after its current step (at once, from a wait for a lost
        worker), calls waiting in line and new ones are refused, all with UNAVAILABLE, rather
        than be cut by the server's stop without a status.  queue_setting:
        how the operator sets `max_queued_requests`, named when a full line refuses a call.
        slots: a line shared with another API over the same engine (the HTTP service's), in
        place of one of this servicer's own; the limits above are then its.  observed: wraps a
        request's steps as `observed(request, stopped=...)`, `stopped()` asked before each step
        (`rayspec.serve.service.observed_steps`: the HTTP service's metrics); None: the
        engine's steps as they are."""
        super().__init__(**server_limits)
        self.engine, self.tokenizer, self.limits = engine, tokenizer, limits or Limits()
        if slots is None and max_concurrent_requests is not None:
            slots = SlotQueue(max_concurrent_requests, max_queued_requests, QueueFull, queue_setting)
        self._slots = slots
        self._observed = observed
        self._running: set[GenerationRequest] = set()  # what `_shut_down` cancels
        self._running_lock = threading.Lock()
        self.shutting_down = shutting_down or ShutdownSignal()
        self.shutting_down.on_set(self._shut_down)

    def _shut_down(self) -> None:
        """Refuse the calls waiting in line now, and end the waits of those running for a lost
        worker (their steps end each with `_check_running`)."""
        if self._slots is not None:
            self._slots.close(ShuttingDown)
        with self._running_lock:
            running = list(self._running)
        for request in running:
            request.cancel()

    @contextmanager
    def _generation(self, context, request: GenerationRequest):
        """Run `request` in one of the `max_concurrent_requests` slots, waited for in the
        call's own thread; a call that ends while it waits (cancelled, past its deadline)
        leaves the line and runs nothing, and one whose wait ends as the service shuts down is
        refused.  The server's own cap counts every call, health checks too: it is set above
        the running and the waiting ones, so that health checks still answer while every slot
        is taken and the line is full.  A generation the shutdown cancels ends `ShuttingDown`."""
        with self._running_lock:
            self._running.add(request)
        try:
            with self._slot(context):
                yield
        except GenerationCancelled:
            if self.shutting_down.is_set():
                raise ShuttingDown() from None
            raise
        finally:
            with self._running_lock:
                self._running.discard(request)

    @contextmanager
    def _slot(self, context):
        self._check_running()
        if self._slots is not None:
            woken = threading.Event()
            if not context.add_callback(woken.set):  # over already
                woken.set()
            if not self._slots.take_in_thread(1, woken):
                raise GenerationCancelled("the call ended while it waited for a slot")
            if self.shutting_down.is_set():  # it waited through the generations' ends
                self._slots.release()
                raise ShuttingDown()
        try:
            yield
        finally:
            if self._slots is not None:
                self._slots.release()

    def _check_running(self) -> None:
        if self.shutting_down.is_set():
            raise ShuttingDown()

    def _request(self, message, context) -> GenerationRequest:
        """The message, read as the SDK writes it (`GenerateRequest`), as a checked request.  Its
        structured output is compiled while the RPC is watched (`watching_caller`): a caller past
        its deadline, or cancelled, stops the compilation, seconds of one of the few compiler
        processes, rather than leave it to compile for nobody (GenerationCancelled)."""
        self._check_running()
        fields = dict(vars(GenerateRequest.from_proto(message)))
        prompt = fields.pop("prompt")
        fields["verifier_params"] = fields["verifier_params"] or None  # none given: the engine's own
        if fields["structured_output"] is not None:
            fields["structured_output"] = StructuredOutput(**fields["structured_output"])
        # A message without token ids is a text prompt, the empty one too: proto3 cannot tell "" from no text, and
        # HTTP's `prompt: ""` is tokenized as well (a BOS alone, for Llama-style tokenizers; else no token, refused)
        text, ids = (prompt, None) if isinstance(prompt, str) else (None, list(prompt))
        with watching_caller(lambda: not context.is_active()):
            return GenerationRequest(self.engine, self.tokenizer, self.limits, prompt=text, prompt_ids=ids, **fields)

    def _complete(self, request: GenerationRequest, text: str, logprobs: TokenLogprobs | None = None,
                  prompt_logprobs: TokenLogprobs | None = None) -> generation_pb2.GenerateResponse:
        return generation_pb2.GenerateResponse(
            text=text, token_ids=request.token_ids, finish_reason=request.finish_reason,
            usage=generation_pb2.Usage(**request.usage()), seed=request.seed, request_id=request.request_id,
            logprobs=_token_logprobs(request.token_ids, logprobs),
            prompt_logprobs=_token_logprobs(request.prompt_ids[1:], prompt_logprobs),
            **stop_reason_fields(request.stop_reason),
        )

    def _steps(self, request: GenerationRequest, context):
        """The request's steps, until their end or the call's (cancelled, past its deadline)."""
        stopped = lambda: not context.is_active()  # noqa: E731
        if self._observed is not None:
            return self._observed(request, stopped=stopped)
        return _until(request.run(), stopped)

    def Info(self, message, context):
        return generation_pb2.GenerationInfo(features=GENERATION_FEATURES)

    @rpc_errors
    def Generate(self, message, context):
        request = self._request(message, context)
        _cancel_when_over(context, request)  # the RPC ended (cancelled, past its deadline): stop waiting
        with self._generation(context, request), closing(self._steps(request, context)) as steps:
            for _ in steps:
                self._check_running()
        if not context.is_active():  # cancelled, or past its deadline: stopped, the sessions released
            return generation_pb2.GenerateResponse()
        return self._complete(request, request.text, request.logprobs, request.prompt_logprobs)

    @rpc_errors
    def GenerateStream(self, message, context):
        request = self._request(message, context)
        _cancel_when_over(context, request)
        with self._generation(context, request), closing(self._steps(request, context)) as steps:
            for added in steps:
                self._check_running()
                yield generation_pb2.GenerateStreamResponse(
                    chunk=generation_pb2.Chunk(
                        text=added.text, token_ids=added.token_ids, accepted=added.step.accepted_in_completion,
                        logprobs=_token_logprobs(added.token_ids, added.logprobs),
                        prompt_logprobs=_token_logprobs(request.prompt_ids[1:], added.prompt_logprobs)),
                )
        yield generation_pb2.GenerateStreamResponse(complete=self._complete(request, ""))


def _until(steps, stopped: Callable[[], bool]):
    with closing(steps):
        while not stopped():
            try:
                step = next(steps)
            except StopIteration:
                return
            yield step


def _cancel_when_over(context, request: GenerationRequest) -> None:
    """`request.cancel` once the RPC ends, or now if it already has: a deadline may pass while
    `_request` tokenizes a long prompt, and gRPC then refuses the callback (False) rather than
    run it, so the request would prefill and take its first step for nobody."""
    if not context.add_callback(request.cancel):
        request.cancel()


def _token_logprobs(token_ids: list[int], logprobs: TokenLogprobs | None) -> list[generation_pb2.TokenLogprob]:
    if logprobs is None:
        return []
    ranks = logprobs.ranks or [0] * len(logprobs)  # 0: unknown
    return [generation_pb2.TokenLogprob(token_id=token, logprob=value, top_ids=ids, top_logprobs=values, rank=rank)
            for token, value, ids, values, rank in zip(token_ids, logprobs.chosen, logprobs.top_ids,
                                                       logprobs.top_values, ranks)]


HEALTH_CHECK_THREADS = 4  # the server's threads beyond its generations': health checks, Info


def serve_generation(engine: SpeculativeEngine, tokenizer, address: str, limits: Limits | None = None,
                     max_concurrent_requests: int = 64, api_key: str | None = None,
                     serving: Callable[[], bool] | None = None, max_queued_requests: int = 256,
                     shutting_down: ShutdownSignal | None = None,
                     queue_setting: str = "limits.max_queued_requests", slots: SlotQueue | None = None,
                     observed: Callable | None = None, answered: Callable[[str, str], None] | None = None):
    """Generation on `address`; requests beyond `max_concurrent_requests` running at once wait
    for a slot, first come, first served, as the HTTP service's (`LimitsConfig`), and past
    `max_queued_requests` waiting are refused with RESOURCE_EXHAUSTED.  Each holds a server
    thread while it waits or generates: the server has that many, and health checks their own
    beyond them; a call finding no thread free waits for one (the line answers those past it at
    once), so that no health check is refused in a storm of calls.  With an `api_key`, calls
    without it (metadata `authorization: Bearer <key>`, as the SDK's `api_key` sends it) are
    refused UNAUTHENTICATED, the health service's excepted.  `serving`: asked at each health
    check, whether the engine's workers let it serve (None: always, as an engine over
    in-process models).  `shutting_down`, `queue_setting`: as `GenerationServicer`'s; once
    `shutting_down` is set, health checks answer NOT_SERVING too.  `slots`, `observed`: as
    `GenerationServicer`'s (`rayspec.serve.service.Service.serve_generation_api`: the HTTP
    service's line and metrics); the line's limits then replace the two above.  `answered`:
    told how each Generation call ended, refused ones included (`CountCalls`)."""
    servicer = GenerationServicer(engine, tokenizer, limits, max_concurrent_requests, max_queued_requests,
                                  shutting_down, queue_setting, slots=slots, observed=observed)

    def serves() -> bool:
        return not shutting_down.is_set() and (serving is None or serving())

    health = HealthServicer(["rayspec.v1.Generation"], serving if shutting_down is None else serves)

    def register(server):
        generation_pb2_grpc.add_GenerationServicer_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)

    interceptors = [RequireKey(api_key, open_services=("grpc.health.v1.Health",))] if api_key else []
    if answered is not None:
        interceptors.insert(0, CountCalls(answered, "rayspec.v1.Generation"))
    if slots is not None:
        max_concurrent_requests, max_queued_requests = slots.size, slots.max_waiting
    threads = max_concurrent_requests + max_queued_requests + HEALTH_CHECK_THREADS + HealthServicer.MAX_WATCHES
    return start_server(register, address, max_workers=threads, interceptors=interceptors, refuse_past_threads=False)


def serve_generation_from_workers(address: str, target, drafter, verifier: str = "rrsw",
                                  tree: str = "kary:2x3", verify_at: str = "target", tokenizer=None,
                                  api_key: str | None = None, draft_timeout: float | None = None,
                                  draft_hedge: float | None = None, acceptance_dir=None,
                                  max_concurrent_requests: int = 64, max_queued_requests: int = 256):
    """The coordinator of plain-process workers: Generation on `address` over their handles.
    `target`: a target worker's host:port, or a target in this process (`LocalTarget`) — the
    coordinator then sits with the target, and a step makes one call, to the drafter, whose
    reply is all that crosses.  `drafter`: a drafter worker's host:port, a drafter in this
    process (`LocalDrafter`), or None for target-only decoding.  `tokenizer`: a loaded one, or
    its path or hub id (None: the demo pair's).  `api_key`: as `serve_generation`.
    `draft_timeout`: a drafter worker's deadline per draft after a sequence's first (None:
    `RemoteDrafter`'s default).  `draft_hedge`: the engine's (None: waits for every draft).
    `acceptance_dir`: the pair's measured acceptance vectors, which Sequoia trees are planned
    on (None: the demo pair's when its tokenizer is the demo's, as in-process — a seed's
    tokens with sequoia trees depend on them — else the default prior).
    `max_concurrent_requests`, `max_queued_requests`: as `serve_generation`'s (a full line's
    refusal names the worker's flag, `--max-queued-requests`)."""
    from pathlib import Path

    from rayspec.demo import DEMO_DIR, TARGET_PATH
    from rayspec.models.loading import load_tokenizer
    from rayspec.rpc.remote import RemoteDrafter, RemoteTarget, targets_answer

    if isinstance(target, str):
        target = RemoteTarget(target, verify_at=verify_at)
    if isinstance(drafter, str):
        drafter = RemoteDrafter(drafter, target.vocab_size,
                                **({} if draft_timeout is None else {"draft_timeout": draft_timeout}))
    if tokenizer is None or isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(tokenizer or TARGET_PATH)
    if acceptance_dir is None and Path(tokenizer.name_or_path).resolve() == TARGET_PATH.resolve():
        acceptance_dir = DEMO_DIR / "acceptance"
    engine = SpeculativeEngine(target, drafter, verifier=verifier, tree=tree, tokenizer=tokenizer,
                               draft_hedge=draft_hedge, acceptance_dir=acceptance_dir)

    def target_serves() -> bool:
        return targets_answer({f"target {target.address}": target.channel})

    return serve_generation(engine, tokenizer, address, api_key=api_key,
                            max_concurrent_requests=max_concurrent_requests, max_queued_requests=max_queued_requests,
                            queue_setting="--max-queued-requests",
                            serving=target_serves if isinstance(target, RemoteTarget) else None)
