"""Log-probabilities of the emitted tokens: for every verifier and tree, each token's is the
target's raw law at its position, as a plain forward over the finished sequence gives it, and
asking for them changes no token."""

from __future__ import annotations

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import ContextLengthExceeded
from rayspec.verify import available_verifiers
from tests.engine.test_engine import VERIFIER_TREES
from tests.tiny_models import nan_row_at, noisy_copy, tiny_llama

PROMPT = [5, 9, 14, 20, 33]


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, seed=0)
    return target, noisy_copy(target, noise=0.05)


def plain_log_probs(target, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens), V]: the target's log-softmax at each completion token's position, from one
    forward over the whole sequence (no cache, no tree)."""
    with torch.no_grad():
        logits = target(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1)


def assert_logprobs_of(target, prompt, chunks, top: int) -> None:
    tokens = [t for c in chunks for t in c.tokens]
    assert all(len(c.logprobs) == len(c.tokens) for c in chunks)
    chosen = [v for c in chunks for v in c.logprobs.chosen]
    top_ids = [row for c in chunks for row in c.logprobs.top_ids]
    top_values = [row for c in chunks for row in c.logprobs.top_values]
    oracle = plain_log_probs(target, prompt, tokens)
    assert torch.tensor(chosen) == pytest.approx(oracle.gather(-1, torch.tensor(tokens)[:, None])[:, 0], abs=1e-4)
    assert torch.tensor(top_values) == pytest.approx(oracle.topk(top, -1).values, abs=1e-4)
    # the ids name those values (ties aside, they are the oracle's top ids)
    assert torch.tensor(top_values) == pytest.approx(oracle.gather(-1, torch.tensor(top_ids)), abs=1e-4)


@pytest.mark.parametrize("name", available_verifiers())
def test_every_verifier_gives_the_targets_raw_log_probabilities_and_the_same_tokens(pair, name):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    temperature = 0.0 if name == "greedy" else 0.8
    kwargs = dict(max_new_tokens=30, temperature=temperature, seed=4)
    chunks = list(engine.generate(PROMPT, logprobs=3, **kwargs))
    assert [t for c in chunks for t in c.tokens] == engine.run(PROMPT, **kwargs).tokens
    assert max(len(c.tokens) for c in chunks) > 1  # drafts were accepted: paths deeper than the root
    assert_logprobs_of(target, PROMPT, chunks, top=3)


@pytest.mark.parametrize("sampling", [dict(temperature=0.5, top_k=4, top_p=0.7), dict(temperature=1.3)])
def test_the_log_probabilities_are_of_the_raw_law_whatever_the_sampling(pair, sampling):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3")
    chunks = list(engine.generate(PROMPT, max_new_tokens=24, seed=1, logprobs=5, **sampling))
    assert_logprobs_of(target, PROMPT, chunks, top=5)


def test_target_only_decoding_and_logprobs_zero_give_the_chosen_tokens_only(pair):
    target = pair[0]
    chunks = list(SpeculativeEngine(LocalTarget(target)).generate(PROMPT, max_new_tokens=12, temperature=1.0, seed=2,
                                                                   logprobs=0))
    assert all(c.logprobs.top_ids == [[]] * len(c.tokens) for c in chunks)
    assert_logprobs_of(target, PROMPT, chunks, top=0)


def test_a_step_cut_by_a_stop_token_or_max_tokens_keeps_the_log_probabilities_of_its_tokens(pair):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3")
    full = engine.run(PROMPT, max_new_tokens=40, temperature=0.8, seed=6).tokens
    stop = next(t for i, t in enumerate(full) if i >= 5 and t not in full[:i])  # a token first emitted mid-step, or later
    cut = list(engine.generate(PROMPT, max_new_tokens=40, temperature=0.8, seed=6, stop=[stop], logprobs=2))
    assert [t for c in cut for t in c.tokens] == full[: full.index(stop)] and cut[-1].finish_reason == "stop"
    assert_logprobs_of(target, PROMPT, cut, top=2)
    short = list(engine.generate(PROMPT, max_new_tokens=7, temperature=0.8, seed=6, logprobs=2))
    assert sum(len(c.tokens) for c in short) == 7
    assert_logprobs_of(target, PROMPT, short, top=2)


@pytest.mark.parametrize("logprobs", [-1, 21, True, 2.5, "3"])
def test_logprobs_out_of_range_or_not_a_count_are_refused_with_a_message(pair, logprobs):
    """True and 2.5 were read as 1 and 2 alternatives."""
    engine = SpeculativeEngine(LocalTarget(pair[0]))
    with pytest.raises(ValueError, match=r"^logprobs must be a whole number between 0 and 20"):
        next(engine.generate(PROMPT, logprobs=logprobs))
    with pytest.raises(ValueError, match=r"^prompt_logprobs must be a whole number between 0 and 20"):
        next(engine.generate(PROMPT, prompt_logprobs=logprobs))


# ------------------------------------------------------------------ the prompt's tokens


def assert_prompt_logprobs_of(target, prompt: list[int], logprobs, top: int) -> None:
    """Token i + 1 of the prompt under the law a plain forward gives after its first i + 1."""
    with torch.no_grad():
        oracle = torch.log_softmax(target(torch.tensor([prompt])).logits[0, :-1].float(), -1)
    assert len(logprobs) == len(prompt) - 1
    assert torch.tensor(logprobs.chosen) == pytest.approx(oracle.gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0],
                                                          abs=1e-4)
    assert torch.tensor(logprobs.top_values).view(len(prompt) - 1, top) == pytest.approx(oracle.topk(top, -1).values,
                                                                                        abs=1e-4)
    if top:
        assert torch.tensor(logprobs.top_values) == pytest.approx(oracle.gather(-1, torch.tensor(logprobs.top_ids)),
                                                                  abs=1e-4)


@pytest.mark.parametrize("name", ["rrsw", "gumbel", "greedy"])
def test_the_first_chunk_carries_the_prompts_log_probabilities_and_no_token_changes(pair, name):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    kwargs = dict(max_new_tokens=20, temperature=0.0 if name == "greedy" else 0.8, seed=3)
    chunks = list(engine.generate(PROMPT, prompt_logprobs=4, **kwargs))
    assert [t for c in chunks for t in c.tokens] == engine.run(PROMPT, **kwargs).tokens
    assert len(chunks) > 1 and all(c.prompt_logprobs is None for c in chunks[1:])
    assert_prompt_logprobs_of(target, PROMPT, chunks[0].prompt_logprobs, top=4)
    assert all(c.logprobs is None for c in chunks)  # the completion's are asked for apart


def test_prompt_logprobs_alone_score_a_text_with_one_prefill(pair):
    target = pair[0]
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(pair[1]), verifier="rrsw", tree="kary:2x3")
    long_prompt = PROMPT + [40, 2, 2, 61, 7, 0]
    assert_prompt_logprobs_of(target, long_prompt, engine.prompt_logprobs(long_prompt, top=2), top=2)
    assert_prompt_logprobs_of(target, long_prompt, engine.prompt_logprobs(long_prompt), top=0)
    # one token has no context to be drawn from: nothing to report
    assert len(engine.prompt_logprobs([5], top=3)) == 0
    assert len(next(engine.generate([5], max_new_tokens=1, prompt_logprobs=3)).prompt_logprobs) == 0


def test_a_prompt_that_fills_the_context_is_scored_but_given_no_completion(pair):
    """Scoring a text reads no position past its last token's, so a prompt of the context's
    length is scored (it was refused as "leaving no room for a completion", which scoring does
    not ask for); one token more is refused, and so is a completion of it."""
    target = pair[0]  # a context of 128
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(pair[1]), verifier="rrsw", tree="kary:2x3")
    full = [(7 * i + 3) % 64 for i in range(128)]
    assert_prompt_logprobs_of(target, full, engine.prompt_logprobs(full, top=2), top=2)
    with pytest.raises(ContextLengthExceeded, match="maximum context length is 128 tokens. However, the prompt has 129"):
        engine.prompt_logprobs(full + [1])
    with pytest.raises(ContextLengthExceeded, match="the prompt has 128 tokens, leaving no room for a completion"):
        engine.run(full, max_new_tokens=1)


def test_prompt_logprobs_are_checked_like_the_completions(pair):
    engine = SpeculativeEngine(LocalTarget(pair[0]))
    with pytest.raises(ValueError, match="prompt_logprobs must be a whole number between 0 and 20"):
        next(engine.generate(PROMPT, prompt_logprobs=21))
    with pytest.raises(ValueError, match="prompt_logprobs must be a whole number between 0 and 20"):
        engine.prompt_logprobs(PROMPT, top=-1)
    with pytest.raises(ValueError, match="out of the vocabulary"):
        engine.prompt_logprobs([5, 64])


def test_a_target_that_sends_no_prompt_log_probabilities_fails_the_request_and_its_session_is_closed(pair):
    """A target worker older than prompt log-probabilities ignores the field: the engine says
    so instead of answering without them."""

    class OldTarget:
        def __init__(self, inner):
            self.inner, self.closed = inner, 0

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def open(self, spec):
            session, owner = self.inner.open(spec), self

            class Session:
                prompt_logprobs = None
                verify = session.verify

                def close(self):
                    owner.closed += 1
                    session.close()

            return Session()

    target = OldTarget(LocalTarget(pair[0]))
    engine = SpeculativeEngine(target)
    with pytest.raises(RuntimeError, match="no log-probabilities of the prompt: its worker predates them"):
        next(engine.generate(PROMPT, prompt_logprobs=1))
    with pytest.raises(RuntimeError, match="its worker predates them"):
        engine.prompt_logprobs(PROMPT)
    assert target.closed == 2
    assert len(next(engine.generate(PROMPT, max_new_tokens=2)).tokens) >= 1  # not asked for: not needed


def test_a_target_whose_prompt_logits_are_nan_fails_the_request_saying_where(pair):
    """A NaN logit reached the prompt's log-probabilities as NaN in-process (a gRPC worker's NaN
    row is refused): JSON cannot carry it, the HTTP answer was a 400 blaming the client or a
    stream event no JSON parser reads."""
    hook = nan_row_at(pair[0], 2)
    try:
        engine = SpeculativeEngine(LocalTarget(pair[0]))
        message = (r"^the target's log-probabilities of the prompt are not numbers at 1 position\(s\), the first "
                   r"that of prompt token 3 \(from 0\): its logits there are not finite$")
        with pytest.raises(RuntimeError, match=message):
            engine.prompt_logprobs(PROMPT, top=2)
        with pytest.raises(RuntimeError, match=message):
            next(engine.generate(PROMPT, max_new_tokens=2, prompt_logprobs=0))
    finally:
        hook.remove()
    assert all(v <= 0 for v in engine.prompt_logprobs(PROMPT, top=2).chosen)
