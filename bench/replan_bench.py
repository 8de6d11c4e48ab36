"""What re-planning checks cost adaptive sequoia:auto decoding, with and without their back-off.

    python bench/replan_bench.py [--prompts 30] [--tokens 128] [--rounds 2] [--temperature 0.6] [--device cuda]
                                 [--tree sequoia:auto] [--arms NAME ...] [--out replan_bench]

An adaptive Sequoia policy re-runs the dynamic program on its running acceptance estimate
to check whether another tree would now be faster (`rayspec.engine.policy.SequoiaTrees`).
sequoia:auto's program covers 128 nodes and 10 levels.  Four arms decode the demo pair's
held-out prompts in-process, interleaved prompt by prompt, from the same calibrated costs
(rrsw): when the checks come, and where they run.

  every 32 steps   a check every `replan_every` = 32 steps of the running estimate (rayspec
                   before 2026-11-27: `max_replan_every` = `replan_every`)
  back-off         each check that keeps the tree doubles the steps to the next, up to
                   8 x 32 (the default)
  in the step      the step that brings a check runs it (rayspec before 2026-11-28:
                   `background_checks` = False)
  beside it        on a thread of its own, the steps going on meanwhile (the default)

Each arm's engine keeps its policy over all prompts and `--rounds` passes over them, as a
server's does.  Requests are seeded but not replayable, so they draft the adapted trees.
Reported: tokens/s, tokens per step, each step's wall time (median, p99, p99.9, longest: a
check run in the step lengthens that step), and what the policy reports to `/metrics`
(`SequoiaTrees.plans`): the checks made, their mean time and their share of the decoding
time, the changes of tree and the tree at the end.  Writes bench/results/{out}.{json,md}.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import torch
from common import ACCEPTANCE, engine_arm, interleave, load_demo, machine, save_results

from rayspec.engine import SpeculativeEngine
from rayspec.engine.policy import DEFAULT_DEPTH, AcceptanceLibrary, SequoiaSpec, SequoiaTrees

ARMS = {  # name: (max_replan_every / replan_every, background_checks)
    "every 32 steps, in the step": (1, False),
    "every 32 steps, beside it": (1, True),
    "back-off, in the step": (8, False),
    "back-off, beside it": (8, True),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--tree", default="sequoia:auto", help="an adaptive Sequoia tree: sequoia:auto, sequoia:512")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--device", default="cpu", help="where the models compute; the checks run on the CPU")
    parser.add_argument("--stall-budgets", type=int, nargs="*", default=[128, 512, 1024],
                        help="sequoia:N trees whose check is timed alone and beside target forwards (none: skip)")
    parser.add_argument("--out", default="replan_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, drafter, target_model, _, _, prompts = load_demo(args.device)
    costs = SpeculativeEngine(target, drafter, verifier=args.verifier, tree="chain:1", acceptance_dir=ACCEPTANCE).costs()
    arms = []
    for name in args.arms:
        factor, background = ARMS[name]
        arm = engine_arm(name, target, drafter, args.verifier, args.tree, args.temperature, ACCEPTANCE, costs=costs)
        policy = arm.engine.policy()
        policy.max_replan_every = factor * policy.replan_every
        policy.background_checks = background
        arms.append(arm)
    with torch.inference_mode():
        rows = None
        for round_ in range(args.rounds):
            rows = interleave(arms, prompts[: args.prompts], args.tokens, f"round {round_ + 1}", warm_up=round_ == 0)
    for row, arm in zip(rows, arms):
        arm.engine.policy().wait_for_checks()
        # what the policy reports to /metrics, for the (verifier, temperature) decoded
        [report] = [report for verifier, temperature, report in arm.engine.policy().plans()
                    if (verifier, temperature) == (args.verifier, round(args.temperature, 1))]
        row.update(checks=report.checks, check_seconds=report.check_seconds,
                   mean_check_ms=1e3 * report.check_seconds / max(report.checks, 1),
                   check_share=report.check_seconds / row["seconds"], replans=report.replans,
                   final_tree=[report.nodes, report.depth])
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["vs_first"] = row["tokens_per_s"] / base
    stalls = [stall(budget, target_model, prompts[0][:64], args) for budget in args.stall_budgets]
    results = {"machine": machine(args.device), "args": vars(args), "rows": rows, "stalls": stalls}
    save_results(args.out, results, markdown(results))
    return 0


def stall(budget: int, target_model, prompt_ids, args, repeats: int = 3) -> dict:
    """What a sequoia:`budget` check costs the decoding thread: run in it, its whole time; run
    beside it, the time the thread's target forwards (over `prompt_ids`, a step whose time is
    mostly in kernels) lose while the check runs.  Medians over `repeats`."""
    policy = SequoiaTrees(SequoiaSpec(budget, DEFAULT_DEPTH), AcceptanceLibrary(ACCEPTANCE), adaptive=False)
    current = policy.shape_for(args.verifier, args.temperature)
    vector, _ = policy.library.lookup(args.verifier, args.temperature)
    ids = torch.tensor([prompt_ids], device=args.device)

    def forward() -> float:
        started = time.perf_counter()
        target_model(ids)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def check() -> float:
        started = time.perf_counter()
        policy._replan(args.verifier, current, vector)
        return time.perf_counter() - started

    alone, beside, lost, forward_ms = [], [], [], []
    with torch.inference_mode():
        for _ in range(repeats):
            alone.append(check())
            quiet = float(np.median([forward() for _ in range(10)]))
            timed = {}
            thread = threading.Thread(target=lambda: timed.setdefault("seconds", check()))
            thread.start()
            during = []
            while thread.is_alive():
                during.append(forward())
            thread.join()
            beside.append(timed["seconds"])
            lost.append(sum(during) - len(during) * quiet)
            forward_ms.append(quiet)
    return {"budget": budget, "tree": [current.size, current.max_depth], "forward_ms": 1e3 * np.median(forward_ms),
            "check_alone_ms": 1e3 * np.median(alone), "check_beside_ms": 1e3 * np.median(beside),
            "forwards_lost_ms": 1e3 * np.median(lost)}


def markdown(results) -> str:
    args = results["args"]
    lines = [
        f"# Re-planning checks in adaptive {args['tree']} ({args['verifier']}, T = {args['temperature']}, "
        f"{args['prompts']} prompts x {args['tokens']} tokens x {args['rounds']} rounds, in-process, "
        f"{results['machine']['device_name']})",
        "",
        "| arm | tokens/s | vs the first | tokens/step | steps | step ms: median / p99 / p99.9 / longest | checks | "
        "mean check ms | checks' share of the time | tree changes | final tree (nodes, depth) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        step = row["step_ms"]
        lines.append(
            f"| {row['config']} | {row['tokens_per_s']:.1f} | **{row['vs_first']:.3f}** | "
            f"{row['tokens_per_step']:.2f} | {row['steps']} | {step['p50']:.1f} / {step['p99']:.1f} / "
            f"{step['p999']:.1f} / {step['max']:.1f} | {row['checks']} | {row['mean_check_ms']:.1f} | "
            f"{100 * row['check_share']:.1f} % | {row['replans']} | {tuple(row['final_tree'])} |")
    lines += ["", "Tokens/s, steps and step times over every round; the checks also count those of the one short "
              "warm-up decode per arm before the first round.  A check's time beside the steps is its own "
              "thread's wall time: not time the steps waited."]
    if results["stalls"]:
        lines += [
            "", "## A check's cost to the decoding thread, by tree size",
            "",
            "A sequoia:N check (Sequoia's program at budget N, depth 10) run in the decoding thread holds it up for its "
            "whole time; run beside it, it costs that thread what its target forwards (here over a 64-token prompt, "
            "a step whose time is mostly in kernels) lose while the check runs.  Medians of 3.",
            "",
            "| tree | target forward ms | check in the step, ms | check beside it: its own ms | beside it: ms the "
            "forwards lost |",
            "|---|---|---|---|---|",
        ]
        for row in results["stalls"]:
            lines.append(f"| sequoia:{row['budget']} ({row['tree'][0]} nodes, depth {row['tree'][1]}) | "
                         f"{row['forward_ms']:.1f} | {row['check_alone_ms']:.1f} | {row['check_beside_ms']:.1f} | "
                         f"**{row['forwards_lost_ms']:.1f}** |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
