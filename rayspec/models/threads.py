"""Torch's CPU thread count, in every thread that computes.

`torch.set_num_threads(n)` sets OpenMP's thread count for the calling thread only.  A thread
started later keeps OpenMP's default, one thread per core, until it runs one of torch's own
parallel kernels (an elementwise op, a softmax), which applies n there; BLAS calls made before
that use the default (torch 2.13, MKL on GNU OpenMP: after `set_num_threads(1)`, a matmul as
a new thread's first operation ran on both cores of a 2-core machine, 28 ms against 48 ms in
the main thread).  The gRPC servers run their handlers, and the HTTP service its generations,
in such threads, so each applies the count before anything else: `--threads` then holds from
a thread's first operation, with the arithmetic — and so the tokens — of the main thread.
"""

from __future__ import annotations

import torch


def honour_torch_threads() -> None:
    """Make the calling thread compute with the process's torch thread count (see the module
    doc); a thread pool's initializer, or the first thing a computing thread does."""
    torch.set_num_threads(torch.get_num_threads())
