"""The sampling laws: the half-precision draft law a drafter draws from, the logit bias and
the penalties, and the raw law's log-probabilities."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.processing import (
    SamplingParams, TokenHistory, adjust_logits, half_precision, logits_to_probs, token_logprobs,
    truncated_law,
)


def test_the_half_precision_law_is_a_law_close_to_the_full_one_and_rebuilt_exactly_from_float16():
    logits = torch.randn(16, 8192, generator=torch.Generator().manual_seed(3)) * 5
    for params in (SamplingParams(0.3), SamplingParams(1.0), SamplingParams(1.0, top_k=20), SamplingParams(0.0)):
        probs = logits_to_probs(logits, params)
        law, divisors = half_precision(probs)
        assert law.dtype == torch.float32 and divisors.shape == (16,)
        assert torch.allclose(law.sum(-1), torch.ones(16), atol=1e-5)
        # each probability moves by float16 rounding (2^-11 of itself) and the renormalisation
        kept = probs > 6.2e-5  # float16 normal range: relative rounding bound holds
        assert ((law - probs).abs()[kept] <= probs[kept] * 2.0**-10).all()
        assert ((law == 0) == (probs.to(torch.float16) == 0)).all()  # support: all but the sub-6e-8 tail
        weights = (law * divisors.unsqueeze(-1)).to(torch.float16)
        assert torch.equal(weights.float() / divisors.unsqueeze(-1), law)


def test_a_tiny_temperature_is_the_argmax_law_not_nan():
    logits = torch.tensor([[1.0, 3.0, 2.0, -50.0]])
    for temperature in (1e-30, 1e-45, 1e-46, 3.5e-235):  # 3 / 1e-45 overflows float32; 1e-46 is 0 in float32
        assert torch.equal(logits_to_probs(logits, SamplingParams(temperature)), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
        assert torch.equal(logits_to_probs(logits.double(), SamplingParams(temperature), torch.float64),
                           torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=torch.float64))
    tied = logits_to_probs(torch.tensor([[3.0, 1.0, 3.0]]), SamplingParams(1e-300))
    assert torch.equal(tied, torch.tensor([[0.5, 0.0, 0.5]]))  # the limit law: uniform over the argmax's ties


def test_a_temperature_past_float32s_largest_is_the_uniform_law_over_the_allowed_tokens():
    logits = torch.tensor([[1.0, 3.0, 2.0, -50.0]])
    for temperature in (1e30, 3.5e38, 1e300):  # 3.5e38 and 1e300 are inf in float32
        params = SamplingParams(temperature, allowed_token_ids=(0, 2))
        assert torch.allclose(logits_to_probs(logits, params), torch.tensor([[0.5, 0.0, 0.5, 0.0]]))
        assert torch.allclose(logits_to_probs(logits, SamplingParams(temperature)), torch.full((1, 4), 0.25))


def test_a_tiny_top_p_keeps_the_most_likely_token():
    logits = torch.tensor([[1.0, 3.0, 2.0, -50.0]])
    for top_p in (1e-30, 1e-60):  # 1e-60 is 0 in float32, and no token's mass before it is below 0
        assert torch.equal(logits_to_probs(logits, SamplingParams(1.0, top_p=top_p)),
                           torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


@pytest.mark.parametrize("penalty", [1e-300, 1e-40, 1e-20, 1e20, 1e38, 1e300])
def test_an_extreme_repetition_penalty_saturates_into_a_law_not_nan(penalty):
    """Tokens 0 and 1 were seen.  A vanishing penalty (1e-300 is 0 in float32) sends a seen
    positive logit to the top and a negative one to 0; an enormous one sends a positive logit
    to 0 and a negative one to the bottom.  Either way the law is a law: the limit the penalty
    tends to."""
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0], [2.0, 1.0, 0.5, -3.0]])
    history = TokenHistory(prompt_ids=[0, 1]).rows([[], []])
    probs = logits_to_probs(logits, SamplingParams(1.0, repetition_penalty=penalty), history=history)
    assert bool(probs.isfinite().all()) and torch.allclose(probs.sum(-1), torch.ones(2))
    if penalty < 1:  # each row's largest seen positive logit takes all (row 1: 2 / p beats 1 / p)
        assert torch.equal(probs, torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    else:
        expected = torch.softmax(torch.tensor([[0.0, -math.inf, 0.5, 0.0], [0.0, 0.0, 0.5, -3.0]]), -1)
        assert torch.allclose(probs, expected, atol=1e-6)


def test_a_plus_infinite_logit_is_the_limit_law_at_every_temperature_not_nan():
    """A float16 model overflows to +inf: the law is the T -> 0 limit, uniform over the row's
    +inf entries, at any T > 0 and under min-p, top-k or top-p; T = 0 keeps the first of them.
    The other rows of the batch are untouched, and every verifier emits the only token allowed."""
    inf = math.inf
    logits = torch.tensor([[1.0, 7e4, 0.0, -1.0], [inf, 2.0, inf, -inf], [0.5, 1.0, 2.0, 3.0]], dtype=torch.float16)
    assert logits[0, 1] == inf  # 7e4 overflows float16
    limit = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0]])
    for temperature in (1e-30, 0.7, 1.0, 1e30, 1e300):
        for extra in ({}, dict(top_p=0.9), dict(top_k=2), dict(min_p=0.1)):
            params = SamplingParams(temperature, **extra)
            probs = logits_to_probs(logits, params)
            assert torch.equal(probs[:2], limit), (temperature, extra)
            assert torch.equal(probs[2], logits_to_probs(logits[2:], params)[0])
    greedy = logits_to_probs(logits, SamplingParams(0.0))
    assert torch.equal(greedy[:2], torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    p = logits_to_probs(logits[:1], SamplingParams(1.0))
    q = torch.full((1, 4), 0.25)
    for name in available_verifiers():
        verifier = get_verifier(name)
        generator = torch.Generator().manual_seed(0)
        tokens, _ = verifier.verify_batch(p, q, verifier.sample_drafts_batch(q, 1, generator), generator)
        assert tokens.tolist() == [1], name


def test_rows_of_nan_or_only_minus_infinite_logits_are_refused():
    """NaN is the model's fault (a server error), a row with every token banned the request's."""
    nan, inf = math.nan, math.inf
    for bad, error, message in (([nan, 1.0, 2.0], FloatingPointError, "hold NaN"),
                                ([inf, nan, 0.0], FloatingPointError, "hold NaN"),
                                ([-inf, -inf, -inf], ValueError, "ban every token")):
        logits = torch.tensor([[0.0, 1.0, 2.0], bad])
        for params in (SamplingParams(0.0), SamplingParams(1.0), SamplingParams(0.5, top_p=0.9)):
            with pytest.raises(error, match=rf"rows \[1\] of the logits {message}"):
                logits_to_probs(logits, params)


def test_an_infinite_or_nan_temperature_is_refused():
    for temperature in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="temperature must be >= 0 and finite"):
            SamplingParams(temperature)


def test_token_logprobs_are_the_raw_laws_log_probabilities_and_its_most_likely_tokens():
    # Row 0's law is (1/8, 3/8, 4/8) whatever the shift of its logits; row 1's is uniform.
    logits = torch.tensor([[1.0, 3.0, 4.0], [1.0, 1.0, 1.0]]).log() + torch.tensor([[5.0], [-2.0]])
    chosen, values, ids, ranks = token_logprobs(logits, torch.tensor([1, 2]), top=2)
    assert chosen.tolist() == pytest.approx([torch.tensor(3 / 8).log().item(), torch.tensor(1 / 3).log().item()])
    assert ids[0].tolist() == [2, 1]
    assert values[0].tolist() == pytest.approx([torch.tensor(0.5).log().item(), torch.tensor(3 / 8).log().item()])
    assert values[1].tolist() == pytest.approx([torch.tensor(1 / 3).log().item()] * 2)
    assert ranks.tolist() == [2, 1]  # row 1: three tied tokens, each first
    assert chosen.dtype == values.dtype == torch.float32 and ids.dtype == ranks.dtype == torch.int64


def test_token_logprobs_of_a_row_holding_inf_are_those_of_the_law_sampled_from_it():
    """A float16 overflow: the row's law is uniform over its +inf entries (`logits_to_probs`);
    its log-softmax was NaN, and so were the log-probabilities reported."""
    logits = torch.tensor([[1.0, math.inf, 2.0, math.inf], [1.0, math.inf, 2.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
    chosen, values, ids, ranks = token_logprobs(logits, torch.tensor([3, 1, 0]), top=2)
    assert chosen[:2].tolist() == pytest.approx([math.log(0.5), 0.0])
    assert chosen[2].item() == pytest.approx(torch.log_softmax(logits[2], -1)[0].item())
    assert values[0].tolist() == pytest.approx([math.log(0.5)] * 2) and values[1].tolist() == [0.0, -math.inf]
    assert ids[1, 0] == 1 and ranks[:2].tolist() == [1, 1]
    probs = logits_to_probs(logits[:2], SamplingParams(1.0))
    assert torch.allclose(probs.log(), torch.log_softmax(torch.where(logits[:2] == math.inf, 0.0, -math.inf), -1))


def test_token_logprobs_taken_a_block_of_rows_at_a_time_equal_the_whole_at_once():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 50, generator=generator) * 4
    tokens = torch.randint(50, (10,), generator=generator)
    whole = token_logprobs(logits, tokens, top=4, rows_at_once=10)
    for rows in (1, 3, 7):
        assert all(torch.equal(a, b) for a, b in zip(token_logprobs(logits, tokens, top=4, rows_at_once=rows), whole))
    chosen, values, ids, ranks = token_logprobs(logits[:0], tokens[:0], top=4, rows_at_once=3)
    assert chosen.shape == ranks.shape == (0,) and values.shape == ids.shape == (0, 4)


def test_token_ranks_count_the_strictly_more_likely_tokens():
    """vLLM's rank, against a count over the vocabulary: ties share the better rank."""
    generator = torch.Generator().manual_seed(5)
    logits = torch.randint(0, 6, (40, 30), generator=generator).float()  # many ties
    tokens = torch.randint(30, (40,), generator=generator)
    ranks = token_logprobs(logits, tokens, top=3, rows_at_once=7)[3]
    for row, token, rank in zip(logits, tokens, ranks):
        assert rank == 1 + sum(value > row[token] for value in row.tolist())
    top_ids = token_logprobs(logits, tokens, top=1)[2][:, 0]
    assert token_logprobs(logits, top_ids, top=1)[3].tolist() == [1] * 40


