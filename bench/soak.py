"""Soak: `rayspec serve`'s default service under a long mix of traffic, watched for leaks.

    python bench/soak.py [--minutes 10] [--users 4] [--every 15] [--out bench/results/soak]

Starts the service as `make serve` does (a local Ray, the demo pair on CPU, the target and the
drafter in worker actors, Ray Serve's HTTP app and the gRPC coordinator) and runs `--users`
threads, each cycling through the kinds of request a service meets in a day (`KINDS`): HTTP
completions, chat streams, `n: 2`, streams whose client leaves after the first chunk, requests
whose client times out mid-generation, bad input; gRPC `Generate`, streams read to their end
and streams cancelled after one chunk, bad input.  Each answer is checked (a 200 with its
tokens, a 400 with a message, a stream ending in `[DONE]`...); anything else is a failure, kept
with its message.

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
import random
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
import httpx  # noqa: E402

PROMPTS = ["def fibonacci(n):\n", "import os\n\n\ndef list_python_files(root):\n", "class Stack:\n    def push(self, item):\n"]
MAX_TOKENS = 24


class Unexpected(Exception):
    """An answer the service should not have given."""


@dataclass
class Caller:
    """One simulated user's connections and its stream of prompts and seeds."""
    http: httpx.Client
    sdk: object
    model: str
    context_length: int
    rng: random.Random

    def body(self, **fields) -> dict:
        return {"model": self.model, "prompt": self.rng.choice(PROMPTS), "max_tokens": MAX_TOKENS,
                "temperature": 0.6, "seed": self.rng.randrange(1 << 30), **fields}


def expect_status(reply: httpx.Response, status: int) -> dict:
    if reply.status_code != status:
        raise Unexpected(f"HTTP {reply.status_code} where {status} was due: {reply.text[:200]}")
    return reply.json()


def http_completion(c: Caller) -> None:
    answer = expect_status(c.http.post("/v1/completions", json=c.body()), 200)
    choice, usage = answer["choices"][0], answer["usage"]
    # 0 tokens: the model's first token ended it (the stop token is not counted)
    if choice["finish_reason"] not in ("length", "stop") or not 0 <= usage["completion_tokens"] <= MAX_TOKENS:
        raise Unexpected(f"a completion that ended {choice['finish_reason']} after {usage['completion_tokens']} tokens")


def http_two_choices(c: Caller) -> None:
    answer = expect_status(c.http.post("/v1/completions", json=c.body(n=2)), 200)
    if sorted(choice["index"] for choice in answer["choices"]) != [0, 1]:
        raise Unexpected(f"n: 2 answered {len(answer['choices'])} choices")


def http_chat_stream(c: Caller) -> None:
    body = c.body(stream=True, messages=[{"role": "user", "content": c.rng.choice(PROMPTS)}])
    del body["prompt"]
    with c.http.stream("POST", "/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise Unexpected(f"HTTP {reply.status_code} for a chat stream")
        events = [line for line in reply.iter_lines() if line.startswith("data: ")]
    if events[-1] != "data: [DONE]" or len(events) < 3:
        raise Unexpected(f"a chat stream of {len(events)} events ended {events[-1][:80]!r}")


def http_stream_left(c: Caller) -> None:
    """The client reads the first chunk that carries text and closes the connection (a stream
    the model's first token ended has none: it is read to its end)."""
    with c.http.stream("POST", "/v1/completions", json=c.body(stream=True, max_tokens=4 * MAX_TOKENS)) as reply:
        if reply.status_code != 200:
            raise Unexpected(f"HTTP {reply.status_code} for a stream")
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                return
            if line == "data: [DONE]":
                return
    raise Unexpected("a stream ended without [DONE]")


def http_timed_out(c: Caller) -> None:
    """The client gives up on a long non-streamed request mid-generation."""
    try:
        c.http.post("/v1/completions", json=c.body(max_tokens=4 * MAX_TOKENS), timeout=0.15)
    except httpx.TimeoutException:
        return


def http_bad_input(c: Caller) -> None:
    bad = c.rng.choice([
        ("max_tokens", {**c.body(), "max_tokens": -3}),
        ("verifier", {**c.body(), "rayspec": {"verifier": "no-such-verifier"}}),
        ("context", {**c.body(), "prompt": [7] * (c.context_length + 1)}),
        ("json", b'{"model": "x", "prompt": '),
    ])
    name, body = bad
    reply = c.http.post("/v1/completions", **({"content": body, "headers": {"content-type": "application/json"}}
                                             if isinstance(body, bytes) else {"json": body}))
    answer = expect_status(reply, 400)
    if not answer.get("error", {}).get("message"):
        raise Unexpected(f"a 400 without a message for bad {name}")


def grpc_generate(c: Caller) -> None:
    done = c.sdk.generate(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, temperature=0.6, seed=c.rng.randrange(1 << 30))
    if not 0 <= len(done.token_ids) <= MAX_TOKENS or (not done.token_ids and done.finish_reason != "stop"):
        raise Unexpected(f"Generate gave {len(done.token_ids)} tokens")


def grpc_stream(c: Caller) -> None:
    stream = c.sdk.stream(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, temperature=0.6, seed=c.rng.randrange(1 << 30))
    chunks = list(stream)
    if stream.completion is None:
        raise Unexpected(f"a gRPC stream of {len(chunks)} chunks without its completion")


def grpc_stream_cancelled(c: Caller) -> None:
    with c.sdk.stream(c.rng.choice(PROMPTS), max_tokens=4 * MAX_TOKENS, temperature=0.6) as stream:
        next(stream)


def grpc_bad_input(c: Caller) -> None:
    from rayspec.client import InvalidRequestError

    try:
        c.sdk.generate(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, verifier="no-such-verifier")
    except InvalidRequestError as error:
        if "no-such-verifier" not in str(error):
            raise Unexpected(f"INVALID_ARGUMENT without naming the verifier: {error}") from None
        return
    raise Unexpected("an unknown verifier was accepted over gRPC")


KINDS = {  # name -> (call, weight)
    "HTTP completion": (http_completion, 3), "HTTP n=2": (http_two_choices, 1), "HTTP chat stream": (http_chat_stream, 2),
    "HTTP stream, client left": (http_stream_left, 2), "HTTP client timed out": (http_timed_out, 1),
    "HTTP bad input": (http_bad_input, 1), "gRPC Generate": (grpc_generate, 2), "gRPC stream": (grpc_stream, 2),
    "gRPC stream, cancelled": (grpc_stream_cancelled, 2), "gRPC bad input": (grpc_bad_input, 1),
}


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    seconds: dict = field(default_factory=lambda: defaultdict(list))
    examples: list = field(default_factory=list)
    finished: list = field(default_factory=list)  # (kind, seconds) in the order they ended
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, failure: str | None) -> None:
        with self.lock:
            self.counts[kind] += 1
            self.seconds[kind].append(seconds)
            self.finished.append((kind, seconds))
            if failure is not None:
                self.failures[kind] += 1
                if len(self.examples) < 20:
                    self.examples.append(f"{kind}: {failure}")


