"""The OpenAI-compatible HTTP front end: `create_app(service) -> FastAPI`.

    POST /v1/completions        prompt: text, token ids, or a batch of either -> text_completion
    POST /v1/chat/completions   messages, by the model's chat template  -> chat.completion
    POST /v1/responses          OpenAI's Responses API, stateless (`rayspec.serve.responses`)
    POST /tokenize, /detokenize  vLLM's: a prompt or messages to token ids, and back
    GET  /tokenizer_info         vLLM's: special tokens, chat template, context
    GET  /v1/models, /v1/models/{model}   (with vLLM's `max_model_len`: the target's context)
    GET  /health                200 when every worker answers SERVING ("ok"), or every target
                                 does and some drafter does not ("degraded": its sequences
                                 decode without drafts); else 503
    GET  /metrics               Prometheus text (`rayspec.serve.metrics`)

Request fields: OpenAI's `model`, `prompt` / `messages`, `max_tokens` (chat: also
`max_completion_tokens`), `temperature`, `top_p`, `presence_penalty`, `frequency_penalty`,
`logit_bias` (token id strings to biases), `seed`, `stop`, `stream`,
`stream_options.include_usage` (with vLLM's `continuous_usage_stats`: every chunk carries its
choice's usage so far), `logprobs` (chat: `logprobs` and `top_logprobs`, up to 20
alternatives), `n` and, for completions, `echo` (with `max_tokens: 0`, the prompt alone: with
`logprobs`, it scores a text), plus vLLM's extensions `top_k`, `repetition_penalty`, `min_p`,
`min_tokens`, `stop_token_ids`, `ignore_eos`, `allowed_token_ids`, `bad_words`,
`include_stop_str_in_output`, `skip_special_tokens`, `add_special_tokens` (as in vLLM, a
completion's prompt gets the tokenizer's special tokens, a BOS for Llama-style tokenizers,
unless false; a chat prompt's template writes its own, so there the default is false) and
`truncate_prompt_tokens` (k: the prompt's last k tokens, -1: as many as the context holds;
`echo` then returns the kept tokens' text) and `return_tokens_as_token_ids` (log-probabilities
name each token "token_id:{id}"), `prompt_logprobs` (the prompt's tokens' log-probabilities,
ranks and texts in vLLM's shape: per choice on completions, in each choice's first chunk when
streamed; beside the choices on a chat, not streamed), chat's `continue_final_message`,
`add_generation_prompt` and `chat_template_kwargs`, OpenAI's `prediction` (Predicted Outputs:
drafted where the completion follows it, `rayspec.engine.prediction`), structured output
(OpenAI's `response_format` json_object / json_schema, vLLM's `structured_outputs` and
`guided_json`, `guided_regex`, `guided_choice`: `rayspec.engine.structured`), chat's `tools`
with `tool_choice` "auto" (the calls read out of a free reply by the service's tool-call
parser), "required", a named function or "none" (`rayspec.serve.tools`), and `rayspec:
{verifier, tree, verifier_params}`.  Penalties, the bias and structured
output change the target's law, and the output follows that law exactly.  Fields that would
change the answer and that rayspec does not implement (`suffix`, `best_of` > 1, grammars) are
refused, never silently ignored; so
are unknown fields, as OpenAI does.  `user`, `metadata`, `store`, `service_tier`,
`safety_identifier` and `prompt_cache_key` are accepted and ignored (they change no answer).

Log-probabilities are the target's raw law at each token's position — the log-softmax of its
logits, before temperature, top-k and top-p — as OpenAI and vLLM report them, whatever the
verifier; a token's text is its own decoding, as vLLM gives it, and -inf is reported as
-9999.0 (JSON has no infinity).  With `echo`, the prompt's tokens come first, the first of
them with null (it has no context to be drawn from), as in OpenAI's legacy API.

`n` choices are `n` generations run side by side, each taking one of the service's
`limits.max_concurrent_requests` slots (all or none: 429 when fewer are free): choice i is
seeded with the request's seed + i, so it is exactly what a request with that seed gets;
unseeded choices draw a seed each.  A completions `prompt` may be a batch (a list of texts or
of token id lists), as OpenAI's and vLLM's: prompt p's choice i is choice p·n + i, exactly
what a request with that prompt alone gets, and `usage.prompt_tokens` counts each prompt once.
All the batch's choices run side by side, so a batch holds at most
`max_concurrent_requests` choices.

Responses have OpenAI's shapes, and each choice vLLM's `stop_reason`: the stop string or
stop token id that ended it, null for EOS or a length.  `usage.completion_tokens_details`
counts the accepted and rejected draft tokens (OpenAI's Predicted Outputs fields: accepted drafts are those in the
completion, so drafts a stop or max_tokens cut off count as rejected), and a `rayspec` object
carries the request's speculative decoding figures, the verifier's verdicts whatever the cut,
pooled over the choices: the seed used (send it back to get the same tokens; `seeds`, one per
choice, when n > 1), steps, tokens per step, the histogram of accepted drafts per step and
the acceptance rate at each tree depth.

Streaming (`stream: true`): server-sent events, one `data: {chunk}` per verification step
that produced text (or log-probabilities), sent as soon as the step is verified, the choices'
steps interleaved as they come; then, per choice as it ends, a chunk with its finish reason
(the last one also carries the `rayspec` object), a usage chunk when
`stream_options.include_usage`, and `data: [DONE]`.  Errors before the choices' first steps
are HTTP errors; a failure after them is a `data: {"error": ...}` event.  A client that
disconnects stops its generation after the current step, and the worker sessions are
released.

Every response carries an `X-Request-Id` header (vLLM's, with --enable-request-id-headers):
the request's own `X-Request-Id` when it sends a usable one (1-256 printable ASCII characters),
else a fresh id.  A generation's response id is made of it (`cmpl-<id>`, `chatcmpl-<id>`).

Errors have OpenAI's body `{"error": {"message", "type", "param", "code"}}`: 400 for bad
input (malformed JSON, wrong types, unknown verifier, a prompt longer than the context, ...),
401 without the service's API key (`ServiceConfig.api_key`), 404 for an unknown model or route,
413 for a body over `limits.max_request_bytes` (refused
before it is read), 429 when `limits.max_concurrent_requests` generations are
running or a worker has no room for another session, 503 when a worker fails or cannot be
reached, 500 for anything else.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any, ClassVar, Literal

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from rayspec.engine.engine import GenerationStats
from rayspec.engine.interfaces import MAX_LOGPROBS, TokenLogprobs
from rayspec.engine.policy import check_tree_spec
from rayspec.engine.requests import GenerationRequest, StepText
from rayspec.engine.structured import StructuredOutput
from rayspec.engine.text import check_text
from rayspec.rpc.remote import RemoteError
from rayspec.rpc.server import key_refusal
from rayspec.serve.metrics import CONTENT_TYPE
from rayspec.serve.service import ChatRenderError, Overloaded, Service, StepStream
from rayspec.serve.tools import ToolCalling, ToolError
from rayspec.verify.processing import MAX_PRESENCE_OR_FREQUENCY_PENALTY as PENALTY_BOUND

log = logging.getLogger("rayspec.serve")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
LOGPROB_FLOOR = -9999.0  # what a log-probability of -inf is reported as (vLLM's choice)


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


# ---------------------------------------------------------------------------- requests


class _Strict(BaseModel):
    # strict: "5" is not 5; forbid: an unknown field is refused rather than ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


class RayspecOptions(_Strict):
    verifier: str | None = None
    tree: str | None = None
    verifier_params: dict[str, Any] | None = None


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM's: every chunk carries its choice's usage so far
    include_obfuscation: bool | None = None  # OpenAI's padding against side channels: accepted, none added


class _GenerationBody(_Strict):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = Field(None, ge=-2**63, lt=2**63)  # any int64, as vLLM and the gRPC API take
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1)
    # bounds checked here too, so that the 400 names the field
    presence_penalty: float | None = Field(None, ge=-PENALTY_BOUND, le=PENALTY_BOUND)
    frequency_penalty: float | None = Field(None, ge=-PENALTY_BOUND, le=PENALTY_BOUND)
    repetition_penalty: float | None = Field(None, gt=0)
    logit_bias: dict[str, float] | None = None
    # vLLM's extensions (the openai client sends them in extra_body)
    min_p: float | None = Field(None, ge=0, le=1)
    min_tokens: int | None = Field(None, ge=0)
    stop_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: str | list[str] | None = None
    add_special_tokens: bool | None = None  # vLLM's: completions default true, chat false
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    return_tokens_as_token_ids: bool | None = None  # vLLM's: log-probabilities name tokens "token_id:{id}"
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # vLLM's: the prompt's, with ranks
    prediction: dict[str, Any] | None = None  # OpenAI's Predicted Outputs: {"type": "content", "content": ...}
    # structured output: OpenAI's response_format, vLLM's structured_outputs and guided_* fields
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None  # OpenAI's user id for abuse monitoring
    prompt_cache_key: str | None = None  # OpenAI's hint for its prompt cache
    rayspec: RayspecOptions | None = None

    def refuse_unsupported(self) -> None:
        """Refuse, with a 400 naming the field, what the endpoint does not implement."""

    def generation_fields(self) -> dict:
        """The `GenerationRequest` fields other than the prompt and max_tokens."""
        options = self.rayspec or RayspecOptions()
        if options.tree:
            _check_tree(options.tree)
        return dict(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, stop=self.stop,
            presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty, logit_bias=self.token_biases(), min_p=self.min_p,
            min_tokens=self.min_tokens, stop_token_ids=self.stop_token_ids, ignore_eos=self.ignore_eos,
            allowed_token_ids=self.allowed_token_ids, bad_words=self.bad_words,
            truncate_prompt_tokens=self.truncate_prompt_tokens,
            include_stop_str_in_output=self.include_stop_str_in_output, skip_special_tokens=self.skip_special_tokens,
            verifier=options.verifier, tree=options.tree, verifier_params=options.verifier_params,
            logprobs=self.alternatives(), prompt_logprobs=self.prompt_alternatives(),
            prediction=self.predicted_text(), structured_output=self.structured_output(),
        )

    STRUCTURED_FIELDS: ClassVar[tuple[str, ...]] = (
        "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice")

    def structured_field(self) -> str:
        """The field that gave the structured output."""
        given = (field for field in self.STRUCTURED_FIELDS if getattr(self, field) is not None)
        return next(given, "response_format")

    def structured_output(self) -> StructuredOutput | None:
        """What the completion must be, from whichever one of OpenAI's `response_format`
        ({"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": ...}}),
        vLLM's `structured_outputs` ({"json" | "regex" | "choice" | "json_object": ...}) and
        vLLM's older `guided_json`, `guided_regex`, `guided_choice` the request gives."""
        given = {}
        if self.response_format is not None:
            given["response_format"] = _response_format(self.response_format, "response_format")
        if self.structured_outputs is not None:
            given["structured_outputs"] = _structured_outputs(self.structured_outputs)
        for field, name in (("guided_json", "json_schema"), ("guided_regex", "regex"), ("guided_choice", "choice")):
            if getattr(self, field) is not None:
                given[field] = {name: getattr(self, field)}
        if self.guided_grammar is not None:
            raise _bad(GRAMMAR_UNSUPPORTED, "guided_grammar")
        given = {field: kind for field, kind in given.items() if kind is not None}  # not response_format text
        if len(given) > 1:
            raise _bad(f"give one structured output, not {len(given)}: {', '.join(given)}", next(iter(given)))
        for field, kind in given.items():
            try:
                return StructuredOutput(**kind)
            except ValueError as error:
                raise _bad(f"{field}: {error}", field) from None
        return None

    def predicted_text(self) -> str | None:
        """The text of OpenAI's `prediction` ({"type": "content", "content": text or text
        parts}), None without one."""
        if self.prediction is None:
            return None
        text = _joined_text(self.prediction.get("content"))
        if self.prediction.get("type") != "content" or text is None or set(self.prediction) - {"type", "content"}:
            raise _bad('prediction must be {"type": "content", "content": text, or a list of {"type": "text", '
                       '"text": ...} parts}', "prediction")
        return text or None

    def token_biases(self) -> dict[int, float] | None:
        """`logit_bias` with its keys, token ids written as JSON strings as OpenAI's are, read."""
        if not self.logit_bias:
            return None
        try:
            return {int(token): bias for token, bias in self.logit_bias.items()}
        except ValueError:
            raise _bad("logit_bias keys must be token ids, such as \"50256\"", "logit_bias") from None

    def alternatives(self) -> int | None:
        """How many most likely tokens' log-probabilities to give at each token; None: none."""
        return None

    def prompt_alternatives(self) -> int | None:
        """The same for the prompt's tokens (what the target's prefill must report)."""
        return self.prompt_logprobs


