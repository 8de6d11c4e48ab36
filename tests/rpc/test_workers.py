"""Drafter, target and coordinator as plain processes talking gRPC (no Ray): the same seed
gives exactly the tokens of the in-process engine, wherever the verifier runs; bad input is
refused with INVALID_ARGUMENT and a message, and the workers keep serving."""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import ExitStack
from dataclasses import replace

import grpc
import msgpack
import pytest

from rayspec.client import Client, TokenLogprob
from rayspec.client.errors import InvalidRequestError
from rayspec.client.types import GENERATION_FEATURES
from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import SequenceSpec
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.verify.processing import SamplingParams
from rayspec.engine.structured import StructuredOutput
from rayspec.models import load_causal_lm
from rayspec.rpc.generated import (
    generation_pb2, generation_pb2_grpc, health_pb2, health_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc,
)
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from tests.rpc.processes import Worker, start_tiny_pair_workers, stopping

CASES = [("rrsw", "kary:2x3", 0.8), ("spechub", "kary:2x2", 1.0), ("gumbel", "kary:2x3", 1.0), ("greedy", "kary:3x2", 0.0),
         ("topk", "dynamic:12x3x3", 0.9)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with ExitStack() as started:
        yield start_tiny_pair_workers(started, tmp_path_factory.mktemp("workers"), "--verifier", "rrsw",
                                      "--tree", "kary:2x3")


@pytest.fixture(scope="module")
def demo_cluster(tmp_path_factory):
    """Workers of the demo pair, whose target declares an EOS (structured output ends there)."""
    tmp = tmp_path_factory.mktemp("demo_workers")
    with ExitStack() as started:  # a worker that fails to start stops those started before it
        target = started.enter_context(stopping(Worker(tmp / "target.log", "--role", "target")))
        drafter = started.enter_context(stopping(Worker(tmp / "drafter.log", "--role", "drafter")))
        coordinator = started.enter_context(stopping(Worker(
            tmp / "coordinator.log", "--role", "coordinator", "--target", target.address, "--drafter",
            drafter.address, "--verifier", "rrsw", "--tree", "kary:2x3", "--tokenizer", str(TARGET_PATH))))
        yield {"target": target, "drafter": drafter, "coordinator": coordinator}


@pytest.fixture(scope="module")
def local_engine_parts(cluster):
    target_path, drafter_path = cluster["paths"]
    target, tokenizer = load_causal_lm(target_path, "cpu", "float32")
    drafter, _ = load_causal_lm(drafter_path, "cpu", "float32")
    return LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), tokenizer


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
@pytest.mark.parametrize("verifier, tree, temperature", CASES)
def test_remote_engine_gives_the_in_process_tokens(cluster, local_engine_parts, verifier, tree, temperature, verify_at):
    local_target, local_drafter, _ = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    assert remote_drafter.context_length == local_drafter.context_length  # the worker's model tells it
    prompt = [11, 500, 7, 4000]
    kwargs = dict(max_new_tokens=40, temperature=temperature, seed=123)
    local = SpeculativeEngine(local_target, local_drafter, verifier=verifier, tree=tree).run(prompt, **kwargs)
    remote = SpeculativeEngine(remote_target, remote_drafter, verifier=verifier, tree=tree).run(prompt, **kwargs)
    assert remote.tokens == local.tokens
    assert [s.accepted for s in remote.stats.steps] == [s.accepted for s in local.stats.steps]
    assert all(s.wire_bytes > 0 for s in remote.stats.steps)
    assert all(s.verify > 0 for s in remote.stats.steps)  # timed where the verifier runs, either side


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_a_truncated_drafter_worker_gives_the_in_process_tokens_in_fewer_bytes(cluster, local_engine_parts, tmp_path,
                                                                                verify_at):
    """`--draft-top-k 16`: the worker drafts what an in-process drafter kept to 16 tokens drafts,
    and its q rows cross as 16 entries each rather than the vocabulary."""
    _, drafter_path = cluster["paths"]
    local_target, _, tokenizer = local_engine_parts
    local_drafter = LocalDrafter(load_causal_lm(drafter_path, "cpu", "float32")[0], tokenizer, draft_top_k=16)
    truncated = Worker(tmp_path / "drafter-16.log", "--role", "drafter", "--model", str(drafter_path), "--draft-top-k", "16")
    try:
        runs = {}
        for name, address in (("full", cluster["drafter"].address), ("16", truncated.address)):
            remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
            engine = SpeculativeEngine(remote_target, RemoteDrafter(address, remote_target.vocab_size), tree="kary:2x3")
            runs[name] = engine.run([11, 500, 7, 4000], max_new_tokens=40, temperature=0.8, seed=5)
            remote_target.close()
        local = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").run([11, 500, 7, 4000], max_new_tokens=40,
                                                                                   temperature=0.8, seed=5)
        assert runs["16"].tokens == local.tokens
        per_step = {name: sum(s.wire_bytes for s in run.stats.steps) / len(run.stats.steps) for name, run in runs.items()}
        # at the coordinator the target's rows cross too, and stay whole
        assert per_step["16"] < per_step["full"] * (0.25 if verify_at == "target" else 0.9), per_step
    finally:
        truncated.stop()


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_remote_log_probabilities_are_the_in_process_ones(cluster, local_engine_parts, verify_at):
    """They cross as the float32 values the target computed: equal, not close, wherever the
    verifier runs (at the coordinator, the target sends them with its commit); the prompt's
    come with the Open reply."""
    local_target, local_drafter, _ = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    prompt, kwargs = [11, 500, 7, 4000], dict(max_new_tokens=30, temperature=0.8, seed=8, logprobs=4, prompt_logprobs=3)
    local = list(SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").generate(prompt, **kwargs))
    remote = list(SpeculativeEngine(remote_target, remote_drafter, tree="kary:2x3").generate(prompt, **kwargs))
    assert [c.tokens for c in remote] == [c.tokens for c in local]
    assert [c.logprobs for c in remote] == [c.logprobs for c in local]
    assert all(len(c.logprobs) == len(c.tokens) and len(c.logprobs.top_ids[0]) == 4 for c in remote)
    assert [c.prompt_logprobs for c in remote] == [c.prompt_logprobs for c in local]
    assert len(remote[0].prompt_logprobs) == 3 and len(remote[0].prompt_logprobs.top_ids[0]) == 3
    scored = SpeculativeEngine(remote_target).prompt_logprobs(prompt, top=1)
    assert scored == SpeculativeEngine(local_target).prompt_logprobs(prompt, top=1)


# values float32 cannot hold exactly: the wire rounds them, and the laws must not differ for it
PENALTIES = dict(presence_penalty=0.3, frequency_penalty=0.7, repetition_penalty=1.3, logit_bias={13: 4.1, 500: -100.0})


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_penalties_and_a_bias_give_the_in_process_tokens(cluster, local_engine_parts, verify_at):
    """The drafter and the target each penalise the laws along every drafted path themselves;
    over the wire they get the parameters only, and the tokens are the in-process ones."""
    local_target, local_drafter, tokenizer = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    prompt, kwargs = [11, 500, 7, 4000], dict(max_new_tokens=40, temperature=0.8, seed=4)
    local = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").run(prompt, **kwargs, **PENALTIES)
    remote = SpeculativeEngine(remote_target, remote_drafter, tree="kary:2x3").run(prompt, **kwargs, **PENALTIES)
    assert remote.tokens == local.tokens and 500 not in local.tokens
    assert local.tokens != SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").run(prompt, **kwargs).tokens
    with Client(cluster["coordinator"].address, timeout=60) as client:  # the coordinator's verifier: rrsw
        sdk = client.generate(prompt, max_tokens=40, temperature=0.8, seed=4, **PENALTIES)
    assert list(sdk.token_ids) == local.tokens


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_min_p_and_min_tokens_give_the_in_process_tokens(cluster, local_engine_parts, verify_at):
    """min_p (0.07: float32 cannot hold it) and min_tokens' ban of the stop tokens: the
    workers apply them to the laws along every drafted path themselves, and the tokens are
    the in-process ones, through the engine and through the SDK and the coordinator."""
    local_target, local_drafter, _ = local_engine_parts
    local_engine = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3")
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    remote_engine = SpeculativeEngine(remote_target, remote_drafter, tree="kary:2x3")
    prompt, kwargs = [11, 500, 7, 4000], dict(max_new_tokens=30, temperature=0.8, seed=4)
    plain = local_engine.run(prompt, **kwargs)
    # a stop token the plain run emits early: without min_tokens it stops the completion there
    at = next(i for i in range(3, len(plain.tokens)) if plain.tokens[i] not in plain.tokens[:i])
    stop = plain.tokens[at]
    stopped = local_engine.run(prompt, **kwargs, stop=[stop])
    assert (stopped.tokens, stopped.finish_reason) == (plain.tokens[:at], "stop") and at < 12
    extensions = dict(min_p=0.07, min_tokens=12)
    local = local_engine.run(prompt, **kwargs, stop=[stop], **extensions)
    assert len(local.tokens) >= 12 and stop not in local.tokens[:12]
    assert local_engine.run(prompt, **kwargs, min_p=0.07).tokens != plain.tokens  # min_p changes the law
    remote = remote_engine.run(prompt, **kwargs, stop=[stop], **extensions)
    assert (remote.tokens, remote.finish_reason) == (local.tokens, local.finish_reason)
    # the stop token made all but certain: banned for exactly min_tokens tokens, then drawn
    certain = dict(min_tokens=6, logit_bias={stop: 100.0})
    local_certain = local_engine.run(prompt, **kwargs, stop=[stop], **certain)
    assert (len(local_certain.tokens), local_certain.finish_reason) == (6, "stop") and stop not in local_certain.tokens
    assert local_engine.run(prompt, **kwargs, stop=[stop], logit_bias={stop: 100.0}).tokens == []
    remote_certain = remote_engine.run(prompt, **kwargs, stop=[stop], **certain)
    assert (remote_certain.tokens, remote_certain.finish_reason) == (local_certain.tokens, "stop")
    with Client(cluster["coordinator"].address, timeout=60) as client:  # the coordinator's verifier: rrsw
        sdk = client.generate(prompt, max_tokens=30, temperature=0.8, seed=4, stop_token_ids=[stop], **extensions)
        sdk_certain = client.generate(prompt, max_tokens=30, temperature=0.8, seed=4, stop_token_ids=[stop],
                                      **certain)
        sdk_stopped = client.generate(prompt, max_tokens=30, temperature=0.8, seed=4, stop_token_ids=[stop])
    assert (list(sdk.token_ids), sdk.finish_reason) == (local.tokens, local.finish_reason)
    assert (list(sdk_certain.token_ids), sdk_certain.finish_reason) == (local_certain.tokens, "stop")
    assert (list(sdk_stopped.token_ids), sdk_stopped.finish_reason) == (plain.tokens[:at], "stop")


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_allowed_token_ids_give_the_in_process_tokens(cluster, local_engine_parts, verify_at):
    """The workers restrict every drafted path's laws to the allowed tokens themselves: the
    in-process tokens through the engine, and through the SDK and the coordinator."""
    local_target, local_drafter, _ = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_engine = SpeculativeEngine(remote_target, RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size),
                                      tree="kary:2x3")
    prompt, kwargs = [11, 500, 7, 4000], dict(max_new_tokens=24, temperature=0.8, seed=4)
    plain = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").run(prompt, **kwargs)
    allowed = sorted(set(range(0, 8192, 7)) - set(plain.tokens))
    local = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3").run(prompt, **kwargs,
                                                                                 allowed_token_ids=allowed)
    assert len(local.tokens) == 24 and set(local.tokens) <= set(allowed)
    remote = remote_engine.run(prompt, **kwargs, allowed_token_ids=allowed)
    assert (remote.tokens, remote.finish_reason) == (local.tokens, local.finish_reason)
    with Client(cluster["coordinator"].address, timeout=60) as client:  # the coordinator's verifier: rrsw
        sdk = client.generate(prompt, max_tokens=24, temperature=0.8, seed=4, allowed_token_ids=allowed)
        with pytest.raises(InvalidRequestError, match="allowed_token_ids names token 8192, outside the vocabulary of 8192"):
            client.generate(prompt, max_tokens=4, allowed_token_ids=[5, 8192])
    assert list(sdk.token_ids) == local.tokens


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_structured_output_gives_the_in_process_tokens(demo_cluster, verify_at):
    """Both workers compile the expression over their own tokenizers and restrict every
    drafted path's laws to it: the in-process tokens through the engine, the SDK and the
    coordinator, and a bad expression is INVALID_ARGUMENT."""
    cluster = demo_cluster
    target, tokenizer = load_causal_lm(TARGET_PATH, "cpu", "float32")
    drafter, drafter_tokenizer = load_causal_lm(DRAFTER_PATH, "cpu", "float32")
    local_engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, drafter_tokenizer),
                                     tree="kary:2x3")
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_engine = SpeculativeEngine(remote_target, RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size),
                                      tree="kary:2x3")
    prompt, kwargs = tokenizer.encode("config = ", add_special_tokens=False), dict(max_new_tokens=40, temperature=0.8)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "on": {"type": "boolean"}}, "required": ["name", "on"]}
    for seed in (4, 5):
        local = local_engine.run(prompt, **kwargs, seed=seed, structured_output=StructuredOutput(json_schema=schema))
        assert local.finish_reason == "stop" and set(json.loads(tokenizer.decode(local.tokens))) == {"name", "on"}
        remote = remote_engine.run(prompt, **kwargs, seed=seed, structured_output=StructuredOutput(json_schema=schema))
        assert (remote.tokens, remote.finish_reason) == (local.tokens, local.finish_reason)
    choice = local_engine.run(prompt, **kwargs, seed=4, structured_output=StructuredOutput(choice=["on", "off"]))
    with Client(cluster["coordinator"].address, timeout=60) as client:  # the coordinator's verifier: rrsw
        sdk = client.generate(prompt, max_tokens=40, temperature=0.8, seed=4, structured_output={"json_schema": schema})
        sdk_choice = client.generate(prompt, max_tokens=40, temperature=0.8, seed=4,
                                     structured_output={"choice": ["on", "off"]})
        with pytest.raises(InvalidRequestError, match=r"the regular expression '\(\(' cannot be used"):
            client.generate(prompt, max_tokens=4, structured_output={"regex": "(("})
    assert list(sdk.token_ids) == local_engine.run(prompt, **kwargs, seed=4,
                                                   structured_output=StructuredOutput(json_schema=schema)).tokens
    assert (list(sdk_choice.token_ids), sdk_choice.text) == (choice.tokens, tokenizer.decode(choice.tokens))
    assert sdk_choice.text in ("on", "off")


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_concurrent_sequences_share_the_workers_forwards_and_keep_their_greedy_tokens(demo_cluster, verify_at):
    """Eight sequences at once over one target worker and one drafter worker: their forwards
    are batched in the workers (each step says how many sequences shared its target's
    forward), and every sequence still decodes the target's greedy tokens."""
    from concurrent.futures import ThreadPoolExecutor

    target, tokenizer = load_causal_lm(TARGET_PATH, "cpu", "float32")
    prompts = [tokenizer.encode(text, add_special_tokens=False) for text in
               ("def add(a, b):", "import os\n", "class Point:", "for i in range(", "# sort a list\n",
                "with open(path) as f:", "x = [", "if __name__ == ")]
    alone = SpeculativeEngine(LocalTarget(target, tokenizer))
    expected = [alone.run(p, max_new_tokens=24, temperature=0).tokens for p in prompts]
    remote_target = RemoteTarget(demo_cluster["target"].address, verify_at=verify_at)
    engine = SpeculativeEngine(remote_target, RemoteDrafter(demo_cluster["drafter"].address, remote_target.vocab_size),
                               tree="kary:2x3")
    with ThreadPoolExecutor(len(prompts)) as pool:
        outs = list(pool.map(lambda p: engine.run(p, max_new_tokens=24, temperature=0), prompts))
    assert [out.tokens for out in outs] == expected
    steps = [step for out in outs for step in out.stats.steps]
    assert all(step.target_batch >= 1 for step in steps)
    assert max(step.target_batch for step in steps) >= 3, sorted(step.target_batch for step in steps)
    assert max(step.drafter_batch for step in steps) > 1
    remote_target.close()


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_bad_words_give_the_in_process_tokens(cluster, local_engine_parts, verify_at):
    """Bad words of two tokens change the laws of drafted nodes whose paths end in a word's
    first token: the workers ban them there themselves.  Through the SDK, the coordinator
    tokenizes text bad words as the engine does."""
    local_target, local_drafter, tokenizer = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    remote_engine = SpeculativeEngine(remote_target, RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size),
                                      tree="kary:2x3", tokenizer=tokenizer)
    local_engine = SpeculativeEngine(local_target, local_drafter, tree="kary:2x3", tokenizer=tokenizer)
    prompt, kwargs = [11, 500, 7, 4000], dict(max_new_tokens=24, temperature=0.8, seed=4)
    plain = local_engine.run(prompt, **kwargs)
    words = [tuple(plain.tokens[i : i + 2]) for i in (1, 5, 9)] + [(plain.tokens[14],)]
    local = local_engine.run(prompt, **kwargs, bad_words=words)
    assert local.tokens[:1] == plain.tokens[:1] and local.tokens != plain.tokens
    remote = remote_engine.run(prompt, **kwargs, bad_words=words)
    assert (remote.tokens, remote.finish_reason) == (local.tokens, local.finish_reason)
    text_words = [tokenizer.decode(plain.tokens[3:5]).strip(), tokenizer.decode(plain.tokens[7:8]).strip()]
    by_text = local_engine.run(prompt, **kwargs, bad_words=text_words)
    assert by_text.tokens != plain.tokens
    with Client(cluster["coordinator"].address, timeout=60) as client:  # the coordinator's verifier: rrsw
        sdk = client.generate(prompt, max_tokens=24, temperature=0.8, seed=4, bad_words=text_words)
        with pytest.raises(InvalidRequestError, match="a word must have a character other than spaces"):
            client.generate(prompt, max_tokens=4, bad_words=["ok", " "])
        # the coordinator lists the fields it knows, and reads the other new ones too
        assert client.server_features() == frozenset(GENERATION_FEATURES)
        cut = client.generate(prompt, max_tokens=8, temperature=0.8, seed=4, truncate_prompt_tokens=2)
        with pytest.raises(InvalidRequestError, match="truncate_prompt_tokens must be -1 or between 1"):
            client.generate(prompt, max_tokens=4, truncate_prompt_tokens=0)
    assert list(sdk.token_ids) == by_text.tokens
    assert cut.usage.prompt_tokens == 2
    assert list(cut.token_ids) == local_engine.run(prompt[-2:], max_new_tokens=8, temperature=0.8, seed=4).tokens


