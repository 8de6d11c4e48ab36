"""SpecTr's k-sequential selection (seed 001 Alg. 2, Thm. 1) against its theory and the papers'
numbers.  Losslessness on random and adversarial pairs is the contract's (test_contract.py);
here: rho* (eq. 6), the acceptance identities and bounds, the reference values of the notes
(papers-001-003.md §2.5, §4.2, §4.5), batches of rows with different draft counts, k = 1
against speculative sampling, and the negative control rho < rho*.
"""

from __future__ import annotations

import math

import pytest
import torch

from rayspec.verify import get_verifier
from rayspec.verify.base import iid_draft_law
from rayspec.verify.laws import draft_law_tensors, exact_acceptance, mixture_output_law
from rayspec.verify.optimal import optimal_acceptance_iid
from rayspec.verify.spectr import KSequentialChain, SpecTr, kseq_beta, kseq_rho
from tests.cases import F64, adversarial_pairs, random_pairs

SPECTR = SpecTr()
CASES = {name: (p, q) for name, p, q in adversarial_pairs()}


def bernoulli(b: float) -> torch.Tensor:
    """Ber(b) on tokens {0, 1}, P(1) = b."""
    return torch.tensor([1 - b, b], dtype=F64)


def excess(p, q, rho, k):
    """f(rho) = 1 - (1 - beta)^k - rho beta, straight from Thm. 1."""
    beta = kseq_beta(p, q, rho)
    return 1 - (1 - beta) ** k - rho * beta


class FixedRhoSpecTr(SpecTr):
    """k-Seq with rho = rho* + shift: lossless for shift >= 0, biased below."""

    def __init__(self, shift: float):
        self.shift = shift

    def chain(self, p, q, drafts):
        rho = kseq_rho(p, q, (drafts >= 0).sum(-1)) + self.shift
        return KSequentialChain(p, q, drafts, rho)


# ----------------------------------------------------------------------------------- rho*


def test_rho_solves_eq6_from_above_for_every_row_at_once():
    pairs = list(random_pairs(200, seed=31, sizes=[5]))
    p = torch.stack([pair[1] for pair in pairs])
    q = torch.stack([pair[2] for pair in pairs])
    k = torch.arange(len(pairs)) % 6 + 1
    rho = kseq_rho(p, q, k)
    f = excess(p, q, rho, k)
    assert (f <= 1e-15).all(), "rho must not fall below rho*"
    assert (f >= -1e-13).all(), "rho must be a root of eq. 6"
    ratio = torch.where(q > 0, p / q.clamp_min(1e-300), torch.where(p > 0, torch.inf, 0))
    assert (rho >= 1).all() and (rho <= k).all()
    assert (rho <= ratio.amax(-1) + 1e-12).all(), "rho* <= max p/q (Thm. 1)"
    # a row solved alone gets the same rho as in the batch
    for i in range(0, len(pairs), 17):
        assert float(kseq_rho(p[i], q[i], int(k[i]))) == pytest.approx(float(rho[i]), abs=1e-15)


def test_rho_in_float32_at_a_real_vocabulary_size():
    generator = torch.Generator().manual_seed(0)
    q = torch.softmax(2 * torch.randn(6, 32000, generator=generator), -1)
    p = torch.softmax(torch.log(q) + torch.randn(6, 32000, generator=generator), -1)
    k = torch.tensor([1, 2, 3, 4, 8, 16])
    rho32 = kseq_rho(p, q, k)
    rho64 = kseq_rho(p.double(), q.double(), k)
    assert rho32.dtype == torch.float32 and torch.isfinite(rho32).all()
    assert float(rho32[0]) == 1.0
    assert torch.allclose(rho32.double(), rho64, rtol=1e-5, atol=0)


# ----------------------------------------------------------------------- acceptance theory