def test_token_logprobs_ask_for_at_most_the_vocabulary():
    chosen, values, ids, _ = token_logprobs(torch.randn(4, 3, dtype=torch.float16), torch.tensor([0, 1, 2, 0]), top=20)
    assert values.shape == ids.shape == (4, 3) and chosen.shape == (4,)
    assert torch.allclose(values.exp().sum(-1), torch.ones(4), atol=1e-3)  # the whole law, most likely first
    assert bool((values.diff(dim=-1) <= 0).all())


# ------------------------------------------------------------------ bias and penalties


def _penalised_by_hand(logits: list[float], prompt: list[int], completion: list[int], params: SamplingParams) -> list[float]:
    """One row, token by token, as the definitions read: OpenAI's bias, then CTRL's repetition
    penalty on prompt and completion tokens (HF's and vLLM's form), then OpenAI's frequency
    and presence penalties on completion tokens."""
    bias = dict(params.logit_bias)
    out = []
    for token, logit in enumerate(logits):
        logit += bias.get(token, 0.0)
        if token in prompt or token in completion:
            logit = logit / params.repetition_penalty if logit > 0 else logit * params.repetition_penalty
        count = completion.count(token)
        logit -= params.frequency_penalty * count + params.presence_penalty * (count > 0)
        out.append(logit)
    return out


