"""The top-k point-mass verifier (EAGLE-2's drafts, `rayspec.verify.topk`) on target rows
whose mass is not exactly 1 (a row rounded to float16 or bfloat16, a row decoded from the
wire within `LAW_MASS_TOLERANCE`): the emitted token follows the row's law, p / sum(p)."""

from __future__ import annotations

import itertools

import pytest
import torch

from rayspec.verify import get_verifier
from tests.stats import assert_frequencies_match, law_of_tensor


@pytest.mark.parametrize("mass", [0.9, 1.1])
def test_the_first_draft_is_accepted_with_its_share_of_the_rows_mass(mass):
    """Every draft tuple, every order: the law given the drafts is p / s for a row of mass s.
    The first step read p(x1) / 1 (the chain's mass started at 1), so x1 was emitted with
    probability p(x1) instead of p(x1) / s: 0.45 for 0.5 here, 0.55 for 0.45."""
    verifier = get_verifier("topk")
    p = torch.tensor([0.45, 0.05, 0.3, 0.2], dtype=torch.float64) * mass
    law = p / p.sum()
    for k in (1, 2, 3):
        for drafts in itertools.permutations(range(4), k):
            got = verifier.output_law(p, p, list(drafts))
            torch.testing.assert_close(got, law, rtol=0, atol=1e-12, msg=f"drafts {drafts}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_row_gives_its_own_law(dtype):
    """(0.7, 0.2, 0.1) rounded to float16 sums to 1.0001, to bfloat16 0.9995: the exact law
    given the drafts is the rounded row over its sum (3e-4 off at token 0 before), and
    sampled verification agrees with it (chi-square, 200k rows)."""
    verifier = get_verifier("topk")
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64).to(dtype).double()
    assert abs(float(p.sum()) - 1) > 1e-4
    law = p / p.sum()
    torch.testing.assert_close(verifier.output_law(p, p, [0, 1]), law, rtol=0, atol=1e-12)
    drafts = torch.tensor([[0, 1]]).expand(200_000, -1)
    rows = p.unsqueeze(0).expand(drafts.shape[0], -1)
    tokens, _ = verifier.verify_batch(rows, rows, drafts, torch.Generator().manual_seed(3))
    assert_frequencies_match(tokens.tolist(), law_of_tensor(law), what=f"topk on a {dtype} row")
