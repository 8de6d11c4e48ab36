"""What re-planning checks cost adaptive sequoia:auto decoding, with and without their back-off.

    python bench/replan_bench.py [--prompts 30] [--tokens 128] [--rounds 2] [--temperature 0.6] [--device cuda]
                                 [--out replan_bench]

An adaptive Sequoia policy re-runs the dynamic program on its running acceptance estimate
to check whether another tree would now be faster (`rayspec.engine.policy.SequoiaTrees`).
sequoia:auto's program covers 128 nodes and 10 levels.  Two arms decode the demo pair's
held-out prompts in-process, interleaved prompt by prompt, from the same calibrated costs
(rrsw):

  every 32 steps   a check every `replan_every` = 32 steps of the running estimate (rayspec
                   before 2026-11-27: `max_replan_every` = `replan_every`)
  back-off         each check that keeps the tree doubles the steps to the next, up to
                   8 x 32 (the default)

Each arm's engine keeps its policy over all prompts and `--rounds` passes over them, as a
server's does.  Requests are seeded but not replayable, so they draft the adapted trees.
Reported: tokens/s, tokens per step, and what the policy reports to `/metrics`
(`SequoiaTrees.plans`): the checks made, their mean time and their share of the decoding time,
the changes of tree and the tree at the end.  Writes bench/results/{out}.{json,md}.
"""

from __future__ import annotations

import argparse

import torch
from common import ACCEPTANCE, engine_arm, interleave, load_demo, machine, save_results

from rayspec.engine import SpeculativeEngine

ARMS = {"every 32 steps": 1, "back-off": 8}  # name: max_replan_every / replan_every


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--device", default="cpu", help="where the models compute; the checks run on the CPU")
    parser.add_argument("--out", default="replan_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, drafter, _, _, _, prompts = load_demo(args.device)
    costs = SpeculativeEngine(target, drafter, verifier=args.verifier, tree="chain:1", acceptance_dir=ACCEPTANCE).costs()
    arms = []
    for name, factor in ARMS.items():
        arm = engine_arm(name, target, drafter, args.verifier, "sequoia:auto", args.temperature, ACCEPTANCE, costs=costs)
        policy = arm.engine.policy()
        policy.max_replan_every = factor * policy.replan_every
        arms.append(arm)
    with torch.inference_mode():
        rows = None
        for round_ in range(args.rounds):
            rows = interleave(arms, prompts[: args.prompts], args.tokens, f"round {round_ + 1}", warm_up=round_ == 0)
    for row, arm in zip(rows, arms):
        # what the policy reports to /metrics, for the (verifier, temperature) decoded
        [report] = [report for verifier, temperature, report in arm.engine.policy().plans()
                    if (verifier, temperature) == (args.verifier, round(args.temperature, 1))]
        row.update(checks=report.checks, check_seconds=report.check_seconds,
                   mean_check_ms=1e3 * report.check_seconds / max(report.checks, 1),
                   check_share=report.check_seconds / row["seconds"], replans=report.replans,
                   final_tree=[report.nodes, report.depth])
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["vs_every_32"] = row["tokens_per_s"] / base
    results = {"machine": machine(args.device), "args": vars(args), "rows": rows}
    save_results(args.out, results, markdown(results))
    return 0


def markdown(results) -> str:
    args = results["args"]
    lines = [
        f"# Re-planning checks in adaptive sequoia:auto ({args['verifier']}, T = {args['temperature']}, "
        f"{args['prompts']} prompts x {args['tokens']} tokens x {args['rounds']} rounds, in-process, "
        f"{results['machine']['device_name']})",
        "",
        "| arm | tokens/s | vs every 32 steps | tokens/step | steps | checks | mean check ms | checks' share of "
        "the time | tree changes | final tree (nodes, depth) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['config']} | {row['tokens_per_s']:.1f} | **{row['vs_every_32']:.3f}** | "
            f"{row['tokens_per_step']:.2f} | {row['steps']} | {row['checks']} | {row['mean_check_ms']:.1f} | "
            f"{100 * row['check_share']:.1f} % | {row['replans']} | {tuple(row['final_tree'])} |")
    lines += ["", "Tokens/s and steps over every round; the checks also count those of the one short warm-up "
              "decode per arm before the first round."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
