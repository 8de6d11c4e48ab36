"""The best acceptance any lossless verifier can reach: reference values for tests and benchmarks.

Drafts X follow a law Q over token tuples; a lossless verifier emits Y ~ p, and the emitted token
is "accepted" when it is one of the drafted tokens, Y in S(X) (membership acceptance, what
`rayspec.verify.laws.exact_acceptance` measures).  The best any coupling of Q and p can do is
the optimal transport value of seed 001 eq. 4 (seed 003 eq. 1):

    alpha*(Q -> p) = max P(Y in S(X))  over joint laws of (X, Y) with marginals Q and p.

Four ways to compute it, which the tests hold against each other:

* `optimal_acceptance`: the reduced linear programme of seed 003 Thm. 1, any draft law;
* `min_cut_acceptance`: its max-flow/min-cut dual, min_H p(H) + Q(S(X) not inside H), any
  draft law, by enumerating the 2^V sets H;
* `optimal_acceptance_iid`: for k i.i.d. drafts, min_H p(H) + 1 - q(H)^k (seed 002 Thm. 3 and
  its conjectured extension, Remark 2), scanning only the prefixes of the tokens sorted by
  p/q ascending: O(V log V), batched, usable at a real vocabulary size;
* `two_draft_closed_form`: seed 002 Thm. 3 itself, k = 2, by enumeration.

The LP and the min-cut take the draft law as an enumeration, and the min-cut and the closed
form enumerate token sets: small vocabularies only.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import sparse
from scipy.optimize import linprog

# The LP drops draft-set atoms below this mass (they move alpha* by less than their mass):
# such masses, products of 1e-12 probabilities, are where HiGHS has misjudged feasibility.
NEGLIGIBLE_MASS = 1e-15
# Presolve off: it has called these programmes infeasible when masses near 1e-14 occur.  The
# tightest feasibility tolerances: the defaults (1e-7) have left plans 2.5e-8 over a bound.
_HIGHS = {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
MAX_ENUMERATED_VOCAB = 16


def _draft_sets(draft_law) -> dict[frozenset, float]:
    """The draft law merged by set of distinct tokens: acceptance depends on S(x) only."""
    sets: dict[frozenset, float] = {}
    for tokens, prob in draft_law:
        key = frozenset(tokens)
        sets[key] = sets.get(key, 0.0) + float(prob)
    return sets


def optimal_acceptance(p: torch.Tensor, draft_law) -> float:
    """alpha*(Q -> p) by the reduced LP of seed 003 Thm. 1 (scipy HiGHS).

    p [V]; draft_law [(token tuple, probability)] as `Verifier.draft_law` returns it.  One
    variable pi(s, y) >= 0 per draft set s and distinct token y in s (the paper's one variable
    per draft position double-counts repeated tokens):

        maximise sum pi   s.t.   sum_y pi(s, y) <= Q(s),   sum_s pi(s, y) <= p(y).

    The <= form is always feasible (pi = 0).
    """
    target = p.detach().to("cpu", torch.float64).numpy()
    sets = [(sorted(s), mass) for s, mass in _draft_sets(draft_law).items() if mass >= NEGLIGIBLE_MASS]
    rows, cols = [], []
    for row, (tokens, _) in enumerate(sets):
        rows += [row] * len(tokens)
        cols += tokens
    rows, cols = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)
    n = len(cols)
    variables = np.arange(n)
    # Rows 0..len(sets)-1: a set's variables; rows len(sets)+y: token y's variables.
    a_ub = sparse.csr_matrix(
        (np.ones(2 * n), (np.concatenate([rows, len(sets) + cols]), np.concatenate([variables, variables]))),
        shape=(len(sets) + len(target), n),
    )
    b_ub = np.concatenate([[mass for _, mass in sets], target])
    result = linprog(-np.ones(n), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs", options=_HIGHS)
    if result.status != 0:
        raise RuntimeError(f"optimal transport LP failed: {result.message}")
    # HiGHS accepts a basis that overshoots a bound by up to its feasibility tolerance and
    # counts the overshoot as acceptance: shrink each variable into every constraint it is in,
    # so the value returned is that of a feasible plan.
    plan = result.x.clip(0)
    load = a_ub @ plan
    room = np.minimum(1, np.divide(b_ub, load, out=np.ones_like(load), where=load > b_ub))
    return float(plan @ np.minimum(room[rows], room[len(sets) + cols]))


def _subsets(size: int) -> np.ndarray:
    """[2^size, size] 0/1 matrix: row h is the set whose bit y is set in h."""
    if size > MAX_ENUMERATED_VOCAB:
        raise ValueError(f"enumerating subsets of {size} tokens; at most {MAX_ENUMERATED_VOCAB}")
    h = np.arange(2**size)[:, None]
    return ((h >> np.arange(size)) & 1).astype(np.float64)


def min_cut_acceptance(p: torch.Tensor, draft_law) -> float:
    """alpha* = min over token sets H of p(H) + Q({x : S(x) not inside H}), any draft law.

    The min-cut of the flow network source -> draft set s (capacity Q(s)) -> its tokens ->
    sink (capacity p(y)), whose max flow is the reduced LP; exact, by enumeration of H."""
    target = p.detach().to("cpu", torch.float64).numpy()
    subsets = _subsets(len(target))
    sets = _draft_sets(draft_law)
    members = np.zeros((len(sets), len(target)))
    for row, tokens in enumerate(sets):
        members[row, list(tokens)] = 1
    masses = np.array(list(sets.values()))
    outside = (members @ (1 - subsets).T) > 0  # [sets, H]: the set has a token outside H
    return float(np.min(subsets @ target + masses @ outside))


def optimal_acceptance_iid(p: torch.Tensor, q: torch.Tensor, k) -> torch.Tensor:
    """alpha*_k for k i.i.d. drafts from q: min_H p(H) + 1 - q(H)^k, H ranging over the prefixes
    of the tokens sorted by p/q ascending (seed 002 Thm. 3 / Remark 2; the prefix restriction is
    the seed notes' verified-numerically shortcut, held against the LP by the tests).

    p, q [..., V]; k an int or [...]; returns [...].  Tokens q never drafts sort last: they
    can only add target mass to H.  H = {} gives 1.
    """
    ratio = torch.where(q > 0, p / torch.where(q > 0, q, 1), torch.inf)
    order = torch.argsort(ratio, dim=-1)
    target_mass = p.gather(-1, order).cumsum(-1)
    draft_mass = q.gather(-1, order).cumsum(-1).clamp(0, 1)
    k = torch.as_tensor(k, dtype=p.dtype, device=p.device).unsqueeze(-1)
    return (target_mass + 1 - draft_mass**k).amin(-1).clamp_max(1)


def two_draft_closed_form(p: torch.Tensor, q: torch.Tensor) -> float:
    """alpha*_2 for two i.i.d. drafts: min_S p(S) + 1 - q(S)^2 (seed 002 Thm. 3, eq. 6), by
    enumerating every token set S."""
    target = p.detach().to("cpu", torch.float64).numpy()
    draft = q.detach().to("cpu", torch.float64).numpy()
    subsets = _subsets(len(target))
    return float(np.min(subsets @ target + 1 - (subsets @ draft) ** 2))
