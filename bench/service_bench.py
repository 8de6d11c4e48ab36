"""The distributed service against the in-process engine, on the demo pair.

    python bench/service_bench.py [--prompts 10] [--tokens 96] [--skip-locust]

1. Overhead of distribution: a target and a drafter worker as plain processes talking gRPC
   on loopback, driven by the same engine as the in-process run, on the same prompts, seeds,
   verifier and tree, interleaved prompt by prompt.  Reported: tokens/s of each (goal: the
   distributed path >= 90 % of in-process), whether the tokens are identical (they must be),
   bytes per step, and the share of step time spent outside the drafter's and target's
   compute — gRPC, serialisation, the engine's bookkeeping (goal <= 5 %).
2. Placement: bytes crossing per step for every verifier, with the verifier at the target
   (the default) and at the coordinator.
3. Load: `rayspec serve` (Ray Serve HTTP + the gRPC coordinator) under locust at 1, 4 and 16
   users of streaming requests: time to first token and inter-chunk latency, p50 and p99.
Writes bench/results/service_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ACCEPTANCE, RESULTS, fits, load_demo, machine
from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.verify import available_verifiers

ROOT = Path(__file__).resolve().parents[1]


def decode(engine, prompt, tokens, temperature, seed):
    stats = GenerationStats()
    produced = []
    start = time.perf_counter()
    for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats):
        produced += chunk.tokens
    return produced, stats, time.perf_counter() - start


def overhead(local, remote, prompts, tokens, temperature, verifier, tree, costs):
    engines = {
        "in-process": SpeculativeEngine(*local, verifier=verifier, tree=tree, acceptance_dir=ACCEPTANCE, costs=costs, adaptive=False),
        "distributed": SpeculativeEngine(*remote, verifier=verifier, tree=tree, acceptance_dir=ACCEPTANCE, costs=costs, adaptive=False),
    }
    totals = {name: {"tokens": 0, "seconds": 0.0, "steps": 0, "wall": 0.0, "other": 0.0, "bytes": 0} for name in engines}
    identical = True
    for i, prompt in enumerate(prompts):
        outputs = {}
        for name in (list(engines) if i % 2 == 0 else list(engines)[::-1]):
            produced, stats, seconds = decode(engines[name], prompt, tokens, temperature, seed=500 + i)
            outputs[name] = produced
            t = totals[name]
            t["tokens"] += len(produced)
            t["seconds"] += seconds
            t["steps"] += len(stats.steps)
            t["wall"] += sum(s.wall for s in stats.steps)
            t["other"] += sum(s.other for s in stats.steps)
            t["bytes"] += sum(s.wire_bytes for s in stats.steps)
        identical &= outputs["in-process"] == outputs["distributed"]
        print(f"  overhead: prompt {i + 1}/{len(prompts)}", flush=True)
    rows = {}
    for name, t in totals.items():
        rows[name] = {"tokens_per_s": t["tokens"] / t["seconds"], "tokens_per_step": t["tokens"] / t["steps"],
                      "other_share": t["other"] / t["wall"], "bytes_per_step": t["bytes"] / t["steps"]}
    rows["distributed_over_in_process"] = rows["distributed"]["tokens_per_s"] / rows["in-process"]["tokens_per_s"]
    rows["identical_tokens"] = identical
    rows["setting"] = {"verifier": verifier, "tree": tree, "temperature": temperature}
    return rows


def placement(target_address, drafter_address, prompts, tokens, temperature, tree, costs):
    rows = []
    for verifier in available_verifiers():
        row = {"verifier": verifier}
        for where in ("target", "coordinator"):
            remote = RemoteTarget(target_address, verify_at=where)
            tree_for = "dynamic:32" if verifier == "topk" else tree if fits(verifier, tree) else "chain:4"
            engine = SpeculativeEngine(remote, RemoteDrafter(drafter_address, remote.vocab_size), verifier=verifier,
                                       tree=tree_for, acceptance_dir=ACCEPTANCE, costs=costs, adaptive=False)
            steps = byte_count = 0
            for i, prompt in enumerate(prompts):
                _, stats, _ = decode(engine, prompt, tokens, 0.0 if verifier == "greedy" else temperature, seed=i)
                steps += len(stats.steps)
                byte_count += sum(s.wire_bytes for s in stats.steps)
            row[f"bytes_per_step_verify_at_{where}"] = byte_count / steps
            remote.close()
        rows.append(row)
        print(f"  placement: {verifier}", flush=True)
    return rows


def locust_sweep(users, seconds, max_tokens):
    """`rayspec serve` under locust: streaming HTTP and gRPC users; TTFT and inter-chunk percentiles."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    log = open(RESULTS / "service_bench_serve.log", "w")
    serve = subprocess.Popen([sys.executable, "-m", "rayspec.cli", "serve"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=log, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = serve.stdout.readline()
            if "rayspec is ready" in line or (not line and serve.poll() is not None):
                break
        if serve.poll() is not None:
            raise RuntimeError(f"rayspec serve exited; see {log.name}")
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for user_class in ("OpenAIHttpUser", "GrpcUser"):
                for count in users:
                    prefix = Path(tmp) / f"{user_class}_{count}"
                    subprocess.run(
                        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest/locustfile.py"), "--headless",
                         "-u", str(count), "-r", str(count), "-t", f"{seconds}s", "--host", "http://127.0.0.1:8000",
                         "--tags", "stream", "--only-summary", "--csv", str(prefix), user_class],
                        cwd=ROOT, env={**env, "RAYSPEC_GRPC": "127.0.0.1:9000", "RAYSPEC_MAX_TOKENS": str(max_tokens)},
                        capture_output=True, text=True, timeout=seconds + 120,
                    )
                    rows.append({"users": count, "client": user_class, **read_locust(prefix)})
                    print(f"  locust: {user_class} x {count}", flush=True)
        return rows
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
        log.close()


def read_locust(prefix: Path) -> dict:
    stats = Path(f"{prefix}_stats.csv")
    out = {"requests": 0, "failures": 0}
    if not stats.exists():
        return out
    for row in csv.DictReader(stats.open()):
        if row["Name"] == "Aggregated":
            continue
        if row["Type"] == "METRIC":
            metric = row["Name"].split(" | ")[-1]
            out[f"{metric} p50"] = float(row["50%"] or 0)
            out[f"{metric} p99"] = float(row["99%"] or 0)
        else:
            out["requests"] += int(row["Request Count"])
            out["failures"] += int(row["Failure Count"])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--tree", default="sequoia:auto")
    parser.add_argument("--placement-prompts", type=int, default=3)
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--locust-seconds", type=int, default=60)
    parser.add_argument("--skip-locust", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "service_bench"))
    args = parser.parse_args()

    target, drafter, target_model, _, _, prompts = load_demo("cpu")
    costs = SpeculativeEngine(target, drafter, tree="chain:1").costs()
    logs = Path(tempfile.mkdtemp())
    workers = [
        Worker(logs / "target.log", "--role", "target", "--model", str(TARGET_PATH)),
        Worker(logs / "drafter.log", "--role", "drafter", "--model", str(DRAFTER_PATH)),
    ]
    try:
        remote_target = RemoteTarget(workers[0].address)
        remote = (remote_target, RemoteDrafter(workers[1].address, remote_target.vocab_size))
        result = {"meta": {**machine("cpu"), **vars(args)}}
        result["overhead"] = overhead((target, drafter), remote, prompts[: args.prompts], args.tokens,
                                      args.temperature, args.verifier, args.tree, costs)
        result["placement"] = placement(workers[0].address, workers[1].address, prompts[: args.placement_prompts],
                                        48, args.temperature, "kary:2x3", costs)
    finally:
        for worker in workers:
            worker.stop()
    if not args.skip_locust:
        result["locust"] = locust_sweep(args.users, args.locust_seconds, 64)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    write_markdown(out.with_suffix(".md"), result)
    print(out.with_suffix(".md").read_text())


