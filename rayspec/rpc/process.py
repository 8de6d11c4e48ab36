"""Start rayspec workers as plain processes (`python -m rayspec.rpc.worker`), as a GPU machine
without Ray runs them; used by the tests and the service benchmark.  And `StopSignals`, how a
serving process (a worker, `rayspec serve`) waits for its Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


# The process that started a worker (`Worker`), which the worker outlives by a second at most:
# a bench or test killed before it could stop its workers leaves none holding a model.
PARENT_VARIABLE = "RAYSPEC_PARENT_PID"


class Worker:
    """A worker process; `address` once it printed READY.  `stop()` terminates it, and it
    stops by itself once this process is gone (`PARENT_VARIABLE`)."""

    def __init__(self, log: Path, *args: str, timeout: float = 120.0, threads: int = 1, cpus: str | None = None,
                 program: tuple[str, ...] = ("-m", "rayspec.rpc.worker")):
        """program: what `python` runs, the worker's arguments after it (a bench's traced worker)."""
        # Idle OpenMP threads spinning in one worker steal the core another is computing on.
        env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
               PARENT_VARIABLE: str(os.getpid())}
        self.log = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, *program, "--port", "0", "--threads", str(threads),
             *(("--cpus", cpus) if cpus is not None else ()), *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
        )
        # Read on a thread of its own: a worker that prints nothing (one waiting for others) would
        # hold a read here past the deadline.
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_until_ready, args=(self.process.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line.startswith("READY"):
                self.address = line.split()[2]
                return
            if not line:  # it exited
                break
        self.stop()
        raise RuntimeError(f"worker {args} did not start within {timeout:g} s; see {log}: "
                           f"{Path(log).read_text()[-2000:]}")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def _read_until_ready(stream, lines: queue.Queue) -> None:
    """Put `stream`'s lines on `lines` up to its READY line, or an empty one at its end."""
    for line in stream:
        lines.put(line)
        if line.startswith("READY"):
            return
    lines.put("")


class StopSignals:
    """SIGINT and SIGTERM noted from now on (main thread only), for `wait` to return on.

    The handlers take no lock.  One that did (`threading.Event.set`, as these processes' did)
    could meet a second signal while it held it: Python runs that signal's handler nested in
    the same thread, which then waits for the lock for ever, and the process no longer stops
    (`rayspec serve` under `timeout`, which forwards a SIGINT to the process and its group)."""

    def __init__(self):
        self.received: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda number, _: self.received.append(number))

    def wait(self, give_up: Callable[[], bool] | None = None, every: float = 1.0) -> None:
        """Until a signal is received, or `give_up()` (asked every `every` s) says to stop."""
        asked = time.monotonic()
        while not self.received:
            time.sleep(0.1)  # a signal interrupts the sleep and its handler runs at once
            if give_up is not None and time.monotonic() - asked >= every:
                if give_up():
                    return
                asked = time.monotonic()
