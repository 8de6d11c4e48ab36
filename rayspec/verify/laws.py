"""Exact laws of verification by enumeration (small vocabularies): the test oracles.

    mixture_output_law(v, p, q, k) = sum over draft tuples d of P(d) * v.output_law(p, q, d)
which must equal p for every lossless verifier, and
    exact_acceptance(v, p, q, k)   = P(emitted token is one of the drafts)
the "membership" acceptance the optimal-transport bounds of seeds 001-003 speak of (it is
also what lets a tree walk continue).
"""

from __future__ import annotations

import torch


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return 0.5 * (p - q).abs().sum(-1)


def draft_law_tensors(verifier, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft law as (drafts [T, k] padded with -1, probabilities [T])."""
    law = verifier.draft_law(q, k)
    width = max(len(d) for d, _ in law)
    drafts = torch.full((len(law), width), -1, dtype=torch.long)
    for row, (tup, _) in enumerate(law):
        drafts[row, : len(tup)] = torch.tensor(tup, dtype=torch.long)
    probs = torch.tensor([prob for _, prob in law], dtype=q.dtype)
    return drafts.to(q.device), probs.to(q.device)


def conditional_laws(verifier, p, q, k):
    """(drafts [T, k], P(drafts) [T], law of the emitted token given each draft tuple [T, V])."""
    drafts, probs = draft_law_tensors(verifier, q, k)
    batch = drafts.shape[0]
    laws = verifier.output_law_batch(p.expand(batch, -1), q.expand(batch, -1), drafts)
    return drafts, probs, laws


def mixture_output_law(verifier, p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Law of the emitted token, drafts included: sum_d P(d) * output_law(p, q, d)."""
    _, probs, laws = conditional_laws(verifier, p, q, k)
    return probs @ laws


def exact_acceptance(verifier, p: torch.Tensor, q: torch.Tensor, k: int) -> float:
    """P(the emitted token is one of the drafted tokens), drafts included."""
    drafts, probs, laws = conditional_laws(verifier, p, q, k)
    # Added, not written: a -1 pad (clamped to column 0) must not erase a real draft of token 0.
    drafted = torch.zeros_like(laws).scatter_add_(-1, drafts.clamp_min(0), (drafts >= 0).to(laws.dtype)) > 0
    return float(probs @ (laws * drafted).sum(-1))
