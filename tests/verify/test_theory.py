"""The optimal-transport bound as an oracle (seeds 001-003; notes papers-001-003.md §1.6, §3.5, §5).

* The four ways `rayspec.verify.optimal` computes the optimum agree: LP, min-cut, sorted-prefix
  scan (i.i.d. drafts), the two-draft closed form; on random pairs and on the adversarial ones,
  1e-12 masses included.
* They match the papers' closed forms and reference values: 1 - TV for one draft, Bernoulli
  and uniform examples, seed 002 Thm. 2 and Fig. 2, seed 003's Fig. 5 and second fixture.
* No lossless verifier accepts more than the optimum for its own draft law.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.base import iid_draft_law, without_replacement_draft_law
from rayspec.verify.laws import exact_acceptance, total_variation
from rayspec.verify.optimal import (
    min_cut_acceptance,
    optimal_acceptance,
    optimal_acceptance_iid,
    two_draft_closed_form,
)
from tests.cases import F64, adversarial_pairs, random_pairs

TOL = 1e-9  # the LP's answer is a feasible plan's value, exact up to HiGHS's pivoting
CASES = {name: (p, q) for name, p, q in adversarial_pairs()}


def law(*x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


def assert_oracles_agree(p, q, k):
    iid = iid_draft_law(q, k)
    lp = optimal_acceptance(p, iid)
    assert lp == pytest.approx(min_cut_acceptance(p, iid), abs=TOL), "LP vs min-cut, i.i.d."
    assert lp == pytest.approx(float(optimal_acceptance_iid(p, q, k)), abs=TOL), "LP vs sorted prefix"
    if k == 2:
        assert lp == pytest.approx(two_draft_closed_form(p, q), abs=TOL), "LP vs seed 002 Thm. 3"
    wor = without_replacement_draft_law(q, k)
    assert optimal_acceptance(p, wor) == pytest.approx(min_cut_acceptance(p, wor), abs=TOL), "w/o replacement"


# ------------------------------------------------------------------- the oracles agree


@pytest.mark.parametrize("k", [1, 2, 3])
def test_oracles_agree_on_random_pairs(k):
    for _, p, q in random_pairs(40, seed=50 + k):
        assert_oracles_agree(p, q, k)


@pytest.mark.parametrize("case", adversarial_pairs(), ids=lambda c: c[0])
def test_oracles_agree_on_adversarial_pairs(case):
    _, p, q = case
    for k in (1, 2, 3):
        assert_oracles_agree(p, q, k)


def test_oracles_agree_on_non_identical_drafts():
    """The LP and min-cut take any draft law: here X1 ~ q1, X2 ~ q2 independently."""
    for i, (_, p, q1) in enumerate(random_pairs(30, seed=54, sizes=[4])):
        q2 = next(iter(random_pairs(1, seed=1000 + i, sizes=[4])))[2]
        draft_law = [((a, b), float(q1[a] * q2[b])) for a, b in itertools.product(range(4), repeat=2)]
        assert optimal_acceptance(p, draft_law) == pytest.approx(min_cut_acceptance(p, draft_law), abs=TOL)


def test_sorted_prefix_is_batched_over_rows_and_draft_counts():
    pairs = list(random_pairs(30, seed=55, sizes=[6]))
    p = torch.stack([pair[1] for pair in pairs])
    q = torch.stack([pair[2] for pair in pairs])
    k = torch.arange(30) % 5 + 1
    batched = optimal_acceptance_iid(p, q, k)
    alone = torch.stack([optimal_acceptance_iid(p[i], q[i], int(k[i])) for i in range(30)])
    assert torch.equal(batched, alone)


def test_one_draft_optimum_is_one_minus_tv_and_sps_reaches_it():
    """T1.1 (seed 001 eq. 1, typo fixed): the maximal coupling; speculative sampling attains it."""
    sps = get_verifier("sps")
    pairs = [(p, q) for _, p, q in random_pairs(100, seed=56)] + list(CASES.values())
    for p, q in pairs:
        tv = float(total_variation(p, q))
        assert float(optimal_acceptance_iid(p, q, 1)) == pytest.approx(1 - tv, abs=1e-15)
        assert exact_acceptance(sps, p, q, 1) == pytest.approx(1 - tv, abs=1e-15)


# -------------------------------------------------------------- closed forms, reference values


def test_monotone_in_k_and_tends_to_the_target_mass_on_the_draft_support():
    """T1.2 (alpha*_k <= alpha*_{k+1}) and T1.3 (the limit is p(supp q))."""
    for _, p, q in random_pairs(60, seed=57):
        values = [optimal_acceptance(p, iid_draft_law(q, k)) for k in (1, 2, 3)]
        values += [float(optimal_acceptance_iid(p, q, k)) for k in range(4, 12)]
        assert all(a <= b + TOL for a, b in zip(values, values[1:]))
    p, q = CASES["q zero where p positive"]
    assert float(optimal_acceptance_iid(p, q, 200)) == pytest.approx(float(p[q > 0].sum()), abs=1e-12)


def test_optimum_below_the_per_token_bound():
    """T1.4 with Omega_0 = Omega: alpha*_k <= sum_x min(p(x), 1 - (1 - q(x))^k)."""
    for i, (_, p, q) in enumerate(random_pairs(60, seed=58)):
        k = i % 4 + 1
        bound = float(torch.minimum(p, 1 - (1 - q) ** k).sum())
        assert float(optimal_acceptance_iid(p, q, k)) <= bound + 1e-12


@pytest.mark.parametrize("d, t", [(0.25, 0.1), (0.25, 0.75), (0.25, 1.0), (0.6, 0.3), (0.9, 0.5)])
def test_bernoulli_closed_form(d, t):
    """T1.6 (seed 001 eq. 10): draft Ber(d), target Ber(t): min(t, 1-(1-d)^k) + min(1-t, 1-d^k)."""
    p, q = law(1 - t, t), law(1 - d, d)
    for k in range(1, 9):
        expected = min(t, 1 - (1 - d) ** k) + min(1 - t, 1 - d**k)
        assert float(optimal_acceptance_iid(p, q, k)) == pytest.approx(expected, abs=1e-12)
        assert optimal_acceptance(p, iid_draft_law(q, k)) == pytest.approx(expected, abs=TOL)


def test_bernoulli_reference_values():
    """Notes §2.5 table, OTM column: draft Ber(0.25)."""
    table = {
        0.1: {1: 0.85, 2: 1.0, 3: 1.0, 5: 1.0},
        0.75: {1: 0.5, 2: 0.6875, 3: 0.8281, 4: 0.9336, 5: 1.0, 8: 1.0},
        1.0: {1: 0.25, 2: 0.4375, 3: 0.5781, 4: 0.6836, 5: 0.7627, 8: 0.8999},
    }
    q = law(0.75, 0.25)
    for b, row in table.items():
        for k, expected in row.items():
            assert float(optimal_acceptance_iid(law(1 - b, b), q, k)) == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("n, r", [(6, 2), (6, 3), (120, 4)])
def test_uniform_closed_form(n, r):
    """T1.7: draft U([n]), target U([n/r]): alpha*_k = 1 - (1 - 1/r)^k."""
    q = torch.full((n,), 1 / n, dtype=F64)
    p = torch.zeros(n, dtype=F64)
    p[: n // r] = r / n
    for k in range(1, 9):
        expected = 1 - (1 - 1 / r) ** k
        assert float(optimal_acceptance_iid(p, q, k)) == pytest.approx(expected, abs=1e-12)
        if n**k <= 300:
            assert optimal_acceptance(p, iid_draft_law(q, k)) == pytest.approx(expected, abs=TOL)


def _two_drafts_reach_one(p, q) -> bool:
    """Seed 002 Thm. 2's condition: p(S) >= q(S)^2 for every token set S."""
    size = len(p)
    for subset in itertools.product([0, 1], repeat=size):
        mask = torch.tensor(subset, dtype=torch.bool)
        if float(p[mask].sum()) < float(q[mask].sum()) ** 2 - 1e-12:
            return False
    return True


