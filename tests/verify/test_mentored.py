"""Mentored decoding (seed 004; notes papers-000-004.md, part B — letters swapped there: the
notes' q is our target p and their p our draft q).

Oracles: the worked table of §B.4; feasibility; KL(p || pi) <= D evaluated in 60-digit
arithmetic from the returned (r, s); saturation of the budget; D = 0 is speculative
sampling and D >= KL(p || q) accepts everything; monotonicity in D; optimality against
an independent SLSQP solve of the paper's problem (1)-(4); the hand-derived optimum of the
p = 0 < q case; Monte Carlo frequencies against the exact law.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

import rayspec.verify.mentored as mentored
from rayspec.verify import get_verifier
from rayspec.verify.chain import acceptance_ratio
from rayspec.verify.laws import mixture_output_law, total_variation
from rayspec.verify.mentored import MentoredDecoding, MentoredPlan, mentored_plan
from tests.cases import adversarial_pairs, random_pairs
from tests.stats import assert_frequencies_match, law_of_tensor

F64 = torch.float64
BUDGETS = [1e-6, 0.01, 0.1, 1.0]


def plan1(p, q, budget):
    """mentored_plan for one row, squeezed."""
    return MentoredPlan(*(x[0] for x in mentored_plan(p[None], q[None], budget)))


def emitted_law(q, plan):
    """pi = q r + (1 - R) s, the rejection mass summed as sum q (1 - r) (no cancellation)."""
    return q * plan.accept + (q * (1 - plan.accept)).sum() * plan.residual


def kl(p, pi):
    return float(torch.where(p > 0, torch.xlogy(p, p) - torch.xlogy(p, pi), 0).sum())


def exact_kl(p, q, plan) -> mpmath.mpf:
    """KL(p || pi) of the scheme exactly as stored: the entries (of any dtype) are exact
    binary numbers, the arithmetic carries 60 digits and p, q and s are renormalised as
    sampling does."""
    with mpmath.workdps(60):
        p, q, r, s = ([mpmath.mpf(float(x)) for x in v] for v in (p, q, plan.accept, plan.residual))
        p, q = ([x / mpmath.fsum(v) for x in v] for v in (p, q))
        rejection = mpmath.fsum(qi * (1 - ri) for qi, ri in zip(q, r))
        total_s = mpmath.fsum(s)
        out = mpmath.mpf(0)
        for target, qi, ri, si in zip(p, q, r, s):
            if target > 0:
                emitted = qi * ri + rejection * si / total_s
                if emitted == 0:
                    return mpmath.inf
                out += target * mpmath.log(target / emitted)
        return out


def all_pairs(count=200, seed=41):
    pairs = random_pairs(count, seed=seed)
    return [(p, q) for _, p, q in pairs] + [(p, q) for _, p, q in adversarial_pairs()]


# ------------------------------------------------------------------ the worked example


# notes §B.4: D, alpha, beta, R, r, s, pi (target (0.1, 0.2, 0.3, 0.4), draft (0.4, 0.3, 0.2, 0.1))
TABLE = [
    (0.0, 1, 1, 0.600000, (0.25, 0.666667, 1, 1), (0, 0, 0.25, 0.75), (0.1, 0.2, 0.3, 0.4)),
    (0.01, 0.817077, 1.106129, 0.667162, (0.305969, 0.815916, 1, 1), (0, 0, 0.213967, 0.786033),
     (0.122387, 0.244775, 0.271216, 0.361622)),
    (0.05, 0.647044, 1.283342, 0.754549, (0.386372, 1, 1, 1), (0, 0, 0.137562, 0.862438),
     (0.154549, 0.3, 0.233765, 0.311686)),
    (0.1, 0.463384, 1.445695, 0.815804, (0.539509, 1, 1, 1), (0, 0, 0.040786, 0.959214),
     (0.215804, 0.3, 0.207513, 0.276684)),
    (0.2, 0.338804, 1.952709, 0.895156, (0.737891, 1, 1, 1), (0, 0, 0, 1), (0.295156, 0.3, 0.2, 0.204844)),
    (0.4, 0.260662, 3.437576, 0.983639, (0.959097, 1, 1, 1), (0, 0, 0, 1), (0.383639, 0.3, 0.2, 0.116361)),
]


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"D={r[0]}")
def test_worked_example_of_the_notes(row):
    budget, alpha, beta, acceptance, r, s, pi = row
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
    plan = plan1(p, q, budget)
    close = dict(atol=2e-6, rtol=0)
    assert float(plan.alpha) == pytest.approx(alpha, abs=2e-6)
    assert float(plan.beta) == pytest.approx(beta, abs=2e-6)
    assert float(plan.acceptance) == pytest.approx(acceptance, abs=2e-6)
    torch.testing.assert_close(plan.accept, torch.tensor(r, dtype=F64), **close)
    torch.testing.assert_close(plan.residual, torch.tensor(s, dtype=F64), **close)
    torch.testing.assert_close(emitted_law(q, plan), torch.tensor(pi, dtype=F64), **close)
    assert kl(p, emitted_law(q, plan)) == pytest.approx(budget, abs=1e-12)


def test_worked_example_accepts_everything_past_kl_of_target_to_draft():
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
    assert kl(p, q) == pytest.approx(0.4564348, abs=1e-7)
    plan = plan1(p, q, 0.5)
    assert float(plan.acceptance) == pytest.approx(1, abs=1e-15)
    assert torch.equal(plan.accept, torch.ones(4, dtype=F64))


# ---------------------------------------------------------- feasibility and the budget


def test_plans_are_feasible_and_spend_the_budget():
    worst_over = -math.inf
    for budget in BUDGETS:
        for p, q in all_pairs():
            plan = plan1(p, q, budget)
            r, s = plan.accept, plan.residual
            assert torch.isfinite(r).all() and torch.isfinite(s).all()
            assert ((r >= 0) & (r <= 1)).all() and (s >= 0).all()
            assert float(s.sum()) == pytest.approx(1, abs=1e-12)
            assert float(emitted_law(q, plan).sum()) == pytest.approx(1, abs=1e-12)
            # r >= min(1, p/q): the fast path never accepts what the plan would reject
            assert (r >= acceptance_ratio(p, q) - 1e-15).all()
            assert float(plan.acceptance) >= 1 - float(total_variation(p, q)) - 1e-15
            # the three groups (notes §B.2): s > 0 only where r = 1, and p/pi in [alpha, beta]
            assert (r[s > 0] == 1).all()
            alpha, beta = float(plan.alpha), float(plan.beta)
            if float(plan.acceptance) < 1:
                assert alpha <= 1 + 1e-12 and beta >= 1 - 1e-12
            if float(plan.acceptance) < 1 - 1e-9:  # the rejection mass resolved to 1e-6 or better
                ratio = p[p > 0] / emitted_law(q, plan)[p > 0]
                assert (ratio >= alpha * (1 - 1e-6)).all() and (ratio <= beta * (1 + 1e-6)).all()
            divergence = exact_kl(p, q, plan)
            worst_over = max(worst_over, float(divergence - budget))
            assert divergence <= budget, f"KL {divergence} > D {budget} for p={p.tolist()} q={q.tolist()}"
            if budget < kl(p, q):
                # Saturated, up to what a tolerance of ~1e-14 on rho leaves on a curve of
                # slope beta - alpha, or the root lies closer to rho = 0 than that (a
                # never-drafted token makes KL ~ -p ln rho there).
                gap = budget - float(divergence)
                slope = float(plan.beta - plan.alpha)
                assert gap <= 1e-13 * slope + 1e-12 or 1 - float(plan.acceptance) <= 2e-14, (budget, gap)
    assert worst_over < 0


def test_budget_zero_is_speculative_sampling_exactly():
    verifier = MentoredDecoding(kl_budget=0.0)
    for p, q in all_pairs(100):
        plan = plan1(p, q, 0.0)
        drafted = q > 0
        # the ratio of the laws sampled, p / sum p and q / sum q, rows that sum to 1 within ulps
        assert torch.equal(plan.accept[drafted], acceptance_ratio(p / p.sum(), q / q.sum())[drafted])
        excess = (p - q).clamp_min(0)
        if float(excess.sum()) > 0:
            torch.testing.assert_close(plan.residual, excess / excess.sum(), atol=1e-15, rtol=0)
        assert float(plan.acceptance) == pytest.approx(1 - float(total_variation(p, q)), abs=1e-15)
        law = mixture_output_law(verifier, p, q, 1)
        assert float((law - p).abs().max()) <= 1e-12


def test_budget_past_kl_accepts_every_draft():
    for p, q in all_pairs(100):
        full = kl(p, q)
        for budget in [full * (1 + 1e-9) + 1e-12, full + 0.5, math.inf]:
            if math.isinf(full) and not math.isinf(budget):
                continue
            plan = plan1(p, q, budget)
            assert float(plan.acceptance) == pytest.approx(1, abs=1e-15)
            assert torch.equal(plan.accept[q > 0], torch.ones_like(q[q > 0]))
            torch.testing.assert_close(emitted_law(q, plan), q, atol=1e-15, rtol=0)


def test_acceptance_grows_with_the_budget():
    budgets = [0.0, 1e-4, 1e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0]
    for p, q in all_pairs(100, seed=5):
        plans = [plan1(p, q, d) for d in budgets]
        acceptance = [float(x.acceptance) for x in plans]
        assert all(b >= a - 1e-14 for a, b in zip(acceptance, acceptance[1:])), acceptance
        alphas = [float(x.alpha) for x in plans if float(x.acceptance) < 1]
        assert all(b <= a + 1e-12 for a, b in zip(alphas, alphas[1:])), alphas


def test_rows_are_independent_in_a_batch():
    pairs = [(p, q) for p, q in all_pairs(150, seed=9) if p.numel() == 5]
    p, q = torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])
    batch = mentored_plan(p, q, 0.05)
    for i in range(len(pairs)):
        single = plan1(p[i], q[i], 0.05)
        assert float(batch.acceptance[i]) == pytest.approx(float(single.acceptance), abs=1e-13)
        torch.testing.assert_close(batch.accept[i], single.accept, atol=1e-12, rtol=0)


# ------------------------------------------------------------------------- optimality


def generic_best_acceptance(p: torch.Tensor, q: torch.Tensor, budget: float, restarts: int = 4) -> float:
    """An independent solve of the paper's problem (1)-(4) by SLSQP.

    Variables: r (acceptance) on the drafted tokens and the residual mass (1 - R) s = p v on
    the target's support (mass elsewhere only costs; scaling by p keeps tiny masses well
    conditioned).  pi = q r + p v is linear, the objective sum q r too, and KL(p || pi) is
    convex: a smooth convex problem, solved with no assumption about the solution's
    structure.  Restarts from random points; the best feasible result counts."""
    p, q = p.numpy(), q.numpy()
    drafted, support = q > 0, p > 0
    qd, ps, nr, nv = q[drafted], p[support], int(drafted.sum()), int(support.sum())
    rng = np.random.default_rng(0)

    def emitted(x):  # pi on the target's support
        pi = np.zeros(len(p))
        pi[drafted] = qd * x[:nr]
        return np.maximum(pi[support] + ps * x[nr:], 1e-300)

    def divergence(x):
        return float(np.sum(ps * np.log(ps / emitted(x))))

    def slack_grad(x):  # gradient of budget - KL
        weight = np.zeros(len(p))
        weight[support] = ps / emitted(x)
        return np.concatenate([weight[drafted] * qd, weight[support] * ps])

    def mass(x):
        return np.sum(qd * x[:nr]) + np.sum(ps * x[nr:]) - 1

    constraints = [
        {"type": "eq", "fun": mass, "jac": lambda x: np.concatenate([qd, ps])},
        {"type": "ineq", "fun": lambda x: budget - divergence(x), "jac": slack_grad},
    ]
    sd_r = np.minimum(1, p[drafted] / qd)
    starts = [np.concatenate([sd_r, np.maximum(1 - q[support] / ps, 0)])]  # standard SD
    for _ in range(restarts - 1):
        lam = rng.uniform(0.3, 1)
        r = lam * sd_r + (1 - lam) * rng.uniform(size=nr)
        w = rng.dirichlet(np.ones(nv)) * max(1 - np.sum(qd * r), 0)
        starts.append(np.concatenate([r, w / ps]))
    best = -math.inf
    for x0 in starts:
        x = minimize(
            lambda x: -np.sum(qd * x[:nr]),
            x0,
            jac=lambda x: np.concatenate([-qd, np.zeros(nv)]),
            bounds=[(0, 1)] * nr + [(0, None)] * nv,
            constraints=constraints,
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 1000},
        ).x
        if divergence(x) <= budget + 1e-10 and abs(mass(x)) < 1e-10:
            best = max(best, float(np.sum(qd * x[:nr])))
    return best


def optimality_cases():
    named = [(name, p, q) for name, p, q in adversarial_pairs() if "1e-12" not in name]
    rng = np.random.default_rng(3)
    for i, (_, p, q) in enumerate(random_pairs(24, seed=77)):
        named.append((f"random {i}", p, q))
    # p = 0 < q (a truncated target) with budgets on both sides of the first stage's cap
    for i in range(4):
        size = int(rng.integers(3, 7))
        q = torch.tensor(rng.dirichlet(np.ones(size)), dtype=F64)
        p = torch.tensor(rng.dirichlet(np.ones(size)), dtype=F64)
        p[: int(rng.integers(1, size - 1))] = 0
        named.append((f"truncated target {i}", p / p.sum(), q))
    return named


@pytest.mark.parametrize("case", optimality_cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("budget", [0.02, 0.3])
def test_acceptance_is_optimal_against_a_generic_solver(case, budget):
    _, p, q = case
    ours = float(plan1(p, q, budget).acceptance)
    reference = generic_best_acceptance(p, q, budget)
    assert reference > -math.inf, "the generic solver found no feasible point"
    assert ours == pytest.approx(reference, abs=1e-6), f"ours {ours} vs SLSQP {reference}"


def test_truncated_target_matches_the_hand_derived_optimum():
    # p = (1, 0), q = (.5, .5): accept token 1 with probability 2 (1 - e^-D); R = min(1, 1.5 - e^-D)
    p = torch.tensor([1.0, 0.0], dtype=F64)
    q = torch.tensor([0.5, 0.5], dtype=F64)
    for budget in [1e-4, 0.01, 0.1, 0.5, 0.69, math.log(2), 1.0, 5.0]:
        plan = plan1(p, q, budget)
        expected = min(1.0, 1.5 - math.exp(-budget))
        assert float(plan.acceptance) == pytest.approx(expected, abs=1e-12), budget
        assert float(plan.accept[1]) == pytest.approx(min(1.0, 2 * (1 - math.exp(-budget))), abs=1e-12)
        assert exact_kl(p, q, plan) <= budget


def test_second_stage_starts_where_the_first_stage_caps():
    # Q0 = 0.3 of the draft's mass sits where the target is 0: acceptance beyond 0.7 needs it.
    p = torch.tensor([0.0, 0.5, 0.3, 0.2], dtype=F64)
    q = torch.tensor([0.3, 0.2, 0.3, 0.2], dtype=F64)
    previous = 0.0
    for budget in [1e-3, 0.05, 0.2, 0.5, 0.8, 2.0]:
        plan = plan1(p, q, budget)
        acceptance = float(plan.acceptance)
        assert acceptance >= previous
        previous = acceptance
        if acceptance > 0.7 + 1e-12:  # second stage: alpha = 0, every p > 0 draft accepted
            assert float(plan.alpha) == 0
            assert torch.equal(plan.accept[1:], torch.ones(3, dtype=F64))
        else:
            assert float(plan.accept[0]) == 0
    assert previous > 0.7


# ------------------------------------------------------------------ the verifier


def test_output_law_is_the_planned_law():
    verifier = MentoredDecoding(kl_budget=0.1)
    for p, q in all_pairs(100, seed=13):
        law = mixture_output_law(verifier, p, q, 1)
        torch.testing.assert_close(law, emitted_law(q, plan1(p, q, 0.1)), atol=1e-12, rtol=0)
        assert kl(p, law) <= 0.1 + 1e-12


@pytest.mark.parametrize(
    "label", ["spechub fixture 2", "p zero where q positive", "tiny draft mass on the target's mode"]
)
def test_sampled_tokens_follow_the_exact_law(label):
    _, p, q = next(c for c in adversarial_pairs() if c[0] == label)
    verifier = get_verifier("mentored", kl_budget=0.05)
    n = 40_000
    generator = torch.Generator().manual_seed(17)
    rows_p, rows_q = p.expand(n, -1).contiguous(), q.expand(n, -1).contiguous()
    drafts = verifier.sample_drafts_batch(rows_q, 1, generator)
    tokens, index = verifier.verify_batch(rows_p, rows_q, drafts, generator)
    law = mixture_output_law(verifier, p, q, 1)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(law), what=f"mentored on {label}")
    acceptance = float(plan1(p, q, 0.05).acceptance)
    accepted = float((index == 0).float().mean())
    assert abs(accepted - acceptance) <= 5 * math.sqrt(acceptance * (1 - acceptance) / n) + 1e-12
    assert torch.equal(tokens[index == 0], drafts[index == 0, 0])


def test_solver_runs_only_for_rows_the_fast_path_rejects(monkeypatch):
    solved = []
    real = mentored.mentored_plan

    def counting(p, q, budget, *flags):
        solved.append(p.shape[0])
        return real(p, q, budget, *flags)

    monkeypatch.setattr(mentored, "mentored_plan", counting)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
    verifier = MentoredDecoding(kl_budget=0.05)
    generator = torch.Generator().manual_seed(0)
    n = 1000
    # p >= q at tokens 2 and 3: min(1, p/q) = 1, nothing to solve
    easy = torch.tensor([[2], [3]] * (n // 2))
    verifier.verify_batch(p.expand(n, -1), q.expand(n, -1), easy, generator)
    assert solved == []
    # token 0: min(1, p/q) = 1/4, so about 3/4 of the rows need the plan
    hard = torch.zeros(n, 1, dtype=torch.long)
    verifier.verify_batch(p.expand(n, -1), q.expand(n, -1), hard, generator)
    assert len(solved) == 1 and abs(solved[0] - 0.75 * n) < 5 * math.sqrt(n * 0.75 * 0.25)


def test_float32_rows_at_a_large_vocabulary():
    generator = torch.Generator().manual_seed(2)
    logits = 3 * torch.randn(4, 32_000, generator=generator)
    p = torch.softmax(logits, -1)
    q = torch.softmax(0.8 * logits + torch.randn(4, 32_000, generator=generator), -1)
    p[0, 5000:] = 0  # a top-k truncated target row
    p[0] /= p[0].sum()
    plan = mentored_plan(p, q, 0.05)
    assert plan.accept.dtype == plan.residual.dtype == F64 and torch.isfinite(plan.accept).all()
    assert ((plan.accept >= 0) & (plan.accept <= 1)).all() and (plan.residual >= 0).all()
    p64, q64 = (x.double() / x.double().sum(-1, keepdim=True) for x in (p, q))  # the laws sampled
    for b in range(4):
        row = MentoredPlan(plan.accept[b], plan.residual[b], None, None, None)
        pi = emitted_law(q64[b], row)
        assert float(pi.sum()) == pytest.approx(1, abs=1e-12)
        assert kl(p64[b], pi) <= 0.05 + 1e-12  # the float64 evaluation's own rounding
        assert float(plan.acceptance[b]) > 1 - float(total_variation(p64[b], q64[b]))
    generator = torch.Generator().manual_seed(3)
    verifier = MentoredDecoding(kl_budget=0.05)
    drafts = verifier.sample_drafts_batch(q, 1, generator)
    tokens, _ = verifier.verify_batch(p, q, drafts, generator)
    assert ((tokens >= 0) & (tokens < 32_000)).all()


# The drafter never proposes token 1 (q = 0 < p): at D = 0.5 the optimal rejection mass is
# ~1e-15, far below a float32 step of the acceptance probabilities.
NEVER_DRAFTED = (
    torch.tensor([0.15211527855488793, 0.00042572418357791366, 0.3666888943603712,
                  0.08279763413529623, 0.35351241618788726, 0.04446005257797939], dtype=F64),
    torch.tensor([0.10412837454956506, 0.0, 0.19444613270211258,
                  0.1742641656861102, 0.4201443513500616, 0.10701697571215042], dtype=F64),
)
LAW_ROUNDING = {torch.float32: 1e-6, torch.bfloat16: 1e-2}  # KL moved by rounding pi to the dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("budget", [0.5, 3.0])
def test_low_precision_rows_keep_the_budget_and_the_never_drafted_tokens(dtype, budget):
    """Rows in float32 (what the engine passes), bfloat16 or float16 with never-drafted
    tokens: the scheme must still reject now and then and emit them (else KL = inf), with
    KL(p || pi) <= D exactly for the laws sampled.  The output law is rounded to the rows'
    dtype, so it is held to D only within that rounding (float16 cannot hold a 1e-15 mass)."""
    verifier = MentoredDecoding(kl_budget=budget)
    pairs = [NEVER_DRAFTED] + [(p, q) for _, p, q in random_pairs(300, seed=77) if ((q == 0) & (p > 0)).any()]
    for p, q in pairs:
        p, q = p.to(dtype), q.to(dtype)
        never = (q == 0) & (p > 0)
        plan = plan1(p, q, budget)
        assert plan.accept.dtype == F64
        assert exact_kl(p, q, plan) <= budget, f"p={p.tolist()} q={q.tolist()}"
        assert float((q.double() * (1 - plan.accept)).sum()) > 0 and (plan.residual[never] > 0).all()
        if dtype in LAW_ROUNDING:
            law = mixture_output_law(verifier, p, q, 1).double()
            assert (law[never] > 0).all(), f"p={p.tolist()} q={q.tolist()}"
            assert kl(p.double() / p.double().sum(), law / law.sum()) <= budget + LAW_ROUNDING[dtype]


def test_bad_budgets_are_refused():
    for bad in [-0.1, float("nan"), -math.inf]:
        with pytest.raises(ValueError, match="kl_budget"):
            MentoredDecoding(kl_budget=bad)
        with pytest.raises(ValueError, match="kl_budget"):
            mentored_plan(torch.ones(1, 2) / 2, torch.ones(1, 2) / 2, bad)
    assert get_verifier("mentored").kl_budget == 0.05
    assert get_verifier("mentored", kl_budget=0.2).kl_budget == 0.2
    assert not get_verifier("mentored").lossless


def test_within_target_support_keeps_truncation_strict():
    """With the flag, a top-p-truncated target's excluded tokens get no mass, the budget
    still holds and acceptance stops at 1 - q(p = 0); without it the optimum may go past."""
    p = torch.tensor([[0.6, 0.4, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.3, 0.3, 0.25, 0.15]], dtype=torch.float64)
    for budget in (0.01, 0.1, 1.0, 10.0):
        strict = mentored_plan(p, q, budget, within_target_support=True)
        free = mentored_plan(p, q, budget)
        pi = q * strict.accept + (1 - strict.acceptance).unsqueeze(-1) * strict.residual
        assert float(pi[0, 2:].abs().max()) <= 1e-15
        assert float(strict.acceptance) <= 0.6 + 1e-12
        kl = float((p[0, :2] * (p[0, :2] / pi[0, :2]).log()).sum())
        assert kl <= budget + 1e-12
        assert float(free.acceptance) >= float(strict.acceptance) - 1e-12
    assert float(free.acceptance) > 0.6 + 1e-3  # at D = 10 the free optimum uses excluded tokens
    verifier = get_verifier("mentored", kl_budget=10.0, within_target_support=True)
    generator = torch.Generator().manual_seed(0)
    drafts = verifier.sample_drafts_batch(q.expand(4000, -1), 1, generator)
    tokens, _ = verifier.verify_batch(p.expand(4000, -1), q.expand(4000, -1), drafts, generator)
    assert not ((tokens == 2) | (tokens == 3)).any()
