"""Exact collision probabilities of the communication-free couplings (seed 000), as oracles.

A target holding p and a drafter holding q each sample from shared noise; they *collide*
when their samples agree — the acceptance of a one-draft node.  Seed 000 gives, for laws on
V tokens (p and q normalised; every function takes [..., V] and reduces the last axis):

    1 - TV                    the best any coupling reaches (communication needed)
    (1 - TV) / (1 + TV)       the worst case of communication-free couplings (Theorem 2)
    minhash_collision         Weighted MinHash, Protocol 2 (Claim 5)
    gumbel_collision          Gumbel, Protocol 3 (Theorem 3), >= minhash_collision

and the same per token j (P[target = drafter = j]).  With k drafts per node the drafter's
top k are k draws without replacement, and the node accepts when the target's token is
among them: `gumbel_top_k_hit` and `minhash_top_k_hit` give that probability exactly
(derivations in their docstrings; they enumerate subsets, so small V only).
"""

from __future__ import annotations

import itertools
import math
from math import comb, prod

import torch


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p - q).abs().sum(-1)


def optimal_collision(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """1 - TV = sum_j min(p_j, q_j): the maximal coupling (seed 000, eq. 4)."""
    return torch.minimum(p, q).sum(-1)


def worst_case_collision(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(1 - TV) / (1 + TV): Claim 5's lower bound, tight for some pairs by Theorem 2."""
    return torch.minimum(p, q).sum(-1) / torch.maximum(p, q).sum(-1)


def minhash_collision_per_token(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P[a = b = j] = min(p_j, q_j) (1 + |p_j - q_j|) / sum_i max(p_i, q_i) (proof of Claim 5)."""
    return torch.minimum(p, q) * (1 + (p - q).abs()) / torch.maximum(p, q).sum(-1, keepdim=True)


def minhash_collision(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Claim 5: (1 - TV + sum_j |p_j - q_j| min(p_j, q_j)) / (1 + TV)."""
    return minhash_collision_per_token(p, q).sum(-1)


def gumbel_collision_per_token_direct(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Theorem 3, eq. 7, literally: P[a = b = j] = 1 / sum_i max(p_i / p_j, q_i / q_j) where
    min(p_j, q_j) > 0, else 0.  O(V^2) memory and time: small V only."""
    both = (p > 0) & (q > 0)
    pj = torch.where(both, p, 1).unsqueeze(-1)
    qj = torch.where(both, q, 1).unsqueeze(-1)
    total = torch.maximum(p.unsqueeze(-2) / pj, q.unsqueeze(-2) / qj).sum(-1)
    return torch.where(both, 1 / total, 0)


def gumbel_collision_per_token(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Theorem 3, eq. 7, in O(V log V).  With rho = p / q,

        sum_i max(p_i / p_j, q_i / q_j) = (sum_{rho_i >= rho_j} p_i + rho_j sum_{rho_i < rho_j} q_i) / p_j,

    since p_i / p_j >= q_i / q_j exactly when rho_i >= rho_j: sort by log rho (q_i = 0 gives
    +inf, p_i = 0 gives -inf) and read suffix sums of p and prefix sums of q."""
    both = (p > 0) & (q > 0)
    log_rho = torch.where(q > 0, torch.log(p) - torch.log(torch.where(q > 0, q, 1)), torch.inf)
    log_rho = torch.where(p > 0, log_rho, -torch.inf)
    key, order = torch.sort(log_rho, dim=-1)
    zero = torch.zeros_like(p[..., :1])
    p_at_or_above = torch.cat([p.gather(-1, order).flip(-1).cumsum(-1).flip(-1), zero], -1)
    q_below = torch.cat([zero, q.gather(-1, order).cumsum(-1)], -1)
    first = torch.searchsorted(key.contiguous(), log_rho.contiguous(), side="left")
    rho = torch.where(both, p, 1) / torch.where(both, q, 1)
    weighted = p_at_or_above.gather(-1, first) + rho * q_below.gather(-1, first)
    return torch.where(both, p / torch.where(both, weighted, 1), 0)


def gumbel_collision(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Theorem 3: sum_{j: min(p_j, q_j) > 0} 1 / sum_i max(p_i / p_j, q_i / q_j)."""
    return gumbel_collision_per_token(p, q).sum(-1)


# ------------------------------------------------------------------ k drafts per node


def _at_most(k: int, const, outside, inside) -> float:
    """sum over subsets T of a ground set G (g = len(outside) elements), |T| <= k - 1, of

        w(|T|) * prod_v 1 / (const_v + sum_{i not in T} outside_iv + sum_{i in T} inside_iv),
        w(t) = sum_{r=0}^{k-1-t} (-1)^r C(g - t, r).

    This is the inclusion–exclusion that turns "at most k - 1 of the independent events
    B_i (i in G) happen" into exponential integrals: with P[A_i, not B_i] = e^{-l0_i} and
    P[A_i] = e^{-lA_i} (l linear in the integration variables v, coefficients `outside`
    and `inside`), prod_{i in S} (e^{-lA_i} - e^{-l0_i}) prod_{i not in S} e^{-l0_i} expands
    over the T inside S, and summing over the S that contain T gives w(|T|).  Each
    denominator is summed from its non-negative terms: extreme ratios would otherwise
    cancel catastrophically."""
    g, total = len(outside), 0.0
    for t in range(min(k - 1, g) + 1):
        w = sum((-1) ** r * comb(g - t, r) for r in range(k - t))
        if w == 0:
            continue
        for chosen in itertools.combinations(range(g), t):
            terms = [inside[i] if i in chosen else outside[i] for i in range(g)]
            total += w / prod(math.fsum([c, *(x[v] for x in terms)]) for v, c in enumerate(const))
    return total


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"need at least one draft, got k={k}")


def gumbel_top_k_hit(p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """P[the target's Gumbel sample under p is among the drafter's top k under q], same noise.

    With E_i = -log u_i ~ Exp(1): the target emits j when E_i / p_i > E_j / p_j for all
    i != j (events A_i), and j is among the drafter's top k when at most k - 1 tokens have
    E_i / q_i < E_j / q_j (events B_i).  Given E_j = e, with a_i = p_i / p_j, b_i = q_i / q_j,
    M_i = max(a_i, b_i): P[A_i, not B_i] = e^{-M_i e}, P[A_i] = e^{-a_i e}, independently
    over i.  Integrating against e^{-e} (see `_at_most`):

        sum_{j: p_j, q_j > 0}  sum_{T subset of G_j, |T| < k}
            w(|T|) / (1 + sum_{i != j, i not in T} M_i + sum_{i in T} a_i),

    G_j = {i != j: b_i > a_i}.  k = 1 gives Theorem 3.  Enumerates subsets: small V only."""
    _check_k(k)
    p, q = p.tolist(), q.tolist()
    total = 0.0
    for j in (j for j in range(len(p)) if p[j] > 0 and q[j] > 0):
        others = [i for i in range(len(p)) if i != j]
        a = {i: p[i] / p[j] for i in others}
        m = {i: max(a[i], q[i] / q[j]) for i in others}
        beats = [i for i in others if m[i] > a[i]]  # G_j: tokens that can precede j in q's order
        const = [1 + math.fsum(m[i] for i in others if i not in beats)]
        total += _at_most(k, const, [[m[i]] for i in beats], [[a[i]] for i in beats])
    return total


def minhash_top_k_hit(p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """P[the target's Weighted MinHash sample under p is among the drafter's first k distinct
    hits under q], same darts.

    In the Poisson form of `rayspec.coupling.minhash` token i has first-hit times
    X_i = T_i(p_i), Y_i = T_i(q_i); the target emits j when X_i > X_j for all i != j (A_i)
    and j is drafted when at most k - 1 tokens have Y_i < Y_j (B_i).  Given (X_j, Y_j) =
    (x, y), P[A_i, not B_i] = exp(-(x p_i + y q_i - min(x, y) min(p_i, q_i))) (no dart in the
    union of two rectangles) and P[A_i] = e^{-x p_i}.  (X_j, Y_j) has an atom on the diagonal,
    density min_j e^{-max_j x}, and when p_j > q_j a density (p_j - q_j) q_j
    e^{-p_j x - q_j w} at Y = X + w (when q_j > p_j, (q_j - p_j) p_j e^{-q_j y - p_j w} at
    X = Y + w): the first dart under max(p_j, q_j) also lies under the min with probability
    min / max, else the min waits Exp(min) more.  Each piece is a sum of exponential
    integrals (`_at_most`).  k = 1 gives Claim 5.  Enumerates subsets: small V only."""
    _check_k(k)
    p, q = p.tolist(), q.tolist()
    total = 0.0
    for j in (j for j in range(len(p)) if p[j] > 0 and q[j] > 0):
        others = [i for i in range(len(p)) if i != j]
        big = {i: max(p[i], q[i]) for i in others}
        lower = [i for i in others if q[i] > p[i]]  # A_i and B_i possible on the diagonal
        rest = [i for i in others if i not in lower]
        # diagonal, Y = X = x:  l0_i = x M_i,  lA_i = x p_i
        const = [max(p[j], q[j]) + math.fsum(big[i] for i in rest)]
        total += min(p[j], q[j]) * _at_most(k, const, [[big[i]] for i in lower], [[p[i]] for i in lower])
        if p[j] > q[j]:  # (x, w), Y = x + w:  l0_i = x M_i + w q_i,  lA_i = x p_i
            drafted = [i for i in others if q[i] > 0]
            const = [p[j] + math.fsum(big[i] for i in others if i not in drafted), q[j]]
            outside = [[big[i], q[i]] for i in drafted]
            total += (p[j] - q[j]) * q[j] * _at_most(k, const, outside, [[p[i], 0.0] for i in drafted])
        elif q[j] > p[j]:  # (y, w), X = y + w:  l0_i = y M_i + w p_i,  lA_i = (y + w) p_i
            const = [q[j] + math.fsum(big[i] for i in rest), p[j] + math.fsum(p[i] for i in rest)]
            outside = [[big[i], p[i]] for i in lower]
            total += (q[j] - p[j]) * p[j] * _at_most(k, const, outside, [[p[i], p[i]] for i in lower])
    return total
