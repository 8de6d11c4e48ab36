"""Weighted MinHash coupling (seed 000, Protocol 2: dart throwing), exact and of bounded cost.

Protocol 2.  Darts u_1, u_2, ... fall uniformly on [0, V]; a dart in [j, j + 1) at height
h = u - j *hits* token j under a law r when h <= r_j.  A party returns the token of its first
hit.  The drafter's further drafts are the next distinct tokens hit under q: the tokens
ordered by the time of their first hit.  Two parties collide with the probability of
Claim 5 (`rayspec.coupling.bounds.minhash_collision`).  Literal darts need about V / r_j
throws before token j is hit, which is hopeless for the later drafts of a peaked q.

Equal-in-law form used here (seed-000 notes, A.2).  Let the darts arrive as a Poisson
process of rate V: then token j receives its own rate-1 Poisson process of darts with
i.i.d. uniform heights, independent across tokens, and the order of the darts is the order
of their times.  Every quantity above is a function of the first-hit times
T_j(x) = min{time of a dart of token j with height <= x}: the party holding r returns the
tokens sorted by T_j(r_j), so the joint law of everything both parties output is that of
the literal protocol.  T_j(x) only depends on the *record lows* of token j: the darts lower
than every earlier dart of j, at times t_1 < t_2 < ... and heights h_1 > h_2 > ...:

    t_1 ~ Exp(1), h_1 ~ U(0, 1);  t_m = t_{m-1} + Exp(1) / h_{m-1},  h_m = h_{m-1} * U(0, 1)
    T_j(x) = t_m for the first m with h_m <= x,

about 1 + ln(1 / x) records.  Record m of token j is drawn from the keyed noise cells
(2j, 2j + 1) of substream m - 1 of `STREAM`: a function of (seed, position, j, m) only, so
each party computes its T_j(r_j) from its own law and never from the other's.  Times are
kept as log t, heights as -log h: no overflow for any positive float r_j.

Pruning.  The records of j only ever push T_j upwards, so once k tokens have resolved, a
token whose current time already exceeds the k-th smallest resolved T_j can never enter
the top k and stops drawing records.  The answer is the same as without pruning (the tests
compare the tokens with an unpruned walk).  Cost, in record draws (two uniforms
each): about 2 V for one sample and 4 V for k = 8 drafts on typical laws (uniform,
Gaussian or Zipf logits), and about V ln(k / eps) when q's mass outside its top tokens is
eps — logarithmic where literal darts need V / eps throws.  The first records are read as
whole rows of noise; once few tokens remain, their cells alone (`KeyedNoise.uniform_blocks`).
Ties in time (probability zero) go to the lowest token id.  The computation runs in numpy
on the CPU (rows on an accelerator are copied over).
"""

from __future__ import annotations

import numpy as np
import torch

from rayspec.coupling.noise import KeyedNoise

STREAM = 1  # KeyedNoise stream of the MinHash records (stream 0 is the Gumbel noise)
_DENSE = 32  # read whole rows while more than 1/_DENSE of a row's tokens are still drawing


