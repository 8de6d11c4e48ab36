"""The coordinator behind the HTTP app: one engine, its tokenizer, limits, metrics and health.

    service = Service.from_config(config, "10.0.0.2:50051", ["10.0.0.3:50052"])
    app = rayspec.serve.http.create_app(service)

The engine is synchronous and the HTTP app asynchronous.  `Service.start` runs one request's
engine generator in a thread of its own (`StepStream`) and hands its steps to the event loop
as they are verified, so concurrent requests proceed side by side, and a client that goes
away stops its generation after the current step.  A request that finds all of the service's
`limits.max_concurrent_requests` slots taken waits for them in a queue (`rayspec.engine.slots`), as
vLLM's and SGLang's schedulers keep the requests they cannot run yet waiting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

import grpc

from rayspec.engine.engine import SpeculativeEngine
from rayspec.engine.interfaces import AtCapacity, RequestFieldError, ShutdownSignal, ShuttingDown
from rayspec.engine.local import LocalDrafter, LocalTarget
from rayspec.engine.pool import DrafterPool
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.engine.slots import QueueFull, SlotQueue
from rayspec.engine.structured import (
    StructuredOutput, check_structured, compiled_index, structured_regex, vocabulary_of,
)
from rayspec.models.threads import honour_torch_threads
from rayspec.rpc.remote import HEALTH_TIMEOUT, RemoteError, overall_status, targets_answer, worker_statuses
from rayspec.serve.config import LimitsConfig, ServiceConfig
from rayspec.serve.metrics import WORKER_BUSY, Metrics
from rayspec.serve.tool_parsers import pick_parser

log = logging.getLogger(__name__)

# How long a scrape of /metrics waits for each worker's state (`Service.worker_infos`).
WORKER_INFO_TIMEOUT = 1.0

# For tokenizers without a chat template of their own: one "role: content" paragraph per
# message, then "assistant:" to open the reply; tools, and calls made, in the json tool-call
# parser's syntax.
FALLBACK_CHAT_TEMPLATE = (
    "{% if tools %}tools: {{ tools | tojson }}\n"
    "To call tools, answer with nothing but a JSON list of calls: [{\"name\": ..., \"arguments\": {...}}]\n\n"
    "{% endif %}"
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}"
    "{% if message['tool_calls'] %}{{ message['tool_calls'] | map(attribute='function') | list | tojson }}{% endif %}"
    "{{ '\\n\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
# apply_chat_template's own parameters (HF), which template variables must not shadow.
_RENDERER_OPTIONS = {
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "sanitize_control_tokens", "padding", "truncation", "max_length",
    "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
}


class ChatRenderError(RequestFieldError):
    """A conversation, or the way it is asked to be rendered, that the chat template cannot
    render; `field` names the request field at fault."""


class Overloaded(QueueFull):
    """As many generations are running as the service allows, and as many requests wait for
    them as its queue holds."""


class Service:
    """What the HTTP front end serves: `engine` over in-process or remote models.

    `workers` names the gRPC channels of remote workers, checked by `health()`; an engine over
    in-process models has none and is always healthy."""

    def __init__(self, engine: SpeculativeEngine, tokenizer, model_id: str, limits: LimitsConfig | None = None,
                 metrics: Metrics | None = None, workers: Mapping[str, grpc.Channel] | None = None,
                 api_key: str | None = None, tool_call_parser: str = "auto"):
        """api_key: the key clients must send (`ServiceConfig.api_key`); None: none.
        tool_call_parser: how `tool_choice: "auto"` replies are read (`rayspec.serve.tool_parsers`)."""
        self.engine, self.tokenizer, self.model_id = engine, tokenizer, model_id
        self.api_key = api_key
        self.tool_parser = pick_parser(tool_call_parser, self.chat_template())
        self.limits = limits or LimitsConfig()
        self.metrics = metrics or Metrics()
        self.metrics.watch_trials(getattr(engine, "tree_trials", None))  # None: a test's stand-in engine
        self.metrics.watch_plans(getattr(engine, "tree_plans", None))
        self.workers = dict(workers or {})
        self.created = int(time.time())
        self.request_limits = Limits(self.limits.default_max_tokens, self.limits.max_tokens)
        # one line for both APIs (`serve_generation_api`), as one engine runs both's generations
        self._slots = SlotQueue(self.limits.max_concurrent_requests, self.limits.max_queued_requests, Overloaded,
                                waited=self.metrics.queue_seconds.observe)
        self.metrics.watch_queue(lambda: self._slots.waiting)
        self._handles: list = []  # remote handles to close with the service
        self._models: list = []  # (name, remote handle or model in this process): `worker_infos`
        # set by `shut_down`; the gRPC Generation API over the same engine hooks on it
        self.shutting_down = ShutdownSignal()
        self._live: set[StepStream] = set()  # the generations `shut_down` ends
        self._live_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: ServiceConfig, target, drafter_addresses: list[str],
                    timeout: float | None = None, costs=None, kept_costs=None) -> "Service":
        """The coordinator of running workers.  `target`: the target worker's host:port (a
        `RemoteTarget`, verifying where the config says), or the target itself (a
        `LocalTarget`) when it runs in this process.  One `RemoteDrafter` per address (the
        config's `where: worker` drafters) and the `where: coordinator` drafters loaded here,
        taken in turn by successive requests (`DrafterPool`).  The tokenizer is the target's
        (the demo pair's for a null path), and so are the measured acceptance vectors when the
        config names none.  `costs` (`rayspec.engine.calibrate.Costs`, or a function giving
        them when first needed): step costs measured by another coordinator of the same
        workers, so that both plan the same sequoia:auto trees (and a seed gives the same
        tokens through either) instead of measuring their own.  `kept_costs`: where the costs
        this coordinator measures are kept, and read back after a restart (the engine's)."""
        from transformers import AutoTokenizer

        from rayspec.demo import DEMO_DIR, DRAFTER_PATH, TARGET_PATH
        from rayspec.rpc.remote import DEFAULT_TIMEOUT, RemoteDrafter, RemoteTarget

        timeout = timeout or DEFAULT_TIMEOUT
        if isinstance(target, str):
            target = RemoteTarget(target, timeout=timeout, verify_at=config.verify_at)
        if len(drafter_addresses) != len(config.worker_drafters):
            raise ValueError(f"{len(drafter_addresses)} drafter worker address(es) for the config's "
                             f"{len(config.worker_drafters)} `where: worker` drafter(s)")
        remote = [RemoteDrafter(address, target.vocab_size, timeout=timeout, draft_timeout=drafter.draft_timeout)
                  for address, drafter in zip(drafter_addresses, config.worker_drafters)]
        drafters = remote + [d.local(DRAFTER_PATH) for d in config.coordinator_drafters]
        drafter = DrafterPool(drafters) if len(drafters) > 1 else drafters[0] if drafters else None
        demo = config.target.path is None
        tokenizer = AutoTokenizer.from_pretrained(str(TARGET_PATH if demo else config.target.path))
        engine = SpeculativeEngine(
            target, drafter, verifier=config.verifier, tree=config.tree, verifier_params=config.verifier_params,
            tokenizer=tokenizer, acceptance_dir=config.acceptance_dir or (DEMO_DIR / "acceptance" if demo else None),
            adaptive=config.adaptive_trees, costs=costs, graft_predictions=config.graft_predictions,
            target_resume_timeout=config.target.resume_timeout, kept_costs=kept_costs,
            load_aware=config.load_aware_trees, priced_verifiers=config.priced_verifiers,
            draft_hedge=config.draft_hedge,
        )
        workers = {f"drafter {d.address}": d.channel for d in remote}
        handles = list(remote)
        if isinstance(target, RemoteTarget):
            workers = {f"target {target.address}": target.channel, **workers}
            handles.insert(0, target)
        service = cls(engine, tokenizer, config.model_id, config.limits, workers=workers,
                      api_key=config.resolved_api_key, tool_call_parser=config.tool_call_parser)
        service._handles = handles
        service._models = [("target", target), *((f"drafter {i}", d) for i, d in enumerate(drafters))]
        return service

    def worker_infos(self, timeout: float = WORKER_INFO_TIMEOUT) -> list[tuple[str, object | None]]:
        """(name, its `WorkerInfo` now) of each model this coordinator decodes with — "target",
        "drafter 0", ... in the config's order (the drafter workers', then those in this
        process) — None for a worker that did not answer within `timeout` (a scrape asks, and
        must not wait a call's minute for a hung worker), `WORKER_BUSY` for one that answered
        RESOURCE_EXHAUSTED (no thread free for the call).  The workers are asked all at once:
        hung ones hold a scrape `timeout`, not that per worker.  A model in this process
        (`where: coordinator`) answers with its own state (`LocalTarget.state`)."""
        from rayspec.rpc.generated import worker_pb2

        asked = []
        for name, model in self._models:
            if isinstance(model, (LocalTarget, LocalDrafter)):
                call = worker_pb2.WorkerInfo(**model.state())
            else:
                try:
                    call = model.info_future(timeout)
                except Exception as error:  # noqa: BLE001 — a closed channel: a scrape answers with what it has
                    call = error
            asked.append((name, model, call))
        infos = []
        for name, model, call in asked:
            if isinstance(call, worker_pb2.WorkerInfo):
                infos.append((name, call))
                continue
            try:
                if not isinstance(call, grpc.Future):  # a started call is an RpcError too: not this
                    raise call
                infos.append((name, call.result()))
            except Exception as error:  # noqa: BLE001 — a scrape answers with what it has
                if isinstance(error, grpc.Call) and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    infos.append((name, WORKER_BUSY))  # every thread busy: up, and loaded
                    continue
                log.warning("the %s worker at %s did not tell its state: %s", name, model.address, error)
                infos.append((name, None))
        return infos

    def request(self, default_max_tokens: int | None = None, **fields) -> GenerationRequest:
        """A validated request (`GenerationRequest` fields); ValueError on bad input.  Its length
        when it gives none is `default_max_tokens`, if given, within the service's limit."""
        limits = self.request_limits
        if default_max_tokens is not None:
            limits = dataclasses.replace(limits, default_max_tokens=min(default_max_tokens, limits.max_tokens))
        return GenerationRequest(self.engine, self.tokenizer, limits, **fields)

    def compile_structured(self, output: StructuredOutput, ignore_eos: bool = False) -> None:
        """Compile a structured output's automaton over the tokenizer's vocabulary (cached:
        the requests that use it find it compiled); a bad one is a ValueError, and so is one
        the request could never end (`check_structured`), refused before a JSON schema's expression
        is built and before a compilation of seconds."""
        check_structured(output, ignore_eos, self.engine.target.eos_token_ids)
        compiled_index(structured_regex(output), vocabulary_of(self.tokenizer))

    def measured_costs(self) -> dict | None:
        """The step costs its engine plans sequoia:auto trees from (`Costs.to_json`), None
        until measured: what another coordinator of the same workers is given."""
        costs = self.engine.measured_costs
        return None if costs is None else costs.to_json()

    def chat_template(self) -> str | dict:
        """The Jinja chat template conversations are rendered by: the tokenizer's (HF allows a
        dict of named ones), or the fallback."""
        return getattr(self.tokenizer, "chat_template", None) or FALLBACK_CHAT_TEMPLATE

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True,
                    continue_final_message: bool = False, template_kwargs: dict | None = None,
                    tools: list[dict] | None = None) -> str:
        """The prompt text of a conversation (its messages' content a string, or a list of text
        parts), by the tokenizer's chat template (or the fallback): opened for the assistant's
        reply (`add_generation_prompt`), or with its last message left open for the model to
        continue (`continue_final_message`, vLLM's and HF's: a reply prefilled by the client);
        `template_kwargs` are further variables of the template (vLLM's `chat_template_kwargs`,
        e.g. `enable_thinking`); `tools`: OpenAI's tool definitions, for the template to show the
        model.  ChatRenderError when the template refuses the conversation or the variables name
        the renderer's own options."""
        from jinja2 import TemplateError

        if add_generation_prompt and continue_final_message:
            raise ChatRenderError("add_generation_prompt and continue_final_message cannot both be true: a reply is "
                                  "either opened or continued", "continue_final_message")
        template_kwargs = dict(template_kwargs or {})
        if reserved := sorted(set(template_kwargs) & _RENDERER_OPTIONS):
            raise ChatRenderError(f"chat_template_kwargs cannot set the renderer's own options: {', '.join(reserved)}",
                                  "chat_template_kwargs")
        own = getattr(self.tokenizer, "chat_template", None)
        messages = [_template_message(message, index) for index, message in enumerate(messages)]
        try:
            walks_parts = own and reads_content_parts(self.tokenizer.get_chat_template(None, tools or None))
            messages = [{**message, "content": _content(message.get("content"), walks_parts)} for message in messages]
            return self.tokenizer.apply_chat_template(
                messages, chat_template=None if own else FALLBACK_CHAT_TEMPLATE, tokenize=False,
                add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
                tools=tools or None, **template_kwargs,
            )
        except (TemplateError, ValueError, TypeError) as error:  # templates refuse conversations they cannot render
            raise ChatRenderError(f"the model's chat template refused these messages: {error}", "messages") from error
        except RecursionError:  # JSON nests deeper than Python's stack lets a template walk it
            raise ChatRenderError("the messages, tools or chat_template_kwargs nest values too deeply to render",
                                  "messages") from None

    async def start(self, request: GenerationRequest) -> "StepStream":
        """Run `request` off the event loop once a slot is free (`start_all`)."""
        [stream] = await self.start_all([request])
        return stream

    async def start_all(self, requests: list[GenerationRequest], per_prompt: int = 1) -> list["StepStream"]:
        """Run each of `requests` off the event loop, all or none, once as many slots are free:
        until then the request waits in the service's queue, first come, first served
        (`SlotQueue`); Overloaded, with none of them started, when the queue is full.  More
        requests than the service has slots (a request's `n` choices and batch prompts) wait
        for all of its slots, and run that many at a time: each one ending hands its slot to
        the next not yet started, in order.  Each run of `per_prompt` of them shares one
        prompt (a request's `n` choices), and its first counts the prompt's tokens for all of
        them (`rayspec_prompt_tokens`, as `usage.prompt_tokens` counts them) once it has read
        them.  Cancelled while it waits (its client gone), nothing is started and no slot is
        held."""
        if self.shutting_down.is_set():
            raise ShuttingDown()
        # Every slot is taken before any generation starts: a request's first choices would
        # otherwise open worker sessions and run their first step while the rest wait, holding
        # slots that other requests wait for meanwhile.
        at_once = min(len(requests), self._slots.size)
        await self._slots.take(at_once)
        later: deque[StepStream] | None = deque() if len(requests) > at_once else None
        streams = []
        try:
            for index, request in enumerate(requests):
                # its thread hands its slot on, or back, as it ends
                streams.append(StepStream(self, request, counts_prompt=index % per_prompt == 0, later=later,
                                          start=index < at_once))
        except BaseException:
            for stream in streams:
                stream.close()
            self._slots.release(at_once - min(len(streams), at_once))
            raise
        return streams

    def health(self) -> tuple[str, dict[str, str]]:
        """("ok" | "degraded" | "unavailable" (`overall_status`), each worker's status)
        (blocking); ("shutting_down", {}) once `shut_down`: every request is refused then, and
        a load balancer should send them elsewhere."""
        if self.shutting_down.is_set():
            return "shutting_down", {}
        statuses = worker_statuses(self.workers, HEALTH_TIMEOUT)
        return overall_status(statuses), statuses

    def targets_answer(self) -> bool:
        """Whether every target worker answers SERVING (blocking): what the service needs to
        serve at all, a drafter's absence being decoded around."""
        return targets_answer(self.workers, HEALTH_TIMEOUT)

    def serve_generation_api(self, address: str) -> tuple:
        """The gRPC Generation API over this service, on `address`, as `rayspec serve` runs it
        beside the HTTP app: (server, port).  Its calls get the service's limits and key, wait
        in the same line as HTTP requests for the same slots — one engine runs the
        generations of both, and `limits.max_concurrent_requests` bounds them all — are
        observed in the same metrics (and counted by method and status, as HTTP requests are
        by endpoint and status), and end with the service's shutdown."""
        from rayspec.rpc.coordinator import serve_generation

        return serve_generation(self.engine, self.tokenizer, address, self.request_limits, api_key=self.api_key,
                                serving=self.targets_answer, shutting_down=self.shutting_down, slots=self._slots,
                                observed=functools.partial(observed_steps, self.metrics),
                                answered=self.metrics.observe_grpc_call)

    def move_worker(self, old: str, new: str) -> None:
        """The worker at `old` (host:port) now listens at `new`: a Ray actor restarted on another
        node (`rayspec.cluster.actors.WorkerWatch`).  Its handle dials it there from now on,
        and `health` checks it there."""
        from rayspec.rpc.remote import RemoteTarget

        for handle in self._handles:
            if handle.address == old:
                kind = "target" if isinstance(handle, RemoteTarget) else "drafter"
                handle.move_to(new)
                moved = f"{kind} {old}"
                # a new dict, not changed in place: `health` may be reading the old one
                self.workers = {(f"{kind} {new}" if name == moved else name): (handle.channel if name == moved else channel)
                                for name, channel in self.workers.items()}
                return
        raise ValueError(f"no worker at {old} in this service")

    def shut_down(self) -> None:
        """The service is stopping: each generation in flight ends now with `ShuttingDown`
        (its stream's awaiting side gets it at once, the steps verified before it first; its
        thread stops after its current step), and new ones are refused with it, rather than
        run on through the server's grace and be cut without a word.  Requests queued for
        slots are refused with it at once, not when the generations' threads end; so are the
        gRPC Generation API's over the same service (its hook on `shutting_down`)."""
        # Set before the live streams are listed: a stream that joins them later sees it set
        # (`StepStream`'s check, under the same lock) and ends itself.
        self.shutting_down.set()
        with self._live_lock:
            live = list(self._live)
        self._slots.close(ShuttingDown)
        for stream in live:
            stream.abort(ShuttingDown())

    def close(self) -> None:
        for handle in self._handles:
            handle.close()
        self._handles = []


class _End:
    def __init__(self, error: BaseException | None):
        self.error = error


class StepStream:
    """One generation's steps, computed by a thread of its own, awaited on the event loop:
    ``async for added in stream`` (`rayspec.engine.requests.StepText`).

    The engine's generator lives and dies in that thread (a generator cannot be closed while
    another thread is inside it).  `close()` — called when the response ends, fails or loses
    its client — asks the thread to stop after its current step; the thread then closes the
    generator, which releases the worker sessions, and frees the service's slot; a thread
    waiting for a lost target worker stops waiting.  `finished`
    is set once that is done.  The thread runs ahead of a slow client: at most one queued
    item per step.  `counts_prompt`: the thread counts the prompt's tokens once it has read
    them — its first step verified, or a generation of none (the prompt alone) ended — False
    for a request's further choices of the same prompt.  `later`: the streams of the same
    request waiting for a slot one of its running streams holds (`Service.start_all`); a
    stream made with `start=False` joins them, and its thread starts when an ending stream
    hands it that slot (a stream closed meanwhile then ends at once)."""

    def __init__(self, service: Service, request: GenerationRequest, counts_prompt: bool = True,
                 later: deque[StepStream] | None = None, start: bool = True):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._stop = threading.Event()
        self._request = request
        self._service = service
        self._later = later
        self._ended = False
        self.finished = threading.Event()
        self._thread = threading.Thread(
            target=self._produce, args=(service, request, counts_prompt), name=f"rayspec-{request.request_id[:8]}",
            daemon=True,
        )
        if start:
            self._start()
        else:
            later.append(self)

    def _start(self) -> None:
        service = self._service
        with service._live_lock:  # with `shut_down`'s: none started as it ends them is missed
            service._live.add(self)
            if service.shutting_down.is_set():
                self.abort(ShuttingDown())
        try:
            self._thread.start()
        except BaseException:  # never to end, it would be in `_live` for ever (its slot: the caller's)
            with service._live_lock:
                service._live.discard(self)
            raise

    def _hand_on_slot(self) -> None:
        """This generation's slot, as it ends: to the next of its request's streams waiting for
        one (whose thread starts now), else back to the service."""
        while self._later:
            try:
                successor = self._later.popleft()
            except IndexError:  # another of the request's streams, ending too, took the last
                break
            try:
                successor._start()
                return
            except Exception as error:  # its thread could not start: it ends with that, the slot goes on
                successor.finished.set()
                successor._put(_End(error))
        self._service._slots.release()

    def _produce(self, service: Service, request: GenerationRequest, counts_prompt: bool) -> None:
        steps, error = None, None
        try:  # everything in here: whatever fails, the awaiting side gets its end (and the error)
            honour_torch_threads()
            steps = observed_steps(service.metrics, request, counts_prompt, stopped=self._stop.is_set)
            for added in steps:
                self._put(added)
        except Exception as failure:  # delivered to the awaiting side, which answers for it
            error = failure
        finally:
            if steps is not None:
                try:
                    steps.close()
                except Exception as failure:  # its slot and its end must follow all the same
                    error = error or failure
            with service._live_lock:
                service._live.discard(self)
            self._hand_on_slot()
            self.finished.set()
            self._put(_End(error))

    def _put(self, item) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: nobody is waiting any more
            self._stop.set()

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._ended:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, _End):
            self._ended = True
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        return item

    def close(self) -> None:
        self._stop.set()
        self._request.cancel()  # a wait for a lost target worker ends now, not at its deadline

    def abort(self, error: BaseException) -> None:
        """End the stream with `error` now: what is awaited next, after the steps already
        queued, is `error`; the thread stops as after `close`, and what it ends with is not
        read."""
        self.close()
        self._put(_End(error))


def observed_steps(metrics: Metrics, request: GenerationRequest, counts_prompt: bool = True,
                   stopped: Callable[[], bool] = lambda: False):
    """`request.run()`'s steps, each observed in `metrics` as it passes, whichever API serves
    them, until their end or until `stopped()` (asked before each step: the client left): the
    generation in flight while it runs, each step, the gaps between steps that emit tokens
    (time to first token, inter-chunk), the prompt's tokens once read (unless `counts_prompt`
    is False: a request's further choices of one prompt), and how it ended — its finish
    reason, or `abort` when it failed, stopped or was closed before its end.  Closing this
    generator closes the engine's."""
    metrics.in_flight.inc()
    steps, ended, unread, began, error = None, False, counts_prompt, False, None
    try:
        start = last = time.perf_counter()
        first_token = None  # seconds from the start
        steps = request.run()
        while not stopped():
            try:
                added = next(steps)
            except StopIteration:
                added = None
            began = True
            # Counted once read, as vLLM counts a prefilled prompt: a generation refused or
            # failed before its first step (an unknown verifier, a worker down) read none.
            if unread:
                metrics.prompt_tokens.inc(len(request.prompt_ids))
                unread = False
            if added is None:  # the end (at once for an echo of the prompt alone)
                ended = True
                metrics.observe_generation(request.stats, time.perf_counter() - start, first_token,
                                           request.finish_reason)
                return
            now = time.perf_counter()
            metrics.observe_step(added.step)
            if added.token_ids:
                metrics.observe_chunk(now - last, first=first_token is None)
                first_token, last = first_token if first_token is not None else now - start, now
            yield added
    except Exception as failure:
        error = failure
        raise
    finally:
        # A generation refused as it starts (bad input, a 400; no room, a 429) never ran: its
        # request is counted by that status alone, as those refused before the engine are.
        if not ended and (began or not _refused(error)):
            metrics.ended.labels("abort").inc()
        try:
            if steps is not None:
                steps.close()
        finally:
            if getattr(request, "stats", None) is not None:  # set once the generation began
                metrics.observe_incidents(request.stats)
            metrics.in_flight.dec()


def _refused(error: BaseException | None) -> bool:
    """Whether `error` refuses a request rather than fails it: bad input (a ValueError, which
    the HTTP app answers 400) or no room for it (429: `AtCapacity`, a worker that is full)."""
    return isinstance(error, (ValueError, AtCapacity)) or (isinstance(error, RemoteError) and error.worker_full)


@functools.lru_cache(maxsize=8)
def reads_content_parts(template: str) -> bool:
    """Whether a chat template walks a message's content as OpenAI's list of parts (`{% for
    part in message['content'] %}`, a multimodal model's): vLLM's "openai" content format,
    found as vLLM finds it, by a loop over the content of a loop's message.  Such a template
    given a string walks its characters and writes nothing of them."""
    from jinja2 import TemplateError, nodes

    try:  # transformers' environment, whose tags ({% generation %}) a template may use
        from transformers.utils.chat_template_utils import _compile_jinja_template

        environment = _compile_jinja_template(template).environment
    except (ImportError, AttributeError, TemplateError):  # a transformers that keeps it elsewhere
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(extensions=[loopcontrols])
    try:
        tree = environment.parse(template)
    except TemplateError:
        return False

    def base(node):  # `x | filter`, `x is test`, `x[1:]`: x
        while isinstance(node, (nodes.Filter, nodes.Test)) or (
                isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice)):
            node = node.node
        return node

    def field(node, names: set[str], key: str) -> bool:  # names[key] or names.key
        node = base(node)
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            node, attribute = node.node, node.arg.value
        elif isinstance(node, nodes.Getattr):
            node, attribute = node.node, node.attr
        else:
            return False
        return attribute == key and isinstance(node, nodes.Name) and node.name in names

    lists = {"messages"}  # and what a template names them (`set loop_messages = messages[1:]`)
    for assign in tree.find_all(nodes.Assign):
        target, value = assign.target, base(assign.node)
        if isinstance(target, nodes.Name) and isinstance(value, nodes.Name) and value.name in lists:
            lists.add(target.name)
    loops = list(tree.find_all(nodes.For))
    items = {loop.target.name for loop in loops
             if isinstance(loop.target, nodes.Name) and isinstance(base(loop.iter), nodes.Name)
             and base(loop.iter).name in lists}
    return any(field(loop.iter, items, "content") for loop in loops)


