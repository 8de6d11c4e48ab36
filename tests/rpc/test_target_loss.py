"""A target worker lost under a sequence — gone, or restarted without the session — and back
within the engine's `target_resume_timeout`: the sequence is opened again on it after the
tokens it has (`SequenceSpec.resumed`) and decodes on, the client seeing a pause."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.engine import GenerationStats
from rayspec.engine.interfaces import GenerationCancelled, SequenceSpec, TargetUnavailable, stream_generator
from rayspec.rpc.remote import RemoteTarget, TargetLost
from rayspec.rpc.worker import serve_target
from rayspec.verify.processing import SamplingParams
from tests.rpc.conftest import TINY_VOCAB

VOCAB = TINY_VOCAB  # the `pair` fixture's (conftest)
PROMPT = [11, 5, 7, 40]
# gumbel's tokens are a function of the seed and the target's laws alone: a resumed sequence
# gives exactly the tokens of one never interrupted, if its laws after the resume are right —
# penalties counting the completion so far as completion included.
REQUEST = dict(max_new_tokens=48, temperature=1.0, seed=5, frequency_penalty=0.6, presence_penalty=0.4)


class _Restarting(LocalTarget):
    """A target whose sessions are lost once `restart()` is called (the worker's process went),
    and which refuses to open any for `down` seconds after."""

    def __init__(self, model):
        super().__init__(model)
        self.lost_sessions, self.back_at, self.opened = [], 0.0, []

    def restart(self, down: float) -> None:
        for session in self.lost_sessions:
            session.gone = True
        self.back_at = time.monotonic() + down

    def open(self, spec):
        if time.monotonic() < self.back_at:
            raise TargetUnavailable("UNAVAILABLE: the target worker is restarting")
        session = super().open(spec)
        self.opened.append(spec)
        verify = session.verify
        session.gone = False

        def unless_gone(draft):
            if session.gone:
                raise TargetUnavailable("NOT_FOUND: no session (the worker restarted)")
            return verify(draft)

        session.verify = unless_gone
        self.lost_sessions.append(session)
        return session


def test_a_sequence_whose_target_restarts_resumes_with_the_tokens_it_would_have_had(pair):
    target_model, drafter_model = pair
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="kary:2x2").run(PROMPT, **REQUEST)
    target = _Restarting(target_model)
    engine = SpeculativeEngine(target, LocalDrafter(drafter_model), verifier="gumbel", tree="kary:2x2")
    stats, tokens = GenerationStats(), []
    stream = engine.generate(PROMPT, **REQUEST, stats=stats)
    for _ in range(4):
        tokens += next(stream).tokens
    target.restart(down=0.6)
    started = time.monotonic()
    tokens += next(stream).tokens
    assert time.monotonic() - started >= 0.5  # waited for the target
    tokens += [t for chunk in stream for t in chunk.tokens]
    assert tokens == healthy.tokens
    assert stats.target_resumes == 1
    first, resumed = target.opened
    assert resumed.prompt_ids == first.prompt_ids and list(resumed.completion_ids) == tokens[:len(resumed.completion_ids)]
    assert len(resumed.completion_ids) == sum(step.emitted for step in stats.steps[:4])


def test_a_target_that_does_not_come_back_in_time_fails_the_sequence(pair):
    target_model, drafter_model = pair
    target = _Restarting(target_model)
    engine = SpeculativeEngine(target, LocalDrafter(drafter_model), verifier="rrsw", tree="chain:2",
                               target_resume_timeout=0.5)
    stream = engine.generate(PROMPT, max_new_tokens=40, seed=1)
    next(stream)
    target.restart(down=30)
    started = time.monotonic()
    with pytest.raises(TargetUnavailable, match="restarting"):
        next(stream)
    assert time.monotonic() - started < 3
    with pytest.raises(ValueError, match="target_resume_timeout must be a number of seconds, 0 or more, got -1"):
        SpeculativeEngine(target, None, target_resume_timeout=-1)


def test_a_resumed_session_draws_from_streams_of_its_own():
    """The first session's draws decided the completion so far; reused, they would decide the
    next tokens too, and the output would not have the target's law."""
    spec = SequenceSpec(tuple(PROMPT), SamplingParams(temperature=1.0), seed=3, verifier="rrsw", prompt_logprobs=2)
    resumed = spec.resumed([9, 9, 1])
    assert resumed.completion_ids == (9, 9, 1) and resumed.prompt_logprobs is None
    draws = {name: stream_generator(3, "verify", s).initial_seed() for name, s in
             (("first", spec), ("resumed", resumed), ("resumed again", spec.resumed([9, 9, 1, 4])))}
    assert len(set(draws.values())) == 3
    assert stream_generator(3, "verify", spec).initial_seed() == stream_generator(3, "verify").initial_seed()


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_a_target_worker_started_again_at_its_address_resumes_its_sequence(pair, verify_at):
    """Over gRPC, as when Ray restarts the target's actor: the worker's server stops under a
    sequence and a new one starts at its port; the sequence resumes there."""
    target_model, drafter_model = pair
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="kary:2x2").run(PROMPT, **REQUEST)
    server, port = serve_target(LocalTarget(target_model), "127.0.0.1:0")
    remote = RemoteTarget(f"127.0.0.1:{port}", timeout=10, verify_at=verify_at)
    engine = SpeculativeEngine(remote, LocalDrafter(drafter_model), verifier="gumbel", tree="kary:2x2")
    stats, tokens = GenerationStats(), []
    stream = engine.generate(PROMPT, **REQUEST, stats=stats)
    try:
        for _ in range(3):
            tokens += next(stream).tokens
        server.stop(0).wait()
        server, _ = serve_target(LocalTarget(target_model), f"127.0.0.1:{port}")
        tokens += [t for chunk in stream for t in chunk.tokens]
        assert tokens == healthy.tokens and stats.target_resumes == 1
    finally:
        remote.close()
        server.stop(0)


