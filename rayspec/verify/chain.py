"""Sequential accept/reject: the skeleton shared by the rejection-sampling family.

Single-draft speculative sampling, SpecInfer's recursive rejection sampling (with and without
replacement), SpecTr's k-sequential selection, SpecHub and mentored decoding all have the
same shape: test candidates one after another, each accepted with a probability that
depends on what was rejected before, and draw a correction token from a residual law when
all are rejected.  A scheme describes that shape once, as a `RejectionChain`; this module
turns it into both `verify_batch` (sampling, stopping as soon as every row has decided) and
`output_law` (the exact law, summing every branch), so the two can never disagree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from rayspec.verify.base import Verifier, draw_uniform, sample_categorical


def acceptance_ratio(target_mass: torch.Tensor, draft_mass: torch.Tensor) -> torch.Tensor:
    """min(1, target/draft), with 0/0 = 0 and x/0 = 1 for x > 0 (no NaN, no inf)."""
    safe = torch.where(draft_mass > 0, draft_mass, torch.ones_like(draft_mass))
    ratio = torch.where(draft_mass > 0, target_mass / safe, (target_mass > 0).to(target_mass.dtype))
    return ratio.clamp(0, 1)


def gather_rows(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """rows[b, index[b]] for every b; negative (padding) indices read entry 0."""
    return rows.gather(-1, index.clamp_min(0).unsqueeze(-1)).squeeze(-1)


class RejectionChain(ABC):
    """The state of one accept/reject scheme over a batch of B nodes.

    Step j tests the draft in column `column(j)` with probability `accept_prob(j)`, conditional
    on every earlier step having rejected; `reject(j)` moves the state past a rejection at
    step j; once all `n_steps` reject, the emitted token is drawn from `residual()`.
    Padded drafts (-1) must get probability 0 and leave the state unchanged on reject.
    """

    n_steps: int

    def __init__(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor):
        self.p, self.q, self.drafts = p, q, drafts
        self.valid = drafts >= 0  # [B, k]
        self.batch, self.device = p.shape[0], p.device

    def column(self, j: int) -> torch.Tensor:
        """Draft column tested at step j, per row [B] (default: column j)."""
        return torch.full((self.batch,), j, dtype=torch.long, device=self.device)

    @abstractmethod
    def accept_prob(self, j: int) -> torch.Tensor:
        """[B] conditional acceptance probability of step j."""

    @abstractmethod
    def reject(self, j: int) -> None:
        """Update the state after step j rejected."""

    @abstractmethod
    def residual(self) -> torch.Tensor:
        """[B, V] non-negative weights (unnormalised) of the correction token."""


class SequentialVerifier(Verifier):
    """A verifier defined by a `RejectionChain`; sampling and exact law come for free."""

    @abstractmethod
    def chain(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> RejectionChain:
        """The scheme's state for p, q [B, V] and drafts [B, k]."""

    def verify_batch(self, p, q, drafts, generator):
        drafts = drafts.to(p.device)
        self._check_k(drafts.shape[-1])
        chain = self.chain(p, q, drafts)
        batch = p.shape[0]
        # All uniforms up front: how much randomness a node consumes never depends on
        # what was accepted, which keeps seeded runs aligned across code paths.
        u = draw_uniform(generator, (batch, chain.n_steps + 1), p.device)
        token = torch.full((batch,), -1, dtype=torch.long, device=p.device)
        index = torch.full((batch,), -1, dtype=torch.long, device=p.device)
        undecided = torch.ones(batch, dtype=torch.bool, device=p.device)
        for j in range(chain.n_steps):
            column = chain.column(j)
            accept = undecided & (u[:, j] < chain.accept_prob(j))
            if bool(accept.any()):
                token = torch.where(accept, gather_rows(drafts, column), token)
                index = torch.where(accept, column, index)
                undecided &= ~accept
                if not bool(undecided.any()):
                    return token, index
            chain.reject(j)
        # index_select, not advanced indexing: the latter is an OpenMP-parallel kernel that
        # stalls for milliseconds on a busy CPU.
        rows = torch.nonzero(undecided).flatten()
        correction = sample_categorical(
            chain.residual().index_select(0, rows), u[:, -1].index_select(0, rows), p.index_select(0, rows)
        )
        return token.index_copy(0, rows, correction), index

    def output_law_batch(self, p, q, drafts):
        drafts = drafts.to(p.device)
        self._check_k(drafts.shape[-1])
        chain = self.chain(p, q, drafts)
        law = torch.zeros_like(p)
        still_open = torch.ones(p.shape[0], dtype=p.dtype, device=p.device)
        for j in range(chain.n_steps):
            token = gather_rows(drafts, chain.column(j))
            prob = chain.accept_prob(j) * (token >= 0)
            law.scatter_add_(-1, token.clamp_min(0).unsqueeze(-1), (still_open * prob).unsqueeze(-1))
            still_open = still_open * (1 - prob)
            chain.reject(j)
        residual = chain.residual()
        total = residual.sum(-1, keepdim=True)
        residual = torch.where(total > 0, residual / torch.where(total > 0, total, 1), p)
        return law + still_open.unsqueeze(-1) * residual
