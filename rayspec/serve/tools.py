"""Function calling on the chat endpoint, by structured output: with `tool_choice` naming a
function, the reply is that function's arguments, JSON following its `parameters` schema;
with `tool_choice: "required"`, it is a list of one or more calls, each naming one of the
`tools` with arguments following that tool's schema (vLLM's named and required tool choice).
Both are constrained decoding (`rayspec.engine.structured`), so the speculative output still
follows the target's constrained law exactly, and the answer's `tool_calls` always parse.

`tool_choice: "auto"` (OpenAI's default when tools are given) lets the model choose between
text and calls, which needs a parser of the model's own tool-call syntax: not implemented,
refused with a 400.  `"none"`: the tools are shown to the chat template and the reply is
text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from rayspec.engine.structured import StructuredOutput

# The arguments of a tool that declares no parameters: none, `{}`.
NO_PARAMETERS = {"type": "object", "properties": {}}


class ToolError(ValueError):
    """A bad `tools` or `tool_choice`; `field` names which."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _functions(tools) -> dict[str, dict]:
    """{name: parameters schema} of OpenAI's tools list."""
    if not isinstance(tools, list) or not tools:
        raise ToolError("tools must be a non-empty list of {\"type\": \"function\", \"function\": {...}}", "tools")
    functions = {}
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type") != "function":
            raise ToolError(f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                            f"\"parameters\": {{...}}}}}}", "tools")
        name = function.get("name")
        if not isinstance(name, str) or not name or name in functions:
            raise ToolError(f"tools[{index}].function.name must be a non-empty string, different from the other "
                            f"tools'", "tools")
        parameters = function.get("parameters", NO_PARAMETERS)
        if not isinstance(parameters, dict):
            raise ToolError(f"tools[{index}].function.parameters must be a JSON schema object", "tools")
        functions[name] = parameters or NO_PARAMETERS
    return functions


@dataclass(frozen=True)
class ToolCalling:
    """How the reply calls tools: "named" (`function`'s arguments) or "required" (a list of
    calls among `functions`; at most one when `parallel` is false)."""

    mode: str
    functions: dict[str, dict]
    function: str | None = None
    parallel: bool = True

    @classmethod
    def of(cls, tools, tool_choice, parallel_tool_calls: bool | None) -> ToolCalling | None:
        """The calling a request asks for, None for a text reply (no tools, or "none")."""
        if tool_choice in (None, "none") and not tools:
            return None
        if not tools:
            raise ToolError("tool_choice needs tools", "tool_choice")
        functions = _functions(tools)
        if tool_choice == "none":
            return None
        if tool_choice in (None, "auto"):
            raise ToolError('tool_choice "auto" (the default when tools are given) needs a parser of the model\'s own '
                            'tool-call syntax, which rayspec does not have: give "required", a named function '
                            '({"type": "function", "function": {"name": ...}}) or "none"', "tool_choice")
        if tool_choice == "required":
            return cls("required", functions, parallel=parallel_tool_calls is not False)
        name = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        if not (isinstance(tool_choice, dict) and tool_choice.get("type") == "function" and isinstance(name, str)):
            raise ToolError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                            '{"name": ...}}', "tool_choice")
        if name not in functions:
            raise ToolError(f"tool_choice names the function {name!r}, which tools do not define", "tool_choice")
        return cls("named", functions, function=name)

    def structured_output(self) -> StructuredOutput:
        """What the reply's text must be."""
        if self.mode == "named":
            return StructuredOutput(json_schema=self.functions[self.function])
        call = {"anyOf": [
            {"type": "object", "properties": {"name": {"const": name}, "parameters": schema},
             "required": ["name", "parameters"]}
            for name, schema in self.functions.items()
        ]}
        calls = {"type": "array", "items": call, "minItems": 1, **({} if self.parallel else {"maxItems": 1})}
        return StructuredOutput(json_schema=calls)

    def new_call_id(self) -> str:
        return f"call_{uuid.uuid4().hex[:24]}"

    def calls(self, text: str) -> list[dict] | None:
        """The reply's `tool_calls`, None when its text is not a whole match (cut by max_tokens):
        a named call's arguments are then the text as far as it got."""
        if self.mode == "named":
            return [self.call(self.function, text)]
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return None
        return [self.call(call["name"], json.dumps(call["parameters"], ensure_ascii=False)) for call in parsed]

    def call(self, name: str, arguments: str, call_id: str | None = None) -> dict:
        return {"id": call_id or self.new_call_id(), "type": "function",
                "function": {"name": name, "arguments": arguments}}

    def finish_reason(self, generation_finish: str) -> str:
        """OpenAI's: "stop" for a call forced by name, "tool_calls" for required calls, and
        "length" for a reply cut short."""
        if generation_finish != "stop":
            return generation_finish
        return "stop" if self.mode == "named" else "tool_calls"