def test_acceptance_is_one_minus_every_test_rejecting():
    """P(a draft is accepted) = 1 - (1 - beta(rho*))^k = rho* beta(rho*) (Thm. 1 proof, eq. 6);
    at rho* that is the membership acceptance too (the residual avoids rejected tokens)."""
    pairs = [(p, q) for _, p, q in random_pairs(60, seed=32)] + list(CASES.values())
    for i, (p, q) in enumerate(pairs):
        k = i % 4 + 1
        rho = kseq_rho(p, q, k)
        beta = float(kseq_beta(p, q, rho))
        acceptance = exact_acceptance(SPECTR, p, q, k)
        assert acceptance == pytest.approx(1 - (1 - beta) ** k, abs=1e-12)
        assert acceptance == pytest.approx(float(rho) * beta, abs=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_acceptance_within_thm1_bounds_of_the_optimum(k):
    """(1 - (1 - 1/k)^k) alpha*_k <= k-Seq <= alpha*_k, and 1 - (1 - 1/k)^k >= 1 - 1/e (T1.5)."""
    constant = 1 - (1 - 1 / k) ** k
    assert constant >= 1 - 1 / math.e
    worst = 1.0
    for _, p, q in random_pairs(40, seed=40 + k, sizes=range(2, 6)):
        optimum = float(optimal_acceptance_iid(p, q, k))
        acceptance = exact_acceptance(SPECTR, p, q, k)
        assert acceptance <= optimum + 1e-12
        assert acceptance >= constant * optimum - 1e-12
        # the proof's intermediate step: at least what rho = k would give
        assert acceptance >= 1 - (1 - float(kseq_beta(p, q, torch.tensor(float(k), dtype=F64)))) ** k - 1e-12
        if optimum > 0:
            worst = min(worst, acceptance / optimum)
    assert worst >= constant


# Draft Ber(0.25), target Ber(b): k-Seq's acceptance (notes §2.5, computed for the notes).
BERNOULLI = {
    0.1: {1: 0.85, 2: 0.9731, 3: 0.9954, 5: 0.9999},
    0.75: {1: 0.5, 2: 0.6483, 3: 0.7545, 4: 0.8299, 5: 0.8829, 8: 0.9630},
    1.0: {1: 0.25, 2: 0.4375, 3: 0.5781, 4: 0.6836, 5: 0.7627, 8: 0.8999},
}


@pytest.mark.parametrize("b", list(BERNOULLI))
def test_bernoulli_table(b):
    p, q = bernoulli(b), bernoulli(0.25)
    for k, expected in BERNOULLI[b].items():
        acceptance = exact_acceptance(SPECTR, p, q, k)
        assert acceptance == pytest.approx(expected, abs=5e-5), f"k={k}"
        if b == 1.0:  # one-hot target: k-Seq is optimal
            assert acceptance == pytest.approx(float(optimal_acceptance_iid(p, q, k)), abs=1e-12)


@pytest.mark.parametrize("n, r", [(6, 2), (6, 3), (120, 2), (120, 3), (120, 8), (120, 24)])
def test_uniform_target_is_optimal(n, r):
    """Draft U([n]), target U([n/r]): rho* = r (1 - (1 - 1/r)^k) and k-Seq reaches
    alpha*_k = 1 - (1 - 1/r)^k (T1.7, seed 001 App. B)."""
    q = torch.full((n,), 1 / n, dtype=F64)
    p = torch.zeros(n, dtype=F64)
    p[: n // r] = r / n
    for k in range(1, 9):
        optimum = 1 - (1 - 1 / r) ** k
        rho = kseq_rho(p, q, k)
        assert float(rho) == pytest.approx(r * optimum, abs=1e-12)
        assert float(kseq_beta(p, q, rho)) == pytest.approx(1 / max(r, float(rho)), abs=1e-12)
        assert float(optimal_acceptance_iid(p, q, k)) == pytest.approx(optimum, abs=1e-12)
        if n ** k <= 300:
            assert exact_acceptance(SPECTR, p, q, k) == pytest.approx(optimum, abs=1e-12)


@pytest.mark.parametrize(
    "case, k, acceptance, rho",
    [
        ("spectr fig 5", 2, 0.815037, 1.430074),
        ("spechub fixture 2", 2, 0.708062, 1.540312),
        ("spechub fixture 2", 3, 0.789674, 1.948368),
    ],
)
def test_reference_fixtures(case, k, acceptance, rho):
    p, q = CASES[case]
    assert float(kseq_rho(p, q, k)) == pytest.approx(rho, abs=1e-6)
    assert exact_acceptance(SPECTR, p, q, k) == pytest.approx(acceptance, abs=1e-6)


# ---------------------------------------------------------------------------- the scheme


def test_residual_at_rho_star_is_the_positive_part_of_p_minus_rho_q():
    for i, (_, p, q) in enumerate(random_pairs(60, seed=33)):
        k = i % 3 + 2
        rho = kseq_rho(p, q, k)
        expected = (p - rho * q).clamp_min(0)
        if float(expected.sum()) < 1e-9:
            continue
        drafts = torch.zeros(1, k, dtype=torch.long)
        residual = KSequentialChain(p[None], q[None], drafts, rho[None]).residual()[0]
        assert torch.allclose(residual / residual.sum(), expected / expected.sum(), atol=1e-9, rtol=0)


def test_disjoint_supports_emit_from_the_target():
    p, q = CASES["disjoint supports"]
    for k in (1, 2, 3):
        assert exact_acceptance(SPECTR, p, q, k) == 0
        for drafts, _ in iid_draft_law(q, k):
            assert torch.equal(SPECTR.output_law(p, q, list(drafts)), p)


def test_one_draft_is_speculative_sampling_bit_for_bit():
    sps = get_verifier("sps")
    pairs = list(random_pairs(100, seed=34)) + [(len(p), p, q) for p, q in CASES.values()]
    for _, p, q in pairs:
        drafts, _ = draft_law_tensors(SPECTR, q, 1)
        rows = (p.expand(len(drafts), -1), q.expand(len(drafts), -1), drafts)
        assert torch.equal(SPECTR.output_law_batch(*rows), sps.output_law_batch(*rows))
    generator = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(2000, 50, generator=generator), -1)
    p = torch.softmax(torch.randn(2000, 50, generator=generator), -1)
    drafts = SPECTR.sample_drafts_batch(q, 1, generator)
    ours = SPECTR.verify_batch(p, q, drafts, torch.Generator().manual_seed(2))
    theirs = sps.verify_batch(p, q, drafts, torch.Generator().manual_seed(2))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_rows_with_different_draft_counts_in_one_batch_are_each_lossless():
    """Every draft tuple for k = 1, 2, 3 in one padded batch: each row solves its own rho*."""
    for _, p, q in random_pairs(30, seed=35, sizes=[3, 4]):
        blocks = [draft_law_tensors(SPECTR, q, k) for k in (1, 2, 3)]
        drafts = torch.cat([torch.nn.functional.pad(d, (0, 3 - d.shape[1]), value=-1) for d, _ in blocks])
        laws = SPECTR.output_law_batch(p.expand(len(drafts), -1), q.expand(len(drafts), -1), drafts)
        start = 0
        for k, (block, probs) in zip((1, 2, 3), blocks):
            block_laws = laws[start : start + len(block)]
            start += len(block)
            assert torch.allclose(probs @ block_laws, p, atol=1e-12, rtol=0), f"k={k}"
            alone = SPECTR.output_law_batch(p.expand(len(block), -1), q.expand(len(block), -1), block)
            assert torch.allclose(block_laws, alone, atol=1e-15, rtol=0)


def test_a_real_vocabulary_in_float32():
    generator = torch.Generator().manual_seed(3)
    q = torch.softmax(2 * torch.randn(16, 32000, generator=generator), -1)
    p = torch.softmax(torch.log(q) + torch.randn(16, 32000, generator=generator), -1)
    drafts = SPECTR.sample_drafts_batch(q, 8, generator)
    drafts[::2, 5:] = -1  # half the rows have three drafts only
    tokens, index = SPECTR.verify_batch(p, q, drafts, generator)
    assert ((tokens >= 0) & (p.gather(-1, tokens[:, None])[:, 0] > 0)).all()
    accepted = index >= 0
    assert torch.equal(tokens[accepted], drafts[accepted, index[accepted]])
    laws = SPECTR.output_law_batch(p, q, drafts)
    assert torch.isfinite(laws).all() and torch.allclose(laws.sum(-1), torch.ones(16), atol=1e-5)


# ----------------------------------------------------------------------- negative controls


@pytest.mark.parametrize("case, k", [("spectr fig 5", 2), ("spechub fixture 2", 2), ("spechub fixture 2", 3)])
def test_rho_below_rho_star_is_biased_and_above_is_lossless(case, k):
    p, q = CASES[case]
    below = mixture_output_law(FixedRhoSpecTr(-0.01), p, q, k)
    assert float((below - p).abs().max()) > 1e-5, "rho < rho* must bias the output"
    for shift in (1e-9, 0.1, k - float(kseq_rho(p, q, k))):
        law = mixture_output_law(FixedRhoSpecTr(shift), p, q, k)
        assert torch.allclose(law, p, atol=1e-12, rtol=0), f"rho* + {shift}"


@pytest.mark.parametrize("k", [2, 3, 4])
def test_naive_per_draft_test_is_biased(k):
    """Seed 001 §4: single-draft tests in turn with no correction (rho = 1) on draft Ber(1),
    target Ber(1/2) emit token 1 with probability 1 - 2^-k, not 1/2."""
    p, q = bernoulli(0.5), bernoulli(1.0)
    naive = mixture_output_law(FixedRhoSpecTr(1 - float(kseq_rho(p, q, k))), p, q, k)
    assert float(naive[1]) == pytest.approx(1 - 0.5**k, abs=1e-12)
    assert torch.allclose(mixture_output_law(SPECTR, p, q, k), p, atol=1e-12, rtol=0)
