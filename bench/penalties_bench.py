"""What logit bias, the presence, frequency and repetition penalties, and vLLM's min_p,
min_tokens and bad_words cost, and what they do: in-process engine on the demo pair, per tree, each arm's
step time (and its draft and score parts), tokens per step, tokens/s, and how often the
completion repeats a token.

With a penalty or min_tokens on, drafter and target each gather, per law they compute, the
columns of the tokens before it (the completion's and the drafted tokens on the node's
path: [N, u], u distinct tokens) and adjust them; a bias alone is one indexed add; min_p one
comparison per logit; bad words one comparison of every law's last tokens with every
word's prefix, and one [N, V] pass.  Drafts follow the laws the target verifies against, so
acceptance should hold.  The min_tokens arm asks for the whole completion (every law bans
EOS); the bad words arm bans 20 words and phrases of Python code (1 to 4 tokens each, both
spacings: 40 token sequences).

    python bench/penalties_bench.py [--prompts 8] [--tokens 64] [--rounds 2]

Writes bench/results/penalties_bench.{json,md} (`--out`).  The arms run one after the other on each
prompt, each first in turn; figures are medians (steps) or totals (tokens/s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from common import load_demo, out_prefix, suffixed
from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.engine.text import bad_words_token_ids

TREES = ["kary:2x3", "kary:4x3"]
ARMS = {
    "off": {},
    "presence 0.5 + frequency 0.5": dict(presence_penalty=0.5, frequency_penalty=0.5),
    "repetition 1.2": dict(repetition_penalty=1.2),
    "all three + bias on 16 tokens": dict(presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=1.2,
                                         logit_bias={t: -100.0 if t % 2 else 2.0 for t in range(100, 116)}),
    "min_p 0.1": dict(min_p=0.1),
    "min_tokens = all": {},  # min_tokens = --tokens, set in main
    "bad words: 20": dict(bad_words=[
        "self", "None", "return", "import", "True", "False", "print", "args", "value", "data",
        "return None", "self.assert", "import os", "def __init__", "if not", "is None", "for i in", "raise ValueError",
        "from typing import", "else:",
    ]),
}
TEMPERATURE = 0.6


def repeated_share(tokens: list[int]) -> float:
    """The share of the completion's tokens that repeat an earlier completion token."""
    return 1 - len(set(tokens)) / len(tokens) if tokens else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None, help="default: bench/results/penalties_bench")
    args = parser.parse_args()

    ARMS["min_tokens = all"] = dict(min_tokens=args.tokens)
    target, drafter, _, _, tokenizer, prompts = load_demo("cpu")
    prompts = prompts[: args.prompts]
    names = list(ARMS)
    rows = []
    for tree in TREES:
        engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree=tree, adaptive=False, tokenizer=tokenizer)
        engine.run(prompts[0], max_new_tokens=8, seed=0)  # warm-up
        steps = {name: [] for name in names}
        drafts, scores = ({name: [] for name in names} for _ in range(2))
        totals = {name: [0, 0.0, 0, 0] for name in names}  # tokens, seconds, steps, drafted nodes
        repeats = {name: [] for name in names}
        for round_ in range(args.rounds):
            for i, prompt in enumerate(prompts):
                for name in names[i % len(names):] + names[: i % len(names)]:  # each arm first in turn
                    stats = GenerationStats()
                    tokens = []
                    for chunk in engine.generate(prompt, max_new_tokens=args.tokens, temperature=TEMPERATURE,
                                                 seed=1000 * round_ + i, stats=stats, **ARMS[name]):
                        tokens += chunk.tokens
                    steps[name] += [1e3 * s.wall for s in stats.steps]
                    drafts[name] += [1e3 * s.draft for s in stats.steps]
                    scores[name] += [1e3 * s.score for s in stats.steps]
                    totals[name][0] += stats.tokens
                    totals[name][1] += sum(s.wall for s in stats.steps)
                    totals[name][2] += len(stats.steps)
                    totals[name][3] += sum(s.drafted for s in stats.steps)
                    repeats[name].append(repeated_share(tokens))
            print(f"  {tree}: round {round_ + 1}/{args.rounds}", flush=True)
        base = statistics.median(steps["off"])
        for name in names:
            tokens, seconds, count, drafted = totals[name]
            step = statistics.median(steps[name])
            rows.append({
                "tree": tree, "arm": name, "step_ms": step, "step_vs_off": step / base,
                "draft_ms": statistics.median(drafts[name]), "score_ms": statistics.median(scores[name]),
                "drafted_per_step": drafted / count, "tokens_per_step": tokens / count, "tokens_per_s": tokens / seconds,
                "repeated_token_share": statistics.mean(repeats[name]),
            })
    result = {"setting": {"verifier": "rrsw", "temperature": TEMPERATURE, "prompts": args.prompts,
                          "tokens": args.tokens, "rounds": args.rounds, "vocab": target.vocab_size,
                          "device": "cpu"}, "arms": {k: {**v, "logit_bias": len(v.get("logit_bias", {}))}
                                                      for k, v in ARMS.items()},
              "bad_word_sequences": len(bad_words_token_ids(tokenizer, ARMS["bad words: 20"]["bad_words"])), "rows": rows}
    out = out_prefix(args.out, "penalties_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# The cost and effect of penalties, min_p, min_tokens and bad words (demo pair, V = 8192, rrsw, T = {TEMPERATURE}, CPU)",
        "",
        "| tree | arm | step ms | vs off | draft ms | score ms | drafted/step | tokens/step | tokens/s | repeated tokens |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['tree']} | {row['arm']} | {row['step_ms']:.2f} | {row['step_vs_off']:.3f} | "
                     f"{row['draft_ms']:.2f} | {row['score_ms']:.2f} | {row['drafted_per_step']:.1f} | "
                     f"{row['tokens_per_step']:.2f} | "
                     f"{row['tokens_per_s']:.1f} | {100 * row['repeated_token_share']:.1f} % |")
    lines += [
        "",
        f"{args.rounds} rounds of {args.prompts} prompts × {args.tokens} tokens per arm, the arms one after the other "
        "on each prompt, each first in turn.  Step, draft and score: medians of each step's wall time, the drafter's "
        "drafting and the target's forward plus its laws (penalties included).  Drafted/step: the tree's drafted nodes "
        "per step (rrsw drafts distinct siblings, so a law with fewer tokens left, as under min_p, makes smaller trees).  A completion that stops early (EOS) "
        "counts its steps and tokens as they are.  Tokens/s: total tokens over total "
        "step time.  Repeated tokens: the mean share of a completion's tokens that repeat one of its earlier tokens.",
    ]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
