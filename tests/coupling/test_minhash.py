"""The Weighted MinHash coupling (seed 000, Protocol 2) in its Poisson record-lows form: the
same joint law as literal dart throwing (Claim 5 checked against it), and exact pruning.  The
laws it shares with the Gumbel coupling, by Monte Carlo over many seeds against Claim 5 and the
top-k formula, are in `test_coupling_laws.py`."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from rayspec.coupling import bounds, minhash
from rayspec.coupling.minhash import STREAM, first_hits
from rayspec.coupling.noise import KeyedNoise
from tests.cases import random_law
from tests.coupling.cases import F64, PAIRS, many_seeds
from tests.stats import ALPHA, assert_frequencies_match


# ---------------------------------------------------------------- the literal protocol


def literal_darts(p: np.ndarray, q: np.ndarray, k: int, n: int, seed: int, darts: int = 800):
    """Protocol 2 as the paper writes it: darts uniform on [0, V); a dart in [j, j + 1) at
    height h hits j under r when h <= r_j (r_j > 0).  The target keeps its first hit; the
    drafter the first k distinct tokens hit under q.  Returns [(drafts, target)] * n."""
    rng, size, out = np.random.default_rng(seed), len(p), []
    for start in range(0, n, 2000):
        m = min(2000, n - start)
        u = rng.random((m, darts)) * size
        bucket = np.floor(u).astype(int)
        height = u - bucket
        hit_p = (height <= p[bucket]) & (p[bucket] > 0)
        hit_q = (height <= q[bucket]) & (q[bucket] > 0)
        assert hit_p.any(1).all(), "too few darts for the target"
        target = bucket[np.arange(m), hit_p.argmax(1)]
        first = np.full((m, size), np.inf)
        for j in range(size):
            mine = hit_q & (bucket == j)
            first[:, j] = np.where(mine.any(1), mine.argmax(1), np.inf)
        order = np.argsort(first, 1, kind="stable")[:, :k]
        wanted = min(k, int((q > 0).sum()))
        assert np.isfinite(np.take_along_axis(first, order, 1)[:, :wanted]).all(), "too few darts for the drafter"
        out += [(tuple(d[:wanted].tolist()), int(t)) for d, t in zip(order, target)]
    return out


def assert_same_law(a: list, b: list, what: str):
    """Two-sample chi-square on the outcomes of a and b (rare outcomes pooled)."""
    ca, cb = Counter(a), Counter(b)
    cells, pool = [], [0, 0]
    for outcome in set(ca) | set(cb):
        pair = [ca.get(outcome, 0), cb.get(outcome, 0)]
        if sum(pair) < 20:
            pool = [pool[0] + pair[0], pool[1] + pair[1]]
        else:
            cells.append(pair)
    if sum(pool):
        cells.append(pool)
    _, pvalue, _, _ = stats.chi2_contingency(np.array(cells).T)
    assert pvalue > ALPHA, f"{what}: two-sample chi-square p-value {pvalue:.2e} over {len(cells)} cells"


@pytest.mark.parametrize("case", [1, 2])
def test_same_joint_law_as_literal_darts(case):
    """(drafts of k = 2, target token): the record-lows sampler vs literal darts."""
    p, q = PAIRS[case]
    n, k = 20_000, 2
    noise = many_seeds(n, position=4, offset=100 * case)
    drafts = first_hits(q.expand(n, -1), k, noise)
    target = first_hits(p.expand(n, -1), 1, noise)[:, 0]
    ours = [(tuple(d.tolist()), int(t)) for d, t in zip(drafts, target)]
    assert_same_law(ours, literal_darts(p.numpy(), q.numpy(), k, n, seed=case), what="minhash vs literal darts")


def test_literal_darts_reference_agrees_with_claim_5():
    """The reference itself is right: its collisions follow Claim 5 token by token."""
    p, q = PAIRS[2]
    samples = literal_darts(p.numpy(), q.numpy(), 1, 20_000, seed=9)
    per_token = bounds.minhash_collision_per_token(p, q)
    law = {j: float(x) for j, x in enumerate(per_token)}
    law[-1] = 1 - float(per_token.sum())
    assert_frequencies_match([t if d[0] == t else -1 for d, t in samples], law, what="literal darts collisions")


# ----------------------------------------------------------- exactness of the pruning


def unpruned(r: torch.Tensor, k: int, noise: KeyedNoise) -> list[list[int]]:
    """Every positive token draws records until resolved (no pruning), from the same noise
    cells, with the time kept linear: the k earliest first hits of each row."""
    x = (r / r.sum(-1, keepdim=True)).double().numpy()
    batch, size = x.shape
    rows, cols = np.divmod(np.arange(batch * size), size)
    time, height = np.zeros(batch * size), np.ones(batch * size)
    hit_time, open_ = np.full(batch * size, np.inf), x.ravel() > 0
    substream = 0
    while open_.any():
        u_time = noise.uniform_at(batch, rows, 2 * cols, STREAM, substream)
        u_height = noise.uniform_at(batch, rows, 2 * cols + 1, STREAM, substream)
        time = np.where(open_, time - np.log(u_time) / height, time)
        height = np.where(open_, height * u_height, height)
        resolved = open_ & (height <= x.ravel())
        hit_time[resolved] = time[resolved]
        open_ &= ~resolved
        substream += 1
    hit_time = hit_time.reshape(batch, size)
    order = np.lexsort((np.broadcast_to(np.arange(size), (batch, size)), hit_time), axis=-1)
    return [[int(j) for j in row[:k] if np.isfinite(hit_time[b, j])] for b, row in enumerate(order)]


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_pruned_sampler_equals_the_unpruned_one(k):
    rng = np.random.default_rng(k)
    r = torch.stack([random_law(rng, 7) for _ in range(300)])
    r[0] = torch.tensor([1 - 2e-9, 1e-9, 1e-9, 0, 0, 0, 0], dtype=F64)  # deep records
    noise = many_seeds(300, position=11, offset=50 * k)
    ours = first_hits(r, k, noise)
    expected = unpruned(r, k, noise)
    assert [[j for j in row if j >= 0] for row in ours.tolist()] == expected


def test_k_prefixes_and_access_paths_agree(monkeypatch):
    """Drafting k tokens extends drafting fewer; reading records as whole rows or as
    scattered cells gives the same answer (the pruning and the I/O path are invisible)."""
    rng = np.random.default_rng(3)
    r = torch.stack([random_law(rng, 300) for _ in range(6)])
    for noise in (KeyedNoise(5, 40), KeyedNoise(np.arange(6), np.arange(6) * 2)):
        full = first_hits(r, 8, noise)
        for k in (1, 3):
            assert torch.equal(first_hits(r, k, noise), full[:, :k])
        for dense in (1, 10**9):
            monkeypatch.setattr(minhash, "_DENSE", dense)
            assert torch.equal(first_hits(r, 8, noise), full)
        monkeypatch.undo()


def test_tiny_masses_float32_and_normalisation():
    tiny = torch.tensor([[1 - 3e-30, 1e-30, 2e-30, 0.0], [0.5, 1e-300, 0.5, 0.0]], dtype=F64)
    drafts = first_hits(tiny, 4, KeyedNoise(1, 2))
    assert drafts[0, :3].sort().values.tolist() == [0, 1, 2] and drafts[0, 3] == -1
    assert sorted(drafts[1, :3].tolist()) == [0, 1, 2] and drafts[1, 2] == 1  # 1e-300 comes last
    r = torch.tensor([[0.2, 0.3, 0.5, 0.0]], dtype=torch.float32)
    noise = many_seeds(1, 9)
    assert torch.equal(first_hits(r, 3, noise), first_hits(r.double(), 3, noise))
    assert torch.equal(first_hits(7 * r.double(), 3, noise), first_hits(r.double(), 3, noise))


def test_rows_with_nan_or_infinite_weights_are_refused_not_read_as_empty():
    """Normalised, such a row has no positive entry: it would come back as -1s, the answer
    for a row of zero mass (kept, as the padding of an absent law)."""
    noise = KeyedNoise(1, 2)
    for bad in (float("nan"), float("inf")):
        r = torch.tensor([[0.2, 0.8, 0.0], [0.5, bad, 0.5]], dtype=F64)
        with pytest.raises(ValueError, match=r"first_hits: rows \[1\] of r hold NaN or infinite weights"):
            first_hits(r, 2, noise)
    assert first_hits(torch.zeros(1, 3, dtype=F64), 2, noise).tolist() == [[-1, -1]]