def test_bias_and_penalties_follow_their_definitions_for_each_rows_path():
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(4, 12, generator=generator) * 3
    prompt, completion = [1, 2, 2, 9], [3, 3, 4]
    paths = [[], [5], [5, 3], [9, 9, 1]]  # drafted tokens after the completion, before each row
    params = SamplingParams(presence_penalty=0.7, frequency_penalty=-0.4, repetition_penalty=1.6,
                            logit_bias={0: -100.0, 5: 2.5, 11: 1.0})
    history = TokenHistory(prompt)
    history.extend(completion[:2])
    history.extend(completion[2:])  # extended in parts, as commits come
    rows = history.rows(paths)
    assert sorted(rows.columns.tolist()) == [1, 2, 3, 4, 5, 9]  # penalties touch these columns only
    adjusted = adjust_logits(logits, params, rows)
    for row, path in enumerate(paths):
        expected = _penalised_by_hand(logits[row].tolist(), prompt, completion + path, params)
        assert adjusted[row].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-5), row
    probs = logits_to_probs(logits, params, history=history.rows(paths))
    expected = torch.softmax(torch.tensor([_penalised_by_hand(row.tolist(), prompt, completion + path, params)
                                           for row, path in zip(logits, paths)]), -1)
    assert torch.allclose(probs, expected, atol=1e-6)


