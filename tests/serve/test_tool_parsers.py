"""Tool-call parsers (`tool_choice: "auto"`): each syntax read into content and calls, text
that is not a call kept as text, and streaming: any chunking of a reply gives, joined, its
one-shot reading, with content sent as soon as no continuation can make it a call."""

from __future__ import annotations

import random

import pytest

from rayspec.serve.tool_parsers import (
    HermesParser,
    JsonParser,
    MistralParser,
    ParsedCall,
    ToolCallStream,
    check_parser_setting,
    pick_parser,
    read_pieces,
    read_tool_calls,
)

NAMES = {"get_weather", "now"}
WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}'


def calls_of(pieces) -> list[tuple[str, dict]]:
    return [(piece.name, piece.arguments) for piece in pieces if isinstance(piece, ParsedCall)]


@pytest.mark.parametrize("parser, text, content, calls", [
    (HermesParser(), f"Let me look.\n<tool_call>\n{WEATHER}\n</tool_call>",
     "Let me look.", [("get_weather", {"city": "Paris", "unit": "C"})]),
    (HermesParser(), f'<tool_call>{WEATHER}</tool_call>\n<tool_call>{{"name": "now"}}</tool_call>\n',
     None, [("get_weather", {"city": "Paris", "unit": "C"}), ("now", {})]),
    (HermesParser(), "It is sunny, no call needed.", "It is sunny, no call needed.", []),
    (HermesParser(), '<tool_call>{"name": "fly", "arguments": {}}</tool_call> ok',  # not a tool: text
     '<tool_call>{"name": "fly", "arguments": {}}</tool_call> ok', []),
    (HermesParser(), '<tool_call>{"name": "now", "argu',  # cut short: text
     '<tool_call>{"name": "now", "argu', []),
    (HermesParser(), '<tool_call>{"name": "now", "arguments": "{\\"tz\\": \\"UTC\\"}"}',  # unclosed, whole JSON
     None, [("now", {"tz": "UTC"})]),
    (MistralParser(), f"Sure. [TOOL_CALLS][{WEATHER}, {{\"name\": \"now\", \"arguments\": {{}}}}]",
     "Sure.", [("get_weather", {"city": "Paris", "unit": "C"}), ("now", {})]),
    (MistralParser(), '[TOOL_CALLS]now[ARGS]{"tz": "UTC"}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
     None, [("now", {"tz": "UTC"}), ("get_weather", {"city": "Rome"})]),
    (MistralParser(), "[TOOL_CALLS][{\"name\": ", "[TOOL_CALLS][{\"name\": ", []),
    # text after the calls is content (vLLM finds the list by a regular expression and drops it),
    # a marker inside the arguments' strings is theirs, and a marker whose calls fail is text
    (MistralParser(), f"Sure. [TOOL_CALLS][{WEATHER}] Tell me if you need more.",
     "Sure. Tell me if you need more.", [("get_weather", {"city": "Paris", "unit": "C"})]),
    (MistralParser(), '[TOOL_CALLS]now[ARGS]{"tz": "[TOOL_CALLS]"}\nDone.', "\nDone.", [("now", {"tz": "[TOOL_CALLS]"})]),
    (MistralParser(), '[TOOL_CALLS]now[ARGS]{bad} [TOOL_CALLS]get_weather[ARGS]{"city": "Rome"} ok',
     "[TOOL_CALLS]now[ARGS]{bad} ok", [("get_weather", {"city": "Rome"})]),
    (MistralParser(), '[TOOL_CALLS] [{"name": "fly", "arguments": {}}]',  # not a tool: its text exactly
     '[TOOL_CALLS] [{"name": "fly", "arguments": {}}]', []),
    # null (or "") arguments are none, {}: vLLM's "null" is no object a client can call with
    (HermesParser(), '<tool_call>{"name": "now", "arguments": null}</tool_call>', None, [("now", {})]),
    (JsonParser(), '{"name": "now", "parameters": null}; {"name": "now", "arguments": ""}', None,
     [("now", {}), ("now", {})]),
    (MistralParser(), "[TOOL_CALLS]now[ARGS]null", None, [("now", {})]),
    (JsonParser(), f"  {WEATHER}", None, [("get_weather", {"city": "Paris", "unit": "C"})]),
    (JsonParser(), '<|python_tag|>{"name": "now", "parameters": {}}; {"name": "get_weather", "parameters": '
                   '{"city": "Oslo"}}', None, [("now", {}), ("get_weather", {"city": "Oslo"})]),
    (JsonParser(), '[{"name": "now", "parameters": {}}]', None, [("now", {})]),
    (JsonParser(), '{"answer": 42}', '{"answer": 42}', []),  # JSON, but not a call
    (JsonParser(), 'The call would be {"name": "now"}', 'The call would be {"name": "now"}', []),
    (JsonParser(), "", "", []),
    # JSON that is not RFC 8259's, or nested deeper than the decoder goes: text, not a call
    # whose arguments would be re-encoded as NaN, or an error after the reply was generated
    (HermesParser(), '<tool_call>{"name": "now", "arguments": {"x": NaN}}</tool_call>',
     '<tool_call>{"name": "now", "arguments": {"x": NaN}}</tool_call>', []),
    (JsonParser(), '{"name": "now", "parameters": {"x": 1e999}}', '{"name": "now", "parameters": {"x": 1e999}}', []),
    (MistralParser(), '[TOOL_CALLS]now[ARGS]{"x": -Infinity}', '[TOOL_CALLS]now[ARGS]{"x": -Infinity}', []),
    (HermesParser(), '<tool_call>' + "[" * 5000, '<tool_call>' + "[" * 5000, []),
    (JsonParser(), '{"name": "now", "parameters": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
     '{"name": "now", "parameters": {"x": ' + "[" * 5000 + "]" * 5000 + "}}", []),
])
def test_each_syntax_reads_into_content_and_calls(parser, text, content, calls):
    read_content, read_calls = read_tool_calls(parser, text, NAMES)
    assert read_content == content
    assert [(call.name, call.arguments) for call in read_calls] == calls


