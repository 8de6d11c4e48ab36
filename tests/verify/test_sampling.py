"""Inverse-CDF sampling (`sample_from_weights`), the draw under every verifier: each token
owns exactly its own slice of [0, 1), on float32 rows of a large vocabulary too."""

from __future__ import annotations

import pytest
import torch

from rayspec.verify import get_verifier
from rayspec.verify.base import (
    positive_part_normalized, sample_categorical, sample_from_weights, sample_without_replacement,
)
from rayspec.verify.laws import mixture_output_law
from tests.stats import assert_frequencies_match, law_of_tensor


def test_every_token_owns_its_own_slice_of_the_unit_interval_on_a_large_float32_row():
    # A peaked float32 row: a float32 running sum stops growing after the heavy tokens and
    # never reaches thousands of light ones.
    weights = torch.softmax(torch.randn(1, 32000, generator=torch.Generator().manual_seed(0)) * 3, -1)
    exact = torch.cumsum(weights.double(), -1)[0]
    total = exact[-1]
    before = torch.cat([torch.zeros(1, dtype=torch.float64), exact[:-1]])
    middles = ((before + exact) / 2 / total).unsqueeze(0)  # the middle of each token's slice
    assert torch.equal(sample_from_weights(weights, middles)[0], torch.arange(32000))


def test_a_uniform_just_below_one_draws_the_last_token_of_positive_weight():
    below_one = torch.tensor([1 - 2.0**-26, 1 - 2.0**-53], dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        weights = torch.tensor([[0.5, 0.5, 0.0, 0.0]] * 2, dtype=dtype)
        assert sample_from_weights(weights, below_one).tolist() == [1, 1]
        assert sample_categorical(weights, below_one, weights).tolist() == [1, 1]


def test_rows_of_zero_mass_give_minus_one_and_zero_weights_are_never_drawn():
    weights = torch.tensor([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    u = torch.tensor([[0.0, 0.5, 1 - 2.0**-53]] * 2, dtype=torch.float64)
    assert sample_from_weights(weights, u).tolist() == [[-1, -1, -1], [1, 1, 1]]


def _one_draw_at_a_time(q: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Sampling without replacement by its definition: `sample_from_weights` over what is left,
    the drawn token zeroed, k times."""
    u = torch.rand((q.shape[0], k), generator=generator, dtype=torch.float64)
    left, out = q.clone(), torch.full((q.shape[0], k), -1, dtype=torch.long)
    for j in range(k):
        out[:, j] = sample_from_weights(left, u[:, j])
        left.scatter_(-1, out[:, j : j + 1].clamp_min(0), 0)
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_sampling_without_replacement_gives_the_one_draw_at_a_time_definitions_tokens(dtype):
    """The same uniforms give the same tokens as the definition, bit for bit: on peaked rows,
    rows whose support is smaller than k (padded with -1), and a row of zero mass."""
    generator = torch.Generator().manual_seed(3)
    rows = torch.softmax(torch.randn(64, 50, generator=generator, dtype=torch.float64) * 4, -1)
    rows[:8, 3:] = 0  # support of 3 < k
    rows[8] = 0
    rows[9, ::2] = 0
    q = rows.to(dtype)
    for k in (1, 4, 8):
        a, b = torch.Generator().manual_seed(k), torch.Generator().manual_seed(k)
        drafts = sample_without_replacement(q, k, a)
        assert torch.equal(drafts, _one_draw_at_a_time(q, k, b)), k
        support = (q > 0).sum(-1)
        assert torch.equal((drafts >= 0).sum(-1), support.clamp_max(k)) and int(support[:8].max()) <= 3
        assert torch.equal(drafts >= 0, torch.arange(k) < support.clamp_max(k).unsqueeze(-1))  # -1s last
        real = drafts.clamp_min(0)
        assert ((q.gather(-1, real) > 0) | (drafts < 0)).all()
        assert all(len(set(row[row >= 0].tolist())) == int((row >= 0).sum()) for row in drafts)  # no repeats
    assert sample_without_replacement(q[:2], 0, torch.Generator().manual_seed(0)).shape == (2, 0)


@pytest.mark.parametrize("dtype, gap", [(torch.float32, 100.0), (torch.float16, 15.0)])
def test_a_mass_below_the_smallest_normal_number_is_renormalised_to_one(dtype, gap):
    """What sampling without replacement leaves of a peaked q once its mode is drawn can be a
    subnormal mass (float32) or one below float16's 6e-5; renormalised, it is a law all the
    same, and rrsw tests the next draft against it: a row summing to 1e-7 accepted that draft
    every time (here token 0, which the target gives 0.13, came out 0.87 of the time)."""
    q = torch.softmax(torch.tensor([0.0, gap, -2 * gap, -2 * gap], dtype=torch.float64), -1).to(dtype)
    assert 0 < float(q[0]) < torch.finfo(dtype).tiny and q[1] == 1
    removed = positive_part_normalized(q.scatter(-1, torch.tensor([1]), 0).unsqueeze(0))[0]
    assert removed.tolist() == [1.0, 0.0, 0.0, 0.0]
    p = torch.softmax(torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64), -1).to(dtype)
    rrsw = get_verifier("rrsw")
    law = mixture_output_law(rrsw, p, q, 2).double()
    assert float((law - p.double()).abs().max()) < 1e-3, law.tolist()
    n = 20_000
    generator = torch.Generator().manual_seed(8)
    rows_p, rows_q = p.expand(n, -1).contiguous(), q.expand(n, -1).contiguous()
    tokens, _ = rrsw.verify_batch(rows_p, rows_q, rrsw.sample_drafts_batch(rows_q, 2, generator), generator)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p.double() / p.double().sum()), what=f"rrsw {dtype}")
