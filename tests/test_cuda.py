"""rayspec on a CUDA device: what the CPU suite shows, carried over to a GPU.

Skipped where there is no CUDA (CI); run on a GPU machine with `pytest tests/test_cuda.py`.

* Every verifier gives a seed's very tokens whether its float64 rows live on the CPU or the
  GPU: uniforms are drawn on the CPU (`rayspec.verify.base.draw_uniform`), so the CPU suite's
  exactness and chi-square tests hold on CUDA too.  Then a chi-square on CUDA itself.
* The demo pair on CUDA in float32: at T = 0 every verifier reproduces target-only greedy
  decoding (the tree forward, the tree mask and the cache's commit and rollback on a GPU).
* Workers as plain processes on CUDA give the in-process engine's tokens for the same seed,
  with the verifier at the target and at the coordinator.
* Structured output on CUDA (the allowed-token masks live on the device): the CPU engine's
  tokens for the same seed, and JSON that follows its schema (needs outlines-core there:
  carry its wheel, which has no dependencies).
* Cross-request batching on CUDA: a padded forward gives each sequence the logits it gets
  alone, and concurrent greedy generations, whose forwards are batched, the target's tokens.
* A target worker on CUDA killed under a sequence and started again at its port: the sequence
  resumes there (`SequenceSpec.resumed`) with the tokens of an uninterrupted decode.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from rayspec.demo import DRAFTER_PATH, TARGET_PATH, load_prompts
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.engine import GenerationStats
from rayspec.models import load_causal_lm
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.laws import conditional_laws
from tests.cases import adversarial_pairs
from tests.engine.test_engine import VERIFIER_TREES
from tests.stats import assert_frequencies_match, law_of_tensor
from tests.verify.test_contract import PRIVATE, draft_counts

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _random_rows(rows: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(rows, vocab, generator=generator, dtype=torch.float64), -1)
    q = torch.softmax(p.log() + torch.randn(rows, vocab, generator=generator, dtype=torch.float64), -1)
    return p, q


@pytest.mark.parametrize("name", available_verifiers())
def test_a_seed_gives_the_same_drafts_and_tokens_on_cpu_and_cuda(name):
    verifier = get_verifier(name)
    p, q = _random_rows(2000, 300, seed=len(name))
    k = draft_counts(verifier, 3)[-1]

    def run(device):
        generator = torch.Generator().manual_seed(7)
        drafts = verifier.sample_drafts_batch(q.to(device), k, generator)
        tokens, index = verifier.verify_batch(p.to(device), q.to(device), drafts, generator)
        return [t.cpu() for t in (drafts, tokens, index)]

    on_cpu, on_cuda = run("cpu"), run("cuda")
    for what, a, b in zip(("drafts", "tokens", "accepted index"), on_cpu, on_cuda):
        differ = int((a != b).sum())
        assert differ == 0, f"{name}: {differ} of {a.numel()} {what} differ between CPU and CUDA"


@pytest.mark.parametrize("name", PRIVATE)
def test_verification_on_cuda_follows_the_output_law(name):
    verifier = get_verifier(name)
    generator = torch.Generator().manual_seed(5)
    _, p, q = next(c for c in adversarial_pairs() if c[0] == "spechub fixture 2")
    k = draft_counts(verifier, 3)[-1]
    drafts, probs, laws = conditional_laws(verifier, p, q, k)
    row = int(probs.argmax())
    n = 20_000
    rows = [x.unsqueeze(0).expand(n, -1).contiguous().cuda() for x in (p, q, drafts[row])]
    tokens, _ = verifier.verify_batch(*rows, generator)
    assert tokens.device.type == "cuda"
    assert_frequencies_match(tokens.tolist(), law_of_tensor(laws[row]), what=f"{name} on CUDA, drafts {drafts[row].tolist()}")


@pytest.fixture(scope="module")
def demo_on_cuda():
    target, tokenizer = load_causal_lm(TARGET_PATH, device="cuda", dtype="float32")
    drafter, _ = load_causal_lm(DRAFTER_PATH, device="cuda", dtype="float32")
    prompts = [tokenizer.encode(text, add_special_tokens=False) for text in load_prompts(4)]
    return LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), prompts


@pytest.fixture(scope="module")
def greedy_on_cuda(demo_on_cuda):
    target, _, prompts = demo_on_cuda
    return [SpeculativeEngine(target).run(prompt, max_new_tokens=32, temperature=0).tokens for prompt in prompts]


@pytest.mark.parametrize("name", available_verifiers())
def test_temperature_zero_on_cuda_equals_target_greedy(demo_on_cuda, greedy_on_cuda, name):
    target, drafter, prompts = demo_on_cuda
    engine = SpeculativeEngine(target, drafter, verifier=name, tree=VERIFIER_TREES[name])
    assert not torch.backends.cuda.cudnn_sdp_enabled(), "a TreeLM on CUDA turns cuDNN's attention off"
    steps = 0
    for prompt, reference in zip(prompts, greedy_on_cuda):
        out = engine.run(prompt, max_new_tokens=32, temperature=0)
        assert out.tokens == reference, f"{name} on CUDA diverged from target greedy on prompt {prompt[:8]}..."
        steps += len(out.stats.steps)
    assert steps < 0.8 * sum(map(len, greedy_on_cuda)), f"{name}: the drafter never helped ({steps} steps)"


def test_a_batched_forward_on_cuda_gives_each_sequence_its_logits_alone(demo_on_cuda):
    from rayspec.models.batching import _Call, forward_batch
    from rayspec.models.tree_lm import TreeLM
    from rayspec.tree.structure import TreeShape

    target, _, prompts = demo_on_cuda
    shapes = [TreeShape.kary(2, 3), TreeShape.chain(4), TreeShape.kary(3, 2), TreeShape.chain(1)]

    def sequences():
        lms = [TreeLM(target.model) for _ in prompts]
        for lm, prompt in zip(lms, prompts):
            lm.prefill(prompt[:-1])
        return lms

    calls = [dict(tokens=[prompt[-1]] + [(7 * i + 3) % 8000 for i in range(1, shape.size)], parents=list(shape.parents),
                  offsets=list(shape.depth)) for prompt, shape in zip(prompts, shapes)]
    alone = [lm.forward_alone(**call) for lm, call in zip(sequences(), calls)]
    batched = forward_batch([_Call(lm, **call) for lm, call in zip(sequences(), calls)])
    for i, (a, b) in enumerate(zip(alone, batched)):
        assert b.device.type == "cuda" and float((a - b).abs().max()) < 1e-3, f"sequence {i}"


def test_concurrent_greedy_generations_on_cuda_are_batched_and_give_target_greedy(demo_on_cuda, greedy_on_cuda):
    from concurrent.futures import ThreadPoolExecutor

    target, drafter, prompts = demo_on_cuda
    engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="kary:2x3")
    work = [prompt for prompt in prompts for _ in range(4)]
    with ThreadPoolExecutor(len(work)) as pool:
        outs = list(pool.map(lambda prompt: engine.run(prompt, max_new_tokens=32, temperature=0), work))
    assert [out.tokens for out in outs] == [reference for reference in greedy_on_cuda for _ in range(4)]
    assert max(step.target_batch for out in outs for step in out.stats.steps) >= 2


@pytest.fixture(scope="module")
def workers_on_cuda(tmp_path_factory):
    logs = tmp_path_factory.mktemp("cuda-workers")
    device = ("--device", "cuda", "--dtype", "float32")
    target = Worker(logs / "target.log", "--role", "target", "--model", str(TARGET_PATH), *device)
    drafter = Worker(logs / "drafter.log", "--role", "drafter", "--model", str(DRAFTER_PATH), *device)
    yield target.address, drafter.address
    for worker in (drafter, target):
        worker.stop()


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
@pytest.mark.parametrize("name, tree", [("rrsw", "kary:2x3"), ("gumbel", "kary:2x3"), ("spechub", "kary:2x2")])
def test_workers_on_cuda_give_the_in_process_tokens(demo_on_cuda, workers_on_cuda, name, tree, verify_at):
    target, drafter, prompts = demo_on_cuda
    remote_target = RemoteTarget(workers_on_cuda[0], verify_at=verify_at)
    remote = SpeculativeEngine(remote_target, RemoteDrafter(workers_on_cuda[1], remote_target.vocab_size),
                               verifier=name, tree=tree)
    local = SpeculativeEngine(target, drafter, verifier=name, tree=tree)
    try:
        for i, prompt in enumerate(prompts):
            expected = local.run(prompt, max_new_tokens=40, temperature=0.8, seed=100 + i).tokens
            assert remote.run(prompt, max_new_tokens=40, temperature=0.8, seed=100 + i).tokens == expected
    finally:
        remote_target.close()


@pytest.mark.skipif(importlib.util.find_spec("outlines_core") is None, reason="needs outlines-core")
@pytest.mark.parametrize("name, tree", [("rrsw", "kary:2x3"), ("gumbel", "kary:2x3"), ("greedy", "kary:2x3")])
def test_structured_output_on_cuda_gives_the_cpu_tokens(demo_on_cuda, name, tree):
    from rayspec.engine.structured import StructuredOutput

    target, drafter, prompts = demo_on_cuda
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "on": {"type": "boolean"}}, "required": ["name", "on"]}
    on_cpu = [load_causal_lm(path, device="cpu", dtype="float32") for path in (TARGET_PATH, DRAFTER_PATH)]
    cpu = SpeculativeEngine(LocalTarget(*on_cpu[0]), LocalDrafter(*on_cpu[1]), verifier=name, tree=tree)
    cuda = SpeculativeEngine(target, drafter, verifier=name, tree=tree)
    tokenizer = on_cpu[0][1]
    for i, prompt in enumerate(prompts):
        kwargs = dict(max_new_tokens=48, temperature=0 if name == "greedy" else 0.8, seed=i,
                      structured_output=StructuredOutput(json_schema=schema))
        expected = cpu.run(prompt, **kwargs)
        got = cuda.run(prompt, **kwargs)
        assert (got.tokens, got.finish_reason) == (expected.tokens, expected.finish_reason)
        if got.finish_reason == "stop":
            assert set(json.loads(tokenizer.decode(got.tokens))) == {"name", "on"}


def resume_after_a_killed_target_worker(device: str, tmp_path) -> None:
    """A seeded gumbel decode whose target worker process is SIGKILLed after three chunks and
    started again at its port, as Ray restarts an actor: the tokens of the in-process engine.
    gumbel's tokens are a function of the seed and the target's laws, so the resumed session's
    laws must be the uninterrupted one's to the float (a CUDA prefill of prompt + completion)."""
    import signal

    target, tokenizer = load_causal_lm(TARGET_PATH, device=device, dtype="float32")
    drafter, _ = load_causal_lm(DRAFTER_PATH, device=device, dtype="float32")
    prompt = tokenizer.encode(load_prompts(1)[0], add_special_tokens=False)
    request = dict(max_new_tokens=64, temperature=0.8, seed=11, ignore_eos=True)
    expected = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), verifier="gumbel",
                                 tree="kary:2x3").run(prompt, **request).tokens
    args = ("--role", "target", "--model", str(TARGET_PATH), "--device", device, "--dtype", "float32")
    worker = Worker(tmp_path / "target.log", *args)
    port = worker.address.rsplit(":", 1)[1]
    remote = RemoteTarget(worker.address, timeout=30)
    engine = SpeculativeEngine(remote, LocalDrafter(drafter, tokenizer), verifier="gumbel", tree="kary:2x3")
    stats, tokens = GenerationStats(), []
    try:
        stream = engine.generate(prompt, **request, stats=stats)
        for _ in range(3):
            tokens += next(stream).tokens
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait()
        worker.stop()
        worker = Worker(tmp_path / "target-again.log", *args, "--port", port)
        tokens += [t for chunk in stream for t in chunk.tokens]
    finally:
        remote.close()
        worker.stop()
    assert stats.target_resumes == 1
    assert tokens == expected, f"resumed on {device}: {tokens} != {expected}"


def test_a_target_worker_on_cuda_killed_and_started_again_resumes_its_sequence(tmp_path):
    resume_after_a_killed_target_worker("cuda", tmp_path)
