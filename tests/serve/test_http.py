"""The OpenAI-compatible app served by a real uvicorn server on a localhost port, over an
in-process engine (tiny random Llama pair, demo tokenizer), exercised with httpx and with the
official `openai` client.

Same seed => the same tokens as the in-process engine, streamed or not; SSE framing; every
bad input gets a 4xx with an OpenAI error body and the server keeps serving; /v1/models,
/health (real grpc.health.v1 server), /metrics; a client that disconnects mid-stream stops
its generation and its sessions are released; beyond the concurrency limit requests queue,
429 beyond the queue; worker failures are 503.  The target and drafter are wrapped in
`Watched` (`tests.serve.served`); the fixtures are in `conftest.py`."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import jinja2
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import AtCapacity, DrafterUnavailable
from rayspec.engine.policy import AcceptanceLibrary, PlanReport, TrialReport
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.engine.structured import StructuredOutput
from rayspec.engine.text import finished_length
from rayspec.rpc.generated import health_pb2, health_pb2_grpc
from rayspec.rpc.remote import RemoteError
from rayspec.rpc.server import HealthServicer, start_server
from rayspec.serve.config import LimitsConfig
from rayspec.serve.http import _ChatReply, create_app
from rayspec.serve.bodies import ChatBody, Message
from rayspec.serve.service import FALLBACK_CHAT_TEMPLATE, ChatRenderError, Service
from rayspec.serve.tool_parsers import read_tool_calls
from tests.faults import LateDrafter, LosesItsFirstSession
from tests.loopback import ServerThread, stalled_request
from tests.serve.served import MODEL, PROMPT, SETTING, chat_prompt, eventually, expected
from tests.tiny_models import nan_row_at, noisy_copy, tiny_llama


def metric_samples(http) -> dict:
    text = http.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def sse_events(response) -> list[str]:
    """The data payloads of a streamed response, checking the framing: each event is exactly
    one `data: ` line followed by a blank line."""
    body = response.read().decode()
    assert body.endswith("\n\n")
    events = body[:-2].split("\n\n")
    for event in events:
        assert event.startswith("data: ") and "\n" not in event, event
    return [event[len("data: "):] for event in events]


# ---------------------------------------------------------------- same seed, same tokens


def test_completion_is_the_in_process_engine_output(http, parts, reference):
    tokenizer = parts[2]
    tokens, text, stats = expected(reference, tokenizer, PROMPT, max_new_tokens=30, temperature=0.8, seed=7)
    reply = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 30,
                                               "temperature": 0.8, "seed": 7})
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == MODEL
    assert isinstance(body["created"], int)
    assert body["choices"] == [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length",
                               "stop_reason": None}]
    accepted = sum(s.accepted_in_completion for s in stats.steps)
    drafted = sum(s.drafted for s in stats.steps)
    prompt_tokens = len(tokenizer.encode(PROMPT, add_special_tokens=False))
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens, "completion_tokens": 30, "total_tokens": prompt_tokens + 30,
        "prompt_tokens_details": {"cached_tokens": 0},  # the module's first request: nothing cached yet
        "completion_tokens_details": {"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": drafted - accepted},
    }
    figures = body["rayspec"]
    assert figures["seed"] == 7 and figures["verifier"] == "rrsw" and figures["steps"] == len(stats.steps)
    assert figures["tokens_per_step"] == pytest.approx(30 / len(stats.steps), abs=1e-4)
    assert sum(figures["acceptance_histogram"]) == len(stats.steps)
    assert figures["depth_acceptance"] == pytest.approx(stats.depth_acceptance(), abs=1e-4)
    # token ids in, the same tokens out
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    again = http.post("/v1/completions", json={"prompt": ids, "max_tokens": 30, "temperature": 0.8, "seed": 7})
    assert again.json()["choices"][0]["text"] == text


def test_vllm_spellings_negative_seed_and_top_k_minus_one_are_taken(client, parts, reference):
    """vLLM takes any int64 seed and top_k = -1 for "off"; clients written for it send both."""
    _, text, _ = expected(reference, parts[2], PROMPT, max_new_tokens=12, temperature=0.9, seed=-3)
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0.9, seed=-3,
                                           extra_body={"top_k": -1})
    assert completion.choices[0].text == text and completion.rayspec["seed"] == -3


def test_openai_client_completions_and_chat(client, parts, reference):
    tokenizer = parts[2]
    _, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=20, temperature=0.9, top_k=50, seed=11)
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0.9, seed=11,
                                           extra_body={"top_k": 50})
    assert completion.choices[0].text == text and completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 20
    assert completion.rayspec["seed"] == 11

    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Add two numbers."}]
    _, chat_text, stats = expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=16,
                                   temperature=0.7, seed=5)
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0.7, seed=5)
    assert chat.object == "chat.completion" and chat.id.startswith("chatcmpl-")
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content == chat_text
    accepted = sum(s.accepted_in_completion for s in stats.steps)
    assert chat.usage.completion_tokens_details.accepted_prediction_tokens == accepted
    # the rayspec extension picks the verifier and tree per request
    _, gumbel_text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=20, seed=3, verifier="gumbel", tree="kary:2x2")
    other = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, seed=3,
                                      extra_body={"rayspec": {"verifier": "gumbel", "tree": "kary:2x2"}})
    assert other.choices[0].text == gumbel_text and other.rayspec["verifier"] == "gumbel"
    # chat's default length is the service's default_max_tokens (24 here)
    assert client.chat.completions.create(model=MODEL, messages=messages, seed=1).usage.completion_tokens == 24


def test_penalties_and_a_bias_give_the_engines_text_through_the_openai_client(client, parts, reference):
    tokenizer = parts[2]
    penalties = dict(presence_penalty=0.5, frequency_penalty=0.25, logit_bias={13: 3.0, 500: -100.0})
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6,
                               repetition_penalty=1.25, **penalties)
    assert tokens != expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6)[0]
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6, presence_penalty=0.5, frequency_penalty=0.25,
        logit_bias={"13": 3, "500": -100}, extra_body={"repetition_penalty": 1.25})
    assert completion.choices[0].text == text
    stream = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6, presence_penalty=0.5, frequency_penalty=0.25,
        logit_bias={"13": 3, "500": -100}, extra_body={"repetition_penalty": 1.25}, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == text
    messages = [{"role": "user", "content": "Add two numbers."}]
    chat_tokens, chat_text, _ = expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=16,
                                         temperature=0.7, seed=5, **penalties)
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0.7, seed=5,
                                          presence_penalty=0.5, frequency_penalty=0.25, logit_bias={"13": 3, "500": -100})
    assert chat.choices[0].message.content == chat_text and 500 not in chat_tokens


def test_min_p_min_tokens_and_stop_ids_give_the_engines_text_through_the_openai_client(client, parts, reference):
    """vLLM's extensions, which the openai client sends in extra_body: the text is the
    in-process engine's, streamed or not, completions and chat."""
    tokenizer = parts[2]
    plain, plain_text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6)
    # a token the plain completion draws early: as a stop token, it ends the completion there
    at = next(i for i in range(2, len(plain)) if plain[i] not in plain[:i])
    stop = plain[at]
    extensions = dict(min_p=0.07, min_tokens=12, stop_token_ids=[stop], ignore_eos=True)
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6, min_p=0.07,
                               min_tokens=12, stop=[stop], ignore_eos=True)
    assert len(tokens) >= 12 and stop not in tokens[:12] and tokens != plain and at < 12
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6,
                                           extra_body=extensions)
    assert completion.choices[0].text == text and completion.usage.completion_tokens == len(tokens)
    stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6,
                                       extra_body=extensions, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == text
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6,
                                        extra_body={"stop_token_ids": [stop]})
    assert stopped.choices[0].text == tokenizer.decode(plain[:at]) and stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens == at
    min_p_only = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6,
                                           extra_body={"min_p": 0.07})
    min_p_text = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6, min_p=0.07)[1]
    assert min_p_only.choices[0].text == min_p_text != plain_text
    messages = [{"role": "user", "content": "Add two numbers."}]
    chat_plain = expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=16, temperature=0.7,
                          seed=5)[0]
    chat_stop = chat_plain[next(i for i in range(2, len(chat_plain)) if chat_plain[i] not in chat_plain[:i])]
    chat_tokens, chat_text, _ = expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=16,
                                         temperature=0.7, seed=5, min_p=0.07, min_tokens=10, stop=[chat_stop])
    assert len(chat_tokens) >= 10
    chat_extensions = dict(min_p=0.07, min_tokens=10, stop_token_ids=[chat_stop])
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0.7, seed=5,
                                          extra_body=chat_extensions)
    assert chat.choices[0].message.content == chat_text and chat.usage.completion_tokens == len(chat_tokens)
    chunks = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0.7, seed=5,
                                            extra_body=chat_extensions, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == chat_text


def test_stop_strings_do_not_stop_before_min_tokens(client, parts, reference):
    """vLLM's min_tokens: a stop string completed by one of the first min_tokens tokens does
    not count; one that ends past them does (it may begin inside them)."""
    tokenizer = parts[2]
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6)
    stop_string = tokenizer.decode(tokens[2:3]).strip()[:3]  # in the text of the third token
    assert stop_string and text.find(stop_string) < len(tokenizer.decode(tokens[:3]))
    kwargs = dict(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6, stop=[stop_string])
    plain = client.completions.create(**kwargs)
    assert plain.choices[0].text == text[: text.find(stop_string)] and plain.choices[0].finish_reason == "stop"
    for min_tokens in (4, 8):
        exempt = len(tokenizer.decode(tokens[:min_tokens]))
        end = text.find(stop_string, exempt - len(stop_string) + 1)
        wanted = (text, "length") if end < 0 else (text[:end], "stop")
        for stream in (False, True):
            answer = client.completions.create(**kwargs, extra_body={"min_tokens": min_tokens}, stream=stream)
            if stream:
                chunks = [c.choices[0] for c in answer if c.choices]
                got = ("".join(c.text for c in chunks), chunks[-1].finish_reason)
            else:
                got = (answer.choices[0].text, answer.choices[0].finish_reason)
            assert got == wanted, (min_tokens, stream)
            assert len(got[0]) > len(plain.choices[0].text)
        assert min_tokens == 8 or wanted[1] == "stop"  # both ways here: a stop past the first 4 tokens, none past 8


def test_stop_reason_include_stop_str_in_output_and_skip_special_tokens(client, http, parts, reference):
    """vLLM's fields: each choice's stop_reason names the stop string or stop token id that
    ended it (null for a length); include_stop_str_in_output keeps the stop string in the text,
    streamed or not; skip_special_tokens: false gives special tokens their text."""
    tokenizer = parts[2]
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=24, temperature=0.8, seed=6)
    stop_string = tokenizer.decode(tokens[2:3]).strip()[:3]
    end = text.find(stop_string) + len(stop_string)
    kwargs = dict(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0.8, seed=6, stop=[stop_string])
    for options, wanted in (({}, text[: end - len(stop_string)]), ({"include_stop_str_in_output": True}, text[:end])):
        for stream in (False, True):
            answer = client.completions.create(**kwargs, extra_body=options, stream=stream)
            choices = [c.choices[0] for c in answer if c.choices] if stream else answer.choices
            got = ("".join(c.text for c in choices), choices[-1].finish_reason, choices[-1].model_extra["stop_reason"])
            assert got == (wanted, "stop", stop_string), (options, stream)
    at = next(i for i in range(2, len(tokens)) if tokens[i] not in tokens[:i])
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.8, "seed": 6}
    by_token = http.post("/v1/completions", json={**body, "stop_token_ids": [tokens[at]]}).json()["choices"][0]
    assert (by_token["text"], by_token["finish_reason"], by_token["stop_reason"]) == (
        tokenizer.decode(tokens[:at]), "stop", tokens[at])
    for stream in (False, True):  # include_stop_str_in_output shows a stop token's text too, as vLLM's does
        answer = client.completions.create(model=MODEL, **body, stream=stream, extra_body={
            "stop_token_ids": [tokens[at]], "include_stop_str_in_output": True})
        choices = [c.choices[0] for c in answer if c.choices] if stream else answer.choices
        assert "".join(c.text for c in choices) == tokenizer.decode(tokens[: at + 1]), stream
        assert choices[-1].finish_reason == "stop" and choices[-1].model_extra["stop_reason"] == tokens[at]
    by_length = http.post("/v1/completions", json=body).json()["choices"][0]
    assert (by_length["text"], by_length["finish_reason"], by_length["stop_reason"]) == (text, "length", None)
    eos = {**body, "max_tokens": 3, "ignore_eos": True, "logit_bias": {"0": 100}}  # token 0: <|endoftext|>
    assert http.post("/v1/completions", json=eos).json()["choices"][0]["text"] == ""
    shown = http.post("/v1/completions", json={**eos, "skip_special_tokens": False}).json()["choices"][0]
    assert shown["text"] == "<|endoftext|>" * 3
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                          logit_bias={"0": 100}, extra_body={"ignore_eos": True,
                                                                             "skip_special_tokens": False})
    assert chat.choices[0].message.content == "<|endoftext|>" * 3 and chat.choices[0].model_extra["stop_reason"] is None
    for bad in ({"skip_special_tokens": "no"}, {"include_stop_str_in_output": 1}):
        refused = http.post("/v1/completions", json={**body, **bad})
        assert refused.status_code == 400 and next(iter(bad)) in refused.json()["error"]["message"]


def test_allowed_token_ids_give_the_engines_tokens_through_the_openai_client(client, http, parts, reference):
    tokenizer = parts[2]
    plain, _, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=16, temperature=0.8, seed=6)
    allowed = sorted(set(range(1, 8192, 5)) - set(plain))
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=16, temperature=0.8, seed=6,
                               allowed_token_ids=allowed)
    assert len(tokens) == 16 and set(tokens) <= set(allowed)
    for stream in (False, True):
        answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0.8, seed=6,
                                           extra_body={"allowed_token_ids": allowed}, stream=stream)
        got = "".join(c.choices[0].text for c in answer if c.choices) if stream else answer.choices[0].text
        assert got == text, stream
    for bad, message in (([3, 8192], "allowed_token_ids names token 8192, outside the vocabulary of 8192 tokens"),
                         ([-1], "allowed_token_ids must be a list of token ids"), (["7"], "allowed_token_ids")):
        refused = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "allowed_token_ids": bad})
        assert refused.status_code == 400 and message in refused.json()["error"]["message"], bad


def test_bad_words_give_the_engines_tokens_through_the_openai_client(client, http, parts, reference):
    tokenizer = parts[2]
    plain, plain_text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=16, temperature=0.8, seed=6)
    # words the completion has as word-initial tokens (" maps") that are one token without the
    # space too: vLLM's rule bans the spaced form only then (" gives" stays when "gives" is "g ives")
    pieces = [tokenizer.decode([t]) for t in plain]
    words = [p[1:] for p in pieces if p[:1] == " " and p[1:].isidentifier() and len(tokenizer.encode(p[1:])) == 1][:2]
    assert words, plain_text
    tokens, text, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=16, temperature=0.8, seed=6,
                               bad_words=words)
    assert tokens != plain and not {w for w in text.split()} & set(words), (words, plain_text, text)
    for stream in (False, True):
        answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0.8, seed=6,
                                           extra_body={"bad_words": words}, stream=stream)
        got = "".join(c.choices[0].text for c in answer if c.choices) if stream else answer.choices[0].text
        assert got == text, stream
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                          seed=2, extra_body={"bad_words": words[0]})
    assert chat.choices[0].message.content is not None
    for bad, message in (([" "], "a word must have a character other than spaces"), ([7], "bad_words"),
                         ({"a": 1}, "bad_words")):
        for stream in (False, True):
            refused = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "bad_words": bad,
                                                         "stream": stream})
            assert refused.status_code == 400 and message in refused.json()["error"]["message"], bad


def test_a_completions_prompt_gets_the_tokenizers_special_tokens_and_a_chat_prompt_does_not(parts):
    """As vLLM: with a tokenizer that writes a BOS, a completion's prompt is tokenized with it
    unless `add_special_tokens: false`; a chat prompt's template writes its own, so it gets
    none unless asked for."""
    target, drafter, demo = parts
    bos = demo.convert_tokens_to_ids("<|endoftext|>")
    backend = Tokenizer.from_str(demo.backend_tokenizer.to_str())
    backend.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                           special_tokens=[("<|endoftext|>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    ids = demo.encode(PROMPT, add_special_tokens=False)
    assert tokenizer.encode(PROMPT) == [bos, *ids]
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tokenizer=tokenizer, **SETTING)
    kwargs = dict(max_new_tokens=12, temperature=0.8, seed=6)
    with_bos, without = (engine.run(prompt, **kwargs).tokens for prompt in ([bos, *ids], ids))
    assert with_bos != without
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=12, max_tokens=64))
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0.8, "seed": 6}
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 6}
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        default, bare = (http.post("/v1/completions", json={**body, **extra}).json()
                         for extra in ({}, {"add_special_tokens": False}))
        chat_default, chat_special = (http.post("/v1/chat/completions", json={**chat, **extra}).json()
                                      for extra in ({}, {"add_special_tokens": True}))
        refused = http.post("/v1/completions", json={**body, "add_special_tokens": "yes"})
        tokenized = [http.post("/tokenize", json=extra).json()["tokens"] for extra in (
            {"prompt": PROMPT}, {"prompt": PROMPT, "add_special_tokens": False}, {"messages": chat["messages"]},
            {"messages": chat["messages"], "add_special_tokens": True})]
    assert tokenized[:2] == [[bos, *ids], ids]  # /tokenize has each endpoint's default
    assert [len(t) for t in tokenized[2:]] == [chat_default["usage"]["prompt_tokens"],
                                               chat_special["usage"]["prompt_tokens"]]
    assert (default["choices"][0]["text"], default["usage"]["prompt_tokens"]) == (demo.decode(with_bos), len(ids) + 1)
    assert (bare["choices"][0]["text"], bare["usage"]["prompt_tokens"]) == (demo.decode(without), len(ids))
    assert chat_special["usage"]["prompt_tokens"] == chat_default["usage"]["prompt_tokens"] + 1
    assert refused.status_code == 400 and "add_special_tokens" in refused.json()["error"]["message"]


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(http, parts, reference):
    """vLLM's truncate_prompt_tokens: the completion is the engine's on the prompt's last k
    tokens; a prompt longer than the context fits once truncated; echo returns what was kept."""
    tokenizer = parts[2]
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    tokens, text, _ = expected(reference, tokenizer, tokenizer.decode(ids[-3:]), max_new_tokens=8, temperature=0.8,
                               seed=6)
    assert tokens == reference.run(ids[-3:], max_new_tokens=8, temperature=0.8, seed=6).tokens
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.8, "seed": 6, "truncate_prompt_tokens": 3}
    answer = http.post("/v1/completions", json=body).json()
    assert (answer["choices"][0]["text"], answer["usage"]["prompt_tokens"]) == (text, 3)
    echoed = http.post("/v1/completions", json={**body, "echo": True}).json()["choices"][0]["text"]
    assert echoed == tokenizer.decode(ids[-3:]) + text
    long_prompt = list(range(1, 601))  # the test models' context holds 512
    assert http.post("/v1/completions", json={"prompt": long_prompt, "max_tokens": 4}).status_code == 400
    cut = http.post("/v1/completions", json={"prompt": long_prompt, "max_tokens": 4, "truncate_prompt_tokens": 100})
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == 100
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                                   "truncate_prompt_tokens": 2}).json()
    assert chat["usage"]["prompt_tokens"] == 2
    for bad, message in ((0, "truncate_prompt_tokens must be -1 or between 1 and the model's context (512), got 0"),
                         (-2, "truncate_prompt_tokens"), (513, "got 513"), ("3", "truncate_prompt_tokens")):
        refused = http.post("/v1/completions", json={**body, "truncate_prompt_tokens": bad})
        assert refused.status_code == 400 and message in refused.json()["error"]["message"], bad


