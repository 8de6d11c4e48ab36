"""Greedy drafting: each row's top-k tokens, largest first, ties in token-id order, zeros
never drafted — the order of a stable descending sort, reached by one top-k over integer keys."""

from __future__ import annotations

import pytest
import torch

from rayspec.verify import get_verifier
from rayspec.verify.processing import top_k_ids


def _stable_sort_ids(q: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(q.double(), dim=-1, descending=True, stable=True).indices[:, :k]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_top_k_ids_are_a_stable_descending_sorts_on_rows_full_of_ties(dtype):
    generator = torch.Generator().manual_seed(1)
    rows = torch.softmax(torch.randn(48, 300, generator=generator) * 3, -1)
    rows = (rows * 64).round() / 64  # few distinct values: ties everywhere, many zeros
    rows[0] = 0.25  # one value across the row
    rows[1, 7] = rows[1, 3] = rows[1].max() + 1  # a tie at the top, the higher id first in memory order
    q = rows.to(dtype)
    for k in (1, 3, 17, 300):
        assert torch.equal(top_k_ids(q, k), _stable_sort_ids(q, k)), (dtype, k)
    assert top_k_ids(q, 2)[0].tolist() == [0, 1] and top_k_ids(q, 1)[1].tolist() == [3]


def test_greedy_drafts_are_the_top_tokens_and_never_a_zero_weight_one():
    q = torch.tensor([[0.1, 0.5, 0.0, 0.4, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    drafts = get_verifier("greedy").sample_drafts_batch(q, 7, None)
    assert drafts.tolist() == [[1, 3, 0, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1], [0, 1, 2, 3, 4, -1, -1]]
