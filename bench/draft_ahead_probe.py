"""Would drafting the next tree ahead, while the target verifies this one, pay?

    python bench/draft_ahead_probe.py [--trees chain:1 chain:3 kary:2x3 sequoia:32] [--prompts 6] [--tokens 64]

With drafter and target on separate machines, the drafter idles while the target scores its
tree.  It could draft the next tree meanwhile for a guessed outcome (PEARL's post-verify,
SpecEdge's proactive drafting), and the next step would skip the drafting and the drafter's
round trip whenever the guess was right.  A guess must name the whole outcome: the accepted
path and the token the target emits after it (a bonus token drawn from the target's law, or a
correction).  The likeliest guess a drafter can make alone is its first-ranked child at every
level, all accepted, then its own most likely token.

This decodes the demo pair in-process (rrsw, T = 0.6) and counts, per tree, the steps whose
outcome that guess (or its two most likely bonus tokens) would have matched.  A drafter that
drafts ahead saves at most that share of the drafting time and one round trip per step.
Writes bench/results/draft_ahead_probe.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse

import torch
from common import ACCEPTANCE, load_demo, machine, save_results

from rayspec.engine import SpeculativeEngine
from rayspec.engine.engine import GenerationStats

TREES = ["chain:1", "chain:3", "kary:2x3", "sequoia:32"]


class RecordingDrafter:
    """A drafter whose sessions record (tree, tokens before it, the outcome that followed)."""

    def __init__(self, inner):
        self.inner, self.steps = inner, []

    def __getattr__(self, name):  # vocab_size, context_length
        return getattr(self.inner, name)

    def open(self, spec):
        return _RecordingSession(self.inner.open(spec), self.steps)


class _RecordingSession:
    def __init__(self, inner, steps):
        self.inner, self.steps, self.last = inner, steps, None

    def draft(self, shape, previous):
        if previous is not None and self.last is not None:
            self.steps.append((*self.last, previous))
        draft = self.inner.draft(shape, previous)
        self.last = (draft.tree, list(self.inner.tokens))
        return draft

    def close(self):
        self.inner.close()


def first_child_chain(shape) -> list[int]:
    """The nodes below the root reached by always taking the first child."""
    chain, node = [], 0
    while shape.children[node]:
        node = shape.children[node][0]
        chain.append(node)
    return chain


def guess_hits(steps, drafter_model) -> dict:
    full = top1 = top2 = 0
    for tree, tokens, outcome in steps:
        if outcome.path != first_child_chain(tree.shape):
            continue
        full += 1
        with torch.no_grad():
            logits = drafter_model(torch.tensor([tokens + outcome.tokens[:-1]])).logits[0, -1]
        likeliest = torch.topk(logits, 2).indices.tolist()
        top1 += outcome.tokens[-1] == likeliest[0]
        top2 += outcome.tokens[-1] in likeliest
    n = max(len(steps), 1)
    return {"steps": len(steps), "whole_chain_accepted": full / n, "guess_right": top1 / n,
            "one_of_two_guesses_right": top2 / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=TREES)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--out", default="draft_ahead_probe")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, drafter, _, drafter_model, _, prompts = load_demo("cpu")
    rows = []
    for tree in args.trees:
        recording = RecordingDrafter(drafter)
        engine = SpeculativeEngine(target, recording, verifier="rrsw", tree=tree, acceptance_dir=ACCEPTANCE)
        draft_seconds = step_seconds = 0.0
        for i, prompt in enumerate(prompts[: args.prompts]):
            stats = GenerationStats()
            for _ in engine.generate(prompt, max_new_tokens=args.tokens, temperature=args.temperature, seed=i,
                                     stats=stats):
                pass
            phases = stats.phase_seconds()
            draft_seconds += phases["draft"]
            step_seconds += sum(phases.values())
        row = {"tree": tree, **guess_hits(recording.steps, drafter_model), "draft_share": draft_seconds / step_seconds}
        row["saving_bound"] = row["one_of_two_guesses_right"] * row["draft_share"]
        rows.append(row)
        print(row, flush=True)
    results = {"machine": machine("cpu"), "args": vars(args), "rows": rows}
    save_results(args.out, results, markdown(results))
    return 0


def markdown(results) -> str:
    args = results["args"]
    lines = [
        f"# Drafting ahead: how often a drafter could guess a step's outcome (demo pair, rrsw, "
        f"T = {args['temperature']}, {args['prompts']} prompts x {args['tokens']} tokens)",
        "",
        "| tree | steps | whole first-child chain accepted | and the bonus token the drafter's likeliest | "
        "or its second | drafting's share of a step (in-process) | bound on the step time saved |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(f"| {row['tree']} | {row['steps']} | {100 * row['whole_chain_accepted']:.0f} % | "
                     f"{100 * row['guess_right']:.0f} % | {100 * row['one_of_two_guesses_right']:.0f} % | "
                     f"{100 * row['draft_share']:.0f} % | {100 * row['saving_bound']:.1f} % |")
    lines += ["", "The bound: the share of steps two guesses would match, times drafting's share of a step "
              "(a distributed step would also save the drafter's round trip on those steps)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
