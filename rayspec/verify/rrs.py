"""Recursive rejection sampling with replacement: SpecInfer's multi-step speculative sampling.

Miao et al. 2024 (SpecInfer), "MSS"; seed 001 App. B.3; seed 003 Alg. 1.  The k drafts are
i.i.d. from q.  Draft i is accepted with probability min(1, p_i(x_i)/q(x_i)), where p_1 = p
and after each rejection p_{i+1} = norm((p_i - q)^+) — the same q every round.  A duplicate
of a rejected token is rejected with probability one, but the residual update is still
applied for it (skipping it is a known biased variant).  After k rejections the correction
token is drawn from p_{k+1}.  Acceptance: 1 - prod_i (1 - a_i), a_i = sum min(p_i, q).
"""

from __future__ import annotations

import torch

from rayspec.verify.base import IIDDrafts, positive_part_normalized
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows


class RecursiveRejectionChain(RejectionChain):
    """p_i and (for sampling without replacement) q_i, updated after each rejection."""

    def __init__(self, p, q, drafts, without_replacement: bool):
        super().__init__(p, q, drafts)
        self.n_steps = drafts.shape[-1]
        self.target = p
        self.draft = q
        self.without_replacement = without_replacement

    def accept_prob(self, j):
        x = self.drafts[:, j]
        prob = acceptance_ratio(gather_rows(self.target, x), gather_rows(self.draft, x))
        return prob * self.valid[:, j]

    def reject(self, j):
        valid = self.valid[:, j : j + 1]
        every_row = bool(valid.all())

        def update(old, new):  # padded drafts leave their row unchanged
            return new if every_row else torch.where(valid, new, old)

        self.target = update(self.target, positive_part_normalized(self.target - self.draft))
        if self.without_replacement:
            # The next draft came from q with the rejected token removed and renormalised;
            # the residual above used the q the rejected draft was drawn from.
            removed = self.draft.scatter(-1, self.drafts[:, j : j + 1].clamp_min(0), 0)
            self.draft = update(self.draft, positive_part_normalized(removed))

    def residual(self):
        return self.target


class RecursiveRejectionSampling(IIDDrafts, SequentialVerifier):
    name = "rrs"

    def chain(self, p, q, drafts):
        return RecursiveRejectionChain(p, q, drafts, without_replacement=False)
