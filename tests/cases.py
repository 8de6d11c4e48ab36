"""Shared (p, q) fixtures for the verifier tests: random pairs and adversarial ones.

p is the target law and q the draft law (the package's notation).  Everything is float64,
so exact laws can be compared to 1e-9.
"""

from __future__ import annotations

import numpy as np
import torch

F64 = torch.float64


def _t(x) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x, dtype=np.float64))
    return x / x.sum()


def random_law(rng: np.random.Generator, size: int) -> torch.Tensor:
    """A random law on `size` tokens: Dirichlet of random concentration, sometimes with zeros."""
    alpha = rng.choice([0.2, 0.5, 1.0, 3.0])
    x = rng.dirichlet(np.full(size, alpha))
    if size > 2 and rng.random() < 0.3:
        zeros = rng.choice(size, rng.integers(1, size - 1), replace=False)
        x[zeros] = 0
    if x.sum() == 0:
        x[rng.integers(size)] = 1
    return _t(x)


def random_pairs(count: int, seed: int, sizes=range(2, 7)):
    """`count` random (V, p, q), V cycling through `sizes`."""
    rng = np.random.default_rng(seed)
    sizes = list(sizes)
    for i in range(count):
        size = sizes[i % len(sizes)]
        p = random_law(rng, size)
        if rng.random() < 0.3:  # correlated drafter: q near p
            lam = rng.random()
            q = _t(lam * p.numpy() + (1 - lam) * random_law(rng, size).numpy())
        else:
            q = random_law(rng, size)
        yield size, p, q


def adversarial_pairs():
    """(name, p, q) pairs chosen to break fragile implementations."""
    rng = np.random.default_rng(7)
    full = _t(rng.dirichlet(np.ones(5)))
    other = _t(rng.dirichlet(np.ones(5)))
    tiny = 1e-12
    return [
        ("disjoint supports", _t([0.5, 0.5, 0, 0]), _t([0, 0, 0.3, 0.7])),
        ("p equals q", full, full.clone()),
        ("one-hot p", _t([0, 1, 0, 0, 0]), other),
        ("one-hot q", full, _t([0, 0, 1, 0, 0])),
        ("one-hot p and q, same", _t([0, 0, 1, 0]), _t([0, 0, 1, 0])),
        ("one-hot p and q, different", _t([1, 0, 0, 0]), _t([0, 0, 0, 1])),
        ("q zero where p positive", full, _t([0.4, 0, 0.6, 0, 0])),
        ("p zero where q positive", _t([0.4, 0, 0.6, 0, 0]), full),
        ("uniform ties", _t([1, 1, 1, 1]), _t([1, 1, 1, 1])),
        ("tied entries", _t([0.3, 0.3, 0.2, 0.2]), _t([0.25, 0.25, 0.25, 0.25])),
        ("hub ties in q", _t([0.1, 0.2, 0.3, 0.4]), _t([0.4, 0.4, 0.1, 0.1])),
        ("masses of 1e-12", _t([1 - 2 * tiny, tiny, tiny, 0]), _t([tiny, 0.5, 0.5 - tiny, 0])),
        ("1e-12 perturbation", _t([0.25, 0.25, 0.25, 0.25]), _t([0.25 + tiny, 0.25 - tiny, 0.25, 0.25])),
        ("tiny draft mass on the target's mode", _t([0.9, 0.1, 0, 0]), _t([tiny, 0.5 - tiny, 0.5, 0])),
        ("two tokens", _t([0.3, 0.7]), _t([0.8, 0.2])),
        ("spectr fig 5", _t([0.1, 0.6, 0.3]), _t([0.5, 0.3, 0.2])),
        ("spechub fixture 2", _t([0.35, 0.25, 0.2, 0.15, 0.05]), _t([0.6, 0.1, 0.05, 0.05, 0.2])),
    ]
