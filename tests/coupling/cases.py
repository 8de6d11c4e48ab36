"""Target/drafter pairs and many-seed noise shared by the couplings' tests (seed 000)."""

from __future__ import annotations

import numpy as np
import torch

from rayspec.coupling.noise import KeyedNoise

F64 = torch.float64
PAIRS = [  # (target p, drafter q): uniform vs a half-support drafter, close laws, five tokens, a 1e-12 mass
    (torch.tensor([1 / 3, 1 / 3, 1 / 3], dtype=F64), torch.tensor([0.5, 0.5, 0.0], dtype=F64)),
    (torch.tensor([0.5, 0.3, 0.2], dtype=F64), torch.tensor([0.7, 0.2, 0.1], dtype=F64)),
    (torch.tensor([0.35, 0.25, 0.2, 0.15, 0.05], dtype=F64), torch.tensor([0.6, 0.1, 0.05, 0.05, 0.2], dtype=F64)),
    (torch.tensor([0.9, 0.1, 0, 0], dtype=F64), torch.tensor([1e-12, 0.5 - 1e-12, 0.5, 0], dtype=F64)),
]


def many_seeds(n: int, position: int = 0, offset: int = 0) -> KeyedNoise:
    """The shared noise of n requests, seeds offset .. offset + n - 1, at one position."""
    return KeyedNoise(np.arange(n) + offset, position)
