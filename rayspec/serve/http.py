"""The OpenAI-compatible HTTP front end: `create_app(service) -> FastAPI`.

    POST /v1/completions        prompt: text, token ids, or a batch of either -> text_completion
    POST /v1/chat/completions   messages, by the model's chat template  -> chat.completion
    POST /v1/responses          OpenAI's Responses API, stateless (`rayspec.serve.responses`)
    POST /tokenize, /detokenize  vLLM's: a prompt or messages to token ids, and back
    GET  /tokenizer_info         vLLM's: special tokens, chat template, context
    GET  /v1/models, /v1/models/{model}   (with vLLM's `max_model_len`: the target's context)
    GET  /version                vLLM's: {"version": rayspec's}
    GET  /health                200 when every worker answers SERVING or BUSY ("ok"), or every target
                                 does and some drafter does not ("degraded": its sequences
                                 decode without drafts); else 503 ("unavailable", or
                                 "shutting_down" once the service stops)
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
`add_generation_prompt`, `chat_template_kwargs` and `echo` (the last message's text before the
reply, where it is the reply's role), OpenAI's `prediction` (Predicted Outputs:
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
`safety_identifier`, `prompt_cache_key` and chat's `prompt_cache_retention` and
`prompt_cache_options` are accepted and ignored (they change no answer); chat's `audio`,
`modalities`, `reasoning_effort`, `verbosity`, `web_search_options` and `moderation` are
accepted at their defaults (null, `["text"]`, `"medium"`) and refused otherwise.

Log-probabilities are the target's raw law at each token's position — the log-softmax of its
logits, before temperature, top-k and top-p — as OpenAI and vLLM report them, whatever the
verifier; a token's text is its own decoding, as vLLM gives it, and -inf is reported as
-9999.0 (JSON has no infinity).  With `echo`, the prompt's tokens come first, the first of
them with null (it has no context to be drawn from), as in OpenAI's legacy API.

`n` choices are `n` generations run side by side, each taking one of the service's
`limits.max_concurrent_requests` slots (all or none: the request waits until all are free, see
below; a request with more choices than there are slots takes them all and runs its choices
that many at a time, each ending choice handing its slot to the next, and holds at most
`max_concurrent_requests + max_queued_requests` choices): choice i is seeded with the request's
seed + i, so it follows the law of what a request with that seed gets (the same tokens without
cross-request batching: shared forwards can round a sample the other way, README "Choices,
batches and the sampling law"); unseeded choices draw a seed each.  A completions `prompt` may
be a batch (a list of texts or of token id lists), as OpenAI's and vLLM's: prompt p's choice i
is choice p·n + i, what a request with that prompt alone gets, and `usage.prompt_tokens` counts
each prompt once.  The batch's choices run side by side, as a request's `n` choices do.

Responses have OpenAI's shapes, and each choice vLLM's `stop_reason`: the stop string or
stop token id that ended it, null for EOS or a length.  `usage.completion_tokens_details`
counts the accepted and rejected draft tokens (OpenAI's Predicted Outputs fields: accepted drafts are those in the
completion, so drafts a stop or max_tokens cut off count as rejected), and a `rayspec` object
carries the request's speculative decoding figures, the verifier's verdicts whatever the cut,
pooled over the choices: the seed used (`seeds`, one per choice, when n > 1: sent back, it gives
the same tokens, but for an unseeded request whose Sequoia tree adapted — see the README), steps, tokens per step, the histogram of accepted drafts per step and
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
else the body's vLLM `request_id` (refused if unusable), else a fresh id.  A generation's
response id is made of it (`cmpl-<id>`, `chatcmpl-<id>`).  vLLM's `priority` (0),
`use_beam_search` (false) and `length_penalty` (1) are accepted at their defaults, and refused
otherwise; its `spaces_between_special_tokens` is accepted either way (only a slow tokenizer
reads it, and transformers 5 loads fast ones).

Errors have OpenAI's body `{"error": {"message", "type", "param", "code"}}`: 400 for bad
input (malformed JSON, wrong types, unknown verifier, a prompt longer than the context, ...),
401 without the service's API key (`ServiceConfig.api_key`), 404 for an unknown model or route,
408 for a body not all sent within `limits.body_timeout` seconds (60) of its headers, 413 for
a body over `limits.max_request_bytes` (refused before it is read), 429 when
`limits.max_queued_requests` requests wait already for slots (below) or a worker has no room
for another session (that one is not queued: the worker's sessions are its own to count) or
a structured output waited `COMPILE_SECONDS` for a compiler (`rayspec.engine.structured`), 503
when a worker is down or cannot be reached or the service is shutting down
(`Service.shut_down`: a stream under way then ends with its error event and `[DONE]`), 500
when a worker fails on the request itself (the same request would fail again:
`RemoteError.worker_fault`) and for anything else.

A busy service queues requests, as vLLM does: one that finds fewer free slots than its
generations (its `n` choices, of each of its batch's prompts) waits, first come, first served,
until all of them are free — later requests, however small, wait behind it — up to
`limits.max_queued_requests` waiting (429 past those).  A client that disconnects while its
request waits leaves the queue: nothing of it started, 499.  `rayspec_requests_waiting`
counts those waiting and `rayspec_request_queue_seconds` how long each waited.

Here: the endpoints and their answers.  The request bodies are `rayspec.serve.bodies`, the
errors `rayspec.serve.errors`, the ASGI middleware `rayspec.serve.middleware`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rayspec import __version__
from rayspec.engine.engine import GenerationStats
from rayspec.engine.interfaces import ShuttingDown, TokenLogprobs
from rayspec.engine.requests import GenerationRequest, StepText, usage_of
from rayspec.engine.structured import token_bytes_of
from rayspec.models.cancellation import GenerationCancelled, watching_caller
from rayspec.rpc.remote import RemoteError
from rayspec.serve.bodies import (
    ChatBody,
    CompletionBody,
    DetokenizeBody,
    GenerationBody,
    TokenizeBody,
    render_messages,
    tool_calling_read_by_service,
)
from rayspec.serve.errors import CLIENT_CLOSED_REQUEST, ApiError, bad_request, error_body, validation_error
from rayspec.serve.metrics import CONTENT_TYPE
from rayspec.serve.middleware import AnswerFailures, CountResponses, LimitBodies, RequestIds, RequireKey, named_by
from rayspec.serve.service import Overloaded, Service, StepStream
from rayspec.serve.tools import ToolCalling
from rayspec.unicode_text import check_text


COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
LOGPROB_FLOOR = -9999.0  # what a log-probability of -inf is reported as (vLLM's choice)


# ---------------------------------------------------------------------------- responses


def usage(requests: list[GenerationRequest], per_prompt: int = 1) -> dict:
    """Token counts of the choices, each run of `per_prompt` of them sharing one prompt: the
    prompts' tokens counted once each, the completions' tokens summed."""
    return _usage_of_counts([request.usage() for request in requests], per_prompt)


def _usage_of_counts(counts: list[dict], per_prompt: int = 1) -> dict:
    """`usage` of the choices' token counts (`rayspec.engine.requests.usage_of`)."""
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
        self.logprobs_sent = [False] * len(requests)  # a streamed choice's log-probabilities, any yet
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
        self.logprobs_sent[index] = self.logprobs_sent[index] or logprobs is not None
        return self.with_prompt_entries(index, self.delta(index, text, logprobs, None))

    def finish_delta(self, index: int) -> dict:
        request = self.requests[index]
        # A choice asked for log-probabilities that has none to stream (it ended before its
        # first token) ends with empty ones, as its non-streamed answer gives them.
        empty = TokenLogprobs.empty() if request.logprobs is not None and not self.logprobs_sent[index] else None
        delta = self.delta(index, *self.piece(index, "", [], empty), request.finish_reason, request.stop_reason)
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

    def finish_choices(self, index: int) -> list[dict]:
        """The streamed choices that end choice `index`, the last carrying its finish reason."""
        return [self.finish_delta(index)]


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
        [first_text], _ = self.token_texts(request.prompt_ids[:1], TokenLogprobs.empty())  # by id, if asked
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

    def __init__(self, *args, tool_calling: ToolCalling | None = None, echo: str | None = None, **kwargs):
        """tool_calling: the reply's text is tool calls (`rayspec.serve.tools`), answered as
        `tool_calls`.  echo: text put before each choice's reply (vLLM's chat `echo`)."""
        super().__init__(*args, **kwargs)
        self.echo = echo
        self.echoed = [not echo] * len(self.requests)
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
            finish_reason = self.tool_calling.finish_reason(finish_reason, called=calls is not None)
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
        return {"index": index, "delta": self.named_call_delta(index, added.text), "logprobs": None,
                "finish_reason": None}

    def before_completion(self, index: int) -> tuple[str, dict | None]:
        if self.echoed[index]:
            return "", None
        self.echoed[index] = True
        return self.echo, None

    def named_call_delta(self, index: int, arguments: str) -> dict:
        """The delta of a named call's next arguments: its first opens the call (id, name)."""
        call = {"index": 0, "function": {"arguments": arguments}}
        if not self.call_opened[index]:
            self.call_opened[index] = True
            call = {"index": 0, "id": self.call_ids[index], "type": "function",
                    "function": {"name": self.tool_calling.function, "arguments": arguments}}
        return {"tool_calls": [call]}

    def finish_delta(self, index: int) -> dict:
        calling = self.tool_calling
        if calling is None:
            return super().finish_delta(index)
        request = self.requests[index]
        if self.readers is not None:
            delta = self.pieces_delta(index, self.readers[index].finish())
            return {"index": index, "delta": delta, "logprobs": None, "stop_reason": request.stop_reason,
                    "finish_reason": calling.finish_reason(request.finish_reason, called=self.calls_sent[index] > 0)}
        delta, calls = {}, None
        if calling.mode == "named" and not self.call_opened[index]:
            # cut to nothing (a stop string at its start): still the call its answer gives
            delta = self.named_call_delta(index, "")
        if calling.mode == "required":
            calls = calling.calls(request.text)
            # no calls: the text is the content, even an empty one (the stream opened with null content)
            delta = ({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]} if calls is not None
                     else {"content": request.text})
        return {"index": index, "delta": delta, "logprobs": None,
                "finish_reason": calling.finish_reason(request.finish_reason, called=calls is not None),
                "stop_reason": request.stop_reason}

    def finish_choices(self, index: int) -> list[dict]:
        """As OpenAI ends a stream, the finish reason in a chunk of its own, after whatever the
        end of the reply adds (a required reply's calls, an auto reply's last calls): the openai
        client's stream helper closes a call (`tool_calls.function.arguments.done`) when a later
        chunk carries the finish reason, never one that arrives with the call."""
        last = self.finish_delta(index)
        if not last["delta"]:
            return [last]
        return [{"index": index, "delta": last["delta"], "logprobs": last["logprobs"], "finish_reason": None},
                {**last, "delta": {}, "logprobs": None}]

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
        # a reply that is calls (named or required) has no content, as OpenAI's stream opens it;
        # one cut short before its calls are whole follows with its text as content
        calls = self.tool_calling is not None and self.tool_calling.mode in ("named", "required")
        return {"index": index, "delta": {"role": "assistant", "content": None if calls else ""}, "logprobs": None,
                "finish_reason": None}

    def response(self) -> dict:
        answer = super().response()
        if self.prompt_top is not None:  # vLLM's chat gives them once, beside the choices: one prompt
            answer["prompt_logprobs"] = self.prompt_entries(0)
        return answer

    def logprobs(self, index: int, token_ids: list[int], logprobs: TokenLogprobs) -> dict:
        """OpenAI's chat object: per token its text, log-probability and UTF-8 bytes, and the
        most likely tokens' (as many as `top_logprobs` asked for)."""
        def entry(token: int, text: str, value: float) -> dict:
            # A token that is part of a character decodes alone to U+FFFD: its bytes are its own,
            # so that a client can join a character's tokens' bytes into it (as OpenAI's can).
            raw = token_bytes_of(self.service.tokenizer).get(token) if "\ufffd" in text else None
            return {"token": text, "logprob": _reported(value), "bytes": list(raw or text.encode("utf-8"))}

        texts, top_texts = self.token_texts(token_ids, logprobs)
        content = [
            {**entry(token, text, value),
             "top_logprobs": [entry(i, t, v) for i, t, v in zip(alternative_ids, alternative_texts, values)]}
            for token, text, value, alternative_ids, alternative_texts, values
            in zip(token_ids, texts, logprobs.chosen, logprobs.top_ids, top_texts, logprobs.top_values)
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

    sent = [GenerationStats() for _ in streams]  # each choice's steps streamed so far

    def extra(index: int) -> dict:
        if continuous_usage:
            # of the steps sent, not the request's own: its thread may be steps ahead of the stream
            request = reply.requests[index]
            sent[index].cached_prompt_tokens = request.stats.cached_prompt_tokens
            return {"usage": _usage_of_counts([usage_of(sent[index], len(request.prompt_ids))])}
        return {"usage": None} if include_usage else {}

    try:
        for index in range(len(streams)):
            if (opening := reply.opening(index)) is not None:
                yield _sse(reply.chunk(opening, **extra(index)))
        running = len(streams)
        async for index, added in _merged(streams):
            if added is not None:
                sent[index].steps.append(added.step)
                sent[index].tokens += len(added.token_ids)
                if (delta := reply.step_delta(index, added)) is not None:
                    yield _sse(reply.chunk(delta, **extra(index)))
                continue
            running -= 1
            *before, last = reply.finish_choices(index)
            for choice in before:
                yield _sse(reply.chunk(choice, **extra(index)))
            figures = {} if running else {"rayspec": reply.figures()}
            yield _sse(reply.chunk(last, **figures, **extra(index)))
        if include_usage:
            yield _sse(reply.usage_chunk())
    except Exception as error:  # the status line is sent: the error travels as an event
        yield _sse(error_body(error)[1])
    yield "data: [DONE]\n\n"


class EventStream(StreamingResponse):
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


class Primed:
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


async def _all(awaitables) -> list:
    """Their results, or the first failure with the others cancelled (not left running)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def drain(stream: StepStream) -> None:
    async for _ in stream:
        pass




class ClientGone(Exception):
    """The client disconnected while its request waited for its answer."""


async def unless_client_leaves(work, http: Request, discard=None):
    """`await work`, cancelled if the client disconnects first (ClientGone): a generation
    whose client left stops then, freeing its slot and its workers' sessions, rather than run
    on to max_tokens, or wait out a lost target's resume timeout, for nobody.  A stream's
    response sees the disconnect itself (`EventStream`); this covers the wait before it.
    `discard(result)`: the clean-up of what `work` gave after all, when it is not handed over
    (it ended in the same turn as the client's leaving, or as this call's cancellation)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_client_gone(http))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        _discard_when_done(task, discard)
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task in done:
        return task.result()
    _discard_when_done(task, discard)
    task.cancel()
    try:
        await task  # its own clean-up (closing the streams) done before the answer
    except asyncio.CancelledError:
        pass
    raise ClientGone


