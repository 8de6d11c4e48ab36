"""What cross-request batching (`rayspec.models.batching`) buys under load: the demo pair,
rrsw at T = 0.6, with C generations running at once over one engine, both models' batchers on
(the defaults) against off (`max_batch_sequences=1`: one sequence per forward, as before
batching).

Every arm plans `sequoia:auto` from one measurement of the in-process step costs, so that
both arms of a path decode the same trees (an engine left to measure its own would plan
from its own figures, and the arms would compare different trees).

For each concurrency C and tree, the two arms run in the order off, on, on, off (each round
C x `--rounds` requests of `--tokens` tokens over the held-out prompts, seeds paired between
the arms), so that a slow stretch of this shared machine falls on both.  Per arm: total tokens
per second over the wall time (throughput), the median request's tokens per second, time to
first token, the mean number of sequences per forward of each model, and how many completions
differ from the other arm's (batching is exact in law, not in bits).

Arms:
- in-process: one engine over `LocalTarget` / `LocalDrafter` in this process;
- distributed (`--distributed`): target and drafter workers as plain processes on loopback
  gRPC (`python -m rayspec.rpc.worker`, started here with `--max-batch-sequences 1` for the off
  arm), the engine here over remote handles.

    python bench/batching_bench.py [--users 1 4 16] [--trees sequoia:auto kary:2x3] [--distributed]

Writes bench/results/batching_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from common import ACCEPTANCE, load_demo, machine, save_results
from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import GenerationStats, LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models.threads import honour_torch_threads
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

TEMPERATURE = 0.6


def decode(engine: SpeculativeEngine, prompt: list[int], tokens: int, seed: int,
           replayable: bool | None = None) -> dict:
    stats = GenerationStats()
    start = time.perf_counter()
    first, produced = None, []
    for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=TEMPERATURE, seed=seed, stats=stats,
                                 replayable=replayable):
        if first is None and chunk.tokens:
            first = time.perf_counter() - start
        produced += chunk.tokens
    seconds = time.perf_counter() - start
    return {"tokens": produced, "seconds": seconds, "first": first or seconds, "steps": len(stats.steps),
            "stats": stats}


def run_arm(engine, prompts, users: int, rounds: int, tokens: int, replayable: bool | None = None) -> dict:
    """C = `users` requests at a time until users x rounds have run; the figures of the arm.
    Sequences per forward as the steps report them (the target's, and the drafter's means).
    replayable: as `generate`'s (None: seeded requests are)."""
    requests = [(prompts[i % len(prompts)], 1000 + i) for i in range(users * rounds)]
    start = time.perf_counter()
    with ThreadPoolExecutor(users, initializer=honour_torch_threads) as pool:
        results = list(pool.map(lambda r: decode(engine, r[0], tokens, r[1], replayable), requests))
    wall = time.perf_counter() - start
    total = sum(len(r["tokens"]) for r in results)
    steps = [step for r in results for step in r["stats"].steps]
    drafted = [step.drafter_batch for step in steps if step.drafter_batch]
    shared = [statistics.mean(step.target_batch for step in steps), statistics.mean(drafted) if drafted else 0.0]
    return {
        "requests": len(results), "tokens": total, "wall_seconds": wall, "tokens_per_s": total / wall,
        "median_request_tokens_per_s": statistics.median(len(r["tokens"]) / r["seconds"] for r in results),
        "median_ttft_ms": 1e3 * statistics.median(r["first"] for r in results),
        "tokens_per_step": total / max(sum(r["steps"] for r in results), 1),
        "target_sequences_per_forward": shared[0], "drafter_sequences_per_forward": shared[1],
        "completions": [r["tokens"] for r in results],
    }


def merged(runs: list[dict]) -> dict:
    """Two runs of one arm as one: totals summed, medians of the two."""
    tokens, wall = sum(r["tokens"] for r in runs), sum(r["wall_seconds"] for r in runs)
    row = {"requests": sum(r["requests"] for r in runs), "tokens": tokens, "wall_seconds": wall,
           "tokens_per_s": tokens / wall, "runs_tokens_per_s": [r["tokens_per_s"] for r in runs]}
    for key in ("median_request_tokens_per_s", "median_ttft_ms", "tokens_per_step",
                "target_sequences_per_forward", "drafter_sequences_per_forward"):
        row[key] = statistics.mean(r[key] for r in runs)
    return row


def in_process_arms(target_model, drafter_model, tokenizer, tree: str, costs) -> dict:
    """{"off": engine, "on": engine}: one engine per arm over the same models."""
    arms = {}
    for name, sequences in (("off", 1), ("on", None)):
        limits = {} if sequences is None else {"max_batch_sequences": sequences}
        target = LocalTarget(target_model, tokenizer, prefix_cache_mb=0, **limits)
        drafter = LocalDrafter(drafter_model, tokenizer, prefix_cache_mb=0, **limits)
        arms[name] = SpeculativeEngine(target, drafter, verifier="rrsw", tree=tree, acceptance_dir=ACCEPTANCE,
                                       costs=costs)
    return arms


