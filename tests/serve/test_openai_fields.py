"""Request parameters of OpenAI's current API (as the installed SDK defines them) and vLLM's,
each honoured or refused with a 400 naming it, never silently ignored; a null for an optional
field means its default (found by a review of every parameter)."""

from __future__ import annotations

import pytest

from tests.serve.served import MODEL

MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(**fields) -> dict:
    return {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, "seed": 1, **fields}


def _completion(**fields) -> dict:
    return {"model": MODEL, "prompt": "hi", "max_tokens": 4, "seed": 1, **fields}


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
    ("/v1/chat/completions", {"max_tokens": None, "max_completion_tokens": 100000}, "max_completion_tokens"),
    ("/v1/chat/completions", {"stop_token_ids": [99999]}, "stop_token_ids"),
    ("/v1/completions", {"stop_token_ids": [1, 99999]}, "stop_token_ids"),
    ("/v1/responses", {"temperature": -1}, "temperature"),
])
def test_a_value_the_engine_refuses_gets_openais_param(http, path, fields, param):
    body = {"/v1/responses": _response, "/v1/chat/completions": _chat, "/v1/completions": _completion}[path](**fields)
    reply = http.post(path, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["message"].startswith(param), error


@pytest.mark.parametrize("keys", [("5", "05"), ("5", " 5"), ("5", "+5")])
def test_logit_bias_naming_one_token_twice_is_refused(http, keys):
    """JSON keys "5" and "05" both read as token 5: which bias was meant is not known, so the
    request is refused rather than one of them silently dropped."""
    reply = http.post("/v1/chat/completions", json=_chat(logit_bias={keys[0]: 10, keys[1]: -10}))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "logit_bias"
    assert error["message"] == f"logit_bias names token 5 twice ({keys[0]!r} and {keys[1]!r})"


# ---------------------------------------------------------------- vLLM's request fields


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_vllms_request_id_names_the_generation_unless_a_header_does(http, path):
    """vLLM's body `request_id` gives the response its id and X-Request-Id header; the
    X-Request-Id header, when sent, wins (as in vLLM)."""
    prefix = "chatcmpl" if path == "/v1/chat/completions" else "cmpl"
    body = (_chat if prefix == "chatcmpl" else _completion)(request_id="job-7")
    named = http.post(path, json=body)
    assert named.status_code == 200, named.text
    assert named.json()["id"] == f"{prefix}-job-7" and named.headers["x-request-id"] == "job-7"
    header = http.post(path, json=body, headers={"X-Request-Id": "trace-1"})
    assert header.json()["id"] == f"{prefix}-trace-1" and header.headers["x-request-id"] == "trace-1"


@pytest.mark.parametrize("request_id", ["", "a b", "x" * 257, "caf\u00e9"])
def test_an_unusable_request_id_is_refused(http, request_id):
    reply = http.post("/v1/chat/completions", json=_chat(request_id=request_id))
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == "request_id"
    assert "printable ASCII" in reply.json()["error"]["message"]


@pytest.mark.parametrize("fields", [{"priority": 0}, {"priority": None}, {"use_beam_search": False},
                                    {"length_penalty": 1.0}, {"spaces_between_special_tokens": False},
                                    {"spaces_between_special_tokens": True}])
def test_vllms_scheduling_fields_at_their_defaults_are_accepted(http, fields):
    plain = http.post("/v1/chat/completions", json=_chat())
    reply = http.post("/v1/chat/completions", json=_chat(**fields))
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == plain.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("fields, param", [({"priority": 1}, "priority"), ({"priority": -5}, "priority"),
                                           ({"use_beam_search": True}, "use_beam_search"),
                                           ({"length_penalty": 0.5}, "length_penalty")])
def test_vllms_scheduling_fields_asking_for_what_is_not_done_are_refused(http, fields, param):
    reply = http.post("/v1/completions", json=_completion(**fields))
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


# ---------------------------------------------------------------- an assistant's message given back


def _conversation(assistant: dict) -> list[dict]:
    return [{"role": "user", "content": "tell me a secret"}, {"role": "assistant", **assistant},
            {"role": "user", "content": "then a joke"}]


def test_an_assistants_refusal_given_back_is_its_turn_in_the_conversation(http):
    """OpenAI's assistant message with `refusal` (content null): what the assistant said, as if
    it were content — not a turn silently emptied."""
    said = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": "I cannot say."})))
    refused = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": None,
                                                                                    "refusal": "I cannot say."})))
    emptied = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": ""})))
    assert refused.status_code == 200, refused.text
    assert refused.json()["usage"]["prompt_tokens"] == said.json()["usage"]["prompt_tokens"] \
        > emptied.json()["usage"]["prompt_tokens"]
    assert refused.json()["choices"][0]["message"]["content"] == said.json()["choices"][0]["message"]["content"]
    echoed = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": "hi", "refusal": None})))
    assert echoed.status_code == 200, echoed.text  # the SDK's messages carry refusal: null
    # OpenAI's assistant content parts: text, or a refusal's (vLLM reads its text too)
    parts = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": [
        {"type": "refusal", "refusal": "I cannot say."}]})))
    assert parts.status_code == 200, parts.text
    assert parts.json()["usage"]["prompt_tokens"] == said.json()["usage"]["prompt_tokens"]
    item = {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot say."}]}
    answer = http.post("/v1/responses", json={"input": [*_conversation({"content": "x"})[:1], item,
                                                        {"role": "user", "content": "then a joke"}],
                                              "max_output_tokens": 2})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["input_tokens"] == said.json()["usage"]["prompt_tokens"]


def test_a_chat_reads_the_responses_text_parts_as_vllm_does(http):
    """vLLM's chat endpoint reads `input_text` and `output_text` parts (the Responses API's) as
    text parts, so a conversation kept in Responses' shapes can be sent to it; they were refused
    as not text.  An image part is still refused."""
    plain = http.post("/v1/chat/completions", json=_chat(messages=_conversation({"content": "I cannot say."})))
    for user_kind, assistant_kind in (("input_text", "output_text"), ("text", "input_text")):
        messages = [{"role": "user", "content": [{"type": user_kind, "text": "tell me a secret"}]},
                    {"role": "assistant", "content": [{"type": assistant_kind, "text": "I cannot say."}]},
                    {"role": "user", "content": "then a joke"}]
        parts = http.post("/v1/chat/completions", json=_chat(messages=messages))
        assert parts.status_code == 200, parts.text
        assert parts.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]
        assert parts.json()["choices"][0]["message"]["content"] == plain.json()["choices"][0]["message"]["content"]
    image = http.post("/v1/chat/completions", json=_chat(messages=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]))
    assert image.status_code == 400 and "only text content is supported" in image.json()["error"]["message"]