def test_a_reply_without_calls_is_its_text_exactly():
    for parser in (HermesParser(), MistralParser(), JsonParser()):
        for text in ("  two spaces, then a newline\n", "<tool_cal", "[TOOL_CALLS", "\n\n", "<|python_t"):
            assert read_tool_calls(parser, text, NAMES) == (text, [])


def test_parallel_false_keeps_the_first_call():
    text = f'<tool_call>{WEATHER}</tool_call><tool_call>{{"name": "now"}}</tool_call>'
    content, calls = read_tool_calls(HermesParser(), text, NAMES, parallel=False)
    assert content is None and [call.name for call in calls] == ["get_weather"]


def test_the_chat_template_picks_the_parser():
    assert pick_parser("auto", "{% for t in tools %}<tool_call>{% endfor %}").name == "hermes"
    assert pick_parser("auto", {"default": "x", "tool_use": "[TOOL_CALLS] {{ calls }}"}).name == "mistral"
    assert pick_parser("auto", "{{ messages }}").name == "json"
    assert pick_parser("llama3_json", "<tool_call>").name == "json"
    assert pick_parser("none", "<tool_call>") is None
    with pytest.raises(ValueError, match="tool_call_parser must be one of auto, hermes, mistral, json, llama3_json, "
                                         "none, got 'qwen'"):
        check_parser_setting("qwen")


REPLIES = [
    (HermesParser(), f"Checking.\n<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>{{\"name\": \"now\"}}</tool_call>"
                     "\nDone <tool and more"),
    (HermesParser(), "a < b and <tool_call>{broken}</tool_call> stays text"),
    (MistralParser(), f"Let me see [TOOL bits [TOOL_CALLS][{WEATHER}]"),
    (MistralParser(), f"Sure [TOOL_CALLS][{WEATHER}] and [TOOL_CALLS]now[ARGS]{{}}  then [TOOL_CALLS]x[ARGS]{{"),
    (JsonParser(), f"<|python_tag|>{WEATHER}; {{\"name\": \"now\", \"parameters\": {{}}}}"),
    (JsonParser(), "plain text, {\"name\": \"now\"} inside"),
    (JsonParser(), "   \n"),
]


@pytest.mark.parametrize("parser, text", REPLIES)
def test_any_chunking_streams_the_one_shot_reading(parser, text):
    whole = read_pieces(parser, text, NAMES)
    rng = random.Random(7)
    chunkings = [[text[i:i + 1] for i in range(len(text))]]  # character by character
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8)))) if len(text) > 1 else []
        chunkings.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    for chunks in chunkings:
        stream = ToolCallStream(parser, NAMES)
        pieces = [piece for chunk in chunks for piece in stream.push(chunk)] + stream.finish()
        assert "".join(p for p in pieces if isinstance(p, str)) == "".join(p for p in whole if isinstance(p, str))
        assert calls_of(pieces) == calls_of(whole)


def test_streamed_content_is_sent_before_the_reply_ends():
    stream = ToolCallStream(HermesParser(), NAMES)
    assert stream.push("The weather <tool") == ["The weather"]  # the space may precede a call: held
    assert stream.push("_call>{\"name\": \"now\"}") == []  # inside a call, not yet closed
    closed = stream.push("</tool_call> then")
    assert calls_of(closed) == [("now", {})] and closed[1:] == [" then"]
    assert stream.push(" more") == [" more"]
    assert stream.finish() == []
    json_stream = ToolCallStream(JsonParser(), NAMES)
    assert json_stream.push("  ") == [] and json_stream.push("Hi") == ["  Hi"]  # not a call: streams on
    json_calls = ToolCallStream(JsonParser(), NAMES)
    assert json_calls.push('{"name": "now"}') == [] and calls_of(json_calls.finish()) == [("now", {})]


def test_a_mistral_reply_streams_its_calls_and_the_text_after_them():
    """Text after `[TOOL_CALLS]`'s list is content, read once the reply ends (another marker
    may follow it), streamed or not."""
    stream = ToolCallStream(MistralParser(), NAMES)
    assert stream.push("Sure. [TOOL_CALLS][") == ["Sure."]
    assert stream.push(f"{WEATHER}] Want more?") == []
    end = stream.finish()
    assert calls_of(end) == [("get_weather", {"city": "Paris", "unit": "C"})] and end[1:] == [" Want more?"]