def test_a_target_workers_refusal_is_not_a_loss(pair):
    """INVALID_ARGUMENT stays a ValueError; only a worker's absence is `TargetLost`."""
    from rayspec.rpc.remote import target_guarded
    from rayspec.rpc.server import RemoteError
    import grpc

    with pytest.raises(TargetLost):
        target_guarded(lambda: (_ for _ in ()).throw(RemoteError("UNAVAILABLE: gone", grpc.StatusCode.UNAVAILABLE)))
    with pytest.raises(RemoteError) as raised:
        target_guarded(lambda: (_ for _ in ()).throw(RemoteError("INTERNAL: bug", grpc.StatusCode.INTERNAL)))
    assert not isinstance(raised.value, TargetLost)


def test_a_target_that_loses_every_session_it_opens_fails_the_sequence_in_time(pair):
    target_model, drafter_model = pair
    target = _Restarting(target_model)
    original = target.open

    def lost_at_once(spec):
        session = original(spec)
        session.gone = True
        return session

    target.open = lost_at_once
    engine = SpeculativeEngine(target, LocalDrafter(drafter_model), verifier="rrsw", tree="chain:2",
                               target_resume_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TargetUnavailable, match="NOT_FOUND"):
        engine.run(PROMPT, max_new_tokens=8, seed=1)
    assert time.monotonic() - started < 3 and len(target.opened) >= 2


