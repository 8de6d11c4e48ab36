"""The Gumbel coupling (seed 000, Protocol 3): the sampler itself (its three forms agree, its
top k, its ties) and its coupling by a generator's state.  The laws it shares with weighted
MinHash, by Monte Carlo over many seeds, are in `test_coupling_laws.py`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayspec.coupling.gumbel import gumbel_argmax, gumbel_noise, gumbel_top_k
from rayspec.coupling.noise import KeyedNoise
from rayspec.verify import get_verifier
from tests.cases import random_law
from tests.coupling.cases import F64, PAIRS, many_seeds


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


def test_generator_randomness_couples_by_state():
    p, q = PAIRS[1]
    verifier = get_verifier("gumbel")
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(verifier.sample_target_batch(p.expand(50, -1), a), verifier.sample_drafts_batch(p.expand(50, -1), 1, b)[:, 0])
    first, second = verifier.sample_target_batch(p.expand(50, -1), a), verifier.sample_target_batch(p.expand(50, -1), a)
    assert not torch.equal(first, second)


def test_rows_that_make_no_law():
    """A row of zero mass has no sample (-1, as weighted MinHash's and `sample_from_weights`),
    not token 0 of probability zero, and hits no draft, padding included; a row holding NaN, an
    infinite or a negative weight is refused, as weighted MinHash refuses it, rather than
    emitting that token (NaN and +inf scores come first in argmax)."""
    noise = KeyedNoise(1, 2)
    assert gumbel_argmax(torch.zeros(2, 4, dtype=F64), gumbel_noise(noise, 2, 4)).tolist() == [-1, -1]
    for name in ("gumbel", "minhash"):
        verifier = get_verifier(name)
        assert verifier.sample_target(torch.zeros(4, dtype=F64), noise) == -1
        token, index = verifier.verify_batch(torch.zeros(1, 4, dtype=F64), None, torch.tensor([[2, -1]]), noise)
        assert (token.tolist(), index.tolist()) == ([-1], [-1])
    for bad in (float("nan"), float("inf"), -0.1):
        r = torch.tensor([[0.2, 0.8, 0.0], [0.5, bad, 0.6]], dtype=F64)
        for sample in (gumbel_argmax, lambda r, g: gumbel_top_k(r, g, 2)):
            with pytest.raises(ValueError, match=r"gumbel: rows \[1\] of r hold NaN, infinite or negative weights"):
                sample(r, gumbel_noise(noise, 2, 3))
