"""Importance-weighted multi-draft sampling (seed 002): "is" and "is-weighted".

The contract test already checks exact losslessness on small vocabularies (no truncation
there).  Here: the selection law p_I against enumeration and sampling, the LP against the
paper's closed form (Thm. 3), orderings that are theorems, and the truncated alphabet, which
only shows at vocabularies larger than M.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rayspec.verify import get_verifier
from rayspec.verify.importance import (
    ImportanceSampling, WeightedImportanceSampling, importance_rule, optimal_rules, pair_law,
)
from rayspec.verify.laws import exact_acceptance, mixture_output_law
from tests.cases import adversarial_pairs, random_law, random_pairs
from tests.stats import assert_frequencies_match, law_of_tensor

F64 = torch.float64

VERIFIERS = {
    "is": ImportanceSampling,
    "is-weighted": WeightedImportanceSampling,
    "is-weighted full LP": lambda **kw: WeightedImportanceSampling(free_tokens=None, **kw),
    "is-weighted s=1": lambda **kw: WeightedImportanceSampling(free_tokens=1, **kw),
}


def cut_bound(p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """min_S {p(S) + 1 - q(S)^k}: any valid k-draft scheme's acceptance is at most this (a
    token outside S is accepted only if some draft is outside S); for k = 2 it is the
    optimum (seed 002 Thm. 3)."""
    best = 1.0
    for subset in itertools.product([False, True], repeat=p.numel()):
        mask = torch.tensor(subset)
        best = min(best, float(p[mask].sum()) + 1 - float(q[mask].sum()) ** k)
    return best


def enumerated_selection_law(verifier, p, q, k) -> torch.Tensor:
    """sum_d P(d) P(Y_I = . | d), straight from the draft law and the per-tuple selection."""
    law = verifier.draft_law(q, k)
    drafts = torch.tensor([d for d, _ in law])
    probs = torch.tensor([w for _, w in law], dtype=F64)
    n = drafts.shape[0]
    nodes = verifier.nodes(p.expand(n, -1), q.expand(n, -1), drafts)
    selected = torch.zeros(n, p.numel(), dtype=F64).scatter_add_(-1, drafts, nodes.selection_probs())
    return probs @ selected


def concentrated_pair(rng: np.random.Generator, vocab: int, head: int):
    """An LM-like (p, q) on `vocab` tokens: most target mass on a few, a drafter nearby."""
    logits = rng.standard_normal(vocab) * 2.5
    p = torch.softmax(torch.tensor(logits), -1)
    q = torch.softmax(torch.tensor(0.7 * logits + rng.standard_normal(vocab)), -1)
    return p, q


# ------------------------------------------------------------------ selection law p_I


@pytest.mark.parametrize("name", list(VERIFIERS))
@pytest.mark.parametrize("k", [2, 3, 4])
def test_selection_law_is_the_exact_law_of_the_selected_draft(name, k):
    verifier = VERIFIERS[name]()
    for _, p, q in random_pairs(8, seed=20 + k, sizes=range(2, 6)):
        nodes = verifier.nodes(p.unsqueeze(0), q.unsqueeze(0), torch.zeros(1, k, dtype=torch.long))
        p_sel = nodes.selection_law()[0]
        assert abs(float(p_sel.sum()) - 1) < 1e-12
        assert torch.allclose(p_sel, enumerated_selection_law(verifier, p, q, k), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["is", "is-weighted"])
@pytest.mark.parametrize("k", [2, 3])
def test_selection_law_matches_sampled_selections(name, k):
    verifier = VERIFIERS[name]()
    _, p, q = next(c for c in adversarial_pairs() if c[0] == "spechub fixture 2")
    n = 40_000
    generator = torch.Generator().manual_seed(k)
    drafts = verifier.sample_drafts_batch(q.expand(n, -1), k, generator)
    nodes = verifier.nodes(p.expand(n, -1), q.expand(n, -1), drafts)
    column = nodes.select(torch.rand(n, k - 1, generator=generator, dtype=F64))
    selected = drafts.gather(-1, column.unsqueeze(-1)).squeeze(-1)
    assert_frequencies_match(selected.tolist(), law_of_tensor(nodes.selection_law()[0]), what=f"{name} Y_I")


# ------------------------------------------------------------------ acceptance: theorems


def test_full_lp_reaches_the_optimum_of_theorem_3():
    verifier = WeightedImportanceSampling(free_tokens=None)
    cases = [(p, q) for _, p, q in random_pairs(60, seed=31, sizes=range(2, 8))]
    cases += [(p, q) for _, p, q in adversarial_pairs()]
    for p, q in cases:
        optimum = cut_bound(p, q, 2)
        assert abs(verifier.acceptance(p, q, 2) - optimum) < 1e-12
        # membership acceptance can exceed the algorithmic one, never the optimum
        assert abs(exact_acceptance(verifier, p, q, 2) - optimum) < 1e-12


def test_lp_survives_masses_near_1e_14():
    """Masses far below the first flow's 2^-30 unit (HiGHS presolve, before the flow, called
    such LPs infeasible): the optimum must still be reached."""
    tiny = 1e-14
    p = torch.tensor([0.3, tiny, 0.2, 0.5 - 2 * tiny, tiny, 0.0], dtype=F64)
    q = torch.tensor([tiny, 0.4, tiny, 0.1, 0.5 - 3 * tiny, tiny], dtype=F64)
    verifier = WeightedImportanceSampling(free_tokens=None)
    assert abs(verifier.acceptance(p, q, 2) - cut_bound(p, q, 2)) < 1e-12
    rules = optimal_rules(*(x.unsqueeze(0).numpy() for x in (p, q, q)), None)
    assert np.isfinite(rules).all() and rules.min() >= 0 and rules.max() <= 1


def test_classical_importance_sampling_survives_a_subnormal_draft_mass():
    """w = p / q overflowed to inf at q(0) = 1e-320 (a float64 subnormal), and w_a / (w_a + w_b)
    = inf / inf made the rule, the selection law p_I and the output law NaN; verify_batch then
    drew from a NaN residual, whose inverse-CDF search ran past the row's end."""
    p = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=F64)
    q = torch.tensor([1e-320, 1.0, 0.0, 0.0], dtype=F64)
    rule = importance_rule(p.unsqueeze(0), q.unsqueeze(0), q.unsqueeze(0))[0]
    assert torch.isfinite(rule).all() and rule.min() >= 0 and rule.max() <= 1
    # Token 0 against token 1: w(0) = 0.5 / 1e-320 is kept; the reverse order keeps token 0 all but surely too.
    assert rule[0, 1] == 1.0 and 0 < rule[1, 0] < 1e-300
    # Tokens the drafter never draws keep the old convention: weight 0, and two zero weights split evenly.
    assert rule[0, 2] == 1.0 and rule[2, 0] == 0.0 and rule[2, 3] == 0.5
    verifier = ImportanceSampling()
    assert torch.allclose(mixture_output_law(verifier, p, q, 2), p, rtol=0, atol=1e-15)
    n = 20_000
    generator = torch.Generator().manual_seed(0)
    drafts = verifier.sample_drafts_batch(q.expand(n, -1), 2, generator)
    tokens, _ = verifier.verify_batch(p.expand(n, -1), q.expand(n, -1), drafts, generator)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p), what="is with a subnormal draft mass")