def run_traffic(http_address: str, grpc_address: str, seconds: float, users: int, seed: int = 0,
                tally: Tally | None = None) -> Tally:
    """`users` threads cycling through `KINDS` (drawn by weight, seeded) for `seconds`."""
    from rayspec.client import Client

    tally = tally or Tally()
    with httpx.Client(base_url=http_address, timeout=120) as http:
        model = http.get("/v1/models").json()["data"][0]
        model_id, context_length = model["id"], model["max_model_len"]
    names = list(KINDS)
    weights = [KINDS[name][1] for name in names]
    end = time.monotonic() + seconds

    def user(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        with httpx.Client(base_url=http_address, timeout=120) as http, Client(grpc_address, timeout=120) as sdk:
            caller = Caller(http, sdk, model_id, context_length, rng)
            while time.monotonic() < end:
                kind = rng.choices(names, weights)[0]
                start = time.perf_counter()
                try:
                    KINDS[kind][0](caller)
                    failure = None
                except Exception as error:  # noqa: BLE001 — every failure is counted, with its message
                    failure = f"{type(error).__name__}: {error}"[:300]
                tally.add(kind, time.perf_counter() - start, failure)

    threads = [threading.Thread(target=user, args=(i,), name=f"soak-user-{i}") for i in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally


def worker_infos(running) -> dict:
    """role -> its worker's `WorkerInfo` now."""
    from rayspec.rpc.generated import worker_pb2, worker_pb2_grpc

    addresses = {"target": running.target_address, **{f"drafter {i}": a for i, a in enumerate(running.drafter_addresses)}}
    infos = {}
    for role, address in addresses.items():
        with grpc.insecure_channel(address) as channel:
            stub = (worker_pb2_grpc.TargetServiceStub if role == "target" else worker_pb2_grpc.DrafterServiceStub)(channel)
            infos[role] = stub.Info(worker_pb2.InfoRequest(), timeout=10)
    return infos


def process_sample(pid: int) -> dict | None:
    """Resident MiB, threads and open files of `pid` (None once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {"rss_mib": round(int(fields["VmRSS"].split()[0]) / 1024, 1), "threads": int(fields["Threads"]),
                "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (FileNotFoundError, ProcessLookupError, KeyError):
        return None


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


def gauges(http_address: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{http_address}/metrics", timeout=30).text
    wanted = {"rayspec_generations_in_flight": "in flight", "rayspec_requests_waiting": "waiting"}
    return {wanted[s.name]: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in wanted}


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


def idle(running, timeout: float = 60.0) -> bool:
    """Wait for every session to be released and nothing in flight."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        now = gauges(running.http_address)
        held = [info.open_sessions for info in worker_infos(running).values()]
        if not any(held) and not now.get("in flight") and not now.get("waiting"):
            return True
        time.sleep(0.5)
    return False


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
    lines = [f"# Soak: {result['minutes']} min, {result['users']} users, the default service on the demo pair", "",
             f"{result['date']}, commit `{result['commit']}`, {os.cpu_count()} CPUs.  `python bench/soak.py "
             f"--minutes {result['minutes']} --users {result['users']} --every {result['every']}`.", "",
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
    parser.add_argument("--out", default="bench/results/soak")
    args = parser.parse_args()

    import subprocess

    from rayspec.cluster.launch import Service
    from rayspec.serve.config import ServiceConfig

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    running = Service(ServiceConfig.from_dict({}))
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
        "users": args.users, "every": args.every, "idle": quiet, "warmup_sample": warm, "samples": samples,
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
