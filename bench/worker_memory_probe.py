"""The workers' resident memory under load, without Ray: two services of plain-process workers
(target, drafter, coordinator; demo pair, prefix caches off, one torch thread) side by side,
one with glibc's default malloc arenas and one with MALLOC_ARENA_MAX=2, two SDK users each
(half `Generate` of 24 tokens, half streams cancelled after their first chunk).  Prints each
process's resident MiB every 30 s; the soak's slow rise of the workers' memory
(`soak_dec07_no_prefix_cache.md`) is what it looks for.

    python bench/worker_memory_probe.py [MINUTES]      # default 8; output as printed
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rayspec.client import Client  # noqa: E402
from tests.loopback import free_port  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
from soak import process_sample  # noqa: E402  (resident MiB from /proc, as the soak reads it)

ARMS = {"default": {}, "arena2": {"MALLOC_ARENA_MAX": "2"}}


def start(arm_env: dict) -> tuple[dict, str]:
    """A target, a drafter and a coordinator as plain processes: (role -> process, gRPC address)."""
    env = {**os.environ, **arm_env, "HF_HUB_OFFLINE": "1"}
    target, drafter, coordinator = free_port(), free_port(), free_port()

    def worker(*args) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "rayspec.rpc.worker", "--threads", "1", *args], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    processes = {"target": worker("--role", "target", "--port", str(target), "--prefix-cache-mb", "0"),
                 "drafter": worker("--role", "drafter", "--port", str(drafter), "--prefix-cache-mb", "0")}
    processes["coordinator"] = worker("--role", "coordinator", "--port", str(coordinator), "--tree", "kary:2x3",
                                      "--target", f"127.0.0.1:{target}", "--drafter", f"127.0.0.1:{drafter}",
                                      "--wait-for-workers", "120")
    return processes, f"127.0.0.1:{coordinator}"


def wait_until_serving(address: str) -> None:
    for _ in range(120):
        try:
            with Client(address, timeout=300) as client:
                client.generate("def f(x):", max_tokens=4)
            return
        except Exception:  # noqa: BLE001 — not up yet
            time.sleep(2)


def main() -> int:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 8
    running = {name: start(env) for name, env in ARMS.items()}
    try:
        for _, address in running.values():
            wait_until_serving(address)
        end = time.monotonic() + minutes * 60
        done = {name: 0 for name in ARMS}

        def user(name: str, address: str, seed: int) -> None:
            rng = random.Random(seed)
            with Client(address, timeout=300) as client:
                while time.monotonic() < end:
                    if rng.random() < 0.5:
                        client.generate("def fibonacci(n):\n", max_tokens=24, temperature=0.6,
                                        seed=rng.randrange(1 << 30))
                    else:
                        with client.stream("class Stack:\n", max_tokens=64, temperature=0.6) as stream:
                            next(stream)
                    done[name] += 1

        users = [threading.Thread(target=user, args=(name, address, i))
                 for name, (_, address) in running.items() for i in range(2)]
        for thread in users:
            thread.start()
        started = time.monotonic()
        while any(thread.is_alive() for thread in users):
            print(f"{time.monotonic() - started:6.0f}s", " | ".join(
                f"{name}: n={done[name]} " + " ".join(f"{role}={process_sample(p.pid)['rss_mib']:.0f}" for role, p in processes.items())
                for name, (processes, _) in running.items()), flush=True)
            time.sleep(30)
    finally:
        for processes, _ in running.values():
            for process in processes.values():
                process.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
