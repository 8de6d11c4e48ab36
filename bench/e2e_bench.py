"""End-to-end decoding speed on the demo pair, side by side with what users would pick instead.

    python bench/e2e_bench.py [--prompts 30] [--tokens 128] [--grid-prompts 10] [--grid-tokens 64]

Two parts, each interleaving its configurations prompt by prompt (every configuration decodes
prompt i before any decodes prompt i + 1, in a rotating order), so that a slow stretch of this
shared machine hits all configurations alike:

  headline  held-out prompts x tokens at T = 0, 0.6, 1.0:
            (a) target-only decoding (rayspec's own loop without a drafter)
            (b) HF transformers assisted generation, `generate(assistant_model=drafter)`
            (c) rayspec, a chain of 4 drafts (rrsw; sps-equivalent on a chain)
            (d) rayspec, its default: sequoia:auto with the best lossless verifier of the grid
  grid      fewer prompts and tokens, T = 0.6 and 1.0: every verifier on the trees
            chain:4, kary:2x3, kary:4x2, sequoia:32, sequoia:auto (dynamic:32 with topk)

Reported per configuration: tokens per target step (mean), tokens/s (total tokens / total
time, and the median over prompts), and, for rayspec, where the time goes (draft / score /
verify / other).  Writes bench/results/e2e_bench.{json,md} and e2e_bench.png.
"""

from __future__ import annotations

import argparse
import json

import torch

from common import ACCEPTANCE, Arm, engine_arm, fits, interleave, load_demo, machine, out_prefix, suffixed
from rayspec.engine import SpeculativeEngine
from rayspec.verify import available_verifiers, get_verifier
GRID_TREES = ["chain:4", "kary:2x3", "kary:4x2", "sequoia:32", "sequoia:auto"]


