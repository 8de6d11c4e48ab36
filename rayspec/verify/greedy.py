"""Greedy verification (temperature 0): the target emits argmax p; a draft is accepted iff it
is that token.  Drafts are the top-k tokens of q, deterministically.

This reproduces target-only greedy decoding exactly, whatever the drafter.  It is not a
sampler of p for T > 0 (its output law is the point mass at argmax p), hence `lossless` is
False; at T = 0, where p is itself one-hot, the two coincide.  Ties break towards the lowest
token id everywhere, so a seed-free run is deterministic on every device.
"""

from __future__ import annotations

import torch

from rayspec.verify.base import Verifier
from rayspec.verify.processing import top_k_ids


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """Index of the maximum along the last dimension, the lowest index among ties."""
    return torch.argmax(x, dim=-1)  # torch documents first-occurrence for ties


class GreedyVerifier(Verifier):
    name = "greedy"
    deterministic_drafts = True
    lossless = False
    needs_draft_probs = False
    token_only = True

    def sample_drafts_batch(self, q, k, generator=None):
        self._check_k(k)
        k_eff = min(k, q.shape[-1])
        order = top_k_ids(q, k_eff)  # equal scores in token-id order
        drafts = torch.where(q.gather(-1, order) > 0, order, torch.full_like(order, -1))
        if k_eff < k:
            pad = torch.full((q.shape[0], k - k_eff), -1, dtype=torch.long, device=q.device)
            drafts = torch.cat([drafts, pad], dim=-1)
        return drafts

    def draft_law(self, q, k):
        drafts = self.sample_drafts(q, k, None)
        return [(tuple(int(x) for x in drafts), 1.0)]

    def verify_batch(self, p, q, drafts, generator=None):
        drafts = drafts.to(p.device)
        token = first_argmax(p)
        hit = drafts == token.unsqueeze(-1)
        index = torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), torch.full_like(token, -1))
        return token, index

    def output_law_batch(self, p, q, drafts):
        return torch.zeros_like(p).scatter_(-1, first_argmax(p).unsqueeze(-1), 1)

    def sample_target_batch(self, p, generator=None):
        return first_argmax(p)
