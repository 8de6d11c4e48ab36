"""SpecHub (seed 003): the paper's results as exact oracles, and its Alg. 3 erratum as a
negative control.  Losslessness and sampling frequencies are in `test_contract.py`.

Every acceptance here is exact (enumeration of the draft law, float64); the theorems'
comparison points are computed independently: the two-draft i.i.d. optimum by enumerating
subsets (seed 002 Thm. 3), RRS and single-draft SS through their own verifiers.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rayspec.verify import get_verifier
from rayspec.verify.laws import conditional_laws, exact_acceptance, mixture_output_law, total_variation
from rayspec.verify.spechub import SpecHub, SpecHubChain, hub_pair_law
from tests.cases import random_law, random_pairs
from tests.stats import assert_frequencies_match, law_of_tensor

F64 = torch.float64
EXACT = 1e-12


def law(*x) -> torch.Tensor:
    x = torch.tensor(x, dtype=F64)
    return x / x.sum()


FIG5 = (law(0.1, 0.6, 0.3), law(0.5, 0.3, 0.2))  # (p, q), seed 003 Fig. 5-6
FIXTURE2 = (law(0.35, 0.25, 0.2, 0.15, 0.05), law(0.6, 0.1, 0.05, 0.05, 0.2))


@pytest.fixture(scope="module")
def spechub():
    return get_verifier("spechub")


def hub_of(q: torch.Tensor) -> int:
    """argmax q, lowest index among ties (written out, not borrowed from the code under test)."""
    return int(np.flatnonzero(q.numpy() == q.numpy().max())[0])


def closed_form_acceptance(p: torch.Tensor, q: torch.Tensor) -> float:
    """p(a) + sum_{x != a} min(p(x), q(x) / (1 - q(a))); a one-hot q leaves p(a) (plain SS)."""
    a = hub_of(q)
    others = [x for x in range(len(q)) if x != a]
    rest = sum(float(q[x]) for x in others)
    if rest == 0:
        return float(p[a])
    return float(p[a]) + sum(min(float(p[x]), float(q[x]) / rest) for x in others)


def iid_two_draft_optimum(p: torch.Tensor, q: torch.Tensor) -> float:
    """The OTM optimum with two i.i.d. drafts, min_S p(S) + 1 - q(S)^2 (seed 002 Thm. 3)."""
    subsets = torch.tensor(list(itertools.product([0.0, 1.0], repeat=len(p))), dtype=F64)
    return float((subsets @ p + 1 - (subsets @ q) ** 2).min())


def optimum_for_draft_law(p: torch.Tensor, draft_law) -> float:
    """The best membership acceptance any verifier reaches on this draft law: the max flow
    from draft tuples to the tokens they hold, i.e. min_H p(H) + Q({d : S(d) not inside H})."""
    best = 1.0
    for inside in itertools.product([False, True], repeat=len(p)):
        cut = sum(float(p[y]) for y in range(len(p)) if inside[y])
        cut += sum(prob for d, prob in draft_law if not all(inside[y] for y in d))
        best = min(best, cut)
    return best


def hub_heavy_pairs(count: int, seed: int):
    """Random (p, q) with q(a) > 1/2: q mixes a one-hot with weight above 1/2 into a random law."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        size = 2 + i % 5
        weight = rng.uniform(0.5, 1.0)
        q = (1 - weight) * random_law(rng, size).numpy()
        q[rng.integers(size)] += weight
        yield random_law(rng, size), torch.tensor(q / q.sum(), dtype=F64)


# --------------------------------------------------------------------------- acceptance


def test_acceptance_matches_the_closed_form(spechub):
    worst = 0.0
    for _, p, q in random_pairs(300, seed=31):
        worst = max(worst, abs(exact_acceptance(spechub, p, q, 2) - closed_form_acceptance(p, q)))
    assert worst <= EXACT, worst


