"""What both drafter-invariant couplings of seed 000 obey, by Monte Carlo over many seeds
against exact laws (chi-square, fixed seeds): the target's token follows p whatever the
drafter; the drafts follow q's Plackett-Luce law (sampling without replacement); a collision
a = b = j has the per-token probability of Theorem 3 (Gumbel, eq. 7) or Claim 5 (weighted
MinHash), and the top-k hit rate its exact formula (`rayspec.coupling.bounds`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

from rayspec.coupling import bounds
from rayspec.coupling.noise import KeyedNoise
from rayspec.verify import get_verifier
from rayspec.verify.base import without_replacement_draft_law
from tests.coupling.cases import PAIRS, many_seeds
from tests.stats import assert_frequencies_match, law_of_tensor


@dataclass(frozen=True)
class Coupling:
    verifier: str
    collision_per_token: Callable  # P(a = b = j) for each j
    top_k_hit: Callable  # P(the target's token is among the k drafts)
    drafts: int  # drafts per row in the Plackett-Luce test
    positions: int  # positions of one seed in the along-positions test


COUPLINGS = [
    Coupling("gumbel", bounds.gumbel_collision_per_token, bounds.gumbel_top_k_hit, drafts=2, positions=3000),
    Coupling("minhash", bounds.minhash_collision_per_token, bounds.minhash_top_k_hit, drafts=3, positions=2000),
]
couplings = pytest.mark.parametrize("coupling", COUPLINGS, ids=lambda c: c.verifier)
N = 20_000  # seeds per Monte Carlo test


@couplings
@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_target_follows_p_and_drafts_follow_plackett_luce_over_seeds(coupling, case):
    p, q = PAIRS[case]
    verifier = get_verifier(coupling.verifier)
    noise = many_seeds(N, position=17, offset=1000 * case)
    tokens = verifier.sample_target_batch(p.expand(N, -1), noise)
    assert_frequencies_match(tokens.tolist(), law_of_tensor(p), what=f"{coupling.verifier} target")
    drafts = verifier.sample_drafts_batch(q.expand(N, -1), coupling.drafts, noise)
    samples = [tuple(x for x in row if x >= 0) for row in drafts.tolist()]
    assert_frequencies_match(samples, dict(without_replacement_draft_law(q, coupling.drafts)),
                             what=f"{coupling.verifier} drafts")


@couplings
def test_target_follows_p_along_positions_of_one_seed(coupling):
    p = PAIRS[2][0]
    verifier = get_verifier(coupling.verifier)
    tokens = [verifier.sample_target(p, KeyedNoise(5, t)) for t in range(coupling.positions)]
    assert_frequencies_match(tokens, law_of_tensor(p), what=f"{coupling.verifier} target over positions")


@couplings
@pytest.mark.parametrize("case", range(len(PAIRS)))
def test_collisions_follow_the_exact_law_token_by_token(coupling, case):
    """Cells (a = b = j) with Theorem 3's eq. 7 (Gumbel) or Claim 5 (MinHash), plus one cell
    for a != b."""
    p, q = PAIRS[case]
    verifier = get_verifier(coupling.verifier)
    noise = many_seeds(N, position=2, offset=7 + 1000 * case)
    target = verifier.sample_target_batch(p.expand(N, -1), noise)
    first = verifier.sample_drafts_batch(q.expand(N, -1), 1, noise)[:, 0]
    per_token = coupling.collision_per_token(p, q)
    law = {("same", j): float(x) for j, x in enumerate(per_token) if x > 0}
    law["different"] = 1 - float(per_token.sum())
    samples = [("same", int(a)) if a == b else "different" for a, b in zip(target, first)]
    assert_frequencies_match(samples, law, what=f"{coupling.verifier} collisions")


@couplings
@pytest.mark.parametrize("k", [2, 3])
def test_top_k_hits_follow_the_exact_formula(coupling, k):
    p, q = PAIRS[2]
    verifier = get_verifier(coupling.verifier)
    noise = many_seeds(N, position=9, offset=k)
    target = verifier.sample_target_batch(p.expand(N, -1), noise)
    drafts = verifier.sample_drafts_batch(q.expand(N, -1), k, noise)
    hits = (drafts == target[:, None]).any(-1).tolist()
    exact = coupling.top_k_hit(p, q, k)
    assert_frequencies_match(hits, {True: exact, False: 1 - exact}, what=f"{coupling.verifier} top-{k} hits")