def test_remote_decoding_to_the_end_of_the_context_gives_the_in_process_tokens(cluster, local_engine_parts):
    """The last steps before the context's end draft nothing: the engine releases the drafter
    worker's session there, mid-request, and goes on with the target worker alone."""
    local_target, local_drafter, _ = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address)
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    prompt = [(37 * i) % 8000 + 1 for i in range(remote_target.context_length - 24)]
    kwargs = dict(max_new_tokens=40, temperature=0.8, seed=5)
    local = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3").run(prompt, **kwargs)
    remote = SpeculativeEngine(remote_target, remote_drafter, verifier="rrsw", tree="kary:2x3").run(prompt, **kwargs)
    assert (remote.tokens, remote.finish_reason) == (local.tokens, local.finish_reason)
    assert len(prompt) + len(remote.tokens) == remote_target.context_length and remote.finish_reason == "length"
    assert remote.stats.steps[0].drafted and not remote.stats.steps[-1].drafted


def test_a_target_worker_reports_the_prompt_tokens_its_prefix_cache_gave(cluster):
    target = RemoteTarget(cluster["target"].address)
    prompt = [(7 * i) % 60 + 1 for i in range(40)]
    spec = SequenceSpec(tuple(prompt), SamplingParams(), seed=0, verifier="rrsw", verifier_params={})
    try:
        opened = [target.open(replace(spec, prompt_ids=tuple(prompt + tail))) for tail in ([61], [62, 63])]
        for session in opened:
            session.close()
        assert [session.cached_tokens for session in opened] == [0, 40]  # the 40 tokens the prompts share
    finally:
        target.close()


