"""Weighted-MinHash-coupling verification (seed 000, Protocol 2 and §5): drafter-invariant,
lossless.

The target emits its first dart hit under p; the drafter's drafts are the first k distinct
tokens hit under q, with the darts of the node's position (`rayspec.coupling.minhash`, an
exact equal-in-law form of the dart throwing).  The acceptance of a one-draft node is the
Claim 5 collision probability, never above the Gumbel coupling's (Theorem 3).  See
`rayspec.verify.coupled` for the shared contract.
"""

from __future__ import annotations

from rayspec.coupling.minhash import first_hits
from rayspec.coupling.noise import keyed
from rayspec.verify.coupled import CouplingVerifier


class MinHashCoupling(CouplingVerifier):
    name = "minhash"

    def sample_drafts_batch(self, q, k, generator):
        self._check_k(k)
        return first_hits(q, k, keyed(generator, q.shape[0]))

    def sample_target_batch(self, p, generator):
        return first_hits(p, 1, keyed(generator, p.shape[0]))[:, 0]