def write_markdown(path, result):
    o = result["overhead"]
    s = o["setting"]
    lines = [f"# The distributed path on the demo pair ({result['meta']['device_name']}, {result['meta']['threads']} threads)", "",
             f"## Overhead: plain-process workers on loopback gRPC vs in-process ({s['verifier']}, {s['tree']}, T = {s['temperature']:g})", "",
             "| path | tokens/s | tokens/step | outside compute (gRPC, serialisation, bookkeeping) | bytes/step |",
             "|---|---|---|---|---|"]
    for name in ("in-process", "distributed"):
        r = o[name]
        lines.append(f"| {name} | {r['tokens_per_s']:.1f} | {r['tokens_per_step']:.2f} | {r['other_share'] * 100:.1f} % | {r['bytes_per_step']:.0f} |")
    lines += ["", f"Distributed / in-process tokens/s: **{o['distributed_over_in_process']:.3f}** (goal ≥ 0.90); "
              f"identical tokens for the same seeds: **{o['identical_tokens']}**.", "",
              "## Bytes crossing per step, by verifier and where it runs (tree kary:2x3; single-draft verifiers chain:4; topk dynamic:32)", "",
              "| verifier | verifier at the target (default) | verifier at the coordinator |", "|---|---|---|"]
    for r in result["placement"]:
        lines.append(f"| {r['verifier']} | {r['bytes_per_step_verify_at_target']:.0f} | {r['bytes_per_step_verify_at_coordinator']:.0f} |")
    if result.get("locust"):
        lines += ["", "## Load: `rayspec serve` under locust, streaming requests of 64 tokens", "",
                  "| client | users | requests | failures | TTFT p50 ms | TTFT p99 ms | inter-chunk p50 ms | inter-chunk p99 ms | tokens/s per request p50 |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in result["locust"]:
            lines.append(f"| {r['client']} | {r['users']} | {r['requests']} | {r['failures']} | {r.get('TTFT ms p50', 0):.0f} | "
                         f"{r.get('TTFT ms p99', 0):.0f} | {r.get('inter-chunk ms p50', 0):.0f} | {r.get('inter-chunk ms p99', 0):.0f} | "
                         f"{r.get('tokens/s p50', 0):.1f} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
