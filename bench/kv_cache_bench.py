"""The KV cache's layers: HF's concatenating `DynamicLayer` against rayspec's `GrowingLayer`.

    python bench/kv_cache_bench.py [--contexts 32 400 800] [--tokens 64] [--rounds 3]

The in-process engine on the demo pair (rrsw, kary:2x3, T = 0.6) decodes `--tokens` tokens
after prompts of each length in `--contexts` (held-out prompts repeated to length), once
with each kind of layer, alternating prompt by prompt, `--rounds` times; both give the same
tokens for a seed, which is checked.  Reported: median step time and tokens/s per arm.
Writes bench/results/kv_cache_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager

import torch
from common import load_demo, machine, out_prefix, suffixed
from transformers.cache_utils import DynamicLayer

from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.models import tree_lm

ARMS = ("concatenating (HF DynamicLayer)", "growing buffers (GrowingLayer)")


@contextmanager
def layers(arm: str):
    """TreeLM's caches built with the arm's layers while inside."""
    kept = tree_lm.GrowingLayer
    if arm == ARMS[0]:
        tree_lm.GrowingLayer = DynamicLayer  # TreeLM swaps DynamicLayers for this class
    try:
        yield
    finally:
        tree_lm.GrowingLayer = kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[32, 400, 800])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="default: bench/results/kv_cache_bench")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target, drafter, target_model, _, _, prompts = load_demo()
    engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="kary:2x3")
    stream = [token for prompt in prompts for token in prompt]
    rows, identical = [], True
    for context in args.contexts:
        figures = {arm: {"step_ms": [], "tokens_per_s": []} for arm in ARMS}
        for i in range(args.rounds * 2):
            prompt = stream[i * 37 : i * 37 + context]
            outputs = {}
            for arm in ARMS[i % 2 :] + ARMS[: i % 2]:
                with layers(arm):
                    stats = GenerationStats()
                    start = time.perf_counter()
                    outputs[arm] = [t for chunk in engine.generate(prompt, max_new_tokens=args.tokens, temperature=0.6,
                                                                   seed=i, stats=stats) for t in chunk.tokens]
                    seconds = time.perf_counter() - start
                figures[arm]["step_ms"].append(sum(s.wall for s in stats.steps) / len(stats.steps) * 1e3)
                figures[arm]["tokens_per_s"].append(len(outputs[arm]) / seconds)
            identical &= outputs[ARMS[0]] == outputs[ARMS[1]]
        rows.append({"context": context, **{arm: {k: statistics.median(v) for k, v in f.items()}
                                             for arm, f in figures.items()}})
        print(f"  context {context}", flush=True)
    result = {"meta": {**machine(str(target_model.device.type)), **vars(args)}, "identical_tokens": identical,
              "rows": rows}
    out = out_prefix(args.out, "kv_cache_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2))
    lines = [f"# KV cache layers on the demo pair ({result['meta']['device_name']}, rrsw kary:2x3, T = 0.6, "
             f"{args.tokens} new tokens, medians of {args.rounds * 2} prompts)", "",
             "| prompt tokens | " + " | ".join(f"{arm}: step ms | tokens/s" for arm in ARMS) + " | step time, growing / concatenating |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        a, b = (row[arm] for arm in ARMS)
        lines.append(f"| {row['context']} | {a['step_ms']:.2f} | {a['tokens_per_s']:.1f} | {b['step_ms']:.2f} | "
                     f"{b['tokens_per_s']:.1f} | **{b['step_ms'] / a['step_ms']:.3f}** |")
    lines += ["", f"Identical tokens for every seed: **{identical}**."]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print(suffixed(out, ".md").read_text())


if __name__ == "__main__":
    main()
