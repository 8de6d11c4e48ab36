"""A drafter and a target whose embeddings are padded to different sizes, across workers: a
drafter worker fits its laws to the width the sequence names (the target's), its q rows cross
that wide, it is fed the target's padding ids as token 0, and a seed gives the tokens of the
in-process engine over the same pair — through the engine's remote handles and through a
coordinator process."""

from __future__ import annotations

import grpc
import pytest
from transformers import AutoTokenizer

from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.engine.pool import DrafterPool
from rayspec.rpc import codec
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, worker_pb2_grpc
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.rpc.worker import DrafterServicer, _serve, serve_drafter, serve_target
from rayspec.verify.processing import SamplingParams
from tests.rpc.processes import Worker
from tests.tiny_models import noisy_copy, padded, tiny_llama

VOCAB, PADDING = 8192, 128  # the demo tokenizer's 8,192 ids; padded as Qwen2.5 pads, to a multiple of 128
PROMPT = [11, 500, 7, 4000]


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(vocab=VOCAB, hidden=32, layers=2, context=512)
    drafter = noisy_copy(target, noise=0.3)
    return {"target": target, "drafter": drafter, "padded target": padded(target, PADDING, favoured=True),
            "padded drafter": padded(drafter, PADDING)}


@pytest.fixture(scope="module")
def workers(models):
    """In-thread gRPC servers, one per model."""
    servers, addresses = [], {}
    for name, model in models.items():
        serve = serve_target if "target" in name else serve_drafter
        server, port = serve((LocalTarget if "target" in name else LocalDrafter)(model), "127.0.0.1:0")
        servers.append(server)
        addresses[name] = f"127.0.0.1:{port}"
    yield addresses
    for server in servers:
        server.stop(0).wait()


PAIRS = {"drafter padded": ("target", "padded drafter"), "target padded": ("padded target", "drafter")}


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
@pytest.mark.parametrize("verifier, tree, temperature", [("rrsw", "kary:2x3", 1.0), ("gumbel", "kary:2x3", 1.0),
                                                         ("topk", "dynamic:12x3x3", 0.9)])
@pytest.mark.parametrize("pair", PAIRS)
def test_remote_padded_pairs_give_the_in_process_tokens(models, workers, pair, verifier, tree, temperature,
                                                        verify_at):
    tokenizer = AutoTokenizer.from_pretrained(str(TARGET_PATH))
    target_name, drafter_name = PAIRS[pair]
    kwargs = dict(max_new_tokens=40, temperature=temperature, seed=7, ignore_eos=True)
    local = SpeculativeEngine(LocalTarget(models[target_name]), LocalDrafter(models[drafter_name]), verifier=verifier,
                              tree=tree, tokenizer=tokenizer).run(PROMPT, **kwargs)
    remote_target = RemoteTarget(workers[target_name], verify_at=verify_at)
    remote_drafter = RemoteDrafter(workers[drafter_name], remote_target.vocab_size)
    try:
        assert remote_drafter.vocab_size == models[drafter_name].config.vocab_size  # the worker's model's
        remote = SpeculativeEngine(remote_target, remote_drafter, verifier=verifier, tree=tree,
                                   tokenizer=tokenizer).run(PROMPT, **kwargs)
    finally:
        remote_drafter.close()
        remote_target.close()
    assert remote.tokens == local.tokens
    assert [s.accepted for s in remote.stats.steps] == [s.accepted for s in local.stats.steps]
    assert sum(s.accepted for s in remote.stats.steps) > 0


def test_a_drafter_worker_is_fed_the_targets_padding_ids_and_drafts_on(models, workers):
    """The padded target emits its padding ids; the remote drafter is told them (its outcome
    is decoded over the target's width) and drafts after them; a coupling makes the tokens
    the target's own."""
    remote_drafter = RemoteDrafter(workers["drafter"], VOCAB + PADDING)
    engine = SpeculativeEngine(LocalTarget(models["padded target"]), remote_drafter, verifier="gumbel",
                               tree="kary:2x3", tokenizer=AutoTokenizer.from_pretrained(str(TARGET_PATH)))
    target_only = SpeculativeEngine(LocalTarget(models["padded target"]), None, verifier="gumbel")
    try:
        outs = [engine.run(PROMPT, max_new_tokens=60, temperature=1.0, seed=seed, ignore_eos=True) for seed in range(6)]
    finally:
        remote_drafter.close()
    tokens = [t for out in outs for t in out.tokens]
    assert sum(t >= VOCAB for t in tokens) >= 2, "the target must emit padding ids for the test to mean anything"
    assert all(out.stats.drafter_lost is None for out in outs)
    assert [out.tokens for out in outs] == [target_only.run(PROMPT, max_new_tokens=60, temperature=1.0, seed=seed,
                                                            ignore_eos=True).tokens for seed in range(6)]


