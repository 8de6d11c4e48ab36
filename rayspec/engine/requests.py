"""A generation request as every front end sees it: validated once, run through the engine.

The gRPC `Generation` service and the OpenAI-compatible HTTP app both turn their messages
into a `GenerationRequest`, so the same fields get the same checks and the same messages,
and iterate `run()` for the text of each verification step.
"""

from __future__ import annotations

import operator
import secrets
import threading
import uuid
from dataclasses import dataclass

from rayspec.engine.engine import GenerationStats, SpeculativeEngine, StepStats
from rayspec.engine.interfaces import ContextLengthExceeded, TokenLogprobs, check_logprobs
from rayspec.engine.policy import check_tree_spec
from rayspec.engine.prediction import check_prediction, prediction_chain
from rayspec.engine.structured import check_structured, compiled_index, structured_regex, vocabulary_of
from rayspec.engine.text import TextAssembler, bad_words_token_ids, listed
from rayspec.request_id import check_request_id
from rayspec.unicode_text import check_text
from rayspec.verify.processing import SamplingParams, real_number


# No tokenizer's tokens average this many characters over a whole prompt.
MAX_CHARS_PER_TOKEN = 64


def _integer(value, name: str) -> int:
    """`value` as an int, or a ValueError naming `name`: a Python caller's 2.5 is refused, not
    cut to 2 (HTTP and gRPC bodies are typed already); 2.0 and numpy's or torch's integers pass."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise ValueError(f"{name} must be an integer, got {value!r}")


def check_min_tokens(min_tokens: int, max_tokens: int) -> None:
    """ValueError for a min_tokens the length cannot reach, as vLLM refuses it: such a request
    would end at max_tokens having banned the stop tokens throughout (`rayspec generate`'s
    --min-tokens and --max-new-tokens say the same)."""
    if not 0 <= min_tokens <= max_tokens:
        raise ValueError(f"min_tokens must be between 0 and max_tokens ({max_tokens}), got {min_tokens}")


def check_token_ids(ids, name: str) -> None:
    """ValueError naming `name` for ids that are not token ids, integers >= 0 (None: none given):
    `rayspec generate` refuses its --stop-token-ids and --allowed-token-ids with it, before the
    models load and in the HTTP API's words."""
    if ids is not None and not all(type(t) is int and t >= 0 for t in ids):
        raise ValueError(f"{name} must be a list of token ids (integers >= 0)")


@dataclass
class Limits:
    default_max_tokens: int = 256
    max_tokens: int = 4096


@dataclass
class StepText:
    """What one verification step added to a request's completion: its text (stop strings and
    unfinished characters held back), its tokens, its statistics, and its tokens'
    log-probabilities when the request asked for them."""

    text: str
    token_ids: list[int]
    step: StepStats
    logprobs: TokenLogprobs | None = None
    prompt_logprobs: TokenLogprobs | None = None  # the first step's, when asked for


def usage_of(stats: GenerationStats, prompt_tokens: int) -> dict:
    """Token counts.  Draft tokens count as accepted when they are in the completion (OpenAI's
    accepted prediction tokens), so accepted drafts that a stop or max_tokens cut off count as
    rejected."""
    accepted = sum(s.accepted_in_completion for s in stats.steps)
    drafted = sum(s.drafted for s in stats.steps)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": stats.tokens,
        "accepted_draft_tokens": accepted,
        "rejected_draft_tokens": drafted - accepted,
        "steps": len(stats.steps),
        "cached_prompt_tokens": stats.cached_prompt_tokens,
        "hedged_steps": stats.hedged_steps,
    }


def _strings(value, name: str) -> list[str]:
    """A field that takes a string or a list of strings (None: none), as a list."""
    strings = listed(value)
    if not all(isinstance(s, str) for s in strings):
        raise ValueError(f"{name} must be a string or a list of strings")
    return [check_text(s, name) for s in strings]


