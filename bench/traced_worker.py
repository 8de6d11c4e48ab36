"""A plain-process worker (`python -m rayspec.rpc.worker ARGS`) under tracemalloc, for finding
what holds the memory a worker gains under load (`worker_memory_probe.py --traced`).

Every $TRACE_EVERY seconds (default 60) it appends to $TRACE_OUT: the resident MiB, the MiB
Python's allocator holds (tracemalloc's traced total: Python objects, not torch's tensor
storage, which torch allocates outside it), the resident MiB once glibc has been asked to give
back its free pages (`malloc_trim(0)`: what is left is live or fragmented), and the source lines
whose traced memory grew most since the first sample, with their allocation counts.

    TRACE_OUT=FILE python bench/traced_worker.py --role target --port 50051 ...
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

TOP_LINES = 12


def resident_mib() -> float:
    from soak import process_sample
    return process_sample(os.getpid())["rss_mib"]


def snapshot() -> tracemalloc.Snapshot:
    """The traced blocks now, tracemalloc's own left out."""
    return tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])


def sample(out, baseline, started: float) -> None:
    from soak import resident_before_and_after_trim

    now = snapshot()
    rss, trimmed = resident_before_and_after_trim()
    traced, _ = tracemalloc.get_traced_memory()
    out.write(f"--- {time.monotonic() - started:.0f}s  rss {rss:.1f} MiB  traced {traced / 2**20:.2f} MiB  "
              f"rss after malloc_trim {trimmed:.1f} MiB\n")
    for stat in now.compare_to(baseline, "lineno")[:TOP_LINES]:
        out.write(f"  {stat.size_diff / 1024:+9.1f} kB {stat.count_diff:+7d} blocks  {stat.traceback[0]}\n")
    out.flush()


def main() -> int:
    tracemalloc.start(1)
    every = float(os.environ.get("TRACE_EVERY", "60"))
    started = time.monotonic()

    def sampler() -> None:
        time.sleep(every)  # the first sample after the model loads and the first requests ran
        baseline = snapshot()
        with open(os.environ["TRACE_OUT"], "a") as out:
            out.write(f"--- baseline at {time.monotonic() - started:.0f}s  rss {resident_mib():.1f} MiB  "
                      f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.2f} MiB\n")
            out.flush()
            while True:
                time.sleep(every)
                sample(out, baseline, started)

    threading.Thread(target=sampler, daemon=True).start()
    from rayspec.rpc.worker import main as worker_main
    return worker_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
