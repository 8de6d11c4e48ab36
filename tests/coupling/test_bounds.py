"""The exact collision probabilities of seed 000 (`rayspec.coupling.bounds`) against the
paper's theorems and worked values.

Notation: the seed-000 notes call the drafter P and the target Q; here, as everywhere in
rayspec, p is the target and q the drafter.  The k = 1 formulas are symmetric in (p, q).
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
import torch
from scipy import integrate

from rayspec.coupling import bounds
from rayspec.coupling.noise import KeyedNoise
from rayspec.verify import get_verifier
from tests.cases import random_law, random_pairs
from tests.stats import assert_frequencies_match, law_of_tensor

F64 = torch.float64
TOL = 1e-12


def t(*x) -> torch.Tensor:
    return torch.tensor([float(v) for v in x], dtype=F64)


# (drafter, target, TV, Gumbel, WMH) — the notes' table, A.6 "Worked values", exact.
WORKED = [
    ((F(1, 2), F(1, 2), 0), (F(1, 3), F(1, 3), F(1, 3)), F(1, 3), F(2, 3), F(7, 12)),
    ((F(3, 5), F(2, 5), 0), (F(1, 2), 0, F(1, 2)), F(1, 2), F(3, 8), F(11, 30)),
    ((F(7, 10), F(1, 5), F(1, 10)), (F(1, 2), F(3, 10), F(1, 5)), F(1, 5), F(123, 155), F(31, 40)),
    ((F(1, 2), F(3, 10), F(1, 5)), (F(1, 5), F(3, 10), F(1, 2)), F(3, 10), F(41, 65), F(41, 65)),
]


@pytest.mark.parametrize("row", WORKED, ids=[f"row{i}" for i in range(len(WORKED))])
def test_worked_values(row):
    drafter, target, tv, gumbel, wmh = row
    p, q = t(*target), t(*drafter)
    assert abs(float(bounds.total_variation(p, q)) - tv) < TOL
    assert abs(float(bounds.optimal_collision(p, q)) - (1 - tv)) < TOL
    assert abs(float(bounds.worst_case_collision(p, q)) - (1 - tv) / (1 + tv)) < TOL
    for got in (bounds.gumbel_collision(p, q), bounds.gumbel_collision_per_token_direct(p, q).sum(),
                bounds.gumbel_top_k_hit(p, q, 1), bounds.gumbel_collision(q, p)):
        assert abs(float(got) - gumbel) < TOL
    for got in (bounds.minhash_collision(p, q), bounds.minhash_top_k_hit(p, q, 1), bounds.minhash_collision(q, p)):
        assert abs(float(got) - wmh) < TOL


def _pairs(count: int, seed: int):
    pairs = list(random_pairs(count, seed, sizes=range(2, 11)))
    return [(p, q) for _, p, q in pairs]


def test_ordering_on_random_pairs():
    """Theorem 3 and Claim 5: 1 - TV >= Gumbel >= WMH >= (1 - TV) / (1 + TV), for every pair
    and, for Gumbel >= WMH, for every token j (the paper proves it pointwise)."""
    for p, q in _pairs(2000, seed=3):
        gumbel_j = bounds.gumbel_collision_per_token(p, q)
        wmh_j = bounds.minhash_collision_per_token(p, q)
        assert torch.isfinite(gumbel_j).all() and torch.isfinite(wmh_j).all()
        assert (gumbel_j >= wmh_j - TOL).all(), (p, q)
        assert (gumbel_j <= torch.minimum(p, q) + TOL).all()
        gumbel, wmh = float(gumbel_j.sum()), float(wmh_j.sum())
        assert float(bounds.optimal_collision(p, q)) + TOL >= gumbel >= wmh - TOL
        assert wmh >= float(bounds.worst_case_collision(p, q)) - TOL


def test_sorted_gumbel_formula_equals_the_direct_one():
    pairs = _pairs(400, seed=4)
    for p, q in pairs:
        fast = bounds.gumbel_collision_per_token(p, q)
        assert torch.allclose(fast, bounds.gumbel_collision_per_token_direct(p, q), atol=TOL, rtol=0)
    # batched, with ties in p / q and the repo's lower bound sum_j m_j / (m_j + sum M - M_j)
    p = torch.stack([p for p, _ in pairs if p.numel() == 6])
    q = torch.stack([q for p, q in pairs if p.numel() == 6])
    q[0] = p[0].clone()
    q[1] = 2 * p[1] / (1 + p[1].sum())  # q_i = c p_i where p_i > 0: every ratio ties
    fast = bounds.gumbel_collision_per_token(p, q)
    assert torch.allclose(fast, bounds.gumbel_collision_per_token_direct(p, q), atol=TOL, rtol=0)
    low, high = torch.minimum(p, q), torch.maximum(p, q)
    repo_bound = (low / (low + high.sum(-1, keepdim=True) - high)).sum(-1)
    assert (fast.sum(-1) >= repo_bound - TOL).all()
    assert abs(float(fast[0].sum()) - 1) < TOL


def test_two_tokens_both_couplings_are_maximal():
    rng = np.random.default_rng(5)
    for a, b in rng.random((200, 2)):
        p, q = t(a, 1 - a), t(b, 1 - b)
        optimal = float(bounds.optimal_collision(p, q))
        assert abs(float(bounds.gumbel_collision(p, q)) - optimal) < TOL
        assert abs(float(bounds.minhash_collision(p, q)) - optimal) < TOL


@pytest.mark.parametrize("d", range(1, 7))
def test_theorem_2_witnesses(d):
    """P_i uniform on {0..d} minus i: pairwise TV 1/d, and both couplings reach exactly the
    Theorem 2 bound (d - 1) / (d + 1)."""
    laws = [torch.tensor([0.0 if j == i else 1.0 / d for j in range(d + 1)], dtype=F64) for i in range(d + 1)]
    for i in range(d + 1):
        for j in range(d + 1):
            if i == j:
                continue
            p, q = laws[i], laws[j]
            assert abs(float(bounds.total_variation(p, q)) - 1 / d) < TOL
            for value in (bounds.gumbel_collision(p, q), bounds.minhash_collision(p, q), bounds.worst_case_collision(p, q)):
                assert abs(float(value) - (d - 1) / (d + 1)) < TOL


@pytest.mark.parametrize("a,b", [((0, 1), (0, 1, 2)), ((0, 1, 2), (1, 2, 3, 4)), ((0,), (0, 1, 2, 3)), ((0, 1), (2, 3))])
def test_uniform_sets(a, b):
    """Uniform laws on sets A, B (#A <= #B): Gumbel is the Jaccard index (Broder's MinHash),
    WMH (1 + |1/#A - 1/#B|) #(A n B) / (#(A u B) + #B - #A)."""
    n = 1 + max(a + b)
    p = torch.tensor([1.0 / len(a) if i in a else 0.0 for i in range(n)], dtype=F64)
    q = torch.tensor([1.0 / len(b) if i in b else 0.0 for i in range(n)], dtype=F64)
    inter, union = len(set(a) & set(b)), len(set(a) | set(b))
    wmh = (1 + abs(1 / len(a) - 1 / len(b))) * inter / (union + len(b) - len(a))
    for x, y in ((p, q), (q, p)):
        assert abs(float(bounds.gumbel_collision(x, y)) - inter / union) < TOL
        assert abs(float(bounds.minhash_collision(x, y)) - wmh) < TOL


def test_gumbel_beats_wmh_strictly_on_generic_pairs():
    rng = np.random.default_rng(6)
    for _ in range(300):
        size = rng.integers(3, 9)
        p, q = torch.tensor(rng.dirichlet(np.ones(size))), torch.tensor(rng.dirichlet(np.ones(size)))
        assert float(bounds.gumbel_collision(p, q)) > float(bounds.minhash_collision(p, q)) + 1e-9


def test_no_nan_on_zeros_and_tiny_masses():
    tiny = 1e-12
    cases = [
        (t(1, 0, 0), t(0, 0.5, 0.5)),
        (t(1 - 2 * tiny, tiny, tiny, 0), t(tiny, 0.5, 0.5 - tiny, 0)),
        (t(0, 0, 1), t(0, 0, 1)),
        (t(0.5, 0.5, 0, 0), t(0, 0, 0.3, 0.7)),
    ]
    for p, q in cases:
        for f in (bounds.gumbel_collision_per_token, bounds.gumbel_collision_per_token_direct, bounds.minhash_collision_per_token):
            assert torch.isfinite(f(p, q)).all()
        for k in (1, 2, 3):
            for f in (bounds.gumbel_top_k_hit, bounds.minhash_top_k_hit):
                assert np.isfinite(f(p, q, k)) and -TOL <= f(p, q, k) <= 1 + TOL
    assert float(bounds.gumbel_collision(*cases[0])) == 0 == float(bounds.minhash_collision(*cases[0]))
    assert abs(float(bounds.gumbel_collision(*cases[2])) - 1) < TOL


# ------------------------------------------------------------------- k drafts per node


def test_top_k_hit_limits():
    """k = 1: the collision probability; k >= #supp(q): every q-token is drafted, so the hit
    probability is p(supp q); nondecreasing in k; p = q: always a hit."""
    for p, q in _pairs(150, seed=8):
        support = int((q > 0).sum())
        for name, top_k, collision in (("gumbel", bounds.gumbel_top_k_hit, bounds.gumbel_collision),
                                       ("minhash", bounds.minhash_top_k_hit, bounds.minhash_collision)):
            values = [top_k(p, q, k) for k in range(1, support + 2)]
            assert abs(values[0] - float(collision(p, q))) < 1e-10, name
            assert all(b >= a - 1e-10 for a, b in zip(values, values[1:])), (name, values)
            assert abs(values[-1] - float(p[q > 0].sum())) < 1e-9, (name, values)
            assert abs(values[-2] - float(p[q > 0].sum())) < 1e-9, (name, values)
            assert abs(top_k(p, p, 2) - 1) < 1e-9, name


def _at_most(factors: list[tuple[float, float]], k: int) -> float:
    """[z^<k] prod_i (a_i + z b_i), by polynomial multiplication."""
    poly = np.array([1.0])
    for a, b in factors:
        poly = np.convolve(poly, [a, b])
    return float(poly[:k].sum())


def _gumbel_top_k_quadrature(p, q, k):
    """P[target's token in drafter's top k] by numerical integration of the product form:
    sum_j int_0^inf e^{-e} [z^<k] prod_{i != j} (e^{-M_i e} + z (e^{-a_i e} - e^{-M_i e})) de."""
    p, q = p.tolist(), q.tolist()
    total = 0.0
    for j in (j for j in range(len(p)) if p[j] > 0 and q[j] > 0):
        a = [p[i] / p[j] for i in range(len(p)) if i != j]
        m = [max(p[i] / p[j], q[i] / q[j]) for i in range(len(p)) if i != j]

        def integrand(s):  # e = p_j s: the integrand decays at least like e^{-s}
            e = p[j] * s
            return p[j] * np.exp(-e) * _at_most([(np.exp(-mi * e), np.exp(-ai * e) - np.exp(-mi * e)) for ai, mi in zip(a, m)], k)

        total += integrate.quad(integrand, 0, np.inf, epsabs=1e-13, epsrel=1e-11, limit=200)[0]
    return total


def _minhash_top_k_quadrature(p, q, k):
    """The same for Weighted MinHash, integrating over the first-hit times of token j (its
    atom on the diagonal and its density off it) without the inclusion-exclusion."""
    p, q = p.tolist(), q.tolist()
    n, total = len(p), 0.0
    for j in (j for j in range(n) if p[j] > 0 and q[j] > 0):
        others = [i for i in range(n) if i != j]

        def given(x, y):  # P[j emitted and drafted | X_j = x, Y_j = y]
            return _at_most([(np.exp(-(x * p[i] + y * q[i] - min(x, y) * min(p[i], q[i]))),
                              np.exp(-x * p[i]) - np.exp(-(x * p[i] + y * q[i] - min(x, y) * min(p[i], q[i]))))
                             for i in others], k)

        lo, hi = min(p[j], q[j]), max(p[j], q[j])
        total += integrate.quad(lambda x: lo * np.exp(-hi * x) * given(x, x), 0, np.inf, epsabs=1e-12)[0]
        if p[j] > q[j]:
            total += integrate.dblquad(lambda w, x: (p[j] - q[j]) * q[j] * np.exp(-p[j] * x - q[j] * w) * given(x, x + w),
                                       0, np.inf, 0, np.inf, epsabs=1e-9)[0]
        elif q[j] > p[j]:
            total += integrate.dblquad(lambda w, y: (q[j] - p[j]) * p[j] * np.exp(-q[j] * y - p[j] * w) * given(y + w, y),
                                       0, np.inf, 0, np.inf, epsabs=1e-9)[0]
    return total


def test_gumbel_top_k_hit_equals_quadrature():
    for i, (p, q) in enumerate(_pairs(20, seed=9)):
        k = 2 + i % 3
        assert abs(bounds.gumbel_top_k_hit(p, q, k) - _gumbel_top_k_quadrature(p, q, k)) < 1e-8


def test_minhash_top_k_hit_equals_quadrature():
    cases = [(t(0.35, 0.25, 0.2, 0.15, 0.05), t(0.6, 0.1, 0.05, 0.05, 0.2), 2),
             (t(0.1, 0.2, 0.3, 0.4), t(0.4, 0.4, 0.1, 0.1), 3),
             (t(0.5, 0.5, 0, 0), t(0.1, 0.2, 0.3, 0.4), 2)]
    for p, q, k in cases:
        assert abs(bounds.minhash_top_k_hit(p, q, k) - _minhash_top_k_quadrature(p, q, k)) < 1e-7


def test_top_k_refuses_no_drafts():
    with pytest.raises(ValueError, match="draft"):
        bounds.gumbel_top_k_hit(t(0.5, 0.5), t(0.5, 0.5), 0)
    with pytest.raises(ValueError, match="draft"):
        bounds.minhash_top_k_hit(t(0.5, 0.5), t(0.5, 0.5), 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gumbel", "minhash"])
def test_collisions_and_top_k_hits_on_many_random_pairs(name):
    """The samplers against the formulas on 30 random pairs, 100k seeds each, k = 1..3."""
    verifier = get_verifier(name)
    top_k = {"gumbel": bounds.gumbel_top_k_hit, "minhash": bounds.minhash_top_k_hit}[name]
    rng = np.random.default_rng(77)
    n = 100_000
    for i in range(30):
        size = int(rng.integers(2, 8))
        p, q = random_law(rng, size), random_law(rng, size)
        noise = KeyedNoise(np.arange(n) + 10**7, i)
        target = verifier.sample_target_batch(p.expand(n, -1), noise)
        drafts = verifier.sample_drafts_batch(q.expand(n, -1), 3, noise)
        assert_frequencies_match(target.tolist(), law_of_tensor(p), what=f"{name} target, pair {i}")
        for k in (1, 2, 3):
            exact = top_k(p, q, k)
            hits = (drafts[:, :k] == target[:, None]).any(-1).tolist()
            assert_frequencies_match(hits, {True: exact, False: 1 - exact}, what=f"{name} top-{k}, pair {i}")