def test_two_drafts_accept_surely_iff_p_dominates_q_squared():
    """Seed 002 Thm. 2, checked against the LP; Example 1 (two tokens) and Fig. 2's setups
    (q uniform on 3 tokens), whose intervals are [1/9, 5/9] and [5/18, 5/9]."""

    def within(x, lo, hi):  # grid points may land on an end, up to rounding
        return lo - 1e-12 <= x <= hi + 1e-12

    third = law(1, 1, 1) / 3
    setups = []
    for x in np.linspace(0, 2 / 3, 31):
        setups.append((law(1 / 3, x, 2 / 3 - x), third, within(x, 1 / 9, 5 / 9)))
    for x in np.linspace(0, 5 / 6, 31):
        setups.append((law(1 / 6, x, 5 / 6 - x), third, within(x, 5 / 18, 5 / 9)))
    for q1, p1 in itertools.product([0.3, 0.5, 0.8], np.linspace(0, 1, 21)):
        setups.append((law(p1, 1 - p1), law(q1, 1 - q1), within(p1, q1**2, 2 * q1 - q1**2)))
    for p, q, inside in setups:
        reaches_one = optimal_acceptance(p, iid_draft_law(q, 2)) >= 1 - TOL
        assert reaches_one == _two_drafts_reach_one(p, q) == inside


