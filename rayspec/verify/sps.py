"""Single-draft speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

Accept the draft x ~ q with probability min(1, p(x)/q(x)); otherwise emit a token from the
residual norm((p - q)^+).  The emitted token follows p exactly, and the acceptance
probability sum_x min(p(x), q(x)) = 1 - TV(p, q) is the best any single-draft scheme can reach
(SpecTr, seed 001, eq. 1 — the maximal coupling).
"""

from __future__ import annotations

import torch

from rayspec.verify.base import IIDDrafts
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows


class _SingleDraftChain(RejectionChain):
    n_steps = 1

    def accept_prob(self, j):
        x = self.drafts[:, 0]
        prob = acceptance_ratio(gather_rows(self.p, x), gather_rows(self.q, x))
        return prob * self.valid[:, 0]

    def reject(self, j):
        pass

    def residual(self):
        # Rows without a draft (padding) emit straight from p.
        return torch.where(self.valid[:, :1], (self.p - self.q).clamp_min(0), self.p)


class SpeculativeSampling(IIDDrafts, SequentialVerifier):
    name = "sps"
    max_drafts = 1

    def chain(self, p, q, drafts):
        return _SingleDraftChain(p, q, drafts)
