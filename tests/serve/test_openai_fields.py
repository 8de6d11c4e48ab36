"""Request parameters of OpenAI's current API (as the installed SDK defines them) and vLLM's,
each honoured or refused with a 400 naming it, never silently ignored; a null for an optional
field means its default (found by a review of every parameter)."""

from __future__ import annotations

import pytest

from tests.serve.served import MODEL

MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(**fields) -> dict:
    return {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "seed": 1, **fields}


def _response(**fields) -> dict:
    return {"model": MODEL, "input": "hi", "max_output_tokens": 4, "seed": 1, **fields}


# ---------------------------------------------------------------- chat: OpenAI's optional fields


@pytest.mark.parametrize("fields", [
    {"audio": None}, {"modalities": None}, {"modalities": ["text"]}, {"reasoning_effort": None},
    {"verbosity": None}, {"verbosity": "medium"}, {"moderation": None}, {"prompt_cache_retention": None},
    {"prompt_cache_retention": "24h"}, {"prompt_cache_options": {"mode": "implicit", "ttl": "30m"}},
    {"web_search_options": None},
])
def test_a_chat_field_at_its_default_or_only_about_caching_is_accepted(http, fields):
    """OpenAI accepts null for these optional fields (meaning their default); `modalities:
    ["text"]` and `verbosity: "medium"` are the defaults; the prompt cache's retention and
    options change no answer (as prompt_cache_key, which is accepted)."""
    plain = http.post("/v1/chat/completions", json=_chat())
    reply = http.post("/v1/chat/completions", json=_chat(**fields))
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == plain.json()["choices"][0]["message"]["content"]


def test_the_openai_client_passing_none_for_reasoning_effort_and_verbosity_gets_an_answer(client):
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, seed=1,
                                           reasoning_effort=None, verbosity=None, audio=None, modalities=None)
    assert reply.choices[0].message.content is not None


@pytest.mark.parametrize("fields, param", [
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"verbosity": "low"}, "verbosity"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
    ({"prompt_cache_retention": "forever"}, "prompt_cache_retention"),
])
def test_a_chat_field_asking_for_what_is_not_done_is_refused_naming_it(http, fields, param):
    reply = http.post("/v1/chat/completions", json=_chat(**fields))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and param in error["message"]


def test_a_legacy_function_call_in_an_assistant_message_is_not_dropped_from_the_prompt(http):
    """An earlier assistant turn's `function_call` (OpenAI's deprecated form of tool_calls) is
    part of the conversation: dropping it silently renders another prompt."""
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}]
    reply = http.post("/v1/chat/completions", json=_chat(messages=messages))
    assert reply.status_code == 400, reply.text
    assert "function_call" in reply.json()["error"]["message"] and reply.json()["error"]["param"] == "messages"


def test_an_empty_allowed_token_ids_is_refused_not_read_as_no_restriction(http):
    """vLLM refuses it ("allowed_token_ids is not None and empty!"): no token may follow."""
    reply = http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 4,
                                               "allowed_token_ids": []})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "allowed_token_ids"


# ---------------------------------------------------------------- responses


@pytest.mark.parametrize("fields", [
    {"stream_options": None}, {"prompt_cache_retention": None}, {"prompt_cache_retention": "24h"},
    {"prompt_cache_options": {"mode": "implicit"}}, {"context_management": None}, {"moderation": None},
    {"text": {"verbosity": None}}, {"text": {"verbosity": "medium", "format": {"type": "text"}}},
])
def test_a_responses_field_at_its_default_or_only_about_caching_is_accepted(http, fields):
    plain = http.post("/v1/responses", json=_response())
    reply = http.post("/v1/responses", json=_response(**fields))
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][0]["content"] == plain.json()["output"][0]["content"]


def test_a_streamed_response_takes_openais_stream_options(client):
    """The SDK's `stream_options: {include_obfuscation}` (padding against side channels, which
    changes no text) on a streamed response."""
    events = list(client.responses.create(model=MODEL, input="hi", max_output_tokens=4, stream=True,
                                          stream_options={"include_obfuscation": False}, extra_body={"seed": 1}))
    assert events[-1].type in ("response.completed", "response.incomplete")


@pytest.mark.parametrize("fields, param", [
    ({"text": {"verbosity": "low"}}, "text"),  # would change the answer: refused, as chat's verbosity
    ({"text": {"verbosity": "high"}}, "text"),
    ({"text": {"fromat": {"type": "json_object"}}}, "text"),  # a misspelt key is not ignored
    ({"stream_options": {"include_obfuscation": True}}, "stream_options"),  # without stream, as chat's
    ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
])
def test_a_responses_field_asking_for_what_is_not_done_is_refused_naming_it(http, fields, param):
    reply = http.post("/v1/responses", json=_response(**fields))
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


# ---------------------------------------------------------------- errors name their field


@pytest.mark.parametrize("path, fields, param", [
    ("/v1/chat/completions", {"temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"top_p": 0}, "top_p"),
    ("/v1/chat/completions", {"logit_bias": {"5": 101}}, "logit_bias"),
    ("/v1/chat/completions", {"top_k": -2}, "top_k"),
    ("/v1/chat/completions", {"max_tokens": 100000}, "max_tokens"),
    ("/v1/chat/completions", {"allowed_token_ids": [99999]}, "allowed_token_ids"),
    ("/v1/chat/completions", {"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ("/v1/responses", {"temperature": -1}, "temperature"),
])
def test_a_value_the_engine_refuses_gets_openais_param(http, path, fields, param):
    body = _response(**fields) if path == "/v1/responses" else _chat(**fields)
    reply = http.post(path, json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.json()