def test_token_only_verifiers_ship_far_fewer_bytes(cluster):
    target = RemoteTarget(cluster["target"].address)
    drafter = RemoteDrafter(cluster["drafter"].address, target.vocab_size)
    per_step = {}
    for verifier in ("rrsw", "gumbel"):
        out = SpeculativeEngine(target, drafter, verifier=verifier, tree="kary:2x3").run([5, 6, 7], max_new_tokens=20, seed=1)
        per_step[verifier] = sum(s.wire_bytes for s in out.stats.steps) / len(out.stats.steps)
    # rrsw ships 7 internal rows of 8192 float32 (~229 kB); gumbel only token ids
    assert per_step["rrsw"] > 150_000 and per_step["gumbel"] < 2_000


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_a_prediction_beside_drafted_trees_gives_the_in_process_tokens(cluster, local_engine_parts, verify_at):
    """Above T = 0 a prediction's chain is grafted beside the drafter's tree: the mark of the
    chain crosses with the tree (`Tree.predicted`), and the target walks it as the engine in
    this process does, wherever the verifier runs."""
    local_target, local_drafter, _ = local_engine_parts
    remote_target = RemoteTarget(cluster["target"].address, verify_at=verify_at)
    assert remote_target.verifies_predictions
    remote_drafter = RemoteDrafter(cluster["drafter"].address, remote_target.vocab_size)
    prompt = [11, 500, 7, 4000]
    greedy = SpeculativeEngine(local_target, local_drafter, tree="kary:2x2").run(prompt, max_new_tokens=30, temperature=0)
    kwargs = dict(max_new_tokens=30, temperature=0.7, seed=5, prediction=greedy.tokens, tree="chain:4")
    local = SpeculativeEngine(local_target, local_drafter, tree="kary:2x2").run(prompt, **kwargs)
    remote = SpeculativeEngine(remote_target, remote_drafter, tree="kary:2x2").run(prompt, **kwargs)
    assert remote.tokens == local.tokens
    assert [(s.drafted, s.ranks) for s in remote.stats.steps] == [(s.drafted, s.ranks) for s in local.stats.steps]
    assert remote.stats.steps[0].drafted == 4 + 6  # the chain beside the drafter's kary:2x2


