"""What chunked prefill (`TreeLM.prefill` with a batcher) does to streams that are decoding
when long prompts arrive: the demo pair in one engine, `--streams` generations of short prompts
decoding `--tokens` tokens each, while `--long` requests of a `--long-tokens`-token prompt
arrive one after another (`--spacing` seconds apart, from `--delay`), each generating 16.

Two arms, side by side in the order chunked, whole, whole, chunked, seeds paired, batching on
(the defaults) in both:
- chunked: `prefill_chunk_tokens` 256, so a long prefill goes in chunks of 256;
- whole: `prefill_chunk_tokens` 0 (the default), so it goes in one forward.

Per arm: the streams' gaps between consecutive chunks (p50, p99, largest), the long
requests' time to first token, and all tokens over the wall time.

    python bench/prefill_chunk_bench.py [--streams 8] [--long 4] [--long-tokens 900]

Writes bench/results/prefill_chunk_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from common import ACCEPTANCE, load_demo, machine, out_prefix, suffixed
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models.threads import honour_torch_threads

TEMPERATURE = 0.6
ARMS = {"chunked": 256, "whole": 0}  # prefill_chunk_tokens


def long_prompt(tokenizer, prompts: list[list[int]], length: int) -> list[int]:
    """A prompt of `length` tokens: the held-out prompts one after another."""
    ids: list[int] = []
    while len(ids) < length:
        ids += [token for prompt in prompts for token in prompt]
    return ids[:length]


def run(engine, prompts, long_ids, args) -> dict:
    gaps: list[float] = []
    long_first: list[float] = []
    produced = [0]
    lock = threading.Lock()

    def stream(i: int) -> None:
        last = None  # a stream's first chunk waits for its prefills: its time to first token, not a gap
        for chunk in engine.generate(prompts[i % len(prompts)], max_new_tokens=args.tokens, temperature=TEMPERATURE,
                                     seed=100 + i):
            now = time.perf_counter()
            with lock:
                if last is not None:
                    gaps.append(now - last)
                produced[0] += len(chunk.tokens)
            last = now

    def long_request(j: int) -> None:
        time.sleep(args.delay + j * args.spacing)
        start = time.perf_counter()
        first = None
        for chunk in engine.generate(long_ids, max_new_tokens=16, temperature=TEMPERATURE, seed=900 + j):
            if first is None:
                first = time.perf_counter() - start
            with lock:
                produced[0] += len(chunk.tokens)
        long_first.append(first)

    start = time.perf_counter()
    with ThreadPoolExecutor(args.streams + args.long, initializer=honour_torch_threads) as pool:
        jobs = [pool.submit(stream, i) for i in range(args.streams)]
        jobs += [pool.submit(long_request, j) for j in range(args.long)]
        for job in jobs:
            job.result()
    wall = time.perf_counter() - start
    gaps_ms = np.array(gaps) * 1e3
    return {"gap_ms_p50": float(np.percentile(gaps_ms, 50)), "gap_ms_p99": float(np.percentile(gaps_ms, 99)),
            "gap_ms_max": float(gaps_ms.max()), "long_ttft_ms": [1e3 * t for t in long_first],
            "long_ttft_ms_median": 1e3 * statistics.median(long_first), "tokens": produced[0], "wall_seconds": wall,
            "tokens_per_s": produced[0] / wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--long", type=int, default=4)
    parser.add_argument("--long-tokens", type=int, default=900)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds before the first long request")
    parser.add_argument("--spacing", type=float, default=1.0, help="seconds between long requests")
    parser.add_argument("--out", default=None, help="default: bench/results/prefill_chunk_bench")
    args = parser.parse_args()
    target, drafter, target_model, drafter_model, tokenizer, prompts = load_demo()
    costs = SpeculativeEngine(target, drafter, tree="chain:1").costs()
    long_ids = long_prompt(tokenizer, prompts, args.long_tokens)
    engines = {}
    for name, rows in ARMS.items():
        engines[name] = SpeculativeEngine(
            LocalTarget(target_model, tokenizer, prefix_cache_mb=0, prefill_chunk_tokens=rows),
            LocalDrafter(drafter_model, tokenizer, prefix_cache_mb=0, prefill_chunk_tokens=rows),
            verifier="rrsw", tree="kary:2x3", acceptance_dir=ACCEPTANCE, costs=costs)
        engines[name].run(prompts[0], max_new_tokens=8, seed=0)  # warm-up
    runs = {name: [] for name in ARMS}
    for name in ("chunked", "whole", "whole", "chunked"):
        runs[name].append(run(engines[name], prompts, long_ids, args))
        print(f"  {name}: gaps p99 {runs[name][-1]['gap_ms_p99']:.0f} ms, "
              f"long TTFT {runs[name][-1]['long_ttft_ms_median']:.0f} ms", flush=True)
    results = {"machine": machine("cpu"), "settings": vars(args), "arms": ARMS, "runs": runs}
    out = out_prefix(args.out, "prefill_chunk_bench")
    suffixed(out, ".json").write_text(json.dumps(results, indent=1))
    lines = [
        "# Chunked prefill: decoding streams while long prompts arrive",
        "",
        f"{results['machine']['device_name']}, {results['machine']['threads']} torch threads; demo pair, rrsw, "
        f"kary:2x3, T = {TEMPERATURE}; {args.streams} streams of {args.tokens} tokens, {args.long} requests of a "
        f"{args.long_tokens}-token prompt ({args.spacing:g} s apart from {args.delay:g} s), 16 tokens each.  "
        "Runs in the order chunked, whole, whole, chunked.",
        "",
        "| arm | prefill_chunk_tokens | run | stream gap p50 ms | stream gap p99 ms | largest gap ms "
        "| long prompt TTFT ms (median) | tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, arm_runs in runs.items():
        for i, r in enumerate(arm_runs, 1):
            lines.append(f"| {name} | {ARMS[name]} | {i} | {r['gap_ms_p50']:.0f} | {r['gap_ms_p99']:.0f} "
                         f"| {r['gap_ms_max']:.0f} | {r['long_ttft_ms_median']:.0f} | {r['tokens_per_s']:.1f} |")
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
