"""Sessions of real target and drafter workers driven by calls hypothesis makes up: trees of any
shape over any tokens, q rows that fit or not, outcomes that follow the scored tree or not,
verifiers and sampling settings valid or not.  Every call is answered, or refused with
INVALID_ARGUMENT (or NOT_FOUND for a session that is gone) and a message — never INTERNAL —
and a session that refused a call goes on: a valid step after it is answered.  gRPC servers in
this process, over a tiny random model."""

from __future__ import annotations

import uuid

import grpc
import msgpack
import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rayspec.engine import LocalDrafter, LocalTarget
from rayspec.rpc import codec
from rayspec.rpc.generated import worker_pb2, worker_pb2_grpc
from rayspec.rpc.worker import serve_drafter, serve_target
from rayspec.verify import available_verifiers
from tests.fuzzing import EXAMPLES, fuzz_settings
from tests.tiny_models import tiny_llama

VOCAB, CONTEXT = 64, 64
FUZZ = fuzz_settings(EXAMPLES)
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


@pytest.fixture(scope="module")
def workers():
    model = tiny_llama(vocab=VOCAB, seed=0, context=CONTEXT)
    target_server, target_port = serve_target(LocalTarget(model), "127.0.0.1:0")
    drafter_server, drafter_port = serve_drafter(LocalDrafter(model), "127.0.0.1:0")
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for port in (target_port, drafter_port)]
    yield worker_pb2_grpc.TargetServiceStub(channels[0]), worker_pb2_grpc.DrafterServiceStub(channels[1])
    for channel in channels:
        channel.close()
    target_server.stop(None)
    drafter_server.stop(None)


tokens = st.one_of(st.integers(0, VOCAB - 1), st.integers(-2, VOCAB + 2))
floats32 = st.one_of(st.floats(0.0, 2.0, width=32), st.floats(width=32),
                     st.sampled_from([1e-45, 1.17549435e-38, 3.4028234e38]))


@st.composite
def specs(draw):
    """A SequenceSpec: valid three times in four (a known verifier with parameters of its own,
    settings in range, a short prompt over the vocabulary), else with one part made up."""
    params = worker_pb2.SamplingParams(temperature=draw(st.floats(0.0, 2.0, width=32)), top_p=1.0,
                                       top_k=draw(st.integers(0, VOCAB)))
    verifier = draw(st.sampled_from(available_verifiers()))
    prompt = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12))
    verifier_params: dict = {}
    if draw(st.integers(0, 3)) == 0:
        spoil = draw(st.sampled_from(["verifier", "params", "temperature", "top_p", "top_k", "penalty", "prompt"]))
        if spoil == "verifier":
            verifier = draw(st.text(max_size=6))
        elif spoil == "params":
            verifier_params = draw(st.dictionaries(st.sampled_from(["kl_budget", "alphabet_size", "free_tokens", "x"]),
                                                   st.one_of(st.integers(-2, 50), st.floats(-1, 2), st.booleans()),
                                                   min_size=1, max_size=2))
        elif spoil == "top_k":
            params.top_k = draw(st.integers(-2**31, 2**31 - 1))
        elif spoil == "penalty":
            params.repetition_penalty = draw(floats32)
        elif spoil == "prompt":
            prompt = draw(st.lists(tokens, min_size=0, max_size=CONTEXT + 2))
        else:
            setattr(params, spoil, draw(floats32))
    return worker_pb2.SequenceSpec(prompt_ids=prompt, params=params, seed=draw(st.integers(0, 2**63 - 1)),
                                   verifier=verifier, verifier_params=msgpack.packb(verifier_params))


@st.composite
def trees(draw, root: int = 0, max_nodes: int = 8):
    """A Tree: nodes in breadth-first order over the vocabulary, rooted (mostly) at `root`, the
    sequence's last committed token; or a spoiled one."""
    size = draw(st.integers(1, max_nodes))
    parents = [-1]
    for node in range(1, size):
        parents.append(draw(st.integers(max(parents[-1], 0), node - 1)))
    drawn = draw(st.lists(tokens, min_size=size, max_size=size))
    if draw(st.integers(0, 3)):
        drawn[0] = root
    if draw(st.integers(0, 4)) == 0:
        parents[draw(st.integers(0, size - 1))] = draw(st.integers(-3, size + 2))
    return worker_pb2.Tree(parents=parents, tokens=drawn, predicted=draw(st.sampled_from([0, 0, 0, 1, 2])))


