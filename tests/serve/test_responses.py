"""OpenAI's Responses API (`POST /v1/responses`) on a real uvicorn server over the in-process
engine, exercised with the official `openai` client and httpx: the same seed gives the chat
endpoint's text for the same conversation, streamed as OpenAI's typed events; what a
stateless text service cannot do is refused with a 400 naming the field."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import ResponseErrorEvent, ResponseFailedEvent

from rayspec.rpc.remote import RemoteError
from tests.serve.served import MODEL, chat_prompt, eventually, expected

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a loop."}]
STREAM_TYPES = ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added"]


def test_a_response_is_the_chat_completion_of_the_same_conversation(client, parts, reference):
    tokenizer = parts[2]
    tokens, text, stats = expected(reference, tokenizer, chat_prompt(tokenizer, MESSAGES), max_new_tokens=12,
                                   temperature=0.8, seed=3)
    response = client.responses.create(model=MODEL, instructions="Be brief.", input="Write a loop.",
                                       max_output_tokens=12, temperature=0.8, extra_body={"seed": 3})
    assert response.output_text == text and response.object == "response" and response.id.startswith("resp_")
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [item] = response.output
    assert (item.type, item.role, item.status, [p.type for p in item.content]) == (
        "message", "assistant", "incomplete", ["output_text"])
    prompt_tokens = len(tokenizer.encode(chat_prompt(tokenizer, MESSAGES), add_special_tokens=False))
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (prompt_tokens, 12, prompt_tokens + 12)
    assert response.store is False and response.rayspec["seed"] == 3 and response.rayspec["steps"] == len(stats.steps)

    # input as messages, text parts and an earlier assistant turn included: the chat endpoint's text
    conversation = [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]},
                    {"role": "assistant", "content": "hello"}, {"role": "user", "content": "Write a loop."}]
    chat = client.chat.completions.create(model=MODEL, messages=conversation, max_tokens=10, seed=8)
    items = [{"role": "user", "content": [{"type": "input_text", "text": "h"}, {"type": "input_text", "text": "i"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
             {"role": "user", "content": "Write a loop."}]
    answer = client.responses.create(model=MODEL, input=items, max_output_tokens=10, extra_body={"seed": 8})
    assert answer.output_text == chat.choices[0].message.content

    # a stop string ends it: completed, as OpenAI says of a response the model finished
    stop = text[len(text) // 2:][:3]
    stopped = client.responses.create(model=MODEL, instructions="Be brief.", input="Write a loop.",
                                      max_output_tokens=12, temperature=0.8, extra_body={"seed": 3, "stop": stop})
    assert stopped.status == "completed" and stopped.incomplete_details is None
    assert stopped.output_text == text[:text.index(stop)] and stopped.output[0].status == "completed"


def test_a_streamed_response_is_openais_event_sequence(client, http):
    kwargs = dict(model=MODEL, instructions="Be brief.", input="Write a loop.", max_output_tokens=16,
                  temperature=0.8, extra_body={"seed": 5})
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types == STREAM_TYPES + ["response.output_text.delta"] * len(deltas) + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]
    assert len(deltas) > 1 and "".join(e.delta for e in deltas) == whole.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[-4].text == whole.output_text and events[-2].item.content[0].text == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage == whole.usage and final.id == events[0].response.id
    assert len({e.item_id for e in deltas} | {events[2].item.id}) == 1

    with http.stream("POST", "/v1/responses", json={"input": "hi", "max_output_tokens": 4, "stream": True}) as reply:
        body = reply.read().decode()
    assert reply.headers["content-type"].startswith("text/event-stream")
    for event in body[:-2].split("\n\n"):  # each: an event line naming the data's type, then the data
        kind, data = event.split("\n")
        assert kind.startswith("event: ") and json.loads(data.removeprefix("data: "))["type"] == kind[len("event: "):]


@pytest.mark.parametrize("body, message, param", [
    ({"input": "hi", "previous_response_id": "resp_1"}, "responses are not stored", "previous_response_id"),
    ({"input": "hi", "conversation": "conv_1"}, "conversations are not stored", "conversation"),
    ({"input": "hi", "background": True}, "foreground only", "background"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice needs tools", "tool_choice"),
    ({"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
     "tools[0]: only function tools are supported, not 'web_search'", "tools"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required", "max_tool_calls": 2},
     "max_tool_calls: not supported", "max_tool_calls"),
    ({"input": "hi", "reasoning": {"effort": "high"}}, "reasoning options", "reasoning"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, 'text.format must be {"type": "text"}', "text"),
    ({"input": "hi", "include": ["message.output_text.logprobs"]}, "no extra output", "include"),
    ({"input": "hi", "top_logprobs": 2}, "top_logprobs", "top_logprobs"),
    ({"input": "hi", "truncation": "auto"}, 'only "disabled"', "truncation"),
    ({"input": []}, "input must be a string or a non-empty list of messages", "input"),
    ({"input": 5}, "input must be a string or a non-empty list of messages", "input"),
    ({}, "input: Field required", "input"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": 5}]},
     "input[0]: a function_call_output item needs call_id and output as strings", "input"),
    ({"input": [{"type": "reasoning", "summary": []}]},
     "input[0]: only messages, function_call and function_call_output items are supported as input, not "
     "'reasoning'", "input"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role must be one of", "input"),
    # the Responses API's tools are flat: the message names their fields as the request wrote them
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]},
     "tools[1].name must be a non-empty string, different from the other tools'", "tools"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": []}]},
     "tools[0].parameters must be a JSON schema object", "tools"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function"}},
     'tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}', "tool_choice"),
    ({"input": [{"type": ["message"], "role": "user", "content": "hi"}]},
     "input[0]: only messages, function_call and function_call_output items are supported as input, not ['message']",
     "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content must be a string or a list of input_text parts", "input"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens: Input should be greater than or equal to 1",
     "max_output_tokens"),
    ({"input": "hi", "max_output_tokens": 100000}, "max_output_tokens must be at most 256", "max_output_tokens"),
    ({"input": "hi", "temperature": -1}, "temperature must be >= 0", "temperature"),
    ({"input": "hi", "rayspec": {"verifier": "nope"}}, "unknown verifier 'nope'", "rayspec.verifier"),
    ({"input": "hi", "rayspec": {"tree": "kary:9"}}, "tree spec", "rayspec.tree"),
    ({"input": "hi", "frobnicate": 1}, "unrecognized request argument: frobnicate", "frobnicate"),
    ({"input": "word " * 7000}, "far more than 512 tokens can hold", None),
])
def test_bad_input_gets_a_400_naming_the_field(http, body, message, param):
    _assert_refused(http, body, message, param)


@pytest.mark.parametrize("body, where, param", [
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "a\ud800"}]}, "input[0].output", "input"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "a\ud800"}]},
     "input[0].arguments", "input"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "a\ud800", "arguments": "{}"}]}, "input[0].name",
     "input"),
    ({"input": "hi", "instructions": "a\ud800"}, "instructions", "instructions"),
])
def test_text_that_is_not_unicode_is_refused_naming_its_field(http, body, where, param):
    """JSON's escapes can spell a lone surrogate, which no tokenizer takes: a 400 naming the
    field that holds it, not the prompt rendered from it."""
    reply = http.post("/v1/responses", content=json.dumps(body), headers={"Content-Type": "application/json"})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == param, error
    assert error["message"] == f"{where} is not valid Unicode text: it holds a lone surrogate (U+D800) at character 1"


@pytest.mark.parametrize("body, message, param", [
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "n", "schema": {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 0}}}}}},
     "text.format: json_schema uses properties.n.minimum", "text"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "number", "minimum": 0}}}}], "tool_choice": "required"},
     "tools: json_schema uses", "tools"),
])
def test_a_bad_schema_gets_a_400_naming_its_field(http, with_eos, body, message, param):
    """Asked of a target declaring an EOS: the tiny one declares none, and every structured
    output is refused for that first."""
    _assert_refused(http, body, message, param)


def _assert_refused(http, body, message, param):
    for stream in (False, True):
        reply = http.post("/v1/responses", json={**body, "stream": stream})
        error = reply.json()["error"]
        assert reply.status_code == 400 and message in error["message"] and error["param"] == param, error
    assert http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2}).status_code == 200


def test_unknown_models_are_404_and_a_failure_mid_stream_is_an_error_event_then_response_failed(http, server):
    reply = http.post("/v1/responses", json={"input": "hi", "model": "gpt-4"})
    assert reply.status_code == 404 and reply.json()["error"]["param"] == "model"
    target = server["target"]
    target.fail = (0, RemoteError("UNAVAILABLE: connection refused"))
    assert http.post("/v1/responses", json={"input": "hi", "stream": True}).status_code == 503
    target.fail = (target.steps + 2, RemoteError("UNAVAILABLE: connection reset"))
    with http.stream("POST", "/v1/responses", json={"input": "hi", "max_output_tokens": 100, "seed": 1,
                                                    "stream": True}) as reply:
        assert reply.status_code == 200
        error, last = (json.loads(event.split("\n")[1].removeprefix("data: "))
                       for event in reply.read().decode()[:-2].split("\n\n")[-2:])
    assert error["type"] == "error" and "connection reset" in error["message"]
    assert error["code"] == "service_unavailable"
    assert last["type"] == "response.failed" and last["sequence_number"] == error["sequence_number"] + 1
    failed = last["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["error"]["message"] == error["message"] and failed["id"].startswith("resp_")
    # as the openai SDK's types have them, checked field by field
    assert ResponseErrorEvent.model_validate(error).message == error["message"]
    assert ResponseFailedEvent.model_validate(last).response.error.code == "server_error"
    eventually(lambda: target.open_sessions == 0, what="sessions released")
    target.fail = None
    assert http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2}).status_code == 200


def test_a_turn_of_calls_sent_back_reads_as_the_chat_endpoints_one_assistant_message(http):
    """An answer's items sent back as input (text, then parallel calls) are one assistant turn:
    the prompt the chat endpoint and /tokenize count for the same conversation."""
    function = {"name": "f", "parameters": {"type": "object", "properties": {}}}
    items = [{"role": "user", "content": "go"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "1"},
             {"type": "function_call_output", "call_id": "c2", "output": "2"}]
    calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in ("c1", "c2")]
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "Sure.", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
                {"role": "tool", "tool_call_id": "c2", "content": "2"}]
    tools = [{"type": "function", "function": function}]
    answer = http.post("/v1/responses", json={"input": items, "tools": [{"type": "function", **function}],
                                              "tool_choice": "none", "max_output_tokens": 4, "seed": 1}).json()
    chat = http.post("/v1/chat/completions", json={"messages": messages, "tools": tools, "tool_choice": "none",
                                                   "max_tokens": 4, "seed": 1}).json()
    counted = http.post("/tokenize", json={"messages": messages, "tools": tools}).json()["count"]
    assert answer["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] == counted
    assert answer["output"][0]["content"][0]["text"] == chat["choices"][0]["message"]["content"]


def test_streamed_required_calls_open_empty_and_carry_their_arguments_as_deltas(client, with_eos):
    """As OpenAI streams a function call, and as an auto answer's calls stream here: each
    function_call item is added with empty arguments, which its argument deltas then fill,
    so a client that joins the deltas has each call's arguments."""
    tools = [{"type": "function", "name": "now", "parameters": None, "strict": None},
             {"type": "function", "name": "pick", "parameters": {
                 "type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"]}}]
    events = list(client.responses.create(model=MODEL, input="hi", tools=tools, tool_choice="required",
                                          max_output_tokens=64, stream=True, extra_body={"seed": 1}))
    final = events[-1].response
    assert events[-1].type == "response.completed" and final.output
    for index, call in enumerate(final.output):
        added = [e for e in events if e.type == "response.output_item.added" and e.output_index == index]
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"
                  and e.output_index == index]
        assert call.type == "function_call" and added[0].item.arguments == ""
        assert "".join(deltas) == call.arguments and json.loads(call.arguments) is not None
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_tool_choice_auto_without_tools_is_a_text_answer(http):
    """The Responses API's default tool_choice is "auto", tools or not (vLLM's and OpenAI's
    alike): sent without tools, it asks for nothing, and the answer is text."""
    for tools in ({}, {"tools": []}):
        reply = http.post("/v1/responses", json={"input": "hi", "tool_choice": "auto", "max_output_tokens": 2,
                                                 **tools})
        answer = reply.json()
        assert reply.status_code == 200, answer
        assert [item["type"] for item in answer["output"]] == ["message"] and answer["tool_choice"] == "auto"


