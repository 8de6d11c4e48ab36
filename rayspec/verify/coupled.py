"""What the two communication-free coupling verifiers (seed 000) have in common.

Drafter-invariant speculative decoding (seed 000, §5): the target's token at absolute
position t is Sample_C(p_t, ξ_t), its own coupled sample under the noise ξ_t shared for
(seed, t) — never a function of q or of the drafts.  The drafter draws its k drafts at a
node from the same ξ_t, so they tend to contain that token; verification merely looks the
target's token up among them.  Hence the output is exactly target-only sampling with the
same noise (`sample_target` at every position), whatever the drafter, and lossless — given
p: a target that scores a tree in one forward rounds p as the tree's shape has it, so a
draw whose noise falls within that rounding of a boundary may differ between trees (README).

Randomness: a `KeyedNoise` (the production path; `tree_randomness` shifts it by the
node's depth, since a node at depth d verifies position base + d), or a torch.Generator,
from which fresh noise is drawn: two generators in the same state couple two calls, one
generator reused gives independent noise.

With independent noise per call, both draft schemes are k draws from q without
replacement (Plackett–Luce): `draft_law`.  The emitted token has no law given the drafts
alone (it shares its noise with them), so `output_law` stays unimplemented.
"""

from __future__ import annotations

from abc import abstractmethod

import torch

from rayspec.coupling.noise import KeyedNoise
from rayspec.verify.base import Verifier, without_replacement_draft_law


class CouplingVerifier(Verifier):
    lossless = True
    drafter_invariant = True
    needs_draft_probs = False
    token_only = True

    @abstractmethod
    def sample_target_batch(self, p: torch.Tensor, generator) -> torch.Tensor:
        """The target's coupled sample of each row of p: the token it emits at this position."""

    def draft_law(self, q, k):
        self._check_k(k)
        return without_replacement_draft_law(q, k)

    def verify_batch(self, p, q, drafts, generator):
        token = self.sample_target_batch(p, generator)
        drafts = drafts.to(token.device)
        # -1 pads the drafts, and is also the sample of a row of zero mass: no draft is hit then.
        hit = (drafts == token.unsqueeze(-1)) & (drafts >= 0)
        index = torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), -1)
        return token, index

    def tree_randomness(self, generator, depth):
        return generator.shifted(depth) if isinstance(generator, KeyedNoise) else generator