def test_a_prediction_through_the_sdk_gives_the_in_process_tokens_in_its_steps(cluster, local_engine_parts):
    """Predicted Outputs across processes: the coordinator drafts the prediction's chains
    itself (nothing more crosses), so the SDK gets the in-process engine's tokens and steps,
    for a sample as for the greedy completion — which a right prediction decodes in few steps."""
    local_target, local_drafter, tokenizer = local_engine_parts
    engine = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3")
    ids = tokenizer.encode("def add(a, b):", add_special_tokens=False)
    greedy = engine.run(ids, max_new_tokens=30, temperature=0.0, seed=9)
    text = tokenizer.decode(greedy.tokens)  # a text prediction is drafted as the coordinator tokenizes it
    with Client(cluster["coordinator"].address, timeout=60) as client:
        for temperature in (0.0, 0.7):
            retokenized = tokenizer.encode(text, add_special_tokens=False)
            for prediction, drafted in ((greedy.tokens, greedy.tokens), (text, retokenized)):
                local = engine.run(ids, max_new_tokens=30, temperature=temperature, seed=9, prediction=drafted)
                reply = client.generate(ids, max_tokens=30, temperature=temperature, seed=9, prediction=prediction)
                assert list(reply.token_ids) == local.tokens
                assert reply.usage.steps == len(local.stats.steps)
        with pytest.raises(InvalidRequestError, match=r"prediction token ids out of the vocabulary \[0, 8192\): \[9000\]"):
            next(iter(client.stream(ids, max_tokens=4, prediction=[5, 9000])))
    with pytest.raises(ValueError, match="prediction token ids out of the vocabulary"):  # refused as it is built
        GenerationRequest(engine, tokenizer, Limits(), prompt_ids=ids, prediction=[5, 9000])
    assert local.tokens != greedy.tokens  # T = 0.7: a sample, not the prediction
    exact = engine.run(ids, max_new_tokens=30, temperature=0.0, seed=9, prediction=greedy.tokens)
    assert exact.tokens == greedy.tokens and len(exact.stats.steps) == 4 < len(greedy.stats.steps)  # chains of 8


def test_generation_service_matches_the_in_process_engine(cluster, local_engine_parts):
    local_target, local_drafter, tokenizer = local_engine_parts
    stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(cluster["coordinator"].address))
    prompt = "def add(a, b):"
    reply = stub.Generate(generation_pb2.GenerateRequest(prompt=prompt, max_tokens=30, temperature=0.7, seed=9), timeout=60)
    local = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3").run(
        tokenizer.encode(prompt, add_special_tokens=False), max_new_tokens=30, temperature=0.7, seed=9
    )
    assert list(reply.token_ids) == local.tokens and reply.seed == 9
    assert reply.usage.completion_tokens == 30 and reply.usage.steps == len(local.stats.steps)
    stream = list(stub.GenerateStream(generation_pb2.GenerateRequest(prompt=prompt, max_tokens=30, temperature=0.7, seed=9), timeout=60))
    chunks = [m.chunk for m in stream if m.HasField("chunk")]
    assert [t for c in chunks for t in c.token_ids] == local.tokens
    assert "".join(c.text for c in chunks) == reply.text
    assert stream[-1].HasField("complete") and stream[-1].complete.finish_reason == "length"


def test_the_client_sdk_gets_the_in_process_log_probabilities(cluster, local_engine_parts):
    local_target, local_drafter, tokenizer = local_engine_parts
    ids = tokenizer.encode("def add(a, b):", add_special_tokens=False)
    chunks = list(SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3").generate(
        ids, max_new_tokens=20, temperature=0.7, seed=9, logprobs=2, prompt_logprobs=1))

    def sdk_logprobs(tokens, logprobs):  # ranks included: they cross both workers' wires too
        return tuple(TokenLogprob(token, value, tuple(zip(top_ids, top_values)), rank)
                     for token, value, top_ids, top_values, rank
                     in zip(tokens, logprobs.chosen, logprobs.top_ids, logprobs.top_values, logprobs.ranks, strict=True))

    expected = tuple(t for c in chunks for t in sdk_logprobs(c.tokens, c.logprobs))
    expected_prompt = sdk_logprobs(ids[1:], chunks[0].prompt_logprobs)
    kwargs = dict(max_tokens=20, temperature=0.7, seed=9, logprobs=2, prompt_logprobs=1)
    with Client(cluster["coordinator"].address, timeout=60) as client:
        completion = client.generate(ids, **kwargs)
        stream = client.stream(ids, **kwargs)
        streamed = list(stream)
        plain = client.generate(ids, max_tokens=3, seed=9)
    assert completion.logprobs == expected and stream.completion.logprobs == expected
    assert all(t.rank >= 1 for t in expected) and any(t.rank > 1 for t in expected)
    assert [len(c.logprobs) for c in streamed] == [len(c.tokens) for c in chunks]
    assert len(expected_prompt) == len(ids) - 1 and len(expected_prompt[0].top) == 1
    assert completion.prompt_logprobs == expected_prompt and stream.completion.prompt_logprobs == expected_prompt
    assert streamed[0].prompt_logprobs == expected_prompt and all(not c.prompt_logprobs for c in streamed[1:])
    assert plain.logprobs == () and plain.prompt_logprobs == ()


