"""A worker's sessions under bad or failing calls: a step that fails leaves its session as it
was, tokens a session could not embed are refused before they reach it, a refused Open costs
no prefill, and a coordinator reports its workers' failures with their status, not INTERNAL.
gRPC servers in this process, over tiny random models."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace

import grpc
import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.rpc import codec
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, worker_pb2, worker_pb2_grpc
from rayspec.engine.interfaces import GenerationCancelled, Outcome, SequenceSpec
from rayspec.models.cancellation import caller_left
from rayspec.rpc.remote import RemoteDrafter, RemoteError, RemoteTarget
from rayspec.rpc.server import RefuseUndecodable, rpc_errors, status_of
from rayspec.rpc.worker import serve_drafter, serve_target
from rayspec.verify.processing import SamplingParams
from tests.tiny_models import tiny_llama

VOCAB = 64


def _spec(verifier="rrsw", temperature=1.0, prompt=(11, 5, 7, 40)):
    return worker_pb2.SequenceSpec(prompt_ids=list(prompt), seed=3, verifier=verifier,
                                   params=worker_pb2.SamplingParams(temperature=temperature, top_p=1))


def _status(call):
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details()


class _CountingTarget(LocalTarget):
    def __init__(self, model):
        super().__init__(model)
        self.opened = 0
        self.sessions = []

    def open(self, spec):
        self.opened += 1
        self.sessions.append(super().open(spec))
        return self.sessions[-1]


@pytest.fixture(scope="module")
def target_server():
    target = _CountingTarget(tiny_llama(vocab=VOCAB, seed=0))
    server, port = serve_target(target, "127.0.0.1:0")
    yield target, worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}")), port
    server.stop(0)


@pytest.fixture(scope="module")
def drafter_stub():
    server, port = serve_drafter(LocalDrafter(tiny_llama(vocab=VOCAB, seed=0)), "127.0.0.1:0")
    yield worker_pb2_grpc.DrafterServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    server.stop(0)


def test_a_verify_that_fails_after_scoring_leaves_the_session_as_it_was(target_server):
    _, stub, _ = target_server
    spec = _spec("spechub", temperature=0.0)
    for session in ("clean", "failed-once", "probe"):
        stub.Open(worker_pb2.OpenRequest(session_id=session, spec=spec), timeout=10)

    def verify(session, parents, tokens, q_token=None):
        request = worker_pb2.VerifyRequest(session_id=session, tree=worker_pb2.Tree(parents=parents, tokens=tokens))
        if q_token is not None:
            request.q_rows.CopyFrom(codec.encode_rows(torch.nn.functional.one_hot(torch.tensor([q_token]), VOCAB).float()))
        return stub.Verify(request, timeout=30).outcome.tokens

    root = spec.prompt_ids[-1]
    greedy = verify("probe", [-1], [root])[0]
    other, third = (greedy + 1) % VOCAB, (greedy + 2) % VOCAB
    # SpecHub refuses a pair of drafts without its hub (q's argmax), after the tree was scored
    code, details = _status(lambda: verify("failed-once", [-1, 0, 0], [root, other, third], q_token=greedy))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "hub" in details
    runs = {}
    for session in ("clean", "failed-once"):
        tokens = list(verify(session, [-1, 0, 0], [root, greedy, other], q_token=greedy))
        for _ in range(8):
            tokens += verify(session, [-1], [tokens[-1]])
        runs[session] = tokens
    assert runs["failed-once"] == runs["clean"] and len(runs["clean"]) >= 10


@pytest.mark.parametrize("method", ["Verify", "Score", "Commit"])
def test_a_call_whose_session_closes_while_it_waits_for_the_model_gets_not_found(target_server, method):
    """A Release (or the idle sweep) closes a session after any step in flight; a call that
    was already waiting for the model then finds the session closed: NOT_FOUND with a message,
    not an INTERNAL error, and the worker goes on serving."""
    import threading

    target, stub, _ = target_server
    stub.Open(worker_pb2.OpenRequest(session_id=f"closing-{method}", spec=_spec()), timeout=10)
    session = target.sessions[-1]
    tree = worker_pb2.Tree(parents=[-1], tokens=[40])
    waiting_call = {
        "Verify": lambda: stub.Verify(worker_pb2.VerifyRequest(session_id=f"closing-{method}", tree=tree), timeout=30),
        "Score": lambda: stub.Score(worker_pb2.ScoreRequest(session_id=f"closing-{method}", tree=tree), timeout=30),
        "Commit": lambda: stub.Commit(worker_pb2.CommitRequest(
            session_id=f"closing-{method}", outcome=worker_pb2.Outcome(tokens=[3])), timeout=30),
    }[method]
    statuses = []
    with session.busy:  # the session computes: the call waits for it
        waiting = threading.Thread(target=lambda: statuses.append(_status(waiting_call)))
        waiting.start()
        time.sleep(0.5)
        session.close()  # as Release does: it holds the session (re-entrant here) and drops the cache
    waiting.join(30)
    assert statuses == [(grpc.StatusCode.NOT_FOUND,
                         "the session was released or expired while this call waited for the model")]
    stub.Open(worker_pb2.OpenRequest(session_id=f"after-{method}", spec=_spec()), timeout=10)
    assert len(stub.Verify(worker_pb2.VerifyRequest(session_id=f"after-{method}", tree=tree), timeout=30).outcome.tokens) == 1


@pytest.mark.parametrize("outcome, message", [
    (worker_pb2.Outcome(tokens=[VOCAB + 5]), f"outcome tokens outside the vocabulary [0, {VOCAB})"),
    (worker_pb2.Outcome(tokens=[-1]), "outside the vocabulary"),
    (worker_pb2.Outcome(tokens=[3], path=[1]), "got 1 tokens"),
    (worker_pb2.Outcome(tokens=[3, 4], path=[0]), "indices >= 1"),
])
def test_outcomes_a_session_could_not_embed_are_refused_and_the_session_goes_on(drafter_stub, outcome, message):
    stub = drafter_stub
    session = f"s{abs(hash(message)) % 10**6}"
    stub.Open(worker_pb2.OpenRequest(session_id=session, spec=_spec()), timeout=10)
    plan = worker_pb2.DraftRequest(session_id=session, shape=worker_pb2.Tree(parents=[-1, 0, 0]))
    stub.Draft(plan, timeout=10)
    for call in (lambda: stub.Commit(worker_pb2.CommitRequest(session_id=session, outcome=outcome), timeout=10),
                 lambda: stub.Draft(worker_pb2.DraftRequest(session_id=session, shape=plan.shape, previous=outcome),
                                    timeout=10)):
        code, details = _status(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details
    # nothing was committed: a second draft with nothing new is refused, a good outcome drafts
    code, details = _status(lambda: stub.Draft(plan, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nothing new to draft from" in details
    good = worker_pb2.DraftRequest(session_id=session, shape=plan.shape, previous=worker_pb2.Outcome(tokens=[3]))
    assert len(stub.Draft(good, timeout=10).tree.tokens) == 3


def _drafter_told(stub, via, session, shape, outcome):
    """A drafter told `outcome` by a unary Commit (then a Draft), by a Draft's `previous`, or by
    either down a `Steps` stream: the tokens of the tree it drafts next, or the (status code,
    details) of its refusal."""
    commit = worker_pb2.CommitRequest(session_id=session, outcome=outcome)
    draft = worker_pb2.DraftRequest(session_id=session, shape=shape, previous=outcome)
    try:
        if via == "commit":
            stub.Commit(commit, timeout=30)
            draft.ClearField("previous")
        elif via.startswith("steps"):
            call = worker_pb2.DrafterCall(commit=commit) if via == "steps-commit" else worker_pb2.DrafterCall(draft=draft)
            result, = stub.Steps(iter([call]), timeout=30)
            if result.WhichOneof("result") == "error":
                return grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == result.error.code)), \
                    result.error.message
            if via == "steps-draft":
                return list(result.draft.tree.tokens)
            draft.ClearField("previous")
        return list(stub.Draft(draft, timeout=30).tree.tokens)
    except grpc.RpcError as error:
        return error.code(), error.details()


@pytest.mark.parametrize("via", ["commit", "draft", "steps-commit", "steps-draft"])
@pytest.mark.parametrize("case", ["skips a node", "other tokens", "past the tree", "no tree"])
def test_a_drafter_outcome_off_its_drafted_tree_is_refused_and_the_session_goes_on(drafter_stub, via, case):
    """The drafter's cache keeps the path's rows and its sequence the tokens, so an outcome that
    is no walk down the tree it drafted last left the two apart: every later draft was drawn
    after the wrong context (worse drafts, silently; the target's verification stays exact).
    Tokens beyond the path's and one are steps it sat out (`Outcome.then`), and are taken."""
    stub = drafter_stub
    shape = worker_pb2.Tree(parents=[-1, 0, 1])  # a chain of 2: node 1 forwarded, node 2 a leaf
    spec = _spec("greedy", temperature=0.0, prompt=(11, 5, 7, 40))
    session, clean = f"drafted-{via}-{case}", f"drafted-{via}-{case}-clean"
    trees = []
    for name in (session, clean):
        stub.Open(worker_pb2.OpenRequest(session_id=name, spec=spec), timeout=10)
        if case != "no tree":
            trees.append(list(stub.Draft(worker_pb2.DraftRequest(session_id=name, shape=shape), timeout=30).tree.tokens))
    drafted = trees[0][1:] if trees else [47, 48]
    path, tokens = {"skips a node": ([2], [drafted[1], 3]), "other tokens": ([1], [(drafted[0] + 1) % VOCAB, 3]),
                    "past the tree": ([1, 2, 3], drafted + [3, 4]), "no tree": ([1], [drafted[0], 3])}[case]
    code, details = _drafter_told(stub, via, session, shape, worker_pb2.Outcome(tokens=tokens, path=path))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert (f"a drafter's outcome takes a path down the tree it drafted last from its root, its nodes' tokens and at "
            f"least one token more; got path {path} and {len(tokens)} tokens") in details
    assert details.endswith("with no tree drafted since the last commit") == (case == "no tree")
    # nothing was committed: the session drafts as one never told it, after an outcome of the
    # tree's own (its first node accepted) with steps it sat out on top (more tokens than the path's and one)
    kept = worker_pb2.Outcome(tokens=[drafted[0], 3, 9, 12] if trees else [3, 9], path=[1] if trees else [])
    after = [_drafter_told(stub, via, name, shape, kept) for name in (session, clean)]
    assert isinstance(after[0], list) and len(after[0]) == 3 and after[0] == after[1]
    for name in (session, clean):
        stub.Release(worker_pb2.ReleaseRequest(session_id=name), timeout=10)


def test_a_drafter_session_refuses_an_outcome_of_no_tokens():
    """What the codec refuses on the wire, handed to a session in this process: nothing to
    commit, and a draft after it would prefill no tokens."""
    session = LocalDrafter(tiny_llama(vocab=VOCAB, seed=0)).open(codec.decode_spec(_spec()))
    with pytest.raises(ValueError, match=r"at least one token more; got path \[\] and 0 tokens"):
        session.commit(Outcome([], [], []))


@pytest.mark.parametrize("parents, tokens, path, scored", [
    ([-1], [], [], True),            # tokens beyond the path's and one: never in the cache
    ([-1, 0, 1], [7], [2], True),    # a path that skips node 1, above node 2
    ([-1, 0], [9], [1], True),       # node 1's token is not the one committed for it
    ([-1, 0], [7], [1], False),      # no tree scored since the last commit
])
def test_a_target_commit_off_the_scored_tree_is_refused_and_the_session_goes_on(target_server, parents, tokens,
                                                                                path, scored):
    """Score then Commit (a coordinator that verifies itself): the cache keeps the path's rows
    and the sequence its tokens, so a commit that is no walk down the scored tree would leave
    the two apart, and every later step's law would be scored after the wrong context."""
    _, stub, _ = target_server
    session = f"commit-{len(parents)}-{path}-{scored}-{len(tokens)}"
    spec = _spec("greedy", temperature=0.0, prompt=(11, 5, 7, 40))
    stub.Open(worker_pb2.OpenRequest(session_id=session, spec=spec), timeout=10)
    tree = worker_pb2.Tree(parents=parents, tokens=[40, 7, 8][: len(parents)])
    if scored:
        stub.Score(worker_pb2.ScoreRequest(session_id=session, tree=tree), timeout=30)
    emitted = tokens + [3] if path else [3, 4, 5]
    outcome = worker_pb2.Outcome(tokens=emitted, path=path)
    code, details = _status(lambda: stub.Commit(worker_pb2.CommitRequest(session_id=session, outcome=outcome),
                                                timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "a commit takes a path down the tree scored last" in details

    def greedy(session_id, last):
        tokens = []
        for _ in range(4):
            reply = stub.Verify(worker_pb2.VerifyRequest(session_id=session_id, tree=worker_pb2.Tree(
                parents=[-1], tokens=[last])), timeout=30)
            last = reply.outcome.tokens[-1]
            tokens.append(last)
        return tokens

    stub.Open(worker_pb2.OpenRequest(session_id=session + "-clean", spec=spec), timeout=10)
    assert greedy(session, 40) == greedy(session + "-clean", 40)  # nothing was committed
    for name in (session, session + "-clean"):
        stub.Release(worker_pb2.ReleaseRequest(session_id=name), timeout=10)


def test_dynamic_plans_are_capped_by_their_work(drafter_stub):
    stub = drafter_stub
    stub.Open(worker_pb2.OpenRequest(session_id="dynamic", spec=_spec()), timeout=10)
    request = worker_pb2.DraftRequest(session_id="dynamic", dynamic=worker_pb2.DynamicPlan(budget=8, depth=6, top_k=2048))
    code, details = _status(lambda: stub.Draft(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "asks for 25165824 nodes of work" in details


@pytest.fixture(scope="module")
def full_target():
    """A target worker with room for two sessions, both open."""
    target = _CountingTarget(tiny_llama(vocab=VOCAB, seed=0))
    server, port = serve_target(target, "127.0.0.1:0", max_sessions=2)
    stub = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    for session in ("a", "b"):
        stub.Open(worker_pb2.OpenRequest(session_id=session, spec=_spec()), timeout=10)
    yield target, stub, port
    server.stop(0)


def test_a_refused_open_costs_no_prefill(full_target):
    target, stub, _ = full_target
    assert target.opened == 2
    code, details = _status(lambda: stub.Open(worker_pb2.OpenRequest(session_id="a", spec=_spec()), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "session 'a' is already open" in details
    code, details = _status(lambda: stub.Open(worker_pb2.OpenRequest(session_id="c", spec=_spec()), timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "2 sessions open, the limit is 2" in details
    assert target.opened == 2


class _SlowTarget(LocalTarget):
    """Each verification takes 50 ms and is counted."""

    def __init__(self, model):
        super().__init__(model)
        self.steps = 0

    def open(self, spec):
        session, owner = super().open(spec), self
        verify = session.verify

        def slow_verify(draft):
            owner.steps += 1
            time.sleep(0.05)
            return verify(draft)

        session.verify = slow_verify
        return session


def _serve_one_slow_generation(monkeypatch, max_queued_requests: int):
    """A coordinator's Generation API running one generation at once over a `_SlowTarget`
    alone: (server, port, its line), the line caught as the coordinator makes it."""
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH
    from rayspec.engine.slots import SlotQueue
    from rayspec.rpc import coordinator

    made = []

    class Seen(SlotQueue):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(coordinator, "SlotQueue", Seen)
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    engine = SpeculativeEngine(_SlowTarget(tiny_llama(vocab=VOCAB, seed=0, context=256)), None, tokenizer=tokenizer)
    server, port = coordinator.serve_generation(engine, tokenizer, "127.0.0.1:0", max_concurrent_requests=1,
                                                max_queued_requests=max_queued_requests)
    [slots] = made
    return server, port, slots


def test_generations_past_the_cap_wait_for_a_slot_and_health_checks_still_answer(monkeypatch):
    """As the HTTP service's: a generation finding every slot taken waits in line for one
    (holding a server thread, of which the server has one per place in line), past the line
    it is refused; a call that ends while it waits leaves the line; health checks answer
    throughout."""
    from concurrent.futures import ThreadPoolExecutor

    from rayspec.client import Client, DeadlineExceededError, OverloadedError

    server, port, slots = _serve_one_slow_generation(monkeypatch, max_queued_requests=2)

    def waiting(count: int) -> None:
        deadline = time.monotonic() + 10
        while slots.waiting != count:
            assert time.monotonic() < deadline, f"{slots.waiting} calls wait, not {count}"
            time.sleep(0.02)

    try:
        with Client(f"127.0.0.1:{port}", timeout=30, retries=0) as client, ThreadPoolExecutor(2) as pool:
            running = client.stream([1, 2], max_tokens=200, seed=1)  # 10 s of steps
            next(running)
            with Client(f"127.0.0.1:{port}", timeout=1.0, retries=0) as impatient:
                leaving = pool.submit(impatient.generate, [1, 2], max_tokens=3, seed=1)
                waiting(1)
                queued = pool.submit(client.generate, [1, 2], max_tokens=3, seed=2)
                waiting(2)
                with pytest.raises(OverloadedError) as refused:
                    client.generate([1, 2], max_tokens=3, seed=3)
                assert str(refused.value).endswith(
                    "the service runs 1 generation at once, all of its slots are taken, and its queue is full: "
                    "2 requests wait for them (limits.max_queued_requests: 2); retry later")
                assert client.health() and client.health()
                with pytest.raises(DeadlineExceededError):
                    leaving.result()
                waiting(1)  # it left the line, and the call behind it is still in it
                assert not queued.done() and slots.free == 0
            running.close()
            assert queued.result(timeout=20).token_ids
        assert slots.free == 1 and slots.waiting == 0
    finally:
        server.stop(0)


def test_a_unary_generate_stops_when_its_caller_gives_up():
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH
    from rayspec.rpc.coordinator import serve_generation

    target = _SlowTarget(tiny_llama(vocab=VOCAB, seed=0, context=256))
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    server, port = serve_generation(SpeculativeEngine(target, None, tokenizer=tokenizer), tokenizer, "127.0.0.1:0")
    try:
        generation = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        request = generation_pb2.GenerateRequest(prompt_ids=[1, 2], max_tokens=200, seed=1)  # 10 s of steps
        code, _ = _status(lambda: generation.Generate(request, timeout=0.5))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.3)
        stopped_at = target.steps
        time.sleep(0.5)
        assert target.steps == stopped_at < 30
    finally:
        server.stop(0)


def test_generations_past_the_cap_are_refused_and_health_checks_still_answer():
    """The server's own cap counts every call: generations alone filled it, and health checks
    were the calls refused."""
    from transformers import AutoTokenizer

    from rayspec.client import Client, OverloadedError
    from rayspec.demo import TARGET_PATH
    from rayspec.rpc.coordinator import HEALTH_CHECK_THREADS, serve_generation

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    engine = SpeculativeEngine(_SlowTarget(tiny_llama(vocab=VOCAB, seed=0, context=256)), None, tokenizer=tokenizer)
    server, port = serve_generation(engine, tokenizer, "127.0.0.1:0", max_concurrent_requests=2,
                                    max_queued_requests=0)
    running = []
    try:
        with Client(f"127.0.0.1:{port}", timeout=30, retries=0) as client:
            for _ in range(2 + HEALTH_CHECK_THREADS):
                try:
                    stream = client.stream([1, 2], max_tokens=200, seed=1)  # 10 s of steps each
                    next(stream)
                    running.append(stream)
                except OverloadedError as error:
                    assert str(error).endswith("the service runs 2 generations at once, all of its slots are taken, "
                                               "and it queues no request (limits.max_queued_requests: 0); "
                                               "retry later")
            assert len(running) == 2
            assert client.health() and client.health()
            for stream in running:
                stream.close()
            deadline = time.monotonic() + 5
            while engine.decoding and time.monotonic() < deadline:
                time.sleep(0.02)
            assert client.generate([1, 2], max_tokens=3, seed=1).token_ids  # the slots were given back
    finally:
        server.stop(0)


def test_in_a_storm_of_generations_past_the_line_every_health_check_is_answered(monkeypatch):
    """One generation runs and one waits (the line is full); 96 callers then ask for more as
    fast as they can while two probes check health.  Each generation asked for is refused by
    the line, with its message, and each health check answers SERVING: grpc's own cap on
    calls at once counted every call, so that in such a storm it refused callers and health
    checks alike ('Concurrent RPC limit exceeded!', 23 and 1 in 5 s of 120 callers)."""
    from rayspec.rpc.generated import health_pb2, health_pb2_grpc

    server, port, slots = _serve_one_slow_generation(monkeypatch, max_queued_requests=1)
    answers, checks, stop = [], [], threading.Event()

    def ask(call, into):
        while not stop.is_set():
            try:
                call()
                into.append("answered")
            except grpc.RpcError as error:
                into.append((error.code(), error.details()))

    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            generation, health = generation_pb2_grpc.GenerationStub(channel), health_pb2_grpc.HealthStub(channel)
            long = generation_pb2.GenerateRequest(prompt_ids=[1, 2], max_tokens=200, seed=1)  # 10 s of steps
            running = generation.GenerateStream(long, timeout=60)
            next(running)
            queued = generation.GenerateStream(long, timeout=60)
            deadline = time.monotonic() + 10
            while slots.waiting != 1:
                assert time.monotonic() < deadline, "the second generation did not queue"
                time.sleep(0.02)
            more = generation_pb2.GenerateRequest(prompt_ids=[1, 2], max_tokens=1, seed=2)
            callers = [threading.Thread(target=ask, args=(lambda: generation.Generate(more, timeout=10), answers))
                       for _ in range(96)]
            probes = [threading.Thread(target=ask, args=(
                lambda: health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10), checks)) for _ in range(2)]
            for thread in callers + probes:
                thread.start()
            time.sleep(3)
            stop.set()
            for thread in callers + probes:
                thread.join()
            running.cancel()
            queued.cancel()
    finally:
        server.stop(0)
    line_full = "all of its slots are taken, and its queue is full: 1 request waits for them"
    others = {answer for answer in answers
              if not (isinstance(answer, tuple) and answer[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
                      and line_full in answer[1])}
    assert answers and not others, sorted(others, key=str)[:3]
    assert checks and set(checks) == {"answered"}, [check for check in checks if check != "answered"][:3]


def test_a_coordinator_whose_compilers_are_all_busy_answers_resource_exhausted(monkeypatch):
    """A structured request that waited out COMPILE_SECONDS for a compiler is the service's
    capacity: RESOURCE_EXHAUSTED (the SDK's OverloadedError, retry later), not
    INVALID_ARGUMENT — the same request is fine once a compiler is free."""
    from transformers import AutoTokenizer

    from rayspec.client import Client, OverloadedError
    from rayspec.demo import DRAFTER_PATH, TARGET_PATH
    from rayspec.engine import structured
    from rayspec.models import load_causal_lm
    from rayspec.rpc.coordinator import serve_generation

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    engine = SpeculativeEngine(LocalTarget(load_causal_lm(TARGET_PATH, "cpu")[0], tokenizer),
                               LocalDrafter(load_causal_lm(DRAFTER_PATH, "cpu")[0], tokenizer), tokenizer=tokenizer)
    compilers = threading.BoundedSemaphore(1)
    monkeypatch.setattr(structured, "_COMPILERS", compilers)
    monkeypatch.setattr(structured, "MAX_COMPILERS", 1)
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 0.5)
    compilers.acquire()
    server, port = serve_generation(engine, tokenizer, "127.0.0.1:0")
    try:
        with Client(f"127.0.0.1:{port}", timeout=30) as client:
            request = dict(max_tokens=4, seed=1, structured_output={"regex": "(auk|owl)+"})
            with pytest.raises(OverloadedError, match="waited 0.5 s for one of the 1 compilers") as refused:
                client.generate("Birds:", **request)
            assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            compilers.release()
            assert client.generate("Birds:", **request).text
    finally:
        server.stop(0)


def test_a_coordinator_reports_a_full_or_missing_worker_with_its_status(full_target):
    from rayspec.rpc.coordinator import serve_generation

    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH

    _, _, port = full_target
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    engine = SpeculativeEngine(RemoteTarget(f"127.0.0.1:{port}"), None, tokenizer=tokenizer)
    server, coordinator = serve_generation(engine, tokenizer, "127.0.0.1:0")
    try:
        generation = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(f"127.0.0.1:{coordinator}"))
        code, details = _status(lambda: generation.Generate(generation_pb2.GenerateRequest(prompt_ids=[1, 2]), timeout=30))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "the limit is 2" in details
    finally:
        server.stop(0)
    assert status_of(RemoteError("UNAVAILABLE: connection refused"), "test")[0] == grpc.StatusCode.UNAVAILABLE
    gone = RemoteError("DEADLINE_EXCEEDED: target did not answer", grpc.StatusCode.DEADLINE_EXCEEDED)
    assert status_of(gone, "test") == (grpc.StatusCode.UNAVAILABLE, "a model worker failed: DEADLINE_EXCEEDED: target did not answer")
    fault = RemoteError("INTERNAL: RuntimeError: CUDA error", grpc.StatusCode.INTERNAL)
    assert status_of(fault, "test") == (grpc.StatusCode.INTERNAL,
                                        "a model worker failed: INTERNAL: RuntimeError: CUDA error")


def test_idle_sessions_are_closed_even_when_no_request_comes():
    """A coordinator killed mid-request never releases its sessions: the worker must free their
    caches after `idle_seconds` by itself, not wait for the next Open to notice."""
    closed = []

    class Target(LocalTarget):
        def open(self, spec):
            session = super().open(spec)
            close = session.close
            session.close = lambda: (close(), closed.append(time.monotonic()))
            return session

    server, port = serve_target(Target(tiny_llama(vocab=VOCAB, seed=0)), "127.0.0.1:0", idle_seconds=0.4)
    try:
        stub = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        asked = time.monotonic()  # the session's idle clock starts in the server, before the reply comes back
        stub.Open(worker_pb2.OpenRequest(session_id="orphan", spec=_spec()), timeout=10)
        deadline = time.monotonic() + 10
        while not closed and time.monotonic() < deadline:
            stub.Release(worker_pb2.ReleaseRequest(session_id="unknown"), timeout=10)  # traffic, but no Open
            time.sleep(0.05)
        assert closed, "the idle sessions were never closed"
        assert closed[0] - asked >= 0.4
        code, details = _status(lambda: stub.Commit(
            worker_pb2.CommitRequest(session_id="orphan", outcome=worker_pb2.Outcome(tokens=[3])), timeout=10))
        assert code == grpc.StatusCode.NOT_FOUND and "no open session 'orphan'" in details
    finally:
        server.stop(0)
    with pytest.raises(ValueError, match="idle_seconds must be positive"):
        serve_target(LocalTarget(tiny_llama(vocab=VOCAB, seed=0)), "127.0.0.1:0", idle_seconds=0)


def test_trees_reaching_past_the_models_context_are_refused_and_the_session_goes_on(target_server, drafter_stub):
    """Positions past the context have no embedding in models with learned positions (on a
    GPU, a device-side assert that ends the worker): both workers refuse such trees up front."""
    _, target, _ = target_server
    prompt = (11, 5, 7, 40)  # the tiny models' context holds 128 positions
    target.Open(worker_pb2.OpenRequest(session_id="deep", spec=_spec("greedy", temperature=0.0)), timeout=10)
    drafter_stub.Open(worker_pb2.OpenRequest(session_id="deep", spec=_spec("greedy", temperature=0.0)), timeout=10)

    def chain(depth):
        return worker_pb2.Tree(parents=[-1, *range(depth)], tokens=[prompt[-1], *[3] * depth])

    code, details = _status(lambda: target.Verify(worker_pb2.VerifyRequest(session_id="deep", tree=chain(125)),
                                                  timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "a tree 125 levels deep after 4 tokens reaches position 128; this model's context holds 128" in details
    assert len(target.Verify(worker_pb2.VerifyRequest(session_id="deep", tree=chain(124)), timeout=30).outcome.tokens) >= 1

    plan = worker_pb2.DraftRequest(session_id="deep", shape=worker_pb2.Tree(parents=[-1, *range(125)]))
    code, details = _status(lambda: drafter_stub.Draft(plan, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "a tree 125 levels deep after 4 tokens" in details
    plan.shape.parents.pop()
    assert len(drafter_stub.Draft(plan, timeout=30).tree.tokens) == 125


def test_a_drafter_worker_tells_its_own_context(drafter_stub):
    info = drafter_stub.Info(worker_pb2.InfoRequest(), timeout=10)
    assert (info.model_id, info.vocab_size, info.context_length, info.device) == ("drafter", VOCAB, 128, "cpu")


def test_info_counts_the_sessions_a_worker_holds_until_they_are_released(target_server, drafter_stub):
    """`WorkerInfo.open_sessions`: what an operator (and the soak bench) reads to see that every
    released sequence left the worker: a refused Open adds none, a Release of an unknown id
    takes none away."""
    _, target, _ = target_server
    stubs = {"target": target, "drafter": drafter_stub}

    def held() -> dict:
        return {role: stub.Info(worker_pb2.InfoRequest(), timeout=10).open_sessions for role, stub in stubs.items()}

    before = held()
    for stub in stubs.values():
        for session in ("counted-a", "counted-b"):
            stub.Open(worker_pb2.OpenRequest(session_id=session, spec=_spec()), timeout=10)
        assert _status(lambda: stub.Open(worker_pb2.OpenRequest(session_id="counted-a", spec=_spec()), timeout=10))[0] \
            == grpc.StatusCode.INVALID_ARGUMENT
    assert held() == {role: count + 2 for role, count in before.items()}
    for stub in stubs.values():
        stub.Release(worker_pb2.ReleaseRequest(session_id="counted-a"), timeout=10)
        stub.Release(worker_pb2.ReleaseRequest(session_id="never-opened"), timeout=10)
    assert held() == {role: count + 1 for role, count in before.items()}
    for stub in stubs.values():
        stub.Release(worker_pb2.ReleaseRequest(session_id="counted-b"), timeout=10)
    assert held() == before


def test_info_tells_the_targets_prefix_cache_bytes_and_the_tokens_asked_about_and_found(target_server):
    target, stub, _ = target_server

    def cache() -> tuple[int, int, int]:
        info = stub.Info(worker_pb2.InfoRequest(), timeout=10)
        return info.prefix_cache_bytes, info.prefix_cache_queried_tokens, info.prefix_cache_hit_tokens

    before, queried, hit = cache()
    assert before == target.prefix_cache.nbytes
    stub.Open(worker_pb2.OpenRequest(session_id="cached", spec=_spec(prompt=range(1, 41))), timeout=10)
    stub.Release(worker_pb2.ReleaseRequest(session_id="cached"), timeout=10)  # its prompt's rows are kept
    assert cache()[0] == target.prefix_cache.nbytes > before
    # a target prefills a prompt but its last token (its first tree's root), asking its cache
    # about all but the last of those (whose logits it wants): 38 tokens, then 43, of which
    # the 39 the first prompt left in the cache are found
    stub.Open(worker_pb2.OpenRequest(session_id="reusing", spec=_spec(prompt=[*range(1, 41), 2, 3, 4, 5, 6])),
              timeout=10)
    stub.Release(worker_pb2.ReleaseRequest(session_id="reusing"), timeout=10)
    _, queried_now, hit_now = cache()
    assert (queried_now - queried, hit_now - hit) == (38 + 43, 39)


@pytest.mark.parametrize("raw", [b"\xff\xff\xff\xff", b"\x0a\x10ab", b"\x0a\x02\xff\xfe"])
def test_bytes_that_are_no_message_are_invalid_argument_and_the_server_goes_on(target_server, raw):
    """Undecodable requests, unary or in a stream, are the caller's error (INVALID_ARGUMENT,
    naming the message type), not gRPC's INTERNAL "Exception deserializing request!"."""
    _, stub, port = target_server
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    identity = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
    open_call = channel.unary_unary("/rayspec.v1.TargetService/Open", **identity)
    code, details = _status(lambda: open_call(raw, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("the request is not a valid rayspec.v1.OpenRequest message: Error parsing message")
    steps = channel.stream_stream("/rayspec.v1.TargetService/Steps", **identity)
    code, details = _status(lambda: list(steps(iter([raw]), timeout=10)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid rayspec.v1.TargetCall message" in details
    assert stub.Info(worker_pb2.InfoRequest(), timeout=10).vocab_size == VOCAB


def test_method_names_a_caller_makes_up_are_not_kept_by_the_server():
    """Every call names its method: a server keeps the wrapped handlers of its own methods, not
    one per unknown name a caller sends (each UNIMPLEMENTED), which would grow it without bound."""
    interceptor = RefuseUndecodable()
    known = grpc.unary_unary_rpc_method_handler(lambda request, context: request,
                                                request_deserializer=worker_pb2.InfoRequest.FromString)

    def continuation(details):
        return known if details.method == "/rayspec.v1.TargetService/Info" else None

    def call(method):
        return interceptor.intercept_service(continuation, SimpleNamespace(method=method))

    for index in range(1000):
        assert call(f"/made.Up/Method{index}") is None
    first = call("/rayspec.v1.TargetService/Info")
    assert first is not None and call("/rayspec.v1.TargetService/Info") is first  # built once
    assert len(interceptor._wrapped) == 1


def _tracking(worker, open_seconds: float = 0.0, late_draft: tuple[int, float] | None = None):
    """The sessions `worker` (a local target or drafter) opens and those it closes, in two
    lists; its Opens take `open_seconds` more after their prefill (one whose caller left before
    it began stops there), and with `late_draft` = (n, seconds) the n-th draft of a session
    that many seconds more."""
    opened, closed = [], []
    open_ = worker.open

    def open(spec):
        session = open_(spec)
        time.sleep(open_seconds)
        close, draft, drafts = session.close, getattr(session, "draft", None), []
        session.close = lambda: (close(), closed.append(session))
        if late_draft is not None:
            def slow_draft(shape, previous):
                drafts.append(shape)
                if len(drafts) == late_draft[0]:
                    time.sleep(late_draft[1])
                return draft(shape, previous)
            session.draft = slow_draft
        opened.append(session)
        return session

    worker.open = open
    return opened, closed


def _eventually(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@contextmanager
def _open_past_its_deadline(role: str, open_seconds: float = 0.0):
    """A worker of `role` ("target" or "drafter") whose Open a remote handle calls with a 0.3-s
    deadline, which it misses; yields the sessions the worker opened and those it closed."""
    model = tiny_llama(vocab=VOCAB, seed=0)
    worker = LocalTarget(model) if role == "target" else LocalDrafter(model)
    opened, closed = _tracking(worker, open_seconds=open_seconds)
    server, port = (serve_target if role == "target" else serve_drafter)(worker, "127.0.0.1:0")
    try:
        address = f"127.0.0.1:{port}"
        remote = RemoteTarget(address, timeout=0.3) if role == "target" else RemoteDrafter(address, VOCAB, timeout=0.3)
        spec = SequenceSpec((11, 5, 7, 40), SamplingParams(temperature=1.0), seed=3, verifier="rrsw")
        with pytest.raises(RemoteError, match="DEADLINE_EXCEEDED"):
            remote.open(spec)
        yield opened, closed
        remote.close()
    finally:
        server.stop(0)


class _SlowOpen(_CountingTarget):
    """Opens a prompt that starts with token 1 in a second, any other in a tenth of one."""

    def open(self, spec):
        time.sleep(1.0 if spec.prompt_ids[0] == 1 else 0.1)
        return super().open(spec)


def test_an_id_opened_again_while_its_released_open_still_runs_is_the_second_opens():
    """A session id released while its Open prefills is free at once, so it can be opened again
    before the first Open ends: that one's session is then closed, and the id stays the second
    Open's (the first took its place and dropped it unclosed, and the id's calls went to the
    first prompt's session)."""
    target = _SlowOpen(tiny_llama(vocab=VOCAB, seed=0))
    server, port = serve_target(target, "127.0.0.1:0")
    try:
        stub = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        first = threading.Thread(target=lambda: stub.Open(worker_pb2.OpenRequest(
            session_id="again", spec=_spec("greedy", 0.0, prompt=(1, 2, 3))), timeout=10))
        first.start()
        time.sleep(0.4)
        stub.Release(worker_pb2.ReleaseRequest(session_id="again"), timeout=10)
        stub.Open(worker_pb2.OpenRequest(session_id="again", spec=_spec("greedy", 0.0, prompt=(5, 6, 7))), timeout=10)
        first.join(10)
        step = worker_pb2.VerifyRequest(session_id="again", tree=worker_pb2.Tree(parents=[-1], tokens=[7]))
        assert len(stub.Verify(step, timeout=30).outcome.tokens) == 1  # the second prompt's session
        by_prompt = {session.tokens[0]: session for session in target.sessions}
        assert by_prompt[1].lm is None and by_prompt[5].lm is not None  # the first closed, the second open
    finally:
        server.stop(0)


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_a_session_whose_open_outlived_its_deadline_is_released(role):
    """The worker finishes an Open its caller stopped waiting for; the caller, not knowing
    whether it did, releases the session, or it would hold a KV cache and a session slot until
    the idle expiry (and a client retrying such requests one more each time)."""
    with _open_past_its_deadline(role, open_seconds=0.6) as (opened, closed):
        assert _eventually(lambda: len(closed) == 1), f"{len(opened)} opened, {len(closed)} released"
        assert closed == opened


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_an_open_that_begins_after_its_caller_left_keeps_no_session(role, monkeypatch):
    """An Open queued past its deadline (a busy worker) reaches the servicer after the caller's
    Release did: the servicer, seeing its caller gone, keeps no session and spares the prefill."""
    from rayspec.rpc.worker import DrafterServicer, TargetServicer

    servicer_type = TargetServicer if role == "target" else DrafterServicer
    open_ = inspect.unwrap(servicer_type.Open)

    @rpc_errors
    def late_open(self, request, context):
        time.sleep(0.6)  # waiting for a thread of the worker
        return open_(self, request, context)

    monkeypatch.setattr(servicer_type, "Open", late_open)
    with _open_past_its_deadline(role) as (opened, closed):
        time.sleep(0.8)  # the Open has run by now
        assert opened == [] and closed == []


def test_a_drafter_session_lost_to_a_late_draft_is_released():
    """A draft past its deadline loses the sequence its drafts, not the drafter its session: the
    worker is alive, only late, and the coordinator releases the session without waiting."""
    model = tiny_llama(vocab=VOCAB, seed=0)
    drafter = LocalDrafter(model)
    opened, closed = _tracking(drafter, late_draft=(3, 0.8))
    server, port = serve_drafter(drafter, "127.0.0.1:0")
    try:
        remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=30, draft_timeout=0.3, retry_after=0.01)
        engine = SpeculativeEngine(LocalTarget(model), remote, verifier="gumbel", tree="chain:2")
        for seed in (1, 2):
            run = engine.run([11, 5, 7, 40], max_new_tokens=16, temperature=1.0, seed=seed)
            assert "did not answer within 0.3 s" in run.stats.drafter_lost
        # A slow machine may decode past the drafter's retry time and open a session more.
        assert _eventually(lambda: len(closed) == len(opened) >= 2), f"{len(opened)} opened, {len(closed)} released"
        assert {id(session) for session in closed} == {id(session) for session in opened}
        remote.close()
    finally:
        server.stop(0)


class _PrefillUntilLeft(LocalTarget):
    """A target whose prefill takes until its caller leaves (or 20 s): what it saw, in `seen`."""

    def __init__(self, model):
        super().__init__(model)
        self.seen = []

    def open(self, spec):
        deadline = time.monotonic() + 20
        while not caller_left() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.seen.append("left" if caller_left() else "stayed")
        return super().open(spec)


def test_a_client_that_leaves_during_its_prefill_cancels_the_workers_open():
    """The engine's client leaves while a remote target prefills: the engine's Open call is
    cancelled at once rather than waited for, and the worker's prefill learns it (there it
    leaves the model's queue, or stops between chunks: `tests/models/test_cancellation.py`)."""
    target = _PrefillUntilLeft(tiny_llama(vocab=VOCAB, seed=0))
    opened, closed = _tracking(target)
    server, port = serve_target(target, "127.0.0.1:0")
    remote = RemoteTarget(f"127.0.0.1:{port}", timeout=30)
    try:
        cancelled = threading.Event()
        threading.Timer(0.3, cancelled.set).start()
        started = time.monotonic()
        with pytest.raises(GenerationCancelled, match="^its caller left while its prompt was prefilled$"):
            list(SpeculativeEngine(remote, None).generate([11, 5, 7, 40], max_new_tokens=4, cancelled=cancelled))
        assert time.monotonic() - started < 2.0
        assert _eventually(lambda: target.seen == ["left"]), target.seen
        assert _eventually(lambda: closed == opened), (len(opened), len(closed))
    finally:
        remote.close()
        server.stop(0)


def _hanging(worker, method: str, at_call: int, release: threading.Event):
    """`worker`'s sessions' `method` ("verify" or "draft") hangs at its `at_call`-th call
    (counted over all sessions) until `release` is set: a worker alive but stuck."""
    calls, open_ = [], worker.open

    def open(spec):
        session = open_(spec)
        original = getattr(session, method)

        def hanging(*args):
            calls.append(method)
            if len(calls) == at_call:
                release.wait(30)
            return original(*args)

        setattr(session, method, hanging)
        return session

    worker.open = open
    return calls


@pytest.mark.parametrize("streams", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("role", ["target", "drafter"])
def test_a_client_that_leaves_while_a_worker_hangs_ends_its_generation_at_once(role, streams):
    """A worker that stops answering under a step — a target's verify, or a drafter's first
    draft (which prefills the prompt, under the call's 60-s deadline) — while the engine's
    client leaves: the generation ends with `GenerationCancelled` within the call watchdog's
    period (or a unary call's poll), not at the deadline, and the session is released without
    waiting for the worker."""
    model = tiny_llama(vocab=VOCAB, seed=0)
    release = threading.Event()
    worker = LocalTarget(model) if role == "target" else LocalDrafter(model)
    _hanging(worker, "verify" if role == "target" else "draft", 2 if role == "target" else 1, release)
    opened, closed = _tracking(worker)
    server, port = (serve_target if role == "target" else serve_drafter)(worker, "127.0.0.1:0")
    remote = (RemoteTarget(f"127.0.0.1:{port}", timeout=60, streams=streams) if role == "target"
              else RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=60, streams=streams))
    engine = (SpeculativeEngine(remote, LocalDrafter(model), verifier="gumbel", tree="chain:2") if role == "target"
              else SpeculativeEngine(LocalTarget(model), remote, verifier="gumbel", tree="chain:2"))
    cancelled = threading.Event()
    try:
        stream = engine.generate([11, 5, 7, 40], max_new_tokens=24, temperature=1.0, seed=3, ignore_eos=True,
                                 cancelled=cancelled)
        if role == "target":
            next(stream)  # a first step verified: the second hangs
        threading.Timer(0.5, cancelled.set).start()
        started = time.monotonic()
        with pytest.raises(GenerationCancelled, match=f"^its caller left while it waited for {role} 127.0.0.1:{port}$"):
            next(stream)
        assert 0.4 < time.monotonic() - started < 2.0
        assert engine.decoding == 0
        release.set()
        assert _eventually(lambda: len(closed) == len(opened) == 1), (len(opened), len(closed))
    finally:
        release.set()
        remote.close()
        server.stop(0)


class _Context:
    """A servicer context whose call is, or is no longer, `active`; abort raises as gRPC's does."""

    def __init__(self, active: bool):
        self.active, self.aborted = active, None

    def is_active(self):
        return self.active

    def abort(self, code, details):
        self.aborted = (code, details)
        raise grpc.RpcError(details)


@pytest.mark.parametrize("active", [True, False])
def test_a_failure_after_the_call_ended_is_no_internal_error(active, caplog):
    """A handler failing after its call ended (the client left, its deadline passed, or the
    server stopping while its process exits under a calibration) has nobody to read a status:
    it is CANCELLED and an INFO line, not an internal error's traceback in the log."""
    class Servicer:
        def check_size(self, request):
            pass

        @rpc_errors
        def Open(self, request, context):
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    context = _Context(active)
    with caplog.at_level(logging.INFO, logger="rayspec.rpc"), pytest.raises(grpc.RpcError):
        Servicer().Open(None, context)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    if active:
        assert context.aborted[0] == grpc.StatusCode.INTERNAL and errors
    else:
        assert context.aborted == (grpc.StatusCode.CANCELLED, "the call ended before its answer") and not errors
        assert any("Open ended after its call did: RuntimeError" in r.getMessage() for r in caplog.records)


def test_a_target_worker_scores_a_prompt_that_fills_its_context_and_a_drafter_takes_none(target_server, drafter_stub):
    """A prompt of the context's length is scored over gRPC as in-process (the target worker
    refused to open it); a drafter, which would draft after it, still refuses it."""
    model, _, port = target_server
    full = [(7 * i + 3) % VOCAB for i in range(128)]  # the tiny models' context holds 128 positions
    scored = SpeculativeEngine(RemoteTarget(f"127.0.0.1:{port}")).prompt_logprobs(full, top=1)
    assert scored.chosen == pytest.approx(SpeculativeEngine(LocalTarget(model.model)).prompt_logprobs(full).chosen,
                                          abs=1e-5)
    code, details = _status(lambda: drafter_stub.Open(worker_pb2.OpenRequest(session_id="full", spec=_spec(
        prompt=full)), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "the prompt has 128 tokens; the context holds 128" in details


def test_the_plain_coordinators_limits_are_its_flags_and_its_refusal_names_them():
    """`python -m rayspec.rpc.worker --role coordinator` takes `--max-concurrent-requests` and
    `--max-queued-requests` (`serve_generation_from_workers`), and a full line's refusal names
    the flag, not a YAML setting that process has not got."""
    from transformers import AutoTokenizer

    from rayspec.client import Client, OverloadedError
    from rayspec.demo import TARGET_PATH
    from rayspec.rpc.coordinator import serve_generation_from_workers

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    target = _SlowTarget(tiny_llama(vocab=VOCAB, seed=0, context=256))
    server, port = serve_generation_from_workers("127.0.0.1:0", target, None, tokenizer=tokenizer, tree="chain:0",
                                                 max_concurrent_requests=1, max_queued_requests=0)
    try:
        with Client(f"127.0.0.1:{port}", timeout=30, retries=0) as client:
            stream = client.stream([1, 2], max_tokens=200, seed=1)  # 10 s of steps
            next(stream)
            with pytest.raises(OverloadedError) as refused:
                client.generate([1, 2], max_tokens=3, seed=3)
            assert str(refused.value).endswith("the service runs 1 generation at once, all of its slots are taken, "
                                               "and it queues no request (--max-queued-requests: 0); retry later")
            stream.cancel()
    finally:
        server.stop(0)
