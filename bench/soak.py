"""Soak: `rayspec serve`'s default service under a long mix of traffic, watched for leaks.

    python bench/soak.py [--minutes 10] [--users 4] [--every 15] [--out bench/results/soak]

Starts the service as `make serve` does (a local Ray, the demo pair on CPU, the target and the
drafter in worker actors, Ray Serve's HTTP app and the gRPC coordinator) and runs `--users`
threads, each cycling through the kinds of request a service meets in a day, each answer
checked (`tests/cluster/mixed_traffic.py`: HTTP completions, chat streams, `n: 2`, streams
whose client leaves after the first chunk, requests whose client times out mid-generation, bad
input; gRPC `Generate`, streams read to their end and streams cancelled after one chunk, bad
input).

Every `--every` seconds it samples each of the service's processes (resident memory, threads,
open files, from /proc: Linux only), the workers' open sessions (`WorkerInfo.open_sessions`)
and `/metrics`' generations in flight and waiting.  After the traffic stops it waits for the
service to be idle and samples once more: every session released, nothing in flight, threads
back where they were, memory flat after the warm-up.  Writes `<out>.json` and `<out>.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.mixed_traffic import KINDS, Tally, gauges, idle, run_traffic, worker_infos  # noqa: E402


def process_sample(pid: int) -> dict | None:
    """Resident MiB, threads and open files of `pid` (None once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {"rss_mib": round(int(fields["VmRSS"].split()[0]) / 1024, 1), "threads": int(fields["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (FileNotFoundError, ProcessLookupError, KeyError):
        return None


def resident_before_and_after_trim() -> tuple[float, float]:
    """This process's resident MiB, then again once glibc has given its free pages back
    (`malloc_trim(0)`): what is left is live memory, or fragments."""
    import ctypes

    before = process_sample(os.getpid())["rss_mib"]
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return before, process_sample(os.getpid())["rss_mib"]


def service_processes(running) -> dict:
    """name -> pid of the service's own processes: its actors (asked) and Serve's (by title)."""
    import ray

    def pid_of(actor) -> int:
        return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30)

    pids = {"target worker": pid_of(running.target), "gRPC coordinator": pid_of(running.generation)}
    for i, drafter in enumerate(running.drafters):
        pids[f"drafter worker {i}" if len(running.drafters) > 1 else "drafter worker"] = pid_of(drafter)
    titles = {"ServeReplica:rayspec:rayspec-coordinator": "HTTP coordinator (Serve replica)",
              "ray::ProxyActor": "Serve proxy", "ray::ServeController": "Serve controller"}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            for needle, name in titles.items():
                if needle in title and name not in pids:
                    pids[name] = int(entry.name)
    pids["this driver"] = os.getpid()
    return pids


WATCHED = ("HTTP completion", "gRPC Generate")  # whose latency each sample's window tells


def sample(running, pids: dict, started: float, tally: Tally, since: int) -> dict:
    """The processes, workers and gauges now, and the median latency of the `WATCHED` requests
    that ended since the `since`-th request."""
    with tally.lock:
        window = [seconds for kind, seconds in tally.finished[since:] if kind in WATCHED]
        done = len(tally.finished)
    infos = worker_infos(running)
    return {"t": round(time.monotonic() - started, 1), "requests": done,
            "median_s": round(statistics.median(window), 3) if window else None,
            "processes": {name: process_sample(pid) for name, pid in pids.items()},
            "sessions": {role: info.open_sessions for role, info in infos.items()},
            "prefix_cache_mib": {role: round(info.prefix_cache_bytes / 2**20, 1) for role, info in infos.items()},
            **gauges(running.http_address)}


def summary(samples: list[dict], warm: int) -> list[dict]:
    """Per process: memory after the warm-up sample and at the end, threads and files at the
    first sample, their highest, and at the end."""
    rows = []
    for name in samples[0]["processes"]:
        seen = [s["processes"][name] for s in samples if s["processes"].get(name)]
        if not seen:
            continue
        after_warmup = samples[min(warm, len(samples) - 1)]["processes"].get(name) or seen[0]
        rows.append({"process": name, "rss_start_mib": seen[0]["rss_mib"], "rss_after_warmup_mib": after_warmup["rss_mib"],
                     "rss_end_mib": seen[-1]["rss_mib"], "rss_max_mib": max(s["rss_mib"] for s in seen),
                     "threads_start": seen[0]["threads"], "threads_max": max(s["threads"] for s in seen),
                     "threads_end": seen[-1]["threads"], "fds_start": seen[0]["fds"],
                     "fds_max": max(s["fds"] for s in seen), "fds_end": seen[-1]["fds"]})
    return rows


def markdown(result: dict) -> str:
    tally, rows = result["requests"], result["processes"]
    cache = result.get("prefix_cache_mb")
    setting = "" if cache is None else f" --prefix-cache-mb {cache:g}"
    lines = [f"# Soak: {result['minutes']} min, {result['users']} users, the default service on the demo pair"
             + ("" if cache is None else f", prefix caches of {cache:g} MiB"), "",
             f"{result['date']}, commit `{result['commit']}`, {os.cpu_count()} CPUs.  `python bench/soak.py "
             f"--minutes {result['minutes']} --users {result['users']} --every {result['every']}{setting}`.", "",
             f"Requests: {sum(r['count'] for r in tally)}, failures: **{sum(r['failures'] for r in tally)}**.  "
             f"Idle after the traffic: **{result['idle']}** (every worker session released, nothing in flight); "
             f"sessions held at the end: {result['final']['sessions']}.", "",
             "| kind | requests | failures | median s | p99 s |", "|---|---|---|---|---|"]
    lines += [f"| {r['kind']} | {r['count']} | {r['failures']} | {r['median_s']:.3f} | {r['p99_s']:.3f} |" for r in tally]
    lines += ["", "Processes (resident MiB, threads, open files): at the first sample, after the warm-up "
              f"(sample {result['warmup_sample']}, t = {result['samples'][result['warmup_sample']]['t']} s), "
              "their highest, and at the end, idle:", "",
              "| process | RSS first | RSS after warm-up | RSS max | RSS end | threads first / max / end | files first / max / end |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['process']} | {r['rss_start_mib']} | {r['rss_after_warmup_mib']} | {r['rss_max_mib']} | "
              f"{r['rss_end_mib']} | {r['threads_start']} / {r['threads_max']} / {r['threads_end']} | "
              f"{r['fds_start']} / {r['fds_max']} / {r['fds_end']} |" for r in rows]
    lines += ["", "Samples: requests done, the median seconds of the HTTP completions and gRPC `Generate` calls "
              "that ended since the sample before, the sessions the workers hold, generations in flight / "
              "waiting, resident MiB of the workers and coordinators, and the MiB the workers' prefix caches hold "
              "(`WorkerInfo.prefix_cache_bytes`, at most `prefix_cache_mb`, 1024 by default):", "",
              "| t s | requests | median s | sessions | in flight / waiting | RSS target / drafter | "
              "RSS HTTP / gRPC coordinator | prefix caches MiB |", "|---|---|---|---|---|---|---|---|"]
    for s in result["samples"] + [result["final"]]:
        mib = {name: (p or {}).get("rss_mib") for name, p in s["processes"].items()}
        lines.append(f"| {s['t']} | {s['requests']} | {s['median_s']} | {s['sessions']} | {s.get('in flight')} / "
                     f"{s.get('waiting')} | {mib.get('target worker')} / {mib.get('drafter worker')} | "
                     f"{mib.get('HTTP coordinator (Serve replica)')} / {mib.get('gRPC coordinator')} | "
                     f"{s['prefix_cache_mib']} |")
    if result["examples"]:
        lines += ["", "Failures (the first 20):", ""] + [f"- {e}" for e in result["examples"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.2, help="share of the run before the memory baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefix-cache-mb", type=float, default=None,
                        help="both models' prefix_cache_mb (default: the service's, 1024); 0 tells memory apart from it")
    parser.add_argument("--out", default="bench/results/soak")
    args = parser.parse_args()

    import subprocess

    from rayspec.cluster.launch import Service
    from rayspec.serve.config import ServiceConfig

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cache = {} if args.prefix_cache_mb is None else {"prefix_cache_mb": args.prefix_cache_mb}
    running = Service(ServiceConfig.from_dict({"target": cache, "drafters": [cache]}))
    try:
        pids = service_processes(running)
        tally, samples, started = Tally(), [], time.monotonic()
        traffic = threading.Thread(target=run_traffic, args=(running.http_address, running.grpc_address,
                                                             args.minutes * 60, args.users, args.seed, tally))
        traffic.start()
        while traffic.is_alive():
            samples.append(sample(running, pids, started, tally, samples[-1]["requests"] if samples else 0))
            traffic.join(args.every)
        quiet = idle(running)
        final = sample(running, pids, started, tally, samples[-1]["requests"])
    finally:
        running.stop()
    warm = min(range(len(samples)), key=lambda i: abs(samples[i]["t"] - args.warmup * args.minutes * 60))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "minutes": args.minutes,
        "users": args.users, "every": args.every, "prefix_cache_mb": args.prefix_cache_mb, "idle": quiet, "warmup_sample": warm, "samples": samples,
        "final": final, "processes": summary(samples + [final], warm), "examples": tally.examples,
        "requests": [{"kind": kind, "count": tally.counts[kind], "failures": tally.failures[kind],
                      "median_s": statistics.median(tally.seconds[kind]),
                      "p99_s": sorted(tally.seconds[kind])[int(0.99 * (len(tally.seconds[kind]) - 1))]}
                     for kind in KINDS if tally.counts[kind]],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if quiet and not sum(tally.failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
