"""Detokenisation cost per step as a completion grows: the incremental decoder against
decoding the whole completion at every step (what rayspec did before).

Per step, a request streaming text with stop strings does two things with its new tokens:
the engine finds whether they complete a stop string (to cut the step there), and the
serving layer's `TextAssembler` turns them into a text delta.  Decoding the whole
completion makes each step cost O(length): three whole decodes with stop strings, one
without.  The incremental decoder decodes a window of the last two chunks.

    python bench/detok_bench.py [--lengths 256 1024 4096 16384] [--chunk 3]

Writes bench/results/detok_bench.{json,md}.  Times are medians over the last steps before
each length, both arms measured side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import AutoTokenizer  # noqa: E402

from common import out_prefix, suffixed  # noqa: E402
from rayspec.demo import TARGET_PATH, load_prompts  # noqa: E402
from rayspec.engine.text import REPLACEMENT, IncrementalDecoder, StopStrings, TextAssembler  # noqa: E402

STOP = ["\n\n\n\n\n", "<|im_end|>"]  # never in the demo's code text: every step is searched


class WholeDecoding:
    """Before: the assembler and the engine's stop check each decode the whole completion."""

    def __init__(self, tokenizer, prompt, stop):
        self.tokenizer, self.head_ids, self.stop, self.tokens, self.text = tokenizer, prompt[-4:], stop, [], ""
        self.head = self._decode([])

    def _decode(self, ids):
        whole = self.tokenizer.decode(self.head_ids + ids, skip_special_tokens=True)
        return whole[len(self.head):] if ids else whole

    def step(self, new):
        if self.stop:  # the engine: the text before, then with the new tokens
            before = self._decode(self.tokens).rstrip(REPLACEMENT)
            window = max(len(before) - max(map(len, self.stop)), 0)
            assert not any(s in self._decode(self.tokens + new)[window:] for s in self.stop)
        self.tokens += new
        self.text = self._decode(self.tokens)  # the assembler
        assert not any(s in self.text for s in self.stop)


class Incremental:
    """Now: the engine's stop check and the assembler each keep an incremental decoder."""

    def __init__(self, tokenizer, prompt, stop):
        self.engine_decoder = IncrementalDecoder(tokenizer, prompt) if stop else None
        self.stops = StopStrings(stop)
        self.assembler = TextAssembler(tokenizer, stop, prompt)

    @property
    def text(self):
        return self.assembler.text

    def step(self, new):
        if self.engine_decoder is not None:
            assert self.stops.find(self.engine_decoder.peek(new)) is None
            self.stops.searched(self.engine_decoder.push(new))
        self.assembler.push(new)


def measure(arm_class, tokenizer, prompt, tokens, chunk, lengths, stop, tail_steps):
    """Seconds per step over the `tail_steps` steps before each length."""
    arm, times = arm_class(tokenizer, prompt, stop), []
    for start in range(0, max(lengths), chunk):
        new = tokens[start:start + chunk]
        began = time.perf_counter()
        arm.step(new)
        times.append(time.perf_counter() - began)
    per_length = {n: statistics.median(times[max(n // chunk - tail_steps, 0):n // chunk]) for n in lengths}
    return per_length, arm.text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--chunk", type=int, default=3, help="tokens per step (the demo pair accepts about 3)")
    parser.add_argument("--tail-steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="default: bench/results/detok_bench")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    text = "\n".join(load_prompts())
    tokens = tokenizer.encode(text, add_special_tokens=False)
    while len(tokens) < max(args.lengths) + 4:
        tokens += tokens
    prompt, tokens = tokens[:4], tokens[4:max(args.lengths) + 4]

    rows = []
    for stop in (STOP, []):
        runs = {"whole": [], "incremental": []}
        for _ in range(args.repeats):  # alternated, so that a slow stretch hits both arms
            for name, arm_class in (("whole", WholeDecoding), ("incremental", Incremental)):
                per_length, streamed = measure(arm_class, tokenizer, prompt, tokens, args.chunk, args.lengths,
                                               stop, args.tail_steps)
                runs[name].append((per_length, streamed))
        assert runs["whole"][0][1] == runs["incremental"][0][1], "the arms' texts differ"
        for n in args.lengths:
            whole = statistics.median(r[0][n] for r in runs["whole"])
            incremental = statistics.median(r[0][n] for r in runs["incremental"])
            rows.append({"stop_strings": bool(stop), "length": n, "chunk": args.chunk,
                         "whole_us_per_step": whole * 1e6, "incremental_us_per_step": incremental * 1e6,
                         "speedup": whole / incremental})

    meta = {"tokenizer": str(TARGET_PATH.relative_to(TARGET_PATH.parents[2])), "vocab": tokenizer.vocab_size,
            "chunk": args.chunk, "tail_steps": args.tail_steps, "repeats": args.repeats, "stop": STOP}
    out = out_prefix(args.out, "detok_bench")
    suffixed(out, ".json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    lines = ["# Detokenisation per step: whole completion vs incremental",
             "",
             f"Demo tokenizer (byte-level BPE, {tokenizer.vocab_size} tokens), {args.chunk} tokens per step; "
             f"median µs per step over the {args.tail_steps} steps before each length, median of "
             f"{args.repeats} alternated runs. With stop strings: the engine's stop check plus the "
             "assembler; without: the assembler alone.",
             "",
             "| stop strings | completion tokens | whole µs/step | incremental µs/step | speed-up |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'yes' if r['stop_strings'] else 'no'} | {r['length']} | {r['whole_us_per_step']:.0f} | "
                     f"{r['incremental_us_per_step']:.0f} | {r['speedup']:.1f}× |")
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