class CountingForward:
    """Counts a model's forward calls: HF assisted generation's target steps."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))


def hf_assisted(target, drafter, counter, prompt, tokens, temperature, seed):
    ids = torch.tensor([prompt], device=target.device)
    torch.manual_seed(seed)
    before = counter.calls
    kwargs = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
    with torch.no_grad():
        out = target.generate(ids, assistant_model=drafter, max_new_tokens=tokens, min_new_tokens=tokens,
                              pad_token_id=0, **kwargs)
    generated = out.shape[1] - ids.shape[1]
    return generated, counter.calls - before - 1  # minus the prefill


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--grid-prompts", type=int, default=10)
    parser.add_argument("--grid-tokens", type=int, default=64)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.6, 1.0])
    parser.add_argument("--grid-temperatures", type=float, nargs="+", default=[0.6, 1.0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--out", default=None, help="default: bench/results/e2e_bench")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    target, drafter, target_model, drafter_model, _, all_prompts = load_demo()
    acceptance = ACCEPTANCE
    counter = CountingForward(target_model)
    meta = {**machine(str(target_model.device.type)), "prompts": args.prompts, "tokens": args.tokens,
            "grid_prompts": args.grid_prompts, "grid_tokens": args.grid_tokens}

    # measured once, shared, with every verifier's own drafts and walk
    costs = SpeculativeEngine(target, drafter, tree="chain:1", acceptance_dir=ACCEPTANCE, priced_verifiers="all").costs()
    grid = []
    if not args.skip_grid:
        for temperature in args.grid_temperatures:
            arms = [engine_arm(f"{v} {tree}", target, drafter, v, tree, temperature, acceptance, costs=costs)
                    for v in available_verifiers() if v not in ("greedy", "topk")
                    for tree in GRID_TREES if fits(v, tree)]
            arms.append(engine_arm("topk dynamic:32", target, drafter, "topk", "dynamic:32", temperature, acceptance))
            grid += interleave(arms, all_prompts[: args.grid_prompts], args.grid_tokens, f"grid T={temperature}")

    headline = []
    for temperature in args.temperatures:
        best = "greedy" if temperature == 0 else "rrsw"
        nearest = [r for r in grid if r["tree"] == "sequoia:auto"]
        if temperature > 0 and nearest:
            closest = min({r["temperature"] for r in nearest}, key=lambda t: abs(t - temperature))
            # lossless only: the other arms are exact samples of the target, mentored is not
            candidates = [r for r in nearest if r["temperature"] == closest and get_verifier(r["verifier"]).lossless]
            best = max(candidates, key=lambda r: r["tokens_per_s"])["verifier"]
        arms = [
            engine_arm("target-only", target, None, "rrsw", "none", temperature, acceptance),
            Arm("HF assisted generation", lambda p, n, s, t=temperature: (*hf_assisted(target_model, drafter_model, counter, p, n, t, s), None),
                kind="hf", temperature=temperature),
            engine_arm("rayspec chain:4", target, drafter, "greedy" if temperature == 0 else "rrsw", "chain:4", temperature, acceptance),
            engine_arm(f"rayspec {best} sequoia:auto", target, drafter, best, "sequoia:auto", temperature, acceptance, costs=costs),
        ]
        headline += interleave(arms, all_prompts[: args.prompts], args.tokens, f"headline T={temperature}")

    out = out_prefix(args.out, "e2e_bench")
    suffixed(out, ".json").write_text(json.dumps({"meta": meta, "headline": headline, "grid": grid}, indent=2))
    write_markdown(suffixed(out, ".md"), meta, headline, grid)
    plot(suffixed(out, ".png"), headline, grid)
    print(suffixed(out, ".md").read_text())


def write_markdown(path, meta, headline, grid):
    lines = [f"# End-to-end decoding on the demo pair ({meta['device']}, {meta['device_name']}, torch {meta['torch']}, "
             f"{meta['threads']} threads)", "",
             f"Headline: {meta['prompts']} held-out prompts x {meta['tokens']} new tokens, configurations interleaved per prompt.", "",
             "| T | configuration | tokens/step | tokens/s | median tokens/s per prompt | vs target-only | vs HF assisted | draft / score / verify / other (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for temperature in sorted({r["temperature"] for r in headline}):
        rows = [r for r in headline if r["temperature"] == temperature]
        base = next(r for r in rows if r["config"] == "target-only")["tokens_per_s"]
        hf = next(r for r in rows if r["kind"] == "hf")["tokens_per_s"]
        for r in rows:
            phases = " / ".join(f"{r['phase_seconds'][k]:.1f}" for k in ("draft", "score", "verify", "other")) if r["kind"] == "rayspec" else "-"
            lines.append(f"| {temperature:g} | {r['config']} | {r['tokens_per_step']:.2f} | {r['tokens_per_s']:.1f} | "
                         f"{r['median_prompt_tokens_per_s']:.1f} | {r['tokens_per_s'] / base:.2f}x | {r['tokens_per_s'] / hf:.2f}x | {phases} |")
    if grid:
        lines += ["", f"Grid: {meta['grid_prompts']} prompts x {meta['grid_tokens']} tokens.", "",
                  "| T | verifier | tree | tokens/step | tokens/s |", "|---|---|---|---|---|"]
        for r in sorted(grid, key=lambda r: (r["temperature"], -r["tokens_per_s"])):
            lines.append(f"| {r['temperature']:g} | {r['verifier']} | {r['tree']} | {r['tokens_per_step']:.2f} | {r['tokens_per_s']:.1f} |")
    path.write_text("\n".join(lines) + "\n")


def plot(path, headline, grid):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temperatures = sorted({r["temperature"] for r in headline})
    configs = list(dict.fromkeys(r["config"].split(" sequoia")[0] if "sequoia" in r["config"] else r["config"] for r in headline))
    fig, axes = plt.subplots(1, 2 if grid else 1, figsize=(13 if grid else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    width = 0.8 / max(len(configs), 1)
    for j, config in enumerate(configs):
        values = [next((r["tokens_per_s"] for r in headline if r["temperature"] == t and r["config"].startswith(config)), 0) for t in temperatures]
        ax.bar([i + j * width for i in range(len(temperatures))], values, width, label=config)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(temperatures))], [f"T = {t:g}" for t in temperatures])
    ax.set_ylabel("tokens/s")
    ax.set_title("demo pair: decoding speed")
    ax.legend(fontsize=8)
    if grid:
        ax = axes[0][1]
        for t in sorted({r["temperature"] for r in grid}):
            rows = [r for r in grid if r["temperature"] == t]
            ax.scatter([r["tokens_per_step"] for r in rows], [r["tokens_per_s"] for r in rows], label=f"T = {t:g}", s=18)
        ax.set_xlabel("tokens per target step")
        ax.set_ylabel("tokens/s")
        ax.set_title("every verifier x tree")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