def _content(content, walks_parts: bool):
    """A message's content (a string, or a list of text parts) as vLLM gives a chat template:
    to one that `walks_parts`, a list of parts; to any other, a string, the parts' texts a
    line each (its "string" content format)."""
    if isinstance(content, list):
        return content if walks_parts else "\n".join(part["text"] for part in content)
    if not walks_parts:
        return content
    return [] if content is None else [{"type": "text", "text": content}]


def _template_message(message: dict, index: int) -> dict:
    """`message` as chat templates read it: an earlier tool call's `arguments`, which OpenAI's
    API sends as a JSON string, as the object it encodes (HF's and vLLM's convention: templates
    render it with `tojson`, or iterate its items), and none ("", null or left out: a call
    without parameters, as some clients send it back) as {}, as vLLM gives it.
    ChatRenderError for a tool call without a function's name."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    if not isinstance(calls, list):
        raise ChatRenderError(f"messages[{index}].tool_calls must be a list of tool calls", "messages")
    parsed = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ChatRenderError(f"messages[{index}].tool_calls[{number}] must be a tool call: "
                                  f'{{"id": ..., "type": "function", "function": {{"name": ..., "arguments": ...}}}}',
                                  "messages")
        arguments = function.get("arguments")
        if arguments is None or arguments == "":
            call = {**call, "function": {**function, "arguments": {}}}
        elif isinstance(arguments, str):
            try:
                decoded = json.loads(arguments)
            except (ValueError, RecursionError):  # no JSON, or nested deeper than the decoder goes
                decoded = None
            if isinstance(decoded, dict):  # any other text stays as it was sent
                call = {**call, "function": {**function, "arguments": decoded}}
        parsed.append(call)
    return {**message, "tool_calls": parsed}
