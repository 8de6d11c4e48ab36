"""Torch's CPU thread count, in every thread that computes; the CPUs a process keeps to.

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

import os

import torch


def honour_torch_threads() -> None:
    """Make the calling thread compute with the process's torch thread count (see the module
    doc); a thread pool's initializer, or the first thing a computing thread does."""
    torch.set_num_threads(torch.get_num_threads())


# Above any machine's CPU ids (Linux's NR_CPUS goes to 8192): a list is checked where it is
# written (a head node's config check), not on the machine it pins, so by this bound — before
# "0-99999999999" became a set of 10^11 ids and took the memory.
MAX_CPU_ID = 65535


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # not "²", which isdigit() accepts and int() refuses


def parse_cpu_list(spec: str) -> frozenset[int]:
    """CPU ids from a taskset-style list, "0-3,8" -> {0, 1, 2, 3, 8}."""
    cpus = set()
    for part in str(spec).replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if not _digits(first) or (dash and not _digits(last)):
            raise ValueError(f"cpus must be a list like '0-3,8' (CPU ids and ranges), got {spec!r}")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"cpus: the range {part!r} runs backwards")
        if high > MAX_CPU_ID:
            raise ValueError(f"cpus: {part!r} names CPU {high}; no machine has CPU ids above {MAX_CPU_ID}")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def pin_process_to_cpus(spec: str) -> frozenset[int]:
    """Keep every thread of this process, and those it starts later, on the CPUs of `spec`.

    Why: a process that waits between steps (a worker waiting for its next call, a
    coordinator for a reply) is woken by Linux onto whichever core is idle, away from the
    caches it warmed; on the project's 2-core VM the distributed demo path stepped 6–7 %
    slower than when each process keeps its cores (`service_bench`, "pinned" arm).  Torch's
    thread count drops to the number of CPUs when it was higher.  Linux only
    (`sched_setaffinity`); returns the CPUs."""
    cpus = parse_cpu_list(spec)
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("cpus: pinning needs Linux (os.sched_setaffinity)")
    machine = os.cpu_count() or 1
    if max(cpus) >= machine:
        missing = sorted(c for c in cpus if c >= machine)
        named = ", ".join(map(str, missing[:8])) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ValueError(f"cpus {spec!r}: CPU(s) [{named}] are not available to this process (the machine has CPUs "
                         f"0-{machine - 1})")
    try:
        os.sched_setaffinity(0, cpus)  # refused first here when a cpuset (container) excludes them
    except OSError as error:
        raise ValueError(f"cpus {spec!r}: not available to this process ({error.strerror}; it may use "
                         f"{sorted(os.sched_getaffinity(0))})") from None
    for task in os.listdir("/proc/self/task"):  # threads already running: gRPC's, OpenMP's
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    if torch.get_num_threads() > len(cpus):  # torch's default: a thread per core of the machine
        torch.set_num_threads(len(cpus))
    return cpus