GRAMMAR_UNSUPPORTED = ("grammars (EBNF, Lark) are not supported; JSON schemas, json_object, regular expressions and "
                       "choices are")


def _response_format(value: dict, field: str) -> dict | None:
    """The `StructuredOutput` fields of OpenAI's response_format (None for plain text)."""
    kind = value.get("type")
    if kind == "text" and set(value) == {"type"}:
        return None
    if kind == "json_object" and set(value) == {"type"}:
        return {"json_object": True}
    if kind == "json_schema" and set(value) == {"type", "json_schema"} and isinstance(value["json_schema"], dict):
        spec = value["json_schema"]
        if "schema" not in spec or set(spec) - {"name", "schema", "strict", "description"}:
            raise _bad(f'{field}.json_schema must hold the schema: {{"name": ..., "schema": {{...}}, "strict": ...}}',
                       field)
        return {"json_schema": spec["schema"]}
    raise _bad(f'{field} must be {{"type": "text"}}, {{"type": "json_object"}} or {{"type": "json_schema", '
               f'"json_schema": {{"name": ..., "schema": {{...}}}}}}', field)


def _structured_outputs(value: dict) -> dict:
    """The `StructuredOutput` fields of vLLM's structured_outputs."""
    if "grammar" in value:
        raise _bad(GRAMMAR_UNSUPPORTED, "structured_outputs")
    names = {"json": "json_schema", "regex": "regex", "choice": "choice", "json_object": "json_object"}
    unknown = set(value) - set(names)
    if unknown or len(value) != 1:
        raise _bad("structured_outputs takes exactly one of json, regex, choice and json_object"
                   + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else ""), "structured_outputs")
    (key, spec), = value.items()
    if key == "json_object" and spec is not True:
        raise _bad("structured_outputs.json_object must be true", "structured_outputs")
    return {names[key]: spec}