def test_chat_logprobs_bytes_are_each_tokens_own_so_partial_characters_join_into_the_content(http, parts):
    """OpenAI's `bytes`: a token's UTF-8 bytes, so that tokens each holding part of a character
    (which decode alone to U+FFFD) join into it.  Tokens 128 and 103 of the demo's byte-level
    vocabulary are the bytes 0xC3 and 0xA9 ("é" together), 72 is "h"."""
    tokenizer = parts[2]
    assert tokenizer.decode([128, 103, 72]) == "éh" and tokenizer.decode([128]) == "\ufffd"
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "seed": 3, "temperature": 1.0,
            "logprobs": True, "top_logprobs": 3, "allowed_token_ids": [128, 103, 72]}
    choice = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert "é" in choice["message"]["content"], choice  # the seed draws a whole character at least once
    joined = b"".join(bytes(entry["bytes"]) for entry in entries).decode("utf-8", "replace")
    # an unfinished last character is not shown: the U+FFFD of up to 3 bytes that may begin it (not every
    # trailing one, which the stream has shown)
    assert joined[:finished_length(joined)] == choice["message"]["content"]
    own = {"\ufffd": ([0xC3], [0xA9]), "h": ([0x68],)}
    assert all(entry["bytes"] in own[entry["token"]] for entry in entries), entries
    # the alternatives are the target's likeliest, any token: part of a character or whole
    alternatives = [shown for entry in entries for shown in entry["top_logprobs"]]
    for shown in alternatives:
        if shown["token"] == "\ufffd":
            assert len(shown["bytes"]) == 1 and shown["bytes"][0] >= 0x80, shown
        else:
            assert bytes(shown["bytes"]).decode() == shown["token"], shown


def test_return_tokens_as_token_ids_names_logprobs_tokens_by_id(http, parts, reference):
    """vLLM's return_tokens_as_token_ids: the same log-probabilities, each token (and each
    alternative) named "token_id:{id}", in completions (streamed or not) and chat."""
    tokenizer = parts[2]
    tokens, _, _ = expected(reference, tokenizer, PROMPT, max_new_tokens=6, temperature=0.8, seed=6)
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0.8, "seed": 6, "logprobs": 2}
    plain = http.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
    by_id = http.post("/v1/completions", json={**body, "return_tokens_as_token_ids": True}).json()["choices"][0]
    assert by_id["logprobs"]["tokens"] == [f"token_id:{t}" for t in tokens]
    assert by_id["logprobs"]["token_logprobs"] == plain["token_logprobs"]
    for top_by_id, top_by_text in zip(by_id["logprobs"]["top_logprobs"], plain["top_logprobs"], strict=True):
        # texts may coincide (and merge) where ids cannot
        assert set(top_by_text.values()) <= set(top_by_id.values()) and len(top_by_id) >= len(top_by_text)
        assert all(key.startswith("token_id:") for key in top_by_id)
    assert by_id["text"] == tokenizer.decode(tokens)  # the text itself is unchanged
    with http.stream("POST", "/v1/completions", json={**body, "return_tokens_as_token_ids": True, "stream": True}) as events:
        streamed = [json.loads(line[len("data: "):]) for line in events.iter_lines()
                    if line.startswith("data: {")]
    assert [t for event in streamed for choice in event["choices"] if choice.get("logprobs")
            for t in choice["logprobs"]["tokens"]] == [f"token_id:{t}" for t in tokens]
    # an echoed prompt's tokens too, its first (which has no log-probability) included
    prompt_ids = tokenizer.encode(PROMPT)
    echoed = http.post("/v1/completions", json={**body, "echo": True, "return_tokens_as_token_ids": True}).json()
    assert echoed["choices"][0]["logprobs"]["tokens"] == [f"token_id:{t}" for t in prompt_ids + tokens]
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                                   "seed": 2, "logprobs": True, "top_logprobs": 2,
                                                   "return_tokens_as_token_ids": True}).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 4 and all(entry["token"].startswith("token_id:") for entry in content)
    assert all(int(alt["token"].split(":")[1]) >= 0 for entry in content for alt in entry["top_logprobs"])
    assert all(entry["bytes"] == list(entry["token"].encode()) for entry in content)


def test_ignore_eos_and_min_tokens_hold_eos_back(parts):
    """A target whose EOS is a token the plain completion draws early: EOS ends it there;
    ignore_eos lets it run to max_tokens (the plain tokens, EOS among them); min_tokens bans
    EOS from the first tokens."""
    target, drafter, tokenizer = parts
    with_eos = LocalTarget(target)
    engine = SpeculativeEngine(with_eos, LocalDrafter(drafter), tokenizer=tokenizer, **SETTING)
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    plain = engine.run(ids, max_new_tokens=24, temperature=0.8, seed=6).tokens
    at = next(i for i in range(2, len(plain)) if plain[i] not in plain[:i])
    with_eos.eos_token_ids = (plain[at],)
    held = engine.run(ids, max_new_tokens=24, temperature=0.8, seed=6, min_tokens=10)
    assert len(held.tokens) >= 10 and plain[at] not in held.tokens[:10] and at < 10
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=24, max_tokens=64))
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0.8, "seed": 6}
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        stopped = http.post("/v1/completions", json=body).json()
        ignored = http.post("/v1/completions", json={**body, "ignore_eos": True}).json()
        minimum = http.post("/v1/completions", json={**body, "min_tokens": 10}).json()
        chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 24,
                                                       "seed": 6, "ignore_eos": True}).json()
    assert stopped["choices"][0]["finish_reason"] == "stop" and stopped["usage"]["completion_tokens"] == at
    assert stopped["choices"][0]["text"] == tokenizer.decode(plain[:at])
    assert ignored["choices"][0]["finish_reason"] == "length" and ignored["usage"]["completion_tokens"] == 24
    assert ignored["choices"][0]["text"] == tokenizer.decode(plain, skip_special_tokens=True).rstrip("\ufffd")
    assert minimum["usage"]["completion_tokens"] == len(held.tokens)
    assert minimum["choices"][0]["text"] == tokenizer.decode(held.tokens, skip_special_tokens=True).rstrip("\ufffd")
    assert chat["usage"]["completion_tokens"] == 24


def test_openai_client_streams_the_same_text(client, parts, reference):
    tokenizer = parts[2]
    _, text, stats = expected(reference, tokenizer, PROMPT, max_new_tokens=40, temperature=0.8, seed=21)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0.8, seed=21,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert 2 <= len([c for c in chunks if c.choices and c.choices[0].text]) <= len(stats.steps)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 40

    messages = [{"role": "user", "content": "Write a loop."}]
    _, chat_text, _ = expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=30, seed=8)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=30, seed=8,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == chat_text
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].rayspec["seed"] == 8
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


def test_openai_client_gets_the_engines_log_probabilities_streamed_or_not(client, parts, reference):
    """Each token's log-probability and its most likely alternatives, as the in-process
    engine gives them (the JSON floats are the very values), with each token's own text."""
    tokenizer = parts[2]
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    chunks = list(reference.generate(ids, max_new_tokens=20, temperature=0.8, seed=13, logprobs=3))
    tokens = [t for c in chunks for t in c.tokens]
    chosen = [v for c in chunks for v in c.logprobs.chosen]
    top_ids = [row for c in chunks for row in c.logprobs.top_ids]
    top_values = [row for c in chunks for row in c.logprobs.top_values]
    texts = [tokenizer.decode([t]) for t in tokens]

    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0.8, seed=13, logprobs=3)
    logprobs = completion.choices[0].logprobs
    assert logprobs.tokens == texts and logprobs.token_logprobs == chosen
    assert logprobs.text_offset == [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
    for text, value, ids_here, values_here, top in zip(texts, chosen, top_ids, top_values, logprobs.top_logprobs):
        assert top == {**{tokenizer.decode([i]): v for i, v in zip(ids_here, values_here)}, text: value}
    streamed = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0.8, seed=13,
                                              logprobs=3, stream=True))
    pieces = [c.choices[0].logprobs for c in streamed if c.choices[0].logprobs]
    assert len(pieces) > 1 and [t for p in pieces for t in p.tokens] == texts
    assert [v for p in pieces for v in p.token_logprobs] == chosen
    assert [o for p in pieces for o in p.text_offset] == logprobs.text_offset

    messages = [{"role": "user", "content": "Write a loop."}]
    chat_ids = tokenizer.encode(chat_prompt(tokenizer, messages), add_special_tokens=False)
    chat_chunks = list(reference.generate(chat_ids, max_new_tokens=12, seed=2, logprobs=2))
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, seed=2, logprobs=True,
                                          top_logprobs=2)
    content = chat.choices[0].logprobs.content
    chat_tokens = [t for c in chat_chunks for t in c.tokens]
    assert [e.token for e in content] == [tokenizer.decode([t]) for t in chat_tokens]
    assert [e.logprob for e in content] == [v for c in chat_chunks for v in c.logprobs.chosen]
    assert all(e.bytes == list(e.token.encode()) and len(e.top_logprobs) == 2 for e in content)
    assert [[a.logprob for a in e.top_logprobs] for e in content] == [r for c in chat_chunks for r in c.logprobs.top_values]
    streamed = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, seed=2,
                                                   logprobs=True, stream=True))
    entries = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in entries] == [(e.token, e.logprob) for e in content]
    assert all(e.top_logprobs == [] for e in entries)  # logprobs without top_logprobs: the tokens' own only
    assert client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4).choices[0].logprobs is None


def test_an_empty_completion_streams_the_empty_log_probabilities_it_answers(http, parts, reference):
    """A completion that ends before its first token (a stop token id drawn first) answers
    empty log-probabilities when asked for them; its stream carries the same, not none at all,
    so that a client joining a stream's log-probabilities gets what the answer gives."""
    tokenizer = parts[2]
    first = reference.run(tokenizer.encode(PROMPT, add_special_tokens=False), max_new_tokens=4, temperature=0.8, seed=3).tokens[0]
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0.8, "seed": 3, "logprobs": 2,
            "stop_token_ids": [first]}
    answer = http.post("/v1/completions", json=body).json()["choices"][0]
    assert answer["text"] == "" and answer["finish_reason"] == "stop"
    assert answer["logprobs"] == {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    streamed = [c for e in sse_events(http.post("/v1/completions", json={**body, "stream": True}))[:-1]
                for c in json.loads(e)["choices"]]
    assert [c["logprobs"] for c in streamed if c["logprobs"] is not None] == [answer["logprobs"]]

    messages = [{"role": "user", "content": "Write a loop."}]
    chat_ids = tokenizer.encode(chat_prompt(tokenizer, messages), add_special_tokens=False)
    first = reference.run(chat_ids, max_new_tokens=4, seed=3).tokens[0]
    chat = {"model": MODEL, "messages": messages, "max_tokens": 4, "seed": 3, "logprobs": True,
            "stop_token_ids": [first]}
    answer = http.post("/v1/chat/completions", json=chat).json()["choices"][0]
    assert answer["message"]["content"] == "" and answer["logprobs"] == {"content": [], "refusal": None}
    streamed = [c for e in sse_events(http.post("/v1/chat/completions", json={**chat, "stream": True}))[:-1]
                for c in json.loads(e)["choices"]]
    assert [c["logprobs"] for c in streamed if c["logprobs"] is not None] == [answer["logprobs"]]


def test_echo_puts_the_prompt_and_its_log_probabilities_before_the_completion(client, parts, reference):
    """OpenAI's legacy `echo`: the prompt's text, then the completion's; with logprobs, the
    prompt's tokens come first (the first one null), with the in-process engine's values of
    the target's prefill.  max_tokens 0 scores the prompt alone (how lm-eval-harness asks for a
    text's log-likelihood), streamed or not."""
    tokenizer = parts[2]
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    kwargs = dict(max_new_tokens=10, temperature=0.8, seed=13)
    chunks = list(reference.generate(ids, logprobs=2, prompt_logprobs=2, **kwargs))
    prompt_logprobs, tokens = chunks[0].prompt_logprobs, [t for c in chunks for t in c.tokens]
    texts = [tokenizer.decode([t]) for t in ids + tokens]
    _, completion_text, _ = expected(reference, tokenizer, PROMPT, **kwargs)

    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0.8, seed=13,
                                       logprobs=2, echo=True)
    choice = echoed.choices[0]
    assert choice.text == PROMPT + completion_text and echoed.usage.completion_tokens == len(tokens)
    logprobs = choice.logprobs
    assert logprobs.tokens == texts
    assert logprobs.token_logprobs == [None] + prompt_logprobs.chosen + [v for c in chunks for v in c.logprobs.chosen]
    assert logprobs.text_offset == [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
    assert logprobs.top_logprobs[0] is None
    for i in range(1, len(ids)):
        alternatives = zip(prompt_logprobs.top_ids[i - 1], prompt_logprobs.top_values[i - 1])
        assert logprobs.top_logprobs[i] == {**{tokenizer.decode([t]): v for t, v in alternatives},
                                            texts[i]: prompt_logprobs.chosen[i - 1]}

    streamed = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0.8, seed=13,
                                              logprobs=2, echo=True, stream=True))
    assert streamed[0].choices[0].text.startswith(PROMPT)
    assert "".join(c.choices[0].text for c in streamed) == choice.text
    pieces = [c.choices[0].logprobs for c in streamed if c.choices[0].logprobs]
    assert [v for p in pieces for v in p.token_logprobs] == logprobs.token_logprobs
    assert [o for p in pieces for o in p.text_offset] == logprobs.text_offset

    scored = reference.prompt_logprobs(ids, top=1)
    for stream in (False, True):
        answer = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1,
                                           stream=stream)
        if stream:
            answer = list(answer)
            assert "".join(c.choices[0].text for c in answer) == PROMPT
            assert answer[-1].choices[0].finish_reason == "length"
            answer_logprobs = [c.choices[0].logprobs for c in answer if c.choices[0].logprobs]
            assert len(answer_logprobs) == 1
            answer_logprobs = answer_logprobs[0]
        else:
            assert answer.choices[0].text == PROMPT and answer.choices[0].finish_reason == "length"
            assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(ids), 0)
            assert answer.rayspec["steps"] == 0
            answer_logprobs = answer.choices[0].logprobs
        assert answer_logprobs.tokens == texts[: len(ids)]
        assert answer_logprobs.token_logprobs == [None] + scored.chosen
    bare = client.completions.create(model=MODEL, prompt=ids, max_tokens=0, echo=True)
    assert bare.choices[0].text == tokenizer.decode(ids) and bare.choices[0].logprobs is None


# A prompt batched with others is scored in one padded forward, whose rounding differs from a
# forward alone by about 1e-6 relative (rayspec.models.batching).  Log-probabilities match to
# within that; so does a rank in the thousands, among neighbours that close (logits ~1e-3 apart).
BATCHED_ROUNDING = 1e-5
BATCHED_RANK_SLACK = 2


def assert_entries_match(actual: list, expected: list, top: int) -> None:
    """vLLM prompt_logprobs entries equal but for a batched forward's rounding: the same
    tokens and texts, the `top` alternatives' ranks exact, the prompt token's rank beyond
    them within a couple of places, log-probabilities within BATCHED_ROUNDING."""
    assert len(actual) == len(expected) and (actual[0], expected[0]) == (None, None)
    for got, wanted in zip(actual[1:], expected[1:]):
        assert got.keys() == wanted.keys()
        for token, entry in wanted.items():
            assert got[token]["decoded_token"] == entry["decoded_token"]
            assert got[token]["logprob"] == pytest.approx(entry["logprob"], rel=BATCHED_ROUNDING)
            if entry["rank"] <= top:
                assert got[token]["rank"] == entry["rank"]
            else:
                assert got[token]["rank"] > top and abs(got[token]["rank"] - entry["rank"]) <= BATCHED_RANK_SLACK


def test_prompt_logprobs_are_vllms_entries_of_the_targets_prefill(http, parts, reference):
    """vLLM's prompt_logprobs: null for the first prompt token, then per token a map from token
    id to log-probability, rank and text — the prompt's token (its rank among all tokens) and
    the k most likely (ranked 1 to k) — with the in-process engine's values; per choice on
    completions (a batch's choices each their own prompt's; streamed, in each choice's first
    chunk), beside the choices on a chat; `echo`'s alternatives stay as many as `logprobs`."""
    tokenizer = parts[2]
    prompts = [PROMPT, "for item in items:"]

    def entries(ids: list[int], top: int) -> list:
        scored = reference.prompt_logprobs(ids, top=top)
        expected_entries = [None]
        for i, token in enumerate(ids[1:]):
            entry = {str(token): {"logprob": scored.chosen[i], "rank": scored.ranks[i],
                                  "decoded_token": tokenizer.decode([token])}}
            for place, (alternative, value) in enumerate(zip(scored.top_ids[i], scored.top_values[i]), 1):
                entry.setdefault(str(alternative), {"logprob": value, "rank": place,
                                                    "decoded_token": tokenizer.decode([alternative])})
            expected_entries.append(entry)
        return expected_entries

    ids = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    body = {"prompt": prompts, "max_tokens": 4, "seed": 2, "prompt_logprobs": 3}
    answer = http.post("/v1/completions", json=body).json()
    assert len(answer["choices"]) == 2
    for choice, prompt_ids in zip(answer["choices"], ids):
        assert_entries_match(choice["prompt_logprobs"], entries(prompt_ids, 3), top=3)
    first = answer["choices"][0]["prompt_logprobs"]
    assert any(e[str(t)]["rank"] > 3 for e, t in zip(first[1:], ids[0][1:]))  # ranks beyond the alternatives
    assert all(len(e) in (3, 4) for e in first[1:]) and "prompt_logprobs" not in http.post(
        "/v1/completions", json={**body, "prompt_logprobs": None}).json()["choices"][0]

    chunks = [json.loads(e) for e in sse_events(http.post("/v1/completions", json={**body, "stream": True}))[:-1]]
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert_entries_match(mine[0]["prompt_logprobs"], entries(ids[index], 3), top=3)
        assert all("prompt_logprobs" not in c for c in mine[1:])

    echo = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 1}
    alone, both = (http.post("/v1/completions", json={**echo, **extra}).json()["choices"][0]
                   for extra in ({}, {"prompt_logprobs": 5}))
    assert both["logprobs"] == alone["logprobs"] and both["prompt_logprobs"] == entries(ids[0], 5)

    messages = [{"role": "user", "content": "Write a loop."}]
    chat = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3, "prompt_logprobs": 0}).json()
    chat_ids = tokenizer.encode(chat_prompt(tokenizer, messages), add_special_tokens=False)
    assert chat["prompt_logprobs"] == entries(chat_ids, 0) and all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


def test_a_prediction_is_drafted_and_the_output_stays_the_targets(client, http, parts, reference):
    """OpenAI's Predicted Outputs: the predicted text is drafted where the completion follows
    it — the greedy completion is the same with or without it, in fewer steps when it is
    right, and its accepted tokens are OpenAI's accepted_prediction_tokens."""
    messages = [{"role": "user", "content": "Write a loop."}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, temperature=0, seed=1)
    text = plain.choices[0].message.content
    for prediction in (text, [{"type": "text", "text": text[:20]}, {"type": "text", "text": text[20:]}]):
        predicted = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=40, temperature=0,
                                                   seed=1, prediction={"type": "content", "content": prediction})
        assert predicted.choices[0].message.content == text
        details = predicted.usage.completion_tokens_details
        assert predicted.rayspec["steps"] < plain.rayspec["steps"] / 2
        assert details.accepted_prediction_tokens >= 40 - predicted.rayspec["steps"]
    body = {"prompt": PROMPT, "max_tokens": 30, "temperature": 0, "seed": 2}
    completion = http.post("/v1/completions", json=body).json()
    edited = completion["choices"][0]["text"][:10] + " edit " + completion["choices"][0]["text"][10:]
    again = http.post("/v1/completions", json={**body, "prediction": {"type": "content", "content": edited}}).json()
    assert again["choices"][0]["text"] == completion["choices"][0]["text"]
    for wrong, message, param in [
        ({"type": "text", "content": "x"}, 'prediction must be {"type": "content"', "prediction"),
        ({"type": "content", "content": 5}, 'prediction must be {"type": "content"', "prediction"),
        ({"type": "content", "content": "x", "extra": 1}, 'prediction must be {"type": "content"', "prediction"),
    ]:
        reply = http.post("/v1/completions", json={**body, "prediction": wrong})
        assert reply.status_code == 400 and message in reply.json()["error"]["message"]
        assert reply.json()["error"]["param"] == param
    reply = http.post("/v1/completions", json={**body, "prediction": {"type": "content", "content": "x"},
                                               "rayspec": {"tree": "kary:2x2"}})
    assert reply.status_code == 400 and "with a prediction the tree is a chain" in reply.json()["error"]["message"]
    # a chain of no predicted tokens: the prediction was silently never drafted
    reply = http.post("/v1/completions", json={**body, "prediction": {"type": "content", "content": "x"},
                                               "rayspec": {"tree": "chain:0"}})
    assert reply.status_code == 400, reply.text
    assert "give chain:N (N at least 1) or no tree (chain:8), not 'chain:0'" in reply.json()["error"]["message"]


