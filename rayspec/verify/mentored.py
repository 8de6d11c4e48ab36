"""Mentored decoding (Tran-Thien 2023, seed 004): single-draft speculative sampling that buys
acceptance with a bounded divergence from the target, KL(p || pi) <= D nats per token.

The draft x ~ q is accepted with probability r_x, otherwise a correction is drawn from s, so
the emitted token follows pi = q * r + (1 - R) * s with R = sum_i q_i r_i (seed 004, eqs. 1-4;
the paper names the target q and the draft p).  Given pi, the best acceptance is
sum_i min(q_i, pi_i) — accept with r = min(1, pi/q), correct with s ∝ (pi - q)^+ — so the
paper's problem is the convex one

    max_pi  sum_i min(q_i, pi_i)   s.t.  KL(p || pi) <= D,  pi in the simplex.

Its KKT conditions (seed 004 §4: eq. 23 and the table that ends the section) give, with
t = p/q,

    pi_i = clamp(q_i, p_i / beta, p_i / alpha),        0 < alpha <= 1 <= beta:
    low   t_i < alpha           r_i = t_i / alpha   s_i = 0
    mid   alpha <= t_i <= beta  r_i = 1             s_i = 0
    high  t_i > beta            r_i = 1             s_i ∝ p_i / beta - q_i

Both multipliers are functions of the rejection probability rho = 1 - R,
    sum_{t < alpha} (q - p / alpha) = rho = sum_{t > beta} (p / beta - q)      (eqs. 24, 28)
and so is the divergence,
    KL(rho) = P_low ln alpha + sum_mid p ln(p / q) + P_high ln beta      (P_g = sum_g p),
which is convex and decreasing on [0, TV(p, q)] with dKL/drho = alpha - beta.  The solver
finds the smallest feasible rho by a bracketed search on rho, each evaluation O(log V)
after one sort by t, and keeps the feasible end of the bracket: the budget is never
exceeded (a few ulps of slack cover rounding), the acceptance is optimal to ~1e-14.
rho = TV is standard speculative sampling (D = 0); rho = 0 accepts every draft
(D >= KL(p || q)).

Tokens the target rules out (p = 0 < q, e.g. after top-k/top-p) have pi = 0 for every
alpha > 0, which caps the family's acceptance at 1 - Q0, Q0 = sum_{p=0} q.  Past that the
optimum continues at alpha = 0 (the KKT conditions' other branch): every other draft is
accepted, pi = max(q, p / beta) elsewhere, and the p = 0 drafts keep a mass Q0 - rho that
costs nothing in KL(p || pi); any split of it is optimal, here the common acceptance
probability 1 - rho / Q0.  The same search covers both stages, since there
dKL/drho = -beta.  Tokens never drafted (q = 0 < p) always fall in the high group.

The paper's Algorithm 1 is not reproduced (its bisection updates the bracket in the wrong
order, its beta sum is off by one, it has no iteration cap and loops forever at D = 0,
D >= KL and p = 0 < q; see the notes, §B.3).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from rayspec.verify.base import IIDDrafts, draw_uniform, sample_categorical
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows

_F64 = torch.float64
_RHO_TOL = 1e-14  # width of the final bracket on rho = 1 - acceptance
_MAX_ITER = 60  # every round at least halves the bracket: 2^-60 < _RHO_TOL
_EPS = torch.finfo(_F64).eps
_TINY = 1e-300  # the geometric midpoint's stand-in for lo = 0
_SLACK = 16 * _EPS  # rounding of the KL closed form, per unit size of its terms
_ROUNDING_STEP = 8 * _EPS  # how far r and the realised rejection mass can be off


class MentoredPlan(NamedTuple):
    """The optimal scheme for each row: accept draft i with accept[i], else draw from residual.

    accept [B, V], residual [B, V] (sums to 1), alpha, beta, acceptance [B]: all float64,
    whatever the dtype of p — the optimal rejection mass can lie far below a float32 step
    (about 1e-15 when a token is never drafted, q = 0 < p), and r rounded to float32 would
    accept every draft and make that token impossible (KL = inf).  alpha = 0 marks the
    second stage (p = 0 drafts partly accepted)."""

    accept: torch.Tensor
    residual: torch.Tensor
    alpha: torch.Tensor
    beta: torch.Tensor
    acceptance: torch.Tensor


def target_draft_ratio(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """t = p/q, with x/0 = inf for x > 0 (never drafted: high group) and 0/0 = 1 (absent
    from both laws: it weighs nothing in any group)."""
    safe = torch.where(q > 0, q, torch.ones_like(q))
    return torch.where(q > 0, p / safe, torch.where(p > 0, math.inf, 1.0))


def _padded(x: torch.Tensor, value: float) -> torch.Tensor:
    """x [B, V] with `value` prepended: column j of the result is entry j - 1."""
    return torch.cat([torch.full_like(x[:, :1], value), x], dim=-1)


def _mass(rows: torch.Tensor) -> torch.Tensor:
    """The total of each row [B] in float64, 1 for an empty row (left as it is)."""
    total = rows.sum(-1, dtype=_F64)
    return torch.where(total > 0, total, 1.0)


def _as_law(rows: torch.Tensor) -> torch.Tensor:
    """rows [B, V] normalised in float64.  Sampling draws from rows / their total, and a
    float32 row sums to 1 only within ~1e-7, which would move KL(p || pi) by as much
    (ln(Q / P) for totals P, Q): the plan is solved for the laws that are sampled."""
    return rows.to(_F64) / _mass(rows).unsqueeze(-1)


class _Point(NamedTuple):
    """The optimum at one rejection probability rho (tensors shaped like rho)."""

    kl: torch.Tensor  # an upper bound: the closed form plus its rounding slack
    alpha: torch.Tensor
    beta: torch.Tensor
    low_draft_mass: torch.Tensor  # sum_{low} q: with alpha = 0, the mass of the p = 0 drafts

    def take(self, index: torch.Tensor) -> "_Point":
        return _Point(*(x.gather(-1, index) for x in self))

    def where(self, mask: torch.Tensor, other: "_Point") -> "_Point":
        return _Point(*(torch.where(mask, a, b) for a, b in zip(self, other)))


class _RatioProfile:
    """The rows of (p, q) sorted by t = p/q, with the prefix and suffix sums that make
    alpha(rho), beta(rho) and KL(rho) a searchsorted and a few gathers away."""

    def __init__(self, t: torch.Tensor, p: torch.Tensor, q: torch.Tensor):
        t, order = t.sort(dim=-1)
        p, q = p.gather(-1, order), q.gather(-1, order)
        zero, inf = t == 0, torch.isinf(t)
        safe_t = torch.where(zero | inf, torch.ones_like(t), t)
        self.size = t.shape[-1]
        # t[j - 1] for j = 0..V+1, with t[-1] = 0 and t[V] = inf: the segment bounds.
        self.bounds = torch.cat([_padded(t, 0.0), torch.full_like(t[:, :1], math.inf)], dim=-1)
        # Sums over sorted positions < j (prefix) and >= j (suffix), j = 0..V; suffixes are
        # summed from the end, so a small tail mass keeps its digits.
        self.p_prefix = _padded(p.cumsum(-1), 0.0)
        self.q_prefix = _padded(q.cumsum(-1), 0.0)
        self.p_suffix = torch.cat([p.flip(-1).cumsum(-1).flip(-1), torch.zeros_like(p[:, :1])], dim=-1)
        self.q_suffix = torch.cat([q.flip(-1).cumsum(-1).flip(-1), torch.zeros_like(q[:, :1])], dim=-1)
        # p ln(p/q): +inf where q = 0 < p (those sort last, so the differences that
        # exclude them stay finite).
        self.kl_prefix = _padded((torch.xlogy(p, p) - torch.xlogy(p, q)).cumsum(-1), 0.0)
        # low(t_j) = sum_{t < t_j} (q - p / t_j): the rejection mass when alpha = t_j (eq. 24),
        # non-decreasing; token j is in the low group iff low(t_j) < rho.  The p = 0 drafts
        # join as soon as rho > 0 (second stage); the never-drafted never do.
        low = self.q_prefix[:, :-1] - self.p_prefix[:, :-1] / safe_t
        low = torch.where(zero, 0.0, torch.where(inf, math.inf, low))
        # high(t_j) = sum_{t > t_j} (p / t_j - q): the rejection mass when beta = t_j (eq. 28),
        # non-increasing; token j is in the high group iff high(t_j) < rho.  Stored reversed
        # so that both searches run on non-decreasing rows; cummax absorbs rounding.
        high = self.p_suffix[:, 1:] / safe_t - self.q_suffix[:, 1:]
        high = torch.where(zero, math.inf, torch.where(inf, 0.0, high))
        self.low = low.cummax(-1).values
        self.high_reversed = high.flip(-1).cummax(-1).values

    def at(self, rho: torch.Tensor) -> _Point:
        """The optimum with rejection probability rho [B, c] (c candidates per row)."""
        n_low = torch.searchsorted(self.low, rho)
        n_high = torch.minimum(torch.searchsorted(self.high_reversed, rho), self.size - n_low)
        start_high = self.size - n_high

        p_low, q_low = self.p_prefix.gather(-1, n_low), self.q_prefix.gather(-1, n_low)
        room = q_low - rho
        alpha = torch.where(room > 0, p_low / torch.where(room > 0, room, 1), math.inf)
        alpha = alpha.clamp(self.bounds.gather(-1, n_low), self.bounds.gather(-1, n_low + 1))

        p_high, q_high = self.p_suffix.gather(-1, start_high), self.q_suffix.gather(-1, start_high)
        need = rho + q_high
        beta = torch.where(need > 0, p_high / torch.where(need > 0, need, 1), 0.0)
        beta = beta.clamp(self.bounds.gather(-1, start_high), self.bounds.gather(-1, start_high + 1))

        low_term, high_term = torch.xlogy(p_low, alpha), torch.xlogy(p_high, beta)
        mid_from, mid_to = self.kl_prefix.gather(-1, n_low), self.kl_prefix.gather(-1, start_high)
        # Bound the rounding by the size of what was summed (each log is off by ~eps,
        # weighted by a mass <= 1), so that `kl` never understates the divergence — it
        # matters where the terms nearly cancel (alpha, beta near 1).
        size = 1 + low_term.abs() + mid_from.abs() + mid_to.abs() + high_term.abs()
        kl = low_term + (mid_to - mid_from) + high_term + _SLACK * size
        return _Point(kl, alpha, beta, q_low)


def _standard_point(like: torch.Tensor) -> _Point:
    """rho = TV: alpha = beta = 1, standard speculative sampling, KL = 0 exactly."""
    ones = torch.ones_like(like)
    return _Point(torch.zeros_like(like), ones, ones, ones)


def _smallest_feasible_rejection(profile: _RatioProfile, tv: torch.Tensor, budget: float, floor: torch.Tensor):
    """The smallest rho in [floor, tv] with KL(rho) <= budget, per row, and the point there.

    Invariant: KL(lo) > budget >= KL(hi).  Each round evaluates six candidates and keeps
    the tightest bracket.  KL is convex in rho, so Newton from lo stays left of the root
    and the chord right of it; near rho = 0 a never-drafted or rarely drafted token makes
    KL behave like -P ln(rho), which Newton in ln(rho) and the geometric midpoint resolve;
    the arithmetic midpoint guarantees halving whatever rounding does."""
    lo, hi = floor.unsqueeze(-1), tv.unsqueeze(-1)
    lo_pt, hi_pt = profile.at(lo), _standard_point(hi)
    accept_all = lo_pt.kl <= budget
    hi, hi_pt = torch.where(accept_all, lo, hi), lo_pt.where(accept_all, hi_pt)
    for _ in range(_MAX_ITER):
        if not bool((hi - lo > _RHO_TOL).any()):
            break
        excess = lo_pt.kl - budget  # > 0, possibly inf at rho = 0
        slope = lo_pt.beta - lo_pt.alpha  # -dKL/drho at lo
        step = excess / slope
        newton = lo + step
        log_newton = lo * torch.exp(step / lo)
        chord = hi - (budget - hi_pt.kl) / (lo_pt.kl - hi_pt.kl) * (hi - lo)
        geometric = torch.sqrt(lo.clamp_min(_TINY) * hi)
        # Once Newton lands within rounding of the root neither it nor the chord moves the
        # far end of the bracket: probes half a tolerance either side close it.
        below, above = newton - 0.5 * _RHO_TOL, newton + 0.5 * _RHO_TOL
        rho = torch.cat([below, above, log_newton, chord, geometric, 0.5 * (lo + hi)], -1)
        # Undefined candidates (inf KL, zero slope or lo = 0) fall back to the midpoint.
        rho = torch.where(torch.isfinite(rho), rho, 0.5 * (lo + hi)).clamp(lo, hi)
        point = profile.at(rho)
        # KL(hi) <= budget is known: at rho = hi, where the groups' boundaries can fall on
        # either side of rho by rounding (rho = TV with only p = 0 drafts rejected), a
        # larger evaluation is an artefact and must not close the bracket at hi.
        feasible = (point.kl <= budget) | (rho >= hi)
        # The largest infeasible candidate becomes lo, the smallest feasible one hi.
        left = torch.where(feasible, -1.0, rho).argmax(-1, keepdim=True)
        right = torch.where(feasible, rho, math.inf).argmin(-1, keepdim=True)
        move_lo = (~feasible).gather(-1, left) & (rho.gather(-1, left) > lo)
        move_hi = feasible.gather(-1, right) & (rho.gather(-1, right) < hi)
        lo, lo_pt = torch.where(move_lo, rho.gather(-1, left), lo), point.take(left).where(move_lo, lo_pt)
        hi, hi_pt = torch.where(move_hi, rho.gather(-1, right), hi), point.take(right).where(move_hi, hi_pt)
    # r is stored to a few ulps and so is the realised rejection probability sum q (1 - r):
    # step that far into the feasible side, where KL falls by (beta - alpha) per unit of
    # rho, so that the budget holds for the scheme as stored.
    inside = (hi > 0) & (hi < tv.unsqueeze(-1))
    hi = torch.where(inside, torch.minimum(hi + _ROUNDING_STEP, tv.unsqueeze(-1)), hi)
    hi_pt = profile.at(hi).where(inside, hi_pt)
    return hi.squeeze(-1), _Point(*(x.squeeze(-1) for x in hi_pt))


def check_kl_budget(kl_budget: float) -> float:
    """kl_budget as a float; negative or NaN budgets are refused (inf accepts every draft)."""
    budget = float(kl_budget)
    if not budget >= 0:  # also refuses NaN
        raise ValueError(f"mentored: kl_budget must be a non-negative number of nats, got {kl_budget!r}")
    return budget


def mentored_plan(
    p: torch.Tensor, q: torch.Tensor, kl_budget: float, within_target_support: bool = False
) -> MentoredPlan:
    """The acceptance-optimal single-draft scheme with KL(p || pi) <= kl_budget (seed 004,
    problem (1)-(4), solved as the module docstring describes).

    p (target), q (draft) [B, V] in any float dtype.  Solved and returned in float64 for
    the normalised rows: the budget holds in exact arithmetic for the returned (r, s) and
    the laws sampling draws from, p / sum p and q / sum q; the acceptance is the optimum
    for a budget a few 1e-15 nats under D (the rounding slack), to ~1e-14.
    `within_target_support` adds the constraint pi = 0 where p = 0 (the first stage only:
    rejection >= Q0)."""
    budget = check_kl_budget(kl_budget)
    p64, q64 = _as_law(p), _as_law(q)
    t = target_draft_ratio(p64, q64)
    tv = (q64 - p64).clamp_min(0).sum(-1)
    floor = torch.where(p64 == 0, q64, 0.0).sum(-1) if within_target_support else torch.zeros_like(tv)
    if budget == 0:
        rho, point = tv, _standard_point(tv)
    else:
        rho, point = _smallest_feasible_rejection(_RatioProfile(t, p64, q64), tv, budget, floor.clamp_max(tv))
    alpha, beta = point.alpha.unsqueeze(-1), point.beta.unsqueeze(-1)

    accept = torch.where(t < alpha, t / torch.where(alpha > 0, alpha, 1), 1.0)
    # Second stage: the p = 0 drafts share the rejection mass rho.
    low_mass = point.low_draft_mass.unsqueeze(-1)
    kept = torch.where(low_mass > 0, 1 - rho.unsqueeze(-1) / torch.where(low_mass > 0, low_mass, 1), 1.0)
    accept = torch.where((t == 0) & (alpha == 0), kept.clamp(0, 1), accept)

    excess = torch.where(beta > 0, p64 / torch.where(beta > 0, beta, 1) - q64, 0.0).clamp_min(0)
    total = excess.sum(-1, keepdim=True)
    # With rho = 0 the residual is never reached; the target is a harmless stand-in.
    residual = torch.where(total > 0, excess / torch.where(total > 0, total, 1), p64)
    acceptance = (q64 * accept).sum(-1)
    return MentoredPlan(accept, residual, point.alpha, point.beta, acceptance)


def _fast_path(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """min(1, p_x/q_x) [B] for the normalised rows in float64, as the plan's t: a float32
    ratio, or one of unnormalised rows, can exceed r_x = t_x / alpha when alpha is within
    1e-7 of 1, and accepting more than r_x spends more than the budget."""
    p_x, q_x = (gather_rows(rows, x).to(_F64) / _mass(rows) for rows in (p, q))
    return acceptance_ratio(p_x, q_x)


class _MentoredChain(RejectionChain):
    """Two steps on the one draft x: the fast path min(1, p_x/q_x) (paper §6: r >= min(1, p/q)),
    then the top-up to r_x, with probability (r_x - m) / (1 - m); the residual is s."""

    n_steps = 2

    def __init__(self, p, q, drafts, kl_budget, within_target_support):
        super().__init__(p, q, drafts)
        self.x = drafts[:, 0]
        self.fast = _fast_path(p, q, self.x) * self.valid[:, 0]
        self.plan = mentored_plan(p, q, kl_budget, within_target_support)

    def column(self, j):
        return torch.zeros(self.batch, dtype=torch.long, device=self.device)

    def accept_prob(self, j):
        if j == 0:
            return self.fast
        room = 1 - self.fast
        top_up = (gather_rows(self.plan.accept, self.x) - self.fast) / torch.where(room > 0, room, 1)
        return torch.where(room > 0, top_up.clamp(0, 1), 0.0) * self.valid[:, 0]

    def reject(self, j):
        pass

    def residual(self):
        return torch.where(self.valid[:, :1], self.plan.residual, self.p)


class MentoredDecoding(IIDDrafts, SequentialVerifier):
    """Lossy: the emitted token follows pi with KL(p || pi) <= kl_budget (nats per token), at
    the highest acceptance any single-draft scheme can reach under that budget.  kl_budget = 0
    is standard speculative sampling, kl_budget = inf accepts every draft.  The output
    depends on the drafter.

    within_target_support: the paper's problem bounds only KL(p || pi), which puts no price
    on tokens the target rules out (p = 0 after top-k/top-p): by default (False) the optimum
    may emit them once the budget allows.  True keeps the target's truncation strict (pi = 0
    where p = 0), capping acceptance at 1 - q(p = 0)."""

    name = "mentored"
    lossless = False
    max_drafts = 1
    exact_params = {"kl_budget": 0.0}  # standard speculative sampling

    def __init__(self, kl_budget: float = 0.05, within_target_support: bool = False):
        self.kl_budget = check_kl_budget(kl_budget)
        self.within_target_support = bool(within_target_support)

    def chain(self, p, q, drafts):
        return _MentoredChain(p, q, drafts, self.kl_budget, self.within_target_support)

    def output_law_batch(self, p, q, drafts):
        """The chain's law summed in float64, like the plan it follows (a float32 1 - r_x
        would lose a rejection mass below a float32 step), rounded to the dtype of p."""
        return super().output_law_batch(p.to(_F64), q.to(_F64), drafts).to(p.dtype)

    def verify_batch(self, p, q, drafts, generator):
        """The chain's two steps driven by one uniform u (seed 004 §6): u < min(1, p_x/q_x)
        accepts without solving, so only the rows that fail it pay for the plan; u < r_x
        accepts after it.  Same law as `output_law_batch`."""
        drafts = drafts.to(p.device)
        self._check_k(drafts.shape[-1])
        x, valid = drafts[:, 0], drafts[:, 0] >= 0
        u = draw_uniform(generator, (p.shape[0], 2), p.device)
        accept = valid & (u[:, 0] < _fast_path(p, q, x))
        token = torch.where(accept, x, -1)
        # index_select / index_copy rather than advanced indexing (see tree_walk.rows_of).
        rows = torch.nonzero(valid & ~accept).flatten()
        if rows.numel():
            p_rows, x_rows, u_rows = p.index_select(0, rows), x.index_select(0, rows), u.index_select(0, rows)
            plan = mentored_plan(p_rows, q.index_select(0, rows), self.kl_budget, self.within_target_support)
            late = u_rows[:, 0] < gather_rows(plan.accept, x_rows)
            correction = sample_categorical(plan.residual, u_rows[:, 1], p_rows)
            accept = accept.index_copy(0, rows, late)
            token = token.index_copy(0, rows, torch.where(late, x_rows, correction))
        empty = torch.nonzero(~valid).flatten()  # no draft: emit from the target
        if empty.numel():
            p_empty = p.index_select(0, empty)
            token = token.index_copy(0, empty, sample_categorical(p_empty, u[:, 1].index_select(0, empty), p_empty))
        return token, torch.where(accept, 0, -1)

    def __repr__(self) -> str:
        return f"MentoredDecoding(kl_budget={self.kl_budget}, within_target_support={self.within_target_support})"
