"""Gumbel coupling (seed 000, Protocol 3): argmax of log-probabilities plus shared Gumbel noise.

With u_i uniform in (0, 1) shared by both parties and G_i = -log(-log u_i), a party holding
the law r outputs argmax_i (log r_i + G_i): an exact sample of r (the Gumbel-max trick),
computed from r and the noise alone.  Two parties with laws p and q collide with the
probability of Theorem 3 (`rayspec.coupling.bounds.gumbel_collision`).

The top k of log q + G, in decreasing order, are k draws from q without replacement
(Plackett–Luce; Gumbel-top-k): the drafter's k drafts of a tree node.  Its first draft is
exactly the drafter's Protocol 3 sample, so a node's acceptance is the Theorem 3 collision
probability for k = 1 and `gumbel_top_k_hit` for k drafts.

Conventions: r_i = 0 gives a score of -inf and is never chosen, so a row of zero mass has no
sample (-1, as `rayspec.coupling.minhash.first_hits` and `sample_from_weights` give); a row
holding NaN, an infinite or a negative weight makes no law and is refused (ValueError) — its
log would be NaN or +inf, which argmax takes first; ties (probability zero in exact
arithmetic, possible with equal float probabilities and equal noise) go to the lowest token
id, for the target and the drafter alike.  Scores are float64 whatever the dtype of r, so the
result depends on r's values only.
"""

from __future__ import annotations

import torch

from rayspec.coupling.noise import shared_uniform

STREAM = 0  # KeyedNoise stream of the Gumbel noise


def gumbel_noise(randomness, batch: int, size: int, device=None) -> torch.Tensor:
    """[batch, size] float64 standard Gumbel noise G = -log(-log u) from shared uniforms."""
    u = shared_uniform(randomness, batch, size, STREAM, device)
    return -torch.log(-torch.log(u))


def _scores(r: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    r = r.to(torch.float64)
    lawful = ((r >= 0) & (r < torch.inf)).all(-1)  # NaN fails both
    if not bool(lawful.all()):
        rows = torch.nonzero(~lawful).flatten().tolist()
        raise ValueError(f"gumbel: rows {rows[:8]} of r hold NaN, infinite or negative weights, which make no law")
    return torch.log(r) + noise  # log 0 = -inf: never chosen


def gumbel_argmax(r: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The Protocol 3 sample of each row of r [B, V] under the noise [B, V] -> [B], -1 for a
    row of zero mass (argmax alone would name token 0, of probability zero)."""
    scores = _scores(r, noise)
    best = torch.argmax(scores, dim=-1)  # first occurrence among ties
    return torch.where(scores.amax(-1) > -torch.inf, best, -1)


def gumbel_top_k(r: torch.Tensor, noise: torch.Tensor, k: int) -> torch.Tensor:
    """The k best tokens of log r + G per row, best first -> [B, k], -1 once r's support
    is exhausted.  Column 0 is `gumbel_argmax`."""
    scores = _scores(r, noise)
    kth = torch.topk(scores, min(k, r.shape[-1]), dim=-1).values[:, -1:]
    # topk alone may break a tie at the k-th place either way; taking every token that
    # reaches the k-th score, in token order, then sorting stably keeps the lowest ids.
    row, token = torch.nonzero((scores >= kth) & (scores > -torch.inf), as_tuple=True)
    order = torch.sort(scores[row, token], descending=True, stable=True).indices
    order = order[torch.sort(row[order], stable=True).indices]
    row, token = row[order], token[order]
    rank = torch.arange(row.numel(), device=r.device) - torch.searchsorted(row, row)
    out = torch.full((r.shape[0], k), -1, dtype=torch.long, device=r.device)
    keep = rank < k
    out[row[keep], rank[keep]] = token[keep]
    return out