def test_a_function_calls_output_may_be_text_parts(http):
    """OpenAI's function_call_output takes its output as text or as a list of content parts:
    text parts are the tool's text, a line each, as a message's parts are; an image is refused."""
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    parts = [{"type": "input_text", "text": "18"}, {"type": "input_text", "text": "degrees"}]
    answer = http.post("/v1/responses", json={"max_output_tokens": 2, "input": [
        {"role": "user", "content": "go"}, call, {"type": "function_call_output", "call_id": "c1", "output": parts}]})
    assert answer.status_code == 200, answer.json()
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18\ndegrees"}]
    assert answer.json()["usage"]["input_tokens"] == http.post("/tokenize", json={"messages": messages}).json()["count"]
    image = [{"type": "input_image", "image_url": "https://example.com/a.png"}]
    refused = http.post("/v1/responses", json={"input": [call, {"type": "function_call_output", "call_id": "c1",
                                                                "output": image}]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "input"
    assert "output as a list of input_text parts" in refused.json()["error"]["message"]


def test_a_conversation_the_chat_template_refuses_is_a_400_naming_input(http, server, monkeypatch):
    """The chat endpoint names `messages` for what its template refuses; the Responses API has
    no such field, and names `input`, where the conversation is."""
    monkeypatch.setattr(server["service"].tokenizer, "chat_template", "{{ raise_exception('no tools here') }}")
    for stream in (False, True):
        reply = http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 2, "stream": stream})
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["param"] == "input", error
        assert error["message"] == "the model's chat template refused these messages: no tools here"
