"""The HTTP front end's request bodies (pydantic, strict, unknown fields refused): what each
endpoint accepts, and how a body becomes the engine's generation fields.  The fields
themselves are listed in `rayspec.serve.http`."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rayspec.engine.interfaces import MAX_LOGPROBS
from rayspec.engine.policy import check_tree_spec
from rayspec.engine.structured import StructuredOutput
from rayspec.request_id import REQUEST_ID_RULE, usable_request_id
from rayspec.serve.errors import bad_request
from rayspec.serve.service import ChatRenderError, Service
from rayspec.serve.tools import ToolCalling, ToolError
from rayspec.unicode_text import check_text
from rayspec.verify.processing import MAX_PRESENCE_OR_FREQUENCY_PENALTY as PENALTY_BOUND



class StrictBody(BaseModel):
    # strict: "5" is not 5; forbid: an unknown field is refused rather than ignored.
    model_config = ConfigDict(strict=True, extra="forbid")


class RayspecOptions(StrictBody):
    verifier: str | None = None
    tree: str | None = None
    verifier_params: dict[str, Any] | None = None


class StreamOptions(StrictBody):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM's: every chunk carries its choice's usage so far
    include_obfuscation: bool | None = None  # OpenAI's padding against side channels: accepted, none added


class PromptCacheOptions(StrictBody):
    """OpenAI's prompt_cache_options: how long its cache keeps a prompt's prefix (no answer changes)."""
    mode: Literal["implicit", "explicit"] | None = None
    ttl: Literal["30m", "12h"] | None = None


def refuse_unless_default(asked: list[tuple[str, bool, str]]) -> None:
    """A 400 naming the first field given other than at its default: (field, at its default, why)."""
    for field, at_default, why in asked:
        if not at_default:
            raise bad_request(f"{field}: {why}", field)


class GenerationBody(StrictBody):
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
    allowed_token_ids: list[int] | None = Field(None, min_length=1)  # [] allows no token: refused, as vLLM does
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
    # vLLM's: only a slow tokenizer spaces special tokens apart; transformers 5 loads fast ones
    # (a `TokenizersBackend`), whose text is the same either way, as in vLLM with a fast one
    spaces_between_special_tokens: bool | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None  # OpenAI's user id for abuse monitoring
    prompt_cache_key: str | None = None  # OpenAI's hint for its prompt cache
    # vLLM's: the generation's id when no X-Request-Id header names it; the scheduling
    # priority and beam search (with its length penalty), accepted at their defaults
    request_id: str | None = None
    priority: int | None = None
    use_beam_search: bool | None = None
    length_penalty: float | None = None
    rayspec: RayspecOptions | None = None

    def refuse_unsupported(self) -> None:
        """Refuse, with a 400 naming the field, what the endpoint does not implement, or a field
        that only another makes sense of."""
        if self.stream_options is not None and not self.stream:  # as OpenAI and vLLM refuse it
            raise bad_request("stream_options is only allowed with stream: true", "stream_options")
        if self.request_id is not None and not usable_request_id(self.request_id):
            raise bad_request(REQUEST_ID_RULE, "request_id")
        refuse_unless_default([
            ("priority", self.priority in (None, 0),
             "requests are served in the order they come: only 0 (the default)"),
            ("use_beam_search", not self.use_beam_search, "beam search is not supported"),
            ("length_penalty", self.length_penalty in (None, 1.0),
             "a length penalty weighs beams, and beam search is not supported: only 1 (the default)"),
        ])

    def generation_fields(self) -> dict:
        """The `GenerationRequest` fields other than the prompt and max_tokens."""
        options = self.rayspec or RayspecOptions()
        if options.tree:
            check_tree(options.tree)
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
            raise bad_request(GRAMMAR_UNSUPPORTED, "guided_grammar")
        given = {field: kind for field, kind in given.items() if kind is not None}  # not response_format text
        if len(given) > 1:
            raise bad_request(f"give one structured output, not {len(given)}: {', '.join(given)}", next(iter(given)))
        for field, kind in given.items():
            try:
                return StructuredOutput(**kind)
            except ValueError as error:
                raise bad_request(f"{field}: {error}", field) from None
        return None

    def predicted_text(self) -> str | None:
        """The text of OpenAI's `prediction` ({"type": "content", "content": text or text
        parts}), None without one."""
        if self.prediction is None:
            return None
        text = joined_text(self.prediction.get("content"))
        if self.prediction.get("type") != "content" or text is None or set(self.prediction) - {"type", "content"}:
            raise bad_request('prediction must be {"type": "content", "content": text, or a list of {"type": "text", '
                              '"text": ...} parts}', "prediction")
        return text or None

    def token_biases(self) -> dict[int, float] | None:
        """`logit_bias` with its keys, token ids written as JSON strings as OpenAI's are, read."""
        if not self.logit_bias:
            return None
        biases, keys = {}, {}
        for key, bias in self.logit_bias.items():
            try:
                token = int(key)
            except ValueError:
                raise bad_request("logit_bias keys must be token ids, such as \"50256\"", "logit_bias") from None
            if token in biases:  # "5" and "05": which bias was meant is not known
                raise bad_request(f"logit_bias names token {token} twice ({keys[token]!r} and {key!r})", "logit_bias")
            biases[token], keys[token] = bias, key
        return biases

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
            raise bad_request(f'{field}.json_schema must hold the schema: '
                              '{"name": ..., "schema": {...}, "strict": ...}', field)
        return {"json_schema": spec["schema"]}
    raise bad_request(f'{field} must be {{"type": "text"}}, {{"type": "json_object"}} or {{"type": "json_schema", '
                      f'"json_schema": {{"name": ..., "schema": {{...}}}}}}', field)


