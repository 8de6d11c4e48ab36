"""Tool calls read out of a model's free text, for `tool_choice: "auto"` (vLLM's
`--tool-call-parser`): the model chooses between answering and calling, in the syntax its chat
template taught it, and the reply separates the two.

Parsers, by the syntax they read:
- `hermes` — `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks anywhere in the
  text (Hermes, Qwen 2.5 and 3, and the models trained on their templates);
- `mistral` — `[TOOL_CALLS]` and a JSON list of `{"name", "arguments"}` (or v11's
  `[TOOL_CALLS]name[ARGS]{...}`), text after them being content; the marker is a special
  token, so requests read by it keep special tokens in their text;
- `json` (also `llama3_json`) — a text that is, whole, a JSON call `{"name": ...,
  "parameters" or "arguments": {...}}`, several separated by `;` (Llama 3.1 to 3.3, after an
  optional `<|python_tag|>`), or a JSON list of them: the shape `tool_choice: "required"`
  generates, and what the fallback chat template asks a model without a template for.
`auto` picks hermes or mistral when the chat template writes their marker, json otherwise.

A call whose name is not one of the request's tools, or whose JSON does not parse, stays
text: nothing the model wrote is lost.  A call's arguments left out, null or "" are none, {}.
Content is the text outside the calls; whitespace only between or around calls is dropped.
With `parallel_tool_calls: false`, calls after the first are dropped (OpenAI's "at most one
call").

Streaming: `ToolCallStream` gives each piece of text as soon as no continuation can make it
part of a call (a hermes reply streams its content and holds back only what may be the start
of `<tool_call>`; a mistral reply from its marker on, and a json reply that opens with `{`
or `[`, are held to the end), and each call once whole.  The pieces of any chunking of a text
join to its one-shot reading.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import ClassVar, Union


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):  # 1e999: a call's arguments would be re-encoded as `Infinity`
        raise ValueError(f"{number} is past a double's range")
    return value


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


# JSON as RFC 8259 has it: Python's decoder also takes NaN and Infinity, and the arguments a
# reply gives would then be re-encoded so, which a client's JSON parser refuses.
JSON = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)
# What reading a text as JSON may raise: a JSONDecodeError is a ValueError, and a value nested
# deeper than the decoder's recursion goes raises RecursionError.
NOT_JSON = (ValueError, RecursionError)


@dataclass(frozen=True)
class ParsedCall:
    """A call as the model wrote it: `text` is its source, given back as text if `name` is not
    one of the request's tools."""

    name: str
    arguments: dict
    text: str


Piece = Union[str, ParsedCall]


def _call(value, text: str) -> ParsedCall | None:
    """A call from a decoded JSON value: an object with a string `name` and an object of
    `arguments` (or Llama's `parameters`; a JSON string of one is accepted, as some models
    write it; none, null or "" are no arguments, {}), or None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments")
    if arguments is None:
        arguments = value.get("parameters")
    # vLLM's parsers answer null arguments with the string "null", which a client's
    # `fn(**json.loads(arguments))` refuses: a call's arguments are an object (its tool's
    # parameters are one), and none are {}, as `_template_message` reads them given back.
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = JSON.decode(arguments)
        except NOT_JSON:
            return None
    return ParsedCall(value["name"], arguments, text) if isinstance(arguments, dict) else None


def _calls(value, text: str) -> list[ParsedCall] | None:
    """One call, or a non-empty list of them, from a decoded JSON value; None otherwise."""
    values = value if isinstance(value, list) else [value]
    calls = [_call(v, text if len(values) == 1 else json.dumps(v, ensure_ascii=False)) for v in values]
    return calls if calls and None not in calls else None


def _held_back(text: str, marker: str) -> int:
    """How many characters ending `text` may be the start of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class ToolCallParser:
    """Splits a text into content and calls.  `split(text, start, final)` reads `text[start:]`,
    `start` being where the previous reading of a shorter text of the same reply stopped, and
    returns its pieces and where this reading stops: what comes after may still become part of
    a call.  `final`: the text is whole, read it all."""

    name: ClassVar[str]
    needs_special_tokens: ClassVar[bool] = False  # its marker is a special token, which decoding would drop

    def split(self, text: str, start: int, final: bool) -> tuple[list[Piece], int]:
        raise NotImplementedError

    def new_call_id(self) -> str:
        """The id of a call the reply makes, which the client gives back with its result."""
        return f"call_{uuid.uuid4().hex[:24]}"