def test_n_choices_are_the_completions_of_seeds_seed_plus_i(client, parts, reference):
    """Choice i is what a request with seed + i gets, streamed or not; usage counts the prompt
    once and every choice's tokens; the `rayspec` object pools the choices' steps."""
    tokenizer = parts[2]
    runs = [expected(reference, tokenizer, PROMPT, max_new_tokens=16, temperature=0.9, seed=30 + i) for i in range(2)]
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0.9, seed=30, n=2)
    assert [c.index for c in completion.choices] == [0, 1]
    assert [c.text for c in completion.choices] == [text for _, text, _ in runs] and runs[0][1] != runs[1][1]
    prompt_tokens = len(tokenizer.encode(PROMPT, add_special_tokens=False))
    accepted = sum(s.accepted_in_completion for _, _, stats in runs for s in stats.steps)
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (prompt_tokens, 32)
    assert completion.usage.completion_tokens_details.accepted_prediction_tokens == accepted
    assert completion.rayspec["seeds"] == [30, 31] and completion.rayspec["steps"] == sum(len(r[2].steps) for r in runs)

    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0.9, seed=30, n=2,
                                            stream=True, stream_options={"include_usage": True}))
    for index, (_, text, _) in enumerate(runs):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert "".join(c.text for c in mine) == text and mine[-1].finish_reason == "length"
        assert [c.finish_reason for c in mine[:-1]] == [None] * (len(mine) - 1)
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishing) == 2 and "rayspec" not in finishing[0].model_extra and finishing[1].rayspec["seeds"] == [30, 31]
    assert chunks[-1].usage.completion_tokens == 32

    messages = [{"role": "user", "content": "Write a loop."}]
    chat_runs = [expected(reference, tokenizer, chat_prompt(tokenizer, messages), max_new_tokens=10, seed=4 + i)
                 for i in range(2)]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, seed=4, n=2)
    assert [c.message.content for c in chat.choices] == [text for _, text, _ in chat_runs]


def test_a_batch_of_prompts_gets_each_prompts_own_completions(client, http, parts, reference):
    """OpenAI's batched `prompt` (texts or token id lists): prompt p's choice i is choice
    p·n + i, exactly the completion a request with that prompt alone gets; usage counts each
    prompt once; streamed, each choice's chunks carry its index; echo puts each choice's own
    prompt first (how lm-eval-harness scores several texts in one request)."""
    tokenizer = parts[2]
    prompts = [PROMPT, "for item in items:"]
    runs = [expected(reference, tokenizer, prompt, max_new_tokens=12, temperature=0.9, seed=5) for prompt in prompts]
    assert runs[0][1] != runs[1][1]
    prompt_tokens = [len(tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
    as_ids = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    for batch in (prompts, as_ids):
        completion = client.completions.create(model=MODEL, prompt=batch, max_tokens=12, temperature=0.9, seed=5)
        assert [(c.index, c.text) for c in completion.choices] == [(0, runs[0][1]), (1, runs[1][1])]
        assert completion.usage.prompt_tokens == sum(prompt_tokens) and completion.usage.completion_tokens == 24
        assert completion.rayspec["seeds"] == [5, 5]

    chunks = list(client.completions.create(model=MODEL, prompt=prompts, max_tokens=12, temperature=0.9, seed=5,
                                            stream=True, stream_options={"include_usage": True}))
    for index, (_, text, _) in enumerate(runs):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert "".join(c.text for c in mine) == text and mine[-1].finish_reason == "length"
    assert chunks[-1].usage.prompt_tokens == sum(prompt_tokens)

    scored = client.completions.create(model=MODEL, prompt=prompts, max_tokens=0, echo=True, logprobs=0)
    for prompt, ids, choice in zip(prompts, as_ids, scored.choices):
        alone = client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=0).choices[0]
        assert choice.text == prompt == alone.text
        assert choice.logprobs.token_logprobs[0] is None
        batched, by_itself = choice.logprobs.token_logprobs[1:], alone.logprobs.token_logprobs[1:]
        assert batched == pytest.approx(by_itself, rel=BATCHED_ROUNDING)
        assert len(choice.logprobs.tokens) == len(ids) and choice.logprobs.token_logprobs[0] is None
    assert scored.usage.prompt_tokens == sum(prompt_tokens) and scored.usage.completion_tokens == 0

    truncated = http.post("/v1/completions", json={"prompt": as_ids, "max_tokens": 0, "echo": True,
                                                   "truncate_prompt_tokens": 2}).json()
    assert [c["text"] for c in truncated["choices"]] == [tokenizer.decode(ids[-2:]) for ids in as_ids]
    assert truncated["usage"]["prompt_tokens"] == 4


def test_more_choices_than_slots_run_in_turn_and_each_is_still_its_seeds_completion(client, server, parts,
                                                                                       reference):
    """n=5 on a service of two slots (vLLM runs such a request too): the request takes both
    and runs its choices two at a time, each ending choice handing its slot to the next, so no
    more than two sessions are ever open; choice i is still what a request with seed + i
    gets, streamed or not."""
    tokenizer, target = parts[2], server["target"]
    runs = [expected(reference, tokenizer, PROMPT, max_new_tokens=8, temperature=0.9, seed=40 + i) for i in range(5)]
    assert len({text for _, text, _ in runs}) > 1
    target.most_open, opened = 0, target.opened
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0.9, seed=40, n=5)
    assert [(c.index, c.text) for c in completion.choices] == [(i, text) for i, (_, text, _) in enumerate(runs)]
    assert completion.usage.completion_tokens == 40 and completion.rayspec["seeds"] == [40, 41, 42, 43, 44]
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0.9, seed=40, n=5,
                                            stream=True))
    for index, (_, text, _) in enumerate(runs):
        assert "".join(c.choices[0].text for c in chunks if c.choices[0].index == index) == text
    assert target.most_open == 2 and target.opened - opened == 10


WAITING = ("rayspec_requests_waiting", ())


def test_n_choices_take_a_slot_each_and_wait_whole_for_them_first_come_first_served(http, server):
    """A request of n=2 finding one of the two slots free waits for both, none of its choices
    started; a single request after it waits behind it though a slot is free (else single
    requests would overtake it for ever under load); once the slots free up, all are answered."""
    target = server["target"]
    target.permits = threading.Semaphore(0)
    body = {"prompt": PROMPT, "max_tokens": 8, "seed": 1}
    with ThreadPoolExecutor(3) as pool:
        held = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: target.open_sessions == 1, what="a generation to start")
        both = pool.submit(http.post, "/v1/completions", json={**body, "n": 2})  # one slot left of two
        eventually(lambda: metric_samples(http)[WAITING] == 1, what="the request of n=2 to queue")
        alone = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: metric_samples(http)[WAITING] == 2, what="the single request to queue behind it")
        time.sleep(0.3)
        # waiting whole: none of its choices started, and nothing overtook it
        assert target.opened == 1 and not both.done() and not alone.done()
        target.permits.release(1000)
        assert [f.result().status_code for f in (held, both, alone)] == [200, 200, 200]
    assert len(both.result().json()["choices"]) == 2 and target.opened == 4
    assert metric_samples(http)[WAITING] == 0


def test_same_seed_same_text_and_the_seed_used_is_returned(client):
    first = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24)
    seed = first.rayspec["seed"]
    again = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, seed=seed)
    assert again.choices[0].text == first.choices[0].text
    other = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, seed=seed + 1)
    assert other.choices[0].text != first.choices[0].text


def test_sse_carries_each_verified_step_as_one_event(http, parts, reference):
    tokenizer = parts[2]
    request = GenerationRequest(reference, tokenizer, Limits(), prompt=PROMPT, max_tokens=40, seed=4, stop=["\n\n"])
    deltas = [added.text for added in request.run() if added.text]
    with http.stream("POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 40, "seed": 4,
                                                      "stop": ["\n\n"], "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["text"] for c in chunks[:-1]] == deltas  # one event per step with text
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == request.finish_reason
    assert chunks[-1]["rayspec"]["steps"] == len(request.stats.steps)
    assert "usage" not in chunks[0]  # only asked for with stream_options.include_usage


# ---------------------------------------------------------------- bad input


BAD_COMPLETIONS = [
    ('{"prompt": "x", ', 400, "malformed JSON", None),
    ("[1, 2]", 400, "must be a JSON object", None),
    ({"max_tokens": 5}, 400, "prompt: Field required", "prompt"),
    ({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens: Input should be a valid integer", "max_tokens"),
    ({"prompt": "x", "max_tokens": -3}, 400, "max_tokens", "max_tokens"),
    ({"prompt": "x", "max_tokens": 100000}, 400, "max_tokens must be between 1 and 256", "max_tokens"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature must be >= 0", "temperature"),
    ({"prompt": "x", "top_p": 0}, 400, "top_p must be in (0, 1]", "top_p"),
    ({"prompt": "x", "seed": 2**63}, 400, "seed: Input should be less than 9223372036854775808", "seed"),
    ({"prompt": "x", "seed": -2**63 - 1}, 400, "seed: Input should be greater than or equal to -9223372036854775808", "seed"),
    ({"prompt": "x", "stop": [1]}, 400, "stop.0: Input should be a valid string", "stop"),  # not "stop.list[str].0"
    ({"prompt": "x", "stop": 5}, 400, "stop: Input should be str or list[str]", "stop"),
    ({"prompt": "x", "bad_words": {"a": 1}}, 400, "bad_words: Input should be str or list[str]", "bad_words"),
    ({"prompt": "x", "rayspec": {"verifier": "nope"}}, 400, "unknown verifier 'nope'", "rayspec.verifier"),
    ({"prompt": "x", "rayspec": {"verifier_params": {"zz": 1}}}, 400, "verifier 'rrsw' takes no parameter(s) zz",
     "rayspec.verifier_params"),
    ({"prompt": "x", "rayspec": {"verifier": "mentored", "tree": "chain:2", "verifier_params": {"kl_budget": "x"}}},
     400, "verifier 'mentored': kl_budget must be float", "rayspec.verifier_params"),
    # the tree is what a prediction's request changes: the message names it, and so does param
    ({"prompt": "x", "prediction": {"type": "content", "content": "x"}, "rayspec": {"tree": "kary:2x2"}}, 400,
     "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
    ({"prompt": "x", "prediction": {"type": "content", "content": "x"}, "rayspec": {"tree": "chain:0"}}, 400,
     "give chain:N (N at least 1) or no tree (chain:8), not 'chain:0'", "rayspec.tree"),
    # not "prompt 0 of the batch: ...", param prompt: the request's own fields are at fault
    ({"prompt": ["x", "y"], "prediction": {"type": "content", "content": "x"}, "rayspec": {"tree": "kary:2x2"}}, 400,
     "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"tree": "kary:9"}}, 400, "tree spec", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"tree": "file:/etc/passwd"}}, 400, "file: trees", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"tree": "kary:64x8"}}, 400, "at most 1024", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"tree": "sequoia:100000"}}, 400, "at most 1024", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"tree": "sequoia:1024x10"}}, 400, "too big to plan per request", "rayspec.tree"),
    ({"prompt": "x", "rayspec": {"verifier_params": [1]}}, 400, "verifier_params", "rayspec.verifier_params"),
    ({"prompt": "x", "rayspec": {"speed": "max"}}, 400, "unrecognized request argument: rayspec.speed", "rayspec"),
    ({"prompt": [7] * 600}, 400, "maximum context length is 512 tokens. However, the prompt has 600 tokens", None),
    ({"prompt": "word " * 7000}, 400, "the prompt has 35000 characters, far more than 512 tokens can hold", None),
    ({"prompt": [7] * 500, "max_tokens": 20}, 400, "you requested 520 tokens (500 in the prompt, 20 in the "
                                                   "completion). Please reduce the length of the prompt or completion: "
                                                   "at most 12 new tokens fit.", None),
    ({"prompt": [1, 99999]}, 400, "prompt token ids out of the vocabulary", "prompt"),
    ({"prompt": ""}, 400, "at least one token", "prompt"),
    ({"prompt": [True, 2]}, 400, "prompt must be", "prompt"),
    ({"prompt": []}, 400, "prompt must be a string, a non-empty list of token ids, or a non-empty list (a batch)",
     "prompt"),
    ({"prompt": ["a", [5, 6]]}, 400, "prompt must be", "prompt"),  # a batch mixing text and ids is refused
    ({"prompt": [[5, 6], []]}, 400, "prompt must be", "prompt"),
    ({"prompt": ["a", "b", "c"], "n": 90}, 400, "3 prompts × n=90 ask for more completions than this service "
     "takes: at most 258 in one request (limits.max_concurrent_requests: 2, plus limits.max_queued_requests: 256); "
     "send fewer prompts per request", "prompt"),
    ({"prompt": ["a", "b"], "n": 130}, 400, "2 prompts × n=130 ask for more completions", "prompt"),
    ({"prompt": ["a", [1, 99999]]}, 400, "prompt must be", "prompt"),
    ({"prompt": [[5], [1, 99999]]}, 400, "prompt 1 of the batch: ", "prompt"),
    ({"prompt": ["x", ""]}, 400, "prompt 1 of the batch: ", "prompt"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "the model 'gpt-4' does not exist", "model"),
    ({"prompt": "x", "n": 259}, 400, "n=259 asks for more completions than this service takes: at most 258 in one "
     "request (limits.max_concurrent_requests: 2, plus limits.max_queued_requests: 256)", "n"),
    ({"prompt": "x", "n": 0}, 400, "n: Input should be greater than or equal to 1", "n"),
    ({"prompt": "x", "n": 2, "seed": 2**63 - 1}, 400, "seed + n - 1 must stay below 2^63", "seed"),
    ({"prompt": "x", "logprobs": 21}, 400, "logprobs: Input should be less than or equal to 20", "logprobs"),
    ({"prompt": "x", "logprobs": -1}, 400, "logprobs: Input should be greater than or equal to 0", "logprobs"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens must be at least 1 (0 only with echo: true", "max_tokens"),
    ({"prompt": "x", "max_tokens": -1, "echo": True}, 400, "max_tokens: Input should be greater than or equal to 0",
     "max_tokens"),
    ({"prompt": [1, 99999], "max_tokens": 0, "echo": True}, 400, "out of the vocabulary", "prompt"),
    ({"prompt": [7] * 600, "max_tokens": 0, "echo": True}, 400, "maximum context length is 512 tokens", None),
    ({"prompt": "x", "best_of": 3}, 400, "best_of", "best_of"),
    ({"prompt": "x", "suffix": "end"}, 400, "suffix", "suffix"),
    ({"prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty: Input should be less than or equal to 2",
     "presence_penalty"),
    ({"prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty: Input should be greater than 0",
     "repetition_penalty"),
    ({"prompt": "x", "logit_bias": {"x": 1.0}}, 400, 'logit_bias keys must be token ids, such as "50256"', "logit_bias"),
    ({"prompt": "x", "logit_bias": {"99999": 1.0}}, 400, "logit_bias names token 99999, outside the vocabulary",
     "logit_bias"),
    ({"prompt": "x", "max_tokens": 0, "echo": True, "logit_bias": {"99999": 1.0}}, 400,
     "logit_bias names token 99999, outside the vocabulary", "logit_bias"),  # refused though scoring does not read it
    ({"prompt": "x", "logit_bias": {"5": 200}}, 400, "the bias of token 5 must be in [-100, 100]", "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": "high"}}, 400, "logit_bias.5: Input should be a valid number", "logit_bias"),
    ({"prompt": "x", "frobnicate": 1}, 400, "unrecognized request argument: frobnicate", "frobnicate"),
    ({"prompt": "x", "min_p": 2}, 400, "min_p: Input should be less than or equal to 1", "min_p"),
    ({"prompt": "x", "min_p": -0.5}, 400, "min_p: Input should be greater than or equal to 0", "min_p"),
    ({"prompt": "x", "min_tokens": -1}, 400, "min_tokens: Input should be greater than or equal to 0", "min_tokens"),
    ({"prompt": "x", "max_tokens": 5, "min_tokens": 6}, 400, "min_tokens must be between 0 and max_tokens (5), got 6",
     "min_tokens"),
    ({"prompt": "x", "stop_token_ids": ["a"]}, 400, "stop_token_ids.0: Input should be a valid integer",
     "stop_token_ids"),
    ({"prompt": "x", "stop_token_ids": 5}, 400, "stop_token_ids: Input should be a valid list", "stop_token_ids"),
    ({"prompt": "x", "stop_token_ids": [-1]}, 400, "stop_token_ids must be a list of token ids (integers >= 0)",
     "stop_token_ids"),
    ({"prompt": "x", "stop_token_ids": [99999]}, 400,
     "stop_token_ids names token 99999, outside the vocabulary of 8192 tokens",
     "stop_token_ids"),
    ({"prompt": "x", "ignore_eos": "yes"}, 400, "ignore_eos: Input should be a valid boolean", "ignore_eos"),
    ({"prompt": "x", "prediction": {"type": "content", "content": "a" * (64 * 512 + 1)}}, 400,
     "the prediction has 32769 characters, far more than the model's context of 512 tokens can hold", "prediction"),
    ({"prompt": ["x", "y"], "prediction": {"type": "content", "content": "a" * (64 * 512 + 1)}}, 400,
     "the prediction has 32769 characters", "prediction"),  # not a batch's prompt's refusal
]
BAD_CHATS = [
    ({"messages": [{"role": "user"}]}, 400, "messages.0: Value error, a user message needs content", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c"}]}, 400,
     "messages.1: Value error, a tool message needs content", "messages"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, 400,
     "tool_calls are an assistant message's, not a user message's", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 1, "stream": True}, 400,
     "prompt_logprobs: a chat gives them in its non-streamed response only", "prompt_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 21}, 400,
     "prompt_logprobs: Input should be less than or equal to 20", "prompt_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "continue_final_message": True}, 400,
     "add_generation_prompt and continue_final_message cannot both be true", "continue_final_message"),
    ({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"tokenize": True}}, 400,
     "chat_template_kwargs cannot set the renderer's own options: tokenize", "chat_template_kwargs"),
    # the demo template writes a user's line breaks as "\n# ": the message is not in the prompt to continue
    ({"messages": [{"role": "user", "content": "a\nb"}], "continue_final_message": True,
      "add_generation_prompt": False}, 400, "the model's chat template refused these messages", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]}, 400,
     "chat_template_kwargs: Input should be a valid dictionary", "chat_template_kwargs"),
    ('{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": %s}}' % ("[" * 600 + "]" * 600),
     400, "the messages, tools or chat_template_kwargs nest values too deeply to render", "messages"),
    ({"messages": []}, 400, "messages", "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "role", "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "only text content", "messages"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, "tools", "tools"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, 400, "top_logprobs needs logprobs: true",
     "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21}, 400,
     "top_logprobs: Input should be less than or equal to 20", "top_logprobs"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}, 400,
     'response_format must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema"', "response_format"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {}}},
     400, "response_format.json_schema must hold the schema", "response_format"),
    ({"messages": [{"role": "user", "content": "hi"}], "guided_choice": []}, 400,
     "guided_choice: choice must be a non-empty list of non-empty strings", "guided_choice"),
    ({"messages": [{"role": "user", "content": "hi"}], "guided_grammar": "root ::= 'a'"}, 400,
     "grammars (EBNF, Lark) are not supported", "guided_grammar"),
    ({"messages": [{"role": "user", "content": "hi"}], "structured_outputs": {"grammar": "root ::= 'a'"}}, 400,
     "grammars (EBNF, Lark) are not supported", "structured_outputs"),
    ({"messages": [{"role": "user", "content": "hi"}], "structured_outputs": {"json": {}, "regex": "a"}}, 400,
     "structured_outputs takes exactly one of json, regex, choice and json_object", "structured_outputs"),
    ({"messages": [{"role": "user", "content": "hi"}], "guided_regex": "a+", "guided_choice": ["a"]}, 400,
     "give one structured output, not 2: guided_regex, guided_choice", "guided_regex"),
    ({"messages": [{"role": "user", "content": "hi"}], "guided_choice": ["yes", "no"], "ignore_eos": True}, 400,
     "ignore_eos cannot be combined with structured output", "guided_choice"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}, 400, "max_completion_tokens", "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": -3}, 400,
     "frequency_penalty: Input should be greater than or equal to -2", "frequency_penalty"),
    ({"messages": [{"role": "user", "content": "hi"}], "min_p": 2}, 400, "min_p: Input should be less than or equal to 1",
     "min_p"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3, "min_tokens": 4}, 400,
     "min_tokens must be between 0 and max_tokens (3), got 4", "min_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "stop_token_ids": ["a"]}, 400,
     "stop_token_ids.0: Input should be a valid integer", "stop_token_ids"),
    ({"messages": [{"role": "user", "content": "hi"}], "prediction": {"type": "content", "content": "x"},
      "rayspec": {"tree": "dynamic:8"}}, 400, "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
]

