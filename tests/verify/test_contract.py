"""The contract every verifier honours, checked for all of them at once.

* Exact losslessness: sum_d P(d) * output_law(p, q, d) == p to 1e-9 (float64), by
  enumeration, on 500 random pairs (V = 2..6, k = 1..4 as the method allows) and on the
  adversarial pairs of `tests.cases`.
* `sample_drafts` frequencies follow `draft_law`; `verify` frequencies follow `output_law`
  (chi-square, fixed seeds).
* Seeded runs repeat; no NaN ever; bad input is refused with a message.
"""

from __future__ import annotations

import pytest
import torch

from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.laws import conditional_laws, exact_acceptance, mixture_output_law
from tests.cases import adversarial_pairs, random_pairs
from tests.stats import assert_frequencies_match, law_of_tensor

COUPLING = {"gumbel", "minhash"}  # randomness shared with the drafter: no law given the drafts
PRIVATE = [n for n in available_verifiers() if n not in COUPLING]
LOSSLESS_PRIVATE = [n for n in PRIVATE if get_verifier(n).lossless]


def draft_counts(verifier, max_k: int = 4) -> list[int]:
    top = min(max_k, verifier.max_drafts or max_k)
    return list(range(1, top + 1))


@pytest.mark.parametrize("name", LOSSLESS_PRIVATE)
def test_exactly_lossless_on_random_pairs(name):
    verifier = get_verifier(name)
    ks = draft_counts(verifier)
    worst = 0.0
    for i, (_, p, q) in enumerate(random_pairs(500, seed=1000 + len(name))):
        k = ks[i % len(ks)]
        law = mixture_output_law(verifier, p, q, k)
        assert torch.isfinite(law).all()
        worst = max(worst, float((law - p).abs().max()))
    assert worst <= 1e-9, f"{name}: worst |law - p| = {worst:.3e}"


@pytest.mark.parametrize("name", LOSSLESS_PRIVATE)
@pytest.mark.parametrize("case", adversarial_pairs(), ids=lambda c: c[0])
def test_exactly_lossless_on_adversarial_pairs(name, case):
    _, p, q = case
    verifier = get_verifier(name)
    for k in draft_counts(verifier):
        law = mixture_output_law(verifier, p, q, k)
        assert torch.isfinite(law).all(), f"k={k}: NaN/inf in the output law"
        assert float((law - p).abs().max()) <= 1e-9, f"k={k}: law {law.tolist()} != p {p.tolist()}"


def _rows(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.unsqueeze(0).expand(n, -1).contiguous()


@pytest.mark.parametrize("name", available_verifiers())
def test_sample_drafts_follows_draft_law(name):
    verifier = get_verifier(name)
    q = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15], dtype=torch.float64)
    k = draft_counts(verifier, 3)[-1]
    law = {d: prob for d, prob in verifier.draft_law(q, k)}
    generator = torch.Generator().manual_seed(11)
    n = 30_000
    drafts = verifier.sample_drafts_batch(_rows(q, n), k, generator)
    samples = [tuple(x for x in row if x >= 0) for row in drafts.tolist()]
    assert_frequencies_match(samples, law, what=f"{name} drafts")
    # the per-node form draws from the same law
    single = [tuple(verifier.sample_drafts(q, k, generator).tolist()) for _ in range(300)]
    assert all(s in law for s in single)


@pytest.mark.parametrize("name", PRIVATE)
def test_verify_follows_output_law(name):
    verifier = get_verifier(name)
    generator = torch.Generator().manual_seed(5)
    for _, p, q in [c for c in adversarial_pairs() if c[0] in ("spechub fixture 2", "one-hot q", "tied entries")]:
        k = draft_counts(verifier, 3)[-1]
        drafts, probs, laws = conditional_laws(verifier, p, q, k)
        for row in {0, int(probs.argmax()), len(probs) - 1}:
            d = drafts[row]
            n = 20_000
            tokens, index = verifier.verify_batch(_rows(p, n), _rows(q, n), _rows(d, n), generator)
            assert_frequencies_match(tokens.tolist(), law_of_tensor(laws[row]), what=f"{name} drafts {d.tolist()}")
            accepted = index >= 0
            assert torch.equal(tokens[accepted], d[index[accepted]]), "an accepted index must point at the emitted draft"
        # the per-node form too, on fewer draws
        d = drafts[int(probs.argmax())]
        single = [verifier.verify(p, q, d, generator)[0] for _ in range(2000)]
        assert_frequencies_match(single, law_of_tensor(laws[int(probs.argmax())]), what=f"{name} verify()")