def test_the_bias_comes_before_the_repetition_penalty_and_greedy_takes_the_adjusted_argmax():
    logits = torch.tensor([[-1.0, 1.5, 0.0]])
    history = TokenHistory(prompt_ids=[0, 1]).rows([[]])
    # token 0: -1 + 3 = 2, then / 2 = 1; token 1: 1.5 / 2 = 0.75 (penalised on the biased logit)
    params = SamplingParams(repetition_penalty=2.0, logit_bias={0: 3.0})
    assert adjust_logits(logits, params, history).tolist() == [[1.0, 0.75, 0.0]]
    assert logits_to_probs(logits, SamplingParams(0.0)).tolist() == [[0.0, 1.0, 0.0]]
    assert logits_to_probs(logits, replace(params, temperature=0.0), history=history).tolist() == [[1.0, 0.0, 0.0]]


def test_a_bias_alone_needs_no_history_and_leaves_the_input_untouched():
    logits = torch.zeros(2, 4)
    probs = logits_to_probs(logits, SamplingParams(logit_bias={2: math.log(3.0)}))
    assert torch.allclose(probs, torch.tensor([[1 / 6, 1 / 6, 1 / 2, 1 / 6]] * 2))
    one_law = logits_to_probs(torch.zeros(4), SamplingParams(logit_bias={2: math.log(3.0)}))  # [..., V], any batch
    assert torch.allclose(one_law, torch.tensor([1 / 6, 1 / 6, 1 / 2, 1 / 6]))
    assert bool((logits == 0).all())
    with pytest.raises(ValueError, match="penalties, min_tokens, bad words and a regex need the history before each law"):
        logits_to_probs(logits, SamplingParams(presence_penalty=0.5))