# A schema's own refusals: asked of a target declaring an EOS, as the tiny one declares none and
# every structured output is refused for that first.
BAD_SCHEMA_COMPLETIONS = [
    ({"prompt": "x", "guided_json": "[" * 2000 + "]" * 2000}, 400, "json_schema nests too deeply to compile",
     "guided_json"),
]
BAD_SCHEMA_CHATS = [
    ({"messages": [{"role": "user", "content": "hi"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nothing"}}}},
     400, "json_schema cannot be compiled: Unsupported type: nothing", "response_format"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}},
     400, "json_schema's oneOf has branches one value could match two of", "response_format"),
]


def _bad_cases(completions, chats):
    for path, cases in (("/v1/completions", completions), ("/v1/chat/completions", chats)):
        for body, status, message, param in cases:
            yield path, body, status, message, param
            if isinstance(body, dict):  # the same answer when streaming was asked for
                yield path, {**body, "stream": True}, status, message, param


@pytest.mark.parametrize("path, body, status, message, param", list(_bad_cases(BAD_COMPLETIONS, BAD_CHATS)))
def test_bad_input_gets_a_4xx_with_a_message(http, path, body, status, message, param):
    _assert_refused(http, path, body, status, message, param)


@pytest.mark.parametrize("path, body, status, message, param",
                         list(_bad_cases(BAD_SCHEMA_COMPLETIONS, BAD_SCHEMA_CHATS)))
def test_a_bad_schema_gets_a_400_with_its_own_message(http, with_eos, path, body, status, message, param):
    _assert_refused(http, path, body, status, message, param)


def _assert_refused(http, path, body, status, message, param):
    content = body if isinstance(body, str) else json.dumps(body)
    reply = http.post(path, content=content, headers={"Content-Type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert message in error["message"] and error["param"] == param
    assert error["type"] == "invalid_request_error" and set(error) == {"message", "type", "param", "code"}


def test_a_sequoia_tree_too_big_to_plan_on_the_services_vector_is_a_400_naming_the_field(http, server, tmp_path,
                                                                                         monkeypatch):
    """The plan cap counts the vector the service plans the request's verifier from, which the
    body's own check does not know: sequoia:256x32 (admitted on the demo's 16-rank vectors) is
    refused on a vector of 32 ranks x 10 depth rows, by the engine's check, the field named."""
    vector = [[0.99] + [0.005 / 31] * 31] * 10
    (tmp_path / "rrsw_t1.00.json").write_text(json.dumps({"acceptance": vector,
                                                          "setting": {"verifier": "rrsw", "temperature": 1.0}}))
    monkeypatch.setattr(server["service"].engine, "library", AcceptanceLibrary(tmp_path))
    for path, body in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        _assert_refused(http, path, {**body, "max_tokens": 2, "rayspec": {"tree": "sequoia:256x32"}}, 400,
                        "rayspec.tree: tree spec 'sequoia:256x32' is too big to plan per request: its dynamic "
                        "program fills 576716800 cells", "rayspec.tree")


def test_prompt_logprobs_a_target_gives_as_nan_are_a_500_saying_so_not_json_no_parser_reads(parts):
    """A NaN logit in the prompt's prefill reached the answer as NaN: a 400 "Out of range float
    values are not JSON compliant" blaming the client, or a stream event holding NaN, which JSON
    parsers refuse.  The target failed: a 500 that says where, as a gRPC worker's NaN row is."""
    target = tiny_llama(vocab=8192, hidden=32, layers=2, context=512)
    hook = nan_row_at(target, 2)
    tokenizer = parts[2]
    engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(noisy_copy(target, noise=0.3), tokenizer),
                               tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=4, max_tokens=16))
    prompt = [5, 6, 7, 8, 9, 10]
    try:
        with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            for path, body in (
                ("/v1/completions", {"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 1}),
                ("/v1/completions", {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1}),
                ("/v1/completions", {"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 1, "stream": True}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello there you"}],
                                          "max_tokens": 1, "prompt_logprobs": 0}),
            ):
                reply = client.post(path, json={"model": MODEL, **body})
                assert reply.status_code == 500, (body, reply.text)
                error = reply.json()["error"]
                assert error["type"] == "internal_error"
                assert "the target's log-probabilities of the prompt are not numbers at 1 position(s), the first " \
                       "that of prompt token 3 (from 0): its logits there are not finite" in error["message"]
    finally:
        hook.remove()


def test_the_server_keeps_serving_after_bad_input_and_harmless_fields_pass(http):
    for body in ("{", json.dumps({"prompt": "x", "rayspec": {"verifier": "nope"}}), json.dumps({"prompt": [7] * 600})):
        assert http.post("/v1/completions", content=body, headers={"Content-Type": "application/json"}).status_code == 400
    harmless = {"prompt": "x", "max_tokens": 4, "user": "u1", "presence_penalty": 0, "frequency_penalty": 0.0,
                "n": 1, "best_of": 1, "logprobs": None, "echo": False, "logit_bias": {}, "stream_options": None,
                "safety_identifier": "s1", "prompt_cache_key": "k1"}
    assert http.post("/v1/completions", json=harmless).status_code == 200
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "safety_identifier": "s1",
            "prompt_cache_key": "k1", "service_tier": "auto", "store": False, "metadata": {"a": "b"}}
    assert http.post("/v1/chat/completions", json=chat).status_code == 200
    unknown_route = http.post("/v1/embeddings", json={})
    assert unknown_route.status_code == 404 and "/v1/embeddings" in unknown_route.json()["error"]["message"]


def test_a_method_an_endpoint_does_not_take_is_a_405_saying_which_it_takes(http):
    """RFC 9110 asks a 405 for its Allow header (FastAPI's own answer has it; ours dropped it)."""
    for method, path, allowed in (("GET", "/v1/completions", "POST"), ("DELETE", "/health", "GET")):
        reply = http.request(method, path)
        assert reply.status_code == 405 and reply.headers["allow"] == allowed
        assert f"({method} {path})" in reply.json()["error"]["message"]


def test_a_client_that_leaves_in_the_middle_of_its_body_is_counted_499_not_500(http, server):
    """Nothing failed: the client left before its request could be answered."""
    import socket

    port = int(server["url"].rsplit(":", 1)[1])
    before = {status: answered(http, "/v1/completions", status) for status in (499, 500)}
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n")
    with socket.create_connection(("127.0.0.1", port)) as leaving:
        leaving.sendall(head)
        time.sleep(0.3)
    eventually(lambda: answered(http, "/v1/completions", 499) == before[499] + 1, what="the request to be counted")
    assert answered(http, "/v1/completions", 500) == before[500]


def test_default_lengths_are_cut_to_the_context_and_the_limits(http, parts, reference):
    near_the_end = http.post("/v1/completions", json={"prompt": [7] * 500, "seed": 1}).json()
    assert near_the_end["usage"]["completion_tokens"] == 12 and near_the_end["choices"][0]["finish_reason"] == "length"
    service = Service(reference, parts[2], MODEL, LimitsConfig(default_max_tokens=3, max_tokens=5))
    with ServerThread(create_app(service)) as small, httpx.Client(base_url=small.url, timeout=60) as client:
        completion = client.post("/v1/completions", json={"prompt": PROMPT, "seed": 1}).json()  # OpenAI's 16, cut to 5
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "seed": 1}).json()
    assert completion["usage"]["completion_tokens"] == 5 and chat["usage"]["completion_tokens"] == 3


def test_openai_client_raises_on_a_bad_request(client):
    with pytest.raises(openai.BadRequestError, match="unknown verifier"):
        client.completions.create(model=MODEL, prompt="x", extra_body={"rayspec": {"verifier": "nope"}})
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x")


def test_a_request_the_context_cannot_hold_is_refused_in_openais_words_and_code(client):
    """Clients that shorten a conversation and try again (LiteLLM's ContextWindowExceededError)
    look for OpenAI's code or its "maximum context length" sentence; the refusals named
    neither, and the one of a chat's length named `max_tokens` whichever field asked for it."""
    asked = [({"prompt": [7] * 600}, "the prompt has 600 tokens"),
             ({"prompt": "word " * 7000}, "the prompt has 35000 characters"),
             ({"prompt": [7] * 500, "max_tokens": 20}, "you requested 520 tokens (500 in the prompt, 20 in the "
                                                       "completion)")]
    for body, said in asked:
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model=MODEL, **body)
        assert refused.value.code == "context_length_exceeded" and refused.value.type == "invalid_request_error"
        said = f"This model's maximum context length is 512 tokens. However, {said}"
        assert refused.value.body["message"].startswith(said)
    messages = [{"role": "user", "content": "word " * 300}]
    prompt_tokens = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1).usage.prompt_tokens
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=513 - prompt_tokens)
    assert refused.value.code == "context_length_exceeded" and "max_tokens" not in refused.value.message
    assert "in the completion). Please reduce the length of the prompt or completion: at most" in refused.value.message


def test_a_prompt_that_fills_the_context_is_scored_with_max_tokens_0_and_refused_a_completion(client, reference):
    """OpenAI's echo with max_tokens 0 scores a text and generates nothing, so a prompt of the
    context's length fits (it was refused as "leaving no room for a completion"); asked for a
    token, it is refused as before."""
    full = [(7 * i + 3) % 8000 for i in range(512)]  # the test models' context holds 512
    scored = client.completions.create(model=MODEL, prompt=full, max_tokens=0, echo=True, logprobs=1)
    assert scored.usage.prompt_tokens == 512 and scored.choices[0].finish_reason == "length"
    assert scored.choices[0].logprobs.token_logprobs[1:] == pytest.approx(reference.prompt_logprobs(full).chosen,
                                                                          abs=1e-4)
    for body in ({"prompt": full + [7], "max_tokens": 0, "echo": True}, {"prompt": full, "max_tokens": 1}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model=MODEL, **body)
        assert refused.value.code == "context_length_exceeded"


def test_a_batchs_refusals_keep_their_code_and_field(client):
    """A batched prompt the context cannot hold keeps OpenAI's code (the batch's refusal had
    none), and a field's refusal names the field, not the batch's first prompt."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=[[7] * 5, [7] * 600], max_tokens=1)
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "prompt")
    assert refused.value.body["message"].startswith("prompt 1 of the batch: This model's maximum context length is 512")
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model=MODEL, prompt=[[7] * 5, [7] * 6], max_tokens=300)
    assert (refused.value.param, refused.value.body["message"]) == ("max_tokens",
                                                                    "max_tokens must be between 1 and 256, got 300")


# ---------------------------------------------------------------- models, health, metrics


def test_models(http, client):
    listing = http.get("/v1/models").json()
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == [MODEL]
    assert listing["data"][0]["object"] == "model" and listing["data"][0]["owned_by"] == "rayspec"
    assert listing["data"][0]["max_model_len"] == 512  # vLLM's field: the target's context
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    assert http.get("/v1/models/gpt-4").status_code == 404


def test_version_is_vllms_and_the_packages(http):
    import importlib.metadata

    assert http.get("/version").json() == {"version": importlib.metadata.version("rayspec")}


def test_tokenize_and_detokenize_are_vllms(http, client, parts):
    """vLLM's /tokenize: the ids a completions prompt or a chat conversation is read as (a
    conversation's count is the chat endpoint's usage.prompt_tokens), the context, and with
    return_token_strs each token's vocabulary string; /detokenize reverses it."""
    tokenizer = parts[2]
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    answer = http.post("/tokenize", json={"model": MODEL, "prompt": PROMPT, "return_token_strs": True}).json()
    assert answer == {"count": len(ids), "max_model_len": 512, "tokens": ids,
                      "token_strs": tokenizer.convert_ids_to_tokens(ids)}
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a loop."}]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, seed=1)
    counted = http.post("/tokenize", json={"messages": messages}).json()
    assert counted["count"] == chat.usage.prompt_tokens and "token_strs" not in counted
    unset = http.post("/tokenize", json={"messages": messages, "return_token_strs": None})  # vLLM's null
    assert unset.status_code == 200 and unset.json() == counted
    assert counted["tokens"] == tokenizer.encode(chat_prompt(tokenizer, messages), add_special_tokens=False)
    unopened = http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()
    assert unopened["count"] < counted["count"] and counted["tokens"][:unopened["count"]] == unopened["tokens"]
    assert http.post("/detokenize", json={"model": MODEL, "tokens": ids}).json() == {"prompt": PROMPT}
    assert http.post("/detokenize", json={"tokens": []}).json() == {"prompt": ""}

    # lm-eval-harness's remote tokenizer: /tokenizer_info's template renders the chat endpoint's prompt
    info = http.get("/tokenizer_info").json()
    assert (info["eos_token"], info["model_max_length"]) == (tokenizer.eos_token, 512)
    assert info["chat_template"] == tokenizer.chat_template
    rendered = jinja2.Environment().from_string(info["chat_template"]).render(messages=messages,
                                                                              add_generation_prompt=True)
    probe = http.post("/tokenize", json={"prompt": rendered, "add_special_tokens": False}).json()
    assert probe["tokens"] == counted["tokens"]

    for path, body, status, message, param in [
        ("/tokenize", {}, 400, "give exactly one of prompt and messages", "prompt"),
        ("/tokenize", {"prompt": "x", "messages": messages}, 400, "give exactly one of prompt and messages", "prompt"),
        ("/tokenize", {"prompt": 5}, 400, "prompt: Input should be a valid string", "prompt"),
        ("/tokenize", {"messages": []}, 400, "messages", "messages"),
        ("/tokenize", {"prompt": "x", "model": "gpt-4"}, 404, "the model 'gpt-4' does not exist", "model"),
        ("/tokenize", {"prompt": "x", "frobnicate": 1}, 400, "unrecognized request argument: frobnicate", "frobnicate"),
        ("/detokenize", {"tokens": [1, 99999]}, 400, "token ids out of the vocabulary [0, 8192): [99999]", "tokens"),
        ("/detokenize", {"tokens": [-1]}, 400, "token ids out of the vocabulary", "tokens"),
        ("/detokenize", {"tokens": ["a"]}, 400, "tokens.0: Input should be a valid integer", "tokens"),
        ("/detokenize", {}, 400, "tokens: Field required", "tokens"),
    ]:
        reply = http.post(path, json=body)
        error = reply.json()["error"]
        assert (reply.status_code, error["param"]) == (status, param) and message in error["message"], (body, error)


def test_a_body_over_the_limit_is_refused_before_it_is_read(parts):
    """413 with an OpenAI error body for a body over `limits.max_request_bytes`, whether its
    Content-Length says so or it comes in chunks; a body within the limit, chunked or not, is
    served; the refusals are counted, and the service keeps serving."""
    target, drafter, tokenizer = parts
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=4, max_request_bytes=2000))
    small = json.dumps({"prompt": PROMPT, "max_tokens": 2, "seed": 1}).encode()
    big = json.dumps({"prompt": "x" * 3000, "max_tokens": 2}).encode()

    def chunks(body: bytes):
        for start in range(0, len(body), 500):
            yield body[start:start + 500]

    headers = {"Content-Type": "application/json"}
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        for content in (big, chunks(big)):
            refused = own.post("/v1/completions", content=content, headers=headers)
            error = refused.json()["error"]
            assert (refused.status_code, error["code"], error["type"]) == (413, "request_too_large",
                                                                          "invalid_request_error")
            assert "more than this service takes (2000 bytes, limits.max_request_bytes)" in error["message"]
        assert f"has {len(big)} bytes" in own.post("/v1/completions", content=big, headers=headers).json()["error"]["message"]
        served = [own.post("/v1/completions", content=content, headers=headers) for content in (small, chunks(small))]
        assert [r.status_code for r in served] == [200, 200]
        assert served[0].json()["choices"][0]["text"] == served[1].json()["choices"][0]["text"]
        counted = metric_samples(own)
    assert counted[("rayspec_http_requests_total", (("endpoint", "/v1/completions"), ("status", "413")))] == 3
    with pytest.raises(ValueError, match="limits.max_request_bytes must be a positive integer"):
        LimitsConfig(max_request_bytes=0)


def test_a_body_that_does_not_all_arrive_in_time_gets_a_408(parts):
    """408 with an OpenAI error body for a body not sent whole within `limits.body_timeout` of
    its headers: one that stops halfway (by its Content-Length, or in chunks), and one that
    trickles a byte every 0.2 s (the deadline is for the whole body, not between reads); the
    connection closes, the requests are counted, and the service serves others meanwhile and
    after."""
    target, drafter, tokenizer = parts
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=4, body_timeout=1.0))
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2, "seed": 1}).encode()

    def head(*fields: str) -> bytes:
        lines = ["POST /v1/completions HTTP/1.1", "Host: test", "Content-Type: application/json", *fields]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    halfway = (head(f"Content-Length: {len(body)}"), [body[:20]], 0.2)
    chunked_halfway = (head("Transfer-Encoding: chunked"), [b"14\r\n" + body[:20] + b"\r\n"], 0.2)
    trickled = (head(f"Content-Length: {len(body)}"), [bytes([byte]) for byte in body], 0.2)
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        with ThreadPoolExecutor(3) as pool:
            stalled = [pool.submit(stalled_request, server.url, *case) for case in (halfway, chunked_halfway, trickled)]
            served_meanwhile = own.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
            answers = [future.result() for future in stalled]
        for reply, answered in answers:
            status_line, _, rest = reply.partition(b"\r\n")
            headers, _, payload = rest.partition(b"\r\n\r\n")
            assert status_line == b"HTTP/1.1 408 Request Timeout", reply
            assert b"connection: close" in headers.lower()
            error = json.loads(payload)["error"]
            assert (error["code"], error["type"]) == ("request_timeout", "invalid_request_error")
            assert error["message"] == ("the request body did not all arrive within 1 s of its headers "
                                        "(limits.body_timeout)")
            assert 0.8 < answered < 5, answered
        assert served_meanwhile.status_code == 200
        served_after = own.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
        assert served_after.json()["choices"][0]["text"] == served_meanwhile.json()["choices"][0]["text"]
        counted = metric_samples(own)
    assert counted[("rayspec_http_requests_total", (("endpoint", "/v1/completions"), ("status", "408")))] == 3
    for wrong in (-1, float("inf"), "60", True):
        with pytest.raises(ValueError, match="limits.body_timeout must be a number of seconds, 0 .no limit. or more"):
            LimitsConfig(body_timeout=wrong)


