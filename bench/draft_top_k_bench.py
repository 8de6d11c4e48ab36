"""A drafter kept to its k likeliest tokens (`draft_top_k`): bytes per step, acceptance, speed.

    python bench/draft_top_k_bench.py [--ks 0 64 16] [--trees kary:2x3 sequoia:128] [--prompts 6] [--tokens 48]

Demo pair, rrsw at T = 0.6.  For each tree: a target worker and one drafter worker per k, as
plain processes on loopback gRPC, driven by the same engine, and the in-process engine with
the same k, all decoding the same prompts with the same seeds, interleaved prompt by prompt.
Every process computes with one torch thread (identical arithmetic, so the distributed arm of
each k gives the in-process arm's tokens: checked).  Reported per k: tokens per step (what the
truncation costs in acceptance), tokens/s, and the bytes a step sends across processes.
Writes bench/results/draft_top_k_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import ACCEPTANCE, Arm, interleave, load_demo, machine, save_results

from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import GenerationStats, LocalDrafter, SpeculativeEngine
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

VERIFIER, TEMPERATURE = "rrsw", 0.6


def arm(name, target, drafter, tree, outputs: dict, wire: dict) -> Arm:
    engine = SpeculativeEngine(target, drafter, verifier=VERIFIER, tree=tree, acceptance_dir=ACCEPTANCE,
                               adaptive=False)

    def run(prompt, tokens, seed):
        stats = GenerationStats()
        produced = [token for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=TEMPERATURE,
                                                        seed=seed, stats=stats) for token in chunk.tokens]
        outputs.setdefault(name, {})[seed] = produced
        wire[name] = wire.get(name, 0) + sum(step.wire_bytes for step in stats.steps)
        return stats.tokens, len(stats.steps), stats.phase_seconds()

    return Arm(name, run)


def markdown(results) -> str:
    m = results["machine"]
    lines = [f"# draft_top_k: a drafter kept to its k likeliest tokens ({m['device_name']}, {m['device']}, "
             f"torch {m['torch']}, 1 torch thread per process)", "",
             f"Demo pair (V = 8192), {VERIFIER} at T = {TEMPERATURE:g}, {results['prompts']} held-out prompts x "
             f"{results['tokens']} tokens, interleaved; distributed: target and drafter workers on loopback gRPC.  "
             "k = 0 is the whole law.", "",
             "| tree | k | path | tokens/step | tokens/s | vs k = 0 on the same path | bytes/step | same tokens as in-process |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        lines.append(f"| {row['tree']} | {row['k']} | {row['path']} | {row['tokens_per_step']:.2f} | {row['tokens_per_s']:.1f} "
                     f"| {row['vs_full']:.2f}x | {row['bytes_per_step']:,.0f} | {row.get('same_tokens', '-')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 64, 16])
    parser.add_argument("--trees", nargs="+", default=["kary:2x3", "sequoia:128"])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--out", default="draft_top_k_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, _, _, drafter_model, tokenizer, prompts = load_demo("cpu")
    prompts = prompts[1 : 1 + args.prompts]
    logs = Path(tempfile.mkdtemp())
    workers = [Worker(logs / "target.log", "--role", "target", "--model", str(TARGET_PATH), "--prefix-cache-mb", "0")]
    try:
        drafters = {k: Worker(logs / f"drafter-{k}.log", "--role", "drafter", "--model", str(DRAFTER_PATH),
                              "--prefix-cache-mb", "0", "--draft-top-k", str(k)) for k in args.ks}
        workers += drafters.values()
        results = {"machine": machine("cpu"), "prompts": len(prompts), "tokens": args.tokens, "rows": []}
        for tree in args.trees:
            outputs, wire, arms = {}, {}, []
            for k in args.ks:
                local = LocalDrafter(drafter_model, tokenizer, draft_top_k=k, prefix_cache_mb=0)
                remote_target = RemoteTarget(workers[0].address)
                remote = RemoteDrafter(drafters[k].address, remote_target.vocab_size)
                arms += [arm(f"in-process {k}", target, local, tree, outputs, wire),
                         arm(f"distributed {k}", remote_target, remote, tree, outputs, wire)]
            for each in arms:  # warm-up (kernels, caches, the plan), not counted
                each.run(prompts[0], 16, 0)
            outputs.clear()
            wire.clear()
            rows = {row["config"]: row for row in interleave(arms, prompts, args.tokens, tree, warm_up=False)}
            for k in args.ks:
                for path in ("in-process", "distributed"):
                    row, full = rows[f"{path} {k}"], rows[f"{path} {args.ks[0]}"]
                    entry = {"tree": tree, "k": k, "path": path, **{key: row[key] for key in
                                                                     ("tokens_per_step", "tokens_per_s", "steps")},
                             "vs_full": row["tokens_per_s"] / full["tokens_per_s"],
                             "bytes_per_step": wire.get(f"{path} {k}", 0) / row["steps"]}
                    if path == "distributed":
                        entry["same_tokens"] = outputs[f"distributed {k}"] == outputs[f"in-process {k}"]
                    results["rows"].append(entry)
    finally:
        for worker in workers:
            worker.stop()
    save_results(args.out, results, markdown(results))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
