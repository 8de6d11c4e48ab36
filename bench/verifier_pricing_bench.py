"""sequoia:auto per verifier: the tree each verifier's costs plan, and what it decodes at.

    python bench/verifier_pricing_bench.py [--verifiers minhash gumbel is-weighted spectr rrsw]
        [--temperature 0.6] [--prompts 6] [--tokens 64] [--tree sequoia:auto] [--out NAME]

sequoia:auto prices trees from costs calibrated at start (`rayspec.engine.calibrate`).  Until
2026-11-27 every verifier was priced as rrsw, the calibration's verifier; since, each
verifier's drafted levels and its walk are timed too (`Costs.target_for`,
`Costs.draft_seconds`).  For each verifier this decodes held-out prompts of the demo pair
in-process with sequoia:auto (seeded, so the tree planned before serving, without
adaptation) and with target-only decoding, interleaved prompt by prompt, and reports the
planned tree, its predicted and measured tokens/s, and the ratio to target-only.  Run it on
two versions of the code in turn (ABBA) to compare them.  Writes
bench/results/{out}.{json,md}.  `--tree` decodes a fixed tree instead of sequoia:auto's,
with the cost model's price for it.
"""

from __future__ import annotations

import argparse

import torch
from common import ACCEPTANCE, engine_arm, interleave, load_demo, machine, save_results

from rayspec.engine import SpeculativeEngine
from rayspec.engine.policy import step_cost_model
from rayspec.tree.sequoia import expected_tokens

VERIFIERS = ["minhash", "gumbel", "is-weighted", "spectr", "rrsw"]


def plan(engine, verifier: str, temperature: float, vocab: int) -> dict:
    """The tree sequoia:auto drafts for seeded requests, with the cost model's figures."""
    policy = engine.policy()
    shape = policy.first_shape(verifier, temperature)
    model = step_cost_model(engine.costs(), verifier, vocab, temperature=temperature)
    vector, _ = engine.library.lookup(verifier, temperature)
    tokens = expected_tokens(shape, vector) if shape.size > 1 else 1.0
    return {"nodes": shape.size, "depth": shape.max_depth, "predicted_ms": model.step(shape) * 1e3,
            "predicted_tokens_per_s": tokens / model.step(shape),
            "predicted_target_only_tokens_per_s": 1.0 / model.baseline}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifiers", nargs="+", default=VERIFIERS)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--tree", default="sequoia:auto", help="the tree to decode (default: sequoia:auto's plan)")
    parser.add_argument("--out", default="verifier_pricing_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, drafter, target_model, _, _, prompts = load_demo("cpu")
    vocab = int(target_model.config.vocab_size)
    costs = SpeculativeEngine(target, drafter, tree="chain:1", acceptance_dir=ACCEPTANCE,
                              priced_verifiers=args.verifiers).costs()
    results = {"machine": machine("cpu"), "args": vars(args), "costs": costs.to_json(), "rows": []}
    with torch.inference_mode():
        for verifier in args.verifiers:
            auto = engine_arm(args.tree, target, drafter, verifier, args.tree, args.temperature, ACCEPTANCE,
                              costs=costs, adaptive=False)
            alone = engine_arm("target-only", target, None, verifier, "none", args.temperature, ACCEPTANCE,
                               costs=costs, adaptive=False)
            rows = interleave([auto, alone], prompts[: args.prompts], args.tokens, verifier)
            results["rows"].append({"verifier": verifier, "plan": plan(auto.engine, verifier, args.temperature, vocab),
                                    "auto": rows[0], "target_only": rows[1],
                                    "ratio": rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"]})
    save_results(args.out, results, markdown(results))
    return 0


def markdown(results) -> str:
    m, a = results["machine"], results["args"]
    tree = a.get("tree", "sequoia:auto")
    lines = [f"# {tree} per verifier ({m['device_name']}, {m['device']}, torch {m['torch']})", "",
             f"Demo pair in-process, {a['prompts']} held-out prompts x {a['tokens']} tokens, T = {a['temperature']:g}, "
             "seeded (the tree planned before serving), interleaved with target-only decoding prompt by prompt.", "",
             "| verifier | planned tree (nodes, depth) | predicted step ms | predicted tokens/s | measured tokens/s "
             f"| target-only tokens/s | {tree} / target-only | measured draft / score / verify / other ms per step |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        auto, plan_ = row["auto"], row["plan"]
        steps = max(auto["steps"], 1)
        phases = " / ".join(f"{auto['phase_seconds'][p] / steps * 1e3:.2f}" for p in ("draft", "score", "verify", "other"))
        lines.append(f"| {row['verifier']} | {plan_['nodes']}, {plan_['depth']} | {plan_['predicted_ms']:.2f} "
                     f"| {plan_['predicted_tokens_per_s']:.1f} | {auto['tokens_per_s']:.1f} "
                     f"| {row['target_only']['tokens_per_s']:.1f} | **{row['ratio']:.2f}** | {phases} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