def test_classical_importance_rule_is_the_ratio_of_the_weights():
    """The rule is computed without p / q (see the test above); on ordinary laws it is still
    w_a(i) / (w_a(i) + w_b(j)), w = p / (input law), up to rounding."""
    generator = torch.Generator().manual_seed(3)
    p, a, b = (torch.rand(4, 6, generator=generator, dtype=F64) for _ in range(3))
    p, a, b = p / p.sum(-1, keepdim=True), a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
    w_a, w_b = (p / a).unsqueeze(-1), (p / b).unsqueeze(-2)
    expected = (w_a / (w_a + w_b)).masked_fill(torch.eye(6, dtype=torch.bool), 1.0)
    assert torch.allclose(importance_rule(p, a, b), expected, rtol=0, atol=1e-15)


def test_stage_rule_for_unequal_inputs_reaches_the_min_cut():
    """A stage with inputs of different laws (App. G; every stage after the first): the
    split of pair masses reaches max sum_y min(p, c).  By max-flow min-cut that is
    sum_y min(p, a b) + min_A {sum_{y in A} (p - a b)^+ + (mass of pairs with a token
    outside A)}, enumerated here over every token set A."""
    rng = np.random.default_rng(37)
    for case in range(40):
        size = 2 + case % 6
        p, a, b = (random_law(rng, size).numpy() for _ in range(3))
        rule = optimal_rules(p[None], a[None], b[None], None)[0]
        reached = float(np.minimum(p, pair_law(*(torch.from_numpy(x) for x in (a, b, rule))).numpy()).sum())
        diagonal = a * b
        pairs = np.triu(np.outer(a, b) + np.outer(b, a), 1)
        best = np.inf
        for subset in itertools.product([False, True], repeat=size):
            inside = np.array(subset)
            cut = np.clip(p - diagonal, 0, None)[inside].sum() + pairs.sum() - pairs[np.ix_(inside, inside)].sum()
            best = min(best, cut)
        assert reached == pytest.approx(np.minimum(p, diagonal).sum() + best, abs=1e-12)


