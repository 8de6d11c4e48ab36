"""What OpenAI's Predicted Outputs buy: in-process engine on the demo pair (rrsw, the
serving tree sequoia:auto for the drafter), each prompt decoded without a prediction and
with predictions of several qualities, drafted as chains (`rayspec.engine.prediction`).

Predictions, from each prompt's greedy completion (computed first, untimed):
- exact: the greedy completion itself (a file regenerated unchanged);
- edited: the same with 2 of every 32 tokens replaced (a file with scattered edits);
- unrelated: another prompt's greedy completion (a wrong guess).
At T = 0 every arm must give the greedy completion (checked); at T > 0 the completion is a
sample, so it leaves even an exact prediction where the sample leaves the greedy path.  There
the engine may graft the chain beside the drafter's tree (`graft_predictions`): the arms
compare "auto" (the engine's choice by its measured costs, the default), "grafted" (always)
and "alone" (never: the chain instead of the drafter's tree, as at T = 0 and as before
grafting existed).

    python bench/prediction_bench.py [--prompts 8] [--tokens 128] [--rounds 1]

Writes bench/results/prediction_bench.{json,md} (`--out`).  The arms run one after the other on each
prompt, each first in turn; tokens/s is total tokens over total decoding time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import ACCEPTANCE, load_demo, machine, out_prefix, suffixed
from rayspec.engine import GenerationStats, SpeculativeEngine

TEMPERATURES = (0.0, 0.3, 0.6)
MODES = {"auto": "", "always": ", grafted", "never": ", alone"}
# (prediction, tree, graft_predictions); above T = 0 only, but for "auto"
ARMS = [("none", None, "auto"), *[("exact", "chain:8", mode) for mode in MODES], ("exact", "chain:16", "auto"),
        *[(kind, "chain:8", mode) for kind in ("edited", "unrelated") for mode in MODES]]


def edited(tokens: list[int], every: int = 32) -> list[int]:
    """`tokens` with two of every `every` replaced by other tokens."""
    out = list(tokens)
    for start in range(every // 2, len(out) - 1, every):
        out[start], out[start + 1] = (out[start] + 1) % 8192, (out[start + 1] + 7) % 8192
    return out


def label(kind, tree, mode) -> str:
    return "none" if tree is None else f"{kind}, {tree}{MODES[mode]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None, help="default: bench/results/prediction_bench")
    args = parser.parse_args()

    target, drafter, _, _, tokenizer, prompts = load_demo("cpu")
    prompts = prompts[: args.prompts]
    engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="sequoia:auto", acceptance_dir=ACCEPTANCE,
                               adaptive=False, tokenizer=tokenizer)
    engine.run(prompts[0], max_new_tokens=8, seed=0)  # warm-up
    engines = {mode: SpeculativeEngine(target, drafter, verifier="rrsw", tree="sequoia:auto",
                                       acceptance_dir=ACCEPTANCE, adaptive=False, tokenizer=tokenizer,
                                       costs=engine.measured_costs,  # the same trees: no second calibration
                                       graft_predictions=mode) for mode in MODES}
    greedy = [engine.run(p, max_new_tokens=args.tokens, temperature=0.0, seed=0).tokens for p in prompts]
    predictions = [{"exact": g, "edited": edited(g), "unrelated": greedy[(i + 1) % len(greedy)]}
                   for i, g in enumerate(greedy)]
    rows = []
    for temperature in TEMPERATURES:
        arms = [arm for arm in ARMS if temperature > 0 or arm[2] == "auto"]  # at T = 0 the chain is alone
        labels = [label(*arm) for arm in arms]
        totals = {name: [0, 0.0, 0, 0] for name in labels}  # tokens, seconds, steps, accepted drafts
        same = {name: True for name in labels}
        for round_ in range(args.rounds):
            for i, prompt in enumerate(prompts):
                order = list(range(len(arms)))
                order = order[i % len(order):] + order[: i % len(order)]  # each arm first in turn
                for a in order:
                    kind, tree, mode = arms[a]
                    stats, tokens = GenerationStats(), []
                    extra = {} if tree is None else {"prediction": predictions[i][kind], "tree": tree}
                    start = time.perf_counter()
                    for chunk in engines[mode].generate(
                            prompt, max_new_tokens=args.tokens, temperature=temperature, seed=1000 * round_ + i,
                            stats=stats, **extra):
                        tokens += chunk.tokens
                    totals[labels[a]][1] += time.perf_counter() - start
                    totals[labels[a]][0] += len(tokens)
                    totals[labels[a]][2] += len(stats.steps)
                    totals[labels[a]][3] += sum(s.accepted_in_completion for s in stats.steps)
                    if temperature == 0.0:
                        same[labels[a]] &= tokens == greedy[i]
            print(f"  T = {temperature}: round {round_ + 1}/{args.rounds}", flush=True)
        base = totals["none"][0] / totals["none"][1]
        for name in labels:
            tokens, seconds, steps, accepted = totals[name]
            rows.append({"temperature": temperature, "arm": name, "tokens_per_s": tokens / seconds,
                         "vs_none": tokens / seconds / base, "tokens_per_step": tokens / steps, "steps": steps,
                         "accepted_drafts": accepted, "greedy_output": same[name] if temperature == 0.0 else None})
    result = {"setting": {"verifier": "rrsw", "drafter_tree": "sequoia:auto", "prompts": args.prompts,
                          "tokens": args.tokens, "rounds": args.rounds, **machine("cpu")}, "rows": rows}
    out = out_prefix(args.out, "prediction_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Predicted Outputs on the demo pair (in-process, CPU, rrsw; the drafter's tree sequoia:auto)",
        "",
        "| T | prediction | tokens/s | vs none | tokens/step | steps | accepted drafts | the greedy output |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        greedy_output = "" if row["greedy_output"] is None else ("yes" if row["greedy_output"] else "**no**")
        lines.append(f"| {row['temperature']} | {row['arm']} | {row['tokens_per_s']:.1f} | {row['vs_none']:.2f} | "
                     f"{row['tokens_per_step']:.2f} | {row['steps']} | {row['accepted_drafts']} | {greedy_output} |")
    lines += [
        "",
        f"{args.rounds} round(s) of {args.prompts} prompts × {args.tokens} tokens per arm, the arms one after the "
        "other on each prompt, each first in turn.  Exact: the prompt's greedy completion; edited: the same with 2 "
        "of every 32 tokens replaced; unrelated: another prompt's greedy completion.  Chains of 8 or 16 predicted "
        "tokens where the completion follows the prediction, the drafter's sequoia:auto trees elsewhere; above T = 0 "
        "the engine grafts the chain beside the drafter's tree where its measured costs say it pays (the arms "
        "without a mark), always (\"grafted\") or never (\"alone\": the chain instead of the drafter's tree, as at "
        "T = 0).  Accepted drafts: draft tokens kept in the completions (predicted or drafted).",
    ]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