def _structured_outputs(value: dict) -> dict:
    """The `StructuredOutput` fields of vLLM's structured_outputs."""
    if "grammar" in value:
        raise bad_request(GRAMMAR_UNSUPPORTED, "structured_outputs")
    names = {"json": "json_schema", "regex": "regex", "choice": "choice", "json_object": "json_object"}
    unknown = set(value) - set(names)
    if unknown or len(value) != 1:
        raise bad_request("structured_outputs takes exactly one of json, regex, choice and json_object"
                          + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else ""), "structured_outputs")
    (key, spec), = value.items()
    if key == "json_object" and spec is not True:
        raise bad_request("structured_outputs.json_object must be true", "structured_outputs")
    return {names[key]: spec}


def check_tree(spec: str) -> None:
    """`GenerationRequest`'s check of the tree, run here first so the error names the field."""
    try:
        check_tree_spec(spec)
    except ValueError as error:
        raise bad_request(f"rayspec.tree: {error}", "rayspec.tree") from None


class CompletionBody(GenerationBody):
    prompt: Any  # text, token ids, or a batch of one of those: checked by `prompts`
    max_tokens: int | None = Field(None, ge=0)  # 0 with echo: the prompt scored, nothing generated
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    best_of: int | None = None
    suffix: str | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.max_tokens == 0 and not self.echo:
            raise bad_request("max_tokens must be at least 1 (0 only with echo: true, which returns the prompt "
                              "and, with logprobs, its tokens' log-probabilities)", "max_tokens")
        if self.best_of not in (None, 1):
            raise bad_request("best_of: only 1 is supported", "best_of")
        if self.suffix:
            raise bad_request("suffix (insertion) is not supported", "suffix")

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
        raise bad_request("prompt must be a string, a non-empty list of token ids, or a non-empty list (a batch) of "
                          "strings or of token id lists", "prompt")


def _is_prompt(prompt) -> bool:
    """Text, or a non-empty list of token ids (bool is an int to Python, not to JSON)."""
    return isinstance(prompt, str) or (
        isinstance(prompt, list) and bool(prompt) and all(type(t) is int for t in prompt)
    )


def _prompt_field(prompt: str | list[int]) -> dict:
    return {"prompt": prompt} if isinstance(prompt, str) else {"prompt_ids": prompt}


def text_parts(content, kinds=("text",), refusals: bool = False) -> list[str] | None:
    """The texts of OpenAI's list of content parts of `kinds` ({"type": kind, "text": ...}) —
    with `refusals`, an assistant's refusal parts too ({"type": "refusal", "refusal": ...}, the
    text it refused with, as vLLM reads them); None for anything else."""
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        key = "refusal" if refusals and kind == "refusal" else "text" if kind in kinds else None
        if key is None or not isinstance(part.get(key), str):
            return None
        texts.append(part[key])
    return texts


