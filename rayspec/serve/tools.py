"""Function calling on the chat endpoint, by structured output: with `tool_choice` naming a
function, the reply is that function's arguments, JSON following its `parameters` schema;
with `tool_choice: "required"`, it is a list of one or more calls, each naming one of the
`tools` with arguments following that tool's schema (vLLM's named and required tool choice).
Both are constrained decoding (`rayspec.engine.structured`), so the speculative output still
follows the target's constrained law exactly, and the answer's `tool_calls` always parse, but
for a reply cut short: by `max_tokens` (finish_reason "length"), or by a `stop` string or
token (its `stop_reason`), a named call's arguments are the text as far as it got, and a
required reply that is no whole list of calls is content.

`tool_choice: "auto"` (OpenAI's default when tools are given) lets the model choose between
text and calls: its reply is generated unconstrained, and the service's tool-call parser
(`rayspec.serve.tool_parsers`, the syntax of the model's chat template) reads the calls out of
it.  `"none"`: the tools are shown to the chat template and the reply is text.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from rayspec.engine.interfaces import RequestFieldError
from rayspec.engine.structured import StructuredOutput
from rayspec.serve.tool_parsers import (
    JSON, NOT_JSON, ParsedCall, Piece, ToolCallParser, ToolCallStream, read_pieces, read_tool_calls,
)

# The arguments of a tool that declares no parameters: none, `{}`.
NO_PARAMETERS = {"type": "object", "properties": {}}


class ToolError(RequestFieldError):
    """A bad `tools` or `tool_choice`; `field` names which."""


def _functions(tools, flat: bool = False) -> dict[str, dict]:
    """{name: parameters schema} of OpenAI's tools list; `flat`: the tools came in the Responses
    API's shape, a function's fields beside its type, and errors name them so."""
    if not isinstance(tools, list) or not tools:
        raise ToolError("tools must be a non-empty list of {\"type\": \"function\", \"function\": {...}}", "tools")
    functions = {}
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            raise ToolError(f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                            f"\"parameters\": {{...}}}}}}", "tools")
        at = f"tools[{index}]." + ("" if flat else "function.")
        name = function.get("name")
        if not isinstance(name, str) or not name or name in functions:
            raise ToolError(f"{at}name must be a non-empty string, different from the other tools'", "tools")
        # what the chat template shows the model, and OpenAI's and vLLM's types refuse otherwise
        if not isinstance(function.get("description"), (str, type(None))):
            raise ToolError(f"{at}description must be a string", "tools")
        if not isinstance(function.get("strict"), (bool, type(None))):  # 1 is no bool, in JSON or here
            raise ToolError(f"{at}strict must be true or false", "tools")
        parameters = function.get("parameters")
        if parameters is None:  # left out, or null: OpenAI's Responses tools send null for no parameters
            parameters = NO_PARAMETERS
        if not isinstance(parameters, dict):
            raise ToolError(f"{at}parameters must be a JSON schema object", "tools")
        if parameters.get("type", "object") != "object":  # a call's arguments are an object (OpenAI's)
            raise ToolError(f"{at}parameters must describe an object (\"type\": \"object\"), "
                            f"got type {parameters['type']!r}", "tools")
        functions[name] = parameters or NO_PARAMETERS
    return functions


@dataclass(frozen=True)
class ToolCalling:
    """How the reply calls tools: "named" (`function`'s arguments), "required" (a list of
    calls among `functions`) or "auto" (text, calls among `functions`, or both, read by
    `parser`); at most one call when `parallel` is false.  The calls' ids are `parser`'s, in
    any mode."""

    mode: str
    functions: dict[str, dict]
    function: str | None = None
    parallel: bool = True
    parser: ToolCallParser | None = None

    @classmethod
    def of(cls, tools, tool_choice, parallel_tool_calls: bool | None, flat: bool = False) -> ToolCalling | None:
        """The calling a request asks for, None for a text reply (no tools, or "none").  `flat`:
        the request is the Responses API's, whose tools and named choice write a function's
        fields beside its type (given here in the chat API's shape): errors name them so."""
        if tool_choice in (None, "none") and not tools:
            return None
        if not tools:
            raise ToolError("tool_choice needs tools", "tool_choice")
        functions = _functions(tools, flat)
        if tool_choice == "none":
            return None
        if tool_choice in (None, "auto", "required"):
            calling = cls(tool_choice or "auto", functions, parallel=parallel_tool_calls is not False)
            if calling.mode == "required":
                calling.structured_output()  # tools whose definitions clash are refused here, as a 400
            return calling
        function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not (isinstance(tool_choice, dict) and tool_choice.get("type") == "function" and isinstance(name, str)):
            named = '{"type": "function", "name": ...}' if flat else '{"type": "function", "function": {"name": ...}}'
            raise ToolError(f'tool_choice must be "none", "auto", "required" or {named}', "tool_choice")
        if name not in functions:
            raise ToolError(f"tool_choice names the function {name!r}, which tools do not define", "tool_choice")
        return cls("named", functions, function=name)

    def read_by(self, parser: ToolCallParser | None) -> ToolCalling:
        """This calling, its reply read by the service's `parser` when the model chooses
        (auto), and its calls' ids the parser's (any mode); a ToolError when an auto choice
        finds the service without one."""
        if self.mode != "auto":
            return dataclasses.replace(self, parser=parser)
        if parser is None:
            raise ToolError('tool_choice "auto" (the default when tools are given) needs a tool-call parser, and this '
                            'service runs with tool_call_parser: none: give "required", a named function '
                            '({"type": "function", "function": {"name": ...}}) or "none"', "tool_choice")
        return dataclasses.replace(self, parser=parser)

    def skip_special_tokens(self, requested: bool | None) -> bool | None:
        """The request's skip_special_tokens, false by default when the parser's marker is a
        special token that decoding would otherwise drop."""
        if requested is None and self.mode == "auto" and self.parser is not None and self.parser.needs_special_tokens:
            return False
        return requested

    def structured_output(self) -> StructuredOutput | None:
        """What the reply's text must be: None for auto, whose text is free."""
        if self.mode == "auto":
            return None
        if self.mode == "named":
            return StructuredOutput(json_schema=self.functions[self.function])
        # Each function's definitions ("$defs", or draft-07's "definitions": pydantic's nested
        # models) move to the root: a "#/$defs/..." reference resolves from the root of the
        # schema, which is now the array of calls.
        shared: dict[str, dict] = {"$defs": {}, "definitions": {}}
        options = []
        for name, schema in self.functions.items():
            schema = dict(schema)
            for key, definitions in shared.items():
                own = schema.pop(key, None) or {}
                if not isinstance(own, dict):
                    raise ToolError(f"tools: the parameters of {name!r} give {key} that is not an object", "tools")
                for definition, value in own.items():
                    if definitions.setdefault(definition, value) != value:
                        raise ToolError(f'two tools define {key}["{definition}"] differently, which a call to either '
                                        f'would read: give one of them another name', "tools")
            options.append({"type": "object", "properties": {"name": {"const": name}, "parameters": schema},
                            "required": ["name", "parameters"]})
        calls = {"type": "array", "items": {"anyOf": options}, "minItems": 1,
                 **({} if self.parallel else {"maxItems": 1}), **{k: v for k, v in shared.items() if v}}
        return StructuredOutput(json_schema=calls)

    def new_call_id(self) -> str:
        """A call's id, in the shape the model's chat template takes back (the parser's)."""
        return (self.parser or ToolCallParser()).new_call_id()

    def calls(self, text: str) -> list[dict] | None:
        """The reply's `tool_calls`, None when its text is not a whole match (cut by max_tokens):
        a named call's arguments are then the text as far as it got."""
        if self.mode == "named":
            return [self.call(self.function, text)]
        try:
            parsed = JSON.decode(text)
        except NOT_JSON:  # 1e999 or nested past the decoder's depth, which the schema's grammar allows
            return None
        return [self.call(call["name"], json.dumps(call["parameters"], ensure_ascii=False)) for call in parsed]

    def call(self, name: str, arguments: str, call_id: str | None = None) -> dict:
        return {"id": call_id or self.new_call_id(), "type": "function",
                "function": {"name": name, "arguments": arguments}}

    def parsed_call(self, parsed: ParsedCall) -> dict:
        """The OpenAI call of one an auto reply made."""
        return self.call(parsed.name, json.dumps(parsed.arguments, ensure_ascii=False))

    def reader(self) -> ToolCallStream:
        """An auto reply's calls, read as its text streams."""
        return ToolCallStream(self.parser, set(self.functions), self.parallel)

    def read_pieces(self, text: str) -> list[Piece]:
        """A whole auto reply's content and calls, in order."""
        return read_pieces(self.parser, text, set(self.functions), self.parallel)

    def read(self, text: str) -> tuple[str | None, list[dict]]:
        """A whole auto reply's content (None when it only calls) and calls."""
        content, calls = read_tool_calls(self.parser, text, set(self.functions), self.parallel)
        return content, [self.parsed_call(call) for call in calls]

    def finish_reason(self, generation_finish: str, called: bool = True) -> str:
        """OpenAI's: "stop" for a call forced by name, "tool_calls" for a required or auto reply
        that `called` (one a stop string cut is its text), and "length" for a reply cut short."""
        if generation_finish != "stop":
            return generation_finish
        return "tool_calls" if self.mode in ("required", "auto") and called else "stop"