@pytest.mark.parametrize("name", available_verifiers())
def test_seeded_verification_repeats(name):
    verifier = get_verifier(name)
    p = torch.softmax(torch.randn(8, 50, generator=torch.Generator().manual_seed(1)), -1)
    q = torch.softmax(torch.randn(8, 50, generator=torch.Generator().manual_seed(2)), -1)
    k = draft_counts(verifier, 3)[-1]

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        drafts = verifier.sample_drafts_batch(q, k, g)
        return drafts, *verifier.verify_batch(p, q, drafts, g)

    first, again, other = run(3), run(3), [run(s) for s in range(4, 12)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    if name != "greedy":
        assert any(not torch.equal(first[1], o[1]) for o in other), "different seeds never changed the output"


@pytest.mark.parametrize("name", available_verifiers())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_nan_on_adversarial_pairs(name, dtype):
    verifier = get_verifier(name)
    generator = torch.Generator().manual_seed(0)
    for label, p, q in adversarial_pairs():
        p, q = p.to(dtype), q.to(dtype)
        k = draft_counts(verifier, 3)[-1]
        drafts = verifier.sample_drafts_batch(_rows(q, 64), k, generator)
        tokens, index = verifier.verify_batch(_rows(p, 64), _rows(q, 64), drafts, generator)
        assert ((tokens >= 0) & (tokens < p.numel())).all(), label
        assert (p[tokens] > 0).all() or name == "mentored", f"{label}: emitted a token the target rules out"


@pytest.mark.parametrize("name", available_verifiers())
def test_refuses_too_many_drafts_or_none(name):
    verifier = get_verifier(name)
    q = torch.full((6,), 1 / 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="draft"):
        verifier.sample_drafts(q, 0, torch.Generator())
    if verifier.max_drafts is not None:
        with pytest.raises(ValueError, match=f"at most {verifier.max_drafts}"):
            verifier.sample_drafts(q, verifier.max_drafts + 1, torch.Generator())


def test_unknown_verifier_and_parameter_are_refused():
    with pytest.raises(ValueError, match="unknown verifier 'nope'.*rrsw"):
        get_verifier("nope")
    with pytest.raises(ValueError, match="verifier 'rrsw' takes no parameter\\(s\\) temperature; its parameters: none$"):
        get_verifier("rrsw", temperature=2)
    with pytest.raises(ValueError, match="takes no parameter\\(s\\) args; its parameters: none$"):
        get_verifier("rrsw", args=1)  # object.__init__'s *args is no parameter
    with pytest.raises(ValueError, match="its parameters: kl_budget, within_target_support$"):
        get_verifier("mentored", budget=0.1)
    # parameters come from requests: a wrong type is bad input, not a crash inside the verifier
    with pytest.raises(ValueError, match="verifier 'is': alphabet_size must be int, got 'x'"):
        get_verifier("is", alphabet_size="x")
    with pytest.raises(ValueError, match="kl_budget must be float, got \\[0.1\\]"):
        get_verifier("mentored", kl_budget=[0.1])
    with pytest.raises(ValueError, match="within_target_support must be bool, got 1"):
        get_verifier("mentored", within_target_support=1)
    assert get_verifier("mentored", kl_budget=1).kl_budget == 1 and get_verifier("is", alphabet_size=None)


def test_exact_acceptance_counts_a_drafted_token_zero_beside_padded_tuples():
    """The oracle itself, on a draft law whose tuples differ in length (-1 pads the short one)."""

    class RaggedDrafts(type(get_verifier("topk"))):
        def draft_law(self, q, k):
            return [((0,), 0.5), ((1, 2), 0.5)]

    verifier, p = RaggedDrafts(), torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    expected = sum(mass * float(verifier.output_law(p, p, list(drafts))[list(drafts)].sum())
                   for drafts, mass in verifier.draft_law(p, 2))
    assert expected > 0.4 and exact_acceptance(verifier, p, p.clone(), 2) == pytest.approx(expected, abs=1e-12)
