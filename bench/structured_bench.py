"""What structured output costs and keeps of speculative decoding: the in-process engine on
the demo pair (rrsw, sequoia:auto) against the target alone, each decoding free text and
three structured outputs (`rayspec.engine.structured`): a JSON schema, any JSON object and a
regular expression.

Both models restrict every tree node's law to the expression (a mask per node), so a
structured step costs the masks on top of a free one; forced tokens (a schema's keys and
punctuation) are ones drafter and target agree on, so it may also accept more per step.  The
time spent building masks (`GrammarCursor.masks`) is measured apart.

    python bench/structured_bench.py [--prompts 8] [--tokens 96] [--rounds 1]

Writes bench/results/structured_bench.{json,md} (`--out`).  The arms decode each prompt one after the
other, each first in turn; tokens/s is total tokens over total decoding time.  Last, the time
to compile each expression over synthetic vocabularies of 8k to 128k tokens (every string of
1, 2, 3... characters of a code-like alphabet, in order): no large tokenizer is on this
machine, and real tokens are longer, so these sizes are indicative only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import string
import sys
import time

from common import ACCEPTANCE, load_demo, machine, out_prefix, suffixed
from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.engine.structured import GrammarCursor, StructuredOutput

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "language": {"enum": ["python", "c", "rust", "go"]},
        "lines": {"type": "integer"},
        "tested": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "language", "lines", "tested", "tags"],
}
OUTPUTS = {
    "free text": None,
    "json_schema": StructuredOutput(json_schema=SCHEMA),
    "json_object": StructuredOutput(json_object=True),
    "regex": StructuredOutput(regex=r"(def [a-z_]{1,16}\([a-z, ]{0,24}\):\n    return [a-z_ +*-]{1,32}\n){1,3}"),
}
TEMPERATURES = (0.0, 0.8)


class MaskClock:
    """Seconds spent in `GrammarCursor.masks`, counted while installed."""

    def __init__(self):
        self.seconds = 0.0
        self._masks = GrammarCursor.masks

    def __enter__(self):
        clock, masks = self, self._masks

        def timed(cursor, paths):
            start = time.perf_counter()
            try:
                return masks(cursor, paths)
            finally:
                clock.seconds += time.perf_counter() - start

        GrammarCursor.masks = timed
        return self

    def __exit__(self, *_):
        GrammarCursor.masks = self._masks


SYNTHETIC_SIZES = (8192, 32768, 131072)
SYNTHETIC_ALPHABET = string.ascii_letters + string.digits + " _.,:;{}[]()\"'-+=*/\\\n"


def synthetic_compile_seconds() -> dict[int, dict[str, float]]:
    """Seconds to compile each structured output's expression over synthetic vocabularies."""
    from outlines_core import Index, Vocabulary

    seconds = {}
    for size in SYNTHETIC_SIZES:
        strings = itertools.chain.from_iterable(itertools.product(SYNTHETIC_ALPHABET, repeat=n)
                                                for n in itertools.count(1))
        tokens = {"".join(s).encode(): [i + 1] for i, s in zip(range(size - 1), strings)}
        vocabulary = Vocabulary(0, tokens)
        seconds[size] = {}
        for name, output in OUTPUTS.items():
            if output is not None:
                start = time.perf_counter()
                Index(output.to_regex(), vocabulary)
                seconds[size][name] = time.perf_counter() - start
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None, help="default: bench/results/structured_bench")
    args = parser.parse_args()

    target, drafter, _, _, tokenizer, prompts = load_demo("cpu")
    prompts = prompts[: args.prompts]
    engines = {"speculative": SpeculativeEngine(target, drafter, verifier="rrsw", tree="sequoia:auto",
                                                acceptance_dir=ACCEPTANCE, adaptive=False, tokenizer=tokenizer),
               "target alone": SpeculativeEngine(target, None, verifier="rrsw", tokenizer=tokenizer)}
    compile_seconds = {}
    for name, output in OUTPUTS.items():  # compiled once, untimed below (as a server caches them)
        start = time.perf_counter()
        for engine in engines.values():
            engine.run(prompts[0], max_new_tokens=4, seed=0, structured_output=output)
        compile_seconds[name] = time.perf_counter() - start
    arms = [(output, path) for output in OUTPUTS for path in engines]
    rows = []
    for temperature in TEMPERATURES:
        totals = {arm: {"tokens": 0, "seconds": 0.0, "steps": 0, "mask_seconds": 0.0, "stopped": 0, "valid": 0}
                  for arm in arms}
        for round_ in range(args.rounds):
            for i, prompt in enumerate(prompts):
                order = arms[i % len(arms):] + arms[: i % len(arms)]
                for output, path in order:
                    stats, tokens, finish = GenerationStats(), [], None
                    with MaskClock() as masks:
                        start = time.perf_counter()
                        for chunk in engines[path].generate(prompt, max_new_tokens=args.tokens,
                                                            temperature=temperature, seed=1000 * round_ + i,
                                                            stats=stats, structured_output=OUTPUTS[output]):
                            tokens += chunk.tokens
                            finish = chunk.finish_reason or finish
                        seconds = time.perf_counter() - start
                    total = totals[(output, path)]
                    total["tokens"] += len(tokens)
                    total["seconds"] += seconds
                    total["steps"] += len(stats.steps)
                    total["mask_seconds"] += masks.seconds
                    total["stopped"] += finish == "stop"
                    if OUTPUTS[output] is not None and finish == "stop":
                        total["valid"] += _valid(output, tokenizer.decode(tokens))
            print(f"  T = {temperature}: round {round_ + 1}/{args.rounds}", flush=True)
        for output, path in arms:
            total = totals[(output, path)]
            alone = totals[(output, "target alone")]
            free = totals[("free text", path)]
            tokens_per_s = total["tokens"] / total["seconds"]
            rows.append({
                "temperature": temperature, "output": output, "path": path, "tokens": total["tokens"],
                "tokens_per_s": tokens_per_s, "tokens_per_step": total["tokens"] / total["steps"],
                "vs_target_alone": tokens_per_s / (alone["tokens"] / alone["seconds"]),
                "vs_free_text": tokens_per_s / (free["tokens"] / free["seconds"]),
                "mask_ms_per_step": 1000 * total["mask_seconds"] / total["steps"],
                "mask_share": total["mask_seconds"] / total["seconds"],
                "completions": len(prompts) * args.rounds, "stopped": total["stopped"], "valid": total["valid"],
            })
    synthetic = synthetic_compile_seconds()
    result = {"setting": {"verifier": "rrsw", "tree": "sequoia:auto", "prompts": args.prompts, "tokens": args.tokens,
                          "rounds": args.rounds, "schema": SCHEMA, "regex": OUTPUTS["regex"].regex,
                          "compile_seconds": compile_seconds, **machine("cpu")}, "rows": rows,
              "synthetic_compile_seconds": synthetic}
    out = out_prefix(args.out, "structured_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Structured output on the demo pair (in-process, CPU, rrsw, sequoia:auto)",
        "",
        "| T | output | path | tokens/s | tokens/step | tokens per completion | vs target alone | vs free text | "
        "masks, ms/step | masks, share of time | ended by a match (valid) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ended = "" if row["output"] == "free text" else f"{row['stopped']}/{row['completions']} ({row['valid']})"
        lines.append(f"| {row['temperature']} | {row['output']} | {row['path']} | {row['tokens_per_s']:.1f} | "
                     f"{row['tokens_per_step']:.2f} | {row['tokens'] / row['completions']:.1f} | "
                     f"{row['vs_target_alone']:.2f} | {row['vs_free_text']:.2f} | "
                     f"{row['mask_ms_per_step']:.2f} | {100 * row['mask_share']:.1f} % | {ended} |")
    lines += [
        "",
        f"{args.rounds} round(s) of {args.prompts} prompts × at most {args.tokens} tokens per arm, the arms one after "
        "the other on each prompt, each first in turn, seeds paired across arms.  'Masks': time in "
        "`GrammarCursor.masks` (walking the automaton along each node's path and stacking the allowed-token "
        "rows), both models together.  'Ended by a match': completions that reached EOS at a whole match before "
        "max_tokens; in parentheses, those whose text parses (JSON) or matches (regex).  A completion ended by EOS "
        "counts the step that drew it, which emits no token: the target alone then makes fewer than one token per "
        "step, and short completions (json_object's are mostly `{}`) are dominated by the prompt's prefill and "
        "the first step.  Compile seconds per output "
        "(both engines, first request, cached after): "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in compile_seconds.items()) + ".",
        "",
        "## Compiling an expression over synthetic vocabularies (indicative: tokens of 1-3 characters)",
        "",
        "| vocabulary | " + " | ".join(synthetic[SYNTHETIC_SIZES[0]]) + " |",
        "|---|" + "---|" * len(synthetic[SYNTHETIC_SIZES[0]]),
        *[f"| {size:,} tokens | " + " | ".join(f"{s:.2f} s" for s in seconds.values()) + " |"
          for size, seconds in synthetic.items()],
    ]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _valid(output: str, text: str) -> bool:
    """Whether a completion ended by a match is one: JSON that parses into an object, or a full
    regex match."""
    if output in ("json_schema", "json_object"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return False
        return isinstance(value, dict) and (output == "json_object" or set(value) == set(SCHEMA["required"]))
    return re.fullmatch(OUTPUTS[output].regex, text) is not None


if __name__ == "__main__":
    sys.exit(main())