def test_optimised_weights_beat_classical_importance_sampling_at_two_drafts():
    classical, weighted = ImportanceSampling(), WeightedImportanceSampling(free_tokens=None)
    for _, p, q in random_pairs(60, seed=32, sizes=range(2, 8)):
        assert weighted.acceptance(p, q, 2) >= classical.acceptance(p, q, 2) - 1e-9


def test_full_lp_stages_are_monotone_in_k_and_below_the_cut_bound():
    """Each stage may keep its incumbent, so an optimised stage never loses acceptance; and
    no valid scheme beats min_S {p(S) + 1 - q(S)^k}."""
    verifier = WeightedImportanceSampling(free_tokens=None)
    for _, p, q in random_pairs(25, seed=33, sizes=range(2, 7)):
        rates = [verifier.acceptance(p, q, k) for k in (1, 2, 3, 4)]
        assert all(b >= a - 1e-8 for a, b in zip(rates, rates[1:])), rates
        assert all(r <= cut_bound(p, q, k) + 1e-9 for k, r in zip((1, 2, 3, 4), rates))


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_one_draft_is_speculative_sampling(name):
    verifier = VERIFIERS[name]()
    sps = get_verifier("sps")
    for _, p, q in random_pairs(10, seed=34):
        assert abs(verifier.acceptance(p, q, 1) - float(torch.minimum(p, q).sum())) < 1e-12
        for x in torch.nonzero(q > 0).flatten().tolist():
            assert torch.allclose(verifier.output_law(p, q, [x]), sps.output_law(p, q, [x]), atol=1e-12)


@pytest.mark.parametrize("name", ["is", "is-weighted"])
def test_one_draft_skips_the_truncated_alphabet(name):
    """A flat target over 300 tokens: the top-40 alphabet holds a small part of p, yet with a
    single draft nothing is lost — acceptance is 1 - TV, as in speculative sampling."""
    verifier, sps = get_verifier(name), get_verifier("sps")
    generator = torch.Generator().manual_seed(7)
    p = torch.softmax(0.3 * torch.randn(300, generator=generator, dtype=torch.float64), -1)
    q = torch.softmax(torch.log(p) + 0.5 * torch.randn(300, generator=generator, dtype=torch.float64), -1)
    assert float(p.topk(40).values.sum()) < 0.3
    assert verifier.acceptance(p, q, 1) == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-12)
    assert verifier.acceptance(p, q, 2) < 0.5 * verifier.acceptance(p, q, 1)  # the tail cost with two drafts
    for x in (0, 17, 299):
        assert torch.allclose(verifier.output_law(p, q, [x]), sps.output_law(p, q, [x]), atol=1e-12)
    tokens = [verifier.verify(p, q, [17], torch.Generator().manual_seed(s))[0] for s in range(50)]
    assert tokens == [sps.verify(p, q, [17], torch.Generator().manual_seed(s))[0] for s in range(50)]
    # Decided per row: one draft padded with -1 (a one-child node of a wider tree) is still
    # speculative sampling, beside rows with two drafts in the same batch.
    drafts = torch.tensor([[17, -1], [-1, 17], [17, 40], [0, -1]])
    rows = verifier.output_law_batch(p.expand(4, -1), q.expand(4, -1), drafts)
    assert torch.allclose(rows[0], sps.output_law(p, q, [17]), atol=1e-12) and torch.equal(rows[0], rows[1])
    assert torch.allclose(rows[2], verifier.output_law(p, q, [17, 40]), atol=1e-12)
    assert torch.allclose(rows[3], sps.output_law(p, q, [0]), atol=1e-12)
    token, index = verifier.verify_batch(p.expand(4000, -1), q.expand(4000, -1), drafts[1:2].expand(4000, -1),
                                         torch.Generator().manual_seed(0))
    accepted = float((index == 1).double().mean())  # the one draft's column
    assert bool((index != 0).all()) and bool((token[index == 1] == 17).all())
    assert accepted == pytest.approx(min(float(p[17] / q[17]), 1.0), abs=0.03)  # speculative sampling's rate


