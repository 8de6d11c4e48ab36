"""A drafter and a target whose embeddings are padded to different sizes: what fitting the
drafter's laws to the target's width costs.

    python bench/padded_vocab_bench.py [--padding 128] [--prompts 24] [--tokens 64]

Demo pair (V = 8192), rrsw at T = 0.6 on kary:2x3, in-process, one torch thread, the arms
decoding the same held-out prompts with the same seeds, interleaved prompt by prompt:

- the pair as trained (the same size);
- the drafter padded by `--padding` rows (as Qwen2.5 pads, to a multiple of 128): its extra
  columns are cut, so its laws are the unpadded drafter's and the tokens must be the first
  arm's (checked);
- the target padded likewise: the drafter's laws get columns of no mass (`fit_vocabulary`),
  and the target's law has the padding rows' (new, untrained) share, so its tokens may
  differ; the padding ids it emitted are counted.

Padding rows are added as `transformers` adds them (`resize_token_embeddings`,
`mean_resizing=False`: the model's own initialiser).  Writes
bench/results/padded_vocab_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import copy

import torch
from common import Arm, interleave, load_demo, machine, save_results

from rayspec.engine import GenerationStats, LocalDrafter, LocalTarget, SpeculativeEngine

VERIFIER, TREE, TEMPERATURE = "rrsw", "kary:2x3", 0.6


def padded(model, rows: int):
    model = copy.deepcopy(model)
    model.resize_token_embeddings(model.config.vocab_size + rows, mean_resizing=False)
    return model.eval()


def arm(name, target, drafter, tokenizer, outputs: dict) -> Arm:
    engine = SpeculativeEngine(target, drafter, verifier=VERIFIER, tree=TREE, tokenizer=tokenizer, adaptive=False)

    def run(prompt, tokens, seed):
        stats = GenerationStats()
        produced = [token for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=TEMPERATURE,
                                                        seed=seed, stats=stats) for token in chunk.tokens]
        outputs.setdefault(name, {})[seed] = produced
        return stats.tokens, len(stats.steps), stats.phase_seconds()

    return Arm(name, run)


def markdown(results) -> str:
    m = results["machine"]
    lines = [f"# A padded drafter or target ({m['device_name']}, {m['device']}, torch {m['torch']}, "
             f"{m['threads']} torch thread)", "",
             f"Demo pair (V = 8192), {VERIFIER} at T = {TEMPERATURE:g} on {TREE}, in-process, {results['prompts']} "
             f"held-out prompts x {results['tokens']} tokens, interleaved; padding: {results['padding']} rows.", "",
             "| pair | drafter V | target V | tokens/step | tokens/s | vs same size | padding ids emitted "
             "| same tokens as same size |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        lines.append(f"| {row['config']} | {row['drafter_vocab']} | {row['target_vocab']} | "
                     f"{row['tokens_per_step']:.2f} | {row['tokens_per_s']:.1f} | {row['vs_same_size']:.3f}x | "
                     f"{row['padding_ids']} | {row['same_tokens']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--padding", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", default="padded_vocab_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, _, target_model, drafter_model, tokenizer, prompts = load_demo("cpu")
    prompts = prompts[1 : 1 + args.prompts]
    pairs = {"same size": (target_model, drafter_model),
             "drafter padded": (target_model, padded(drafter_model, args.padding)),
             "target padded": (padded(target_model, args.padding), drafter_model)}
    outputs: dict = {}
    arms = [arm(name, LocalTarget(target, tokenizer, prefix_cache_mb=0),
                LocalDrafter(drafter, tokenizer, prefix_cache_mb=0), tokenizer, outputs)
            for name, (target, drafter) in pairs.items()]
    rows = interleave(arms, prompts, args.tokens, "padded vocab")
    vocab = target_model.config.vocab_size
    results = {"machine": machine("cpu"), "prompts": len(prompts), "tokens": args.tokens, "padding": args.padding,
               "rows": []}
    for row in rows:
        name = row["config"]
        target, drafter = pairs[name]
        seeds = sorted(outputs["same size"])
        row.update(drafter_vocab=drafter.config.vocab_size, target_vocab=target.config.vocab_size,
                   vs_same_size=row["tokens_per_s"] / rows[0]["tokens_per_s"],
                   padding_ids=sum(t >= vocab for seed in seeds for t in outputs[name][seed]),
                   same_tokens=all(outputs[name][seed] == outputs["same size"][seed] for seed in seeds))
        results["rows"].append(row)
    save_results(args.out, results, markdown(results))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