@pytest.mark.parametrize("endpoint, body", [
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 4}),
])
def test_a_request_being_read_holds_up_no_other(http, server, endpoint, body, monkeypatch):
    """Tokenizing (and rendering a chat of) megabytes of text takes seconds: it runs off the
    event loop, which meanwhile answers other requests."""
    service = server["service"]
    request = service.request

    def slow_request(**fields):
        time.sleep(1.5)  # a prompt or prediction of megabytes, tokenized
        return request(**fields)

    monkeypatch.setattr(service, "request", slow_request)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(http.post, endpoint, json=body)
        time.sleep(0.3)
        started = time.monotonic()
        assert http.get("/health").status_code == 200
        assert time.monotonic() - started < 0.8
        assert reading.result().status_code == 200


def test_health_follows_the_workers_grpc_health(http, server):
    assert http.get("/health").json() == {"status": "ok", "workers": {}}  # in-process: nothing to ask
    health = HealthServicer(["rayspec.v1.TargetService"])
    grpc_server, port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(health, s), "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    service = server["service"]
    service.workers = {"target": channel}
    try:
        reply = http.get("/health")
        assert reply.status_code == 200 and reply.json()["workers"] == {"target": "SERVING"}
        health.set_serving(False)
        reply = http.get("/health")
        assert reply.status_code == 503 and reply.json()["workers"] == {"target": "NOT_SERVING"}
        grpc_server.stop(0).wait()
        reply = http.get("/health")
        assert reply.status_code == 503 and reply.json()["workers"]["target"].startswith("UNREACHABLE")
        # A drafter down leaves the service serving, without drafts: degraded, not unavailable.
        live, live_port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(
            HealthServicer(["rayspec.v1.TargetService"]), s), "127.0.0.1:0")
        live_channel = grpc.insecure_channel(f"127.0.0.1:{live_port}")
        service.workers = {"target 1": live_channel, "drafter 2": channel}
        reply = http.get("/health")
        assert reply.status_code == 200 and reply.json()["status"] == "degraded"
        assert reply.json()["workers"]["target 1"] == "SERVING"
        live.stop(0)
        reply = http.get("/health")
        assert reply.status_code == 503 and reply.json()["status"] == "unavailable"
        live_channel.close()
    finally:
        service.workers = {}
        channel.close()
        grpc_server.stop(0)


def test_a_worker_with_every_thread_busy_is_up_in_health(http, server):
    """A worker whose every server thread is held (here its one, by a check that waits) has
    gRPC refuse its health check RESOURCE_EXHAUSTED: /health calls it BUSY and the service
    ok, not unavailable, so that a load peak does not turn a load balancer away; the gRPC
    health of the coordinator (`targets_answer`) says the same."""
    from rayspec.rpc.remote import targets_answer

    released = threading.Event()

    class HeldHealth(HealthServicer):
        def Check(self, request, context):
            if request.service == "hold":
                released.wait(30)
                request.service = ""
            return super().Check(request, context)

    health = HeldHealth(["rayspec.v1.TargetService"])
    grpc_server, port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(health, s), "127.0.0.1:0",
                                     max_workers=1)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    service = server["service"]
    service.workers = {"target 1": channel}
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(health_pb2_grpc.HealthStub(channel).Check, health_pb2.HealthCheckRequest(service="hold"),
                               timeout=30)
            time.sleep(0.3)
            reply = http.get("/health")
            assert reply.status_code == 200, reply.text
            assert reply.json() == {"status": "ok", "workers": {"target 1": "BUSY"}}
            assert targets_answer(service.workers)
            released.set()
            assert held.result().status == health_pb2.HealthCheckResponse.SERVING
        assert http.get("/health").json()["workers"] == {"target 1": "SERVING"}
    finally:
        released.set()
        service.workers = {}
        channel.close()
        grpc_server.stop(0)


def test_a_request_whose_drafter_is_lost_is_answered_without_drafts_and_counted(http, server):
    engine = server["service"].engine
    name = ("rayspec_drafter_lost_generations_total", ())
    before = metric_samples(http)[name]

    class Lost:
        vocab_size, context_length = engine.drafter.vocab_size, engine.drafter.context_length

        def open(self, spec):
            raise DrafterUnavailable("UNAVAILABLE: the drafter worker is gone")

    drafter, engine.drafter = engine.drafter, Lost()
    try:
        reply = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "seed": 1})
    finally:
        engine.drafter = drafter
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 6
    assert reply.json()["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0
    assert metric_samples(http)[name] == before + 1


@pytest.mark.parametrize("then", ["client leaves mid-stream", "target fails"])
def test_a_generation_that_lost_its_drafter_is_counted_however_it_ends(http, server, then):
    """The loss happened whatever came after it: a client that left, or a target that failed
    later, does not unmake it (it was counted only for generations that ran to their end)."""
    target, drafter = server["target"], server["drafter"]
    name = ("rayspec_drafter_lost_generations_total", ())
    before = metric_samples(http)[name]
    drafter.fail = (1, DrafterUnavailable("UNAVAILABLE: the drafter worker is gone"))
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "seed": 1}
    if then == "target fails":
        target.fail = (4, RuntimeError("the target failed"))
        assert http.post("/v1/completions", json=body).status_code == 500
    else:
        target.permits = threading.Semaphore(4)
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
            chunks = (line for line in response.iter_lines() if line.startswith("data: {"))
            assert all(next(chunks) for _ in range(3))  # then the client leaves
        target.permits.release(1000)
    eventually(lambda: target.open_sessions == 0 and drafter.open_sessions == 0, what="sessions released")
    eventually(lambda: metric_samples(http)[name] == before + 1, what="the loss to be counted")


def test_a_request_that_takes_its_drafter_back_is_counted(http, server):
    engine = server["service"].engine
    lost, back = ("rayspec_drafter_lost_generations_total", ()), ("rayspec_drafter_comebacks_total", ())
    before = metric_samples(http)
    drafter = engine.drafter

    class BackAtTheNextStep:
        vocab_size, context_length = drafter.vocab_size, drafter.context_length
        opened = 0

        def open(self, spec):
            self.opened += 1
            if self.opened == 1:
                raise DrafterUnavailable("UNAVAILABLE: the drafter worker is restarting")
            return drafter.open(spec)

    engine.drafter = BackAtTheNextStep()
    try:
        reply = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 24, "seed": 1,
                                                   "temperature": 0})
    finally:
        engine.drafter = drafter
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 24
    assert reply.json()["rayspec"]["steps"] < 23  # drafts accepted after the first, target-only step
    after = metric_samples(http)
    assert (after[lost], after[back]) == (before[lost] + 1, before[back] + 1)


def test_steps_that_go_on_without_a_late_draft_are_counted(http, server):
    """With `draft_hedge`, a greedy completion whose sixth draft is 0.3 s late: steps go on
    target-only meanwhile, and the text is the greedy text all the same."""
    engine = server["service"].engine
    name = ("rayspec_hedged_steps_total", ())
    request = {"model": MODEL, "prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    expected_text = http.post("/v1/completions", json=request).json()["choices"][0]["text"]
    before = metric_samples(http)[name]
    drafter = engine.drafter
    engine.drafter, engine.draft_hedge = LateDrafter(drafter, late={6}, delay=0.3), 3.0
    try:
        reply = http.post("/v1/completions", json=request)
    finally:
        engine.drafter, engine.draft_hedge = drafter, None
    assert reply.json()["choices"][0]["text"] == expected_text
    hedged = reply.json()["rayspec"]["hedged_steps"]
    assert hedged >= 1 and metric_samples(http)[name] == before + hedged


def test_a_request_whose_target_worker_restarts_is_resumed_and_counted(http, server):
    """A streamed greedy completion whose target session is lost at its third step (as to a
    restarted worker) is opened again after its tokens: the client gets the whole greedy text."""
    engine = server["service"].engine
    name = ("rayspec_target_resumes_total", ())
    before = metric_samples(http)[name]
    expected_text = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 24,
                                                      "temperature": 0}).json()["choices"][0]["text"]
    target = engine.target
    engine.target = LosesItsFirstSession(target)
    try:
        with http.stream("POST", "/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 24,
                                                          "temperature": 0, "stream": True}) as reply:
            events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    finally:
        engine.target = target
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == expected_text
    assert metric_samples(http)[name] == before + 1


def test_a_client_that_leaves_while_its_target_is_lost_frees_its_slot_at_once(http, server):
    """The client of a streamed completion disconnects while the engine waits for its lost
    target (down for a minute): the wait ends, the abort is counted and the slot freed within
    seconds, not at the resume timeout."""
    engine = server["service"].engine
    aborted = ("rayspec_generations_ended_total", (("reason", "abort"),))
    aborts = metric_samples(http).get(aborted, 0)
    target = engine.target
    engine.target = faulty = LosesItsFirstSession(target, at_step=2, down=60)
    try:
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "temperature": 0, "stream": True}
        with http.stream("POST", "/v1/completions", json=body) as reply:
            # held until the client leaves: an iterator dropped would close the stream now, and
            # the generation, stopped at once, might never reach its lost step
            lines = reply.iter_lines()
            next(line for line in lines if line.startswith("data: {"))
            eventually(faulty.lost.is_set, what="the target session to be lost")
        left = time.monotonic()
        eventually(lambda: metric_samples(http).get(aborted, 0) == aborts + 1, timeout=10, what="the abort")
        assert time.monotonic() - left < 5
        assert metric_samples(http)[("rayspec_generations_in_flight", ())] == 0
    finally:
        engine.target = target


def test_metrics_are_exported_and_count_requests(http):
    before = metric_samples(http)
    names = {name for name, _ in before}
    for name in ("rayspec_acceptance_length_count", "rayspec_phase_seconds_total", "rayspec_step_wire_bytes_count",
                 "rayspec_request_tokens_per_second_count", "rayspec_generated_tokens_total",
                 "rayspec_generations_in_flight"):
        assert name in names, name
    phases = {dict(labels)["phase"] for name, labels in before if name == "rayspec_phase_seconds_total"}
    assert phases == {"draft", "network", "score", "verify"}

    figures = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 20, "seed": 2}).json()["rayspec"]
    assert http.post("/v1/completions", json={"prompt": 5}).status_code == 400
    after = metric_samples(http)

    def grew(name, labels=()):
        return after.get((name, tuple(sorted(labels)))) - before.get((name, tuple(sorted(labels))), 0)

    assert grew("rayspec_acceptance_length_count") == figures["steps"]
    assert grew("rayspec_acceptance_length_sum") == figures["steps"] + figures["accepted_draft_tokens"]
    assert grew("rayspec_draft_tokens_per_step_count") == figures["steps"]
    assert grew("rayspec_draft_tokens_per_step_sum") == figures["draft_tokens"] > 0
    assert grew("rayspec_generated_tokens_total") == 20
    assert grew("rayspec_request_tokens_per_second_count") == 1
    assert grew("rayspec_step_wire_bytes_count") == figures["steps"]  # 0 bytes each, in-process
    assert grew("rayspec_depth_visits_total", [("depth", "0")]) == figures["steps"]
    assert grew("rayspec_phase_seconds_total", [("phase", "score")]) > 0
    # a request alone: each of its steps' target forwards, and its drafter's, carried it alone
    assert grew("rayspec_forward_batch_size_count", [("model", "target")]) == figures["steps"]
    assert grew("rayspec_forward_batch_size_sum", [("model", "target")]) == figures["steps"]
    drafted = grew("rayspec_forward_batch_size_count", [("model", "drafter")])
    assert 0 < drafted <= figures["steps"] and grew("rayspec_forward_batch_size_sum", [("model", "drafter")]) == drafted
    assert grew("rayspec_http_requests_total", [("endpoint", "/v1/completions"), ("status", "200")]) == 1
    assert grew("rayspec_http_requests_total", [("endpoint", "/v1/completions"), ("status", "400")]) == 1
    assert after[("rayspec_generations_in_flight", ())] == 0
    # vLLM's serving metrics: one generation of `steps` steps, each emitting tokens
    assert grew("rayspec_time_to_first_token_seconds_count") == 1
    assert grew("rayspec_inter_chunk_seconds_count") == figures["steps"] - 1
    assert grew("rayspec_time_per_output_token_seconds_count") == grew("rayspec_generation_seconds_count") == 1
    assert 0 < grew("rayspec_time_to_first_token_seconds_sum") < grew("rayspec_generation_seconds_sum")
    assert grew("rayspec_prompt_tokens_total") == len(AutoTokenizer.from_pretrained(TARGET_PATH).encode(PROMPT))
    assert grew("rayspec_generations_ended_total", [("reason", "length")]) == 1


def _answered_usage(reply: httpx.Response) -> dict:
    """The usage a completions, chat or Responses answer ends with, streamed (the usage chunk,
    or the completed response) or not."""
    if not reply.headers["content-type"].startswith("text/event-stream"):
        return reply.json()["usage"]
    payloads = [line[len("data: "):] for line in reply.text.splitlines() if line.startswith("data: ")]
    events = [json.loads(p) for p in payloads if p != "[DONE]"]
    usages = [e.get("usage") or e.get("response", {}).get("usage") for e in events]
    return [u for u in usages if u is not None][-1]


def test_prompt_tokens_count_each_prompt_once_as_usage_does(parts, reference):
    """`rayspec_prompt_tokens_total` grows by what the responses' usage counts: each prompt of a
    request once, however many choices (n) read it, a batch's prompts each once, streamed or
    not, on every generating endpoint (it once counted a prompt per choice); a request whose
    generations fail before reading their prompt (an unknown verifier: a 400) counts nothing."""
    service = Service(reference, parts[2], MODEL, LimitsConfig(max_concurrent_requests=4))
    chat = {"messages": [{"role": "user", "content": "Add two numbers."}], "max_tokens": 3, "seed": 1}
    streamed = {"stream": True, "stream_options": {"include_usage": True}}
    asks = [
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "n": 3, "seed": 1}),
        ("/v1/completions", {"prompt": [PROMPT, "def add(a, b):"], "max_tokens": 3, "n": 2, "seed": 1}),
        ("/v1/completions", {"prompt": [PROMPT, "def add(a, b):"], "max_tokens": 3, "n": 2, "seed": 1, **streamed}),
        ("/v1/chat/completions", {**chat, "n": 4}),
        ("/v1/chat/completions", {**chat, "n": 2, **streamed}),
        ("/v1/responses", {"input": "Add two numbers.", "max_output_tokens": 3}),
        ("/v1/responses", {"input": "Add two numbers.", "max_output_tokens": 3, "stream": True}),
    ]
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        counted = []
        for path, body in asks:
            reply = own.post(path, json=body)
            assert reply.status_code == 200, reply.text
            answered = _answered_usage(reply)
            counted.append(answered.get("prompt_tokens", answered.get("input_tokens")))
            assert metric_samples(own)[("rayspec_prompt_tokens_total", ())] == sum(counted), path
        refused = own.post("/v1/completions", json={"prompt": PROMPT, "n": 2, "rayspec": {"verifier": "nope"}})
        assert refused.status_code == 400
        assert metric_samples(own)[("rayspec_prompt_tokens_total", ())] == sum(counted)
    prompt = len(parts[2].encode(PROMPT))
    assert counted[0] == prompt and counted[1] == counted[2] == prompt + len(parts[2].encode("def add(a, b):"))


def test_a_request_refused_before_its_first_step_counts_no_generation_ended(parts, reference, monkeypatch):
    """A request the engine refuses as it starts — an unknown verifier (a 400), a shared
    resource with no room for it (a 429) — is answered with that error and counted by its
    status, not as generations that ended `abort` (once one per choice: a client's typo read
    as failed generations), as a bad tree or a prompt too long for the context, refused before
    the engine, never were; a generation that fails after its first step still counts."""
    service = Service(reference, parts[2], MODEL, LimitsConfig(max_concurrent_requests=4))
    unknown = {"prompt": PROMPT, "max_tokens": 3, "n": 2, "rayspec": {"verifier": "nope"}}
    ended = [("rayspec_generations_ended_total", (("reason", reason),)) for reason in ("stop", "length", "abort")]
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        statuses = [own.post("/v1/completions", json=unknown).status_code,
                    own.post("/v1/completions", json={**unknown, "stream": True}).status_code,
                    own.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "n": 2,
                                                           "rayspec": {"verifier": "nope"}}).status_code,
                    own.post("/v1/responses", json={"input": "hi", "rayspec": {"verifier": "nope"}}).status_code]
        original = reference.generate

        def full(*args, **kwargs):
            raise AtCapacity("test double: no room")
            yield  # a generator, as the engine's

        monkeypatch.setattr(reference, "generate", full)
        statuses.append(own.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3}).status_code)

        def fails_after_a_step(*args, **kwargs):
            steps = original(*args, **kwargs)
            yield next(steps)
            raise RuntimeError("test double: failed after a step")

        monkeypatch.setattr(reference, "generate", fails_after_a_step)
        statuses.append(own.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 30}).status_code)
        eventually(lambda: metric_samples(own)[("rayspec_generations_in_flight", ())] == 0, what="the threads' ends")
        samples = metric_samples(own)
    assert statuses == [400, 400, 400, 400, 429, 500]
    assert [samples.get(key, 0) for key in ended] == [0, 0, 1]  # the failure after its first step alone


