"""Typed requests and results of the `rayspec.v1.Generation` service, and their one
conversion to and from protobuf (`protos/rayspec/v1/generation.proto`).

`verifier_params` travel as a msgpack map (never pickle); the server can decode a request
with `GenerateRequest.from_proto`, which refuses malformed parameters with a ValueError.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import msgpack

from rayspec.client.errors import InvalidRequestError
from rayspec.request_id import check_request_id
from rayspec.rpc.generated import generation_pb2 as pb
from rayspec.unicode_text import check_text


def pack_params(params: Mapping[str, Any]) -> bytes:
    try:
        return msgpack.packb(dict(params), use_bin_type=True) if params else b""
    except (TypeError, ValueError, OverflowError) as error:
        raise TypeError(f"verifier_params must be msgpack-serialisable: {error}") from None


def unpack_params(data: bytes) -> dict[str, Any]:
    if not data:
        return {}
    try:
        params = msgpack.unpackb(data, raw=False)
    except (ValueError, msgpack.UnpackException) as error:
        raise ValueError(f"verifier_params is not valid msgpack: {error}") from None
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError("verifier_params must be a msgpack map with string keys")
    return params


# Request fields a server ignores (proto3) unless it knows them, and then answers another
# request: those added after Generation's first release that had no `Info`.  A server lists
# those it knows in `Info`; the SDK refuses to send one to a server that does not.
GENERATION_FEATURES = ("bad_words", "add_special_tokens", "truncate_prompt_tokens", "prediction", "structured_output")
STRUCTURED_KINDS = ("json_schema", "json_object", "regex", "choice")

# The request's scalar fields by the type of their proto field (each None: unset, the default).
INT32_FIELDS = ("max_tokens", "top_k", "min_tokens", "logprobs", "prompt_logprobs", "truncate_prompt_tokens")
INT64_FIELDS = ("seed",)
FLOAT_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")
BOOL_FIELDS = ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens", "add_special_tokens")
STRING_FIELDS = ("verifier", "tree", "request_id")
TOKEN_ID_FIELDS = ("prompt", "prediction", "stop_token_ids", "allowed_token_ids", "logit_bias")
INT32_RANGE, INT64_RANGE = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1)
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.401298464324817e-45  # the smallest positive float32 (a subnormal)


class GenerationParams(TypedDict, total=False):
    """The keyword arguments of `Client.generate` and `stream` (and `AsyncClient`'s): the
    fields of `GenerateRequest`, which documents them, but the prompt.  Type checkers and
    IDEs read them from the methods' `**params: Unpack[GenerationParams]`."""

    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    presence_penalty: float | None
    frequency_penalty: float | None
    repetition_penalty: float | None
    logit_bias: Mapping[int, float] | None
    min_p: float | None
    min_tokens: int | None
    stop_token_ids: Sequence[int] | None
    ignore_eos: bool | None
    seed: int | None
    stop: str | Sequence[str] | None
    verifier: str | None
    tree: str | None
    verifier_params: Mapping[str, Any] | None
    request_id: str | None
    logprobs: int | None
    prompt_logprobs: int | None
    include_stop_str_in_output: bool | None
    skip_special_tokens: bool | None
    allowed_token_ids: Sequence[int] | None
    bad_words: str | Sequence[str] | None
    add_special_tokens: bool | None
    truncate_prompt_tokens: int | None
    prediction: str | Sequence[int] | None
    structured_output: Mapping[str, Any] | None


@dataclass(frozen=True)
class GenerateRequest:
    """One generation request.  `None` leaves a parameter to the server's default.

    prompt: text, or token ids.  max_tokens: new tokens at most, 1 or more.  temperature, top_p, top_k:
    sampling, applied identically to target and drafter.  seed: makes the output
    reproducible (and the request retryable); without one the server draws a seed and
    returns it.  stop: strings that end generation (not included in the text).  verifier,
    tree: a name of `rayspec.verify` and a tree spec such as "kary:2x4".  verifier_params:
    keyword arguments of the verifier.  request_id: echoed in the response and the logs.
    logprobs: k (0-20) to get each token's log-probability and the k most likely tokens' at
    its position (`TokenLogprob`).  prompt_logprobs: the same for the prompt's tokens after
    the first (the first has no context to be drawn from).  presence_penalty and
    frequency_penalty (OpenAI's, in [-2, 2]), repetition_penalty (HF's and vLLM's, > 0, 1 is
    off), logit_bias ({token id: bias in [-100, 100]}) and min_p (vLLM's, in [0, 1]) change
    the law sampled from, and the output follows that law exactly.  vLLM's min_tokens: stop
    tokens cannot be drawn, and stop strings do not stop, before the completion has that
    many tokens; stop_token_ids: token ids that end the completion as EOS does (not
    included); ignore_eos: EOS does not end it.  include_stop_str_in_output: the text ends
    after the stop string that ended it rather than before (vLLM's); skip_special_tokens:
    special tokens have no text (default True, as in vLLM).  allowed_token_ids: the only
    tokens that can be drawn (vLLM's; empty: all).  bad_words: words the completion never
    contains (vLLM's: each word's tokens, at the start of the text and after a space).
    add_special_tokens: a text prompt is tokenized with the tokenizer's special tokens (a BOS
    for Llama-style tokenizers; default True, as vLLM's completions and HF's `encode`).
    truncate_prompt_tokens: k keeps the prompt's last k tokens, -1 as many as the model's
    context holds (vLLM's).  prediction: the completion expected, text or token ids (OpenAI's
    Predicted Outputs): drafted as chains wherever the completion follows it, so a right
    prediction makes long steps; the output follows the target's law all the same.
    structured_output: what the completion must be (vLLM's guided decoding), a mapping with
    one of {"json_schema": a schema (a dict or its JSON text)}, {"json_object": True},
    {"regex": a regular expression}, {"choice": [strings]}; the output follows the target's
    law restricted to it, exactly (`rayspec.engine.structured`).
    """

    prompt: str | tuple[int, ...]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    min_p: float | None = None
    min_tokens: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    verifier: str | None = None
    tree: str | None = None
    verifier_params: Mapping[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    allowed_token_ids: tuple[int, ...] = ()
    bad_words: tuple[str, ...] = ()
    add_special_tokens: bool | None = None
    truncate_prompt_tokens: int | None = None
    prediction: str | tuple[int, ...] | None = None
    structured_output: Mapping[str, Any] | None = None

    def __post_init__(self):
        # frozen: normalise through object.__setattr__ so that equal requests compare equal
        object.__setattr__(self, "prompt", _prompt(self.prompt))
        if self.prediction is not None:
            object.__setattr__(self, "prediction", _prompt(self.prediction, "prediction") or None)
        for name in ("stop", "bad_words"):
            texts = getattr(self, name)
            try:
                texts = (texts,) if isinstance(texts, str) else tuple(texts or ())
            except TypeError:  # not a sequence at all (stop=5): named, not "'int' object is not iterable"
                texts = (texts,)
            object.__setattr__(self, name, texts)
            if not all(isinstance(s, str) for s in texts):
                raise TypeError(f"{name} must be a string or a sequence of strings")
        for name, empty in (("logit_bias", {}), ("verifier_params", {}), ("stop_token_ids", ()),
                            ("allowed_token_ids", ())):
            if getattr(self, name) is None:  # a keyword given as None leaves it to the default
                object.__setattr__(self, name, empty)
        if not isinstance(self.verifier_params, Mapping):
            raise TypeError(f"verifier_params must be a mapping, got {type(self.verifier_params).__name__}")
        try:
            object.__setattr__(self, "logit_bias", {operator.index(t): float(b) for t, b in self.logit_bias.items()})
        except (AttributeError, TypeError, ValueError):
            raise TypeError("logit_bias must map integer token ids to numbers") from None
        for name in ("stop_token_ids", "allowed_token_ids"):
            try:
                object.__setattr__(self, name, tuple(operator.index(t) for t in getattr(self, name)))
            except TypeError:
                raise TypeError(f"{name} must be a sequence of integer token ids") from None
        if self.structured_output is not None:
            object.__setattr__(self, "structured_output", _structured(self.structured_output))

    @property
    def features(self) -> tuple[str, ...]:
        """The `GENERATION_FEATURES` this request uses such that a server ignoring them would
        answer another request (add_special_tokens only when true: an older server's own
        tokenization has none)."""
        used = {"bad_words": bool(self.bad_words), "add_special_tokens": self.add_special_tokens is True,
                "truncate_prompt_tokens": self.truncate_prompt_tokens is not None, "prediction": bool(self.prediction),
                "structured_output": self.structured_output is not None}
        return tuple(feature for feature in GENERATION_FEATURES if used[feature])

    @property
    def idempotent(self) -> bool:
        """A seeded request's output is a function of the request alone: replaying it is safe."""
        return self.seed is not None

    def to_proto(self) -> pb.GenerateRequest:
        """The wire message; InvalidRequestError naming the field for a value it cannot carry (a
        seed past 64 bits, a float where a whole number goes, a string where a boolean goes),
        before anything is sent.  Checked here and not at construction: the server makes its
        request with `from_proto`, and answers a bad value with its own message."""
        verifier_params = pack_params(self.verifier_params)  # its own TypeError, naming msgpack
        try:
            return self._message(self._scalars(), verifier_params)
        except (ValueError, TypeError) as error:
            raise InvalidRequestError(f"this request cannot be sent: {error}") from None

    def _scalars(self) -> dict[str, Any]:
        """The scalar fields as the Python types of their proto fields (None: unset), or a
        ValueError or TypeError naming the field: protobuf's own errors name none, and it would
        read a string (even "false") as true in a plain bool field."""
        for name in TOKEN_ID_FIELDS:
            ids = getattr(self, name)
            if isinstance(ids, str) or ids is None:
                continue
            outside = next((t for t in ids if not INT32_RANGE[0] <= t <= INT32_RANGE[1]), None)
            if outside is not None:
                raise ValueError(f"{name} has token id {outside}, outside int32 (from {INT32_RANGE[0]} "
                                 f"to {INT32_RANGE[1]})")
        if self.prompt == ():  # it would cross as the empty text, which a tokenizer writing a BOS makes a prompt of
            raise ValueError("the prompt must contain at least one token")
        # named as the server names them, by its check: protobuf's own error names no field
        structured = () if self.structured_output is None else _texts_of(*self.structured_output.values())
        for name, texts in (("the prompt", _texts_of(self.prompt)), ("prediction", _texts_of(self.prediction)),
                            ("stop", self.stop), ("bad_words", self.bad_words), ("structured_output", structured)):
            for text in texts:
                check_text(text, name)
        scalars = {}
        for names, check in ((INT32_FIELDS, _int32), (INT64_FIELDS, _int64), (FLOAT_FIELDS, _float),
                             (BOOL_FIELDS, _boolean), (STRING_FIELDS, _string)):
            for name in names:
                value = getattr(self, name)
                scalars[name] = None if value is None else check(name, value)
        if scalars["request_id"] is not None:  # what the server refuses, refused before it is sent
            check_request_id(scalars["request_id"])
        if scalars["max_tokens"] is not None and scalars["max_tokens"] < 1:  # 0 would cross as unset: 256 tokens
            raise ValueError(f"max_tokens must be at least 1 (None: the server's default), got {scalars['max_tokens']}")
        return scalars

    def _message(self, scalars: dict[str, Any], verifier_params: bytes) -> pb.GenerateRequest:
        message = pb.GenerateRequest(
            max_tokens=scalars["max_tokens"] or 0,
            top_k=scalars["top_k"] or 0,
            presence_penalty=scalars["presence_penalty"] or 0.0,
            frequency_penalty=scalars["frequency_penalty"] or 0.0,
            logit_bias=self.logit_bias,
            min_p=scalars["min_p"] or 0.0,
            min_tokens=scalars["min_tokens"] or 0,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=bool(scalars["ignore_eos"]),
            include_stop_str_in_output=bool(scalars["include_stop_str_in_output"]),
            allowed_token_ids=self.allowed_token_ids,
            bad_words=self.bad_words,
            stop=self.stop,
            verifier=scalars["verifier"] or "",
            tree=scalars["tree"] or "",
            verifier_params=verifier_params,
            request_id=scalars["request_id"] or "",
        )
        if isinstance(self.prompt, str):
            message.prompt = self.prompt
        else:
            message.prompt_ids.extend(self.prompt)
        if isinstance(self.prediction, str):
            message.prediction = self.prediction
        elif self.prediction:
            message.prediction_ids.extend(self.prediction)
        if self.structured_output is not None:
            (kind, value), = self.structured_output.items()
            if kind == "choice":
                message.structured_output.choice.options.extend(value)
            else:
                setattr(message.structured_output, kind, value)
        # proto3 `optional`: unset means the default
        for name in ("temperature", "top_p", "repetition_penalty", "seed", "logprobs", "prompt_logprobs",
                     "skip_special_tokens", "add_special_tokens", "truncate_prompt_tokens"):
            if scalars[name] is not None:
                setattr(message, name, scalars[name])
        return message

    @classmethod
    def from_proto(cls, message: pb.GenerateRequest) -> GenerateRequest:
        """The request a server received; ValueError for a prompt given twice or bad params."""
        if message.prompt and message.prompt_ids:
            raise ValueError("give either prompt or prompt_ids, not both")
        if message.prediction and message.prediction_ids:
            raise ValueError("give either prediction or prediction_ids, not both")

        def optional(name: str):
            return getattr(message, name) if message.HasField(name) else None

        return cls(
            prompt=tuple(message.prompt_ids) if message.prompt_ids else message.prompt,
            max_tokens=message.max_tokens or None,
            temperature=optional("temperature"),
            top_p=optional("top_p"),
            top_k=message.top_k or None,
            presence_penalty=message.presence_penalty or None,
            frequency_penalty=message.frequency_penalty or None,
            repetition_penalty=optional("repetition_penalty"),
            logit_bias=dict(message.logit_bias),
            min_p=message.min_p or None,
            min_tokens=message.min_tokens or None,
            stop_token_ids=tuple(message.stop_token_ids),
            ignore_eos=message.ignore_eos or None,
            seed=optional("seed"),
            stop=tuple(message.stop),
            verifier=message.verifier or None,
            tree=message.tree or None,
            verifier_params=unpack_params(message.verifier_params),
            request_id=message.request_id or None,
            logprobs=optional("logprobs"),
            prompt_logprobs=optional("prompt_logprobs"),
            include_stop_str_in_output=message.include_stop_str_in_output or None,
            skip_special_tokens=optional("skip_special_tokens"),
            allowed_token_ids=tuple(message.allowed_token_ids),
            bad_words=tuple(message.bad_words),
            add_special_tokens=optional("add_special_tokens"),
            truncate_prompt_tokens=optional("truncate_prompt_tokens"),
            prediction=tuple(message.prediction_ids) or message.prediction or None,
            structured_output=_structured_of(message.structured_output) if message.HasField("structured_output")
            else None,
        )


def _integer(name: str, value: Any, bounds: tuple[int, int], kind: str) -> int:
    """An int (NumPy's too), not a bool, within the proto field's `bounds`."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if not bounds[0] <= number <= bounds[1]:
        raise ValueError(f"{name} must fit {kind} (from {bounds[0]} to {bounds[1]}), got {number}")
    return number


def _int32(name: str, value: Any) -> int:
    return _integer(name, value, INT32_RANGE, "int32")


def _int64(name: str, value: Any) -> int:
    return _integer(name, value, INT64_RANGE, "int64")


def _float(name: str, value: Any) -> float:
    """A real number (NumPy's too), not a bool: True is no temperature; and one float32 holds
    (the fields are proto `float`s): 1e300 would cross as infinity, which the server refuses
    as "got inf" or reads as another value, where HTTP's doubles take it as it is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    try:
        struct.pack("<f", number)  # OverflowError exactly where float32 rounds a finite number to infinity
    except OverflowError:
        raise ValueError(f"{name} must fit float32 (at most {FLOAT32_MAX:.8g} in magnitude), got {number!r}") from None
    if number and not struct.unpack("<f", struct.pack("<f", number))[0]:
        # float32 rounds it to 0: top_p=1e-50 crossed as 0, refused "got 0.0", and temperature=1e-50 as greedy,
        # where HTTP's doubles keep it; the smallest float32 of its sign is as near the limit as the server sees
        number = math.copysign(FLOAT32_TINY, number)
    return number


def _boolean(name: str, value: Any) -> bool:
    """A bool, or NumPy's (a scalar or a 0-d array): bool() would read "false" as true."""
    numpy_bool = getattr(value, "dtype", None) == bool and getattr(value, "shape", None) == ()
    if not isinstance(value, bool) and not numpy_bool:
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return check_text(value, name)


def _texts_of(value: Any) -> tuple[str, ...]:
    """The texts of a field that holds one, several or none (token ids, True: none)."""
    if isinstance(value, str):
        return (value,)
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, tuple) else ()


def _structured(output: Mapping[str, Any]) -> dict[str, Any]:
    """A structured output as one {kind: value} pair, a schema as its JSON text."""
    if not isinstance(output, Mapping) or len(output) != 1 or next(iter(output)) not in STRUCTURED_KINDS:
        raise TypeError(f"structured_output must be a mapping with one of {', '.join(STRUCTURED_KINDS)}, "
                        f"got {output!r}")
    (kind, value), = output.items()
    if kind == "json_schema" and not isinstance(value, str):
        value = json.dumps(value)
    if kind == "choice":
        if isinstance(value, str) or not all(isinstance(option, str) for option in value):
            raise TypeError("structured_output choice must be a sequence of strings")
        value = tuple(value)
    if kind in ("json_schema", "regex") and not isinstance(value, str):
        raise TypeError(f"structured_output {kind} must be a string")
    if kind == "json_object" and value is not True:
        raise TypeError("structured_output json_object must be True")
    return {kind: value}


def _structured_of(message: pb.StructuredOutput) -> dict[str, Any] | None:
    kind = message.WhichOneof("kind")
    if kind is None:
        raise ValueError("structured_output names no kind: give json_schema, json_object, regex or choice")
    if kind == "json_object" and not message.json_object:
        raise ValueError("structured_output json_object must be true")
    return {kind: tuple(message.choice.options) if kind == "choice" else getattr(message, kind)}


def _prompt(prompt: str | Iterable[int], name: str = "prompt") -> str | tuple[int, ...]:
    """Text, or token ids as a tuple of ints (the field is `name`)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (bytes, bytearray, Mapping)) or not isinstance(prompt, Iterable):
        raise TypeError(f"{name} must be a str or a sequence of token ids, got {type(prompt).__name__}")
    try:
        return tuple(operator.index(t) for t in prompt)
    except TypeError:
        raise TypeError(f"{name} token ids must be integers") from None


@dataclass(frozen=True)
class Usage:
    """Token counts of one generation: draft tokens accepted into the completion and the rest
    of the drafts (rejected, or cut off by a stop or max_tokens), and the number of
    verification steps (completion_tokens / steps is the speed-up's source)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    accepted_draft_tokens: int = 0
    rejected_draft_tokens: int = 0
    steps: int = 0
    cached_prompt_tokens: int = 0  # the prompt's tokens the target did not compute again (prefix cache)
    hedged_steps: int = 0  # steps that went on target-only while their draft was late (draft_hedge)

    @classmethod
    def from_proto(cls, message: pb.Usage) -> Usage:
        return cls(
            prompt_tokens=message.prompt_tokens,
            completion_tokens=message.completion_tokens,
            accepted_draft_tokens=message.accepted_draft_tokens,
            rejected_draft_tokens=message.rejected_draft_tokens,
            steps=message.steps,
            cached_prompt_tokens=message.cached_prompt_tokens,
            hedged_steps=message.hedged_steps,
        )

    def to_proto(self) -> pb.Usage:
        return pb.Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            accepted_draft_tokens=self.accepted_draft_tokens,
            rejected_draft_tokens=self.rejected_draft_tokens,
            steps=self.steps,
            cached_prompt_tokens=self.cached_prompt_tokens,
            hedged_steps=self.hedged_steps,
        )


@dataclass(frozen=True)
class TokenLogprob:
    """A token's log-probability under the target's raw law (temperature 1, no
    top-k or top-p, whatever the request sampled with), the most likely tokens' at its
    position as (token id, log-probability) pairs, most likely first, and its rank there (1 +
    how many tokens are more likely; None from a server that predates ranks)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    rank: int | None = None

    @classmethod
    def from_proto(cls, message: pb.TokenLogprob) -> TokenLogprob:
        return cls(message.token_id, message.logprob, tuple(zip(message.top_ids, message.top_logprobs)),
                   message.rank or None)

    def to_proto(self) -> pb.TokenLogprob:
        return pb.TokenLogprob(token_id=self.token_id, logprob=self.logprob, top_ids=[i for i, _ in self.top],
                               top_logprobs=[v for _, v in self.top], rank=self.rank or 0)


@dataclass(frozen=True)
class CompletionChunk:
    """What one verification step added: its text (stop strings held back), its tokens, how
    many of them were accepted drafts, and their log-probabilities when the request asked (the
    first chunk also has the prompt's, when asked)."""

    text: str
    token_ids: tuple[int, ...]
    accepted: int
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_logprobs: tuple[TokenLogprob, ...] = ()

    @classmethod
    def from_proto(cls, message: pb.Chunk) -> CompletionChunk:
        return cls(text=message.text, token_ids=tuple(message.token_ids), accepted=message.accepted,
                   logprobs=tuple(map(TokenLogprob.from_proto, message.logprobs)),
                   prompt_logprobs=tuple(map(TokenLogprob.from_proto, message.prompt_logprobs)))

    def to_proto(self) -> pb.Chunk:
        return pb.Chunk(text=self.text, token_ids=self.token_ids, accepted=self.accepted,
                        logprobs=[t.to_proto() for t in self.logprobs],
                        prompt_logprobs=[t.to_proto() for t in self.prompt_logprobs])


@dataclass(frozen=True)
class Completion:
    """A finished generation.  finish_reason: "length" or "stop"; stop_reason: with "stop", the
    stop string or stop token id that ended it, None for EOS (vLLM's).  seed: the one used
    (the request's, or the server's draw), so that the result can be reproduced.  logprobs: of
    token_ids, when the request asked for them; prompt_logprobs: of the prompt's tokens after
    the first, likewise."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    usage: Usage
    seed: int
    request_id: str
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_logprobs: tuple[TokenLogprob, ...] = ()
    stop_reason: str | int | None = None

    @classmethod
    def from_proto(cls, message: pb.GenerateResponse) -> Completion:
        return cls(
            text=message.text,
            token_ids=tuple(message.token_ids),
            finish_reason=message.finish_reason,
            usage=Usage.from_proto(message.usage),
            seed=message.seed,
            request_id=message.request_id,
            logprobs=tuple(map(TokenLogprob.from_proto, message.logprobs)),
            prompt_logprobs=tuple(map(TokenLogprob.from_proto, message.prompt_logprobs)),
            stop_reason=stop_reason_of(message),
        )

    @classmethod
    def from_stream(cls, chunks: Sequence[CompletionChunk], complete: pb.GenerateResponse) -> Completion:
        """A stream's completion: the text and log-probabilities of its chunks, everything else
        from the final message (which carries every total but those, so as not to send them
        twice)."""
        return cls(
            text="".join(c.text for c in chunks),
            token_ids=tuple(complete.token_ids),
            finish_reason=complete.finish_reason,
            usage=Usage.from_proto(complete.usage),
            seed=complete.seed,
            request_id=complete.request_id,
            logprobs=tuple(t for c in chunks for t in c.logprobs),
            prompt_logprobs=tuple(t for c in chunks for t in c.prompt_logprobs),
            stop_reason=stop_reason_of(complete),
        )

    def to_proto(self) -> pb.GenerateResponse:
        return pb.GenerateResponse(
            text=self.text,
            token_ids=self.token_ids,
            finish_reason=self.finish_reason,
            usage=self.usage.to_proto(),
            seed=self.seed,
            request_id=self.request_id,
            logprobs=[t.to_proto() for t in self.logprobs],
            prompt_logprobs=[t.to_proto() for t in self.prompt_logprobs],
            **stop_reason_fields(self.stop_reason),
        )


def stop_reason_fields(stop_reason: str | int | None) -> dict:
    """A `GenerateResponse`'s stop_reason fields (a string or a token id; neither for None)."""
    if stop_reason is None:
        return {}
    return {"stop_string": stop_reason} if isinstance(stop_reason, str) else {"stop_token_id": stop_reason}


def stop_reason_of(message: pb.GenerateResponse) -> str | int | None:
    field_name = message.WhichOneof("stop_reason")
    return None if field_name is None else getattr(message, field_name)
