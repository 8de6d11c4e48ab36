"""The Gumbel coupling (seed 000, Protocol 3): the sampler itself, and Monte Carlo over many
seeds against the exact laws of `rayspec.coupling.bounds` (chi-square, fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayspec.coupling import bounds
from rayspec.coupling.gumbel import gumbel_argmax, gumbel_noise, gumbel_top_k
from rayspec.coupling.noise import KeyedNoise
from rayspec.verify import get_verifier
from rayspec.verify.base import without_replacement_draft_law
from tests.cases import random_law
from tests.stats import assert_frequencies_match, law_of_tensor

F64 = torch.float64
PAIRS = [  # (target p, drafter q)
    (torch.tensor([1 / 3, 1 / 3, 1 / 3], dtype=F64), torch.tensor([0.5, 0.5, 0.0], dtype=F64)),
    (torch.tensor([0.5, 0.3, 0.2], dtype=F64), torch.tensor([0.7, 0.2, 0.1], dtype=F64)),
    (torch.tensor([0.35, 0.25, 0.2, 0.15, 0.05], dtype=F64), torch.tensor([0.6, 0.1, 0.05, 0.05, 0.2], dtype=F64)),
    (torch.tensor([0.9, 0.1, 0, 0], dtype=F64), torch.tensor([1e-12, 0.5 - 1e-12, 0.5, 0], dtype=F64)),
]


def many_seeds(n: int, position: int = 0, offset: int = 0) -> KeyedNoise:
    return KeyedNoise(np.arange(n) + offset, position)


def test_the_three_forms_of_protocol_3_agree():
    """argmax log p + G = argmin -log(u) / p = argmax u^(1 / p), on the same uniforms."""
    rng = np.random.default_rng(0)
    p = torch.stack([random_law(rng, 9) for _ in range(500)])
    noise = many_seeds(500, position=3)
    u = noise.uniform(500, 9)
    token = gumbel_argmax(p, gumbel_noise(noise, 500, 9))
    assert torch.equal(token, torch.argmin(-torch.log(u) / p, -1))
    assert torch.equal(token, torch.argmax(u ** (1 / p), -1))
    assert (p.gather(-1, token[:, None]) > 0).all()


def test_top_k_is_sorted_scores_and_stops_at_the_support():
    rng = np.random.default_rng(1)
    q = torch.stack([random_law(rng, 7) for _ in range(300)]).to(torch.float32)
    noise = gumbel_noise(many_seeds(300), 300, 7)
    drafts = gumbel_top_k(q, noise, 5)
    assert torch.equal(drafts[:, 0], gumbel_argmax(q, noise))
    for row, d in zip(range(300), drafts):
        support = int((q[row] > 0).sum())
        valid = d[d >= 0]
        assert len(valid) == min(5, support) and (d[len(valid):] == -1).all()
        assert (q[row, valid] > 0).all() and len(set(valid.tolist())) == len(valid)
        scores = torch.log(q[row].double()) + noise[row]
        assert (scores[valid][:-1] >= scores[valid][1:]).all()


def test_ties_go_to_the_lowest_token_id():
    noise = torch.zeros(1, 6, dtype=F64)
    r = torch.tensor([[0.1, 0.3, 0.3, 0.0, 0.3, 0.0]])
    assert gumbel_argmax(r, noise).tolist() == [1]
    assert gumbel_top_k(r, noise, 5).tolist() == [[1, 2, 4, 0, -1]]
    assert gumbel_top_k(r, noise, 2).tolist() == [[1, 2]]
    # many ties (coarse laws and coarse noise): the k first of a stable descending sort
    rng = np.random.default_rng(2)
    r = torch.tensor(rng.integers(0, 4, (400, 9)), dtype=F64)
    r[r.sum(-1) == 0, 0] = 1
    noise = torch.tensor(rng.integers(0, 3, (400, 9)), dtype=F64)
    scores = torch.log(r) + noise
    expected = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    for k in (1, 3, 9):
        got = gumbel_top_k(r, noise, k)
        want = torch.where(scores.gather(-1, expected[:, :k]) > -torch.inf, expected[:, :k], -1)
        assert torch.equal(got, want)
    assert torch.equal(gumbel_argmax(r, noise), expected[:, 0])


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_target_follows_p_and_drafts_follow_plackett_luce_over_seeds(case):
    p, q = PAIRS[case]
    verifier, n = get_verifier("gumbel"), 20_000
    noise = many_seeds(n, position=17, offset=1000 * case)
    tokens = verifier.sample_target_batch(p.expand(n, -1), noise)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p), what="gumbel target")
    drafts = verifier.sample_drafts_batch(q.expand(n, -1), 2, noise)
    samples = [tuple(x for x in row if x >= 0) for row in drafts.tolist()]
    assert_frequencies_match(samples, dict(without_replacement_draft_law(q, 2)), what="gumbel drafts")


def test_target_follows_p_along_positions_of_one_seed():
    p = PAIRS[2][0]
    verifier = get_verifier("gumbel")
    tokens = [verifier.sample_target(p, KeyedNoise(5, t)) for t in range(3000)]
    assert_frequencies_match(tokens, law_of_tensor(p), what="gumbel target over positions")


@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_collisions_follow_theorem_3_token_by_token(case):
    """Cells (a = b = j) with Theorem 3's eq. 7, plus one cell for a != b."""
    p, q = PAIRS[case]
    verifier, n = get_verifier("gumbel"), 20_000
    noise = many_seeds(n, position=2, offset=7 + 1000 * case)
    target = verifier.sample_target_batch(p.expand(n, -1), noise)
    first = verifier.sample_drafts_batch(q.expand(n, -1), 1, noise)[:, 0]
    per_token = bounds.gumbel_collision_per_token(p, q)
    law = {("same", j): float(x) for j, x in enumerate(per_token) if x > 0}
    law["different"] = 1 - float(per_token.sum())
    samples = [("same", int(a)) if a == b else "different" for a, b in zip(target, first)]
    assert_frequencies_match(samples, law, what="gumbel collisions")


@pytest.mark.parametrize("k", [2, 3])
def test_top_k_hits_follow_the_exact_formula(k):
    p, q = PAIRS[2]
    verifier, n = get_verifier("gumbel"), 20_000
    noise = many_seeds(n, position=9, offset=k)
    target = verifier.sample_target_batch(p.expand(n, -1), noise)
    drafts = verifier.sample_drafts_batch(q.expand(n, -1), k, noise)
    hits = (drafts == target[:, None]).any(-1).tolist()
    exact = bounds.gumbel_top_k_hit(p, q, k)
    assert_frequencies_match(hits, {True: exact, False: 1 - exact}, what=f"gumbel top-{k} hits")


def test_generator_randomness_couples_by_state():
    p, q = PAIRS[1]
    verifier = get_verifier("gumbel")
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(verifier.sample_target_batch(p.expand(50, -1), a), verifier.sample_drafts_batch(p.expand(50, -1), 1, b)[:, 0])
    first, second = verifier.sample_target_batch(p.expand(50, -1), a), verifier.sample_target_batch(p.expand(50, -1), a)
    assert not torch.equal(first, second)
