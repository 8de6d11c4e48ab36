"""SpecTr's k-sequential selection, k-Seq (Sun et al. 2023, seed 001, Alg. 2 and Thm. 1).

The k drafts are i.i.d. from q.  They are tested one after another, each independently of the
others (a duplicate of a rejected token gets a fresh test), and draft x passes with probability
min(1, p(x) / (rho q(x))); the first draft that passes is emitted.  One test passes with
probability beta(rho) = sum_x min(q(x), p(x)/rho), so some draft passes with probability
p_acc = 1 - (1 - beta)^k, and token x is emitted through a draft with probability
min(q(x), p(x)/rho) * p_acc / beta.  That stays below p(x) for every x exactly when
p_acc <= rho * beta: then the correction law of eq. 5,

    p_res = norm(p - min(q, p/rho) * p_acc / beta),

makes the output follow p.  The smallest such rho, rho* of eq. 6 (p_acc = rho* beta), accepts
most: there p_res = norm((p - rho* q)^+) and the acceptance is at least 1 - (1 - 1/k)^k >= 1 - 1/e
times the optimal transport's (Thm. 1).  k = 1 gives rho* = 1, plain speculative sampling.
"""

from __future__ import annotations

import torch

from rayspec.verify.base import IIDDrafts
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows


def kseq_beta(p: torch.Tensor, q: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """beta(rho) = sum_x min(q(x), p(x)/rho) (seed 001 Alg. 2, line 1): the probability that
    one draft passes its test.  p, q [..., V], rho [...] -> [...]."""
    return torch.minimum(q, p / rho.unsqueeze(-1)).sum(-1)


def _excess(p: torch.Tensor, q: torch.Tensor, rho: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """f(rho) = 1 - (1 - beta)^k - rho beta of Thm. 1: positive where rho < rho*.

    1 - (1 - beta)^k as -expm1(k log1p(-beta)) keeps the digits of a beta of 1e-12; beta is
    capped at 1, which rounding can overshoot."""
    beta = kseq_beta(p, q, rho).clamp_max(1)
    return -torch.expm1(k * torch.log1p(-beta)) - rho * beta


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k) -> torch.Tensor:
    """rho* of seed 001 Thm. 1 (eq. 6), per row: p, q [..., V], k an int or [...] draft counts.

    f is non-increasing on [1, k] with f(1) >= 0 >= f(k) (Lemma 4), so the root is bracketed;
    the Illinois variant of regula falsi (secant between the bracket ends, the stale end's
    value halved when the same end moves twice) closes the bracket superlinearly, in about
    ten evaluations of beta where bisection needs one per mantissa bit — each evaluation is
    a pass over the vocabulary.  Vectorised over rows.  The upper end of the bracket is
    returned: f <= 0 holds there as computed, so rounding can leave rho a hair above rho*
    (still lossless) but never below (biased).
    """
    k = torch.as_tensor(k, dtype=p.dtype, device=p.device).expand(p.shape[:-1]).clamp_min(1)
    lo, f_lo = torch.ones_like(k), _excess(p, q, torch.ones_like(k), k)
    # f(1) <= 0 only where rho does not matter (k = 1, p = q, disjoint supports): rho* = 1.
    at_one = f_lo <= 0
    hi = torch.where(at_one, lo, k)
    f_hi = torch.where(at_one, f_lo, _excess(p, q, hi, k))
    tolerance = 4 * torch.finfo(p.dtype).eps
    last_moved = torch.zeros_like(k)  # +1: lo moved last, -1: hi moved last
    for _ in range(_MAX_ROOT_STEPS):
        # A row stops at its own convergence, so its rho never depends on its batch-mates.
        active = (hi - lo > tolerance * hi) & (f_hi != 0)
        if not bool(active.any()):
            break
        secant = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        inside = torch.isfinite(secant) & (secant > lo) & (secant < hi)
        x = torch.where(inside, secant, (lo + hi) / 2)
        f_x = _excess(p, q, x, k)
        right = (f_x <= 0) | ~active  # x >= rho*: the new upper end (frozen rows: x = hi)
        x, f_x = torch.where(active, x, hi), torch.where(active, f_x, f_hi)
        f_lo = torch.where(active & right & (last_moved < 0), f_lo / 2, f_lo)
        f_hi = torch.where(~right & (last_moved > 0), f_hi / 2, f_hi)
        hi, f_hi = torch.where(right, x, hi), torch.where(right, f_x, f_hi)
        lo, f_lo = torch.where(right, lo, x), torch.where(right, f_lo, f_x)
        last_moved = torch.where(active, torch.where(right, -1.0, 1.0), last_moved)
    return hi


_MAX_ROOT_STEPS = 100  # a cap only: Illinois stops after ~10 steps, plain halving after ~60


def _geometric_sum(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """sum_{i<k} x^i per row (k [B] may differ), by Horner's rule: p_acc / beta for x = 1 - beta.

    Unlike (1 - x^k) / (1 - x) it is exactly 1 for k = 1 (so k-Seq's residual is bit for bit
    speculative sampling's) and needs no guard at beta = 0, where it is k."""
    total = torch.zeros_like(x)
    for i in range(int(k.max()) if k.numel() else 0):
        total = torch.where(k > i, 1 + x * total, total)
    return total


class KSequentialChain(RejectionChain):
    """Alg. 2 over B nodes with a given rho [B]; lossless for every rho >= rho* of the row's
    number of valid drafts, biased below it."""

    def __init__(self, p, q, drafts, rho: torch.Tensor):
        super().__init__(p, q, drafts)
        self.n_steps = drafts.shape[-1]
        self.rho = rho.unsqueeze(-1)
        self.scaled_q = self.rho * q

    def accept_prob(self, j):
        x = self.drafts[:, j]
        return acceptance_ratio(gather_rows(self.p, x), gather_rows(self.scaled_q, x)) * self.valid[:, j]

    def reject(self, j):
        pass  # the tests are independent: a rejection changes nothing

    def residual(self):
        passes = torch.minimum(self.q, self.p / self.rho)  # P(a given test drafts x and passes)
        beta = passes.sum(-1, keepdim=True)
        emitted = passes * _geometric_sum(1 - beta, self.valid.sum(-1, keepdim=True))
        # p_acc <= rho beta makes this non-negative; rounding at rho* can leave -1e-17.
        return (self.p - emitted).clamp_min(0)


class SpecTr(IIDDrafts, SequentialVerifier):
    name = "spectr"

    def chain(self, p, q, drafts):
        # rho* depends on the number of drafts: a tree node with fewer children gets its own.
        return KSequentialChain(p, q, drafts, kseq_rho(p, q, (drafts >= 0).sum(-1)))