def test_a_coordinator_process_serves_a_padded_pair_with_the_in_process_tokens(models, workers, tmp_path):
    coordinator = Worker(tmp_path / "coordinator.log", "--role", "coordinator", "--target", workers["padded target"],
                         "--drafter", workers["drafter"], "--verifier", "rrsw", "--tree", "kary:2x3",
                         "--tokenizer", str(TARGET_PATH))
    try:
        stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(coordinator.address))
        reply = stub.Generate(generation_pb2.GenerateRequest(prompt_ids=PROMPT, max_tokens=30, temperature=0.8,
                                                             seed=2, ignore_eos=True), timeout=60)
    finally:
        coordinator.stop()
    local = SpeculativeEngine(LocalTarget(models["padded target"]), LocalDrafter(models["drafter"]), verifier="rrsw",
                              tree="kary:2x3", tokenizer=AutoTokenizer.from_pretrained(str(TARGET_PATH))).run(
        PROMPT, max_new_tokens=30, temperature=0.8, seed=2, ignore_eos=True)
    assert list(reply.token_ids) == local.tokens and reply.usage.accepted_draft_tokens > 0


def test_a_drafter_worker_refuses_a_width_far_past_its_vocabulary(workers):
    remote_drafter = RemoteDrafter(workers["drafter"], VOCAB)
    try:
        spec = SequenceSpec(tuple(PROMPT), SamplingParams(1.0), 0, "rrsw", vocab_size=3 * VOCAB)
        with pytest.raises(ValueError, match=rf"^this drafter's vocabulary of {VOCAB} tokens is fitted to a "
                                             rf"target's of at most {2 * VOCAB}, not {3 * VOCAB}$"):
            remote_drafter.open(spec)
    finally:
        remote_drafter.close()


def test_a_drafter_worker_of_another_size_that_predates_fitting_is_refused_when_connected(models, monkeypatch):
    monkeypatch.setattr(codec, "WORKER_FEATURES", tuple(f for f in codec.WORKER_FEATURES if f != "padded_vocabulary"))
    server, port = serve_drafter(LocalDrafter(models["padded drafter"]), "127.0.0.1:0")
    try:
        with pytest.raises(ValueError, match=rf"drafter worker at 127.0.0.1:{port}: its vocab_size "
                                             rf"\({VOCAB + PADDING}\) differs from the target's \({VOCAB}\), and it "
                                             rf"predates fitting its laws to a target's: upgrade it"):
            RemoteDrafter(f"127.0.0.1:{port}", VOCAB, timeout=10)
    finally:
        server.stop(0).wait()


class _OlderDrafterServicer(DrafterServicer):
    """A drafter worker of before padded vocabularies: it lists no "padded_vocabulary" and
    reads no `vocab_size` (proto3 drops a field it does not know)."""

    def Info(self, request, context):
        info = super().Info(request, context)
        info.ClearField("features")
        info.features.extend(f for f in codec.WORKER_FEATURES if f != "padded_vocabulary")
        return info

    def Open(self, request, context):
        request.spec.ClearField("vocab_size")
        return super().Open(request, context)


def test_a_pool_of_a_padded_drafter_and_an_older_worker_calibrates_at_the_targets_width(models, workers):
    """sequoia:auto's calibration drafted at the pool's first drafter's size (72, past the older
    worker's 64 ids: it refused the calibration's prompt); requests draft at the target's."""
    older = _OlderDrafterServicer(LocalDrafter(models["drafter"]), "drafter")
    server, port = _serve(older, "rayspec.v1.DrafterService", worker_pb2_grpc.add_DrafterServiceServicer_to_server,
                          "127.0.0.1:0")
    pool = DrafterPool([RemoteDrafter(workers["padded drafter"], VOCAB), RemoteDrafter(f"127.0.0.1:{port}", VOCAB)])
    tokenizer = AutoTokenizer.from_pretrained(str(TARGET_PATH))
    try:
        engine = SpeculativeEngine(LocalTarget(models["target"]), pool, verifier="gumbel", tree="sequoia:auto",
                                   tokenizer=tokenizer)
        target_only = SpeculativeEngine(LocalTarget(models["target"]), None, verifier="gumbel")
        for seed in range(2):  # one sequence on each drafter
            kwargs = dict(max_new_tokens=20, temperature=1.0, seed=seed, ignore_eos=True)
            assert engine.run(PROMPT, **kwargs).tokens == target_only.run(PROMPT, **kwargs).tokens
    finally:
        for drafter in pool.drafters:
            drafter.close()
        server.stop(0).wait()