def test_the_client_sdk_gets_the_in_process_text_with_vllms_text_options_and_stop_reason(cluster, local_engine_parts):
    """include_stop_str_in_output, skip_special_tokens and stop_reason through the SDK, the
    coordinator and plain-process workers: what the in-process request gives."""
    local_target, local_drafter, tokenizer = local_engine_parts
    engine = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3", tokenizer=tokenizer)
    ids = tokenizer.encode("def add(a, b):", add_special_tokens=False)
    common = dict(max_tokens=20, temperature=0.7, seed=9)

    def in_process(**options):
        request = GenerationRequest(engine, tokenizer, Limits(), prompt_ids=ids, **common, **options)
        assert "".join(step.text for step in request.run()) == request.text
        return request.text, request.token_ids, request.finish_reason, request.stop_reason

    plain_text, plain_tokens, _, _ = in_process()
    stop_token = next(t for i, t in enumerate(plain_tokens) if i >= 3 and t not in plain_tokens[:i])
    stop_string = next(plain_text[i:i + 2] for i in range(4, len(plain_text)) if plain_text[i:i + 2].strip())
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    cases = {
        "stop string, included": dict(stop=[stop_string], include_stop_str_in_output=True),
        "stop string": dict(stop=[stop_string]),
        "stop token": dict(stop_token_ids=[stop_token]),
        "special tokens' text": dict(ignore_eos=True, logit_bias={eos: 100.0}, skip_special_tokens=False),
        "special tokens skipped": dict(ignore_eos=True, logit_bias={eos: 100.0}),
    }
    expected = {name: in_process(**options) for name, options in cases.items()}
    cut = plain_text.find(stop_string)
    assert expected["stop string, included"] == (plain_text[:cut + 2], *expected["stop string"][1:3], stop_string)
    assert expected["stop string"][0] == plain_text[:cut]
    assert expected["stop token"][1:] == (plain_tokens[:plain_tokens.index(stop_token)], "stop", stop_token)
    assert expected["special tokens' text"][:2] == ("<|endoftext|>" * 20, [eos] * 20)
    assert expected["special tokens skipped"][0] == "" and expected["stop string"][3] == stop_string
    with Client(cluster["coordinator"].address, timeout=60) as client:
        for name, options in cases.items():
            completion = client.generate(ids, **common, **options)
            stream = client.stream(ids, **common, **options)
            streamed = "".join(chunk.text for chunk in stream)
            got = (completion.text, list(completion.token_ids), completion.finish_reason, completion.stop_reason)
            assert got == expected[name], name
            assert (streamed, stream.completion.stop_reason) == (expected[name][0], expected[name][3]), name


@pytest.mark.parametrize("here", ["drafter", "target"])
def test_a_coordinator_running_one_model_itself_gives_the_same_tokens(cluster, local_engine_parts, tmp_path, here):
    local_target, local_drafter, tokenizer = local_engine_parts
    target_path, drafter_path = cluster["paths"]
    places = {"target": cluster["target"].address, "drafter": cluster["drafter"].address, here: "here"}
    coordinator = Worker(
        tmp_path / "coordinator.log", "--role", "coordinator", "--target", places["target"], "--drafter",
        places["drafter"], "--model", str(target_path if here == "target" else drafter_path), "--tree", "kary:2x3",
        "--tokenizer", str(target_path),
    )
    try:
        stub = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(coordinator.address))
        reply = stub.Generate(generation_pb2.GenerateRequest(prompt_ids=[3, 4, 5], max_tokens=30, temperature=0.7, seed=2), timeout=60)
    finally:
        coordinator.stop()
    local = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3").run(
        [3, 4, 5], max_new_tokens=30, temperature=0.7, seed=2
    )
    assert list(reply.token_ids) == local.tokens and reply.usage.accepted_draft_tokens > 0


def test_a_coordinator_runs_at_most_one_model_itself(tmp_path):
    with pytest.raises(RuntimeError, match="--model names one model"):
        Worker(tmp_path / "coordinator.log", "--role", "coordinator", "--target", "here", "--drafter", "here")


def test_health_is_serving_on_every_worker(cluster):
    for role in ("target", "drafter", "coordinator"):
        stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(cluster[role].address))
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING


def _status(call):
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details()


