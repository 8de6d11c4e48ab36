"""Load-aware trees (`rayspec.engine.policy`): sequoia:auto with and without pricing its trees
for the sequences decoding at once, beside target-only decoding, on the demo pair (rrsw,
T = 0.6, cross-request batching on, as served): in-process, and with `--distributed` over
plain-process workers on loopback gRPC (the engine here over remote handles, as the service's
coordinator).

A path's arms plan from one measurement of its step costs (per-sequence load terms included).
Requests are not replayable (`replayable=False`, as requests without a seed are), since
requests with a seed keep the tree planned for one sequence.  For each number of users C,
the arms run in the order aware, unaware, target-only and back (each run C x `--rounds`
requests of `--tokens` tokens over the held-out prompts), so that a slow stretch of this
shared machine falls on all.  Per arm: total tokens per second over the wall time, tokens
per step (a tree that drafts gives more), and, for the load-aware arm, what its trial at
the load it saw most measured and chose.

    python bench/load_aware_bench.py [--users 1 4 16] [--rounds 4] [--tokens 64] [--distributed]

Writes bench/results/load_aware_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from batching_bench import TEMPERATURE, merged, run_arm
from common import ACCEPTANCE, load_demo, machine, save_results
from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import SpeculativeEngine
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

ARMS = ("aware", "unaware", "target-only")


def engines(target, drafter, costs) -> dict:
    def engine(tree, load_aware=True):
        return SpeculativeEngine(target, drafter, verifier="rrsw", tree=tree, acceptance_dir=ACCEPTANCE, costs=costs,
                                 load_aware=load_aware)

    return {"aware": engine("sequoia:auto"), "unaware": engine("sequoia:auto", load_aware=False),
            "target-only": engine("chain:0")}


def trial_state(engine) -> dict:
    """The load-aware policy's trials: per load level, the drafting tree, the measured rates and
    turns, and the choice (what `/metrics` exports)."""
    return {str(report.sequences): {"drafting_tree_nodes": report.drafting_nodes,
                                    "chosen": report.choice or "undecided", "tokens_per_s": list(report.rates),
                                    "turns": list(report.turns)}
            for _, _, report in engine.tree_trials()}


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# Load-aware trees on the demo pair",
        "",
        f"{m['device_name']}, {m['device']}, torch {m['torch']}, {m['threads']} torch threads; rrsw, T = {TEMPERATURE}, "
        f"{results['tokens']} tokens per request, {results['rounds']} requests per user per run, not replayable, "
        "batching on; arms run aware, unaware, target-only and back.",
        "",
        "| path | users | tokens/s aware | tokens/s unaware | tokens/s target-only | **aware / unaware** "
        "| aware / target-only | tokens/step aware / unaware | planned for one sequence |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        a, u, t = (row[name] for name in ARMS)
        lines.append(f"| {row['path']} | {row['users']} | {a['tokens_per_s']:.1f} | {u['tokens_per_s']:.1f} "
                     f"| {t['tokens_per_s']:.1f} | **{a['tokens_per_s'] / u['tokens_per_s']:.2f}** "
                     f"| {a['tokens_per_s'] / t['tokens_per_s']:.2f} | {a['tokens_per_step']:.2f} / "
                     f"{u['tokens_per_step']:.2f} | {results['one_sequence_tree'][row['path']]} |")
    lines += ["", "Tokens/s: all requests' tokens over the runs' wall time (two runs per arm, summed).  The load-aware "
              "arm's trials at the end (level: drafting tree nodes, tokens/s measured drafting / target-only, "
              "turns measured of each, chosen):"]
    for path, trials in results["trials"].items():
        for level, trial in trials.items():
            rates = " / ".join("-" if r is None else f"{r:.1f}" for r in trial["tokens_per_s"])
            turns = " / ".join(str(n) for n in trial["turns"])
            lines.append(f"- {path}, {level} sequences: {trial['drafting_tree_nodes']} nodes, {rates} "
                         f"({turns} turns), {trial['chosen']}")
    return "\n".join(lines) + "\n"


def compare(arms: dict, prompts, users: int, rounds: int, tokens: int, path: str) -> dict:
    runs = {name: [] for name in ARMS}
    for name in (*ARMS, *reversed(ARMS)):
        run = run_arm(arms[name], prompts, users, rounds, tokens, replayable=False)
        run.pop("completions")
        runs[name].append(run)
        print(f"  {path}, {users} at a time, {name}: {run['tokens_per_s']:.1f} tokens/s, "
              f"{run['tokens_per_step']:.2f} tokens/step", flush=True)
    return {"path": path, "users": users, **{name: merged(r) for name, r in runs.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=4, help="requests per user in each run")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--distributed", action="store_true", help="also over plain-process gRPC workers")
    parser.add_argument("--out", default="load_aware_bench")
    args = parser.parse_args()
    target, drafter, target_model, _, _, prompts = load_demo()
    results = {"machine": machine(str(next(target_model.parameters()).device)), "tokens": args.tokens,
               "rounds": args.rounds, "costs": {}, "one_sequence_tree": {}, "trials": {}, "rows": []}
    workers = []
    try:
        paths = {"in-process": (target, drafter)}
        if args.distributed:
            logs = Path(tempfile.mkdtemp())
            for role, model in (("target", TARGET_PATH), ("drafter", DRAFTER_PATH)):
                workers.append(Worker(logs / f"{role}.log", "--role", role, "--model", str(model),
                                      "--prefix-cache-mb", "0"))
            remote_target = RemoteTarget(workers[0].address)
            paths["distributed"] = (remote_target, RemoteDrafter(workers[1].address, remote_target.vocab_size))
        for path, (path_target, path_drafter) in paths.items():
            costs = SpeculativeEngine(path_target, path_drafter, tree="chain:1").costs()
            arms = engines(path_target, path_drafter, costs)
            for engine in arms.values():  # warm-up: kernels and the Sequoia plan
                engine.run(prompts[0], max_new_tokens=8, seed=0)
            results["costs"][path] = costs.to_json()
            results["one_sequence_tree"][path] = f"{arms['aware'].policy().shape_for('rrsw', TEMPERATURE).size} nodes"
            for users in args.users:
                results["rows"].append(compare(arms, prompts, users, args.rounds, args.tokens, path))
            results["trials"][path] = trial_state(arms["aware"])
    finally:
        for worker in workers:
            worker.stop()
    save_results(args.out, results, markdown(results))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
