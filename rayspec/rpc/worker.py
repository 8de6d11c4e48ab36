"""Drafter and target workers: gRPC servers around the in-process model sessions.

    python -m rayspec.rpc.worker --role target  --port 50051 [--model PATH] [--device cuda]
    python -m rayspec.rpc.worker --role drafter --port 50052 [--model PATH]
    python -m rayspec.rpc.worker --role coordinator --port 9000 --target HOST:50051 --drafter HOST:50052
    python -m rayspec.rpc.worker --role coordinator --port 9000 --target HOST:50051 --drafter here [--model PATH]
    python -m rayspec.rpc.worker --role coordinator --port 9000 --target here [--model PATH] --drafter HOST:50052

Plain processes, no Ray: the GPU machines run them as they are; `rayspec.cluster` wraps the
same servers in Ray actors.  Each prints one line `READY <role> <host:port>` once serving,
or one error line (exit status 1) when it cannot: a model that does not load, a port in use,
a worker the coordinator waited for in vain (`--wait-for-workers`).  A coordinator started
with $RAYSPEC_API_KEY set refuses Generation calls without that key.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time


def _stopped_while_importing(*_) -> None:
    """Ctrl-C or SIGTERM in the seconds the imports below take (torch's, most of the demo
    pair's start): what `main` answers before READY, rather than a traceback from inside an
    import (Ctrl-C) or a silent status 143 (SIGTERM).  Nothing has started to be stopped."""
    sys.stderr.write("rayspec worker: stopped while starting\n")
    sys.stderr.flush()
    os._exit(130)


if __name__ == "__main__":  # `python -m rayspec.rpc.worker`; `main` takes over once the imports are done
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, _stopped_while_importing)

import torch  # noqa: E402  (after the handlers above)

from rayspec.cli import at_least
from rayspec.engine.engine import check_default_setting
from rayspec.engine.hedge import check_hedge_factor
from rayspec.engine.interfaces import Draft
from rayspec.engine.local import LocalDrafter, LocalTarget, check_draft_top_k
from rayspec.models.batching import (
    DEFAULT_MAX_BATCH_SEQUENCES, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK, check_batch_limits,
)
from rayspec.models.loading import load_tokenizer
from rayspec.models.prefix_cache import DEFAULT_PREFIX_CACHE_MB, check_prefix_cache_mb
from rayspec.models.threads import pin_process_to_cpus
from rayspec.rpc import codec
from rayspec.rpc.checks import BAD_PORT, NO_HOST, NO_PORT, api_key_from_environment, host_port_problem
from rayspec.rpc.generated import health_pb2, health_pb2_grpc, worker_pb2, worker_pb2_grpc
from rayspec.rpc.process import PARENT_VARIABLE, StopSignals
from rayspec.rpc.remote import check_draft_timeout
from rayspec.rpc.server import (
    HealthServicer, RemoteError, Servicer, check_port, check_port_free, host_port, rpc_errors, start_server,
)


log = logging.getLogger("rayspec.worker")

# Server threads beyond one per session (each session's `Steps` stream holds one): room for
# the unary Open, Release, Info and health calls.
_SPARE_THREADS = 16


def _open_checks(spec, vocab_size: int, context_length: int, room: int = 1) -> None:
    """Refuse ids outside the vocabulary, and a sequence that leaves fewer than `room` of the
    context's positions free: a target's session may hold a prompt that fills its context, to
    score it (OpenAI's `echo` with `max_tokens: 0`); the coordinator refuses such a prompt a
    completion, and a step past the context is refused by the session itself."""
    for what, ids in (("prompt", spec.prompt_ids), ("completion", spec.completion_ids)):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"{what} token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}")
    length = len(spec.prompt_ids) + len(spec.completion_ids)
    if length + room > context_length:
        raise ValueError(f"the prompt has {length} tokens{' with the completion so far' if spec.completion_ids else ''}; "
                         f"the context holds {context_length}")


def _worker_info(servicer: Servicer, model_id: str, side: LocalTarget | LocalDrafter,
                 **fields) -> worker_pb2.WorkerInfo:
    # the servicer's sessions: those still opening too, which the model has not yet
    state = {**side.state(), "open_sessions": servicer.open_sessions()}
    return worker_pb2.WorkerInfo(model_id=model_id, vocab_size=side.vocab_size, context_length=side.context_length,
                                 device=str(next(side.model.parameters()).device), features=codec.WORKER_FEATURES,
                                 tokenizer_fingerprint=side.tokenizer_fingerprint or b"", **state, **fields)


class TargetServicer(Servicer, worker_pb2_grpc.TargetServiceServicer):
    def __init__(self, target: LocalTarget, model_id: str = "target", **limits):
        super().__init__(**limits)
        self.target = target
        self.model_id = model_id

    @rpc_errors
    def Info(self, request, context):
        return _worker_info(self, self.model_id, self.target, eos_token_ids=list(self.target.eos_token_ids))

    @rpc_errors
    def Open(self, request, context):
        spec = codec.decode_spec(request.spec)
        _open_checks(spec, self.target.vocab_size, self.target.context_length, room=0)
        session = self.open_session(request.session_id, lambda: self.target.open(spec), context)  # prefills
        reply = worker_pb2.OpenReply(cached_tokens=session.cached_tokens)
        if session.prompt_logprobs is not None:
            codec.encode_logprobs(session.prompt_logprobs, reply.prompt_logprobs)
        return reply

    # The per-step handlers take the reply to fill: a `Steps` stream passes the one inside its
    # result message, which spares copying the rows of a large reply into it.
    @rpc_errors
    def Verify(self, request, context, reply=None):
        session = self.session(request.session_id)
        tree = codec.decode_tree(request.tree, self.target.vocab_size)
        q_rows = codec.decode_rows(request.q_rows, len(tree.shape.internal_nodes), self.target.vocab_size, "q rows")
        if q_rows is None and session.verifier.needs_draft_probs and tree.shape.size > 1:
            raise ValueError(f"verifier {session.verifier.name!r} needs the drafter's q rows")
        outcome = session.verify(Draft(tree, q_rows, request.draft_seconds))
        reply = worker_pb2.VerifyReply() if reply is None else reply
        reply.outcome.CopyFrom(codec.encode_outcome(outcome))
        return reply

    @rpc_errors
    def Score(self, request, context, reply=None):
        session = self.session(request.session_id)
        tree = codec.decode_tree(request.tree, self.target.vocab_size)
        reply = worker_pb2.ScoreReply() if reply is None else reply
        with session.busy:
            session.check_open()
            started = time.perf_counter()
            session.lm.batch_sizes.clear()
            p_rows = session.score(tree)
            reply.batch_size = session.lm.batch_sizes[-1]
            if session.verifier.token_only:
                reply.node_tokens[:] = session.node_samples(tree, p_rows).tolist()
            else:
                codec.encode_rows(p_rows, reply.p_rows)
            reply.seconds = time.perf_counter() - started
        return reply

    @rpc_errors
    def Commit(self, request, context, reply=None):
        session = self.session(request.session_id)
        outcome = codec.decode_outcome(request.outcome, self.target.vocab_size)
        with session.busy:
            session.check_open()
            logprobs = session.commit(outcome.tokens, outcome.path)
        reply = worker_pb2.CommitReply() if reply is None else reply
        if logprobs is not None:
            codec.encode_logprobs(logprobs, reply.logprobs)
        return reply

    def Steps(self, calls, context):
        handlers = {"verify": TargetServicer.Verify, "score": TargetServicer.Score, "commit": TargetServicer.Commit}
        yield from self.serve_steps(calls, context, worker_pb2.TargetResult, handlers)


class DrafterServicer(Servicer, worker_pb2_grpc.DrafterServiceServicer):
    def __init__(self, drafter: LocalDrafter, model_id: str = "drafter", **limits):
        super().__init__(**limits)
        self.drafter = drafter
        self.model_id = model_id

    @rpc_errors
    def Info(self, request, context):
        return _worker_info(self, self.model_id, self.drafter)

    @rpc_errors
    def Open(self, request, context):
        spec = codec.decode_spec(request.spec)
        own = self.drafter.vocab_size
        if spec.vocab_size is not None and spec.vocab_size > 2 * own:
            # Padding rows are a rounding of the vocabulary (Qwen2.5's differ by 128); a far
            # wider law is no target's of this drafter's tokenizer, and would cost rows that size.
            raise ValueError(f"this drafter's vocabulary of {own} tokens is fitted to a target's of at most "
                             f"{2 * own}, not {spec.vocab_size}")
        _open_checks(spec, spec.vocab_size or own, self.drafter.context_length)
        # No forward yet: the first draft prefills.
        self.open_session(request.session_id, lambda: self.drafter.open(spec), context)
        return worker_pb2.OpenReply()

    @rpc_errors
    def Draft(self, request, context, reply=None):
        session = self.session(request.session_id)
        shape = codec.decode_plan(request)
        previous = codec.decode_outcome(request.previous, session.vocab_size) if request.HasField("previous") else None
        draft = session.draft(shape, previous)
        return codec.encode_draft(draft, reply)

    @rpc_errors
    def Commit(self, request, context, reply=None):
        session = self.session(request.session_id)
        outcome = codec.decode_outcome(request.outcome, session.vocab_size)
        with session.busy:
            session.check_open()
            session.commit(outcome)
        return worker_pb2.CommitReply() if reply is None else reply

    def Steps(self, calls, context):
        handlers = {"draft": DrafterServicer.Draft, "commit": DrafterServicer.Commit}
        yield from self.serve_steps(calls, context, worker_pb2.DrafterResult, handlers)


def serve_target(target: LocalTarget, address: str, model_id: str = "target", **limits):
    servicer = TargetServicer(target, model_id, **limits)
    return _serve(servicer, "rayspec.v1.TargetService", worker_pb2_grpc.add_TargetServiceServicer_to_server, address)


def serve_drafter(drafter: LocalDrafter, address: str, model_id: str = "drafter", **limits):
    servicer = DrafterServicer(drafter, model_id, **limits)
    return _serve(servicer, "rayspec.v1.DrafterService", worker_pb2_grpc.add_DrafterServiceServicer_to_server, address)


def _serve(servicer, service: str, add_servicer, address: str):
    """A server of `servicer` and of the health service reporting on it: a thread for each
    session the servicer admits (its `Steps` stream), and spare ones for the unary calls."""
    health = HealthServicer([service])

    def register(server):
        add_servicer(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)

    threads = servicer.max_sessions + _SPARE_THREADS + HealthServicer.MAX_WATCHES
    return start_server(register, address, max_workers=threads)


def wait_for_worker(role: str, address: str, timeout: float) -> bool:
    """Whether the worker at `address` accepts a connection within `timeout` seconds; a line
    in the log if it is not up at once (a coordinator started beside its workers comes up
    before they have loaded their models).  The wait runs on a thread of its own, so that a
    Ctrl-C or SIGTERM meanwhile stops the caller at once: interrupted inside gRPC's blocking
    call, closing the channel could hang (a full suite run once did)."""
    answer: list = []

    def wait() -> None:
        try:
            answer.append(_wait_for_worker(role, address, timeout))
        except Exception as error:  # noqa: BLE001 — raised in the caller's thread below
            answer.append(error)

    waited = threading.Thread(target=wait, name=f"rayspec-wait-for-{role}", daemon=True)
    waited.start()
    waited.join()
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


# gRPC's deadline is nanoseconds since 1970 in an int64: a wait past about 7e9 s overflows it,
# and the call fails at once.  One this long is a wait for ever (no deadline).
FOREVER_SECONDS = 1e9


def _wait_for_worker(role: str, address: str, timeout: float) -> bool:
    import grpc

    # A health check that waits for the connection, rather than `channel_ready_future`, whose
    # polling thread fails with a traceback of its own when the channel closes under it.
    with grpc.insecure_channel(address) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        for attempt, wait in enumerate((min(2.0, timeout), max(timeout - 2.0, 0.0))):
            if attempt:
                log.info("waiting for the %s worker at %s (%s)", role, address,
                         "for as long as it takes" if timeout >= FOREVER_SECONDS else f"up to {timeout:g} s")
            try:
                check(health_pb2.HealthCheckRequest(), timeout=None if wait >= FOREVER_SECONDS else wait,
                      wait_for_ready=True)
                return True
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    return True  # it answered, so it is up
    return False


def _port(text: str) -> int:
    """An argparse `type`: a port (`check_port`), its error in argparse's words."""
    try:
        return check_port(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _host(text: str) -> str:
    """An argparse `type`: a host to listen on.  An empty one (`--host "$HOST"` with the variable
    unset) passed the port probe, which reads it as every interface, and gRPC refused it only
    once the model had loaded, as "the port is in use"."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"a host name or IP address is needed (0.0.0.0: every interface), "
                                         f"got {text!r}")
    return text


def main(argv=None) -> int:
    """The worker's process: flags, model, server, then serving until SIGINT or SIGTERM.  Either
    signal before the READY line (loading a model, waiting for workers) stops it with a line
    and status 130 rather than a traceback; the handlers it replaces are put back on return."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # SIGINT too: a process started with it ignored (a background job of a script, a test
        # runner's worker) would otherwise only heed it once READY, where it stops the server
        for sig in handlers:
            signal.signal(sig, signal.default_int_handler)
    except ValueError:  # not the main thread (signals are its alone): none set, none to put back
        handlers = {}
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("rayspec worker: stopped while starting", file=sys.stderr)
        return 130
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(sig, handler)


def _worker_address(flag: str, where: str) -> None:
    """A --target/--drafter HOST:PORT, checked before it is waited for by the SDK's rule
    (`rayspec.rpc.checks.host_port_problem`): gRPC would dial a port past 65535 modulo 65536,
    and an address without a port would be waited for in vain.  A gRPC URI with an authority
    (dns:///HOST:PORT) has the HOST:PORT after its last "/" checked."""
    address = where.rsplit("/", 1)[-1] if "://" in where else where
    problem = host_port_problem(address)
    if problem in (NO_PORT, NO_HOST):
        raise ValueError(f"{flag}: a worker's address is HOST:PORT ([IPv6]:PORT) or 'here', got {where!r}")
    # check_port's words for what is no port at all; what it lets through and gRPC cannot dial is 0
    if problem == BAD_PORT and check_port(address.rpartition(":")[2], f"{flag} {where!r}") == 0:
        raise ValueError(f"{flag} {where!r}: port 0 names no worker")


# The flags only a coordinator reads, and their defaults: None in the parser, so that one given
# to a target or drafter worker, which would silently ignore it, can be told from its default.
_COORDINATOR_FLAGS = {"target": None, "drafter": None, "tree": "kary:2x3", "verifier": "rrsw", "verify_at": "target",
                      "draft_timeout": None, "draft_hedge": None, "wait_for_workers": 600.0, "tokenizer": None,
                      "acceptance_dir": None, "max_concurrent_requests": 64, "max_queued_requests": 256}
_DEFAULT_DRAFT_TOP_K = 0
# The flags of the model a process runs, None in the parser too: a coordinator that runs none
# (both workers elsewhere) would ignore them.
_MODEL_FLAGS = {"device": "auto", "dtype": "auto", "prefix_cache_mb": DEFAULT_PREFIX_CACHE_MB,
                "max_batch_sequences": DEFAULT_MAX_BATCH_SEQUENCES, "max_batch_tokens": DEFAULT_MAX_BATCH_TOKENS,
                "prefill_chunk_tokens": DEFAULT_PREFILL_CHUNK}


def _flag(dest: str) -> str:
    """The command-line flag of the setting `dest` (argparse's name for it)."""
    return "--" + dest.replace("_", "-")


def _ignored_flag(args) -> str | None:
    """What is wrong with a flag that `args.role` would not read, or None: the operator who
    passed it would believe it took effect."""
    if args.role != "coordinator":
        for dest in _COORDINATOR_FLAGS:
            if getattr(args, dest) is not None:
                return f"{_flag(dest)} is a coordinator's flag (--role coordinator); a {args.role} worker ignores it"
    if args.role == "coordinator":  # the models it runs itself
        runs = {role for role in ("target", "drafter") if getattr(args, role) == "here"}
    else:
        runs = {args.role}
    if args.draft_top_k is not None and "drafter" not in runs:
        return (f"--draft-top-k is the drafter's flag (--role drafter, or --role coordinator with --drafter here); "
                f"a {args.role} {'worker' if args.role == 'target' else 'without --drafter here'} ignores it")
    if args.model is not None and not runs:
        return ("--model names the model a coordinator runs itself (--target here or --drafter here); "
                "this one runs none")
    for dest in _MODEL_FLAGS:
        if getattr(args, dest) is not None and not runs:
            return (f"{_flag(dest)} sets the model a coordinator runs itself (--target here or --drafter here); "
                    f"this one runs none")
    return None


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rayspec.rpc.worker", description="A rayspec gRPC worker (no Ray needed).",
        epilog="A coordinator started with $RAYSPEC_API_KEY set refuses Generation calls without that key "
               "(printable ASCII, no spaces at either end); the workers' own ports carry no key.")
    parser.add_argument("--role", choices=["target", "drafter", "coordinator"], required=True)
    parser.add_argument("--host", type=_host, default="127.0.0.1",
                        help="default 127.0.0.1, this machine only; 0.0.0.0 for callers on other machines")
    parser.add_argument("--port", type=_port, default=0, help="0: any free port (printed)")
    parser.add_argument("--model", default=None, help="checkpoint path or hub id (default: the demo pair's); "
                        "for a coordinator, that of the model it runs itself (--target or --drafter here)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default auto: cuda when present)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default auto: float32 on CPU, "
                        "bfloat16 on CUDA)")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    parser.add_argument("--prefix-cache-mb", type=float, default=None,
                        help="the model's prefix cache of prompt keys and values, in MB (0: none)")
    parser.add_argument("--max-batch-sequences", type=int, default=None,
                        help="concurrent sequences one forward may carry (1: no cross-request batching)")
    parser.add_argument("--max-batch-tokens", type=int, default=None,
                        help="query rows of one batched forward (sequences x the widest one's tokens)")
    parser.add_argument("--prefill-chunk-tokens", type=int, default=None,
                        help="prefill longer prompts in chunks of this many tokens, other sequences' forwards "
                        "in between (0: whole)")
    parser.add_argument("--draft-top-k", type=int, default=None,
                        help="drafter: draft from each node's k likeliest tokens only (exact for every verifier; "
                             f"q rows then cross as k entries); {_DEFAULT_DRAFT_TOP_K} (default): the whole law")
    parser.add_argument("--cpus", default=None, help="keep this process on these CPUs, e.g. 0-3 or 2,3 "
                        "(default: wherever Linux schedules it)")
    parser.add_argument("--target", help="coordinator: the target worker's host:port, or 'here' to run the "
                        "target (--model, default the demo target) in this process")
    parser.add_argument("--drafter", help="coordinator: the drafter worker's host:port, or 'here' to run the "
                        "drafter (--model, default the demo drafter) in this process; omit: target-only")
    parser.add_argument("--draft-timeout", type=float, default=None,
                        help="coordinator: seconds a drafter worker has for each draft after a sequence's first, "
                             "past which the sequence decodes on without drafts (default 10)")
    parser.add_argument("--draft-hedge", type=float, default=None,
                        help="coordinator: a step waits for its draft at most this many times the drafter's "
                             "recent median draft time, then goes on target-only (default: waits for every draft)")
    parser.add_argument("--wait-for-workers", type=float,
                        help="coordinator: seconds to wait for --target and --drafter workers that are not "
                             f"up yet (still loading their models, say) before giving up (default "
                             f"{_COORDINATOR_FLAGS['wait_for_workers']:g}; inf: for ever)")
    parser.add_argument("--verifier", help="coordinator: requests' default verifier "
                        f"(default {_COORDINATOR_FLAGS['verifier']})")
    parser.add_argument("--tree", help=f"coordinator: requests' default tree (default {_COORDINATOR_FLAGS['tree']}, "
                        "not rayspec serve's sequoia:auto)")
    parser.add_argument("--verify-at", choices=["target", "coordinator"],
                        help="coordinator: where the verifier runs (with --target here, both are this process; "
                             f"default {_COORDINATOR_FLAGS['verify_at']})")
    parser.add_argument("--max-concurrent-requests", type=at_least(1), default=None,
                        help="coordinator: generations run at once; more wait in line "
                             f"(default {_COORDINATOR_FLAGS['max_concurrent_requests']}, as rayspec serve's "
                             "limits.max_concurrent_requests)")
    parser.add_argument("--max-queued-requests", type=at_least(0), default=None,
                        help="coordinator: calls that may wait in line for a generation, past which one is "
                             f"refused RESOURCE_EXHAUSTED (default {_COORDINATOR_FLAGS['max_queued_requests']}; "
                             "0: refused at once)")
    parser.add_argument("--tokenizer", default=None, help="coordinator: tokenizer path (default: --model with "
                        "--target here, else the demo pair's)")
    parser.add_argument("--acceptance-dir", default=None,
                        help="coordinator: the pair's measured acceptance vectors (`rayspec tree measure`), "
                             "which sequoia: trees are planned on (default: the demo pair's with its tokenizer, "
                             "else a prior)")
    args = parser.parse_args(argv)
    ignored = _ignored_flag(args)
    if ignored:
        parser.error(ignored)
    for dest, default in {**_COORDINATOR_FLAGS, **_MODEL_FLAGS, "draft_top_k": _DEFAULT_DRAFT_TOP_K}.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.cpus is not None:
        try:
            pin_process_to_cpus(args.cpus)
        except ValueError as error:
            parser.error(str(error))
    try:
        check_batch_limits(args.max_batch_sequences, args.max_batch_tokens, args.prefill_chunk_tokens, named=_flag)
        check_draft_top_k(args.draft_top_k, "--draft-top-k")
        if args.draft_timeout is not None:
            check_draft_timeout(args.draft_timeout, "--draft-timeout")
        check_hedge_factor(args.draft_hedge, "--draft-hedge")
        check_prefix_cache_mb(args.prefix_cache_mb, "--prefix-cache-mb")
        if args.role == "coordinator":  # before waiting minutes for the workers
            check_default_setting(args.verifier, {}, args.tree)
            for flag, where in (("--target", args.target), ("--drafter", args.drafter)):
                if where not in (None, "here"):
                    _worker_address(flag, where)
            if not args.wait_for_workers >= 0:
                raise ValueError(f"--wait-for-workers is a number of seconds, 0 or more, "
                                 f"got {args.wait_for_workers:g}")
            # a key no client can send, refused before anything starts
            api_key = api_key_from_environment()
    except ValueError as error:
        parser.error(str(error))
    if args.threads:
        torch.set_num_threads(args.threads)
    address = host_port(args.host, args.port)

    def local(role: str) -> LocalTarget | LocalDrafter:
        """The in-process handle of `role`'s model, as the flags give it."""
        from rayspec.demo import DRAFTER_PATH, TARGET_PATH
        from rayspec.models import load_causal_lm

        default, handle = (TARGET_PATH, LocalTarget) if role == "target" else (DRAFTER_PATH, LocalDrafter)
        model, tokenizer = load_causal_lm(args.model or default, args.device, args.dtype)
        drafting = {} if role == "target" else {"draft_top_k": args.draft_top_k}
        return handle(model, tokenizer, prefix_cache_mb=args.prefix_cache_mb,
                      max_batch_sequences=args.max_batch_sequences, max_batch_tokens=args.max_batch_tokens,
                      prefill_chunk_tokens=args.prefill_chunk_tokens, **drafting)

    if args.role == "coordinator":
        from rayspec.rpc.coordinator import serve_generation_from_workers

        if not args.target:
            parser.error("--role coordinator needs --target HOST:PORT or --target here")
        if args.target == args.drafter == "here":
            parser.error("--target here and --drafter here: --model names one model; run `rayspec serve` instead")
        tokenizer = args.tokenizer or (args.model if args.target == "here" else None)
        if args.tokenizer:  # loaded before waiting minutes for the workers, and named if it cannot be
            try:
                tokenizer = load_tokenizer(args.tokenizer)
            except FileNotFoundError as error:
                print(f"rayspec worker: error: --tokenizer: {error}", file=sys.stderr)
                return 1
        for role, where in (("target", args.target), ("drafter", args.drafter)):
            if where not in (None, "here") and not wait_for_worker(role, where, args.wait_for_workers):
                print(f"rayspec worker: error: the {role} worker at {where} did not answer within "
                      f"{args.wait_for_workers:g} s", file=sys.stderr)
                return 1

        def serve():
            target = local("target") if args.target == "here" else args.target
            drafter = local("drafter") if args.drafter == "here" else args.drafter
            return serve_generation_from_workers(
                address, target, drafter, verifier=args.verifier, tree=args.tree, verify_at=args.verify_at,
                tokenizer=tokenizer, api_key=api_key, max_concurrent_requests=args.max_concurrent_requests,
                max_queued_requests=args.max_queued_requests, draft_timeout=args.draft_timeout, draft_hedge=args.draft_hedge, acceptance_dir=args.acceptance_dir,
            )
    elif args.role == "target":
        def serve():
            handle = local("target")
            return serve_target(handle, address, model_id=str(args.model or "rayspec-demo-target"))
    else:
        def serve():
            handle = local("drafter")
            return serve_drafter(handle, address, model_id=str(args.model or "rayspec-demo-drafter"))
    try:
        check_port_free(args.host, args.port)  # port 0 too: a --host not this machine's, before the model loads
        server, port = serve()
    except (OSError, RemoteError, ValueError, RuntimeError) as error:
        # a checkpoint that cannot load, a port taken (say, by a worker started before), a
        # worker that answers with an error, a flag the model or engine refuses (a verifier,
        # a dtype, a device)
        print(f"rayspec worker: error: {error}", file=sys.stderr)
        return 1

    stop = StopSignals()  # before the READY line: a signal sent as it appears stops the server
    print(f"READY {args.role} {host_port(args.host, port)}", flush=True)
    parent = os.environ.get(PARENT_VARIABLE)

    def orphaned() -> bool:
        if parent and os.getppid() != int(parent):
            log.warning("the process that started this worker (%s) is gone: stopping", parent)
            return True
        return False

    stop.wait(orphaned, every=1.0)
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
