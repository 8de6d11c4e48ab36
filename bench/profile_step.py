"""Where a decoding step's time goes: the demo pair in-process under torch's profiler.

    python bench/profile_step.py [--device cuda] [--verifier rrsw] [--tree sequoia:auto] [--prompts 2] [--tokens 64]
                                 [--by-function]

One untimed decode first (kernels load, caches grow), then `--prompts` decodes under the
profiler.  Reported per step: the engine's phases (draft / score / verify / other), the
CUDA kernels launched and the host-device synchronisations (`aten::_local_scalar_dense`:
`.item()`/`.tolist()` of a GPU tensor; `cudaStreamSynchronize`/`cudaDeviceSynchronize`;
device-to-host copies), then torch's table of the ops of most self CPU time.  A step made of
small kernels on a GPU costs what the host spends launching them and waiting at each
synchronisation, not what the GPU computes: these counts say how far from that it is.
With `--by-function`, a second pass under Python tracing (slower: its times are not used)
counts the top-level torch operations of a step by the rayspec function that called them —
a device-independent measure of host work that a CPU can take for a GPU's.
Writes bench/results/profile_step_{device}.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch
from common import ACCEPTANCE, load_demo, machine, out_prefix, suffixed
from torch.profiler import ProfilerActivity, profile

from rayspec.engine import GenerationStats, SpeculativeEngine

SYNCS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync")
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def decode(engine, prompt, tokens, temperature, seed) -> GenerationStats:
    stats = GenerationStats()
    for _ in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats):
        pass
    return stats


def operations_by_function(engine, prompts, args, top: int = 20) -> dict:
    """Top-level torch operations per step (an operation inside another is not counted again),
    each attributed to the innermost rayspec function on its Python stack."""
    stats_steps, by_function, total = 0, Counter(), 0
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as profiler:
        for i, prompt in enumerate(prompts[1 : 1 + args.prompts]):
            stats_steps += len(decode(engine, prompt, args.tokens, args.temperature, seed=1 + i).steps)
    for event in profiler.events():
        parent = event.cpu_parent
        if not event.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
            continue
        total += 1
        while parent is not None and "rayspec/" not in parent.name:
            parent = parent.cpu_parent
        by_function[parent.name.split("rayspec/")[-1] if parent is not None else "(outside rayspec)"] += 1
    return {"operations_per_step": total / stats_steps,
            "by_function": {name: count / stats_steps for name, count in by_function.most_common(top)}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--tree", default="sequoia:auto")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rows", type=int, default=30, help="ops in the profiler's table")
    parser.add_argument("--by-function", action="store_true", help="also count operations by calling function")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = out_prefix(args.out, f"profile_step_{args.device}")

    target, drafter, _, _, _, prompts = load_demo(args.device)
    costs = SpeculativeEngine(target, drafter, tree="chain:1").costs()
    engine = SpeculativeEngine(target, drafter, verifier=args.verifier, tree=args.tree, acceptance_dir=ACCEPTANCE,
                               costs=costs, adaptive=False)
    decode(engine, prompts[0], args.tokens, args.temperature, seed=0)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    steps, phases, tokens = 0, {"draft": 0.0, "score": 0.0, "verify": 0.0, "other": 0.0}, 0
    with profile(activities=activities) as profiler:
        for i, prompt in enumerate(prompts[1 : 1 + args.prompts]):
            stats = decode(engine, prompt, args.tokens, args.temperature, seed=1 + i)
            steps += len(stats.steps)
            tokens += stats.tokens
            for phase, seconds in stats.phase_seconds().items():
                phases[phase] += seconds
    events = profiler.key_averages()
    counts = {event.key: event.count for event in events}
    shape = engine.policy(args.tree).shape_for(args.verifier, args.temperature)
    result = {
        "meta": {**machine(args.device), **vars(args), "out": str(out)},
        "tree": {"nodes": shape.size, "depth": shape.max_depth},
        "steps": steps, "tokens_per_step": tokens / steps,
        "phase_ms_per_step": {phase: seconds / steps * 1e3 for phase, seconds in phases.items()},
        "per_step": {
            "kernel_launches": sum(counts.get(name, 0) for name in LAUNCHES) / steps,
            **{name: counts.get(name, 0) / steps for name in SYNCS},
            "aten_ops": sum(count for key, count in counts.items() if key.startswith("aten::")) / steps,
        },
        "table": events.table(sort_by="self_cpu_time_total", row_limit=args.rows),
    }
    if args.by_function:
        result["operations"] = operations_by_function(engine, prompts, args)
    suffixed(out, ".json").write_text(json.dumps(result, indent=2))
    lines = [f"# One decoding step under the profiler ({result['meta']['device_name']}; {args.verifier}, {args.tree} "
             f"= {shape.size} nodes, depth {shape.max_depth}; T = {args.temperature:g})", "",
             f"{steps} steps, {result['tokens_per_step']:.2f} tokens/step.", "",
             "| per step | value |", "|---|---|"]
    lines += [f"| {phase} ms | {ms:.2f} |" for phase, ms in result["phase_ms_per_step"].items()]
    lines += [f"| {name} | {value:.1f} |" for name, value in result["per_step"].items()]
    if "operations" in result:
        lines += ["", f"Top-level torch operations per step: **{result['operations']['operations_per_step']:.0f}**, "
                  "by the innermost rayspec function that called them:", "", "| function | operations per step |",
                  "|---|---|"]
        lines += [f"| `{name}` | {count:.1f} |" for name, count in result["operations"]["by_function"].items()]
    lines += ["", "```", result["table"], "```"]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print(suffixed(out, ".md").read_text())


if __name__ == "__main__":
    main()