def test_an_echo_of_the_prompt_alone_ends_length_as_answered_and_times_no_generation(parts, reference):
    """Completions' `echo` with `max_tokens: 0` generates nothing: its choices are counted as
    they are answered — ended `length`, as vLLM answers them — and their prompt once, but no
    step, token or generation time is observed for them."""
    service = Service(reference, parts[2], MODEL, LimitsConfig(max_concurrent_requests=4))
    echo = {"prompt": [PROMPT, "def add(a, b):"], "max_tokens": 0, "echo": True, "n": 2, "logprobs": 1}
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        answered = own.post("/v1/completions", json=echo).json()
        streamed = own.post("/v1/completions", json={**echo, "stream": True, "stream_options": {"include_usage": True}})
        samples = metric_samples(own)
    events = [json.loads(e) for e in sse_events(streamed)[:-1]]
    reasons = [c["finish_reason"] for c in answered["choices"]]
    reasons += [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    usages = [answered["usage"], events[-1]["usage"]]
    assert reasons == ["length"] * 8 and [u["completion_tokens"] for u in usages] == [0, 0]
    assert samples[("rayspec_generations_ended_total", (("reason", "length"),))] == 8
    assert samples[("rayspec_prompt_tokens_total", ())] == sum(u["prompt_tokens"] for u in usages)
    for histogram in ("rayspec_generation_seconds", "rayspec_request_tokens_per_second", "rayspec_acceptance_length",
                      "rayspec_time_to_first_token_seconds", "rayspec_time_per_output_token_seconds",
                      "rayspec_draft_tokens_per_step"):
        assert samples[(f"{histogram}_count", ())] == 0, histogram
    assert samples[("rayspec_generated_tokens_total", ())] == 0 and samples[("rayspec_generations_in_flight", ())] == 0


def test_metrics_export_what_the_load_trials_measured_and_chose(http, server):
    metrics = server["service"].metrics
    reports = [("rrsw", 0.6, TrialReport(16, 3, (180.5, 197.25), (8, 6), "target_only")),
               ("rrsw", 0.6, TrialReport(4, 3, (120.0, None), (2, 0), None))]
    metrics.watch_trials(lambda: reports)
    try:
        samples = metric_samples(http)
    finally:
        metrics.watch_trials(server["service"].engine.tree_trials)

    def sample(name, sequences, tree=None):
        labels = {"verifier": "rrsw", "temperature": "0.6", "sequences": str(sequences)} | ({"tree": tree} if tree else {})
        return samples.get((name, tuple(sorted(labels.items()))))

    assert sample("rayspec_tree_trial_tokens_per_second", 16, "drafting") == 180.5
    assert sample("rayspec_tree_trial_tokens_per_second", 16, "target_only") == 197.25
    assert sample("rayspec_tree_trial_turns", 16, "target_only") == 6
    assert sample("rayspec_tree_trial_drafting", 16) == 0 and sample("rayspec_tree_trial_drafting_nodes", 16) == 3
    # At 4 no choice yet, and no rate for target-only, which has no measured turn.
    assert sample("rayspec_tree_trial_drafting", 4) is None
    assert sample("rayspec_tree_trial_tokens_per_second", 4, "target_only") is None
    assert sample("rayspec_tree_trial_turns", 4, "target_only") == 0
    # The demo service's fixed tree runs no trial: nothing is exported.
    assert not any(name.startswith("rayspec_tree_trial") for name, _ in metric_samples(http))


def test_a_scrape_waiting_for_the_policys_lock_holds_up_no_other_request(http, server):
    """The tree collectors wait for the policy's lock, which a Sequoia plan holds while it
    runs: a scrape then waits, off the event loop, and /health answers meanwhile."""
    metrics, planning = server["service"].metrics, threading.Event()
    metrics.watch_trials(lambda: (planning.wait(30), [])[1])
    try:
        with ThreadPoolExecutor(1) as pool:
            scrape = pool.submit(http.get, "/metrics")
            time.sleep(0.3)  # the scrape is waiting in the collector
            assert not scrape.done()
            assert http.get("/health", timeout=5).status_code == 200
            planning.set()
            assert scrape.result(timeout=30).status_code == 200
    finally:
        planning.set()
        metrics.watch_trials(server["service"].engine.tree_trials)


def test_metrics_export_the_sequoia_trees_in_use_and_their_replanning(http, server):
    def sample(samples, name, verifier="rrsw", temperature="0.6", tree="sequoia:auto"):
        return samples.get((name, (("temperature", temperature), ("tree", tree), ("verifier", verifier))))

    # The demo service's fixed tree plans nothing: nothing is exported.
    assert not any(name.startswith("rayspec_tree_") and not name.startswith("rayspec_tree_trial")
                   for name, _ in metric_samples(http))
    metrics = server["service"].metrics
    metrics.watch_plans(lambda: [("rrsw", 0.6, PlanReport("sequoia:auto", 12, 5, 2, 9, 0.108)),
                                 ("rrsw", 0.6, PlanReport("sequoia:32x10", 32, 7, 0, 1, 0.02)),
                                 ("gumbel", 1.0, PlanReport("sequoia:auto", 1, 0, 0, 3, 0.03))])
    try:
        samples = metric_samples(http)
    finally:
        metrics.watch_plans(server["service"].engine.tree_plans)
    assert sample(samples, "rayspec_tree_nodes") == 12 and sample(samples, "rayspec_tree_depth") == 5
    assert sample(samples, "rayspec_tree_replans_total") == 2 and sample(samples, "rayspec_tree_replan_checks_total") == 9
    assert sample(samples, "rayspec_tree_replan_check_seconds_total") == pytest.approx(0.108)
    assert sample(samples, "rayspec_tree_nodes", tree="sequoia:32x10") == 32  # the same key, another spec
    assert sample(samples, "rayspec_tree_nodes", "gumbel", "1") == 1  # target-only decoding
    # A request naming a Sequoia tree plans one, which the next scrape shows.
    reply = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0.6, "seed": 1,
                                               "rayspec": {"tree": "sequoia:16"}})
    assert reply.status_code == 200
    samples = metric_samples(http)
    assert 2 <= sample(samples, "rayspec_tree_nodes", tree="sequoia:16x10") <= 16
    assert sample(samples, "rayspec_tree_replan_checks_total", tree="sequoia:16x10") == 0  # fewer steps than a check waits for


def test_a_temperature_sent_as_minus_zero_is_labelled_0(parts):
    """JSON's -0.0 is a temperature of 0, planned under 0's key (-0.0 == 0.0); the tree metrics
    label it "0", whichever spelling the first request sent (it was "-0", and stayed so for
    every later request at 0, which a dashboard asking for temperature="0" missed)."""
    target, drafter, tokenizer = parts
    engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), tokenizer=tokenizer,
                               **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig())
    body = '{"prompt": "%s", "max_tokens": 4, "temperature": -0.0, "rayspec": {"tree": "sequoia:16"}}' % PROMPT
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as own:
        assert own.post("/v1/completions", content=body, headers={"Content-Type": "application/json"}).status_code == 200
        samples = metric_samples(own)
    temperatures = {dict(labels)["temperature"] for name, labels in samples if name == "rayspec_tree_nodes"}
    assert temperatures == {"0"}


# ---------------------------------------------------------------- disconnects, limits, failures


def answered(http, endpoint: str, status: int) -> float:
    key = ("rayspec_http_requests_total", (("endpoint", endpoint), ("status", str(status))))
    return metric_samples(http).get(key, 0)


def test_a_client_disconnect_stops_the_generation_and_releases_the_sessions(http, server):
    target, drafter = server["target"], server["drafter"]
    target.permits = threading.Semaphore(2)  # two steps, then the generation waits
    before = answered(http, "/v1/chat/completions", 200)
    aborted = ("rayspec_generations_ended_total", (("reason", "abort"),))
    aborts = metric_samples(http).get(aborted, 0)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "seed": 1, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()  # held: an iterator dropped would close the stream before the checks
        first = next(line for line in lines if line)
        assert json.loads(first[len("data: "):])["choices"][0]["delta"]["role"] == "assistant"
        assert target.open_sessions == 1 and drafter.open_sessions == 1
    # the connection is closed mid-stream; once the server has ended that response ...
    eventually(lambda: answered(http, "/v1/chat/completions", 200) == before + 1, what="the server to end the response")
    target.permits.release(1000)
    # ... the generation stops after the step it was in, releasing both sessions
    eventually(lambda: target.open_sessions == 0 and drafter.open_sessions == 0, what="sessions released")
    assert target.steps <= 3  # of the >= 50 that 200 tokens would take
    eventually(lambda: metric_samples(http).get(aborted, 0) == aborts + 1, what="the abort to be counted")


@pytest.mark.parametrize("endpoint, body", [
    ("/v1/completions", {"prompt": PROMPT}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/completions", {"prompt": PROMPT, "stream": True}),  # left before its first chunk
])
def test_a_client_that_leaves_before_its_answer_stops_the_generation(http, server, endpoint, body):
    """A client that gives up on a request not yet answered (no chunk of it sent) stops the
    generation and frees its sessions as one that leaves mid-stream does: not decoding on to
    max_tokens for nobody.  The server logs and counts the request as 499."""
    target, drafter = server["target"], server["drafter"]
    target.permits = threading.Semaphore(0 if body.get("stream") else 2)  # then the generation waits
    before = answered(http, endpoint, 499)
    body = {**body, "max_tokens" if endpoint != "/v1/responses" else "max_output_tokens": 200, "seed": 1}
    try:
        with pytest.raises(httpx.ReadTimeout):
            with httpx.Client(base_url=http.base_url, timeout=1.0) as leaving:
                leaving.post(endpoint, json=body).read()
        eventually(lambda: answered(http, endpoint, 499) == before + 1, what="the server to see the client leave")
    finally:
        target.permits.release(1000)
    eventually(lambda: target.open_sessions == 0 and drafter.open_sessions == 0, what="sessions released")
    assert target.steps <= 3  # of the >= 50 that 200 tokens would take
    assert http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4}).status_code == 200


@pytest.mark.parametrize("endpoint, body", [
    ("/v1/completions", {"prompt": PROMPT, "guided_regex": "[a-c]{5}"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "guided_regex": "[d-f]{6}"}),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "left", "schema": {
        "type": "object", "properties": {"left": {"type": "integer"}}, "required": ["left"]}}}}),
])
def test_a_client_that_leaves_while_its_structured_output_compiles_stops_the_compiler(
        http, server, with_eos, monkeypatch, tmp_path, endpoint, body):
    """A compilation holds one of the few compiler processes for seconds, up to COMPILE_SECONDS:
    a client that leaves meanwhile has its compiler killed and the compiler's place freed at
    once, its request counted 499, rather than compiled on for nobody (a compiler that never
    answers stands in for a slow compilation)."""
    import os
    import socket

    from rayspec.engine import structured

    started = tmp_path / "compiler.pid"
    monkeypatch.setattr(structured, "_COMPILER", f"import os, time\nopen({str(started)!r}, 'w').write(str(os.getpid()))"
                                                 "\ntime.sleep(120)")
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 40.0)  # without the fix, the child's end
    before = answered(http, endpoint, 499)
    sent = json.dumps({**body, "seed": 1}).encode()
    port = int(str(http.base_url).rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as leaving:
        leaving.sendall(f"POST {endpoint} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(sent)}\r\n\r\n".encode() + sent)
        eventually(lambda: started.exists() and started.read_text(), what="the compiler to start")
    compiler = int(started.read_text())

    def compiler_gone() -> bool:
        try:
            os.kill(compiler, 0)  # a child killed and waited for is gone; a zombie would still answer
        except ProcessLookupError:
            return True
        return False

    eventually(compiler_gone, what="the compiler killed")
    eventually(lambda: structured._COMPILERS._value == structured.MAX_COMPILERS, what="the compiler's place freed")
    eventually(lambda: answered(http, endpoint, 499) == before + 1, what="the request counted 499")
    assert server["target"].opened == 0  # nothing was started for it


def test_beyond_the_concurrency_limit_requests_wait_for_a_slot(http, server):
    """As vLLM's: a busy service is slower, not refusing.  The request that finds both slots
    taken waits, nothing of it started, and is answered once a slot is free; the time it
    waited is in `rayspec_request_queue_seconds`."""
    target = server["target"]
    target.permits = threading.Semaphore(0)
    body = {"prompt": PROMPT, "max_tokens": 8, "seed": 1}
    waits = ("rayspec_request_queue_seconds_count", ())
    before = metric_samples(http).get(waits, 0)
    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(http.post, "/v1/completions", json=body) for _ in range(2)]
        eventually(lambda: target.open_sessions == 2, what="two generations to start")
        queued = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: metric_samples(http)[WAITING] == 1, what="the third request to queue")
        time.sleep(0.5)
        assert not queued.done() and target.opened == 2
        target.permits.release(1000)
        assert [f.result().status_code for f in [*held, queued]] == [200, 200, 200]
    samples = metric_samples(http)
    assert samples[WAITING] == 0 and samples[waits] == before + 3
    assert samples[("rayspec_request_queue_seconds_bucket", (("le", "0.25"),))] <= before + 2  # it waited 0.5 s


def test_beyond_the_queue_requests_get_429_saying_it_is_full(http, server, monkeypatch):
    monkeypatch.setattr(server["service"]._slots, "max_waiting", 1)
    target = server["target"]
    target.permits = threading.Semaphore(0)
    body = {"prompt": PROMPT, "max_tokens": 8, "seed": 1}
    with ThreadPoolExecutor(3) as pool:
        held = [pool.submit(http.post, "/v1/completions", json=body) for _ in range(2)]
        eventually(lambda: target.open_sessions == 2, what="two generations to start")
        queued = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: metric_samples(http)[WAITING] == 1, what="the third request to queue")
        refused = http.post("/v1/completions", json=body)
        assert refused.status_code == 429
        assert refused.json()["error"] == {
            "message": "the service runs 2 generations at once, all of its slots are taken, and its queue is full: "
                       "1 request waits for them (limits.max_queued_requests: 1); retry later",
            "type": "rate_limit_error", "param": None, "code": "too_many_requests"}
        assert target.opened == 2
        target.permits.release(1000)
        assert [f.result().status_code for f in [*held, queued]] == [200, 200, 200]
    assert http.post("/v1/completions", json=body).status_code == 200


def test_a_client_that_leaves_while_queued_leaves_the_queue_and_starts_nothing(http, server):
    """A request of n=2 queued with one slot free (kept for it), a single request behind it.
    Its client disconnects: counted 499, no worker session opened for it, and the request
    behind takes the free slot at once, while the first generation still runs."""
    target = server["target"]
    target.permits = threading.Semaphore(0)
    body = {"prompt": PROMPT, "max_tokens": 8, "seed": 1}

    def leave():
        with httpx.Client(base_url=http.base_url, timeout=2.0) as leaving:
            leaving.post("/v1/completions", json={**body, "n": 2})

    before = answered(http, "/v1/completions", 499)
    with ThreadPoolExecutor(3) as pool:
        held = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: target.open_sessions == 1, what="a generation to start")
        leaving = pool.submit(leave)
        eventually(lambda: metric_samples(http)[WAITING] == 1, what="the request of n=2 to queue")
        behind = pool.submit(http.post, "/v1/completions", json=body)
        eventually(lambda: metric_samples(http)[WAITING] == 2, what="the single request to queue behind it")
        assert target.opened == 1
        with pytest.raises(httpx.ReadTimeout):
            leaving.result()
        eventually(lambda: answered(http, "/v1/completions", 499) == before + 1, what="the server to see it leave")
        eventually(lambda: target.open_sessions == 2, what="the request behind it to start in the free slot")
        assert target.opened == 2 and metric_samples(http)[WAITING] == 0 and not held.done()
        target.permits.release(1000)
        assert held.result().status_code == behind.result().status_code == 200
    assert target.opened == 2


def test_worker_failures_are_503_and_the_service_recovers(http, server):
    target = server["target"]
    target.fail = (0, RemoteError("UNAVAILABLE: connection refused"))
    for stream in (False, True):
        reply = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "stream": stream})
        assert reply.status_code == 503 and "worker" in reply.json()["error"]["message"]
    # a worker's own error is no outage to retry: a 500
    target.fail = (0, RemoteError("INTERNAL: RuntimeError: CUDA error", grpc.StatusCode.INTERNAL))
    reply = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8})
    assert reply.status_code == 500 and reply.json()["error"]["type"] == "internal_error"
    assert reply.json()["error"]["message"] == "a model worker failed: INTERNAL: RuntimeError: CUDA error"
    # a failure mid-stream: the status line is sent, the error arrives as an event
    target.fail = (target.steps + 2, RemoteError("UNAVAILABLE: connection reset"))
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, "seed": 1, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        events = sse_events(response)
    assert events[-1] == "[DONE]" and "connection reset" in json.loads(events[-2])["error"]["message"]
    eventually(lambda: target.open_sessions == 0, what="sessions released")
    # with n = 2, a failed step fails the whole request and both choices' sessions are released
    for stream in (False, True):
        target.fail = (target.steps + 3, RemoteError("UNAVAILABLE: connection reset"))
        body = {"prompt": PROMPT, "max_tokens": 100, "seed": 1, "n": 2, "stream": stream}
        with http.stream("POST", "/v1/completions", json=body) as response:
            if stream:
                assert response.status_code == 200
                assert "connection reset" in json.loads(sse_events(response)[-2])["error"]["message"]
            else:
                assert response.status_code == 503
        eventually(lambda: target.open_sessions == 0, what="both choices' sessions released")
    target.fail = None
    assert http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8}).status_code == 200


def test_an_unexpected_failure_is_a_500_and_the_connection_stays_open(http, server):
    """A bug (here a step raising a RuntimeError) is a 500 with an OpenAI error body naming it,
    and the client's next request on the same keep-alive connection is served."""
    target = server["target"]
    target.fail = (0, RuntimeError("boom"))
    for stream in (False, True):
        failed = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "stream": stream})
        assert failed.status_code == 500
        assert failed.json()["error"] == {"message": "internal error: RuntimeError: boom", "type": "internal_error",
                                          "param": None, "code": None}
    target.fail = None
    assert http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8}).status_code == 200


def test_text_that_is_not_unicode_is_refused(http):
    """JSON's escapes can spell a lone surrogate, which no tokenizer takes: a 400 naming it
    wherever text is read (prompt, messages, stop strings, bad words, /tokenize), and its
    `param` the field (it was null for the prompt and the stop strings)."""
    lone = "a\ud800"
    for path, body, where, param in [
        ("/v1/completions", {"prompt": lone}, "the prompt", "prompt"),
        ("/v1/completions", {"prompt": lone, "stream": True}, "the prompt", "prompt"),
        ("/v1/completions", {"prompt": "x", "stop": [lone]}, "stop", "stop"),
        ("/v1/completions", {"prompt": "x", "bad_words": lone}, "bad_words", "bad_words"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": lone}]}, "messages.0.content: Value error, "
                                                                                    "the content", "messages"),
        ("/v1/responses", {"input": lone}, "input[0].content", "input"), ("/tokenize", {"prompt": lone}, "the prompt", "prompt"),
        ("/v1/responses", {"input": "x", "metadata": {"k": lone}}, "metadata", "metadata"),
        ("/v1/responses", {"input": "x", "user": lone}, "user", "user"),
    ]:
        reply = http.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["message"].startswith(where), (path, error)
        assert error["message"].endswith(" is not valid Unicode text: it holds a lone surrogate (U+D800) at character 1")
        assert error["param"] == param, (path, body, error)


# ---------------------------------------------------------------- the service's parts


def test_a_chat_can_continue_its_last_message_and_give_its_template_variables(client, http, parts, reference):
    """vLLM's chat extras: `continue_final_message` (with `add_generation_prompt: false`)
    leaves the last message open, so the completion continues a reply the client began — the
    engine's completion of that prompt; `chat_template_kwargs` are the template's variables
    (here a template of our own that reads one), on the chat endpoint and /tokenize alike."""
    target, drafter, tokenizer = parts
    messages = [{"role": "user", "content": "Write a loop."}, {"role": "assistant", "content": "for i in"}]
    prompt = tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=False)
    assert prompt.endswith("# assistant:\nfor i in")
    _, text, _ = expected(reference, tokenizer, prompt, max_new_tokens=10, seed=12)
    extra = {"seed": 12, "add_generation_prompt": False, "continue_final_message": True}
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, extra_body=extra)
    assert chat.choices[0].message.content == text
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert chat.usage.prompt_tokens == len(ids)
    assert http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False,
                                        "continue_final_message": True}).json()["tokens"] == ids

    variable = AutoTokenizer.from_pretrained(TARGET_PATH)
    variable.chat_template = "{% if brief %}# be brief\n{% endif %}" + tokenizer.chat_template
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), tokenizer=variable, **SETTING)
    question = [{"role": "user", "content": "Write a loop."}]
    with ServerThread(create_app(Service(engine, variable, MODEL))) as server:
        with httpx.Client(base_url=server.url, timeout=60) as own:
            body = {"messages": question, "max_tokens": 8, "seed": 3}
            plain, brief = (own.post("/v1/chat/completions", json={**body, **kwargs}).json()
                            for kwargs in ({}, {"chat_template_kwargs": {"brief": True}}))
            counted = own.post("/tokenize", json={"messages": question, "chat_template_kwargs": {"brief": True}}).json()
    briefed = variable.apply_chat_template(question, add_generation_prompt=True, tokenize=False, brief=True)
    assert briefed.startswith("# be brief\n")
    assert brief["choices"][0]["message"]["content"] == expected(reference, tokenizer, briefed, max_new_tokens=8,
                                                                 seed=3)[1]
    assert counted["tokens"] == tokenizer.encode(briefed, add_special_tokens=False)
    assert brief["usage"]["prompt_tokens"] == counted["count"] > plain["usage"]["prompt_tokens"]


