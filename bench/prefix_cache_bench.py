"""What automatic prefix caching (`rayspec.models.prefix_cache`) saves: the in-process engine
on the demo pair (rrsw, kary:2x3), with both models' prefix caches on against both off, side
by side request by request.

Two workloads, chat prompts by the demo template:
- shared system prompt: one long system message, then a different question per request;
- conversation: each turn's prompt is the previous turn's prompt, its reply and a new
  question.
For each request: time to first token (the engine's first chunk: both prefills and the first
step) and the whole request's time, for `--tokens` tokens.  Both arms use the same seed; the
bench also counts the completions whose tokens differ between the arms (the cache is exact
in law, not in bits: see the module).

    python bench/prefix_cache_bench.py [--requests 8] [--tokens 16] [--system-words 120]

Writes bench/results/prefix_cache_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from common import load_demo, machine, out_prefix, suffixed
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine

SETTING = dict(verifier="rrsw", tree="kary:2x3")
SYSTEM = ("You are a patient programming tutor. Explain each idea with a short example, name the standard "
          "library functions you use, and point out one common mistake. ")
QUESTIONS = ["How do I reverse a list?", "What does a dictionary comprehension look like?",
             "How do I read a file line by line?", "What is a generator?", "How do I sort by a key?",
             "What does enumerate return?", "How do I format a float?", "When should I use a set?",
             "How do I join strings?", "What is a lambda?", "How do I catch an exception?", "What is a slice?"]


def timed(engine: SpeculativeEngine, prompt: list[int], tokens: int, seed: int) -> tuple[float, float, list[int], int]:
    """(seconds to the first chunk, seconds in all, the tokens, prompt tokens the target reused)."""
    start = time.perf_counter()
    stream = engine.generate(prompt, max_new_tokens=tokens, seed=seed, temperature=0.8)
    first = next(stream)
    first_at = time.perf_counter() - start
    produced = list(first.tokens)
    for chunk in stream:
        produced += chunk.tokens
    return first_at, time.perf_counter() - start, produced, engine_reused(engine)


def engine_reused(engine: SpeculativeEngine) -> int:
    cache = engine.target.prefix_cache
    return 0 if cache is None else cache.reused_tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--system-words", type=int, default=120, help="about this many words of system prompt")
    parser.add_argument("--out", default=None, help="default: bench/results/prefix_cache_bench")
    args = parser.parse_args()

    _, _, target_model, drafter_model, tokenizer, _ = load_demo("cpu")
    engines = {
        on: SpeculativeEngine(LocalTarget(target_model, tokenizer, prefix_cache_mb=1024 if on else 0),
                              LocalDrafter(drafter_model, tokenizer, prefix_cache_mb=1024 if on else 0),
                              tokenizer=tokenizer, **SETTING)
        for on in (True, False)
    }
    words = SYSTEM.split()
    system = " ".join(words[i % len(words)] for i in range(args.system_words))

    def render(messages):
        return tokenizer.encode(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
                                add_special_tokens=False)

    def request(workload: str, index: int, prompt: list[int], rows: list, seed: int) -> list[int]:
        """One request through both arms, the order alternating; returns the cached arm's tokens."""
        figures = {}
        for on in ((True, False) if index % 2 == 0 else (False, True)):
            before = engine_reused(engines[on])
            first, whole, produced, reused = timed(engines[on], prompt, args.tokens, seed)
            figures[on] = (first, whole, produced, reused - before)
        rows.append({"workload": workload, "request": index, "prompt_tokens": len(prompt),
                     "reused_tokens": figures[True][3],
                     "ttft_ms_cached": figures[True][0] * 1e3, "ttft_ms_cold": figures[False][0] * 1e3,
                     "total_ms_cached": figures[True][1] * 1e3, "total_ms_cold": figures[False][1] * 1e3,
                     "same_tokens": figures[True][2] == figures[False][2]})
        return figures[True][2]

    rows: list[dict] = []
    for index in range(args.requests):
        question = QUESTIONS[index % len(QUESTIONS)]
        request("shared system prompt", index,
                render([{"role": "system", "content": system}, {"role": "user", "content": question}]), rows, index)
    conversation = [{"role": "system", "content": system}]
    for index in range(args.requests):
        conversation.append({"role": "user", "content": QUESTIONS[-1 - index % len(QUESTIONS)]})
        reply = request("conversation", index, render(conversation), rows, 100 + index)
        conversation.append({"role": "assistant", "content": tokenizer.decode(reply, skip_special_tokens=True)})

    summary = []
    for workload in ("shared system prompt", "conversation"):
        mine = [row for row in rows if row["workload"] == workload and row["request"] > 0]  # the first is a miss
        ttft_ratio = [row["ttft_ms_cold"] / row["ttft_ms_cached"] for row in mine]
        summary.append({
            "workload": workload, "requests": len(mine),
            "prompt_tokens_median": statistics.median(row["prompt_tokens"] for row in mine),
            "reused_tokens_median": statistics.median(row["reused_tokens"] for row in mine),
            "ttft_ms_cached_median": statistics.median(row["ttft_ms_cached"] for row in mine),
            "ttft_ms_cold_median": statistics.median(row["ttft_ms_cold"] for row in mine),
            "ttft_speedup_median": statistics.median(ttft_ratio),
            "total_ms_cached_median": statistics.median(row["total_ms_cached"] for row in mine),
            "total_ms_cold_median": statistics.median(row["total_ms_cold"] for row in mine),
            "completions_differing": sum(not row["same_tokens"] for row in rows if row["workload"] == workload),
        })
    result = {"machine": machine("cpu"), "setting": SETTING, "tokens": args.tokens, "rows": rows, "summary": summary}
    out = out_prefix(args.out, "prefix_cache_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Prefix caching: time to first token, cache on vs off",
        "",
        f"In-process engine, demo pair, {SETTING['verifier']} with {SETTING['tree']}, T = 0.8, {args.tokens} tokens "
        f"per request; {machine('cpu')['device_name']}, {machine('cpu')['threads']} torch threads.  Medians over "
        "the requests after each workload's first (a miss in both arms); arms side by side, request by request.",
        "",
        "| workload | prompt tokens | reused | TTFT cached (ms) | TTFT cold (ms) | TTFT speed-up | request cached (ms) "
        "| request cold (ms) | completions differing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        lines.append(f"| {s['workload']} | {s['prompt_tokens_median']:.0f} | {s['reused_tokens_median']:.0f} | "
                     f"{s['ttft_ms_cached_median']:.1f} | {s['ttft_ms_cold_median']:.1f} | "
                     f"**{s['ttft_speedup_median']:.2f}×** | {s['total_ms_cached_median']:.1f} | "
                     f"{s['total_ms_cold_median']:.1f} | {s['completions_differing']} of {args.requests} |")
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