def _check_tree(spec: str) -> None:
    """`GenerationRequest`'s check of the tree, run here first so the error names the field."""
    try:
        check_tree_spec(spec)
    except ValueError as error:
        raise _bad(f"rayspec.tree: {error}", "rayspec.tree") from None


class CompletionBody(_GenerationBody):
    prompt: Any  # text, token ids, or a batch of one of those: checked by `prompt_fields`
    max_tokens: int | None = Field(None, ge=0)  # 0 with echo: the prompt scored, nothing generated
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    best_of: int | None = None
    suffix: str | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.max_tokens == 0 and not self.echo:
            raise _bad("max_tokens must be at least 1 (0 only with echo: true, which returns the prompt and, with "
                       "logprobs, its tokens' log-probabilities)", "max_tokens")
        if self.best_of not in (None, 1):
            raise _bad("best_of: only 1 is supported", "best_of")
        if self.suffix:
            raise _bad("suffix (insertion) is not supported", "suffix")

    def alternatives(self) -> int | None:
        return self.logprobs

    def prompt_alternatives(self) -> int | None:
        asked = [k for k in (self.prompt_logprobs, self.logprobs if self.echo else None) if k is not None]
        return max(asked, default=None)  # the echo's and vLLM's prompt_logprobs, from one prefill

    def prompts(self) -> list[dict]:
        """The `GenerationRequest` prompt field of each prompt: OpenAI's text, token ids, or a
        batch (a list) of either."""
        prompt = self.prompt
        if _is_prompt(prompt):
            return [_prompt_field(prompt)]
        if isinstance(prompt, list) and prompt and all(_is_prompt(p) for p in prompt):
            if len({type(p) for p in prompt}) == 1:  # texts, or token id lists, not both
                return [_prompt_field(p) for p in prompt]
        raise _bad("prompt must be a string, a non-empty list of token ids, or a non-empty list (a batch) of "
                   "strings or of token id lists", "prompt")


def _is_prompt(prompt) -> bool:
    """Text, or a non-empty list of token ids (bool is an int to Python, not to JSON)."""
    return isinstance(prompt, str) or (
        isinstance(prompt, list) and bool(prompt) and all(type(t) is int for t in prompt)
    )


def _prompt_field(prompt: str | list[int]) -> dict:
    return {"prompt": prompt} if isinstance(prompt, str) else {"prompt_ids": prompt}