def q_rows(draw, tree: worker_pb2.Tree) -> worker_pb2.VerifyRequest:
    """Rows of the tree's internal nodes: a law over the vocabulary each, or the wrong count
    or width, or none."""
    internal = len({p for p in tree.parents if p >= 0})
    rows = draw(st.sampled_from([internal, internal, internal + 1, max(internal - 1, 0)]))
    width = draw(st.sampled_from([VOCAB, VOCAB, VOCAB - 1]))
    message = worker_pb2.VerifyRequest()
    if rows and draw(st.integers(0, 5)):
        weights = torch.rand(rows, width, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
        codec.encode_rows(weights / weights.sum(-1, keepdim=True), message.q_rows)
    return message


def _call(method, request, allowed=REFUSED):
    """Call; an answer, or None after a refusal with one of `allowed` and a message."""
    try:
        reply = method(request, timeout=60)
    except grpc.RpcError as error:
        event(f"refused {error.code().name}")
        assert error.code() in allowed, f"{method._method}: {error.code()} {error.details()}\n{request}"
        assert error.details()
        return None
    event("answered")
    return reply


@FUZZ
@given(data=st.data())
def test_made_up_target_sessions_are_answered_or_refused_never_internal(workers, data):
    target, _ = workers
    session_id = uuid.uuid4().hex
    spec = data.draw(specs())
    if _call(target.Open, worker_pb2.OpenRequest(session_id=session_id, spec=spec)) is None:
        return
    last = spec.prompt_ids[-1]  # the last committed token: the root of the next tree
    try:
        for _ in range(data.draw(st.integers(1, 4))):
            tree = data.draw(trees(last))
            kind = data.draw(st.sampled_from(["verify", "score", "commit"]))
            if kind == "verify":
                request = q_rows(data.draw, tree)
                request.session_id = session_id
                request.tree.CopyFrom(tree)
                reply = _call(target.Verify, request)
                last = reply.outcome.tokens[-1] if reply is not None else last
            elif kind == "score":
                _call(target.Score, worker_pb2.ScoreRequest(session_id=session_id, tree=tree))
            else:  # an outcome: a path down the tree, or any nodes, and one token more
                path = data.draw(st.lists(st.integers(-1, len(tree.parents) + 1), max_size=3))
                outcome = worker_pb2.Outcome(tokens=data.draw(st.lists(tokens, min_size=len(path) + 1,
                                                                       max_size=len(path) + 1)), path=path)
                if _call(target.Commit, worker_pb2.CommitRequest(session_id=session_id, outcome=outcome)) is not None:
                    last = outcome.tokens[-1]
        # the session goes on: a one-node tree (a target-only step) is answered, unless the
        # context is full
        step = worker_pb2.VerifyRequest(session_id=session_id, tree=worker_pb2.Tree(parents=[-1], tokens=[last]))
        try:
            target.Verify(step, timeout=60)
            event("went on")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "context" in error.details(), error.details()
            event("went on to the end of its context")
    finally:
        target.Release(worker_pb2.ReleaseRequest(session_id=session_id), timeout=10)


@FUZZ
@given(data=st.data())
def test_made_up_drafter_sessions_are_answered_or_refused_never_internal(workers, data):
    _, drafter = workers
    session_id = uuid.uuid4().hex
    if _call(drafter.Open, worker_pb2.OpenRequest(session_id=session_id, spec=data.draw(specs()))) is None:
        return
    try:
        for _ in range(data.draw(st.integers(1, 4))):
            request = worker_pb2.DraftRequest(session_id=session_id)
            if data.draw(st.booleans()):
                request.shape.CopyFrom(data.draw(trees()))
            else:
                request.dynamic.CopyFrom(worker_pb2.DynamicPlan(budget=data.draw(st.integers(-1, 40)),
                                                                depth=data.draw(st.integers(-1, 6)),
                                                                top_k=data.draw(st.integers(-1, 6))))
            if data.draw(st.booleans()):  # what the last step emitted: any path, any tokens
                path = data.draw(st.lists(st.integers(-1, 10), max_size=3))
                request.previous.CopyFrom(worker_pb2.Outcome(
                    path=path, tokens=data.draw(st.lists(tokens, min_size=len(path) + 1, max_size=len(path) + 1))))
            _call(drafter.Draft, request)
    finally:
        drafter.Release(worker_pb2.ReleaseRequest(session_id=session_id), timeout=10)