def worker_arms(tree: str, costs, logs: Path, workers: list) -> dict:
    """{"off": engine, "on": engine} over plain-process workers on loopback gRPC, a target and
    a drafter per arm (one torch thread each, no prefix cache), appended to `workers`."""
    arms = {}
    for name, sequences in (("off", "1"), ("on", None)):
        limits = () if sequences is None else ("--max-batch-sequences", sequences)
        target = Worker(logs / f"target-{name}.log", "--role", "target", "--model", str(TARGET_PATH),
                        "--prefix-cache-mb", "0", *limits)
        workers.append(target)
        drafter = Worker(logs / f"drafter-{name}.log", "--role", "drafter", "--model", str(DRAFTER_PATH),
                         "--prefix-cache-mb", "0", *limits)
        workers.append(drafter)
        remote_target = RemoteTarget(target.address)
        arms[name] = SpeculativeEngine(remote_target, RemoteDrafter(drafter.address, remote_target.vocab_size),
                                       verifier="rrsw", tree=tree, acceptance_dir=ACCEPTANCE, costs=costs)
    return arms


def compare(arms: dict, prompts, users: int, rounds: int, tokens: int, label: str) -> dict:
    runs = {"off": [], "on": []}
    for name in ("off", "on", "on", "off"):
        runs[name].append(run_arm(arms[name], prompts, users, rounds, tokens))
        print(f"  {label}, {users} at a time, batching {name}: {runs[name][-1]['tokens_per_s']:.1f} tokens/s",
              flush=True)
    differing = sum(a != b for run_off, run_on in zip(runs["off"], runs["on"])
                    for a, b in zip(run_off["completions"], run_on["completions"]))
    off, on = merged(runs["off"]), merged(runs["on"])
    return {"users": users, "off": off, "on": on, "speedup": on["tokens_per_s"] / off["tokens_per_s"],
            "differing_completions": differing, "completions": off["requests"]}


def markdown(results: dict) -> str:
    lines = [
        "# Cross-request batching on the demo pair",
        "",
        f"{results['machine']['device_name']}, {results['machine']['device']}, torch {results['machine']['torch']}, "
        f"{results['machine']['threads']} torch threads; rrsw, T = {TEMPERATURE}, {results['tokens']} tokens per "
        f"request, {results['rounds']} requests per user per run, arms run off, on, on, off.",
        "",
        "| path | tree | users | tokens/s off | tokens/s on | **speed-up** | request tokens/s off / on (median) "
        "| TTFT ms off / on (median) | sequences per forward, target / drafter (on) | tokens/step off / on "
        "| completions differing |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        off, on = row["off"], row["on"]
        lines.append(
            f"| {row['path']} | {row['tree']} | {row['users']} | {off['tokens_per_s']:.1f} | {on['tokens_per_s']:.1f} "
            f"| **{row['speedup']:.2f}** | {off['median_request_tokens_per_s']:.1f} / "
            f"{on['median_request_tokens_per_s']:.1f} | {off['median_ttft_ms']:.0f} / {on['median_ttft_ms']:.0f} "
            f"| {on['target_sequences_per_forward']:.2f} / {on['drafter_sequences_per_forward']:.2f} "
            f"| {off['tokens_per_step']:.2f} / {on['tokens_per_step']:.2f} "
            f"| {row['differing_completions']} of {row['completions']} |")
    lines += ["", "Tokens/s: all requests' tokens over the runs' wall time (two runs per arm, summed).  "
              "Completions differing: same prompt and seed, batching off against on (exact in law, not in bits)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--trees", nargs="+", default=["sequoia:auto", "kary:2x3"])
    parser.add_argument("--rounds", type=int, default=2, help="requests per user in each run")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--distributed", action="store_true", help="also over plain-process gRPC workers")
    parser.add_argument("--out", default="batching_bench")
    args = parser.parse_args()
    target, drafter, target_model, drafter_model, tokenizer, prompts = load_demo()
    costs = SpeculativeEngine(target, drafter, tree="chain:1").costs()
    results = {"machine": machine(str(next(target_model.parameters()).device)), "tokens": args.tokens,
               "rounds": args.rounds, "costs": costs.to_json(), "rows": []}
    logs, workers = Path(tempfile.mkdtemp()), []
    try:
        for tree in args.trees:
            paths = {"in-process": in_process_arms(target_model, drafter_model, tokenizer, tree, costs)}
            if args.distributed:
                paths["distributed"] = worker_arms(tree, costs, logs, workers)
            for path, arms in paths.items():
                for engine in arms.values():  # warm-up: kernels, caches, the Sequoia plan
                    engine.run(prompts[0], max_new_tokens=8, seed=0)
                for users in args.users:
                    row = compare(arms, prompts, users, args.rounds, args.tokens, f"{path} {tree}")
                    results["rows"].append({"path": path, "tree": tree, **row})
            for worker in workers:  # a tree's workers are done with
                worker.stop()
            workers.clear()
    finally:
        for worker in workers:
            worker.stop()
    save_results(args.out, results, markdown(results))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
