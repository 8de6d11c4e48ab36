"""A drafter worker that dies mid-sequence: the sequence decodes on target-only, with the
target's law (for the couplings, the very tokens a healthy drafter gives), and the requests
that follow do not wait on the dead worker.  Real gRPC servers in this process, over tiny
random models; the drafter's server is stopped under a running generation."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from rayspec.client import Client
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.engine import GenerationStats
from rayspec.engine.interfaces import DrafterBusy, DrafterUnavailable, SequenceSpec
from rayspec.engine.pool import DrafterPool
from rayspec.models import load_causal_lm
from rayspec.rpc.remote import DrafterLost, RemoteDrafter, RemoteError
from rayspec.rpc.worker import serve_drafter
from rayspec.tree.structure import TreeShape
from rayspec.verify.processing import SamplingParams
from tests.rpc.conftest import TINY_VOCAB
from tests.rpc.processes import Worker, save_tiny_pair
from tests.tiny_models import tiny_llama

VOCAB = TINY_VOCAB  # the `pair` fixture's (conftest)
PROMPT = [11, 5, 7, 40]


def _spec() -> SequenceSpec:
    return SequenceSpec(tuple(PROMPT), SamplingParams(temperature=1.0), seed=3, verifier="rrsw")


def test_a_drafter_that_dies_mid_sequence_leaves_it_to_decode_on_with_the_same_tokens(pair):
    target_model, drafter_model = pair
    request = dict(max_new_tokens=48, temperature=1.0, seed=5)
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="kary:2x2").run(PROMPT, **request)
    server, port = serve_drafter(LocalDrafter(drafter_model), "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=10, retry_after=30)
    engine = SpeculativeEngine(LocalTarget(target_model), remote, verifier="gumbel", tree="kary:2x2")
    stats, tokens = GenerationStats(), []
    for i, chunk in enumerate(engine.generate(PROMPT, **request, stats=stats)):
        tokens += chunk.tokens
        if i == 2:
            server.stop(0).wait()  # the drafter worker goes away under the sequence
    assert tokens == healthy.tokens  # gumbel's tokens do not depend on the drafts, or on there being any
    assert f"127.0.0.1:{port}" in stats.drafter_lost
    drafted = [step.drafted for step in stats.steps]
    assert all(drafted[:3]) and not any(drafted[4:])  # a step may be in flight as the server stops
    assert remote.losses >= 1

    # The next request does not wait on the dead worker: it decodes target-only from the start.
    started = time.monotonic()
    again = engine.run(PROMPT, **request)
    assert time.monotonic() - started < 10 and again.tokens == healthy.tokens
    assert "next try in" in again.stats.drafter_lost and not any(step.drafted for step in again.stats.steps)
    remote.close()


class _Hanging(LocalDrafter):
    """A drafter whose sessions stop answering after `answered` drafts, until `release`."""

    def __init__(self, model, answered: int):
        super().__init__(model)
        self.answered, self.drafts, self.release = answered, 0, threading.Event()

    def open(self, spec):
        session = super().open(spec)
        draft = session.draft

        def hanging(shape, previous):
            self.drafts += 1
            if self.drafts > self.answered:
                self.release.wait(60)
            return draft(shape, previous)

        session.draft = hanging
        return session


def test_a_drafter_that_hangs_loses_its_sequence_at_the_draft_deadline(pair):
    """The first draft (the prompt's prefill) has the call deadline; the next ones the
    shorter `draft_timeout`, past which the sequence goes on without drafts."""
    target_model, drafter_model = pair
    request = dict(max_new_tokens=40, temperature=1.0, seed=5)
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="chain:3").run(PROMPT, **request)
    hanging = _Hanging(drafter_model, answered=3)
    server, port = serve_drafter(hanging, "127.0.0.1:0")
    try:
        remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=60, draft_timeout=0.5)
        engine = SpeculativeEngine(LocalTarget(target_model), remote, verifier="gumbel", tree="chain:3")
        started = time.monotonic()
        run = engine.run(PROMPT, **request)
        assert time.monotonic() - started < 5  # not the 60 s call deadline
        assert run.tokens == healthy.tokens
        assert "did not answer within 0.5 s" in run.stats.drafter_lost
        assert [bool(step.drafted) for step in run.stats.steps[:4]] == [True, True, True, False]
    finally:
        hanging.release.set()
        server.stop(0)


def test_the_waits_before_trying_a_dead_drafter_again_double_and_a_restarted_one_is_taken_back(pair):
    _, drafter_model = pair
    server, port = serve_drafter(LocalDrafter(drafter_model), "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=5, retry_after=0.2, max_retry_after=0.5)
    remote.open(_spec()).close()
    server.stop(0).wait()
    waits = []
    for _ in range(4):
        while True:  # until the wait is over, opens fail at once without a call
            try:
                remote.open(_spec())
            except DrafterLost as error:
                if "next try in" not in str(error):
                    break  # a real call, which failed
            time.sleep(0.02)
        waits.append(remote._down_for)
    assert waits == [0.2, 0.4, 0.5, 0.5]  # doubling, capped
    with pytest.raises(DrafterUnavailable, match="next try in"):
        remote.open(_spec())

    # A worker started again at the address is taken back once the wait is over.
    live, _ = serve_drafter(LocalDrafter(drafter_model), f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                session = remote.open(_spec())
                break
            except DrafterUnavailable:
                assert time.monotonic() < deadline, "the drafter was not taken back"
                time.sleep(0.05)
        assert remote._down_for == 0.5  # on probation until it drafts
        session.draft(TreeShape.chain(1), None)
        session.close()
        assert remote._down_for == 0
    finally:
        remote.close()
        live.stop(0)


def test_the_sequences_a_drafter_drops_at_once_make_one_wait_not_one_each(pair):
    target_model, drafter_model = pair
    server, port = serve_drafter(LocalDrafter(drafter_model), "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=5, retry_after=0.5)
    engine = SpeculativeEngine(LocalTarget(target_model), remote, verifier="gumbel", tree="chain:2")
    streams = [engine.generate(PROMPT, max_new_tokens=24, temperature=1.0, seed=seed) for seed in range(4)]
    for stream in streams:
        next(stream)  # every sequence has its drafter session
    server.stop(0).wait()
    for stream in streams:
        assert sum(len(chunk.tokens) for chunk in stream) > 0
    assert remote.losses == 4 and remote._down_for == 0.5
    remote.close()


class _Unavailable:
    """A drafter that is lost before it drafts anything."""

    def __init__(self, drafter):
        self.vocab_size, self.context_length = drafter.vocab_size, drafter.context_length
        self.opened = 0

    def open(self, spec):
        self.opened += 1
        raise DrafterUnavailable("UNAVAILABLE: no drafter here")


def test_a_sequence_that_never_gets_its_drafter_is_exactly_target_only_decoding(pair):
    """Every verifier's target-only steps draw from the same stream whether a drafter was
    never configured or lost at the first step: the same seed gives the same tokens."""
    target_model, drafter_model = pair
    for verifier in ("rrsw", "spectr", "gumbel"):
        request = dict(max_new_tokens=32, temperature=0.8, seed=11)
        alone = SpeculativeEngine(LocalTarget(target_model), None, verifier=verifier).run(PROMPT, **request)
        lost = _Unavailable(LocalDrafter(drafter_model))
        run = SpeculativeEngine(LocalTarget(target_model), lost, verifier=verifier, tree="chain:2").run(PROMPT, **request)
        assert run.tokens == alone.tokens, verifier
        # asked at the first step and again at the next (then not for a second)
        assert lost.opened >= 2 and run.stats.drafter_lost == "UNAVAILABLE: no drafter here"
        assert run.stats.drafter_comebacks == 0


def test_a_prediction_whose_drafter_is_lost_is_drafted_alone(pair):
    """With a prediction, a step drafts its chain beside the drafter's tree (`graft_predictions:
    always`); a lost drafter leaves the chain alone, as an engine without a drafter drafts it."""
    target_model, drafter_model = pair
    request = dict(max_new_tokens=24, temperature=1.0, seed=2, prediction=[5, 7, 40, 11, 5, 7])
    for verifier in ("rrsw", "gumbel"):
        alone = SpeculativeEngine(LocalTarget(target_model), None, verifier=verifier, tree="chain:3",
                                  graft_predictions="always").run(PROMPT, **request)
        lost = _Unavailable(LocalDrafter(drafter_model))
        run = SpeculativeEngine(LocalTarget(target_model), lost, verifier=verifier, tree="chain:3",
                                graft_predictions="always").run(PROMPT, **request)
        assert lost.opened >= 2 and run.stats.drafter_lost is not None
        assert run.tokens == alone.tokens, verifier
        assert [s.drafted for s in run.stats.steps] == [s.drafted for s in alone.stats.steps]


class _Refusing(LocalDrafter):
    def open(self, spec):
        raise ValueError("the drafter refuses this request")


def test_a_drafter_error_that_is_not_a_loss_still_ends_the_request(pair):
    target_model, drafter_model = pair
    engine = SpeculativeEngine(LocalTarget(target_model), _Refusing(drafter_model), tree="chain:2")
    with pytest.raises(ValueError, match="the drafter refuses this request"):
        engine.run(PROMPT, max_new_tokens=8, seed=1)


def test_a_full_drafter_is_not_a_lost_one(pair):
    """RESOURCE_EXHAUSTED is the service's capacity answer (429), not a loss to decode around;
    a pool with another drafter passes the sequence to it."""
    _, drafter_model = pair
    server, port = serve_drafter(LocalDrafter(drafter_model), "127.0.0.1:0", max_sessions=1)
    try:
        remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=5)
        held = remote.open(_spec())
        with pytest.raises(RemoteError) as raised:
            remote.open(_spec())
        assert raised.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not isinstance(raised.value, DrafterUnavailable) and remote.losses == 0

        # A pool gives the sequence to a drafter with room; full everywhere, the refusal stands.
        target_model = pair[0]
        pool = DrafterPool([remote, LocalDrafter(drafter_model)])
        engine = SpeculativeEngine(LocalTarget(target_model), pool, tree="chain:2")
        for seed in range(2):  # round robin asks the full one first on one of the two
            run = engine.run(PROMPT, max_new_tokens=8, seed=seed)
            assert run.stats.drafter_lost is None and any(step.drafted for step in run.stats.steps)
        with pytest.raises(DrafterBusy):
            DrafterPool([remote, _Unavailable(LocalDrafter(drafter_model))]).open(_spec())
        held.close()
        remote.close()
    finally:
        server.stop(0)


def test_a_pool_passes_over_an_unavailable_drafter(pair):
    target_model, drafter_model = pair
    lost, live = _Unavailable(LocalDrafter(drafter_model)), LocalDrafter(drafter_model)
    pool = DrafterPool([lost, live])
    engine = SpeculativeEngine(LocalTarget(target_model), pool, tree="chain:2")
    for seed in range(4):  # round robin starts at each drafter in turn
        run = engine.run(PROMPT, max_new_tokens=8, seed=seed)
        assert run.stats.drafter_lost is None and any(step.drafted for step in run.stats.steps)
    assert lost.opened == 2  # asked first on every other request
    with pytest.raises(DrafterUnavailable):
        DrafterPool([lost, _Unavailable(live)]).open(_spec())


def test_a_coordinator_process_finishes_the_stream_whose_drafter_process_was_killed(tmp_path):
    """Plain processes, as on a GPU machine without Ray: the drafter worker is SIGKILLed under
    a stream the coordinator serves; the stream ends normally with the tokens of target-only
    decoding (gumbel's output does not depend on the drafts), and so does the next request."""
    target_path, drafter_path = save_tiny_pair(tmp_path)
    target = Worker(tmp_path / "target.log", "--role", "target", "--model", str(target_path))
    drafter = Worker(tmp_path / "drafter.log", "--role", "drafter", "--model", str(drafter_path))
    coordinator = Worker(tmp_path / "coordinator.log", "--role", "coordinator", "--target", target.address,
                         "--drafter", drafter.address, "--verifier", "gumbel", "--tree", "kary:2x3",
                         "--tokenizer", str(target_path))
    try:
        model, tokenizer = load_causal_lm(target_path, "cpu", "float32")
        prompt = "def add(a, b):"
        alone = SpeculativeEngine(LocalTarget(model, tokenizer), None, verifier="gumbel").run(
            tokenizer.encode(prompt, add_special_tokens=False), max_new_tokens=48, temperature=1.0, seed=9)
        with Client(coordinator.address, retries=0) as client:
            stream = client.stream(prompt, max_tokens=48, temperature=1.0, seed=9)
            tokens = list(next(stream).token_ids)
            drafter.process.kill()
            drafter.process.wait(10)
            tokens += [token for chunk in stream for token in chunk.token_ids]
            assert tokens == alone.tokens
            started = time.monotonic()
            again = client.generate(prompt, max_tokens=48, temperature=1.0, seed=9)
            assert list(again.token_ids) == alone.tokens and time.monotonic() - started < 20
        assert "drafter lost after" in (tmp_path / "coordinator.log").read_text()
    finally:
        for worker in (coordinator, drafter, target):
            worker.stop()


def test_the_service_configs_draft_timeout_is_its_remote_drafters_deadline(pair):
    """`drafters[i].draft_timeout` in the service YAML: the deadline the service's handle to
    drafter worker i gives each draft after a sequence's first."""
    from rayspec.rpc.worker import serve_target
    from rayspec.serve.config import ServiceConfig
    from rayspec.serve.service import Service

    target_model, drafter_model = pair
    hanging = _Hanging(drafter_model, answered=2)
    target_server, target_port = serve_target(LocalTarget(target_model), "127.0.0.1:0")
    drafter_server, drafter_port = serve_drafter(hanging, "127.0.0.1:0")
    config = ServiceConfig.from_dict({"drafters": [{"draft_timeout": 0.5}], "tree": "chain:3", "verifier": "gumbel",
                                      "target": {"resume_timeout": 7}})
    try:
        with pytest.raises(ValueError, match=r"2 drafter worker address\(es\) for the config's 1 `where: worker`"):
            Service.from_config(config, f"127.0.0.1:{target_port}", [f"127.0.0.1:{drafter_port}"] * 2)
        service = Service.from_config(config, f"127.0.0.1:{target_port}", [f"127.0.0.1:{drafter_port}"])
        assert service.engine.target_resume_timeout == 7
        try:
            started = time.monotonic()
            run = service.engine.run(PROMPT, max_new_tokens=30, temperature=1.0, seed=5)
            assert time.monotonic() - started < 5
            assert "did not answer within 0.5 s" in run.stats.drafter_lost
        finally:
            service.close()
    finally:
        hanging.release.set()
        drafter_server.stop(0)
        target_server.stop(0)


@pytest.mark.parametrize("value", [0, -1, "10", True])
def test_a_draft_timeout_that_is_not_a_positive_number_is_refused(value):
    from rayspec.serve.config import ServiceConfig

    with pytest.raises(ValueError, match=f"draft_timeout must be a positive number of seconds, got {value!r}"):
        ServiceConfig.from_dict({"drafters": [{"draft_timeout": value}]})
    with pytest.raises(ValueError, match="draft_timeout must be a positive number of seconds"):
        RemoteDrafter("127.0.0.1:1", VOCAB, draft_timeout=value)


def test_a_coordinator_processs_draft_timeout_flag_is_checked_before_it_starts(capsys):
    from rayspec.rpc.worker import main

    with pytest.raises(SystemExit) as exited:
        main(["--role", "coordinator", "--target", "127.0.0.1:1", "--draft-timeout", "0"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "python -m rayspec.rpc.worker: error: --draft-timeout must be a positive number of seconds, got 0.0"


class _Away(LocalDrafter):
    """A drafter that is unavailable while `away` is set: its sessions' drafts and its opens
    fail.  `sessions`: those it opened."""

    def __init__(self, model):
        super().__init__(model)
        self.away, self.sessions = False, []

    def open(self, spec):
        if self.away:
            raise DrafterUnavailable("UNAVAILABLE: away")
        session = super().open(spec)
        draft = session.draft

        def unless_away(shape, previous):
            if self.away:
                raise DrafterUnavailable("UNAVAILABLE: away")
            return draft(shape, previous)

        session.draft = unless_away
        self.sessions.append(session)
        return session


def test_a_sequence_takes_its_drafter_back_once_it_answers_again(pair, monkeypatch):
    """Lost at a step, tried at the next and then after a wait: once it answers, a new session
    is told the whole completion so far and the sequence drafts again; gumbel's tokens stay a
    healthy run's (they never depend on the drafts)."""
    from rayspec.engine.drafting import Comeback

    monkeypatch.setattr(Comeback, "FIRST_WAIT", 0.2)
    target_model, drafter_model = pair
    request = dict(max_new_tokens=60, temperature=1.0, seed=4)
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="chain:3").run(PROMPT, **request)
    drafter = _Away(drafter_model)
    engine = SpeculativeEngine(LocalTarget(target_model), drafter, verifier="gumbel", tree="chain:3")
    stats, tokens = GenerationStats(), []
    stream = engine.generate(PROMPT, **request, stats=stats)
    for _ in range(3):
        tokens += next(stream).tokens
    drafter.away = True
    for _ in range(3):  # lost; tried again at once; then left alone for the wait
        tokens += next(stream).tokens
    drafter.away = False
    tokens += next(stream).tokens  # within the wait: not asked yet
    time.sleep(0.25)
    tokens += [t for chunk in stream for t in chunk.tokens]
    assert tokens == healthy.tokens
    drafted = [bool(step.drafted) for step in stats.steps]
    assert drafted[:7] == [True] * 3 + [False] * 4 and all(drafted[7:-1])
    assert stats.drafter_lost == "UNAVAILABLE: away" and stats.drafter_comebacks == 1
    assert len(drafter.sessions) == 2
    # The second session was told the tokens of the target-only steps: its sequence is the completion's.
    resumed = drafter.sessions[1].tokens
    assert len(resumed) > len(PROMPT) + sum(s.emitted for s in stats.steps[:7])
    assert resumed == PROMPT + tokens[:len(resumed) - len(PROMPT)]


def test_a_drafter_worker_started_again_at_its_address_takes_its_sequence_back(pair, monkeypatch):
    """Over gRPC: the drafter worker's server stops under a sequence and a new one starts at
    its port (as a Ray actor restarted by the service does); the sequence drafts on it again."""
    from rayspec.engine.drafting import Comeback

    monkeypatch.setattr(Comeback, "FIRST_WAIT", 0.1)
    target_model, drafter_model = pair
    request = dict(max_new_tokens=400, temperature=1.0, seed=6)
    healthy = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), verifier="gumbel",
                                tree="chain:2").run(PROMPT, **request)
    server, port = serve_drafter(LocalDrafter(drafter_model), "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=10, retry_after=0.1, max_retry_after=0.2)
    engine = SpeculativeEngine(LocalTarget(target_model), remote, verifier="gumbel", tree="chain:2")
    stats, tokens = GenerationStats(), []
    stream = engine.generate(PROMPT, **request, stats=stats)
    try:
        for _ in range(3):
            tokens += next(stream).tokens
        server.stop(0).wait()
        tokens += next(stream).tokens
        assert stats.drafter_lost is not None
        server, _ = serve_drafter(LocalDrafter(drafter_model), f"127.0.0.1:{port}")
        deadline = time.monotonic() + 20
        while not stats.drafter_comebacks:
            assert time.monotonic() < deadline, "the sequence did not take its drafter back"
            chunk = next(stream)
            tokens += chunk.tokens
            assert chunk.finish_reason is None, "the sequence ended before its drafter came back"
            time.sleep(0.02)
        tokens += [t for chunk in stream for t in chunk.tokens]
        assert tokens == healthy.tokens
        assert stats.steps[-2].drafted  # drafting to the end
    finally:
        remote.close()
        server.stop(0)


class _SlowToOpen(LocalDrafter):
    def __init__(self, model):
        super().__init__(model)
        self.release = threading.Event()

    def open(self, spec):
        self.release.wait(60)
        return super().open(spec)


def test_a_drafter_that_was_down_is_probed_with_the_draft_deadline(pair):
    """After the drafter was unreachable, an open (a new request's, or a sequence's try to
    take it back) waits `draft_timeout` for it, not the minute of a call."""
    from tests.loopback import free_port

    _, drafter_model = pair
    port = free_port()
    healthy, _ = serve_drafter(LocalDrafter(drafter_model), f"127.0.0.1:{port}")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=60, retry_after=0.05, max_retry_after=0.2,
                           draft_timeout=0.5)
    healthy.stop(0).wait()
    with pytest.raises(DrafterLost, match="UNAVAILABLE"):
        remote.open(_spec())
    stuck_drafter = _SlowToOpen(drafter_model)
    stuck, _ = serve_drafter(stuck_drafter, f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 20
        while True:  # until the channel reconnects and an open reaches the stuck worker
            assert time.monotonic() < deadline, "no open reached the worker"
            started = time.monotonic()
            try:
                remote.open(_spec())
            except DrafterLost as error:
                if "DEADLINE_EXCEEDED" in str(error):
                    break
            time.sleep(0.05)
        assert time.monotonic() - started < 5
    finally:
        stuck_drafter.release.set()
        stuck.stop(0)
        remote.close()


def test_a_drafter_whose_opens_answer_but_whose_drafts_hang_is_probed_with_the_draft_deadline(pair):
    """A hung model (a stuck forward) still answers Open from the server's threads.  Each open
    took the drafter back (its wait reset to the first), and the session's first draft had the
    call's deadline: every request it took after each 1-s rest waited the call's minute, and
    the waits never doubled.  Now a drafter is taken back when it drafts, and a session opened
    on probation has the draft deadline from its first draft."""
    _, drafter_model = pair
    hanging = _Hanging(drafter_model, answered=0)
    server, port = serve_drafter(hanging, "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=2, draft_timeout=0.3, retry_after=0.05,
                           max_retry_after=0.2)
    try:
        seconds, waits = [], []
        for _ in range(4):
            while True:  # until its rest is over
                try:
                    session = remote.open(_spec())
                    break
                except DrafterLost as error:
                    assert "next try in" in str(error)
                    time.sleep(0.02)
            started = time.monotonic()
            with pytest.raises(DrafterLost, match="DEADLINE_EXCEEDED"):
                session.draft(TreeShape.chain(1), None)
            seconds.append(time.monotonic() - started)
            session.close()
            waits.append(remote._down_for)
        assert seconds[0] >= 2 and all(s < 1.5 for s in seconds[1:]), seconds  # the call's deadline once only
        assert waits == [0.05, 0.1, 0.2, 0.2]
        hanging.release.set()  # the model runs again: a draft takes the drafter back
        while True:
            try:
                session = remote.open(_spec())  # on probation still: its first draft has the draft deadline
                break
            except DrafterLost:
                time.sleep(0.02)
        session.draft(TreeShape.chain(1), None)
        session.close()
        assert remote._down_for == 0
    finally:
        hanging.release.set()
        remote.close()
        server.stop(0)


def test_a_drafter_worker_whose_vocabulary_size_differs_from_the_targets_is_refused_by_the_engine(pair):
    """Sizes that differ need the tokenizer to tell padding rows from another tokenizer
    (tests/rpc/test_padded_workers.py serves such a pair); the worker's size is what counts."""
    server, port = serve_drafter(LocalDrafter(tiny_llama(vocab=VOCAB + 8, seed=3)), "127.0.0.1:0")
    remote = RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=10)
    try:
        assert remote.vocab_size == VOCAB + 8
        with pytest.raises(ValueError, match=rf"the drafter's vocab_size \({VOCAB + 8}\) differs from the target's "
                                             rf"\({VOCAB}\): give the engine the target's tokenizer"):
            SpeculativeEngine(LocalTarget(pair[0]), remote)
    finally:
        remote.close()
        server.stop(0).wait()