# Seed 002 Fig. 2, k = 2, q uniform on 3 tokens (notes §3.5): x -> optimum, k-Seq, RRS, RRSw.
FIG2 = {
    "left": (
        lambda x: law(1 / 3, x, 2 / 3 - x),
        {0: (0.8889, 0.8114, 0.7778, 0.8333), 0.2: (1, 0.9449, 0.9111, 0.9333),
         1 / 3: (1, 1, 1, 1), 0.6: (0.9556, 0.8587, 0.8222, 0.8667)},
    ),
    "right": (
        lambda x: law(1 / 6, x, 5 / 6 - x),
        {0: (0.7222, 0.6866, 0.6667, 0.75), 0.2: (0.9222, 0.8353, 0.8, 0.85),
         1 / 3: (1, 0.9248, 0.8889, 0.9167), 0.6: (0.9556, 0.8587, 0.8222, 0.8667)},
    ),
}


@pytest.mark.parametrize("side", list(FIG2))
def test_fig2_reference_values(side):
    target, rows = FIG2[side]
    q = law(1, 1, 1) / 3
    for x, (optimum, kseq, rrs, rrsw) in rows.items():
        p = target(x)
        assert two_draft_closed_form(p, q) == pytest.approx(optimum, abs=5e-5)
        assert exact_acceptance(get_verifier("spectr"), p, q, 2) == pytest.approx(kseq, abs=5e-5)
        assert exact_acceptance(get_verifier("rrs"), p, q, 2) == pytest.approx(rrs, abs=5e-5)
        assert exact_acceptance(get_verifier("rrsw"), p, q, 2) == pytest.approx(rrsw, abs=5e-5)


@pytest.mark.parametrize(
    "case, k, iid, wor, rrs, rrsw",
    [
        ("spectr fig 5", 2, 0.85, 1.0, 0.80, 0.94),
        ("spechub fixture 2", 2, 0.76, 0.936111, 0.68, 0.7625),
        ("spechub fixture 2", 3, 0.888, 1.0, 0.744, 0.95),
    ],
)
def test_seed003_reference_values(case, k, iid, wor, rrs, rrsw):
    """Seed 003 Fig. 5 and the notes' second fixture (§4.2, §4.5)."""
    p, q = CASES[case]
    assert optimal_acceptance(p, iid_draft_law(q, k)) == pytest.approx(iid, abs=1e-6)
    assert optimal_acceptance(p, without_replacement_draft_law(q, k)) == pytest.approx(wor, abs=1e-6)
    assert exact_acceptance(get_verifier("rrs"), p, q, k) == pytest.approx(rrs, abs=1e-6)
    assert exact_acceptance(get_verifier("rrsw"), p, q, k) == pytest.approx(rrsw, abs=1e-6)


# ------------------------------------------------------------- no verifier beats the bound


@pytest.mark.parametrize("name", available_verifiers())
def test_no_lossless_verifier_beats_the_optimum_for_its_draft_law(name):
    """alpha(v) <= alpha*(v's draft law -> p): RRS <= the i.i.d. optimum, RRSw <= the
    without-replacement one, and so on for every lossless verifier with an exact output law."""
    verifier = get_verifier(name)
    if not verifier.lossless:
        pytest.skip("not lossless: the bound is for lossless verifiers")
    if verifier.drafter_invariant:
        pytest.skip("coupling: no output law given the drafts")
    ks = [k for k in (1, 2, 3) if verifier.max_drafts is None or k <= verifier.max_drafts]
    pairs = [(p, q) for _, p, q in random_pairs(100, seed=59, sizes=range(2, 6))] + list(CASES.values())
    worst = -1.0
    for i, (p, q) in enumerate(pairs):
        k = ks[i % len(ks)]
        acceptance = exact_acceptance(verifier, p, q, k)
        optimum = optimal_acceptance(p, verifier.draft_law(q, k))
        worst = max(worst, acceptance - optimum)
    assert worst <= TOL, f"{name} accepts {worst:.3e} above the optimum"
