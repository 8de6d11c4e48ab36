"""The official `openai` client's helpers over the service, used as against OpenAI: the chat
stream helper (`client.chat.completions.stream`) and its typed events, and the Responses
API's usage as the client's types describe it.  The tiny target is given an EOS token, so
that constrained replies (tool calls, JSON) end before max_tokens."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.serve.config import LimitsConfig
from rayspec.serve.http import create_app
from rayspec.serve.service import Service
from tests.loopback import ServerThread
from tests.serve.served import MODEL, SETTING


class GetWeather(BaseModel):
    city: Literal["Paris", "Rome"]


class Now(BaseModel):
    pass


TOOLS = [openai.pydantic_function_tool(GetWeather, name="get_weather"), openai.pydantic_function_tool(Now, name="now")]
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
# what a model answering in the demo template's tool syntax (json) writes, forced: the tiny pair has none of its own
JSON_CALL = r'\[\{"name": "get_weather", "arguments": \{"city": "(Paris|Rome)"\}\}\]'


@pytest.fixture(scope="module")
def client(parts):
    target, drafter, tokenizer = parts
    local_target = LocalTarget(target, tokenizer)
    local_target.eos_token_ids = (tokenizer.eos_token_id,)  # the tiny target declares none: a match ends there
    engine = SpeculativeEngine(local_target, LocalDrafter(drafter, tokenizer), tokenizer=tokenizer, **SETTING)
    service = Service(engine, tokenizer, MODEL, LimitsConfig(default_max_tokens=64, max_tokens=200))
    assert service.tool_parser.name == "json"
    with ServerThread(create_app(service)) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("how", [
    dict(tool_choice="required", parallel_tool_calls=False, max_tokens=200),
    dict(tool_choice="auto", max_tokens=100, extra_body={"guided_regex": JSON_CALL}),
])
def test_the_chat_stream_helper_closes_each_call(client, how):
    """The stream helper fires `tool_calls.function.arguments.done` (with the call's parsed
    arguments) when the choice's finish_reason arrives after the call's deltas, as OpenAI sends
    it: in a chunk of its own.  A finish_reason in the same chunk as a call's delta leaves the
    call never closed (openai/lib/streaming/chat/_completions.py, ChoiceEventState)."""
    with client.chat.completions.stream(model=MODEL, messages=MESSAGES, tools=TOOLS, seed=1, **how) as stream:
        done = [event for event in stream if event.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    assert isinstance(call.function.parsed_arguments, (GetWeather, Now))
    assert [(event.index, event.name, event.parsed_arguments) for event in done] == [
        (0, call.function.name, call.function.parsed_arguments)]


def test_the_chat_stream_ends_a_call_with_a_finish_chunk_of_its_own(client):
    """Raw chunks: the last chunk with a choice has an empty delta and the finish reason."""
    chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, seed=1, max_tokens=200,
                                                 tool_choice="required", parallel_tool_calls=False, stream=True))
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    assert [c.finish_reason for c in choices[:-1]] == [None] * (len(choices) - 1)
    assert choices[-1].finish_reason == "tool_calls" and not choices[-1].delta.tool_calls
    assert [call.index for c in choices for call in c.delta.tool_calls or []] == [0]


def test_responses_usage_has_the_fields_the_client_types_require(client):
    """openai.types.responses.ResponseUsage: input_tokens_details.cache_write_tokens is a
    required int (the client fills a missing field with None, silently)."""
    raw = client.responses.with_raw_response.create(model=MODEL, input="hi", max_output_tokens=4)
    openai.types.responses.Response.model_validate(json.loads(raw.text))  # strict: every required field, typed
    assert isinstance(raw.parse().usage.input_tokens_details.cache_write_tokens, int)
    with client.responses.stream(model=MODEL, input="hi", max_output_tokens=4) as stream:
        [last] = [event for event in stream if event.type in ("response.completed", "response.incomplete")]
    assert isinstance(last.response.usage.input_tokens_details.cache_write_tokens, int)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_streamed_forced_call_has_no_content_as_the_unstreamed_one(client, choice):
    """A reply that is calls (a named or required tool_choice) has content null, streamed or
    not: OpenAI's stream opens it with `"content": null`, and the stream helper's final
    completion is then the unstreamed one (no `content.delta` of "" either)."""
    how = dict(model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=choice, seed=1, max_tokens=200,
               parallel_tool_calls=False)
    unstreamed = client.chat.completions.parse(**how).choices[0].message
    with client.chat.completions.stream(**how) as stream:
        kinds = {event.type for event in stream}
        streamed = stream.get_final_completion().choices[0].message
    assert unstreamed.content is None and unstreamed.tool_calls
    assert streamed.content is None and "content.delta" not in kinds
    assert [(c.function.name, c.function.parsed_arguments) for c in streamed.tool_calls] == [
        (c.function.name, c.function.parsed_arguments) for c in unstreamed.tool_calls]