def _joined_text(content) -> str | None:
    """OpenAI's text content: a string, or a list of {"type": "text", "text": ...} parts
    joined; None for anything else."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else None
    if parts is None or not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                for p in parts):
        return None
    return "".join(part["text"] for part in parts)


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")  # e.g. `refusal: null` from clients
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's calls, given back in the conversation
    tool_call_id: str | None = None  # a tool message: the call it answers

    @field_validator("content")
    @classmethod
    def _text(cls, content) -> str:
        """The message's text: a string, or text parts joined."""
        text = "" if content is None else _joined_text(content)
        if text is None:
            raise ValueError('only text content is supported: a string, or a list of {"type": "text", "text": ...} '
                             'parts')
        return check_text(text, "the content")

    def as_template_input(self) -> dict:
        message = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class ChatBody(_GenerationBody):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    # vLLM's: the reply opened, or the last (assistant) message continued; template variables
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    def prompt(self, service: Service) -> str:
        """The conversation rendered by the model's chat template, as this request asks (the
        tools shown to it)."""
        return _render(service, self.messages, self.add_generation_prompt, self.continue_final_message,
                       self.chat_template_kwargs, self.tools)

    def tool_calling(self) -> ToolCalling | None:
        """How the reply calls the tools (`rayspec.serve.tools`), None for a text reply."""
        try:
            return ToolCalling.of(self.tools, self.tool_choice, self.parallel_tool_calls)
        except ToolError as error:
            raise _bad(str(error), error.field) from None

    def generation_fields(self) -> dict:
        fields = super().generation_fields()
        calling = self.tool_calling()
        forced = None if calling is None else calling.structured_output()
        if forced is not None:
            if fields["structured_output"] is not None:
                raise _bad(f"tool_choice {'required' if calling.mode == 'required' else 'naming a function'} makes "
                           f"the reply JSON already: give no {self.structured_field()} with it", "tool_choice")
            fields["structured_output"] = forced
        return fields

    def structured_field(self) -> str:
        given = any(getattr(self, field) is not None for field in self.STRUCTURED_FIELDS)
        calling = None if given else self.tool_calling()
        return "tools" if calling is not None and calling.mode != "auto" else super().structured_field()

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise _bad("top_logprobs needs logprobs: true", "top_logprobs")
        if self.prompt_logprobs is not None and self.stream:
            raise _bad("prompt_logprobs: a chat gives them in its non-streamed response only (completions stream "
                       "them too)", "prompt_logprobs")
        if self.functions or self.function_call not in (None, "none"):
            raise _bad("functions and function_call (deprecated by OpenAI) are not supported: give tools and "
                       "tool_choice", "functions")
        if self.logprobs and self.tool_calling() is not None:
            raise _bad("logprobs are not given with tool calls", "logprobs")
        if self.max_tokens and self.max_completion_tokens and self.max_tokens != self.max_completion_tokens:
            raise _bad("max_tokens and max_completion_tokens disagree; give one", "max_completion_tokens")

    def alternatives(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


def tool_calling_read_by_service(calling: ToolCalling | None, service: Service) -> ToolCalling | None:
    """A request's tool calling, an auto choice's reply read by the service's parser; a 400
    when the service has none."""
    try:
        return None if calling is None else calling.read_by(service.tool_parser)
    except ToolError as error:
        raise _bad(str(error), error.field) from None


def _render(service: Service, messages: list[Message], add_generation_prompt: bool, continue_final_message: bool,
            template_kwargs: dict | None, tools: list | None = None) -> str:
    try:
        return service.render_chat([m.as_template_input() for m in messages], add_generation_prompt,
                                   continue_final_message, template_kwargs, tools)
    except ChatRenderError as error:
        raise _bad(str(error), error.field) from None


class TokenizeBody(_Strict):
    """vLLM's /tokenize: a completion prompt, or a conversation as the chat endpoint renders it."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None  # as the endpoints' defaults: prompt true, messages false
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeBody(_Strict):
    model: str | None = None
    tokens: list[int]


# ---------------------------------------------------------------------------- responses


def usage(requests: list[GenerationRequest], per_prompt: int = 1) -> dict:
    """Token counts of the choices, each run of `per_prompt` of them sharing one prompt: the
    prompts' tokens counted once each, the completions' tokens summed."""
    counts = [request.usage() for request in requests]
    prompt = sum(c["prompt_tokens"] for c in counts[::per_prompt])
    completion = sum(c["completion_tokens"] for c in counts)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(c["cached_prompt_tokens"] for c in counts[::per_prompt])},
        "completion_tokens_details": {
            "accepted_prediction_tokens": sum(c["accepted_draft_tokens"] for c in counts),
            "rejected_prediction_tokens": sum(c["rejected_draft_tokens"] for c in counts),
        },
    }


def speculation_figures(requests: list[GenerationRequest], default_verifier: str) -> dict:
    """The speculative decoding figures of a response's choices, pooled (the `rayspec` response
    object): the seed of the first choice (choice i used the seed + i when the request gave
    one; `seeds` lists them when there are several)."""
    stats = GenerationStats(steps=[s for r in requests for s in r.stats.steps],
                            tokens=sum(r.stats.tokens for r in requests),
                            seconds=max(r.stats.seconds for r in requests))
    accepted = [s.accepted for s in stats.steps]
    histogram = [0] * (max(accepted, default=0) + 1)
    for n in accepted:
        histogram[n] += 1
    drafted = sum(s.drafted for s in stats.steps)
    seeds = {"seeds": [r.seed for r in requests]} if len(requests) > 1 else {}
    return {
        "seed": requests[0].seed,
        **seeds,
        "verifier": requests[0].kwargs["verifier"] or default_verifier,
        "steps": len(stats.steps),
        "tokens_per_step": round(stats.tokens_per_step, 4),
        "mean_acceptance_length": round(sum(accepted) / max(len(accepted), 1) + 1, 4),
        "draft_tokens": drafted,
        "accepted_draft_tokens": sum(accepted),
        "draft_acceptance_rate": round(sum(accepted) / drafted, 4) if drafted else 0.0,
        "acceptance_histogram": histogram,  # steps by number of accepted drafts
        "depth_acceptance": [round(a, 4) for a in stats.depth_acceptance()],
        "tokens_per_second": round(stats.tokens_per_second, 2),
        "hedged_steps": sum(r.stats.hedged_steps for r in requests),  # went on without their late draft
    }


class _Reply:
    """The OpenAI objects answering one request: its choices, one generation each, `n` per
    prompt, prompt by prompt."""

    object = chunk_object = prefix = ""

    def __init__(self, service: Service, requests: list[GenerationRequest], n: int = 1, as_token_ids: bool = False,
                 prompt_top: int | None = None):
        """as_token_ids: log-probabilities name tokens "token_id:{id}" rather than by their
        text (vLLM's return_tokens_as_token_ids, for tokens whose text is not unique).
        prompt_top: vLLM's prompt_logprobs, the alternatives each prompt token's entry gives."""
        self.service, self.requests, self.n, self.as_token_ids = service, requests, n, as_token_ids
        self.prompt_top = prompt_top
        self.prompt_sent = [prompt_top is None] * len(requests)
        self.id = f"{self.prefix}-{requests[0].request_id}"
        self.created = int(time.time())

    def _head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.service.model_id}

    def figures(self) -> dict:
        return speculation_figures(self.requests, self.service.engine.verifier)

    def response(self) -> dict:
        choices = []
        for index, request in enumerate(self.requests):
            text, logprobs = self.piece(index, request.text, request.token_ids, request.logprobs)
            choices.append(self.choice(index, text, logprobs, request.finish_reason, request.stop_reason))
        return {**self._head(self.object), "choices": choices, "usage": usage(self.requests, self.n),
                "rayspec": self.figures()}

    def prompt_entries(self, index: int) -> list[dict | None]:
        """vLLM's prompt_logprobs of choice `index`'s prompt: None for its first token (it has
        no context), then per token a map from token id (a string: a JSON key) to its
        log-probability, rank and text — the prompt's token first, then the `prompt_top` most
        likely, ranked 1 to k."""
        request = self.requests[index]
        ids, logprobs = request.prompt_ids[1:], request.prompt_logprobs.narrowed(self.prompt_top)
        texts, top_texts = self.token_texts(ids, logprobs)
        ranks = logprobs.ranks or [None] * len(ids)  # unknown from a target worker that predates ranks
        entries: list[dict | None] = [None]
        for token, text, value, rank, top_ids, top_values, alternative_texts in zip(
            ids, texts, logprobs.chosen, ranks, logprobs.top_ids, logprobs.top_values, top_texts
        ):
            entry = {str(token): {"logprob": _reported(value), "rank": rank, "decoded_token": text}}
            for place, (alternative, alternative_value, alternative_text) in enumerate(
                zip(top_ids, top_values, alternative_texts), 1
            ):
                entry.setdefault(str(alternative), {"logprob": _reported(alternative_value), "rank": place,
                                                    "decoded_token": alternative_text})
            entries.append(entry)
        return entries

    def with_prompt_entries(self, index: int, choice: dict) -> dict:
        """`choice` with its prompt's entries the first time it is sent, when they are asked for."""
        if self.prompt_sent[index]:
            return choice
        self.prompt_sent[index] = True
        return {**choice, "prompt_logprobs": self.prompt_entries(index)}

    def piece(self, index: int, text: str, token_ids: list[int],
              logprobs: TokenLogprobs | None) -> tuple[str, dict | None]:
        """The text and logprobs object of choice `index`'s next piece, whatever comes before
        its completion put first the first time (`before_completion`)."""
        head_text, head_logprobs = self.before_completion(index)  # first: a stream's offsets run on
        body = None if logprobs is None else self.logprobs(index, token_ids, logprobs)
        if head_logprobs is None or body is None:
            return head_text + text, head_logprobs or body
        return head_text + text, {key: head_logprobs[key] + body[key] for key in head_logprobs}

    def before_completion(self, index: int) -> tuple[str, dict | None]:
        """What comes before choice `index`'s completion (completions: the `echo`ed prompt),
        given once: ("", None) after that, or when nothing does."""
        return "", None

    def step_delta(self, index: int, added: StepText) -> dict | None:
        """The streamed choice of one step of choice `index`, None when it adds nothing to send."""
        logprobs = added.logprobs if added.token_ids else None
        text, logprobs = self.piece(index, added.text, added.token_ids, logprobs)
        if not text and logprobs is None:
            return None
        return self.with_prompt_entries(index, self.delta(index, text, logprobs, None))

    def finish_delta(self, index: int) -> dict:
        request = self.requests[index]
        delta = self.delta(index, *self.piece(index, "", [], None), request.finish_reason, request.stop_reason)
        return self.with_prompt_entries(index, delta)

    def token_texts(self, token_ids: list[int], logprobs: TokenLogprobs) -> tuple[list[str], list[list[str]]]:
        """Each token's own text and its alternatives' texts, decoded in one tokenizer call (or
        "token_id:{id}" when the request asks for ids)."""
        flat = [*token_ids, *(i for ids in logprobs.top_ids for i in ids)]
        if self.as_token_ids:
            decoded = iter([f"token_id:{i}" for i in flat])
        else:
            decoded = iter(self.service.tokenizer.batch_decode([[i] for i in flat]))
        texts = [next(decoded) for _ in token_ids]
        return texts, [[next(decoded) for _ in ids] for ids in logprobs.top_ids]

    def chunk(self, choice: dict, **extra) -> dict:
        return {**self._head(self.chunk_object), "choices": [choice], **extra}

    def usage_chunk(self) -> dict:
        return {**self._head(self.chunk_object), "choices": [], "usage": usage(self.requests, self.n)}

    def opening(self, index: int) -> dict | None:
        return None


class _CompletionReply(_Reply):
    object = chunk_object = "text_completion"
    prefix = "cmpl"

    def __init__(self, service: Service, requests: list[GenerationRequest], n: int = 1,
                 echoes: list[str] | None = None, as_token_ids: bool = False, prompt_top: int | None = None):
        """echoes: each choice's prompt text, put before its completion (OpenAI's `echo`); its
        tokens' log-probabilities come first too when the request asks for log-probabilities.
        Each choice carries vLLM's prompt_logprobs when asked (`prompt_top`)."""
        super().__init__(service, requests, n, as_token_ids, prompt_top)
        self.text_offsets = [0] * len(requests)  # of each choice's next token: a stream's run on across chunks
        self.echoes = echoes
        self.echoed = [echoes is None] * len(requests)

    def choice(self, index: int, text: str, logprobs: dict | None, finish_reason: str | None,
               stop_reason: str | int | None = None) -> dict:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason,
                "stop_reason": stop_reason}

    delta = choice

    def before_completion(self, index: int) -> tuple[str, dict | None]:
        if self.echoed[index]:
            return "", None
        self.echoed[index] = True
        request = self.requests[index]
        if request.logprobs is None:
            return self.echoes[index], None
        # The prompt's first token has no context to be drawn from: OpenAI gives it null.
        first_text = self.service.tokenizer.decode([request.prompt_ids[0]])
        first = {"tokens": [first_text], "token_logprobs": [None], "top_logprobs": [None],
                 "text_offset": [self.text_offsets[index]]}
        self.text_offsets[index] += len(first_text)
        echoed = request.prompt_logprobs.narrowed(request.kwargs["logprobs"])
        rest = self.logprobs(index, request.prompt_ids[1:], echoed)
        return self.echoes[index], {key: first[key] + rest[key] for key in first}

    def response(self) -> dict:
        answer = super().response()
        answer["choices"] = [self.with_prompt_entries(i, choice) for i, choice in enumerate(answer["choices"])]
        return answer

    def logprobs(self, index: int, token_ids: list[int], logprobs: TokenLogprobs) -> dict:
        """OpenAI's legacy object: each token's text, log-probability, text offset, and a map
        of the most likely tokens' texts (and the token's own) to their log-probabilities."""
        texts, top_texts = self.token_texts(token_ids, logprobs)
        top = []
        for text, value, alternative_texts, values in zip(texts, logprobs.chosen, top_texts, logprobs.top_values):
            alternatives = dict(zip(alternative_texts, map(_reported, values)))
            top.append({**alternatives, text: _reported(value)})
        offsets = []
        for text in texts:
            offsets.append(self.text_offsets[index])
            self.text_offsets[index] += len(text)
        return {"tokens": texts, "token_logprobs": [_reported(v) for v in logprobs.chosen], "top_logprobs": top,
                "text_offset": offsets}


