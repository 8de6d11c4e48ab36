"""OpenMP's thread count for the calling thread, as the BLAS calls of a model's forward see it
(`torch.get_num_threads()` does not tell: see rayspec.models.threads)."""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

import torch

try:
    _omp_get_max_threads = ctypes.CDLL(None).omp_get_max_threads
except AttributeError:  # torch runs without OpenMP in this process
    _omp_get_max_threads = None

AVAILABLE = _omp_get_max_threads is not None
# What a new thread gets: OMP_NUM_THREADS, else one thread per CPU this process may run on.
_USABLE_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
OPENMP_DEFAULT = int(os.environ.get("OMP_NUM_THREADS") or _USABLE_CPUS)
UNUSUAL = 1 if OPENMP_DEFAULT > 1 else 2  # a count no thread has unless it was applied there


def openmp_threads() -> int:
    return _omp_get_max_threads()


@contextmanager
def torch_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)
