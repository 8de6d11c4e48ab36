"""The sampling laws: the half-precision draft law a drafter draws from."""

from __future__ import annotations

import pytest
import torch

from rayspec.verify.processing import SamplingParams, half_precision, logits_to_probs, token_logprobs


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
    for temperature in (1e-30, 1e-45):  # 3 / 1e-45 overflows float32
        assert torch.equal(logits_to_probs(logits, SamplingParams(temperature)), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))


def test_an_infinite_or_nan_temperature_is_refused():
    for temperature in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match="temperature must be >= 0 and finite"):
            SamplingParams(temperature)


def test_token_logprobs_are_the_raw_laws_log_probabilities_and_its_most_likely_tokens():
    # Row 0's law is (1/8, 3/8, 4/8) whatever the shift of its logits; row 1's is uniform.
    logits = torch.tensor([[1.0, 3.0, 4.0], [1.0, 1.0, 1.0]]).log() + torch.tensor([[5.0], [-2.0]])
    chosen, values, ids = token_logprobs(logits, torch.tensor([1, 2]), top=2)
    assert chosen.tolist() == pytest.approx([torch.tensor(3 / 8).log().item(), torch.tensor(1 / 3).log().item()])
    assert ids[0].tolist() == [2, 1]
    assert values[0].tolist() == pytest.approx([torch.tensor(0.5).log().item(), torch.tensor(3 / 8).log().item()])
    assert values[1].tolist() == pytest.approx([torch.tensor(1 / 3).log().item()] * 2)
    assert chosen.dtype == values.dtype == torch.float32 and ids.dtype == torch.int64


def test_token_logprobs_taken_a_block_of_rows_at_a_time_equal_the_whole_at_once():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 50, generator=generator) * 4
    tokens = torch.randint(50, (10,), generator=generator)
    whole = token_logprobs(logits, tokens, top=4, rows_at_once=10)
    for rows in (1, 3, 7):
        assert all(torch.equal(a, b) for a, b in zip(token_logprobs(logits, tokens, top=4, rows_at_once=rows), whole))
    chosen, values, ids = token_logprobs(logits[:0], tokens[:0], top=4, rows_at_once=3)
    assert chosen.shape == (0,) and values.shape == ids.shape == (0, 4)


def test_token_logprobs_ask_for_at_most_the_vocabulary():
    chosen, values, ids = token_logprobs(torch.randn(4, 3, dtype=torch.float16), torch.tensor([0, 1, 2, 0]), top=20)
    assert values.shape == ids.shape == (4, 3) and chosen.shape == (4,)
    assert torch.allclose(values.exp().sum(-1), torch.ones(4), atol=1e-3)  # the whole law, most likely first
    assert bool((values.diff(dim=-1) <= 0).all())