@pytest.mark.parametrize("kwargs, message", [
    (dict(presence_penalty=2.5), r"presence_penalty must be in \[-2, 2\], got 2.5"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty must be in"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be > 0 and finite"),
    (dict(repetition_penalty=float("inf")), "repetition_penalty must be > 0 and finite"),
    (dict(logit_bias={3: 101.0}), r"the bias of token 3 must be in \[-100, 100\], got 101.0"),
    (dict(logit_bias={3: float("nan")}), "the bias of token 3 must be in"),
    (dict(logit_bias={-1: 1.0}), "token -1 is negative or given twice"),
    (dict(logit_bias=[(4, 1.0), (4, 2.0)]), "token 4 is negative or given twice"),
    (dict(logit_bias={"x": 1.0}), "logit_bias must map token ids to numbers"),
])
def test_bad_penalties_and_biases_are_refused_with_their_names(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("top_k", [-2, 2**31])
def test_top_k_out_of_range_is_refused(top_k):
    with pytest.raises(ValueError, match=rf"top_k must be in \[0, 2\^31\) \(0 or -1 disables it\), got {top_k}"):
        SamplingParams(top_k=top_k)


def test_top_k_minus_one_is_vllms_off():
    assert SamplingParams(top_k=-1) == SamplingParams(top_k=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(top_k=2.5), "top_k must be an integer, got 2.5"),
    (dict(top_k=True), "top_k must be an integer, got True"),
    (dict(top_k="3"), "top_k must be an integer, got '3'"),
    (dict(temperature="1"), "temperature must be a number, got '1'"),
    (dict(temperature=False), "temperature must be a number, got False"),
    (dict(top_p=None), "top_p must be a number, got None"),
    (dict(min_p=[0.1]), r"min_p must be a number, got \[0.1\]"),
    (dict(presence_penalty="0.5"), "presence_penalty must be a number, got '0.5'"),
    (dict(frequency_penalty=None), "frequency_penalty must be a number, got None"),
    (dict(repetition_penalty=True), "repetition_penalty must be a number, got True"),
    (dict(min_tokens=True), "min_tokens must be an integer, got True"),
])
def test_sampling_parameters_of_the_wrong_type_are_refused_with_their_names(kwargs, message):
    """Only ranges were checked: top_k=2.5 was accepted and failed later inside torch.topk,
    top_k=True became 1, and a string or None compared with a bound raised a TypeError."""
    with pytest.raises(ValueError, match=rf"^{message}$"):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(logit_bias={1.7: 5.0}), "logit_bias: a token id must be an integer, got 1.7"),
    (dict(logit_bias={True: 5.0}), "logit_bias: a token id must be an integer, got True"),
    (dict(logit_bias={2: True}), "logit_bias: the bias of token 2 must be a number, got True"),
    (dict(allowed_token_ids=(True, 5)), "allowed_token_ids must be a list of token ids"),
    (dict(stop_token_ids=(False,)), "stop_token_ids must be a list of token ids"),
    (dict(bad_words_ids=((True, 2),)), "bad_words_ids must be a list of token id sequences"),
])
def test_token_ids_given_as_bools_or_fractions_are_refused_not_read_as_other_tokens(kwargs, message):
    """int() read the logit_bias key 1.7, and int() and operator.index the key or id True, as
    token 1: logit_bias={1.7: 5.0} biased token 1, which nobody named."""
    with pytest.raises(ValueError, match=rf"^{message}$"):
        SamplingParams(**kwargs)
    # ids written as JSON keys are (OpenAI's), and integers of any kind, are still read
    assert SamplingParams(logit_bias={"7": 1, np.int64(2): np.float32(-3.5)}).logit_bias == ((2, -3.5), (7, 1.0))
    assert SamplingParams(allowed_token_ids=(np.int32(5), 1)).allowed_token_ids == (1, 5)


def test_sampling_parameters_are_kept_as_plain_floats_and_ints_whatever_numbers_they_are_given():
    params = SamplingParams(np.float32(0.5), np.float64(0.75), np.int64(3), presence_penalty=1, min_p=np.float32(0.25),
                            min_tokens=np.int32(2))
    assert params == SamplingParams(0.5, 0.75, 3, presence_penalty=1.0, min_p=0.25, min_tokens=2)
    assert [type(getattr(params, name)) for name in ("temperature", "top_p", "top_k", "presence_penalty", "min_p",
                                                     "min_tokens")] == [float, float, int, float, float, int]


def test_a_bias_is_kept_as_sorted_pairs_and_checked_against_the_vocabulary():
    params = SamplingParams(logit_bias={"7": 1, 2: -3.5})
    assert params.logit_bias == ((2, -3.5), (7, 1.0)) and params == SamplingParams(logit_bias=[(7, 1.0), (2, -3.5)])
    params.check_vocabulary(8)
    with pytest.raises(ValueError, match="logit_bias names token 7, outside the vocabulary of 7 tokens"):
        params.check_vocabulary(7)
    assert not params.uses_history and SamplingParams(repetition_penalty=1.1).uses_history


def test_a_truncated_law_keeps_each_rows_k_likeliest_tokens_renormalised():
    probs = torch.tensor([[0.1, 0.4, 0.0, 0.3, 0.2], [0.25, 0.25, 0.25, 0.25, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    kept = truncated_law(probs, 2)
    assert torch.allclose(kept, torch.tensor([[0, 4 / 7, 0, 3 / 7, 0], [0.5, 0.5, 0, 0, 0], [0, 0, 1.0, 0, 0]]))
    assert truncated_law(probs, 0) is probs and truncated_law(probs, 5) is probs  # off, and k >= V
    wide = torch.softmax(torch.randn(8, 8192, generator=torch.Generator().manual_seed(0)), -1)
    assert torch.equal((truncated_law(wide, 64) > 0).sum(-1), torch.full((8,), 64))
    with pytest.raises(ValueError, match="k must be 0"):
        truncated_law(probs, -1)
