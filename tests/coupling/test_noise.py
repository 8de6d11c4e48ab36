"""`KeyedNoise`: the same numbers for a (seed, position) in every call, process and access path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rayspec.coupling.noise import KeyedNoise, keyed, shared_uniform

ROOT = Path(__file__).resolve().parents[2]


def test_rows_follow_the_documented_philox_key_layout():
    """Key (seed, position << 8 | stream), counter (0, 0, substream, 0): numpy's Philox."""
    for seed, position, stream, substream in [(0, 0, 0, 0), (12345, 77, 1, 0), (-3, 2**40, 255, 9), (2**62, 5, 1, 2**33)]:
        key = np.array([seed & (2**64 - 1), (position << 8) | stream], dtype=np.uint64)
        philox = np.random.Philox(key=key, counter=np.array([0, 0, substream, 0], dtype=np.uint64))
        expected = np.maximum(np.random.Generator(philox).random(600), 2.0**-54)
        got = KeyedNoise(seed, position).uniform(1, 600, stream, substream=substream)[0].numpy()
        assert np.array_equal(got, expected)


def test_scattered_cells_and_blocks_equal_whole_rows():
    noise = KeyedNoise(np.array([3, -5, 2**62, 3]), np.array([0, 7, 123456, 0]))
    rng = np.random.default_rng(0)
    for size, stream, substream in [(1001, 4, 0), (300, 1, 7), (10, 0, 2**40)]:
        rows = noise.uniform(4, size, stream, substream=substream).numpy()
        r, c = rng.integers(0, 4, 500), rng.integers(0, size, 500)
        assert np.array_equal(noise.uniform_at(4, r, c, stream, substream), rows[r, c])
        blocks = noise.uniform_blocks(4, r, c // 4, stream, substream)
        for lane in range(4):
            inside = 4 * (c // 4) + lane < size
            assert np.array_equal(blocks[inside, lane], rows[r[inside], 4 * (c[inside] // 4) + lane])


def test_short_rows_under_many_keys_equal_rows_one_key_at_a_time():
    seeds, positions = np.arange(50) * 7919 - 100, np.arange(50) % 13
    together = KeyedNoise(seeds, positions).uniform(50, 37, stream=1, substream=3)
    for b in range(50):
        alone = KeyedNoise(int(seeds[b]), int(positions[b])).uniform(1, 37, stream=1, substream=3)[0]
        assert torch.equal(together[b], alone)
        assert torch.equal(together[b], KeyedNoise(int(seeds[b]), int(positions[b])).uniform(1, 1000, 1, substream=3)[0, :37])


def test_keys_separate_streams_positions_and_substreams():
    base = KeyedNoise(1, 5).uniform(1, 64)[0]
    for other in (KeyedNoise(2, 5).uniform(1, 64)[0], KeyedNoise(1, 6).uniform(1, 64)[0],
                  KeyedNoise(1, 5).uniform(1, 64, stream=1)[0], KeyedNoise(1, 5).uniform(1, 64, substream=1)[0]):
        assert not torch.equal(base, other)
    assert torch.equal(KeyedNoise(1, 3).shifted(2).uniform(1, 64)[0], base)
    u = KeyedNoise(np.arange(100), 0).uniform(100, 500)
    assert (u > 0).all() and (u < 1).all()


_CHILD = """
import json, torch
from rayspec.coupling.noise import KeyedNoise
from rayspec.verify import get_verifier
p = torch.softmax(torch.arange(300, dtype=torch.float64).sin() * 3, 0)
noise = KeyedNoise(20240817, 31)
out = {"u": noise.uniform(1, 8, stream=1, substream=2)[0].tolist()}
for name in ("gumbel", "minhash"):
    v = get_verifier(name)
    out[name] = [v.sample_target(p, noise), v.sample_drafts(p, 5, noise).tolist()]
print(json.dumps(out))
"""


def test_same_numbers_and_tokens_in_a_separate_process():
    child = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, check=True)
    theirs = json.loads(child.stdout)
    exec_globals: dict = {}
    exec(_CHILD.replace("print(json.dumps(out))", ""), exec_globals)  # the same code, in this process
    ours = exec_globals["out"]
    assert theirs == json.loads(json.dumps(ours))


def test_generators_couple_by_state():
    a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    assert torch.equal(shared_uniform(a, 3, 10), shared_uniform(b, 3, 10))
    first, second = keyed(a, 3), keyed(a, 3)
    assert np.array_equal(first.seed, keyed(b, 3).seed)
    assert not np.array_equal(first.seed, second.seed)
    assert keyed(first, 3) is first
    with pytest.raises(TypeError, match="KeyedNoise or a torch.Generator"):
        keyed(7, 3)


def test_bad_keys_are_refused():
    with pytest.raises(ValueError, match="positions"):
        KeyedNoise(1, -1).uniform(1, 4)
    with pytest.raises(ValueError, match="stream"):
        KeyedNoise(1, 0).uniform(1, 4, stream=256)
    with pytest.raises(ValueError, match="batch"):
        KeyedNoise(np.arange(3), 0).uniform(2, 4)