@pytest.mark.parametrize("message, words", [
    ({"role": "assistant", "content": "yes", "refusal": "no"}, "content or a refusal, not both"),
    ({"role": "user", "content": "x", "refusal": "no"}, "a refusal is an assistant message's"),
    ({"role": "assistant", "content": None, "audio": {"id": "audio_abc"}}, "audio is not supported"),
])
def test_a_message_field_that_cannot_be_honoured_is_refused(http, message, words):
    reply = http.post("/v1/chat/completions", json=_chat(messages=[{"role": "user", "content": "hi"}, message,
                                                                   {"role": "user", "content": "and?"}]))
    assert reply.status_code == 400, reply.text
    assert words in reply.json()["error"]["message"] and reply.json()["error"]["param"] == "messages"


def test_an_expression_too_large_to_compile_in_time_is_a_400_naming_its_field_and_the_service_serves_on(http,
                                                                                                        with_eos,
                                                                                                        monkeypatch):
    from rayspec.engine import structured

    monkeypatch.setattr(structured, "COMPILE_SECONDS", 1.0)
    reply = http.post("/v1/completions", json=_completion(guided_regex="[ab]*a[ab]{22}"))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "guided_regex" and "did not compile within 1 s" in error["message"]
    assert http.post("/v1/completions", json=_completion()).status_code == 200


@pytest.mark.parametrize("path, body", [("/v1/chat/completions", _chat()), ("/v1/completions", _completion())])
@pytest.mark.parametrize("stream", [False, True])
def test_an_expression_that_does_not_compile_is_a_400_naming_its_field(http, with_eos, path, body, stream):
    reply = http.post(path, json={**body, "guided_regex": "(((", "stream": stream})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert "the regular expression '(((' cannot be used" in error["message"] and error["param"] == "guided_regex"


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", _completion(guided_regex="(gnu|emu)+ [0-9]{2}")),
    ("/v1/chat/completions", _chat(guided_regex="(yak|gnu)+ [0-9]{2}", stream=True)),
    ("/v1/responses", _response(text={"format": {"type": "json_schema", "name": "bird", "schema": {
        "type": "object", "properties": {"wren": {"type": "boolean"}}, "required": ["wren"]}}})),
])
def test_an_expression_waiting_too_long_for_a_compiler_is_a_429_and_compiles_once_one_is_free(http, with_eos,
                                                                                              monkeypatch, path, body):
    """Every compiler busy is the service's capacity (429, as OpenAI's rate limits), not a bad
    request; the same request succeeds once a compiler is free."""
    import threading

    from rayspec.engine import structured

    compilers = threading.BoundedSemaphore(1)
    monkeypatch.setattr(structured, "_COMPILERS", compilers)
    monkeypatch.setattr(structured, "MAX_COMPILERS", 1)
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 0.5)
    compilers.acquire()
    reply = http.post(path, json=body)
    assert reply.status_code == 429, reply.text
    error = reply.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "too_many_requests"
    assert "waited 0.5 s for one of the 1 compilers" in error["message"] and "ask again later" in error["message"]
    compilers.release()
    served = http.post(path, json=body)
    assert served.status_code == 200, served.text