class HermesParser(ToolCallParser):
    """`<tool_call>{...}</tool_call>` blocks, anywhere in the text."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def split(self, text: str, start: int, final: bool) -> tuple[list[Piece], int]:
        pieces: list[Piece] = []
        at = start
        while True:
            opened = text.find(self.OPEN, at)
            if opened < 0:
                end = len(text) if final else len(text) - _held_back(text[at:], self.OPEN)
                if end > at:
                    pieces.append(text[at:end])
                return pieces, max(at, end)
            if opened > at:
                pieces.append(text[at:opened])
            body_start = opened + len(self.OPEN)
            closed = text.find(self.CLOSE, body_start)
            if closed < 0 and not final:
                return pieces, opened
            end = len(text) if closed < 0 else closed + len(self.CLOSE)
            pieces.append(self._block(text[opened:end], text[body_start:closed if closed >= 0 else end]))
            at = end

    @staticmethod
    def _block(source: str, body: str) -> Piece:
        try:
            call = _call(JSON.decode(body), source)
        except NOT_JSON:
            call = None
        return source if call is None else call


class MistralParser(ToolCallParser):
    """`[TOOL_CALLS]` then the calls, to the end of the text."""

    name = "mistral"
    needs_special_tokens = True
    MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"

    def split(self, text: str, start: int, final: bool) -> tuple[list[Piece], int]:
        marked = text.find(self.MARKER, start)
        if marked < 0:
            end = len(text) if final else len(text) - _held_back(text[start:], self.MARKER)
            return ([text[start:end]] if end > start else []), max(start, end)
        pieces: list[Piece] = [text[start:marked]] if marked > start else []
        if not final:
            return pieces, marked
        at = marked
        while at < len(text):  # text[at:] opens with the marker
            calls, end = self._calls_at(text, at)
            following = text.find(self.MARKER, end)
            stop = len(text) if following < 0 else following
            # text after a marker's calls (vLLM finds the list in it by a regular expression,
            # and drops the rest) is content, and a marker whose calls do not parse is text
            pieces += [text[at:stop]] if calls is None else calls + ([text[end:stop]] if stop > end else [])
            at = stop
        return pieces, len(text)

    def new_call_id(self) -> str:
        """Nine letters and digits, as vLLM's mistral parser makes them: Mistral's chat templates
        refuse a conversation whose earlier calls' ids (and its tool messages') are not."""
        return uuid.uuid4().hex[:9]

    def _calls_at(self, text: str, at: int) -> tuple[list[ParsedCall] | None, int]:
        """The calls of the marker at `at`: a JSON call or list of them, or v11's
        `name[ARGS]{...}`, and where they end; (None, the marker's end) when there are none."""
        body = at + len(self.MARKER)
        opening = len(text) - len(text[body:].lstrip())
        try:
            if text.startswith(("[", "{"), opening):
                value, end = JSON.raw_decode(text, opening)
                return _calls(value, text[at:end]), end
            args, following = text.find(self.ARGS, body), text.find(self.MARKER, body)
            if args < 0 or 0 <= following < args:
                return None, body
            arguments = len(text) - len(text[args + len(self.ARGS):].lstrip())
            value, end = JSON.raw_decode(text, arguments)
            return _calls({"name": text[body:args].strip(), "arguments": value}, text[at:end]), end
        except NOT_JSON:
            return None, body


class JsonParser(ToolCallParser):
    """A text that is, whole, one or more JSON calls (`;`-separated, or a list)."""

    name = "json"
    PYTHON_TAG = "<|python_tag|>"

    def split(self, text: str, start: int, final: bool) -> tuple[list[Piece], int]:
        if start > 0:  # decided at the start: a text that did not open as a call is content
            return ([text[start:]] if len(text) > start else []), len(text)
        opening = text.lstrip()
        undecided = not opening or self.PYTHON_TAG.startswith(opening)
        if not final and (undecided or opening.startswith(("{", "[", self.PYTHON_TAG))):
            return [], 0
        if opening.startswith(("{", "[", self.PYTHON_TAG)):
            calls = self._calls(opening.removeprefix(self.PYTHON_TAG))
            if calls is not None:
                return calls, len(text)
        return ([text] if text else []), len(text)

    @staticmethod
    def _calls(source: str) -> list[ParsedCall] | None:
        calls, at = [], 0
        while True:
            while at < len(source) and (source[at].isspace() or source[at] == ";"):
                at += 1
            if at == len(source):
                return calls or None
            try:
                value, end = JSON.raw_decode(source, at)
            except NOT_JSON:
                return None
            found = _calls(value, source[at:end])
            if found is None:
                return None
            calls += found
            at = end


PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser, "mistral": MistralParser, "json": JsonParser, "llama3_json": JsonParser,
}
SETTINGS = ("auto", *PARSERS, "none")