@pytest.mark.parametrize("name", ["is", "is-weighted full LP"])
def test_a_perfect_drafter_is_always_accepted(name):
    """p = q: classical weights are all equal and keep Y_I ~ q at every stage; the LP can
    do the same.  (The truncated LP cannot always: its rank rule for tail pairs is fixed.)"""
    verifier = VERIFIERS[name]()
    for _, p, _ in random_pairs(10, seed=35, sizes=range(2, 9)):
        for k in (2, 3, 4):
            assert abs(verifier.acceptance(p, p, k) - 1) < 1e-9


@pytest.mark.parametrize("free_tokens", [1, 2, 3])
def test_truncated_lp_loses_at_most_the_mass_of_the_fixed_pairs(free_tokens):
    """Moving a pair's mass between its tokens changes sum_y min(p, p_I) by at most that
    mass, so fixing the tail pairs costs at most q(tail)^2 - sum_tail q^2 (the notes'
    form of seed 002 eq. 14)."""
    full = WeightedImportanceSampling(free_tokens=None)
    truncated = WeightedImportanceSampling(free_tokens=free_tokens)
    for _, p, q in random_pairs(20, seed=36, sizes=range(4, 9)):
        tail = torch.argsort(-(p - q * q), stable=True)[free_tokens:]
        bound = float(q[tail].sum() ** 2 - (q[tail] ** 2).sum())
        loss = full.acceptance(p, q, 2) - truncated.acceptance(p, q, 2)
        assert -1e-8 <= loss <= bound + 1e-8


# ------------------------------------------------------------------ truncated alphabet


def truncation_cases():
    rng = np.random.default_rng(40)
    vocab, head = 60, 8
    p, q = concentrated_pair(rng, vocab, head)
    cases = [("lm-like", p, q)]
    sparse = torch.zeros(vocab, dtype=F64)
    sparse[[3, 17, 40, 41, 59]] = torch.tensor([0.4, 0.3, 0.2, 0.05, 0.05], dtype=F64)
    cases.append(("target support below M", sparse, q))
    top = torch.topk(p, head).indices
    outside = q.clone()
    outside[top] = 0
    cases.append(("no draft mass on the alphabet", p, outside / outside.sum()))
    cases.append(("random", random_law(rng, vocab), random_law(rng, vocab)))
    return cases


@pytest.mark.parametrize("name", ["is", "is-weighted"])
@pytest.mark.parametrize("case", truncation_cases(), ids=lambda c: c[0])
def test_truncated_alphabet_is_exact(name, case):
    _, p, q = case
    verifier = VERIFIERS[name](alphabet_size=8)
    law = mixture_output_law(verifier, p, q, 2)  # 3600 draft pairs
    assert float((law - p).abs().max()) <= 1e-9


@pytest.mark.parametrize("name", ["is", "is-weighted"])
def test_truncated_alphabet_is_exact_with_three_drafts(name):
    rng = np.random.default_rng(41)
    p, q = concentrated_pair(rng, 12, 4)
    verifier = VERIFIERS[name](alphabet_size=4)
    assert float((mixture_output_law(verifier, p, q, 3) - p).abs().max()) <= 1e-9