async def compiled_unless_client_leaves(service: Service, output, http: Request, ignore_eos: bool = False) -> None:
    """`service.compile_structured(output, ignore_eos)` off the event loop, given up if the
    client disconnects first (ClientGone): the compilation watches it (`watching_caller`), so
    that its compiler process, seconds of a CPU and one of the few compilers, stops then
    rather than compile on for nobody."""
    left = threading.Event()

    def compile_watched() -> None:
        with watching_caller(left.is_set):
            service.compile_structured(output, ignore_eos)

    gone = asyncio.ensure_future(_client_gone(http))
    gone.add_done_callback(lambda _: left.set())  # cancelled below too, once the compilation is over
    try:
        await run_in_threadpool(compile_watched)
    except GenerationCancelled:
        raise ClientGone from None
    finally:
        gone.cancel()


def _discard_when_done(task: asyncio.Future, discard) -> None:
    """`discard(task.result())` once `task` ends with a result nobody will take (None: nothing)."""
    if discard is not None:
        task.add_done_callback(lambda ended: None if ended.cancelled() or ended.exception() is not None
                               else discard(ended.result()))


def close_streams(streams) -> None:
    """The clean-up of started generations nobody will read (`unless_client_leaves`'s discard)."""
    for stream in streams:
        stream.close()


