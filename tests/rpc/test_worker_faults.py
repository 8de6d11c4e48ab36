"""A worker that sends a coordinator what does not fit (q rows of another width, an outcome
off the tree it verified, too few node samples) fails the step as the service's fault,
INTERNAL, never as the request's (INVALID_ARGUMENT, which a client is shown as a 400).  Real
gRPC servers in this process, over tiny random models."""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.rpc.server import RemoteError, status_of
from rayspec.rpc.worker import serve_drafter, serve_target
from tests.rpc.conftest import TINY_VOCAB

VOCAB = TINY_VOCAB  # the `pair` fixture's (conftest)
PROMPT = [11, 5, 7, 40]


class _SessionsAltered:
    """A model handle whose sessions' `method` results pass through `alter` first."""

    method = ""

    def alter(self, result):
        raise NotImplementedError

    def open(self, spec):
        session = super().open(spec)
        original = getattr(session, self.method)
        setattr(session, self.method, lambda *args: self.alter(original(*args)))
        return session


class NarrowRows(_SessionsAltered, LocalDrafter):
    """Drafts whose q rows lack the vocabulary's last column."""

    method = "draft"

    def alter(self, draft):
        return replace(draft, q_rows=draft.q_rows[:, :-1].contiguous(), q_divisors=None)


class OffTheTree(_SessionsAltered, LocalTarget):
    """Outcomes whose first emitted token is not the one the accepted node holds."""

    method = "verify"

    def alter(self, outcome):
        if outcome.path:
            outcome.tokens = [(outcome.tokens[0] + 1) % VOCAB, *outcome.tokens[1:]]
        return outcome


class FewSamples(_SessionsAltered, LocalTarget):
    """A node sample short for a coordinator's token-only verifier."""

    method = "node_samples"

    def alter(self, samples):
        return samples[:-1]


def _served(handle, serve):
    server, port = serve(handle, "127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


def _fails_as_the_services_fault(engine, *, verifier="rrsw", temperature=1.0) -> str:
    with pytest.raises(RemoteError) as failed:
        engine.run(PROMPT, max_new_tokens=24, temperature=temperature, seed=3, verifier=verifier)
    assert failed.value.code == grpc.StatusCode.INTERNAL
    code, message = status_of(failed.value, "a test")
    assert code == grpc.StatusCode.INTERNAL and "not on the request" in message
    return message


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_q_rows_of_another_width_fail_the_step_as_internal(pair, verify_at):
    target_model, drafter_model = pair
    target_server, target_address = _served(LocalTarget(target_model), serve_target)
    drafter_server, drafter_address = _served(NarrowRows(drafter_model), serve_drafter)
    try:
        target = RemoteTarget(target_address, timeout=10, verify_at=verify_at)
        engine = SpeculativeEngine(target, RemoteDrafter(drafter_address, VOCAB, timeout=10), tree="kary:2x2")
        message = _fails_as_the_services_fault(engine)
        assert f"[3, {VOCAB - 1}], expected [3, {VOCAB}]" in message
        # The target worker serves on: the same request with a sound drafter gives its tokens.
        sound = SpeculativeEngine(target, LocalDrafter(drafter_model), tree="kary:2x2")
        local = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), tree="kary:2x2")
        request = dict(max_new_tokens=24, temperature=1.0, seed=3, verifier="rrsw")
        assert sound.run(PROMPT, **request).tokens == local.run(PROMPT, **request).tokens
    finally:
        target_server.stop(0)
        drafter_server.stop(0)


def test_an_outcome_off_the_verified_tree_fails_the_step_as_internal(pair):
    target_model, drafter_model = pair
    server, address = _served(OffTheTree(target_model), serve_target)
    try:
        engine = SpeculativeEngine(RemoteTarget(address, timeout=10), LocalDrafter(drafter_model), tree="kary:2x2")
        # greedy over a drafter that copies the target: the first step accepts a node
        assert "which holds" in _fails_as_the_services_fault(engine, verifier="greedy", temperature=0.0)
    finally:
        server.stop(0)


def test_node_samples_short_of_the_tree_fail_the_step_as_internal(pair):
    target_model, drafter_model = pair
    server, address = _served(FewSamples(target_model), serve_target)
    try:
        target = RemoteTarget(address, timeout=10, verify_at="coordinator")
        engine = SpeculativeEngine(target, LocalDrafter(drafter_model), tree="kary:2x2")
        assert "6 node tokens for a tree of 7 nodes" in _fails_as_the_services_fault(engine, verifier="gumbel")
    finally:
        server.stop(0)
