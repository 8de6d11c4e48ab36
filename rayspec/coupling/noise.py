"""Randomness shared by drafter and target without communication, keyed by position.

Drafter-invariant decoding (seed 000, §5) needs both parties to draw the *same* noise for
output position t, whatever happened before: the noise must be a function of (seed, t)
only, never of how much randomness earlier rounds consumed.  `KeyedNoise` gives exactly
that with a counter-based generator (Philox 4x64, numpy's implementation), keyed by
(seed, absolute position, stream): the same numbers on every machine and in every process.

A key has 2^64 substreams (the third word of Philox's counter), each an endless row of
uniforms.  Rows can be read whole (`uniform`, numpy's C generator: about 1 ms per 128k
numbers on one core) or at scattered cells (`uniform_at`, `uniform_blocks`: a vectorised
Philox in numpy giving the very same numbers, about a microsecond per block of four), so
a sampler that needs more noise for a few tokens only — the Weighted MinHash records of
`rayspec.coupling.minhash` — reads just those cells.

Uniforms are 53-bit doubles strictly inside (0, 1), so log(u) and log(-log u) are finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_MASK64 = (1 << 64) - 1
_STREAM_BITS = 8
_SMALL_ROW = 256  # rows this short, under many keys, are computed for all keys at once


def _as_vector(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.atleast_1d(np.asarray(x, dtype=np.int64))


@dataclass(frozen=True)
class KeyedNoise:
    """Shared noise for rows keyed by (seed, position); both may be ints or vectors [B].

    A scalar key broadcasts: every row then sees the same numbers (e.g. all tree nodes at
    one depth of one request share their position's noise).
    """

    seed: object
    position: object = 0

    def shifted(self, offset: int) -> "KeyedNoise":
        return KeyedNoise(self.seed, _as_vector(self.position) + int(offset))

    def select(self, rows: torch.Tensor) -> "KeyedNoise":
        """The keys of a subset of rows (scalar keys stay scalar)."""
        rows = rows.cpu().numpy()
        pick = lambda x: x if len(_as_vector(x)) == 1 else _as_vector(x)[rows]  # noqa: E731
        return KeyedNoise(pick(self.seed), pick(self.position))

    def rows(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        seed, position = _as_vector(self.seed), _as_vector(self.position)
        if len(seed) not in (1, batch) or len(position) not in (1, batch):
            raise ValueError(f"keyed noise for {len(seed)} seeds and {len(position)} positions, batch {batch}")
        if (position < 0).any():
            raise ValueError(f"noise positions are absolute token positions (>= 0), got {position.min()}")
        return np.broadcast_to(seed, (batch,)), np.broadcast_to(position, (batch,))

    def uniform(self, batch: int, size: int, stream: int = 0, device=None, substream: int = 0) -> torch.Tensor:
        """[batch, size] float64 uniforms in (0, 1): row b is the start of the `substream`
        of the `stream` of key b."""
        _check_stream(stream)
        seeds, positions = self.rows(batch)
        many_keys = len(_as_vector(self.seed)) > 1 or len(_as_vector(self.position)) > 1
        if size <= _SMALL_ROW and many_keys:
            blocks = -(-size // 4)
            rows, block = np.divmod(np.arange(batch * blocks), blocks)
            out = self.uniform_blocks(batch, rows, block, stream, substream).reshape(batch, 4 * blocks)[:, :size]
        else:
            out = np.empty((batch, size), dtype=np.float64)
            first_row: dict[tuple[int, int], int] = {}
            for b, key in enumerate(zip(seeds.tolist(), positions.tolist())):
                if key in first_row:
                    out[b] = out[first_row[key]]
                else:
                    first_row[key] = b
                    _philox_row(*key, stream, substream, out[b])
        u = torch.from_numpy(out)
        return u if device is None else u.to(device)

    def uniform_at(self, batch: int, rows, columns, stream: int = 0, substream: int = 0) -> np.ndarray:
        """The cells (rows[i], columns[i]) of `uniform(batch, ..., stream, substream=substream)`,
        without generating the rows: float64 numpy array shaped like `columns`."""
        columns = np.asarray(columns, dtype=np.int64)
        blocks = self.uniform_blocks(batch, rows, columns // 4, stream, substream)
        return np.take_along_axis(blocks, (columns % 4)[..., None], -1)[..., 0]

    def uniform_blocks(self, batch: int, rows, blocks, stream: int = 0, substream: int = 0) -> np.ndarray:
        """The cells 4 b .. 4 b + 3 of row r for each (r, b) in zip(rows, blocks) — one Philox
        block each: float64 numpy array [*blocks.shape, 4]."""
        _check_stream(stream)
        seeds, positions = self.rows(batch)
        rows, blocks = np.asarray(rows, dtype=np.int64), np.asarray(blocks, dtype=np.int64)
        k0 = seeds[rows].astype(np.uint64)  # two's complement: the same as `seed & _MASK64`
        k1 = (positions[rows].astype(np.uint64) << np.uint64(_STREAM_BITS)) | np.uint64(stream)
        words = _philox(k0, k1, blocks.astype(np.uint64) + np.uint64(1), np.uint64(substream))
        return _to_open_unit(np.stack(words, axis=-1))


def _check_stream(stream: int) -> None:
    if not 0 <= stream < (1 << _STREAM_BITS):
        raise ValueError(f"stream must be in [0, {1 << _STREAM_BITS}), got {stream}")


def _to_open_unit(bits: np.ndarray) -> np.ndarray:
    # numpy's `random()`: the top 53 bits; then into (0, 1) — 0 has probability 2^-53 anyway.
    return np.maximum((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53, 2.0**-54)


def _philox_row(seed: int, position: int, stream: int, substream: int, out: np.ndarray) -> None:
    key = np.array([seed & _MASK64, ((position << _STREAM_BITS) | stream) & _MASK64], dtype=np.uint64)
    counter = np.array([0, 0, substream, 0], dtype=np.uint64)
    np.random.Generator(np.random.Philox(key=key, counter=counter)).random(out=out)
    np.maximum(out, 2.0**-54, out=out)


# Philox 4x64-10 (Salmon et al. 2011), exactly as numpy runs it: numpy increments the counter
# before each block, so cell i of a row is word i % 4 of the block with counter i // 4 + 1.
_M = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
_M_HALVES = tuple((np.uint64(m & 0xFFFFFFFF), np.uint64(m >> 32), np.uint64(m)) for m in _M)
_W = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBB67AE8584CAA73B))
_LO32, _32 = np.uint64(0xFFFFFFFF), np.uint64(32)


def _mulhilo(m: tuple, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """High and low words of the 128-bit product of the constant m and b, from 32-bit halves."""
    m_lo, m_hi, m_full = m
    b_lo, b_hi = b & _LO32, b >> _32
    lh, hl = m_lo * b_hi, m_hi * b_lo
    middle = ((m_lo * b_lo) >> _32) + (lh & _LO32) + (hl & _LO32)
    return m_hi * b_hi + (lh >> _32) + (hl >> _32) + (middle >> _32), m_full * b


def _philox(k0: np.ndarray, k1: np.ndarray, counter: np.ndarray, substream: np.uint64) -> tuple:
    """The four 64-bit words of the blocks with counters (counter, 0, substream, 0)."""
    zero = np.zeros_like(counter)
    c0, c1, c2, c3 = counter, zero, zero + substream, zero
    for r in range(10):
        if r:
            k0, k1 = k0 + _W[0], k1 + _W[1]
        hi0, lo0 = _mulhilo(_M_HALVES[0], c0)
        hi1, lo1 = _mulhilo(_M_HALVES[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def keyed(randomness, batch: int) -> KeyedNoise:
    """`randomness` as a KeyedNoise: itself, or fresh keys drawn from a torch.Generator.

    With a generator, each row gets a key drawn from it (position 0): two generators in the
    same state give the same noise, one generator used twice gives independent noise —
    the semantics of `shared_uniform`, for samplers that need noise beyond one row."""
    if isinstance(randomness, KeyedNoise):
        return randomness
    if isinstance(randomness, torch.Generator):
        seeds = torch.randint(0, 2**63 - 1, (batch,), generator=randomness, device=randomness.device)
        return KeyedNoise(seeds.cpu().numpy(), 0)
    raise TypeError(f"expected a KeyedNoise or a torch.Generator, got {type(randomness).__name__}")


def shared_uniform(randomness, batch: int, size: int, stream: int = 0, device=None) -> torch.Tensor:
    """Uniforms in (0, 1) from either a `KeyedNoise` or a torch.Generator.

    With a generator, the numbers are the generator's next draws: two generators in the same
    state give the same noise (that is how a test couples two calls without keys), and one
    generator used twice gives independent noise."""
    if isinstance(randomness, KeyedNoise):
        return randomness.uniform(batch, size, stream, device)
    if isinstance(randomness, torch.Generator):
        u = torch.rand((batch, size), generator=randomness, dtype=torch.float64, device=randomness.device)
        # torch.rand is in [0, 1): move 0 inside the open interval.
        u = u.clamp_min(2.0**-54)
        return u if device is None else u.to(device)
    raise TypeError(f"expected a KeyedNoise or a torch.Generator, got {type(randomness).__name__}")