class _ChatReply(_Reply):
    object, chunk_object = "chat.completion", "chat.completion.chunk"
    prefix = "chatcmpl"

    def __init__(self, *args, tool_calling: ToolCalling | None = None, **kwargs):
        """tool_calling: the reply's text is tool calls (`rayspec.serve.tools`), answered as
        `tool_calls`."""
        super().__init__(*args, **kwargs)
        self.tool_calling = tool_calling
        self.call_ids = [None if tool_calling is None else tool_calling.new_call_id() for _ in self.requests]
        self.call_opened = [False] * len(self.requests)  # a streamed named call's first delta sent
        auto = tool_calling is not None and tool_calling.mode == "auto"
        self.readers = [tool_calling.reader() for _ in self.requests] if auto else None
        self.calls_sent = [0] * len(self.requests)  # a streamed auto reply's

    def choice(self, index: int, text: str, logprobs: dict | None, finish_reason: str | None,
               stop_reason: str | int | None = None) -> dict:
        message = {"role": "assistant", "content": text}
        if self.readers is not None:
            content, calls = self.tool_calling.read(text)
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
            finish_reason = self.tool_calling.finish_reason(finish_reason, called=bool(calls))
        elif self.tool_calling is not None:
            calls = self.tool_calling.calls(text)
            if calls is not None:  # else cut short before a whole list of calls: the text as it is
                if self.tool_calling.mode == "named":
                    calls[0]["id"] = self.call_ids[index]
                message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish_reason = self.tool_calling.finish_reason(finish_reason)
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason,
                "stop_reason": stop_reason}

    def step_delta(self, index: int, added: StepText) -> dict | None:
        calling = self.tool_calling
        if calling is None:
            return super().step_delta(index, added)
        if self.readers is not None:
            delta = self.pieces_delta(index, self.readers[index].push(added.text))
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": None} if delta else None
        if calling.mode == "required" or not added.text:  # a list of calls is sent whole, as it ends
            return None
        call = {"index": 0, "function": {"arguments": added.text}}
        if not self.call_opened[index]:
            self.call_opened[index] = True
            call = {"index": 0, "id": self.call_ids[index], "type": "function",
                    "function": {"name": calling.function, "arguments": added.text}}
        return {"index": index, "delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}

    def finish_delta(self, index: int) -> dict:
        calling = self.tool_calling
        if calling is None:
            return super().finish_delta(index)
        request = self.requests[index]
        if self.readers is not None:
            delta = self.pieces_delta(index, self.readers[index].finish())
            return {"index": index, "delta": delta, "logprobs": None, "stop_reason": request.stop_reason,
                    "finish_reason": calling.finish_reason(request.finish_reason, called=self.calls_sent[index] > 0)}
        delta = {}
        if calling.mode == "required":
            calls = calling.calls(request.text)
            delta = ({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]} if calls is not None
                     else {"content": request.text} if request.text else {})
        return {"index": index, "delta": delta, "logprobs": None,
                "finish_reason": calling.finish_reason(request.finish_reason), "stop_reason": request.stop_reason}

    def pieces_delta(self, index: int, pieces: list) -> dict:
        """The delta of an auto reply's newly read content and calls (the calls numbered on
        from those sent before)."""
        delta = {}
        for piece in pieces:
            if isinstance(piece, str):
                delta["content"] = delta.get("content", "") + piece
                continue
            call = {"index": self.calls_sent[index], **self.tool_calling.parsed_call(piece)}
            delta.setdefault("tool_calls", []).append(call)
            self.calls_sent[index] += 1
        return delta

    def delta(self, index: int, text: str, logprobs: dict | None, finish_reason: str | None,
              stop_reason: str | int | None = None) -> dict:
        return {"index": index, "delta": {"content": text} if text else {}, "logprobs": logprobs,
                "finish_reason": finish_reason, "stop_reason": stop_reason}

    def opening(self, index: int) -> dict:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

    def response(self) -> dict:
        answer = super().response()
        if self.prompt_top is not None:  # vLLM's chat gives them once, beside the choices: one prompt
            answer["prompt_logprobs"] = self.prompt_entries(0)
        return answer

    def logprobs(self, index: int, token_ids: list[int], logprobs: TokenLogprobs) -> dict:
        """OpenAI's chat object: per token its text, log-probability and UTF-8 bytes, and the
        most likely tokens' (as many as `top_logprobs` asked for)."""
        def entry(text: str, value: float) -> dict:
            return {"token": text, "logprob": _reported(value), "bytes": list(text.encode("utf-8"))}

        texts, top_texts = self.token_texts(token_ids, logprobs)
        content = [
            {**entry(text, value), "top_logprobs": [entry(t, v) for t, v in zip(alternative_texts, values)]}
            for text, value, alternative_texts, values in zip(texts, logprobs.chosen, top_texts, logprobs.top_values)
        ]
        return {"content": content, "refusal": None}


