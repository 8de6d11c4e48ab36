"""The workers' resident memory under load, without Ray: services of plain-process workers
(target, drafter, coordinator; demo pair, prefix caches off, one torch thread) side by side,
one per arm of glibc malloc settings, two SDK users each (half `Generate` of 24 tokens, half
streams cancelled after their first chunk).  Prints each process's resident MiB every 30 s;
the soak's slow rise of the workers' memory (`soak_dec07_no_prefix_cache.md`) is what it looks
for.  With `--traced DIR`, one service only, its target and drafter under tracemalloc
(`traced_worker.py`), each writing what grew to DIR/target.txt and DIR/drafter.txt.

    python bench/worker_memory_probe.py [MINUTES] [--arms default,arena2] [--traced DIR]
"""

from __future__ import annotations

import argparse
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

# glibc keeps what a process frees for its next allocations; these move where it keeps it
ARMS = {"default": {},
        "arena2": {"MALLOC_ARENA_MAX": "2"},  # two heaps, not one per thread that allocates
        # a fixed mmap threshold: blocks of 64 kB or more (KV caches, logits) mapped alone and
        # unmapped when freed, where by default the threshold rises to the largest block freed
        # (up to 32 MiB) and such blocks are carved from the heap
        "mmap64k": {"MALLOC_MMAP_THRESHOLD_": "65536"},
        # and oneDNN's cache of compiled kernels, one per shape met (1,024 by default), off
        "mmap64k_onednn0": {"MALLOC_MMAP_THRESHOLD_": "65536", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}}


def start(arm_env: dict, traced: str | None = None) -> tuple[dict, str]:
    """A target, a drafter and a coordinator as plain processes: (role -> process, gRPC address);
    with `traced` (a folder), the target and the drafter under tracemalloc, writing there."""
    env = {**os.environ, **arm_env, "HF_HUB_OFFLINE": "1"}
    target, drafter, coordinator = free_port(), free_port(), free_port()

    def worker(*args, trace_out: str | None = None) -> subprocess.Popen:
        command = ["-m", "rayspec.rpc.worker"]
        if trace_out:
            command = [os.path.join(ROOT, "bench", "traced_worker.py")]
        return subprocess.Popen([sys.executable, *command, "--threads", "1", *args], cwd=ROOT,
                                env={**env, "TRACE_OUT": trace_out} if trace_out else env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def trace_out(role: str) -> str | None:
        return os.path.join(traced, f"{role}.txt") if traced else None

    processes = {role: worker("--role", role, "--port", str(port), "--prefix-cache-mb", "0", trace_out=trace_out(role))
                 for role, port in (("target", target), ("drafter", drafter))}
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("minutes", type=float, nargs="?", default=8)
    parser.add_argument("--arms", default="default,arena2", help=f"of {', '.join(ARMS)}")
    parser.add_argument("--traced", metavar="DIR")
    args = parser.parse_args()
    minutes, traced = args.minutes, args.traced
    if traced:
        os.makedirs(traced, exist_ok=True)
        arms = {"traced": {}}
    else:
        arms = {name: ARMS[name] for name in args.arms.split(",")}
    running = {name: start(env, traced) for name, env in arms.items()}
    try:
        for _, address in running.values():
            wait_until_serving(address)
        end = time.monotonic() + minutes * 60
        done = {name: 0 for name in arms}

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