def test_a_sequence_waiting_for_its_lost_target_stops_when_its_caller_gives_up(pair):
    """Its client gone, a request must not hold its slot for the whole resume timeout."""
    target_model, drafter_model = pair
    target = _Restarting(target_model)
    engine = SpeculativeEngine(target, LocalDrafter(drafter_model), verifier="gumbel", tree="kary:2x2",
                               target_resume_timeout=60)
    cancelled = threading.Event()
    stream = engine.generate(PROMPT, **REQUEST, cancelled=cancelled)
    next(stream)
    target.restart(down=60)
    threading.Timer(0.5, cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(GenerationCancelled, match="cancelled while its target was lost .*NOT_FOUND"):
        next(stream)
    assert 0.4 < time.monotonic() - started < 3
    assert engine.decoding == 0


def test_a_grpc_stream_cancelled_while_its_target_is_lost_stops_waiting(pair, caplog):
    """The coordinator's GenerateStream, cancelled by its client during a target's absence:
    the generation ends within a back-off period, not at the 60-s resume timeout, and the
    coordinator logs no error for it."""
    import grpc
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH
    from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc
    from rayspec.rpc.coordinator import serve_generation

    target_model, drafter_model = pair
    target = _Restarting(target_model)
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    engine = SpeculativeEngine(target, LocalDrafter(drafter_model), verifier="gumbel", tree="kary:2x2",
                               tokenizer=tokenizer, target_resume_timeout=60)
    server, port = serve_generation(engine, tokenizer, "127.0.0.1:0")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = generation_pb2_grpc.GenerationStub(channel)
            call = stub.GenerateStream(generation_pb2.GenerateRequest(prompt_ids=PROMPT, max_tokens=48, seed=5,
                                                                      ignore_eos=True), timeout=30)
            next(call)
            target.restart(down=60)
            time.sleep(0.5)  # the next step finds the session gone, and the engine waits
            assert engine.decoding == 1
            call.cancel()
            cancelled = time.monotonic()
            while engine.decoding and time.monotonic() - cancelled < 10:
                time.sleep(0.02)
            assert engine.decoding == 0 and time.monotonic() - cancelled < 3
    finally:
        server.stop(0)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.slow
def test_a_target_back_after_a_long_outage_is_dialled_within_seconds(pair):
    """gRPC backs off a channel's tries to reconnect (to 120 s by default), and a call between
    tries fails at once: after 16 s away the next try would come 7-14 s after the worker is
    back.  rayspec's channels try every 2 s at most, so the sequence resumes within that and
    the engine's own 2-s wait."""
    from concurrent.futures import ThreadPoolExecutor

    target_model, drafter_model = pair
    server, port = serve_target(LocalTarget(target_model), "127.0.0.1:0")
    remote = RemoteTarget(f"127.0.0.1:{port}", timeout=10)
    engine = SpeculativeEngine(remote, LocalDrafter(drafter_model), verifier="gumbel", tree="kary:2x2")
    stream = engine.generate(PROMPT, **REQUEST)
    try:
        next(stream)
        server.stop(0).wait()
        with ThreadPoolExecutor(1) as pool:
            resumed = pool.submit(next, stream)
            time.sleep(16)
            assert not resumed.done()
            server, _ = serve_target(LocalTarget(target_model), f"127.0.0.1:{port}")
            back = time.monotonic()
            resumed.result(timeout=30)
            assert time.monotonic() - back < 5
    finally:
        stream.close()
        remote.close()
        server.stop(0)


def test_a_coordinator_answers_not_serving_to_health_checks_while_its_target_is_away(pair):
    """A plain-process coordinator's grpc.health.v1 follows its target worker: SERVING while
    the target answers, NOT_SERVING (the whole server and Generation alike) while it is gone,
    SERVING again once a worker is back at its address.  A probe or load balancer thus turns
    away from a coordinator whose requests would fail."""
    from rayspec.client import Client
    from rayspec.rpc.coordinator import serve_generation_from_workers

    target_model, _ = pair
    server, port = serve_target(LocalTarget(target_model), "127.0.0.1:0")
    coordinator, coordinator_port = serve_generation_from_workers("127.0.0.1:0", f"127.0.0.1:{port}", None)
    try:
        with Client(f"127.0.0.1:{coordinator_port}", retries=0) as sdk:
            assert sdk.health(timeout=10) and sdk.health("rayspec.v1.Generation", timeout=10)
            server.stop(0).wait()
            assert not sdk.health(timeout=10) and not sdk.health("rayspec.v1.Generation", timeout=10)
            assert not sdk.health("no.such.Service", timeout=10)
            server, _ = serve_target(LocalTarget(target_model), f"127.0.0.1:{port}")
            deadline = time.monotonic() + 10  # the channel dials again within 2 s
            while not sdk.health(timeout=10) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sdk.health(timeout=10) and sdk.health("rayspec.v1.Generation", timeout=10)
    finally:
        coordinator.stop(0)
        server.stop(0)