def _reported(logprob: float) -> float:
    return max(logprob, LOGPROB_FLOOR)


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


async def _merged(streams: list[StepStream]):
    """(choice index, step) from every stream as each is verified, and (index, None) when a
    stream ends: each stream's steps in order, the streams interleaved."""
    waiting = {asyncio.ensure_future(anext(stream, None)): index for index, stream in enumerate(streams)}
    try:
        while waiting:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=waiting.get):
                index = waiting.pop(task)
                added = task.result()
                if added is not None:
                    waiting[asyncio.ensure_future(anext(streams[index], None))] = index
                yield index, added
    finally:
        for task in waiting:
            task.cancel()


async def _events(reply: _Reply, streams: list[StepStream], include_usage: bool, continuous_usage: bool = False):
    """The server-sent events of a streamed answer, its choices' steps interleaved as they are
    verified; the last choice to finish carries the `rayspec` object.  continuous_usage
    (vLLM's continuous_usage_stats): each chunk carries its choice's usage so far."""

    def extra(index: int) -> dict:
        if continuous_usage:
            return {"usage": usage([reply.requests[index]])}
        return {"usage": None} if include_usage else {}

    try:
        for index in range(len(streams)):
            if (opening := reply.opening(index)) is not None:
                yield _sse(reply.chunk(opening, **extra(index)))
        running = len(streams)
        async for index, added in _merged(streams):
            if added is not None:
                if (delta := reply.step_delta(index, added)) is not None:
                    yield _sse(reply.chunk(delta, **extra(index)))
                continue
            running -= 1
            figures = {} if running else {"rayspec": reply.figures()}
            yield _sse(reply.chunk(reply.finish_delta(index), **figures, **extra(index)))
        if include_usage:
            yield _sse(reply.usage_chunk())
    except Exception as error:  # the status line is sent: the error travels as an event
        yield _sse(error_body(error)[1])
    yield "data: [DONE]\n\n"


class _EventStream(StreamingResponse):
    """Server-sent events that stop the generation when the response ends, however it ends
    (done, failed, or cancelled because the client went away)."""

    media_type = "text/event-stream"

    def __init__(self, events, on_close):
        super().__init__(events, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class _Primed:
    """A step stream whose first step was already awaited."""

    def __init__(self, first, rest: StepStream):
        self.first, self.rest = first, rest

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.first is not None:
            first, self.first = self.first, None
            return first
        return await anext(self.rest)


def _start(service: Service, requests: list[GenerationRequest]) -> list[StepStream]:
    """Every choice's generation started, or none: Overloaded when the slots run out."""
    streams = []
    try:
        for request in requests:
            streams.append(service.start(request))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    return streams


async def _all(awaitables) -> list:
    """Their results, or the first failure with the others cancelled (not left running)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def _drain(stream: StepStream) -> None:
    async for _ in stream:
        pass


async def _answer(reply: _Reply, stream: bool, include_usage: bool, continuous_usage: bool = False) -> Response:
    streams = _start(reply.service, reply.requests)

    def close() -> None:
        for step_stream in streams:
            step_stream.close()

    if not stream:
        try:
            await _all(map(_drain, streams))
        finally:
            close()
        return JSONResponse(reply.response())
    try:  # a request that fails before its choices' first steps gets an HTTP error status
        firsts = await _all(anext(s, None) for s in streams)
    except BaseException:
        close()
        raise
    primed = [_Primed(first, s) if first is not None else s for first, s in zip(firsts, streams)]
    return _EventStream(_events(reply, primed, include_usage, continuous_usage), on_close=close)


# ---------------------------------------------------------------------------- errors


def _error(status: int, message: str, param: str | None = None, code: str | None = None,
           kind: str = "invalid_request_error") -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_body(error: BaseException) -> tuple[int, dict]:
    """(HTTP status, OpenAI error body) for an exception raised while answering."""
    if isinstance(error, ApiError):
        return _error(error.status, error.message, error.param, error.code)
    if isinstance(error, ValueError):  # the engine's and GenerationRequest's word for bad input
        return _error(400, str(error))
    if isinstance(error, Overloaded):
        return _error(429, str(error), code="too_many_requests", kind="rate_limit_error")
    if isinstance(error, RemoteError) and error.worker_full:
        return _error(429, f"a model worker is full: {error}", code="too_many_requests", kind="rate_limit_error")
    if isinstance(error, RemoteError):
        log.error("worker failure: %s", error)
        return _error(503, f"a model worker failed or cannot be reached: {error}", kind="service_unavailable")
    log.error("internal error", exc_info=error)
    return _error(500, f"internal error: {type(error).__name__}: {error}", kind="internal_error")


def _validation_error(error: RequestValidationError) -> ApiError:
    """The first problem of a body that failed validation, in words."""
    problem = error.errors()[0]
    where = [str(part) for part in problem["loc"][1:]]  # loc[0] is "body"
    if problem["type"] == "json_invalid":
        return _bad(f"malformed JSON body: {problem.get('ctx', {}).get('error', problem['msg'])}")
    if not where:
        return _bad(f"the request body must be a JSON object (Content-Type: application/json): {problem['msg']}")
    if problem["type"] == "extra_forbidden":
        return _bad(f"unrecognized request argument: {'.'.join(where)}", where[0])
    where, message = _without_union_tags(where, problem["msg"], error.errors())
    return _bad(f"{'.'.join(where)}: {message}", where[0])


def _is_union_tag(part: str) -> bool:
    """Whether a location part is pydantic's name of one type of a union ("str", "list[str]")
    rather than a field name or an index."""
    return part.split("[")[0] in ("str", "int", "float", "bool", "list", "dict") or part[:1].isupper()


def _without_union_tags(where: list[str], message: str, problems: list[dict]) -> tuple[list[str], str]:
    """The place and message of a problem with a field that takes several types (`stop`: a
    string or a list of strings) as a client reads them: pydantic reports one problem per type,
    each under the type's name ("stop.str", "stop.list[str].0").  When the input got inside
    one type (a list holding a number), that type's problem, its name dropped ("stop.0: Input
    should be a valid string"); else the types it could have been ("stop: Input should be str
    or list[str]")."""
    tags = [i for i, part in enumerate(where) if _is_union_tag(part)]
    if not tags:
        return where, message
    field = where[:tags[0]]
    branches = [[str(part) for part in p["loc"][1:]] + [p["msg"]] for p in problems]
    branches = [b for b in branches if b[:len(field)] == field and len(b) > len(field) + 1]
    deepest = max(branches, key=len)
    if len(deepest) > len(field) + 2:  # the field's name, the type's, then a place inside it
        inside = [part for part in deepest[len(field) + 1:-1] if not _is_union_tag(part)]
        return field + inside, deepest[-1]
    kinds = list(dict.fromkeys(b[len(field)] for b in branches))
    return field, f"Input should be {' or '.join(kinds)}"


_ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize",
              "/tokenizer_info", "/v1/models", "/health", "/metrics")


