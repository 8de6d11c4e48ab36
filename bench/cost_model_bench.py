"""The planner's predicted step time against the measured one, per verifier and tree.

    python bench/cost_model_bench.py [--device cuda] [--prompts 4] [--tokens 48]

sequoia:auto chooses a tree by tokens per second predicted from measured costs
(`rayspec.engine.calibrate`: target verifications of n-node trees and drafted levels, timed
with rrsw at T = 1 since 7fa0cff, with greedy before) and an acceptance vector.  Where the
prediction of a step's time misses, the plan does too: on one H100 the target's calibration
trees were stars until 2026-11-27, whose rejection walk tries every child in turn, and the
128-node star was priced at 82 ms against 8 ms scoring and 6 ms verifying a planned 128-node
tree; it is binary trees since.  This bench decodes held-out prompts with each verifier on
fixed trees and on the one-node tree, in-process, and reports the cost model's step time
beside the measured median, and the drafting and verifying phases measured: what the
calibration's verifier misprices for another verifier (its draws, its rows' processing, its
walk) shows there.  Since 2026-11-27 the costs also time each verifier's drafted levels and
its walk on the trees planned for it (`Costs.target_for`); before, every verifier was priced
as rrsw.  Sequoia trees are planned from the demo pair's measured acceptance vectors.  The
measured step is the steps' own wall time; until 2026-11-27 it was a decode's whole time over
its steps, which charged the prompt's prefill to them (a one-node step measured 1.2-1.4x its
prediction, mostly from that).
Writes bench/results/cost_model_bench_{device}.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from common import ACCEPTANCE, load_demo, machine, save_results

from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.engine.policy import step_cost_model

CASES = [("greedy", 0.0), ("rrsw", 0.6), ("spechub", 0.6), ("is", 0.6), ("is-weighted", 0.6), ("spectr", 0.6),
         ("gumbel", 0.6), ("minhash", 0.6), ("sps", 0.6)]
TREES = ["chain:0", "chain:4", "kary:2x3", "sequoia:32", "sequoia:128"]


def decode(engine, prompt, tokens, temperature, seed) -> GenerationStats:
    stats = GenerationStats()
    for _ in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats):
        pass
    return stats


def measure(target, drafter, costs, vocab, verifier, temperature, tree, prompts, tokens) -> dict | None:
    """A row, or None where the verifier cannot verify the tree (a one-draft verifier's k-ary tree)."""
    try:
        engine = SpeculativeEngine(target, drafter, verifier=verifier, tree=tree, costs=costs, adaptive=False,
                                   acceptance_dir=ACCEPTANCE)
    except ValueError as error:
        print(f"{verifier} {tree}: skipped ({error})", flush=True)
        return None
    decode(engine, prompts[0], 16, temperature, seed=0)  # warm-up: kernels, caches, the plan
    shape = engine.policy(tree).shape_for(verifier, temperature)
    steps, phases, per_step = 0, {}, []
    for i, prompt in enumerate(prompts[1:]):
        stats = decode(engine, prompt, tokens, temperature, seed=1 + i)
        # The steps' own wall time: the prompt's prefill, before the first step, is no step's cost.
        per_step.append(sum(step.wall for step in stats.steps) / len(stats.steps))
        steps += len(stats.steps)
        for phase, seconds in stats.phase_seconds().items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    model = step_cost_model(costs, verifier, vocab, temperature=temperature)
    predicted, measured = model.step(shape), statistics.median(per_step)
    return {"verifier": verifier, "temperature": temperature, "tree": tree, "nodes": shape.size,
            "depth": shape.max_depth, "predicted_ms": predicted * 1e3, "measured_ms": measured * 1e3,
            "predicted_draft_ms": (model.draft(shape) + model.overhead) * 1e3,
            "predicted_target_ms": float(model.target_seconds(shape.size)) * 1e3,
            "phase_ms": {phase: seconds / steps * 1e3 for phase, seconds in phases.items()}}


def mean_error(rows) -> float:
    return statistics.fmean(abs(row["measured_ms"] / row["predicted_ms"] - 1) for row in rows)


def markdown(results) -> str:
    m = results["machine"]
    lines = [f"# The planner's step time against the measured one ({m['device_name']}, {m['device']}, "
             f"torch {m['torch']}, {m['threads']} CPU threads)", "",
             f"Demo pair in-process, {results['prompts']} held-out prompts x {results['tokens']} tokens per row, "
             "medians of per-prompt ms per step (the steps' wall time, the prompt's prefill left out).  Predicted: `step_cost_model` from the costs calibrated at start "
             "(rrsw at T = 1, binary trees and parallel chains; each verifier's drafted levels and its walk on its "
             "planned trees, where the costs hold them).  Phases: the engine's own timers, mean per step.  "
             f"Mean |measured / predicted - 1| over the rows: **{mean_error(results['rows']):.1%}**.", "",
             "| verifier | T | tree | nodes, depth | predicted ms | measured ms | measured / predicted "
             "| predicted draft / target ms | measured draft / score / verify / other ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        phases = " / ".join(f"{row['phase_ms'].get(p, 0.0):.2f}" for p in ("draft", "score", "verify", "other"))
        lines.append(f"| {row['verifier']} | {row['temperature']:g} | {row['tree']} | {row['nodes']}, {row['depth']} "
                     f"| {row['predicted_ms']:.2f} | {row['measured_ms']:.2f} | {row['measured_ms'] / row['predicted_ms']:.2f} "
                     f"| {row['predicted_draft_ms']:.2f} / {row['predicted_target_ms']:.2f} | {phases} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--trees", nargs="+", default=TREES)
    parser.add_argument("--verifiers", nargs="+", default=[v for v, _ in CASES])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    target, drafter, target_model, _, _, prompts = load_demo(args.device)
    costs = SpeculativeEngine(target, drafter, tree="chain:1", acceptance_dir=ACCEPTANCE,
                              priced_verifiers=args.verifiers).costs()
    vocab = int(target_model.config.vocab_size)
    results = {"machine": machine(args.device), "prompts": args.prompts, "tokens": args.tokens,
               "costs": costs.to_json(), "rows": []}
    temperatures = dict(CASES)
    with torch.inference_mode():
        for verifier in args.verifiers:
            for tree in args.trees:
                row = measure(target, drafter, costs, vocab, verifier, temperatures.get(verifier, 0.6), tree,
                              prompts[: args.prompts + 1], args.tokens)
                if row is None:
                    continue
                print(f"{verifier} {tree}: predicted {row['predicted_ms']:.2f} ms, measured {row['measured_ms']:.2f}",
                      flush=True)
                results["rows"].append(row)
    save_results(args.out or f"cost_model_bench_{args.device}", results, markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
