"""A local Ray for the end-to-end tests, its head started as a process of its own.

`ray.init()` without an address forks the GCS server and the raylet out of the test process.
By the time the Ray modules run, that process has done several Ray start/stop cycles and holds
gRPC, torch and Ray threads.  Twice a daemon forked from it never started (no log file at
all) and `ray.init` gave up after its fixed 30 s: once locally ("timed out during startup",
the raylet), once in CI ("Timed out waiting for file .../gcs_server_port_...", the GCS); each
time all of test_ray_serve's tests errored.  The cause is not proven (3000 forks with
Ray's preexec_fn from a process with busy or idle gRPC and torch threads all exec'd), so the
head is started by `ray start --head --block` in a fresh process, the tests connect to it as a
driver, and a head that is not up within `timeout` seconds is killed with its whole process
group and started again."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from tests.loopback import free_port

READY_LINE = "Ray runtime started"


class HeadDidNotStart(RuntimeError):
    pass


class LocalRay:
    """A Ray head in its own process group, with this process connected to it as a driver."""

    def __init__(self, num_cpus: int, timeout: float):
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        # a directory of its own: `ray start` records its address in <temp-dir>/ray_current_cluster,
        # and a plain ray.init() elsewhere (`rayspec serve` in a test) must not find this head there
        self.temp_dir = tempfile.mkdtemp(prefix="ray-")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
             f"--num-cpus={num_cpus}", f"--temp-dir={self.temp_dir}", f"--ray-client-server-port={free_port()}",
             "--include-dashboard=false", "--include-log-monitor=false", "--disable-usage-stats"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        # `ray start --block` goes on printing (deaths of its subprocesses): keep draining the pipe
        self.output: list[str] = []
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                self._kill()
                raise HeadDidNotStart(f"the Ray head did not start in {timeout:.0f} s; its logs are in {self.temp_dir}; it printed:\n{self.printed()}") from None
            if line is None:
                self._kill()
                raise HeadDidNotStart(f"`ray start` exited with {self.process.wait()}; its logs are in {self.temp_dir}; it printed:\n{self.printed()}")
            if READY_LINE in line:
                return

    def _drain(self, lines: queue.Queue) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            lines.put(line)
        lines.put(None)

    def printed(self) -> str:
        return "".join(self.output[-40:])

    def _kill(self) -> None:
        """The head and everything it started, at once: SIGTERM makes `ray start` shut its
        daemons down gracefully, which took 30 s and more after a Serve module.  Its
        daemons and their workers are in its process group; a process that left the group
        still dies with its parent (Ray sets PR_SET_PDEATHSIG on what it starts)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Disconnect this driver, then stop the head."""
        import ray

        ray.shutdown()
        self._kill()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_ray(num_cpus: int = 2, attempts: int = 3, timeout: float = 60.0) -> LocalRay:
    """A fresh local Ray head with `num_cpus` CPUs and no dashboard, this process connected to
    it (workers' logs not forwarded); `stop()` it when done.  A head that does not come up is
    killed and started again, `attempts` times in all, with a warning carrying its output."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            head = LocalRay(num_cpus, timeout)
            break
        except HeadDidNotStart as error:
            if attempt == attempts:
                raise
            warnings.warn(f"attempt {attempt} of {attempts}: {error}", stacklevel=2)
    try:
        ray.init(address=head.address, log_to_driver=False)
    except BaseException:
        head.stop()
        raise
    return head