def test_a_chats_echo_puts_the_message_it_continues_before_the_reply_as_vllms_does(client, http):
    """vLLM's chat `echo`: the last message's text before the reply's when it is the reply's
    role (an assistant's reply the client began, continued), streamed or not; a user's last
    message is not echoed into an assistant's reply.  It was refused as an unknown field."""
    began = [{"role": "user", "content": "Write a loop."}, {"role": "assistant", "content": "for i in"}]
    extra = {"seed": 5, "add_generation_prompt": False, "continue_final_message": True}
    plain = client.chat.completions.create(model=MODEL, messages=began, max_tokens=6, extra_body=extra)
    reply = plain.choices[0].message.content
    echoed = client.chat.completions.create(model=MODEL, messages=began, max_tokens=6,
                                            extra_body={**extra, "echo": True})
    assert echoed.choices[0].message.content == "for i in" + reply
    assert echoed.usage == plain.usage  # the echo is no generated token
    stream = client.chat.completions.create(model=MODEL, messages=began, max_tokens=6, stream=True,
                                            extra_body={**extra, "echo": True})
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "for i in" + reply
    question = [{"role": "user", "content": "Write a loop."}]
    asked = {"model": MODEL, "messages": question, "max_tokens": 6, "seed": 5}
    not_echoed = http.post("/v1/chat/completions", json={**asked, "echo": True}).json()
    assert not_echoed["choices"][0]["message"]["content"] == \
        http.post("/v1/chat/completions", json={**asked, "echo": False}).json()["choices"][0]["message"]["content"]


def test_a_generation_that_fails_before_its_first_step_ends_its_stream_and_frees_its_slot():
    """Whatever fails in a generation's thread, before its first step too, reaches the
    awaiting side (it once hung there) and gives its slot back."""
    import asyncio

    class Broken:
        request_id = "broken"
        prompt_ids = [1, 2, 3]

        def run(self):
            raise RuntimeError("broken before the first step")

    service = Service(engine=None, tokenizer=None, model_id="x", limits=LimitsConfig(max_concurrent_requests=1))

    async def consume():
        for _ in range(2):  # the second start needs the slot the first gave back
            stream = await service.start(Broken())
            with pytest.raises(RuntimeError, match="broken before the first step"):
                await asyncio.wait_for(anext(stream), 10)
            await asyncio.to_thread(stream.finished.wait, 10)

    asyncio.run(consume())
    samples = metric_samples_of(service)
    assert samples[("rayspec_generations_ended_total", (("reason", "abort"),))] == 2
    assert samples[("rayspec_prompt_tokens_total", ())] == 0  # never read


def metric_samples_of(service) -> dict:
    text = service.metrics.exposition().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def test_chat_without_a_template_uses_the_fallback(parts, reference):
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = None
    service = Service(reference, tokenizer, MODEL)
    prompt = service.render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt == "system: Be brief.\n\nuser: Hi\n\nassistant:"
    assert service.chat_template() == FALLBACK_CHAT_TEMPLATE  # what /tokenizer_info gives clients
    assert service.tool_parser.name == "json"
    call = {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": '{"tz": "UTC"}'}}
    with_tools = service.render_chat([{"role": "user", "content": "Time?"},
                                      {"role": "assistant", "content": "", "tool_calls": [call]},
                                      {"role": "tool", "tool_call_id": "call_1", "content": "noon"}],
                                     tools=[{"type": "function", "function": {"name": "now"}}])
    assert with_tools.startswith('tools: [{"type": "function", "function": {"name": "now"}}]\nTo call tools, answer '
                                 'with nothing but a JSON list of calls: [{"name": ..., "arguments": {...}}]\n\n')
    written = with_tools.split("assistant: ")[1].split("\n\n")[0]
    assert written == '[{"name": "now", "arguments": {"tz": "UTC"}}]'  # the object, as the model is told to write it
    # what the template shows as a call made, the json parser reads back as that call
    content, [read] = read_tool_calls(service.tool_parser, written, {"now"})
    assert content is None and (read.name, read.arguments) == ("now", {"tz": "UTC"})


# How Qwen3-Coder's template writes an earlier call: it walks the arguments' items.
ITEMS_TEMPLATE = ("{% for m in messages %}{{ m.role }}:{% for c in m.tool_calls or [] %} {{ c.function.name }}("
                  "{% for k, v in c.function.arguments|items %}{{ k }}={{ v }}{% endfor %}){% endfor %}"
                  " {{ m.content }}\n{% endfor %}")


def test_an_earlier_calls_arguments_reach_the_template_as_an_object_and_a_call_without_a_function_is_a_400(
        reference):
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = ITEMS_TEMPLATE
    service = Service(reference, tokenizer, MODEL)
    call = {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": '{"tz": "UTC"}'}}
    conversation = [{"role": "user", "content": "Time?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert service.render_chat(conversation, add_generation_prompt=False) == "user: Time?\nassistant: now(tz=UTC) \n"
    # Arguments that are no JSON object stay the text they were (the template's to refuse).
    odd = {**call, "function": {"name": "now", "arguments": "not json"}}
    with pytest.raises(ChatRenderError, match="^the model's chat template refused these messages: "):
        service.render_chat([conversation[0], {**conversation[1], "tool_calls": [odd]}])
    for broken in ({"id": "call_1", "type": "function"}, {"function": {"arguments": "{}"}}, "now"):
        with pytest.raises(ChatRenderError, match=r"^messages\[1\]\.tool_calls\[0\] must be a tool call: "):
            service.render_chat([conversation[0], {**conversation[1], "tool_calls": [broken]}])
    # The fallback template, whose rendering of a call without a function raised a TypeError (a 500).
    tokenizer.chat_template = None
    with pytest.raises(ChatRenderError, match=r"^messages\[1\]\.tool_calls\[0\] must be a tool call"):
        service.render_chat([conversation[0], {**conversation[1], "tool_calls": [{"id": "call_1"}]}])


def test_an_earlier_calls_empty_arguments_reach_the_template_as_no_arguments_as_vllms_do(reference):
    """A call given back with arguments "" or null (a call without parameters, as some clients
    and servers stream it) or none is the object {} to the template, as vLLM gives it: a
    template that walks the arguments' items refused it (a 400), and others wrote "" or null
    as the call's arguments."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = ITEMS_TEMPLATE
    service = Service(reference, tokenizer, MODEL)
    for function in ({"name": "now", "arguments": ""}, {"name": "now", "arguments": None}, {"name": "now"}):
        call = {"id": "call_1", "type": "function", "function": function}
        conversation = [{"role": "user", "content": "Time?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        assert service.render_chat(conversation, add_generation_prompt=False) == "user: Time?\nassistant: now() \n"
    tokenizer.chat_template = None  # the fallback writes the call as the json parser reads one back
    written = service.render_chat([*conversation[:1], {**conversation[1], "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": ""}}]}])
    assert '[{"name": "now", "arguments": {}}]' in written


def test_an_earlier_calls_arguments_nested_past_the_decoders_depth_stay_their_text(http, reference):
    """Arguments JSON nests deeper than Python's decoder goes (a RecursionError, not a
    ValueError) are given to the template as the text they were, not a 500."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    service = Service(reference, tokenizer, MODEL)
    deep = "[" * 5000 + "]" * 5000
    call = {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": deep}}
    conversation = [{"role": "user", "content": "Time?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert json.dumps(deep) in service.render_chat(conversation)
    counted = http.post("/tokenize", json={"messages": conversation})
    assert counted.status_code == 200 and counted.json()["count"] > 0, counted.json()


def test_text_parts_of_a_message_are_joined_a_line_each_and_a_name_reaches_the_template():
    parts = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    assert Message(role="user", content=parts).content == "Hello\nworld"
    assert Message(role="user", content="hi", name="ada").as_template_input() == {"role": "user", "content": "hi",
                                                                                  "name": "ada"}
    assert "name" not in Message(role="user", content="hi").as_template_input()



# How multimodal models' templates (llava's) write a message: its text parts, never a string.
PARTS_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {% for part in message['content'] | "
                  "selectattr('type', 'equalto', 'text') %}{{ part['text'] }}{% endfor %}{{ '\\n' }}{% endfor %}")


def test_a_template_that_walks_a_messages_parts_is_given_them_as_vllms_openai_content_format(reference):
    """A template that loops over a message's content as OpenAI's parts (vLLM's "openai"
    content format, found as vLLM finds it) is given them: given the joined string, it
    walked its characters and wrote every message empty.  Templates that write a string are
    given the string."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = PARTS_TEMPLATE
    service = Service(reference, tokenizer, MODEL)
    conversation = [{"role": "system", "content": "Be brief."},
                    Message(role="user", content=[{"type": "text", "text": "Hi"}]).as_template_input(),
                    {"role": "assistant", "content": ""}]
    assert service.render_chat(conversation, add_generation_prompt=False) == "system: Be brief.\nuser: Hi\nassistant: \n"
    aliased = ("{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% if m.content is string %}"
               "{{ m.content }}{% else %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endif %}{% endfor %}")
    tokenizer.chat_template = aliased
    assert service.render_chat(conversation[:2], add_generation_prompt=False) == "[Hi]"
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}"
    assert service.render_chat(conversation[:2], add_generation_prompt=False) == "Be brief.|Hi|"
    tokenizer.chat_template = PARTS_TEMPLATE  # a reply to continue that is empty is still a text part
    assert service.render_chat(conversation, add_generation_prompt=False, continue_final_message=True).endswith(
        "user: Hi\nassistant: ")


def test_a_messages_text_parts_reach_a_template_that_walks_them_each(reference):
    """A message sent as several text parts is given, as vLLM gives it, to a template that
    walks parts as those parts (they reached it as one, their texts joined by a newline), and
    to one that writes a string as that joined text; a refusal given beside empty parts is the
    refusal's text."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = ("{% for m in messages %}{{ m.role }}:{% for part in m['content'] %}<{{ part.text }}>"
                               "{% endfor %}{% endfor %}")
    service = Service(reference, tokenizer, MODEL)
    parts = [{"type": "text", "text": "Hello"}, {"type": "input_text", "text": "world\n"}]
    body = ChatBody.model_validate({"model": MODEL, "messages": [
        {"role": "user", "content": parts}, {"role": "assistant", "content": [], "refusal": "No."},
        {"role": "user", "content": "Why?"}]})
    assert body.prompt(service) == "user:<Hello><world\n>assistant:<No.>user:<Why?>"
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}"
    assert body.prompt(service) == "Hello\nworld\n|No.|Why?|"


def test_a_responses_input_messages_text_parts_reach_a_template_that_walks_them_each(reference):
    """The Responses API's input messages and function_call_output items sent as several text
    parts reach a template that walks parts as those parts, as vLLM's Responses API gives them
    (they reached it as one part, their texts joined), and one that writes a string as their
    texts a line each, as the chat endpoint gives a message's parts."""
    from rayspec.serve.responses import ResponsesBody

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.chat_template = ("{% for m in messages %}{{ m.role }}:{% for part in m['content'] %}<{{ part.text }}>"
                               "{% endfor %}{% endfor %}")
    service = Service(reference, tokenizer, MODEL)
    body = ResponsesBody(instructions="Be brief.", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "world"}]},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "12:00"}, {"type": "input_text", "text": "UTC"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is"}, {"type": "refusal",
                                                                                       "refusal": "No."}]},
        {"role": "user", "content": "Why?"}])
    assert service.render_chat(body.messages()) == (
        "system:<Be brief.>user:<Hello><world>assistant:<>tool:<12:00><UTC>assistant:<It is><No.>user:<Why?>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}"
    assert service.render_chat(body.messages()) == "Be brief.|Hello\nworld||12:00\nUTC|It is\nNo.|Why?|"


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "on": {"type": "boolean"}},
          "required": ["name", "on"]}


def test_structured_output_through_the_openai_client(parts):
    """OpenAI's response_format and vLLM's guided_* and structured_outputs fields: the text is
    the in-process engine's under the same structured output, JSON that follows the schema, or
    one of the choices, streamed or not."""
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)  # the tiny target declares none: a match ends there
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=48, max_tokens=64))
    ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    expected = engine.run(ids, max_new_tokens=48, temperature=0.8, seed=3,
                          structured_output=StructuredOutput(json_schema=SCHEMA))
    assert expected.finish_reason == "stop"
    response_format = {"type": "json_schema", "json_schema": {"name": "switch", "schema": SCHEMA, "strict": True}}
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=48, temperature=0.8, seed=3,
                                               extra_body={"response_format": response_format})
        vllm_style = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=48, temperature=0.8, seed=3,
                                               extra_body={"structured_outputs": {"json": SCHEMA}})
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a switch?"}],
                                              max_tokens=48, seed=5, response_format=response_format)
        streamed = "".join(
            chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "yes or no?"}], max_tokens=8, seed=5, stream=True,
                extra_body={"guided_choice": ["yes", "no"]}) if chunk.choices)
        regex = [client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, seed=seed,
                                           extra_body={"guided_regex": "[0-9]{3}-[a-z]{2}"}).choices[0].text
                 for seed in range(3)]
        response = client.responses.create(model=MODEL, input="a switch?", max_output_tokens=48,
                                           text={"format": {"type": "json_schema", "name": "switch", "schema": SCHEMA}},
                                           extra_body={"seed": 5})
        with pytest.raises(openai.BadRequestError, match="json_schema uses properties.n.maximum"):
            client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, extra_body={"guided_json": {
                "type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}})
    assert completion.choices[0].text == vllm_style.choices[0].text == tokenizer.decode(expected.tokens)
    assert completion.choices[0].finish_reason == "stop"
    assert set(json.loads(completion.choices[0].text)) == {"name", "on"}
    assert chat.choices[0].finish_reason == "stop" and set(json.loads(chat.choices[0].message.content)) == {"name", "on"}
    assert streamed in ("yes", "no")
    assert response.status == "completed" and response.text.format.type == "json_schema"
    assert json.loads(response.output_text) == json.loads(chat.choices[0].message.content)  # the same conversation
    assert all(len(text) == 6 and text[:3].isdigit() and text[3] == "-" and text[4:].isalpha() for text in regex)


def test_request_ids_are_echoed_and_name_the_response(http):
    body = {"prompt": PROMPT, "max_tokens": 4, "seed": 1}
    given = http.post("/v1/completions", json=body, headers={"X-Request-Id": "trace-42"})
    assert given.headers.get_list("x-request-id") == ["trace-42"] and given.json()["id"] == "cmpl-trace-42"
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                     headers={"X-Request-Id": "trace-43"})
    assert chat.headers["x-request-id"] == "trace-43" and chat.json()["id"] == "chatcmpl-trace-43"
    fresh = [http.post("/v1/completions", json=body) for _ in range(2)]
    ids = [response.headers["x-request-id"] for response in fresh]
    assert ids[0] != ids[1] and [r.json()["id"] for r in fresh] == [f"cmpl-{i}" for i in ids]
    unusable = http.post("/v1/completions", json=body, headers={"X-Request-Id": "x" * 257})
    assert len(unusable.headers["x-request-id"]) == 32 and unusable.json()["id"].endswith(unusable.headers["x-request-id"])
    refused = http.post("/v1/completions", json={**body, "max_tokens": -1}, headers={"X-Request-Id": "bad-1"})
    assert refused.status_code == 400 and refused.headers["x-request-id"] == "bad-1"  # errors carry it too
    assert http.get("/health").headers["x-request-id"]


def test_continuous_usage_stats_give_every_chunk_its_choices_usage_so_far(http, parts, reference):
    body = {"prompt": PROMPT, "max_tokens": 12, "seed": 3, "n": 2, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with http.stream("POST", "/v1/completions", json=body) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    prompt_tokens = len(parts[2].encode(PROMPT))
    final = events[-1]["usage"]
    assert events[-1]["choices"] == [] and final["completion_tokens"] == 24 and final["prompt_tokens"] == prompt_tokens
    chunks = events[:-1]
    assert chunks and all(chunk["usage"]["prompt_tokens"] == prompt_tokens for chunk in chunks)
    for index in (0, 1):
        counts = [chunk["usage"]["completion_tokens"] for chunk in chunks if chunk["choices"][0]["index"] == index]
        assert counts == sorted(counts) and counts[-1] == 12 and len(set(counts)) > 1  # grows step by step
        for chunk in chunks:
            assert chunk["usage"]["total_tokens"] == prompt_tokens + chunk["usage"]["completion_tokens"]
    plain = {**body, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/completions", json=plain) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert all(event["usage"] is None for event in events[:-1]) and events[-1]["usage"]["completion_tokens"] == 24
    unknown = http.post("/v1/completions", json={**body, "stream_options": {"include_usages": True}})
    assert unknown.status_code == 400 and "include_usages" in unknown.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, None])
def test_stream_options_without_a_stream_are_refused_as_openai_and_vllm_refuse_them(http, path, stream):
    prompt = {"prompt": PROMPT} if path == "/v1/completions" else {"messages": [{"role": "user", "content": PROMPT}]}
    body = {**prompt, "max_tokens": 4, "stream_options": {"include_usage": True}}
    if stream is not None:
        body["stream"] = stream
    response = http.post(path, json=body)
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "stream_options"
    assert error["message"] == "stream_options is only allowed with stream: true"
    assert http.post(path, json={**body, "stream_options": None}).status_code == 200


def test_continuous_usage_counts_the_steps_sent_not_those_run_ahead(http, server, monkeypatch):
    """A generation's thread runs ahead of its stream when the event loop lags (here held until
    four steps ran): each chunk's usage so far counts the tokens sent up to it, not those of
    steps computed and not yet sent."""
    target = server["target"]
    target.permits = threading.Semaphore(4)  # four steps, then the generation waits
    step_delta = _ChatReply.step_delta

    def lagging(self, index, added):
        eventually(lambda: target.steps >= 4, what="the generation to run ahead")
        return step_delta(self, index, added)

    monkeypatch.setattr(_ChatReply, "step_delta", lagging)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "seed": 1, "stream": True,
            "ignore_eos": True, "logprobs": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        opening = json.loads(next(line for line in lines if line)[len("data: "):])
        first = json.loads(next(line for line in lines if line)[len("data: "):])
        target.permits.release(1000)
        events = [first] + [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert opening["choices"][0]["delta"]["role"] == "assistant" and opening["usage"]["completion_tokens"] == 0
    sent = 0
    for event in events[:-1]:
        sent += len((event["choices"][0]["logprobs"] or {"content": []})["content"])
        assert event["usage"]["completion_tokens"] == sent
    assert sent == 40 and events[-1]["usage"]["completion_tokens"] == 40


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "now"}}


