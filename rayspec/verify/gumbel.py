"""Gumbel-coupling verification (seed 000, Protocol 3 and §5): drafter-invariant, lossless.

The target emits argmax(log p + G) and the drafter drafts the top k of log q + G, with G
the Gumbel noise of the node's position (`rayspec.coupling.gumbel`).  The acceptance of a
one-draft node is the Theorem 3 collision probability, between (1 - TV)/(1 + TV) and 1 - TV
(`rayspec.coupling.bounds`).  See `rayspec.verify.coupled` for the shared contract.
"""

from __future__ import annotations

from rayspec.coupling.gumbel import gumbel_argmax, gumbel_noise, gumbel_top_k
from rayspec.verify.coupled import CouplingVerifier


class GumbelCoupling(CouplingVerifier):
    name = "gumbel"

    def sample_drafts_batch(self, q, k, generator):
        self._check_k(k)
        return gumbel_top_k(q, gumbel_noise(generator, *q.shape, device=q.device), k)

    def sample_target_batch(self, p, generator):
        return gumbel_argmax(p, gumbel_noise(generator, *p.shape, device=p.device))