def _last_tokens(tokenizer, ids: list[int], keep: int) -> list[int]:
    """The last `keep` tokens of a text tokenized with its special tokens, as HF's tokenizers
    truncate from the left (vLLM's truncate_prompt_tokens): the special tokens before and after
    the text's tokens stay, and as many of the text's last tokens as leave room for them."""
    bare, marked = (tokenizer.encode("a", add_special_tokens=special) for special in (False, True))
    head = next((i for i in range(len(marked) - len(bare) + 1) if marked[i:i + len(bare)] == bare), None)
    tail = None if head is None else len(marked) - len(bare) - head
    # (head None: where the special tokens go is not known; k below their count: no room for them)
    if head is None or len(ids) <= keep or keep < head + tail:
        return ids[-keep:]
    text = ids[head:len(ids) - tail]
    return ids[:head] + text[len(text) - (keep - head - tail):] + ids[len(ids) - tail:]


class GenerationRequest:
    """A validated generation request, whatever the front end (gRPC or HTTP)."""

    def __init__(self, engine: SpeculativeEngine, tokenizer, limits: Limits, *, prompt=None, prompt_ids=None,
                 max_tokens=None, temperature=None, top_p=None, top_k=None, seed=None, stop=None,
                 verifier=None, tree=None, verifier_params=None, request_id=None, logprobs=None,
                 prompt_logprobs=None, prompt_only=False, presence_penalty=None, frequency_penalty=None,
                 repetition_penalty=None, logit_bias=None, min_p=None, min_tokens=None, stop_token_ids=None,
                 ignore_eos=None, include_stop_str_in_output=None, skip_special_tokens=None, allowed_token_ids=None,
                 bad_words=None, add_special_tokens=None, truncate_prompt_tokens=None, prediction=None,
                 structured_output=None):
        """add_special_tokens: a text prompt is tokenized with the tokenizer's special tokens
        (a BOS, for Llama-style tokenizers), as vLLM's completions and HF's `encode` do
        (default True; chat prompts, whose template writes them, pass False).
        truncate_prompt_tokens (vLLM's): k keeps the prompt's last k tokens, -1 as many as the
        model's context holds; a text prompt keeps the special tokens its tokenizer wrote (its
        BOS, and the last k - 1 tokens of its text), as vLLM's left-truncating tokenizer does.
        prompt_logprobs: k for the log-probabilities of the prompt's tokens after the first
        (`rayspec.engine.interfaces.TokenLogprobs`) and the k most likely tokens' at each;
        prompt_only: generate nothing, only those (OpenAI's `echo` with `max_tokens: 0`).
        The penalties, logit_bias, min_p and min_tokens are `SamplingParams`'; None leaves
        each off.  stop_token_ids: token ids that end the completion as EOS does (vLLM's),
        ignore_eos: EOS does not (vLLM's).  allowed_token_ids: the only tokens that can be
        drawn (vLLM's; None or empty: all).  bad_words: words the completion never contains
        (vLLM's).  include_stop_str_in_output: the text ends after the stop string that ended
        it rather than before, and with a stop token id's text (vLLM's); skip_special_tokens:
        special tokens have no text (default True, as in vLLM).  prediction: the completion
        expected, as text or token ids (OpenAI's Predicted Outputs), drafted where the
        completion follows it (`rayspec.engine.prediction`).  structured_output: what the
        completion must be (`rayspec.engine.structured.StructuredOutput`: a JSON schema, any
        JSON object, a regular expression or a choice), compiled here so that a bad one is
        refused before anything runs."""
        if (prompt is None) == (prompt_ids is None):
            raise ValueError("give exactly one of prompt (text) and prompt_ids (token ids)")
        # a client's id is echoed, logged and names the request's thread: the front ends' one rule
        self.request_id = uuid.uuid4().hex if request_id is None else check_request_id(request_id)
        context = engine.target.context_length
        special = False  # whether the tokenizer wrote its special tokens around the prompt's text
        if prompt is not None:
            if not isinstance(prompt, str):
                raise ValueError("prompt must be a string")
            check_text(prompt, "the prompt")
            if len(prompt) > MAX_CHARS_PER_TOKEN * context:  # refused before tokenizing it costs seconds
                raise ContextLengthExceeded.of_prompt(context, f"the prompt has {len(prompt)} characters, far more "
                                                               f"than {context} tokens can hold")
            special = True if add_special_tokens is None else bool(add_special_tokens)
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=special)
        self.prompt_ids = [_integer(t, "a prompt token id") for t in prompt_ids]
        if truncate_prompt_tokens is not None:
            keep = context if truncate_prompt_tokens == -1 else truncate_prompt_tokens
            if type(keep) is not int or not 1 <= keep <= context:
                raise ValueError(f"truncate_prompt_tokens must be -1 or between 1 and the model's context "
                                 f"({context}), got {truncate_prompt_tokens!r}")
            self.prompt_ids = _last_tokens(tokenizer, self.prompt_ids, keep) if special else self.prompt_ids[-keep:]
        self.prompt_only = bool(prompt_only)
        # here, not at the first step: a batch starts whole or not at all
        engine.check_prompt(self.prompt_ids, completion=not self.prompt_only)
        if self.prompt_only:
            max_tokens = None  # the checks below are of a length that is not asked for
        asked = max_tokens not in (None, 0)
        max_tokens = _integer(max_tokens, "max_tokens") if asked else limits.default_max_tokens
        if not 1 <= max_tokens <= limits.max_tokens:
            raise ValueError(f"max_tokens must be between 1 and {limits.max_tokens}, got {max_tokens}")
        # As OpenAI and vLLM do, a length the context cannot hold is refused, not cut short; the
        # default length is cut (a prompt that fills the context is the engine's error).
        prompt_tokens = len(self.prompt_ids)
        if asked and 0 < context - prompt_tokens < max_tokens:
            raise ContextLengthExceeded.of_request(context, prompt_tokens, max_tokens)
        stop, bad_words = _strings(stop, "stop"), _strings(bad_words, "bad_words")
        for name, ids in (("stop_token_ids", stop_token_ids), ("allowed_token_ids", allowed_token_ids)):
            check_token_ids(ids, name)
        outside = sorted(t for t in stop_token_ids or () if t >= engine.target.vocab_size)
        if outside:
            raise ValueError(f"stop_token_ids names token {outside[0]}, outside the vocabulary of "
                             f"{engine.target.vocab_size} tokens")
        min_tokens = None if min_tokens is None else _integer(min_tokens, "min_tokens")
        if min_tokens is not None and not self.prompt_only:
            check_min_tokens(min_tokens, max_tokens)
        if verifier_params is not None and not isinstance(verifier_params, dict):
            raise ValueError("verifier_params must be an object")
        if tree:
            # before anything is built (kary:KxD grows as K^D); a Sequoia tree's planning is counted
            # on the vectors this service plans the request's verifier from
            check_tree_spec(str(tree), engine.library.planning_shape(verifier or engine.verifier))
        check_logprobs(logprobs)
        check_logprobs(prompt_logprobs, "prompt_logprobs")
        def real(value, name: str, default: float) -> float:  # a Python caller's True is refused, not read as 1.0
            return default if value is None else real_number(value, name)

        sampling = dict(
            temperature=real(temperature, "temperature", 1.0),
            top_p=real(top_p, "top_p", 1.0),
            top_k=0 if top_k is None else _integer(top_k, "top_k"),
            presence_penalty=real(presence_penalty, "presence_penalty", 0.0),
            frequency_penalty=real(frequency_penalty, "frequency_penalty", 0.0),
            repetition_penalty=real(repetition_penalty, "repetition_penalty", 1.0),
            logit_bias=dict(logit_bias or {}),
            min_p=real(min_p, "min_p", 0.0),
            min_tokens=min_tokens or 0,
            allowed_token_ids=tuple(allowed_token_ids or ()),
        )
        if self.prompt_only:  # `generate` checks them itself; scoring a prompt does not read them
            SamplingParams(**sampling, stop_token_ids=stop_token_ids or (),
                           bad_words_ids=bad_words_token_ids(tokenizer, bad_words)).check_vocabulary(
                engine.target.vocab_size)
        if isinstance(prediction, str):
            if len(prediction) > MAX_CHARS_PER_TOKEN * context:  # as the prompt: refused before it is tokenized
                raise ValueError(f"the prediction has {len(prediction)} characters, far more than the model's "
                                 f"context of {context} tokens can hold")
            prediction = tokenizer.encode(check_text(prediction, "prediction"), add_special_tokens=False) or None
        elif prediction is not None and not (prediction and all(type(t) is int for t in prediction)):
            raise ValueError("prediction must be text or a non-empty list of token ids")
        if prediction is not None:
            prediction_chain(tree or None)  # refuses a tree that is no chain, before anything runs
            check_prediction(prediction, engine.target.vocab_size, context)
        # First: a refused request must not pay a JSON schema's expression (up to a minute to build).
        check_structured(structured_output, ignore_eos, engine.target.eos_token_ids)
        regex = structured_regex(structured_output)
        if regex:
            compiled_index(regex, vocabulary_of(tokenizer))
        self.seed = secrets.randbits(63) if seed is None else _integer(seed, "seed")
        self.kwargs = dict(
            max_new_tokens=max_tokens,
            **sampling,
            seed=self.seed,
            replayable=seed is not None,  # an unseeded request may draft the adapted trees
            stop=[*stop, *(stop_token_ids or ())],
            ignore_eos=bool(ignore_eos),
            bad_words=bad_words,
            skip_special_tokens=True if skip_special_tokens is None else bool(skip_special_tokens),
            verifier=verifier or None,
            tree=tree or None,
            verifier_params=verifier_params,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            prediction=prediction,
            structured_output=regex or None,
        )
        self.include_stop = bool(include_stop_str_in_output)
        self.engine, self.tokenizer = engine, tokenizer
        self.cancelled = threading.Event()  # set by `cancel()`: its client gave up

    def cancel(self) -> None:
        """The client gave up on this request: a wait of its engine for a lost worker ends now
        (`GenerationCancelled`) rather than at its deadline."""
        self.cancelled.set()

    def run(self):
        """Yield a `StepText` per step; then `self.finish_reason`, `self.stop_reason` (the stop
        string or stop token id that ended the completion, None for EOS or a length),
        `self.text`, `self.token_ids`, `self.stats`, `self.logprobs` and
        `self.prompt_logprobs` (None unless asked for) hold the totals."""
        self.stats = GenerationStats()
        self.token_ids, self.finish_reason, self.stop_reason, self.text = [], "length", None, ""
        self.logprobs = None if self.kwargs["logprobs"] is None else TokenLogprobs.empty()
        self.prompt_logprobs = None
        if self.prompt_only:
            if self.kwargs["prompt_logprobs"] is not None:
                self.prompt_logprobs = self.engine.prompt_logprobs(self.prompt_ids, self.kwargs["prompt_logprobs"])
            return
        stop_texts = [s for s in self.kwargs["stop"] if isinstance(s, str)]
        assembler = TextAssembler(self.tokenizer, stop_texts, self.prompt_ids, self.kwargs["min_tokens"],
                                  self.include_stop, self.kwargs["skip_special_tokens"])
        for chunk in self.engine.generate(self.prompt_ids, stats=self.stats, cancelled=self.cancelled,
                                          **self.kwargs):
            self.token_ids += chunk.tokens
            if chunk.logprobs is not None:
                self.logprobs.extend(chunk.logprobs)
            if chunk.prompt_logprobs is not None:
                self.prompt_logprobs = chunk.prompt_logprobs
            self.finish_reason = chunk.finish_reason or self.finish_reason
            self.stop_reason = chunk.stop_reason
            text = assembler.push_chunk(chunk.tokens, chunk.finish_reason, chunk.stop_reason)
            if chunk.finish_reason:
                text += assembler.finish()
            yield StepText(text, chunk.tokens, chunk.step, chunk.logprobs, chunk.prompt_logprobs)
        self.text = assembler.text

    def usage(self) -> dict:
        return usage_of(self.stats, len(self.prompt_ids))
