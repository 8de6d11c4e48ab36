"""Hedged drafts over real gRPC workers in this process: a drafter worker late on one call of
a sequence; the coordinator's steps go on target-only meanwhile, on the same session streams."""

from __future__ import annotations

import time

import pytest

from rayspec.client import Client
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.rpc.coordinator import serve_generation
from rayspec.rpc.remote import DrafterLost, RemoteDrafter, RemoteTarget
from rayspec.rpc.worker import serve_drafter, serve_target
from rayspec.serve.config import ServiceConfig
from rayspec.serve.service import Service
from rayspec.verify.processing import SamplingParams
from tests.faults import LateDrafter
from tests.steps import drafted_steps
from tests.tiny_models import noisy_copy, tiny_llama

VOCAB = 64
PROMPT = [11, 5, 7, 40]


@pytest.fixture(scope="module")
def workers():
    target = tiny_llama(vocab=VOCAB, seed=0)
    drafter = noisy_copy(target, noise=0.3)
    late = LateDrafter(LocalDrafter(drafter), late={6}, delay=0.1)
    servers = [serve_target(LocalTarget(target), "127.0.0.1:0"), serve_drafter(late, "127.0.0.1:0")]
    (_, target_port), (_, drafter_port) = servers
    yield target, drafter, late, f"127.0.0.1:{target_port}", f"127.0.0.1:{drafter_port}"
    for server, _ in servers:
        server.stop(0).wait()


def test_a_late_remote_draft_is_hedged_and_the_drafter_drafts_again_on_its_stream(workers):
    """Through a coordinator the service's config builds (`draft_hedge` reaches its engine)."""
    target, drafter, late, target_address, drafter_address = workers
    config = ServiceConfig.from_dict({"draft_hedge": 3, "tree": "kary:2x2", "verifier": "gumbel"})
    service = Service.from_config(config, target_address, [drafter_address])
    healthy = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="gumbel", tree="kary:2x2")
    try:
        for seed in (5, 6):  # the second sequence's streams and session are as fresh as the first's
            request = dict(max_new_tokens=100, temperature=1.0, seed=seed, ignore_eos=True)
            run = service.engine.run(PROMPT, **request)
            assert run.tokens == healthy.run(PROMPT, **request).tokens
            drafted = drafted_steps(run.stats.steps, 100)
            hedged = drafted.index(False)
            assert run.stats.hedged_steps == drafted.count(False) >= 1 and any(drafted[hedged:])
            assert run.stats.drafter_lost is None
        # and a client of the Generation API is told how many steps went on without their draft
        server, port = serve_generation(service.engine, service.tokenizer, "127.0.0.1:0")
        try:
            with Client(f"127.0.0.1:{port}") as client:
                completion = client.generate(PROMPT, max_tokens=100, temperature=1.0, seed=7, ignore_eos=True)
        finally:
            server.stop(0)
        request = dict(max_new_tokens=100, temperature=1.0, seed=7, ignore_eos=True)
        assert list(completion.token_ids) == healthy.run(PROMPT, **request).tokens
        assert completion.usage.hedged_steps >= 1
    finally:
        service.close()
    for session in (0, 1, 2):  # released once, at the end
        events = [event for number, _, event in late.calls if number == session]
        assert events.count("closed") == 1 and events[-1] == "closed"


@pytest.mark.parametrize("draft_timeout", [10.0, 1.0])
def test_a_drafter_worker_that_hangs_holds_up_neither_the_steps_nor_the_end_of_a_sequence(draft_timeout):
    """Its sixth draft takes 3 s: the sequence decodes on target-only and ends all the same.
    The call goes on behind it: within the draft deadline (10 s) it ends and the session is
    released; past it (1 s) the drafter is found hung and not tried for a while, as when a
    sequence waits for its drafts."""
    target = tiny_llama(vocab=VOCAB, seed=0)
    drafter = noisy_copy(target, noise=0.3)
    servers = [serve_target(LocalTarget(target), "127.0.0.1:0"),
               serve_drafter(late := LateDrafter(LocalDrafter(drafter), late={6}, delay=3.0), "127.0.0.1:0")]
    (_, target_port), (_, drafter_port) = servers
    try:
        remote_target = RemoteTarget(f"127.0.0.1:{target_port}", timeout=10)
        remote_drafter = RemoteDrafter(f"127.0.0.1:{drafter_port}", VOCAB, timeout=10, draft_timeout=draft_timeout,
                                       retry_after=30)
        engine = SpeculativeEngine(remote_target, remote_drafter, verifier="gumbel", tree="kary:2x2", draft_hedge=3)
        request = dict(max_new_tokens=60, temperature=1.0, seed=3, ignore_eos=True)
        started = time.monotonic()
        run = engine.run(PROMPT, **request)
        assert time.monotonic() - started < 2.0  # not the 3 s of the late call
        assert run.tokens == SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="gumbel",
                                               tree="kary:2x2").run(PROMPT, **request).tokens
        assert run.stats.hedged_steps >= 1
        assert "closed" not in [event for *_, event in late.calls]
        time.sleep(3.5)
        if draft_timeout > 3:
            assert late.calls[-2:] == [(0, 6, "drafted"), (0, 6, "closed")] and remote_drafter.losses == 0
            assert run.stats.drafter_lost is None
        else:
            assert remote_drafter.losses == 1
            with pytest.raises(DrafterLost, match="did not answer lately"):
                remote_drafter.open(SequenceSpec(tuple(PROMPT), SamplingParams(1.0), seed=1, verifier="gumbel"))
    finally:
        for server, _ in servers:
            server.stop(0)


def test_a_coordinator_processs_draft_hedge_flag_is_checked_before_it_starts(capsys):
    from rayspec.rpc.worker import main

    with pytest.raises(SystemExit) as exited:
        main(["--role", "coordinator", "--target", "127.0.0.1:1", "--draft-hedge", "0.5"])
    assert exited.value.code == 2
    # the flag's name, and how it is turned off on a command line (left out; YAML's word is null)
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "python -m rayspec.rpc.worker: error: --draft-hedge must be a number above 1 (times a draft's recent median "
        "time), or left out to wait for every draft; got 0.5")