def test_optimal_for_its_own_draft_law(spechub):
    """The plan reaches the max-flow optimum (= OTM, P3 Thm. 1 and App. E) for the sparse Q."""
    for _, p, q in random_pairs(100, seed=37):
        best = optimum_for_draft_law(p, spechub.draft_law(q, 2))
        assert exact_acceptance(spechub, p, q, 2) == pytest.approx(best, abs=EXACT), (p, q)


def test_paper_fixtures(spechub):
    for (p, q), alpha in ((FIG5, 1.0), (FIXTURE2, 0.9)):
        assert exact_acceptance(spechub, p, q, 2) == pytest.approx(alpha, abs=EXACT)
        assert exact_acceptance(spechub, p, q, 1) == pytest.approx(0.6, abs=EXACT)


def test_at_least_single_draft_acceptance(spechub):
    sps = get_verifier("sps")
    for _, p, q in random_pairs(200, seed=32):
        single = 1 - float(total_variation(p, q))
        assert exact_acceptance(spechub, p, q, 1) == pytest.approx(single, abs=EXACT)
        assert exact_acceptance(sps, p, q, 1) == pytest.approx(single, abs=EXACT)
        assert exact_acceptance(spechub, p, q, 2) >= single - EXACT


def test_iid_optimum_by_enumeration_reproduces_the_notes():
    assert iid_two_draft_optimum(*FIG5) == pytest.approx(0.85, abs=EXACT)
    assert iid_two_draft_optimum(*FIXTURE2) == pytest.approx(0.76, abs=EXACT)


def test_thm4_a_heavy_hub_beats_the_iid_optimum(spechub):
    for p, q in hub_heavy_pairs(200, seed=33):
        assert float(q.max()) > 0.5
        assert exact_acceptance(spechub, p, q, 2) >= iid_two_draft_optimum(p, q) - EXACT, (p, q)


def test_thm3_beats_rrs_when_the_hub_is_heavy_enough(spechub):
    rrs = get_verifier("rrs")
    checked = 0
    for _, p, q in random_pairs(300, seed=34):
        first = 1 - float(total_variation(p, q))
        q_hub = float(q.max())
        if q_hub >= 1 or q_hub / (1 - q_hub) <= 1 - first:
            continue
        checked += 1
        assert exact_acceptance(spechub, p, q, 2) >= exact_acceptance(rrs, p, q, 2) - EXACT, (p, q)
    assert checked >= 100


# --------------------------------------------------------------------------- the hub


def test_cor1_hub_emitted_with_probability_p_a_and_only_by_acceptance(spechub):
    for _, p, q in random_pairs(200, seed=35):
        a = hub_of(q)
        drafts, probs, laws = conditional_laws(spechub, p, q, 2)
        assert float(probs @ laws[:, a]) == pytest.approx(float(p[a]), abs=EXACT)
        chain = spechub.chain(p.expand(len(probs), -1), q.expand(len(probs), -1), drafts)
        paired = drafts[:, 1] >= 0
        assert (chain.residual()[paired, a] == 0).all()


def test_sampled_hub_tokens_are_always_accepted_drafts(spechub):
    p, q = FIXTURE2
    generator = torch.Generator().manual_seed(3)
    n = 20_000
    drafts = spechub.sample_drafts_batch(q.expand(n, -1), 2, generator)
    tokens, index = spechub.verify_batch(p.expand(n, -1), q.expand(n, -1), drafts, generator)
    assert (index[tokens == 0] >= 0).all()
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p), what="spechub emitted tokens")


class _LiteralAlg3Chain(SpecHubChain):
    """The paper's Alg. 3 read literally: p'(a) is reduced only in pairs (a, x), so a pair
    (x, a) tests the hub against the whole p(a)."""

    def _plan_hub_pairs(self):
        super()._plan_hub_pairs()
        self.hub_left = self.p_hub


