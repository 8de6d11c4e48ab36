"""Function calling's pieces: what tool_choice asks for, the schema the reply follows, and the
calls read back from its text."""

from __future__ import annotations

import json
import re

import pytest

from rayspec.engine.structured import StructuredOutput, structured_regex
from rayspec.serve.tool_parsers import HermesParser, MistralParser
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


def test_a_function_whose_parameters_are_null_takes_none():
    """OpenAI's Responses function tools always carry `parameters`, null for a function that
    takes none (as the openai SDK types them), and vLLM's chat tools take null as well."""
    bare = {"type": "function", "function": {"name": "now", "parameters": None}}
    assert ToolCalling.of([bare], "required", None).functions == {"now": NO_PARAMETERS}
    named = ToolCalling.of([SEARCH, bare], {"type": "function", "function": {"name": "now"}}, None)
    assert named.structured_output().json_schema == NO_PARAMETERS


def _weather(unit_definition: dict) -> dict:
    """A tool as pydantic writes a nested model's schema: a reference into its own $defs."""
    return {"type": "function", "function": {"name": f"weather_{len(unit_definition['enum'])}", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}},
        "required": ["city", "unit"], "$defs": {"Unit": unit_definition}}}}


def test_required_calls_keep_each_tools_definitions_where_its_references_point():
    celsius, both = _weather({"enum": ["C"]}), _weather({"enum": ["C", "F"]})
    schema = ToolCalling.of([celsius, CLOCK], "required", None).structured_output().json_schema
    assert schema["$defs"] == {"Unit": {"enum": ["C"]}} and "definitions" not in schema
    weather = schema["items"]["anyOf"][0]["properties"]["parameters"]
    assert "$defs" not in weather and weather["properties"]["unit"] == {"$ref": "#/$defs/Unit"}
    assert "$defs" in celsius["function"]["parameters"]  # the request's own tools are left as they were
    regex = structured_regex(StructuredOutput(json_schema=schema))  # compiles: every reference resolves
    assert re.fullmatch(regex, '[{"name": "weather_1", "parameters": {"city": "Oslo", "unit": "C"}}]')
    assert not re.fullmatch(regex, '[{"name": "weather_1", "parameters": {"city": "Oslo", "unit": "F"}}]')
    with pytest.raises(ToolError, match=re.escape('two tools define $defs["Unit"] differently')) as refused:
        ToolCalling.of([celsius, both], "required", None)
    assert refused.value.field == "tools"


@pytest.mark.parametrize("tools, choice, message, field", [
    (None, "required", "tool_choice needs tools", "tool_choice"),
    ([SEARCH, SEARCH], "required", "tools[1].function.name must be a non-empty string, different", "tools"),
    ([{"type": "retrieval"}], "required", "tools[0] must be", "tools"),
    ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], "required",
     "tools[0].function.parameters must be a JSON schema object", "tools"),
    ([SEARCH], {"type": "function", "function": {"name": "now"}}, "which tools do not define", "tool_choice"),
    ([SEARCH], "sometimes", 'tool_choice must be "none", "auto", "required"', "tool_choice"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "required",
     "tools[0].function.parameters must describe an object (\"type\": \"object\"), got type 'array'", "tools"),
    ([SEARCH], {"type": "function", "function": "search"}, 'tool_choice must be "none"', "tool_choice"),
    ([SEARCH], {"type": "function", "function": None}, 'tool_choice must be "none"', "tool_choice"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "$defs": "x"}}}], "required",
     "the parameters of 'f' give $defs that is not an object", "tools"),
    ([{"type": "function", "function": {"name": "f", "description": ["about f"]}}], "auto",
     "tools[0].function.description must be a string", "tools"),
    ([{"type": "function", "function": {"name": "f", "strict": "yes"}}], "auto",
     "tools[0].function.strict must be true or false", "tools"),
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
    # cut by a stop string: the reply is its text, and so not "tool_calls"
    assert required.finish_reason("stop", called=False) == "stop"
    # numbers past a double's range, which the grammar allows, would be re-encoded as Infinity
    assert required.calls('[{"name": "search", "parameters": {"query": "a", "n": 1e999}}]') is None


def test_auto_reads_the_calls_out_of_a_free_reply():
    for choice in (None, "auto"):
        auto = ToolCalling.of([SEARCH, CLOCK], choice, None)
        assert auto.mode == "auto" and auto.structured_output() is None  # the text is free
    with pytest.raises(ToolError, match='tool_choice "auto" .* needs a tool-call parser, and this service runs with '
                                        'tool_call_parser: none') as refused:
        auto.read_by(None)
    assert refused.value.field == "tool_choice"
    hermes = auto.read_by(HermesParser())
    content, calls = hermes.read('Searching. <tool_call>{"name": "search", "arguments": {"query": "é"}}</tool_call>')
    assert content == "Searching." and len(calls) == 1 and calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "search", "arguments": '{"query": "é"}'}
    assert hermes.finish_reason("stop", called=True) == "tool_calls"
    assert hermes.finish_reason("stop", called=False) == "stop" and hermes.finish_reason("length") == "length"
    assert hermes.read("just text") == ("just text", [])
    # null arguments: a call with none, whose arguments a client's json.loads reads as an object
    _, [bare] = hermes.read('<tool_call>{"name": "now", "arguments": null}</tool_call>')
    assert bare["function"] == {"name": "now", "arguments": "{}"}
    assert hermes.skip_special_tokens(None) is None  # hermes' markers are ordinary text
    mistral = auto.read_by(MistralParser())
    assert mistral.skip_special_tokens(None) is False and mistral.skip_special_tokens(True) is True


# How Mistral's chat templates (7B-Instruct v0.3 and later) check the calls given back.
MISTRAL_IDS_TEMPLATE = (
    "{% for m in messages %}{% for c in m.tool_calls or [] %}{% if c.id | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}{% endfor %}"
    "{% if m.role == 'tool' and m.tool_call_id | length != 9 %}"
    "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}{% endfor %}ok"
)


def test_calls_read_by_the_mistral_parser_have_ids_its_template_takes_back():
    """A Mistral model's calls have ids of nine letters and digits, as vLLM's mistral parser
    makes them, in every tool choice: its template refused the conversation that gave back
    the service's own `call_...` ids with the calls' results (a 400)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(message)

    template = ImmutableSandboxedEnvironment().from_string(MISTRAL_IDS_TEMPLATE)
    auto = ToolCalling.of([SEARCH, CLOCK], "auto", None).read_by(MistralParser())
    _, [read] = auto.read('[TOOL_CALLS] [{"name": "now", "arguments": {}}]')
    required = ToolCalling.of([SEARCH, CLOCK], "required", None).read_by(MistralParser())
    [forced] = required.calls('[{"name": "now", "parameters": {}}]')
    named = ToolCalling.of([SEARCH, CLOCK], {"type": "function", "function": {"name": "now"}}, None)
    for call in (read, forced, named.read_by(MistralParser()).call("now", "{}")):
        assert re.fullmatch("[a-zA-Z0-9]{9}", call["id"]), call
        conversation = [{"role": "user", "content": "Time?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call["id"], "content": "noon"}]
        assert template.render(messages=conversation, raise_exception=raise_exception) == "ok"
    assert named.read_by(MistralParser()).skip_special_tokens(None) is None  # JSON: no marker to keep
    assert auto.read_by(HermesParser()).new_call_id().startswith("call_")