def first_hits(r: torch.Tensor, k: int, noise: KeyedNoise) -> torch.Tensor:
    """The first k distinct tokens hit under each row of r [B, V], in order of first hit.

    Returns [B, k] on r's device, -1 padded where r has fewer than k positive entries.
    Column 0 is the row's Protocol 2 sample.  r is normalised per row first.  A row with a
    NaN or infinite entry is refused (ValueError): normalised, it would have no positive
    entry and pass for an empty row, all -1."""
    x = r.detach().to("cpu", torch.float64).numpy()
    finite = np.isfinite(x).all(-1)
    if not finite.all():
        rows = np.flatnonzero(~finite).tolist()
        raise ValueError(f"first_hits: rows {rows[:8]} of r hold NaN or infinite weights, which make no law")
    total = x.sum(-1, keepdims=True)
    x = np.divide(x, total, out=np.zeros_like(x), where=total > 0)
    batch, size = x.shape

    # The tokens still drawing records, as flat indices into [B, V], and their state.
    cell = np.flatnonzero(x > 0)
    threshold = -np.log(np.take(x, cell))  # resolved once -log h >= -log x_j
    u = noise.uniform(batch, 2 * size, STREAM).numpy().ravel()
    log_t = np.log(-np.log(np.take(u, 2 * cell)))
    neg_log_h = -np.log(np.take(u, 2 * cell + 1))

    found_cell, found_log_t = [], []
    best = np.full((batch, k), np.inf)  # the k smallest resolved log-times of each row, sorted
    substream = 1  # record m of a token lives in substream m - 1; record 1 was read above
    while cell.size:
        hit = np.flatnonzero(neg_log_h >= threshold)
        if hit.size:
            found_cell.append(np.take(cell, hit))
            found_log_t.append(np.take(log_t, hit))
            _merge(best, found_cell[-1] // size, found_log_t[-1])
        # Later records only push T_j up: past the k-th best resolved time, j is out.
        drawing = np.flatnonzero((neg_log_h < threshold) & (log_t <= np.take(best[:, -1], cell // size)))
        cell, log_t, neg_log_h, threshold = (np.take(a, drawing) for a in (cell, log_t, neg_log_h, threshold))
        if cell.size:
            u_time, u_height = _record_noise(noise, batch, size, cell, substream)
            log_t = _logaddexp(log_t, np.log(-np.log(u_time)) + neg_log_h)
            neg_log_h = neg_log_h - np.log(u_height)
            substream += 1

    cell = np.concatenate(found_cell) if found_cell else np.zeros(0, dtype=np.int64)
    log_t = np.concatenate(found_log_t) if found_log_t else np.zeros(0)
    return torch.from_numpy(_first_k(cell // size, cell % size, log_t, k, batch)).to(r.device)


def _logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # np.logaddexp is several times slower than this on large arrays.
    return np.maximum(a, b) + np.log1p(np.exp(-np.abs(a - b)))


def _record_noise(noise: KeyedNoise, batch: int, size: int, cell: np.ndarray, substream: int):
    """The uniforms (time, height) of the next record of the tokens `cell` (flat into
    [B, V]): cells (2j, 2j + 1) of the substream, which share the Philox block j // 2."""
    row, tok = np.divmod(cell, size)
    rows = row[np.r_[True, row[1:] != row[:-1]]]  # row is sorted
    if cell.size * _DENSE > rows.size * size:
        u = noise.select(torch.from_numpy(rows)).uniform(rows.size, 2 * size, STREAM, substream=substream)
        at = 2 * (np.searchsorted(rows, row) * size + tok)
        u = u.numpy().ravel()
        return np.take(u, at), np.take(u, at + 1)
    u = noise.uniform_blocks(batch, row, tok // 2, STREAM, substream).reshape(-1, 4)
    at = 4 * np.arange(cell.size) + 2 * (tok % 2)
    return np.take(u, at), np.take(u, at + 1)


def _merge(best: np.ndarray, row: np.ndarray, log_t: np.ndarray) -> None:
    """Fold newly resolved log-times into each row's k smallest, in place."""
    rows = np.unique(row)
    k = best.shape[1]
    row = np.concatenate([np.repeat(rows, k), row])
    log_t = np.concatenate([best[rows].ravel(), log_t])
    order, rank = _ranked(row, np.zeros_like(row), log_t)
    top = rank < k
    best[row[order][top], rank[top]] = log_t[order][top]


def _ranked(row, tok, log_t):
    """Order by (row, time, token) and each entry's 0-based rank within its row."""
    order = np.lexsort((tok, log_t, row))
    row = row[order]
    start = np.searchsorted(row, row, side="left")
    return order, np.arange(row.size) - start


def _first_k(row, tok, log_t, k: int, batch: int) -> np.ndarray:
    order, rank = _ranked(row, tok, log_t)
    out = np.full((batch, k), -1, dtype=np.int64)
    top = rank < k
    out[row[order][top], rank[top]] = tok[order][top]
    return out