class _LiteralAlg3(SpecHub):
    def chain(self, p, q, drafts):
        return _LiteralAlg3Chain(p, q, drafts)


def test_negative_control_the_literal_alg3_order_is_biased(spechub):
    p, q = FIXTURE2
    literal = mixture_output_law(_LiteralAlg3(), p, q, 2)
    # S1 = 0.3, S2 = 0.15: the hub leaves with min(.35, .3) + min(.35, .15) = 0.45.
    assert float(literal[0]) == pytest.approx(0.45, abs=EXACT)
    assert float((mixture_output_law(spechub, p, q, 2) - p).abs().max()) <= EXACT
    biased = sum(
        float((mixture_output_law(_LiteralAlg3(), p, q, 2) - p).abs().max()) > 1e-6
        for _, p, q in random_pairs(50, seed=36)
    )
    assert biased >= 10


# --------------------------------------------------------------------------- edge cases


def test_one_hot_q_gives_a_single_draft(spechub):
    p, q = law(0.2, 0.5, 0.3), law(0, 1, 0)
    assert spechub.draft_law(q, 2) == [((1,), 1.0)]
    drafts = spechub.sample_drafts_batch(q.expand(100, -1), 2, torch.Generator().manual_seed(0))
    assert (drafts[:, 0] == 1).all() and (drafts[:, 1] == -1).all()
    assert exact_acceptance(spechub, p, q, 2) == pytest.approx(0.5, abs=EXACT)
    assert float((mixture_output_law(spechub, p, q, 2) - p).abs().max()) <= EXACT


def test_ties_for_the_hub_pick_the_lowest_index(spechub):
    p, q = law(0.1, 0.2, 0.3, 0.4), law(0.1, 0.4, 0.4, 0.1)
    pairs = [d for d, _ in spechub.draft_law(q, 2)]
    assert all(d.count(1) == 1 for d in pairs)
    drafts = spechub.sample_drafts_batch(q.expand(5000, -1), 2, torch.Generator().manual_seed(1))
    assert ((drafts == 1).sum(-1) == 1).all()
    assert exact_acceptance(spechub, p, q, 2) == pytest.approx(closed_form_acceptance(p, q), abs=EXACT)
    assert float((mixture_output_law(spechub, p, q, 2) - p).abs().max()) <= EXACT


def test_target_without_the_hub_never_emits_it(spechub):
    p, q = law(0, 0.5, 0.3, 0.2), law(0.55, 0.05, 0.1, 0.3)
    _, _, laws = conditional_laws(spechub, p, q, 2)
    assert (laws[:, 0] == 0).all()
    expected = sum(min(float(p[x]), float(q[x]) / 0.45) for x in (1, 2, 3))
    assert exact_acceptance(spechub, p, q, 2) == pytest.approx(expected, abs=EXACT)


def test_disjoint_supports_accept_nothing(spechub):
    p, q = law(0.5, 0.5, 0, 0), law(0, 0, 0.3, 0.7)
    assert exact_acceptance(spechub, p, q, 2) == 0.0
    assert float((mixture_output_law(spechub, p, q, 2) - p).abs().max()) <= EXACT


def test_one_draft_is_plain_speculative_sampling(spechub):
    sps = get_verifier("sps")
    p, q = FIXTURE2
    drafts = torch.arange(5).unsqueeze(-1)
    ours = spechub.output_law_batch(p.expand(5, -1), q.expand(5, -1), drafts)
    theirs = sps.output_law_batch(p.expand(5, -1), q.expand(5, -1), drafts)
    assert torch.allclose(ours, theirs, rtol=0, atol=EXACT)
    # a node with one child keeps the first draft of a pair: its marginal is q
    first = spechub.sample_drafts_batch(q.expand(20_000, -1), 2, torch.Generator().manual_seed(2))[:, 0]
    assert_frequencies_match(first.tolist(), law_of_tensor(q), what="first draft")
    padded = torch.cat([drafts, -torch.ones_like(drafts)], -1)
    ours = spechub.output_law_batch(p.expand(5, -1), q.expand(5, -1), padded)
    assert torch.allclose(ours, theirs, rtol=0, atol=EXACT)
    # and a row without any draft emits straight from p
    assert torch.allclose(spechub.output_law(p, q, torch.tensor([-1, -1])), p, rtol=0, atol=EXACT)