def template_parts(texts: list[str]) -> list[dict]:
    """Texts of a message's content parts as `Service.render_chat` takes them: a text part each,
    which a template that walks parts is given each and one that writes a string a line each."""
    return [{"type": "text", "text": text} for text in texts]


def joined_text(content, separator: str = "", kinds=("text",), refusals: bool = False) -> str | None:
    """OpenAI's text content: a string, or a list of text parts (`text_parts`) joined by
    `separator`; None for anything else."""
    if isinstance(content, str):
        return content
    texts = text_parts(content, kinds, refusals)
    return None if texts is None else separator.join(texts)


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")  # e.g. `refusal: null` from clients
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant's calls, given back in the conversation
    tool_call_id: str | None = None  # a tool message: the call it answers
    function_call: Any = None  # OpenAI's deprecated form of an assistant's tool_calls: refused, not dropped
    refusal: str | None = None  # an assistant's refusal, given back in the conversation: its text
    audio: Any = None  # an assistant's audio answer, given back: none is made here, so refused
    _parts: list[str] | None = PrivateAttr(None)  # the content's parts' texts, when it came as parts

    @field_validator("content")
    @classmethod
    def _text(cls, content) -> str:
        """The message's text: a string, or text parts, a line each (as vLLM joins them) — the
        Responses API's input_text and output_text parts too, which vLLM's chat reads as text; a
        refusal part (OpenAI's, an assistant's) is the text it refused with, as vLLM reads it."""
        text = "" if content is None else joined_text(content, "\n", kinds=("text", "input_text", "output_text"),
                                                      refusals=True)
        if text is None:
            raise ValueError('only text content is supported: a string, or a list of {"type": "text", "text": ...} '
                             'parts')
        return check_text(text, "the content")

    @model_validator(mode="wrap")
    @classmethod
    def _keep_parts(cls, data, handler) -> "Message":
        """The message, keeping the texts of its content's parts: a chat template that walks a
        message's parts is given each (vLLM's "openai" content format), one that writes a string
        their joined text."""
        message = handler(data)
        content = data.get("content") if isinstance(data, dict) else None
        message._parts = text_parts(content, kinds=("text", "input_text", "output_text"), refusals=True)
        return message

    @model_validator(mode="after")
    def _shape_of_its_role(self) -> "Message":
        """OpenAI's: every message but an assistant's has content (one that calls tools may
        have none), and only an assistant's carries tool_calls."""
        if self.role != "assistant" and "content" not in self.model_fields_set:
            raise ValueError(f"a {self.role} message needs content")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"tool_calls are an assistant message's, not a {self.role} message's")
        if self.function_call is not None:
            raise ValueError("function_call (deprecated by OpenAI) is not supported: give the call as tool_calls")
        if self.audio is not None:
            raise ValueError("audio is not supported (text only): give the assistant's answer as content")
        if self.refusal is not None:
            if self.role != "assistant":
                raise ValueError(f"a refusal is an assistant message's, not a {self.role} message's")
            if self.content:
                raise ValueError("an assistant message has content or a refusal, not both")
            self.content = check_text(self.refusal, "the refusal")  # what the assistant said
        return self

    def as_template_input(self) -> dict:
        """The message as `Service.render_chat` takes it: its content a string, or the list of
        text parts it came as."""
        content = self.content
        if self._parts is not None and "\n".join(self._parts) == content:  # not a refusal given beside no parts
            content = template_parts(self._parts)
        message = {"role": self.role, "content": content}
        if self.name is not None:  # a participant's name, which some templates write (vLLM passes it too)
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class ChatBody(GenerationBody):
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
    echo: bool | None = None  # vLLM's: the last message's text before the reply (`echoed`)
    # OpenAI's prompt cache's lifetime: accepted, without effect on the answer
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    # OpenAI's, accepted at their defaults (null, or what null means) and refused otherwise
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None

    def prompt(self, service: Service) -> str:
        """The conversation rendered by the model's chat template, as this request asks (the
        tools shown to it)."""
        return render_messages(service, self.messages, self.add_generation_prompt, self.continue_final_message,
                               self.chat_template_kwargs, self.tools)

    def echoed(self) -> str | None:
        """vLLM's chat `echo`: the text put before the reply's, the last message's when it is
        of the reply's role — an assistant's, or with `add_generation_prompt: false` whatever
        its role, vLLM then replying in it — else none; None without echo."""
        if not self.echo:
            return None
        last = self.messages[-1]
        return last.content if last.role == "assistant" or not self.add_generation_prompt else ""

    def tool_calling(self) -> ToolCalling | None:
        """How the reply calls the tools (`rayspec.serve.tools`), None for a text reply."""
        try:
            return ToolCalling.of(self.tools, self.tool_choice, self.parallel_tool_calls)
        except ToolError as error:
            raise bad_request(str(error), error.field) from None

    def generation_fields(self) -> dict:
        fields = super().generation_fields()
        calling = self.tool_calling()
        forced = None if calling is None else calling.structured_output()
        if forced is not None:
            if fields["structured_output"] is not None:
                forcing = "required" if calling.mode == "required" else "naming a function"
                raise bad_request(f"tool_choice {forcing} makes the reply JSON already: give no "
                                  f"{self.structured_field()} with it", "tool_choice")
            fields["structured_output"] = forced
        return fields

    def structured_field(self) -> str:
        given = any(getattr(self, field) is not None for field in self.STRUCTURED_FIELDS)
        calling = None if given else self.tool_calling()
        return "tools" if calling is not None and calling.mode != "auto" else super().structured_field()

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        refuse_unless_default([
            ("audio", self.audio is None, 'audio output is not supported (text only: modalities ["text"])'),
            ("modalities", self.modalities in (None, ["text"]), 'only text output is supported: ["text"]'),
            ("reasoning_effort", self.reasoning_effort is None, "this model does not reason"),
            ("verbosity", self.verbosity in (None, "medium"), 'only "medium" (the default) is supported'),
            ("web_search_options", self.web_search_options is None, "web search is not supported"),
            ("moderation", self.moderation is None, "moderation is not supported"),
        ])
        if self.top_logprobs is not None and not self.logprobs:
            raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
        if self.prompt_logprobs is not None and self.stream:
            raise bad_request("prompt_logprobs: a chat gives them in its non-streamed response only "
                              "(completions stream them too)", "prompt_logprobs")
        if self.functions or self.function_call not in (None, "none"):
            raise bad_request("functions and function_call (deprecated by OpenAI) are not supported: give tools and "
                              "tool_choice", "functions")
        if self.logprobs and self.tool_calling() is not None:
            raise bad_request("logprobs are not given with tool calls", "logprobs")
        if self.echo and self.tool_calling() is not None:  # the echo would be read as the reply's calls
            raise bad_request("echo is not given with tool calls", "echo")
        if self.max_tokens and self.max_completion_tokens and self.max_tokens != self.max_completion_tokens:
            raise bad_request("max_tokens and max_completion_tokens disagree; give one", "max_completion_tokens")

    def alternatives(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


def tool_calling_read_by_service(calling: ToolCalling | None, service: Service) -> ToolCalling | None:
    """A request's tool calling, an auto choice's reply read by the service's parser; a 400
    when the service has none."""
    try:
        return None if calling is None else calling.read_by(service.tool_parser)
    except ToolError as error:
        raise bad_request(str(error), error.field) from None


def render_messages(service: Service, messages: list[Message], add_generation_prompt: bool,
                    continue_final_message: bool, template_kwargs: dict | None, tools: list | None = None) -> str:
    try:
        return service.render_chat([m.as_template_input() for m in messages], add_generation_prompt,
                                   continue_final_message, template_kwargs, tools)
    except ChatRenderError as error:
        raise bad_request(str(error), error.field) from None


class TokenizeBody(StrictBody):
    """vLLM's /tokenize: a completion prompt, or a conversation as the chat endpoint renders it."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None  # as the endpoints' defaults: prompt true, messages false
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = None  # vLLM's: shown to the chat template, as the chat endpoint does
    return_token_strs: bool | None = False  # vLLM's type: clients writing out their unset fields send null

    def check_tools(self) -> None:
        """Tools the chat endpoint refuses are refused here too, a 400 naming tools: else a
        count comes back for a conversation no chat request can send, or the template's own
        error, which names the messages."""
        try:
            ToolCalling.of(self.tools, "none", None)  # "none": the tools' checks, and no calling
        except ToolError as error:
            raise bad_request(str(error), error.field) from None


class DetokenizeBody(StrictBody):
    model: str | None = None
    tokens: list[int]