async def _client_gone(http: Request) -> None:
    """Returns when the ASGI server says the client disconnected (the body was read already:
    the next message is the disconnect).  A receive that fails has lost the client too."""
    try:
        while (await http.receive())["type"] != "http.disconnect":
            pass
    except Exception:  # noqa: BLE001
        return


async def _answer(reply: _Reply, http: Request, stream: bool, include_usage: bool,
                  continuous_usage: bool = False) -> Response:
    # Queued until its slots are free; a client that leaves meanwhile leaves the queue (499)
    streams = await unless_client_leaves(reply.service.start_all(reply.requests, reply.n), http, close_streams)

    def close() -> None:
        for step_stream in streams:
            step_stream.close()

    if not stream:
        try:
            await unless_client_leaves(_all(map(drain, streams)), http)
        finally:
            close()
        return JSONResponse(reply.response())
    try:  # a request that fails before its choices' first steps gets an HTTP error status
        firsts = await unless_client_leaves(_all(anext(s, None) for s in streams), http)
    except BaseException:
        close()
        raise
    primed = [Primed(first, s) if first is not None else s for first, s in zip(firsts, streams)]
    return EventStream(_events(reply, primed, include_usage, continuous_usage), on_close=close)


# ---------------------------------------------------------------------------- the app


def create_app(service: Service, answer_request_ids: bool = True) -> FastAPI:
    """The app over `service`.  answer_request_ids: write the `X-Request-Id` response header
    (False behind Ray Serve, whose proxy writes it: the id it hands the app, the client's own
    or one it made)."""
    app = FastAPI(title="rayspec", summary="Tree speculative decoding, OpenAI-compatible")
    app.state.service = service
    limits = service.limits
    app.add_middleware(LimitBodies, limit=limits.max_request_bytes, timeout=limits.body_timeout or None)
    if service.api_key:  # outside the body limit: a request without the key is refused unread
        app.add_middleware(RequireKey, key=service.api_key)
    app.add_middleware(AnswerFailures)
    app.add_middleware(RequestIds, answer=answer_request_ids)  # outside the refusals: they carry the id too
    app.add_middleware(CountResponses, metrics=service.metrics)  # added last: outermost, it counts the 413s too

    async def answer_error(request: Request, error: Exception) -> JSONResponse:
        headers = None
        if isinstance(error, RequestValidationError):
            error = validation_error(error)
        elif isinstance(error, StarletteHTTPException):
            detail = f"{error.detail} ({request.method} {request.url.path})" if error.status_code in (404, 405) else error.detail
            headers = error.headers  # a 405's Allow (RFC 9110 asks for it)
            error = ApiError(error.status_code, str(detail))
        status, body = error_body(error)
        return JSONResponse(body, status_code=status, headers=headers)

    for kind in (RequestValidationError, StarletteHTTPException, ApiError, ValueError, Overloaded, RemoteError,
                 ShuttingDown):
        app.add_exception_handler(kind, answer_error)  # anything else: `AnswerFailures`
    app.add_exception_handler(ClientGone, lambda request, error: Response(status_code=CLIENT_CLOSED_REQUEST))

    def check_model(model: str | None) -> None:
        if model not in (None, service.model_id):
            raise ApiError(404, f"the model {model!r} does not exist; this service serves {service.model_id!r}",
                           "model", "model_not_found")

    def max_tokens_field(value: int | None) -> dict:
        return {} if value is None else {"max_tokens": value}

    async def choices(body: GenerationBody, http: Request, prompts: list[dict], **fields) -> list[GenerationRequest]:
        """One generation per prompt and choice (`n` per prompt, prompt by prompt), run side by
        side: a prompt's choice i is seeded with the request's seed + i — the completion a
        request with that prompt and seed gets — and unseeded choices draw a seed each."""
        n, seed = body.n or 1, body.seed
        limits = service.limits
        # Choices past the slots run as earlier ones end (`Service.start_all`); a request holds
        # at most as many generations as the service runs and queues.
        most = limits.max_concurrent_requests + limits.max_queued_requests
        if len(prompts) * n > most:
            room = (f"at most {most} in one request (limits.max_concurrent_requests: "
                    f"{limits.max_concurrent_requests}, plus limits.max_queued_requests: {limits.max_queued_requests})")
            if len(prompts) == 1:
                raise bad_request(f"n={n} asks for more completions than this service takes: {room}", "n")
            raise bad_request(f"{len(prompts)} prompts × n={n} ask for more completions than this service takes: "
                              f"{room}; send fewer prompts per request", "prompt")
        if seed is not None and seed + n > 2**63:  # the int64 a worker's session is keyed by
            raise bad_request("seed + n - 1 must stay below 2^63: choice i is seeded with seed + i", "seed")
        if fields.get("structured_output") is not None:
            try:  # compiled off the event loop (a large schema takes seconds), once for all the choices
                await compiled_unless_client_leaves(service, fields["structured_output"], http,
                                                    bool(fields.get("ignore_eos")))
            except ValueError as error:
                raise bad_request(str(error), body.structured_field()) from None

        def build() -> list[GenerationRequest]:
            requests = []
            for index, prompt in enumerate(prompts):
                try:
                    first = service.request(seed=seed, **prompt, **fields)
                except ValueError as error:
                    status, answer = error_body(error)
                    if len(prompts) == 1 or answer["error"]["param"] not in (None, "prompt"):
                        raise  # another field's refusal is the request's, whichever prompt it was checked with
                    # a prompt's own: named, with the refusal's code (context_length_exceeded) kept
                    raise ApiError(status, f"prompt {index} of the batch: {error}", "prompt",
                                   answer["error"]["code"]) from None
                # the prompt and prediction tokenized once
                same = {**fields, "prompt_ids": first.prompt_ids, "prediction": first.kwargs["prediction"]}
                requests += [first] + [service.request(seed=None if seed is None else seed + i, **same)
                                       for i in range(1, n)]
            return requests

        # Off the event loop: tokenizing megabytes of prompt or prediction takes seconds, and
        # would hold up every other request (and /health) meanwhile.
        return await run_in_threadpool(build)

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, http: Request):
        check_model(body.model)
        body.refuse_unsupported()
        prompt_only = bool(body.echo) and body.max_tokens == 0
        prompts = body.prompts()
        requests = await choices(
            body, http, prompts, max_tokens=None if prompt_only else body.max_tokens,
            default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS, **body.generation_fields(), prompt_only=prompt_only,
            add_special_tokens=body.add_special_tokens, request_id=named_by(http.state, body.request_id),
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
        return await _answer(reply, http, bool(body.stream), **_usage_options(body))

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatBody, http: Request):
        check_model(body.model)
        body.refuse_unsupported()
        calling = tool_calling_read_by_service(body.tool_calling(), service)  # bad tools: a 400 naming tools
        limit = service.limits.max_tokens
        if body.max_completion_tokens is not None and body.max_completion_tokens > limit:
            raise bad_request(f"max_completion_tokens must be between 1 and {limit}, got {body.max_completion_tokens}",
                              "max_completion_tokens")
        prompt = await run_in_threadpool(body.prompt, service)  # a long conversation renders for a while
        fields = body.generation_fields()
        if calling is not None:
            fields["skip_special_tokens"] = calling.skip_special_tokens(fields["skip_special_tokens"])
        requests = await choices(
            body, http, [{"prompt": prompt}], **max_tokens_field(body.max_completion_tokens or body.max_tokens),
            **fields, add_special_tokens=bool(body.add_special_tokens),  # the template writes them
            request_id=named_by(http.state, body.request_id),
        )
        reply = _ChatReply(service, requests, body.n or 1, bool(body.return_tokens_as_token_ids), body.prompt_logprobs,
                           tool_calling=calling, echo=body.echoed())
        return await _answer(reply, http, bool(body.stream), **_usage_options(body))

    @app.post("/tokenize")
    async def tokenize(body: TokenizeBody):
        """vLLM's: the token ids a completion (prompt) or chat (messages) request would read."""
        check_model(body.model)
        if (body.prompt is None) == (body.messages is None):
            raise bad_request("give exactly one of prompt and messages", "prompt")
        if body.messages is not None:
            body.check_tools()
            text = await run_in_threadpool(render_messages, service, body.messages, body.add_generation_prompt,
                                           body.continue_final_message, body.chat_template_kwargs, body.tools)
            special = bool(body.add_special_tokens)
        else:
            text, special = body.prompt, body.add_special_tokens is not False
        try:
            check_text(text, "the prompt")
        except ValueError as error:
            raise bad_request(str(error), "prompt" if body.messages is None else "messages") from None
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
            raise bad_request(f"token ids out of the vocabulary [0, {vocab}): {bad[:5]}", "tokens")
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

    @app.get("/version")
    async def version():
        return {"version": __version__}  # vLLM's GET /version

    @app.get("/health")
    async def health():
        status, workers = await run_in_threadpool(service.health)
        return JSONResponse({"status": status, "workers": workers},
                            status_code=200 if status in ("ok", "degraded") else 503)

    @app.get("/metrics")
    async def metrics():
        # Off the event loop: the tree collectors wait for the policy's lock, which a Sequoia
        # plan holds while it runs; every request would wait with them.
        return Response(await run_in_threadpool(service.metrics.exposition), media_type=CONTENT_TYPE)

    return app


def _usage_options(body: GenerationBody) -> dict:
    """Whether a stream ends with a usage chunk (`include_usage`) and, with it, whether every
    chunk carries its choice's usage so far (vLLM's `continuous_usage_stats`)."""
    options = body.stream_options
    include = bool(body.stream and options and options.include_usage)
    return {"include_usage": include, "continuous_usage": include and bool(options.continuous_usage_stats)}