def test_drafts_without_the_hub_are_refused(spechub):
    p, q = FIXTURE2
    with pytest.raises(ValueError, match="hub"):
        spechub.verify(p, q, torch.tensor([1, 2]), torch.Generator())
    with pytest.raises(ValueError, match="hub"):
        spechub.output_law(p, q, torch.tensor([0, 0]))


def test_float32_hub_within_rounding_of_one():
    """1 - q(a) underflows in float32 here; the pair law is summed from the other tokens."""
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 32_000, generator=generator, dtype=F64)
    logits[:, 7] = 30.0  # q(a) = 1 - ~5e-9
    q64 = torch.softmax(logits, -1)
    p64 = torch.softmax(torch.randn(4, 32_000, generator=generator, dtype=F64), -1)
    q32, p32 = q64.float(), p64.float()
    assert (1 - q32[:, 7] == 0).all()
    hub = torch.full((4,), 7)
    exact = hub_pair_law(q64, hub)
    assert torch.allclose(hub_pair_law(q32, hub).double(), exact, rtol=1e-5, atol=0)
    spechub = SpecHub()
    drafts = spechub.sample_drafts_batch(q32, 2, generator)
    assert ((drafts == 7).sum(-1) == 1).all()
    law32 = spechub.output_law_batch(p32, q32, drafts)
    law64 = spechub.output_law_batch(p64, q64, drafts)
    assert torch.isfinite(law32).all()
    assert torch.allclose(law32.double(), law64, rtol=0, atol=1e-6)
    tokens, _ = spechub.verify_batch(p32, q32, drafts, generator)
    assert ((tokens >= 0) & (tokens < 32_000)).all()


@pytest.mark.parametrize("dtype, hub_logit", [(torch.float32, 100.0), (torch.float16, 20.0)])
def test_other_tokens_of_a_mass_below_one_over_the_largest_float_still_pair_with_the_hub(dtype, hub_logit):
    """q(a) / (1 - q(a)) overflows here (float32: the others are subnormal; float16: their
    mass is below 1 / 65504); the pair law must stay q(a) q(x) / (1 - q(a)), and a pair
    (a, x) must not emit the hub every time."""
    q = torch.softmax(torch.tensor([0.0, hub_logit, 5.0, -5.0], dtype=F64), -1).to(dtype)
    p = torch.softmax(torch.tensor([3.0, 0.0, 1.0, 0.5], dtype=F64), -1).to(dtype)
    rest = q.double()[[0, 2, 3]].sum()
    assert 0 < rest < 1 / torch.finfo(dtype).max
    hub = torch.tensor([1])
    pair = hub_pair_law(q.unsqueeze(0), hub)[0].double()
    expected = q.double() * q.double()[1] / rest
    expected[1] = 0
    assert torch.isfinite(pair).all() and torch.allclose(pair, expected, rtol=1e-2, atol=0)
    spechub = SpecHub()
    law = mixture_output_law(spechub, p, q, 2).double()
    assert float((law - p.double()).abs().max()) < 1e-3, law.tolist()
    generator = torch.Generator().manual_seed(6)
    n = 20_000
    rows_p, rows_q = p.expand(n, -1).contiguous(), q.expand(n, -1).contiguous()
    drafts = spechub.sample_drafts_batch(rows_q, 2, generator)
    tokens, _ = spechub.verify_batch(rows_p, rows_q, drafts, generator)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p.double() / p.double().sum()), what=f"{dtype} tokens")
