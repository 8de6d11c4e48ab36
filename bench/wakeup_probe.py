"""What a thread's wake-up costs on this machine, and how many a distributed step makes.

    python bench/wakeup_probe.py [--decodes 8] [--out wakeup_probe]

A distributed step sends two gRPC calls (to the drafter, to the target), and gRPC Python hands
each message from thread to thread on both sides (the client's request iterator and channel
threads, the server's completion-queue thread and handler; `step_timeline.py` times the calls
themselves).  Each hand-off blocks one thread and wakes another.  This probe measures:

1. the round trip of a byte between two processes over a socketpair, and between two threads
   of one process over two events: back to back, and after the caller computed 12 ms (a
   worker waits that long for its next call while the other computes), medians;
2. the voluntary context switches (a thread blocking to be woken later: on a reply, a
   message, the GIL) of every thread of the coordinator's and workers' processes, per step,
   decoding the demo pair in process and distributed (workers as plain processes on loopback,
   one torch thread each; rrsw, sequoia:4, T = 0.6), with each path's step time.  A lower
   bound: a thread that ended during the decodes (a session's request-stream thread in the
   coordinator, which ends with its session) took its count with it.

Their product estimates the step time spent waking threads.  Written to
bench/results/wakeup_probe.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from common import ACCEPTANCE, load_demo, machine, out_prefix, save_results

COMPUTE_SECONDS = 0.012


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _median_extra_ms(round_trip, compute: float, rounds: int) -> float:
    """Median ms of `round_trip()` beyond nothing, each after `compute` seconds of the caller's."""
    extra = []
    for _ in range(rounds):
        _busy(compute)
        start = time.perf_counter()
        round_trip()
        extra.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(extra), 4)


def process_round_trips(rounds: int) -> dict:
    caller, callee = socket.socketpair()
    child = os.fork()
    if child == 0:  # the echoing process
        caller.close()
        while callee.recv(1):
            callee.send(b"x")
        os._exit(0)
    callee.close()

    def round_trip():
        caller.send(b"x")
        caller.recv(1)

    try:
        return {"back to back": _median_extra_ms(round_trip, 0, rounds),
                "after 12 ms of compute": _median_extra_ms(round_trip, COMPUTE_SECONDS, rounds)}
    finally:
        caller.close()
        os.waitpid(child, 0)


def thread_round_trips(rounds: int) -> dict:
    asked, answered, stop = threading.Event(), threading.Event(), False

    def echo():
        while True:
            asked.wait()
            asked.clear()
            if stop:
                return
            answered.set()

    echoing = threading.Thread(target=echo, daemon=True)
    echoing.start()

    def round_trip():
        asked.set()
        answered.wait()
        answered.clear()

    result = {"back to back": _median_extra_ms(round_trip, 0, rounds),
              "after 12 ms of compute": _median_extra_ms(round_trip, COMPUTE_SECONDS, rounds)}
    stop = True
    asked.set()
    echoing.join()
    return result


def _switches(pids: list[int]) -> int:
    """Voluntary context switches of every thread of `pids` so far (ended threads' are lost:
    the decodes below start none)."""
    total = 0
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/status") as status:
                    total += next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt"))
            except (FileNotFoundError, StopIteration):
                pass
    return total


def steps_and_switches(decodes: int) -> dict:
    import torch

    from rayspec.demo import DRAFTER_PATH, TARGET_PATH
    from rayspec.engine import GenerationStats, SpeculativeEngine
    from rayspec.rpc.process import Worker
    from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

    torch.set_num_threads(1)
    target, drafter, _, _, _, prompts = load_demo("cpu")
    logs = Path(tempfile.mkdtemp())
    workers = {role: Worker(logs / f"{role}.log", "--role", role, "--prefix-cache-mb", "0", "--model", str(model))
               for role, model in (("target", TARGET_PATH), ("drafter", DRAFTER_PATH))}
    setting = {"verifier": "rrsw", "tree": "sequoia:4", "acceptance_dir": ACCEPTANCE}
    try:
        remote_target = RemoteTarget(workers["target"].address)
        engines = {"in-process": SpeculativeEngine(target, drafter, **setting),
                   "distributed": SpeculativeEngine(remote_target, RemoteDrafter(workers["drafter"].address,
                                                                                 remote_target.vocab_size), **setting)}
        pids = [os.getpid(), *(worker.process.pid for worker in workers.values())]

        def decode(name: str, count: int) -> int:
            steps = 0
            for i in range(count):
                stats = GenerationStats()
                for _ in engines[name].generate(prompts[i % len(prompts)], max_new_tokens=96, temperature=0.6,
                                                seed=i, stats=stats):
                    pass
                steps += len(stats.steps)
            return steps

        result = {}
        for name in engines:
            decode(name, 1)  # untimed: kernels load, caches grow, the gRPC threads start
        for name in engines:
            before, start = _switches(pids), time.perf_counter()
            steps = decode(name, decodes)
            seconds, switched = time.perf_counter() - start, _switches(pids) - before
            result[name] = {"steps": steps, "step_ms": round(1000 * seconds / steps, 3),
                            "voluntary_switches_per_step": round(switched / steps, 2)}
        return result
    finally:
        for worker in workers.values():
            worker.stop()


def markdown(result: dict) -> str:
    processes, threads, paths = result["processes"], result["threads"], result["paths"]
    wake_ms = processes["after 12 ms of compute"] / 2  # a round trip wakes the callee, then the caller
    added = paths["distributed"]["voluntary_switches_per_step"] - paths["in-process"]["voluntary_switches_per_step"]
    lines = [
        f"# What a wake-up costs here, and how many a distributed step makes ({result['machine']['device_name']}, "
        f"{os.cpu_count()} CPUs)",
        "",
        "Round trips of one byte, median ms:",
        "",
        "| between | back to back | after the caller computed 12 ms |",
        "|---|---|---|",
        f"| two processes (socketpair) | {processes['back to back']} | {processes['after 12 ms of compute']} |",
        f"| two threads of a process (events) | {threads['back to back']} | {threads['after 12 ms of compute']} |",
        "",
        "Decoding the demo pair (rrsw, sequoia:4, T = 0.6; workers as plain processes on loopback):",
        "",
        "| path | steps | step ms | voluntary context switches per step (all threads of all its processes) |",
        "|---|---|---|---|",
    ]
    for name, row in paths.items():
        lines.append(f"| {name} | {row['steps']} | {row['step_ms']} | {row['voluntary_switches_per_step']} |")
    step_added = paths["distributed"]["step_ms"] - paths["in-process"]["step_ms"]
    lines += ["", f"The distributed step blocks and wakes threads at least **{added:.1f}** more times than the "
                  f"in-process one; at half a process round trip after compute (**{wake_ms:.3f} ms**) each, that is "
                  f"**{added * wake_ms:.2f} ms** of the {step_added:.2f} ms a step it adds (an estimate: a wake-up "
                  f"that overlaps another's costs the step nothing, one of a thread that ended is not counted)."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300, help="round trips per kind")
    parser.add_argument("--decodes", type=int, default=8, help="prompts decoded per path, 96 tokens each")
    parser.add_argument("--out", default=None, help="results path prefix (default bench/results/wakeup_probe)")
    args = parser.parse_args()
    result = {"machine": machine("cpu"), "settings": vars(args), "processes": process_round_trips(args.rounds),
              "threads": thread_round_trips(args.rounds), "paths": steps_and_switches(args.decodes)}
    save_results(out_prefix(args.out, "wakeup_probe"), result, markdown(result))


if __name__ == "__main__":
    main()