def test_tool_calls_by_name_or_required_through_the_openai_client(parts):
    """tool_choice naming a function: the reply is its arguments, JSON of its schema, the
    in-process engine's text under that schema; "required": a list of calls among the tools;
    both streamed or not, and a conversation carrying calls and their results renders."""
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=64, max_tokens=96))
    messages = [{"role": "user", "content": "weather in Paris?"}]
    prompt = service.render_chat(messages, tools=[WEATHER, CLOCK])
    assert prompt.startswith("# tools: [{\"type\": \"function\"") and "get_weather" in prompt
    expected = engine.run(tokenizer.encode(prompt, add_special_tokens=False), max_new_tokens=64, seed=3,
                          structured_output=StructuredOutput(json_schema=WEATHER["function"]["parameters"]))
    named = {"type": "function", "function": {"name": "get_weather"}}
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        called = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, CLOCK],
                                                tool_choice=named, max_tokens=64, seed=3)
        streamed = list(client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, CLOCK],
                                                       tool_choice=named, max_tokens=64, seed=3, stream=True))
        required = [client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, CLOCK],
                                                   tool_choice="required", max_tokens=96, seed=seed)
                    for seed in range(3)]
        required_streamed = list(client.chat.completions.create(
            model=MODEL, messages=messages, tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=96, seed=0,
            stream=True, parallel_tool_calls=False))
        call = called.choices[0].message.tool_calls[0]
        follow_up = client.chat.completions.create(model=MODEL, max_tokens=8, seed=1, messages=[
            *messages, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "18 degrees"}])
        for wrong, message, param in [
            ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "fly"}}},
             "tool_choice names the function 'fly', which tools do not define", "tool_choice"),
            ({"tool_choice": "required"}, "tool_choice needs tools", "tool_choice"),
            ({"tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0] must be", "tools"),
            ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
             "tool_choice required makes the reply JSON already", "tool_choice"),
            ({"tools": [WEATHER], "tool_choice": "required", "logprobs": True}, "logprobs are not given with tool calls",
             "logprobs"),
        ]:
            with pytest.raises(openai.BadRequestError, match=re.escape(message)) as refused:
                client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, **wrong)
            assert refused.value.body["param"] == param
    choice = called.choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert call.function.arguments == tokenizer.decode(expected.tokens)
    assert set(json.loads(call.function.arguments)) == {"city", "unit"}
    deltas = [chunk.choices[0].delta.tool_calls for chunk in streamed if chunk.choices and chunk.choices[0].delta.tool_calls]
    assert deltas[0][0].function.name == "get_weather" and deltas[0][0].id and len(deltas) > 1
    assert "".join(d[0].function.arguments for d in deltas) == call.function.arguments
    assert [c.choices[0].finish_reason for c in streamed if c.choices and c.choices[0].finish_reason] == ["stop"]
    for reply in required:
        assert reply.choices[0].finish_reason == "tool_calls" and reply.choices[0].message.tool_calls
        for made in reply.choices[0].message.tool_calls:
            arguments = json.loads(made.function.arguments)
            assert (made.function.name, set(arguments)) in (("get_weather", {"city", "unit"}), ("now", set()))
    finished = [c.choices[0].finish_reason for c in required_streamed if c.choices and c.choices[0].finish_reason]
    streamed_calls = [call for c in required_streamed if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert finished == ["tool_calls"] and len(streamed_calls) == 1  # parallel_tool_calls false
    assert not required_streamed[-1].choices[0].delta.tool_calls  # the finish reason in a chunk of its own, as OpenAI's
    assert follow_up.choices[0].message.content is not None


def _tool_service(parts, tool_call_parser: str = "auto") -> tuple[Service, SpeculativeEngine]:
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=64, max_tokens=96),
                      tool_call_parser=tool_call_parser)
    return service, engine


# What a model answering in each syntax writes, forced by a regular expression: the tiny random
# pair has no tool syntax of its own.
JSON_CALL = r'\[\{"name": "get_weather", "arguments": \{"city": "(Paris|Rome)", "unit": "C"\}\}\]'
HERMES_REPLY = r'On it\.\n<tool_call>\{"name": "now"\}</tool_call>\n<tool_call>\{"name": "get_weather", "arguments": ' \
               r'\{"city": "Rome"\}\}</tool_call>'


def test_auto_tool_choice_answers_text_or_calls_through_the_openai_client(parts):
    """tool_choice "auto" (the default with tools): a reply without calls is the in-process
    engine's text, a reply in the model's call syntax (the demo template's: json) comes back as
    tool_calls, streamed or not; hermes' content before its calls streams as content first."""
    service, engine = _tool_service(parts)
    tokenizer = parts[2]
    assert service.tool_parser.name == "json"  # the demo template writes no marker of its own
    messages = [{"role": "user", "content": "weather in Paris?"}]
    prompt_ids = tokenizer.encode(service.render_chat(messages, tools=[WEATHER, CLOCK]), add_special_tokens=False)
    free = engine.run(prompt_ids, max_new_tokens=24, seed=3)
    hermes_service, _ = _tool_service(parts, "hermes")
    base = dict(model=MODEL, messages=messages, tools=[WEATHER, CLOCK], max_tokens=96, seed=3)
    with ServerThread(create_app(service)) as server, ServerThread(create_app(hermes_service)) as hermes_server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        text = client.chat.completions.create(**{**base, "max_tokens": 24})
        called = client.chat.completions.create(**base, extra_body={"guided_regex": JSON_CALL})
        called_streamed = list(client.chat.completions.create(**base, stream=True, tool_choice="auto",
                                                              extra_body={"guided_regex": JSON_CALL}))
        hermes = openai.OpenAI(base_url=f"{hermes_server.url}/v1", api_key="x", max_retries=0)
        mixed = hermes.chat.completions.create(**base, extra_body={"guided_regex": HERMES_REPLY})
        mixed_streamed = list(hermes.chat.completions.create(**base, stream=True,
                                                             extra_body={"guided_regex": HERMES_REPLY}))
        single = hermes.chat.completions.create(**base, parallel_tool_calls=False,
                                                extra_body={"guided_regex": HERMES_REPLY})
    assert text.choices[0].message.content == tokenizer.decode(free.tokens) and not text.choices[0].message.tool_calls
    assert text.choices[0].finish_reason == ("stop" if free.finish_reason == "eos" else "length")
    [call] = called.choices[0].message.tool_calls
    assert called.choices[0].finish_reason == "tool_calls" and called.choices[0].message.content is None
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) in ({"city": "Paris", "unit": "C"}, {"city": "Rome", "unit": "C"})
    streamed_calls = [c.choices[0].delta.tool_calls for c in called_streamed
                      if c.choices and c.choices[0].delta.tool_calls]
    assert len(streamed_calls) == 1 and streamed_calls[0][0].function.arguments == call.function.arguments
    assert [c.choices[0].finish_reason for c in called_streamed if c.choices[0].finish_reason] == ["tool_calls"]
    message = mixed.choices[0].message
    assert message.content == "On it." and [c.function.name for c in message.tool_calls] == ["now", "get_weather"]
    assert mixed.choices[0].finish_reason == "tool_calls"
    assert [json.loads(c.function.arguments) for c in message.tool_calls] == [{}, {"city": "Rome"}]
    deltas = [c.choices[0].delta for c in mixed_streamed if c.choices]
    content_at = [i for i, d in enumerate(deltas) if d.content]
    calls_at = [i for i, d in enumerate(deltas) if d.tool_calls]
    assert content_at and calls_at and max(content_at) < min(calls_at)  # the content streamed before the calls
    assert "".join(d.content or "" for d in deltas) == message.content
    assert [(c.index, c.function.name) for d in deltas for c in d.tool_calls or []] == [(0, "now"), (1, "get_weather")]
    assert [c.function.name for c in single.choices[0].message.tool_calls] == ["now"]


def test_usage_counts_the_prompt_tokens_read_from_the_prefix_cache(parts):
    """OpenAI's usage.prompt_tokens_details.cached_tokens (and the Responses API's
    input_tokens_details): 0 for a new prompt, the shared system prompt's tokens for a second
    conversation that opens with it."""
    service, _ = _tool_service(parts)
    system = {"role": "system", "content": "You answer questions about the weather, briefly and precisely. " * 4}
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        first = client.chat.completions.create(model=MODEL, messages=[system, {"role": "user", "content": "Paris?"}],
                                               max_tokens=4, seed=1)
        second = client.chat.completions.create(model=MODEL, messages=[system, {"role": "user", "content": "Oslo?"}],
                                                max_tokens=4, seed=1)
        answer = client.responses.create(model=MODEL, instructions=system["content"], input="Rome?",
                                         max_output_tokens=4)
    shared = len(parts[2].encode(service.render_chat([system]), add_special_tokens=False))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert shared - 4 <= second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
    assert answer.usage.input_tokens_details.cached_tokens == second.usage.prompt_tokens_details.cached_tokens


def test_auto_tool_choice_is_refused_by_a_service_without_a_parser(parts):
    service, _ = _tool_service(parts, "none")
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match='needs a tool-call parser, and this service runs with '
                                                         'tool_call_parser: none') as refused:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],
                                           max_tokens=4)
        assert refused.value.body["param"] == "tool_choice"
        # nothing else changed: a named call still works
        named = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                               tools=[CLOCK], tool_choice={"type": "function",
                                                                           "function": {"name": "now"}}, max_tokens=8)
    assert json.loads(named.choices[0].message.tool_calls[0].function.arguments) == {}


def test_required_calls_cut_by_a_stop_string_are_text_and_bad_tools_are_named(parts):
    """A required reply a stop string cuts is no list of calls: its text is the content, and
    its finish reason "stop", not "tool_calls" (which promises calls).  A bad `tool_choice` or
    `tools` gets a 400 naming it, not a 500, nor the chat template's complaint about it."""
    service, _ = _tool_service(parts)
    messages = [{"role": "user", "content": "weather in Paris?"}]
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        cut = dict(model=MODEL, messages=messages, tools=[WEATHER, CLOCK], tool_choice="required", max_tokens=64,
                   seed=0, stop=['"name"'])
        reply = client.chat.completions.create(**cut)
        streamed = list(client.chat.completions.create(**cut, stream=True))
        for wrong, message, param in [
            ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": "get_weather"}},
             'tool_choice must be "none", "auto", "required"', "tool_choice"),
            ({"tools": [1], "tool_choice": "auto"}, "tools[0] must be", "tools"),
        ]:
            with pytest.raises(openai.BadRequestError, match=re.escape(message)) as refused:
                client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, **wrong)
            assert refused.value.body["param"] == param
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.content.startswith("[") and '"name"' not in choice.message.content
    [last] = [c.choices[0] for c in streamed if c.choices and c.choices[0].finish_reason]
    assert last.finish_reason == "stop" and not last.delta.tool_calls
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == choice.message.content


def test_a_named_call_a_stop_string_cuts_to_nothing_streams_the_call_it_answers(parts):
    """A named call whose stop string is its first character has empty arguments: its answer
    is still the call (the one tool_choice names), and its stream gives that call too, not a
    reply without calls."""
    service, _ = _tool_service(parts)
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        cut = dict(model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER],
                   tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=64, seed=0,
                   stop=["{"])
        reply = client.chat.completions.create(**cut)
        streamed = list(client.chat.completions.create(**cut, stream=True))
    [call] = reply.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments, reply.choices[0].finish_reason) == ("get_weather", "", "stop")
    calls = [c for chunk in streamed for choice in chunk.choices for c in choice.delta.tool_calls or []]
    assert [(c.index, c.function.name, c.function.arguments) for c in calls] == [(0, "get_weather", "")]
    assert calls[0].id.startswith("call_") and streamed[-1].choices[0].finish_reason == "stop"


def test_required_calls_a_stop_string_cuts_to_nothing_stream_the_empty_content_they_answer(parts):
    """A required reply whose stop string is its first character is no list of calls: its
    content is the empty text, streamed as such (the stream opens a calls reply with null
    content), so that a client joining the stream's content gets "" as the answer gives."""
    service, _ = _tool_service(parts)
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        cut = dict(model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER, CLOCK],
                   tool_choice="required", max_tokens=64, seed=0, stop=["["])
        reply = client.chat.completions.create(**cut)
        streamed = list(client.chat.completions.create(**cut, stream=True))
    assert (reply.choices[0].message.content, reply.choices[0].message.tool_calls) == ("", None)
    contents = [choice.delta.content for chunk in streamed for choice in chunk.choices]
    assert contents[0] is None and "".join(c for c in contents if c is not None) == ""
    assert "" in contents[1:] and streamed[-1].choices[0].finish_reason == "stop"


def test_auto_tool_choice_through_the_responses_api(parts):
    """The Responses API's default tool_choice with tools, auto: a text answer is one message
    item (the chat endpoint's text); a reply in the call syntax gives function_call items,
    streamed as the typed events a named call streams."""
    service, _ = _tool_service(parts)
    flat = [{"type": "function", **WEATHER["function"]}, {"type": "function", "name": "now"}]
    one_call = {"type": "array", "minItems": 1, "maxItems": 1, "items": {
        "type": "object", "required": ["name", "arguments"], "additionalProperties": False, "properties": {
            "name": {"const": "get_weather"},
            "arguments": {"type": "object", "properties": {"city": {"enum": ["Rome", "Oslo"]}}, "required": ["city"],
                          "additionalProperties": False}}}}
    forced = {"format": {"type": "json_schema", "name": "call", "schema": one_call}}
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "weather?"}],
                                              tools=[WEATHER, CLOCK], max_tokens=24, seed=3)
        text = client.responses.create(model=MODEL, input="weather?", tools=flat, max_output_tokens=24,
                                       extra_body={"seed": 3})
        called = client.responses.create(model=MODEL, input="weather?", tools=flat, max_output_tokens=64, text=forced,
                                         extra_body={"seed": 3})
        events = list(client.responses.create(model=MODEL, input="weather?", tools=flat, max_output_tokens=64,
                                              text=forced, stream=True, extra_body={"seed": 3}))
    assert text.tool_choice == "auto" and [item.type for item in text.output] == ["message"]
    assert text.output[0].content[0].text == chat.choices[0].message.content
    [call] = called.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert json.loads(call.arguments) in ({"city": "Rome"}, {"city": "Oslo"}) and call.call_id.startswith("call_")
    assert [event.type for event in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[3].delta == events[4].arguments == call.arguments
    assert events[-1].response.output[0].id == events[2].item.id == events[5].item.id


def test_responses_auto_streams_a_message_then_each_call_as_it_is_read(parts):
    """A hermes reply with content and two calls, through the Responses events: the message
    item streams its text and is done before the first call's item is added; the finished
    response lists the items streamed, in order, with their ids."""
    import asyncio

    from rayspec.serve.http import tool_calling_read_by_service
    from rayspec.serve.responses import ResponsesBody, _Answer

    service, _ = _tool_service(parts, "hermes")
    body = ResponsesBody(input="weather?", tools=[{"type": "function", **WEATHER["function"]},
                                                  {"type": "function", "name": "now"}], stream=True)
    calling = tool_calling_read_by_service(body.tool_calling(), service)
    prompt = service.render_chat(body.messages(), tools=body.chat_tools())

    def answer_events(stream: bool) -> tuple[list[dict], dict]:
        request = service.request(prompt=prompt, add_special_tokens=False, max_tokens=96, seed=3,
                                  structured_output=StructuredOutput(regex=HERMES_REPLY))
        answer = _Answer(service, request, body, calling)

        async def run():
            [steps] = await service.start_all([request])
            try:
                if not stream:
                    async for _ in steps:
                        pass
                    return []
                return [json.loads(event.split("\ndata: ")[1]) async for event in answer.events(steps)]
            finally:
                steps.close()
        events = asyncio.run(run())
        return events, answer.response(done=True)

    events, streamed = answer_events(stream=True)
    kinds = [(event["type"], event.get("output_index")) for event in events]
    assert kinds[:5] == [("response.created", None), ("response.in_progress", None),
                         ("response.output_item.added", 0), ("response.content_part.added", 0),
                         ("response.output_text.delta", 0)]
    assert kinds[-12:] == [
        ("response.output_text.done", 0), ("response.content_part.done", 0), ("response.output_item.done", 0),
        ("response.output_item.added", 1), ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.done", 1), ("response.output_item.done", 1),
        ("response.output_item.added", 2), ("response.function_call_arguments.delta", 2),
        ("response.function_call_arguments.done", 2), ("response.output_item.done", 2), ("response.completed", None)]
    assert {kind for kind, _ in kinds[5:-12]} <= {"response.output_text.delta"}  # the message's text, streaming
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["output"] == done
    assert [(item["type"], item.get("name")) for item in done] == [("message", None), ("function_call", "now"),
                                                                   ("function_call", "get_weather")]
    assert done[0]["content"][0]["text"] == "On it." == "".join(
        event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert json.loads(done[2]["arguments"]) == {"city": "Rome"} and done[1]["arguments"] == "{}"
    _, whole = answer_events(stream=False)
    assert [(item["type"], item.get("name"), item.get("arguments"), item["status"]) for item in whole["output"]] == [
        (item["type"], item.get("name"), item.get("arguments"), item["status"]) for item in final["output"]]


def test_function_calls_through_the_responses_api(parts):
    """The Responses API's function tools: a named call's arguments (the chat endpoint's, for the
    same conversation and seed), streamed as argument deltas; required calls as function_call
    items; and a conversation carrying a call and its output."""
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=64, max_tokens=96))
    flat = [{"type": "function", **WEATHER["function"]}, {"type": "function", "name": "now"}]
    named = {"type": "function", "name": "get_weather"}
    with ServerThread(create_app(service)) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "weather?"}],
                                              tools=[WEATHER, CLOCK], max_tokens=64, seed=3,
                                              tool_choice={"type": "function", "function": {"name": "get_weather"}})
        response = client.responses.create(model=MODEL, input="weather?", tools=flat, tool_choice=named,
                                           max_output_tokens=64, extra_body={"seed": 3})
        events = list(client.responses.create(model=MODEL, input="weather?", tools=flat, tool_choice=named,
                                              max_output_tokens=64, stream=True, extra_body={"seed": 3}))
        required = client.responses.create(model=MODEL, input="weather?", tools=flat, tool_choice="required",
                                           max_output_tokens=96, extra_body={"seed": 1})
        cut = dict(model=MODEL, input="weather?", tools=flat, tool_choice="required", max_output_tokens=5,
                   extra_body={"seed": 1})
        cut_short, cut_events = client.responses.create(**cut), list(client.responses.create(stream=True, **cut))
        [call] = response.output
        follow_up = client.responses.create(model=MODEL, max_output_tokens=8, extra_body={"seed": 1}, input=[
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees"}])
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.arguments == chat.choices[0].message.tool_calls[0].function.arguments
    assert response.status == "completed" and response.tool_choice.name == "get_weather"
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    deltas = [event.delta for event in events if event.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(deltas) == call.arguments
    assert required.status == "completed" and required.output
    for item in required.output:
        assert item.type == "function_call" and item.name in ("get_weather", "now") and json.loads(item.arguments) \
            is not None
    assert follow_up.output[0].type == "message"
    # required calls cut short are given as their text, which the stream carries as a message's
    [message] = cut_short.output
    assert message.type == "message" and cut_short.status == "incomplete" and message.content[0].text
    assert [event.type for event in cut_events][2:] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]
    assert cut_events[2].item.content == []
    assert cut_events[4].delta == cut_events[5].text == message.content[0].text == cut_events[-1].response.output_text


def test_concurrent_structured_requests_each_get_their_sequential_text(parts):
    """Requests with different expressions, run side by side over one engine, share the
    compiled automata and the cached allowed-token rows: each still gets exactly the text it
    gets alone."""
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL,
                      LimitsConfig(default_max_tokens=40, max_tokens=64, max_concurrent_requests=8))
    shapes = [{"guided_regex": "[a-f]{3,9}"}, {"guided_choice": ["alpha", "beta", "gamma delta"]},
              {"guided_json": SCHEMA}, {"guided_regex": "[0-9]{2}(-[0-9]{2}){1,3}"}]
    bodies = [{"prompt": PROMPT, "max_tokens": 40, "temperature": 0.9, "seed": seed, **shape}
              for seed in range(4) for shape in shapes]
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        alone = [http.post("/v1/completions", json=body).json()["choices"][0]["text"] for body in bodies]
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda body: http.post("/v1/completions", json=body).json(), bodies))
    assert [reply["choices"][0]["text"] for reply in together] == alone
    assert {reply["choices"][0]["finish_reason"] for reply in together} == {"stop"}
    assert all(text in ("alpha", "beta", "gamma delta") for text in alone[1::4])


def test_tokenize_refuses_the_tools_the_chat_endpoint_refuses(http):
    """/tokenize counts what a chat request reads: tools the chat endpoint refuses are refused
    with its message and param, not counted (nor refused by the template as the messages')."""
    messages = [{"role": "user", "content": "hi"}]
    for tools in ([5], [{"type": "function"}], [{"name": "f"}]):
        chat = http.post("/v1/chat/completions", json={"messages": messages, "tools": tools, "max_tokens": 1})
        counted = http.post("/tokenize", json={"messages": messages, "tools": tools})
        assert (counted.status_code, counted.json()["error"]) == (400, chat.json()["error"]), tools
        assert counted.json()["error"]["param"] == "tools" and "tools[0] must be" in counted.json()["error"]["message"]
    good = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    chat = http.post("/v1/chat/completions", json={"messages": messages, "tools": good, "tool_choice": "none",
                                                   "max_tokens": 1})
    counted = http.post("/tokenize", json={"messages": messages, "tools": good})
    assert counted.json()["count"] == chat.json()["usage"]["prompt_tokens"]