def check_parser_setting(setting: str) -> None:
    """ValueError unless `setting` names a parser, `auto` or `none`."""
    if setting not in SETTINGS:
        raise ValueError(f"tool_call_parser must be one of {', '.join(SETTINGS)}, got {setting!r}")


def pick_parser(setting: str, chat_template: str | dict) -> ToolCallParser | None:
    """The parser a service reads `tool_choice: "auto"` replies with: the one `setting` names,
    None for `none` (auto is then refused), or for `auto` the one whose marker the chat
    template writes (a dict of named templates: any of them), json when it writes none."""
    check_parser_setting(setting)
    if setting == "none":
        return None
    if setting == "auto":
        template = " ".join(chat_template.values()) if isinstance(chat_template, dict) else chat_template
        markers = {HermesParser.OPEN: "hermes", MistralParser.MARKER: "mistral"}
        setting = next((name for marker, name in markers.items() if marker in template), "json")
    return PARSERS[setting]()


class ToolCallStream:
    """One reply's text read as it grows: `push` each new piece of text, then `finish`; each
    gives the content and calls decided since the last (content pieces joined)."""

    def __init__(self, parser: ToolCallParser, names: set[str], parallel: bool = True):
        self.parser, self.names, self.parallel = parser, names, parallel
        self.text, self.read = "", 0
        self.held = ""  # whitespace ending the content so far: dropped if a call follows
        self.calls = 0

    def push(self, text: str) -> list[Piece]:
        self.text += text
        return self._advance(final=False)

    def finish(self) -> list[Piece]:
        return self._advance(final=True)

    def _advance(self, final: bool) -> list[Piece]:
        pieces, self.read = self.parser.split(self.text, self.read, final)
        out: list[Piece] = []
        for piece in pieces:
            if isinstance(piece, ParsedCall) and piece.name not in self.names:
                piece = piece.text
            if isinstance(piece, str):
                text = self.held + piece
                kept = text.rstrip()
                self.held = text[len(kept):]
                if kept:
                    out.append(kept)
                continue
            self.held = ""
            if self.parallel or not self.calls:
                out.append(piece)
            self.calls += 1
        if final:
            if self.held and not self.calls:
                out.append(self.held)
            self.held = ""
        return _joined(out)


def _joined(pieces: list[Piece]) -> list[Piece]:
    """Adjacent content pieces as one."""
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def read_pieces(parser: ToolCallParser, text: str, names: set[str], parallel: bool = True) -> list[Piece]:
    """A whole reply's content and calls, in order."""
    stream = ToolCallStream(parser, names, parallel)
    return _joined(stream.push(text) + stream.finish())


def read_tool_calls(parser: ToolCallParser, text: str, names: set[str],
                    parallel: bool = True) -> tuple[str | None, list[ParsedCall]]:
    """A whole reply's content (None when it has calls and no other text) and calls."""
    pieces = read_pieces(parser, text, names, parallel)
    calls = [piece for piece in pieces if isinstance(piece, ParsedCall)]
    content = "".join(piece for piece in pieces if isinstance(piece, str))
    return (content or None) if calls else content, calls
