"""Adaptive trees: how often the engine re-plans `sequoia:auto` while serving, and what it gains.

    python bench/adaptive_bench.py [--prompts 8] [--tokens 64] [--temperature 0.6] [--start measured|prior]

For each verifier, two engines run `sequoia:auto` from the same measured vector and the same
measured costs, interleaved prompt by prompt: one keeps its start-up plan (adaptive=False),
the other re-estimates the acceptance vector from the ranks it accepts and re-plans when the
predicted gain passes the threshold.  `--start prior` plans both from the engine's default
prior instead of the measured vector: what a new model pair without `rayspec tree measure`
gets, and the case re-planning is for: when that plan is target-only decoding, the adaptive
engine drafts a small probe tree every few steps to learn the vector.  Reported: tokens/step
and tokens/s of both, probe steps, and every re-plan (step, tree before -> after, predicted
gain).
Writes bench/results/adaptive_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import json

import torch

from common import ACCEPTANCE, engine_arm, interleave, load_demo, machine, out_prefix, suffixed
from rayspec.engine import SpeculativeEngine


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifiers", nargs="+", default=["rrsw", "spechub", "rrs", "gumbel"])
    parser.add_argument("--start", choices=["measured", "prior"], default="measured")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None, help="default: bench/results/adaptive_bench[_prior]")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    target, drafter, target_model, _, _, prompts = load_demo()
    costs = SpeculativeEngine(target, drafter, tree="chain:1").costs()
    vectors = ACCEPTANCE if args.start == "measured" else None
    arms = [engine_arm(f"{v} {'adaptive' if adaptive else 'static'}", target, drafter, v, "sequoia:auto",
                       args.temperature, vectors, costs=costs, adaptive=adaptive, adaptive_flag=adaptive)
            for v in args.verifiers for adaptive in (False, True)]
    # no warm-up decode: an adaptive engine would learn from it before the measured ones
    rows = interleave(arms, prompts[: args.prompts], args.tokens, "adaptive", warm_up=False)
    for arm, row in zip(arms, rows):
        policy = arm.engine.policy("sequoia:auto")
        row["replans"] = [{"step": r.step, "before": r.before, "after": r.after, "gain": r.gain}
                          for r in policy.history]
        row["policy_steps"] = policy.steps
        row["probes"] = policy.probes
    result = {"meta": {**machine(target_model.device.type), **vars(args)}, "rows": rows}
    out = out_prefix(args.out, "adaptive_bench" if args.start == "measured" else "adaptive_bench_prior")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2))
    lines = [f"# Adaptive sequoia:auto on the demo pair, planned from the {args.start} vector "
             f"({result['meta']['device_name']}, T = {args.temperature:g}, "
             f"{args.prompts} prompts x {args.tokens} tokens, interleaved)", "",
             "| verifier | trees | tokens/step | tokens/s | probe steps | re-plans (observed step: nodes/depth before -> after, predicted gain) |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        replans = "; ".join(f"{r['step']}: {r['before'][0]}/{r['before'][1]} -> {r['after'][0]}/{r['after'][1]}, "
                            f"{r['gain'] * 100:+.0f} %" for r in row["replans"]) or "-"
        lines.append(f"| {row['verifier']} | {'adaptive' if row['adaptive_flag'] else 'static'} | "
                     f"{row['tokens_per_step']:.2f} | {row['tokens_per_s']:.1f} | {row['probes']} | {replans} |")
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print(suffixed(out, ".md").read_text())


if __name__ == "__main__":
    main()