def test_bad_input_is_refused_and_the_workers_keep_serving(cluster):
    target = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(cluster["target"].address))
    generation = generation_pb2_grpc.GenerationStub(grpc.insecure_channel(cluster["coordinator"].address))
    spec = worker_pb2.SequenceSpec(prompt_ids=[1, 2], params=worker_pb2.SamplingParams(temperature=1, top_p=1), seed=1, verifier="nope")
    code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "unknown verifier" in details
    spec.verifier = "rrsw"
    spec.logprobs = 21
    code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "logprobs must be a whole number between 0 and 20" in details
    spec.ClearField("logprobs")
    spec.prompt_logprobs = -1
    code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "prompt_logprobs must be a whole number between 0 and 20" in details
    spec.ClearField("prompt_logprobs")
    spec.params.logit_bias[8192] = 1.0
    code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "outside the vocabulary of 8192 tokens" in details
    spec.params.ClearField("logit_bias")
    for field, value, message in [("min_p", 1.5, "min_p must be in [0, 1] (0 disables it), got 1.5"),
                                  ("min_tokens", -1, "min_tokens must be in [0, 2^31), got -1")]:
        setattr(spec.params, field, value)
        code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details, details
        spec.params.ClearField(field)
    spec.params.min_tokens = 3
    spec.params.stop_token_ids[:] = [2, 9000]
    code, details = _status(lambda: target.Open(worker_pb2.OpenRequest(session_id="a", spec=spec), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "stop_token_ids names token 9000, outside the vocabulary of 8192 tokens" in details, details
    spec.params.ClearField("min_tokens")
    spec.params.ClearField("stop_token_ids")
    target.Open(worker_pb2.OpenRequest(session_id="b", spec=spec), timeout=10)
    bad_rows = worker_pb2.VerifyRequest(session_id="b", tree=worker_pb2.Tree(parents=[-1, 0], tokens=[2, 5]))
    bad_rows.q_rows.dense.CopyFrom(tensor_pb2.Tensor(dtype="float64", shape=[1, 8192], data=b"\0" * 8 * 8192))
    code, details = _status(lambda: target.Verify(bad_rows, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "dtype" in details
    code, details = _status(lambda: target.Verify(worker_pb2.VerifyRequest(session_id="nope"), timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND
    cases = [
        (generation_pb2.GenerateRequest(prompt="x", verifier="nope"), "unknown verifier"),
        (generation_pb2.GenerateRequest(prompt="x", max_tokens=-3), "max_tokens"),
        (generation_pb2.GenerateRequest(prompt_ids=[1] * 600), "context"),
        (generation_pb2.GenerateRequest(prompt="x", tree="kary:9"), "tree spec"),
        (generation_pb2.GenerateRequest(prompt="x", verifier_params=msgpack.packb([1])), "verifier_params"),
        (generation_pb2.GenerateRequest(), "the prompt must contain at least one token"),  # proto3: "" is no text
        (generation_pb2.GenerateRequest(prompt="x", logprobs=21), "logprobs must be a whole number between 0 and 20"),
        (generation_pb2.GenerateRequest(prompt="x", prompt_logprobs=21),
         "prompt_logprobs must be a whole number between 0 and 20"),
        (generation_pb2.GenerateRequest(prompt="x", presence_penalty=2.5), "presence_penalty must be in [-2, 2]"),
        (generation_pb2.GenerateRequest(prompt="x", repetition_penalty=0), "repetition_penalty must be > 0"),
        (generation_pb2.GenerateRequest(prompt="x", logit_bias={9000: 1.0}), "outside the vocabulary of 8192 tokens"),
        (generation_pb2.GenerateRequest(prompt="x", logit_bias={5: -101.0}), "the bias of token 5 must be in"),
        (generation_pb2.GenerateRequest(prompt="x", min_p=1.5), "min_p must be in [0, 1] (0 disables it), got 1.5"),
        (generation_pb2.GenerateRequest(prompt="x", max_tokens=5, min_tokens=6),
         "min_tokens must be between 0 and max_tokens (5), got 6"),
        (generation_pb2.GenerateRequest(prompt="x", min_tokens=-1), "min_tokens must be between 0 and max_tokens"),
        (generation_pb2.GenerateRequest(prompt="x", stop_token_ids=[9000]),
         "stop_token_ids names token 9000, outside the vocabulary of 8192 tokens"),
        (generation_pb2.GenerateRequest(prompt="x", min_tokens=2, stop_token_ids=[3, 9000]), "outside the vocabulary"),
        (generation_pb2.GenerateRequest(prompt="x", stop_token_ids=[-1]),
         "stop_token_ids must be a list of token ids (integers >= 0)"),
    ]
    for request, message in cases:
        code, details = _status(lambda: generation.Generate(request, timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details, (details, message)
    assert len(generation.Generate(generation_pb2.GenerateRequest(prompt="ok", max_tokens=5), timeout=30).token_ids) == 5


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_a_released_session_is_gone_and_releasing_twice_is_harmless(cluster, role):
    channel = grpc.insecure_channel(cluster[role].address)
    stub = (worker_pb2_grpc.TargetServiceStub if role == "target" else worker_pb2_grpc.DrafterServiceStub)(channel)
    spec = worker_pb2.SequenceSpec(prompt_ids=[1, 2], params=worker_pb2.SamplingParams(temperature=1, top_p=1), seed=1,
                                   verifier="rrsw")
    stub.Open(worker_pb2.OpenRequest(session_id=f"released-{role}", spec=spec), timeout=10)
    outcome = worker_pb2.Outcome(tokens=[3])
    for _ in range(2):
        stub.Release(worker_pb2.ReleaseRequest(session_id=f"released-{role}"), timeout=10)
    code, details = _status(lambda: stub.Commit(worker_pb2.CommitRequest(session_id=f"released-{role}", outcome=outcome),
                                                timeout=10))
    assert code == grpc.StatusCode.NOT_FOUND and f"no open session 'released-{role}'" in details


def test_oversized_requests_get_invalid_argument_with_a_message():
    from rayspec.rpc.worker import serve_target
    from tests.tiny_models import tiny_llama

    server, port = serve_target(LocalTarget(tiny_llama(vocab=64)), "127.0.0.1:0", max_request_bytes=10_000)
    try:
        stub = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        request = worker_pb2.VerifyRequest(session_id="s", tree=worker_pb2.Tree(parents=[-1] + [0] * 5000, tokens=[1] * 5001))
        code, details = _status(lambda: stub.Verify(request, timeout=10))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "exceeds this server's limit" in details
        assert stub.Info(worker_pb2.InfoRequest(), timeout=10).vocab_size == 64
    finally:
        server.stop(0)


@pytest.mark.parametrize("verify_at", ["target", "coordinator"])
def test_unary_calls_give_the_tokens_of_session_streams(cluster, verify_at):
    outputs = []
    for streams in (True, False):
        target = RemoteTarget(cluster["target"].address, verify_at=verify_at, streams=streams)
        drafter = RemoteDrafter(cluster["drafter"].address, target.vocab_size, streams=streams)
        engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="kary:2x3")
        outputs.append(engine.run([9, 8, 7], max_new_tokens=30, temperature=0.9, seed=4).tokens)
    assert outputs[0] == outputs[1] and len(outputs[0]) == 30


def test_a_failed_call_on_a_steps_stream_leaves_it_serving(cluster):
    from rayspec.rpc.remote import CallStream, RemoteError

    target_channel = grpc.insecure_channel(cluster["target"].address)
    target = worker_pb2_grpc.TargetServiceStub(target_channel)
    spec = worker_pb2.SequenceSpec(prompt_ids=[1, 2], params=worker_pb2.SamplingParams(temperature=1, top_p=1), seed=1, verifier="rrsw")
    target.Open(worker_pb2.OpenRequest(session_id="stream", spec=spec), timeout=10)
    steps = CallStream(target_channel, worker_pb2.TargetCall, 30.0, "target")
    bad_rows = worker_pb2.VerifyRequest(session_id="stream", tree=worker_pb2.Tree(parents=[-1, 0], tokens=[2, 5]))
    bad_rows.q_rows.dense.CopyFrom(tensor_pb2.Tensor(dtype="float64", shape=[1, 8192], data=b"\0" * 8 * 8192))
    with pytest.raises(ValueError, match="dtype"):
        steps.send(worker_pb2.TargetCall(verify=bad_rows))
    with pytest.raises(RemoteError, match="NOT_FOUND: no open session 'nope'"):
        steps.send(worker_pb2.TargetCall(verify=worker_pb2.VerifyRequest(session_id="nope")))
    one_node = worker_pb2.VerifyRequest(session_id="stream", tree=worker_pb2.Tree(parents=[-1], tokens=[2]))
    reply = steps.send(worker_pb2.TargetCall(verify=one_node))
    assert len(reply.outcome.tokens) == 1 and 0 <= reply.outcome.tokens[0] < 8192
    steps.close()
    next_root = worker_pb2.VerifyRequest(session_id="stream", tree=worker_pb2.Tree(parents=[-1], tokens=reply.outcome.tokens))
    results = list(target.Steps(iter([worker_pb2.TargetCall(), worker_pb2.TargetCall(verify=next_root)]), timeout=10))
    assert results[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "empty call" in results[0].error.message
    assert results[1].WhichOneof("result") == "verify", results[1].error.message


class _SlowTarget(worker_pb2_grpc.TargetServiceServicer):
    def Steps(self, calls, context):
        for _ in calls:
            answer_at = time.monotonic() + 2
            while context.is_active() and time.monotonic() < answer_at:
                time.sleep(0.02)
            yield worker_pb2.TargetResult(verify=worker_pb2.VerifyReply())


def test_an_unanswered_stream_call_fails_at_its_deadline_and_extra_streams_are_refused():
    from rayspec.rpc.remote import CallStream, RemoteError
    from rayspec.rpc.server import start_server

    server, port = start_server(lambda s: worker_pb2_grpc.add_TargetServiceServicer_to_server(_SlowTarget(), s),
                                "127.0.0.1:0", max_workers=2)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        steps = CallStream(channel, worker_pb2.TargetCall, 0.5, "target slow")
        started = time.monotonic()
        with pytest.raises(RemoteError, match=r"DEADLINE_EXCEEDED: target slow did not answer within 0.5 s"):
            steps.send(worker_pb2.TargetCall(verify=worker_pb2.VerifyRequest(session_id="s")))
        assert time.monotonic() - started < 2.0
        time.sleep(0.3)  # the cancelled stream's server thread notices and ends
        held = [CallStream(channel, worker_pb2.TargetCall, 10.0, "target slow") for _ in range(2)]
        answers = []
        empty_verify = worker_pb2.TargetCall(verify=worker_pb2.VerifyRequest())
        waiting = [threading.Thread(target=lambda s=s: answers.append(s.send(empty_verify)))
                   for s in held]
        for thread in waiting:
            thread.start()
        time.sleep(0.5)  # both server threads now hold a stream
        with pytest.raises(RemoteError, match="RESOURCE_EXHAUSTED"):
            CallStream(channel, worker_pb2.TargetCall, 10.0, "target slow").send(empty_verify)
        for thread in waiting:
            thread.join()
        assert len(answers) == 2  # the streams already running were not disturbed
        for stream in held + [steps]:
            stream.close()
    finally:
        server.stop(0)


class _PromptTarget(worker_pb2_grpc.TargetServiceServicer):
    def Steps(self, calls, context):
        for _ in calls:
            yield worker_pb2.TargetResult(verify=worker_pb2.VerifyReply())


def test_a_deadline_reached_as_the_reply_arrives_fails_no_call():
    """The watchdog reads a call's start, then cancels it if it is overdue.  Should the reply
    arrive in between, that call returns it, and the next call still gets through (on a
    fresh stream); a reading taken during an earlier call cancels nothing later."""
    from rayspec.rpc.remote import CallStream
    from rayspec.rpc.server import start_server

    server, port = start_server(lambda s: worker_pb2_grpc.add_TargetServiceServicer_to_server(_PromptTarget(), s),
                                "127.0.0.1:0", max_workers=2)
    try:
        steps = CallStream(grpc.insecure_channel(f"127.0.0.1:{port}"), worker_pb2.TargetCall, 30.0, "target")
        call = worker_pb2.TargetCall(verify=worker_pb2.VerifyRequest(session_id="s"))
        assert steps.send(call) == worker_pb2.VerifyReply()
        readings = []

        class ReplyThenDeadline:  # the reply is in; the watchdog acts on what it read before
            @staticmethod
            def FromString(data):
                result = worker_pb2.TargetResult.FromString(data)
                readings.append(steps.waiting_since)
                steps.expire(readings[-1])
                return result

        steps.result_type = ReplyThenDeadline
        assert steps.send(call) == worker_pb2.VerifyReply()
        steps.result_type = worker_pb2.TargetResult
        assert readings[0] is not None
        assert steps.send(call) == worker_pb2.VerifyReply()
        steps.expire(readings[0])  # a reading from an earlier call
        assert steps.send(call) == worker_pb2.VerifyReply()
        steps.close()
    finally:
        server.stop(0)


def _threads_cpus(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of process `pid`."""
    return {frozenset(os.sched_getaffinity(int(task))) for task in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU pinning is Linux-only")
def test_a_worker_pinned_to_a_cpu_keeps_every_thread_there_and_gives_the_same_tokens(cluster, local_engine_parts, tmp_path):
    last = max(os.sched_getaffinity(0))
    target_path, _ = cluster["paths"]
    worker = Worker(tmp_path / "pinned.log", "--role", "target", "--model", str(target_path), cpus=str(last))
    try:
        # gRPC's threads started before and after the pinning, and the handler pool's
        assert _threads_cpus(worker.process.pid) == {frozenset({last})}
        local_target, local_drafter, _ = local_engine_parts
        remote_target = RemoteTarget(worker.address)
        kwargs = dict(max_new_tokens=24, temperature=0.8, seed=5)
        remote = SpeculativeEngine(remote_target, local_drafter, verifier="rrsw", tree="kary:2x3").run([11, 500, 7], **kwargs)
        local = SpeculativeEngine(local_target, local_drafter, verifier="rrsw", tree="kary:2x3").run([11, 500, 7], **kwargs)
        assert remote.tokens == local.tokens
        assert _threads_cpus(worker.process.pid) == {frozenset({last})}
        remote_target.close()
    finally:
        worker.stop()


def test_a_worker_asked_for_cpus_it_cannot_have_refuses_to_start_with_a_message(tmp_path):
    missing = os.cpu_count()
    with pytest.raises(RuntimeError, match=rf"CPU\(s\) \[{missing}\] are not available to this process"):
        Worker(tmp_path / "bad.log", "--role", "drafter", "--cpus", f"0-{missing}")
    with pytest.raises(RuntimeError, match="cpus must be a list like '0-3,8'"):
        Worker(tmp_path / "bad2.log", "--role", "drafter", "--cpus", "first")


def test_a_worker_asked_for_no_batch_refuses_to_start_with_a_message(tmp_path):
    with pytest.raises(RuntimeError, match="--max-batch-sequences must be a whole number, 1 or more, got 0"):
        Worker(tmp_path / "bad.log", "--role", "target", "--max-batch-sequences", "0")


def test_a_target_worker_that_predates_penalties_is_refused_rather_than_sampling_the_plain_law(cluster):
    """proto3 workers ignore fields they do not know: an old target would sample the plain law.
    Workers list what they implement in Info; an old one lists nothing."""
    target = RemoteTarget(cluster["target"].address)
    assert "penalties" in target.features
    drafter = RemoteDrafter(cluster["drafter"].address, target.vocab_size)
    engine = SpeculativeEngine(target, drafter, tree="kary:2x2")
    target.features = frozenset()  # what an old worker's Info gives
    assert not target.verifies_predictions  # it would walk a predicted chain as drafts
    with pytest.raises(RuntimeError, match=f"the target worker at {target.address} predates penalties and logit_bias"):
        engine.run([1, 2, 3], max_new_tokens=4, seed=1, logit_bias={5: 1.0})
    assert len(engine.run([1, 2, 3], max_new_tokens=4, seed=1).tokens) == 4  # nothing asked of it that it lacks
    stub = worker_pb2_grpc.TargetServiceStub(grpc.insecure_channel(cluster["target"].address))
    assert list(stub.Info(worker_pb2.InfoRequest(), timeout=10).features) == [
        "penalties", "min_p", "min_tokens", "allowed_token_ids", "bad_words", "predicted_chain", "structured_output",
        "resume", "padded_vocabulary"]


@pytest.mark.parametrize("feature, asked", [
    ("min_p", dict(min_p=0.05)),
    ("min_tokens", dict(min_tokens=2, stop=[5])),
])
def test_a_target_worker_that_predates_min_p_or_min_tokens_is_refused_rather_than_sampling_the_plain_law(
        cluster, feature, asked):
    """A worker of the release with penalties only would ignore min_p, or min_tokens' ban of
    the stop tokens, and sample another law: refused, and only when the request needs it."""
    target = RemoteTarget(cluster["target"].address)
    assert {"penalties", "min_p", "min_tokens"} <= target.features
    drafter = RemoteDrafter(cluster["drafter"].address, target.vocab_size)
    engine = SpeculativeEngine(target, drafter, tree="kary:2x2")
    target.features = frozenset({"penalties"})  # what the Info of a worker of that release gives
    with pytest.raises(RuntimeError, match=rf"^the target worker at {target.address} predates {feature}, "
                                           r"and would ignore it: upgrade it$"):
        engine.run([1, 2, 3], max_new_tokens=4, seed=1, **asked)
    # nothing asked of it that it lacks: penalties, and min_tokens with nothing to ban (the
    # tiny target has no EOS), or stop tokens without min_tokens
    assert len(engine.run([1, 2, 3], max_new_tokens=4, seed=1, min_tokens=2, presence_penalty=0.5).tokens) == 4
    assert engine.run([1, 2, 3], max_new_tokens=4, seed=1, stop=[5]).finish_reason in ("length", "stop")
    target.features = frozenset({"penalties", feature})
    assert len(engine.run([1, 2, 3], max_new_tokens=4, seed=1, **asked).tokens) >= 2


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_a_worker_on_an_ipv6_host_serves_there_and_says_where(tmp_path):
    from rayspec.rpc.server import host_port

    assert host_port("::1", 9000) == host_port("[::1]", 9000) == "[::1]:9000"
    assert host_port("10.0.0.2", 9000) == "10.0.0.2:9000"
    worker = Worker(tmp_path / "drafter.log", "--role", "drafter", "--host", "::1")
    try:
        assert worker.address.startswith("[::1]:")
        assert RemoteDrafter(worker.address, 8192).vocab_size > 0
    finally:
        worker.stop()


def test_a_worker_that_does_not_start_in_time_is_stopped_at_its_deadline_though_it_prints_nothing(tmp_path):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start within 3 s"):  # it waits 60 s for a target, silently
        Worker(tmp_path / "coordinator.log", "--role", "coordinator", "--target", "127.0.0.1:1",
               "--wait-for-workers", "60", timeout=3.0)
    assert time.monotonic() - started < 20


def test_waiting_for_a_worker_says_whether_it_answers_and_leaves_no_thread_failing(cluster, monkeypatch):
    from rayspec.rpc.worker import wait_for_worker

    failures = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(repr(args.exc_value)))
    assert wait_for_worker("drafter", cluster["drafter"].address, 5.0)
    assert not any(wait_for_worker("target", "127.0.0.1:1", 0.0) for _ in range(20))  # nothing listens there
    time.sleep(0.5)
    assert failures == []  # gRPC's connectivity polling failed as its channel closed: a traceback each


def test_a_coordinator_plans_sequoia_trees_on_the_demo_pairs_measured_vectors_as_in_process(demo_cluster):
    """A seed's tokens with a sequoia tree depend on the acceptance vector it is planned on:
    the coordinator of the demo pair plans on the pair's shipped vectors, as `rayspec
    generate` and `rayspec serve` do, not on the default prior."""
    from rayspec.demo import DEMO_DIR

    target, tokenizer = load_causal_lm(TARGET_PATH, "cpu", "float32")
    drafter, _ = load_causal_lm(DRAFTER_PATH, "cpu", "float32")
    parts = LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer)
    measured = SpeculativeEngine(*parts, tree="kary:2x3", acceptance_dir=DEMO_DIR / "acceptance")
    prior = SpeculativeEngine(*parts, tree="kary:2x3")
    prompt = tokenizer.encode("def fibonacci(n):", add_special_tokens=False)
    request = dict(max_new_tokens=48, temperature=0.6, seed=1, tree="sequoia:16")
    local = measured.run(prompt, **request).tokens
    assert local != prior.run(prompt, **request).tokens  # the vectors plan other trees
    with Client(demo_cluster["coordinator"].address, timeout=60) as client:
        sdk = client.generate(prompt, max_tokens=48, temperature=0.6, seed=1, tree="sequoia:16")
    assert list(sdk.token_ids) == local


def test_a_worker_whose_starter_is_killed_stops_by_itself(tmp_path):
    """A bench or test killed before it could stop its workers leaves none holding a model."""
    import signal
    import subprocess
    import sys

    starter = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from rayspec.rpc.process import Worker; "
         f"w = Worker({str(tmp_path / 'drafter.log')!r}, '--role', 'drafter'); "
         "print(w.process.pid, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(starter.stdout.readline())
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()

    def running() -> bool:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            return False
        status = open(f"/proc/{worker_pid}/stat").read().split()[2] if os.path.exists(f"/proc/{worker_pid}") else "X"
        return status not in ("Z", "X")

    deadline = time.monotonic() + 20
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = running()
    if alive:
        os.kill(worker_pid, signal.SIGKILL)
    assert not alive, "the worker outlived its starter by 20 s"
    assert "the process that started this worker" in (tmp_path / "drafter.log").read_text()