class _RequireKey:
    """ASGI middleware answering 401, before anything is read, to a request without
    `Authorization: Bearer <key>` — every path but the probes, /health and /metrics."""

    OPEN = ("/health", "/metrics")

    def __init__(self, app, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in self.OPEN:
            return await self.app(scope, receive, send)
        message = key_refusal(dict(scope["headers"]).get(b"authorization", b""), self.expected,
                              "it as Authorization: Bearer <key>")
        if message is None:
            return await self.app(scope, receive, send)
        status, body = _error(401, message, code="invalid_api_key")
        await JSONResponse(body, status_code=status, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)


class _AnswerFailures:
    """ASGI middleware answering an unexpected exception with a 500 and its OpenAI error body,
    and going on.  (Starlette answers those from its outermost layer and then re-raises, so the
    server drops the connection: a client's next request on it, from a connection pool such as
    the `openai` client's, would fail too.)  A failure after the response has started is
    re-raised: nothing else can be sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_and_note(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except Exception as error:
            if started:
                raise
            status, body = error_body(error)
            await JSONResponse(body, status_code=status)(scope, receive, send)


MAX_REQUEST_ID_CHARS = 256


class _RequestIds:
    """ASGI middleware giving every request an id — the client's `X-Request-Id` header when it
    sends a usable one (1-256 printable ASCII characters; another is replaced), else a fresh
    one — and answering it in the response's `X-Request-Id`, as vLLM does with
    --enable-request-id-headers.  Generations take it as their request id: it names them in the
    logs and in their responses' ids (`cmpl-<id>`, `chatcmpl-<id>`)."""

    def __init__(self, app, answer: bool = True):
        self.app, self.answer = app, answer

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"x-request-id", b"")
        usable = 0 < len(given) <= MAX_REQUEST_ID_CHARS and all(32 < byte < 127 for byte in given)
        request_id = given.decode() if usable else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message):
            if self.answer and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)


class _CountResponses:
    """ASGI middleware counting answered requests by endpoint and status (streams included)."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            path = scope["path"]
            endpoint = path if path in _ENDPOINTS else "/v1/models/{model}" if path.startswith("/v1/models/") else "other"
            self.metrics.observe_response(endpoint, status)


class _LimitBodies:
    """ASGI middleware answering 413 to a request whose body is over `limit` bytes, before the
    app reads any of it: by its Content-Length or, for a body sent in chunks, as soon as more
    than `limit` bytes have arrived (the chunks are held, then handed to the app whole)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await self._refuse(f"{int(length)} bytes", scope, receive, send)
        if b"chunked" not in headers.get(b"transfer-encoding", b"").lower():
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._refuse(f"more than {self.limit} bytes", scope, receive, send)
            if not message.get("more_body"):
                break
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay():
            nonlocal whole
            if whole is None:
                return await receive()  # after the body: the disconnect, when it comes
            message, whole = whole, None
            return message

        return await self.app(scope, replay, send)

    async def _refuse(self, size: str, scope, receive, send) -> None:
        message = (f"the request body has {size}, more than this service takes ({self.limit} bytes, "
                   "limits.max_request_bytes)")
        status, body = _error(413, message, code="request_too_large")
        response = JSONResponse(body, status_code=status, headers={"Connection": "close"})
        await response(scope, receive, send)


# ---------------------------------------------------------------------------- the app


