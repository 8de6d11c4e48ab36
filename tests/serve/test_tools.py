"""Function calling's pieces: what tool_choice asks for, the schema the reply follows, and the
calls read back from its text."""

from __future__ import annotations

import json
import re

import pytest

from rayspec.serve.tools import NO_PARAMETERS, ToolCalling, ToolError

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
CLOCK = {"type": "function", "function": {"name": "now"}}


def test_tool_choice_picks_the_calling_or_text():
    assert ToolCalling.of(None, None, None) is None and ToolCalling.of([SEARCH], "none", None) is None
    named = ToolCalling.of([SEARCH, CLOCK], {"type": "function", "function": {"name": "now"}}, None)
    assert (named.mode, named.function, named.functions["now"]) == ("named", "now", NO_PARAMETERS)
    assert named.structured_output().json_schema == NO_PARAMETERS
    required = ToolCalling.of([SEARCH, CLOCK], "required", False)
    schema = required.structured_output().json_schema
    assert schema["type"] == "array" and (schema["minItems"], schema["maxItems"]) == (1, 1)
    assert [option["properties"]["name"] for option in schema["items"]["anyOf"]] == [{"const": "search"},
                                                                                      {"const": "now"}]
    assert "maxItems" not in ToolCalling.of([SEARCH], "required", None).structured_output().json_schema


@pytest.mark.parametrize("tools, choice, message, field", [
    ([SEARCH], "auto", 'tool_choice "auto" (the default when tools are given) needs a parser', "tool_choice"),
    ([SEARCH], None, 'tool_choice "auto"', "tool_choice"),
    (None, "required", "tool_choice needs tools", "tool_choice"),
    ([SEARCH, SEARCH], "required", "tools[1].function.name must be a non-empty string, different", "tools"),
    ([{"type": "retrieval"}], "required", "tools[0] must be", "tools"),
    ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], "required",
     "tools[0].function.parameters must be a JSON schema object", "tools"),
    ([SEARCH], {"type": "function", "function": {"name": "now"}}, "which tools do not define", "tool_choice"),
    ([SEARCH], "sometimes", 'tool_choice must be "none", "auto", "required"', "tool_choice"),
])
def test_bad_tools_and_choices_are_refused_naming_the_field(tools, choice, message, field):
    with pytest.raises(ToolError, match=re.escape(message)) as refused:
        ToolCalling.of(tools, choice, None)
    assert refused.value.field == field


def test_calls_are_read_back_from_the_text():
    named = ToolCalling.of([SEARCH], {"type": "function", "function": {"name": "search"}}, None)
    [call] = named.calls('{"query": "rayspec"}')
    assert call["function"] == {"name": "search", "arguments": '{"query": "rayspec"}'} and call["type"] == "function"
    assert named.finish_reason("stop") == "stop" and named.finish_reason("length") == "length"
    required = ToolCalling.of([SEARCH, CLOCK], "required", None)
    calls = required.calls('[{"name": "now", "parameters": {}}, {"name": "search", "parameters": {"query": "é"}}]')
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("now", {}), ("search", {"query": "é"})]
    assert len({c["id"] for c in calls}) == 2
    assert required.calls('[{"name": "now", "param') is None  # cut by max_tokens: no calls to give
    assert required.finish_reason("stop") == "tool_calls"