def test_no_truncation_when_the_vocabulary_fits():
    _, p, q = next(c for c in adversarial_pairs() if c[0] == "spechub fixture 2")
    drafts = torch.tensor([[0, 1], [4, 4], [2, 0]])
    p, q = p.expand(3, -1), q.expand(3, -1)
    for cls in (ImportanceSampling, WeightedImportanceSampling):
        truncating, whole = cls(alphabet_size=5), cls(alphabet_size=None)
        assert torch.equal(truncating.output_law_batch(p, q, drafts), whole.output_law_batch(p, q, drafts))


@pytest.mark.parametrize("name", ["is", "is-weighted"])
def test_truncated_sampling_follows_the_laws(name):
    verifier = VERIFIERS[name](alphabet_size=8)
    _, p, q = truncation_cases()[0]
    n = 20_000
    generator = torch.Generator().manual_seed(3)
    top = torch.topk(p, 8).indices.tolist()
    outside = next(x for x in torch.argsort(q, descending=True).tolist() if x not in top)
    # a draft in the alphabet, one outside, the selected one inside again
    drafts = torch.tensor([top[1], outside, top[0]]).expand(n, -1)
    tokens, index = verifier.verify_batch(p.expand(n, -1), q.expand(n, -1), drafts, generator)
    law = law_of_tensor(verifier.output_law(p, q, drafts[0]))
    assert_frequencies_match(tokens.tolist(), law, what="given drafts")
    assert (index != 1).all() and torch.equal(tokens[index >= 0], drafts[0][index[index >= 0]])
    # drafts included: the emitted tokens follow p, and acceptance() is the accepted fraction
    drafts = verifier.sample_drafts_batch(q.expand(n, -1), 3, generator)
    tokens, index = verifier.verify_batch(p.expand(n, -1), q.expand(n, -1), drafts, generator)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p), what="drafts included")
    rate = verifier.acceptance(p, q, 3)
    observed = float((index >= 0).double().mean())
    assert abs(observed - rate) < 5 * (rate * (1 - rate) / n) ** 0.5, (observed, rate)


def test_large_vocabulary_in_float32():
    generator = torch.Generator().manual_seed(9)
    logits = torch.randn(6, 32_000, generator=generator) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(0.8 * logits + torch.randn(6, 32_000, generator=generator), -1)
    for verifier in (ImportanceSampling(), WeightedImportanceSampling()):
        drafts = verifier.sample_drafts_batch(q, 4, generator)
        drafts[0, 2:] = -1  # a node with fewer children
        tokens, index = verifier.verify_batch(p, q, drafts, generator)
        assert (p.gather(-1, tokens.unsqueeze(-1)) > 0).all()
        accepted = index >= 0
        assert torch.equal(tokens[accepted], drafts[accepted, index[accepted]])
        law = verifier.output_law_batch(p, q, drafts)
        assert law.dtype == torch.float32 and torch.isfinite(law).all()
        assert torch.allclose(law.sum(-1), torch.ones(6), atol=1e-5)


def test_pair_law_is_the_law_of_the_kept_input():
    a, b = torch.tensor([0.2, 0.5, 0.3], dtype=F64), torch.tensor([0.6, 0.1, 0.3], dtype=F64)
    rule = torch.tensor([[1.0, 0.3, 0.9], [0.2, 0.0, 0.5], [0.4, 1.0, 0.7]], dtype=F64)
    expected = torch.zeros(3, dtype=F64)
    for i, j in itertools.product(range(3), repeat=2):
        expected[i] += a[i] * b[j] * rule[i, j]
        expected[j] += a[i] * b[j] * (1 - rule[i, j])
    assert torch.allclose(pair_law(a, b, rule), expected, atol=1e-15)


def test_parameters_are_checked():
    assert get_verifier("is-weighted", alphabet_size=8, free_tokens=2).free_tokens == 2
    with pytest.raises(ValueError, match="alphabet_size"):
        get_verifier("is", alphabet_size=0)
    with pytest.raises(ValueError, match="free_tokens"):
        get_verifier("is-weighted", free_tokens=0)