def create_app(service: Service, answer_request_ids: bool = True) -> FastAPI:
    """The app over `service`.  answer_request_ids: write the `X-Request-Id` response header
    (False behind Ray Serve, whose proxy writes it: the id it hands the app, the client's own
    or one it made)."""
    app = FastAPI(title="rayspec", summary="Tree speculative decoding, OpenAI-compatible")
    app.state.service = service
    app.add_middleware(_LimitBodies, limit=service.limits.max_request_bytes)
    if service.api_key:  # outside the body limit: a request without the key is refused unread
        app.add_middleware(_RequireKey, key=service.api_key)
    app.add_middleware(_AnswerFailures)
    app.add_middleware(_RequestIds, answer=answer_request_ids)  # outside the refusals: they carry the id too
    app.add_middleware(_CountResponses, metrics=service.metrics)  # added last: outermost, it counts the 413s too

    async def answer_error(request: Request, error: Exception) -> JSONResponse:
        if isinstance(error, RequestValidationError):
            error = _validation_error(error)
        elif isinstance(error, StarletteHTTPException):
            detail = f"{error.detail} ({request.method} {request.url.path})" if error.status_code in (404, 405) else error.detail
            error = ApiError(error.status_code, str(detail))
        status, body = error_body(error)
        return JSONResponse(body, status_code=status)

    for kind in (RequestValidationError, StarletteHTTPException, ApiError, ValueError, Overloaded, RemoteError):
        app.add_exception_handler(kind, answer_error)  # anything else: `_AnswerFailures`

    def check_model(model: str | None) -> None:
        if model not in (None, service.model_id):
            raise ApiError(404, f"the model {model!r} does not exist; this service serves {service.model_id!r}",
                           "model", "model_not_found")

    def max_tokens_field(value: int | None) -> dict:
        return {} if value is None else {"max_tokens": value}

    async def choices(body: _GenerationBody, prompts: list[dict], **fields) -> list[GenerationRequest]:
        """One generation per prompt and choice (`n` per prompt, prompt by prompt), run side by
        side: a prompt's choice i is seeded with the request's seed + i — the completion a
        request with that prompt and seed gets — and unseeded choices draw a seed each."""
        n, seed = body.n or 1, body.seed
        limit = service.limits.max_concurrent_requests
        if len(prompts) * n > limit:
            if len(prompts) == 1:
                raise _bad(f"n={n} asks for more completions than this service runs at once ({limit})", "n")
            raise _bad(f"{len(prompts)} prompts × n={n} ask for more completions than this service runs at once "
                       f"({limit}); send fewer prompts per request", "prompt")
        if seed is not None and seed + n > 2**63:  # the int64 a worker's session is keyed by
            raise _bad("seed + n - 1 must stay below 2^63: choice i is seeded with seed + i", "seed")
        if fields.get("structured_output") is not None:
            try:  # compiled off the event loop (a large schema takes seconds), once for all the choices
                await run_in_threadpool(service.compile_structured, fields["structured_output"])
            except ValueError as error:
                raise _bad(str(error), body.structured_field()) from None
        requests = []
        for index, prompt in enumerate(prompts):
            try:
                first = service.request(seed=seed, **prompt, **fields)
            except ValueError as error:
                if len(prompts) == 1:
                    raise
                raise _bad(f"prompt {index} of the batch: {error}", "prompt") from None
            same_prompt = {**fields, "prompt_ids": first.prompt_ids}  # tokenized once
            requests += [first] + [service.request(seed=None if seed is None else seed + i, **same_prompt)
                                   for i in range(1, n)]
        return requests

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, http: Request):
        check_model(body.model)
        body.refuse_unsupported()
        prompt_only = bool(body.echo) and body.max_tokens == 0
        prompts = body.prompts()
        requests = await choices(
            body, prompts, max_tokens=None if prompt_only else body.max_tokens,
            default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS, **body.generation_fields(), prompt_only=prompt_only,
            add_special_tokens=body.add_special_tokens, request_id=http.state.request_id,
        )
        echoes = None
        if body.echo:
            # the text of the prompt the model read: a truncated prompt's kept tokens
            n = body.n or 1
            echoes = [
                prompt["prompt"] if "prompt" in prompt and body.truncate_prompt_tokens is None
                else service.tokenizer.decode(requests[index * n].prompt_ids)
                for index, prompt in enumerate(prompts) for _ in range(n)
            ]
        reply = _CompletionReply(service, requests, body.n or 1, echoes, bool(body.return_tokens_as_token_ids),
                                 body.prompt_logprobs)
        return await _answer(reply, bool(body.stream), **_usage_options(body))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, http: Request):
        check_model(body.model)
        body.refuse_unsupported()
        prompt = body.prompt(service)
        calling = tool_calling_read_by_service(body.tool_calling(), service)
        fields = body.generation_fields()
        if calling is not None:
            fields["skip_special_tokens"] = calling.skip_special_tokens(fields["skip_special_tokens"])
        requests = await choices(
            body, [{"prompt": prompt}], **max_tokens_field(body.max_completion_tokens or body.max_tokens),
            **fields, add_special_tokens=bool(body.add_special_tokens),  # the template writes them
            request_id=http.state.request_id,
        )
        reply = _ChatReply(service, requests, body.n or 1, bool(body.return_tokens_as_token_ids), body.prompt_logprobs,
                           tool_calling=calling)
        return await _answer(reply, bool(body.stream), **_usage_options(body))

    @app.post("/tokenize")
    async def tokenize(body: TokenizeBody):
        """vLLM's: the token ids a completion (prompt) or chat (messages) request would read."""
        check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise _bad("give exactly one of prompt and messages", "prompt")
        if body.messages is not None:
            text = _render(service, body.messages, body.add_generation_prompt, body.continue_final_message,
                           body.chat_template_kwargs)
            special = bool(body.add_special_tokens)
        else:
            text, special = body.prompt, body.add_special_tokens is not False
        try:
            check_text(text, "the prompt")
        except ValueError as error:
            raise _bad(str(error), "prompt" if body.messages is None else "messages") from None
        tokens = await run_in_threadpool(service.tokenizer.encode, text, add_special_tokens=special)
        answer = {"count": len(tokens), "max_model_len": service.engine.target.context_length, "tokens": tokens}
        if body.return_token_strs:
            answer["token_strs"] = service.tokenizer.convert_ids_to_tokens(tokens)
        return answer

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeBody):
        """vLLM's: the text of token ids, special tokens included."""
        check_model(body.model)
        vocab = service.engine.target.vocab_size
        if bad := [t for t in body.tokens if not 0 <= t < vocab]:
            raise _bad(f"token ids out of the vocabulary [0, {vocab}): {bad[:5]}", "tokens")
        return {"prompt": await run_in_threadpool(service.tokenizer.decode, body.tokens)}

    from rayspec.serve.responses import add_responses_api  # here: it builds on this module

    add_responses_api(app, service, check_model)

    @app.get("/tokenizer_info")
    async def tokenizer_info():
        """vLLM's: what a client needs to tokenize and render chats as the service does (with
        /tokenize and /detokenize, lm-eval-harness's remote tokenizer)."""
        tokenizer = service.tokenizer
        return {
            "tokenizer_class": type(tokenizer).__name__, "eos_token": tokenizer.eos_token,
            "bos_token": tokenizer.bos_token, "pad_token": tokenizer.pad_token, "unk_token": tokenizer.unk_token,
            "chat_template": service.chat_template(), "model_max_length": service.engine.target.context_length,
        }

    def model_card() -> dict:
        return {"id": service.model_id, "object": "model", "created": service.created, "owned_by": "rayspec",
                "root": service.model_id, "max_model_len": service.engine.target.context_length}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str):
        check_model(model)
        return model_card()

    @app.get("/health")
    async def health():
        workers = await run_in_threadpool(service.health)
        down = [name for name, status in workers.items() if status != "SERVING"]
        status = "ok" if not down else "degraded" if all(name.startswith("drafter ") for name in down) \
            else "unavailable"
        return JSONResponse({"status": status, "workers": workers}, status_code=503 if status == "unavailable" else 200)

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE)

    return app


def _usage_options(body: _GenerationBody) -> dict:
    """Whether a stream ends with a usage chunk (`include_usage`) and, with it, whether every
    chunk carries its choice's usage so far (vLLM's `continuous_usage_stats`)."""
    options = body.stream_options
    include = bool(body.stream and options and options.include_usage)
    return {"include_usage": include, "continuous_usage": include and bool(options.continuous_usage_stats)}
