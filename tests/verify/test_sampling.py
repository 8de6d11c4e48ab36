"""Inverse-CDF sampling (`sample_from_weights`), the draw under every verifier: each token
owns exactly its own slice of [0, 1), on float32 rows of a large vocabulary too."""

from __future__ import annotations

import torch

from rayspec.verify.base import sample_categorical, sample_from_weights


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
