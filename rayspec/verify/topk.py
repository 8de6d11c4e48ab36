"""Deterministic drafts verified as point masses (EAGLE-2, SGLang and vLLM at T > 0).

The drafts at a node are chosen without randomness — here the top-k tokens of q; in a
dynamic tree, whichever children the drafter's cumulative probabilities select.  Each draft
is then a point mass, and recursive rejection sampling with q = delta_x reads: accept draft
x_i with probability p_i(x_i), where p_1 = p; after a rejection p_{i+1} is p_i with x_i
removed and renormalised; after the last, the correction token is drawn from p_{k+1}.
The emitted token follows p whatever the drafts were, as long as they were chosen without
the target's randomness — the property dynamic trees need — and verification never reads
q, so no probability rows travel.
"""

from __future__ import annotations

import torch

from rayspec.verify.chain import RejectionChain, SequentialVerifier, gather_rows
from rayspec.verify.greedy import GreedyVerifier


class _PointMassChain(RejectionChain):
    def __init__(self, p, q, drafts):
        super().__init__(p, q, drafts)
        self.n_steps = drafts.shape[-1]
        self.target = p.clone()
        # The row's own mass, not 1: a row rounded to float16 (or decoded within the wire's
        # tolerance) sums to 1 +- 1e-3, and p(x1) / 1 emitted x1 with p(x1), not p(x1) / sum(p),
        # while every later step divides by the summed mass left.
        self.mass = p.sum(-1)  # of self.target

    def accept_prob(self, j):
        x = self.drafts[:, j]
        # No mass left means an earlier draft took all of p: this step is never reached.
        left = self.mass > 0
        prob = gather_rows(self.target, x) / torch.where(left, self.mass, 1)
        return torch.where(left, prob.clamp(0, 1), 0.0) * self.valid[:, j]

    def reject(self, j):
        x = self.drafts[:, j : j + 1].clamp_min(0)
        removed = self.target.gather(-1, x).squeeze(-1) * self.valid[:, j]
        self.target.scatter_(-1, x, torch.where(self.valid[:, j : j + 1], 0.0, self.target.gather(-1, x)))
        # The mass left is summed again rather than decremented: 1 - (1 - 1e-12) loses digits.
        self.mass = torch.where(removed > 0, self.target.sum(-1), self.mass)

    def residual(self):
        return self.target


class TopKPointMass(SequentialVerifier):
    name = "topk"
    deterministic_drafts = True
    needs_draft_probs = False
    sample_drafts_batch = GreedyVerifier.sample_drafts_batch
    draft_law = GreedyVerifier.draft_law

    def chain(self, p, q, drafts):
        return _PointMassChain(p, q, drafts)