@pytest.mark.parametrize("fields, words", [
    ({"ignore_eos": True}, "ignore_eos cannot be combined with structured output"),
    ({}, "structured output ends the completion at the model's EOS token, and this target declares none"),
])
def test_a_structured_output_that_could_never_end_is_refused_before_its_expression_is_compiled(http, monkeypatch,
                                                                                              fields, words):
    """Refused at once, not after a compilation that can take up to COMPILE_SECONDS."""
    from rayspec.engine import structured

    compiled = []
    monkeypatch.setattr(structured, "_compile", lambda regex, vocabulary: compiled.append(regex))
    reply = http.post("/v1/completions", json=_completion(guided_regex="[ab]*a[ab]{22}", **fields))
    assert reply.status_code == 400, reply.text
    assert words in reply.json()["error"]["message"] and reply.json()["error"]["param"] == "guided_regex"
    assert compiled == []


_NEVER_ENDING = {"type": "object", "properties": {"never_ends": {"type": "boolean"}}, "required": ["never_ends"]}


_NEVER_ENDING_BODIES = [
    ("/v1/completions", _completion(guided_json=_NEVER_ENDING), "guided_json"),
    ("/v1/chat/completions", _chat(response_format={"type": "json_schema", "json_schema": {
        "name": "never", "schema": _NEVER_ENDING}}), "response_format"),
    ("/v1/responses", _response(text={"format": {"type": "json_schema", "name": "never", "schema": _NEVER_ENDING}}),
     "text"),
]
_IGNORING_EOS = ({"ignore_eos": True}, "ignore_eos cannot be combined with structured output")
_DECLARING_NO_EOS = ({}, "structured output ends the completion at the model's EOS token, and this target "
                         "declares none")


@pytest.mark.parametrize("path, body, param, fields, words", [
    *[(*case, *_IGNORING_EOS) for case in _NEVER_ENDING_BODIES if case[0] != "/v1/responses"],  # it has no ignore_eos
    *[(*case, *_DECLARING_NO_EOS) for case in _NEVER_ENDING_BODIES],
])
def test_a_json_schema_that_could_never_end_is_refused_before_its_expression_is_built(http, monkeypatch, path, body,
                                                                                     param, fields, words):
    """Its expression is built in a compiler process, which can take COMPILE_SECONDS: a request
    refused anyway does not wait for it."""
    from rayspec.engine import structured

    built = []
    monkeypatch.setattr(structured, "_in_compiler", lambda job, *args: built.append(job) or "a")
    monkeypatch.setattr(structured, "_schema_regex", structured._build_schema_regex)  # uncached: each is built
    reply = http.post(path, json={**body, **fields})
    assert reply.status_code == 400, reply.text
    assert words in reply.json()["error"]["message"] and reply.json()["error"]["param"] == param
    assert built == []


def test_a_schema_of_a_kilobyte_whose_expression_would_take_gigabytes_is_a_400_and_the_service_serves_on(http,
                                                                                                         with_eos):
    """Built in this process, its expression (doubling with each level of nested arrays) made
    outlines-core abort the server."""
    schema = {"type": "string"}
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    reply = http.post("/v1/chat/completions", json=_chat(
        response_format={"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "response_format" and "its expression is too large" in error["message"]
    assert http.post("/v1/chat/completions", json=_chat()).status_code == 200


def test_the_demo_tokenizer_spaces_special_tokens_alike_either_way():
    """Why `spaces_between_special_tokens` is accepted and not acted on: only a slow tokenizer
    reads it, and transformers 5 loads a fast one, whose text is the same either way."""
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    ids = tokenizer.encode("a b") + [tokenizer.eos_token_id] * 2 + tokenizer.encode("c")
    spaced = tokenizer.decode(ids, spaces_between_special_tokens=True)
    assert tokenizer.eos_token * 2 in spaced
    assert tokenizer.decode(ids, spaces_between_special_tokens=False) == spaced
