"""One batched forward against the same calls run alone, and what its KV-cache handling costs.

    python bench/batched_forward_bench.py [--sizes 1 4 8 16] [--tree kary:2x3] [--reps 20]

For each model of the demo pair and each batch size B: B sequences, each with a prompt of its
own prefilled, each call a draft tree (`--tree`, the target's) or a root and 4 children
(the drafter's, a tree level's width).  Timed, median over `--reps` (each rep cut back to the prompt afterwards):
the B calls as one padded forward (`rayspec.models.batching.forward_batch`) and as B forwards
alone.  Under torch's profiler, per batched forward: kernel launches, and the host time spent
in `_BatchedLayer.update` — writing each sequence's new rows into its own cache and copying
every sequence's rows into the padded batch, a few operations per sequence per layer — as a
share of the forward's host time.  On a GPU a step of small kernels costs what the host spends
launching them; this says how much of a batched forward that bookkeeping is.
Writes bench/results/batched_forward_bench_{device}.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import load_demo, machine, save_results
from torch.profiler import ProfilerActivity, profile, record_function

from rayspec.models import batching
from rayspec.models.batching import _Call, forward_batch
from rayspec.models.tree_lm import TreeLM
from rayspec.tree.structure import TreeShape

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
UPDATE = "rayspec::batched_kv_update"


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def sequences(model, prompts, size) -> list[TreeLM]:
    lms = [TreeLM(model) for _ in range(size)]
    for lm, prompt in zip(lms, prompts * size):
        lm.prefill(prompt)
    return lms


def calls_for(lms, shape: TreeShape) -> list[dict]:
    return [dict(tokens=[(7 * i + 3 * s + 1) % 8000 for i in range(shape.size)], parents=list(shape.parents),
                 offsets=list(shape.depth)) for s, _ in enumerate(lms)]


def timed(run, lms, device, reps) -> float:
    """Median ms of `run()`, each rep's appended rows cut off afterwards."""
    committed = [lm.committed for lm in lms]
    times = []
    for rep in range(reps + 2):  # two warm-up reps
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        if rep >= 2:
            times.append((time.perf_counter() - start) * 1e3)
        for lm, rows in zip(lms, committed):
            lm.truncate(rows)
    return statistics.median(times)


def profiled(run, lms, device) -> dict:
    committed = [lm.committed for lm in lms]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    reps = 5
    with profile(activities=activities) as prof:
        for _ in range(reps):
            with record_function("rayspec::forward"):
                run()
            synchronize(device)
            for lm, rows in zip(lms, committed):
                lm.truncate(rows)
    events = {}
    for event in prof.key_averages():  # on CUDA a labelled range comes twice: the host's and the GPU's annotation
        if event.cpu_time_total >= getattr(events.get(event.key), "cpu_time_total", -1):
            events[event.key] = event

    def total_ms(name):
        return events[name].cpu_time_total / 1e3 / reps if name in events else 0.0

    launches = sum(events[name].count for name in LAUNCHES if name in events) / reps
    forward = total_ms("rayspec::forward")
    return {"launches": launches, "host_ms": forward, "kv_update_ms": total_ms(UPDATE),
            "kv_update_share": total_ms(UPDATE) / forward if forward else 0.0}


def measure(name, model, prompts, shape, sizes, reps, device) -> list[dict]:
    rows = []
    for size in sizes:
        lms = sequences(model, prompts, size)
        calls = calls_for(lms, shape)
        batched = lambda: forward_batch([_Call(lm, **call) for lm, call in zip(lms, calls)])  # noqa: E731
        alone = lambda: [lm.forward_alone(**call) for lm, call in zip(lms, calls)]  # noqa: E731
        row = {"model": name, "sequences": size, "nodes": shape.size,
               "batched_ms": timed(batched, lms, device, reps), "alone_ms": timed(alone, lms, device, reps)}
        row.update(profiled(batched, lms, device) if size > 1 else {})
        print(row, flush=True)
        rows.append(row)
    return rows


def markdown(results) -> str:
    m = results["machine"]
    lines = [f"# One batched forward against its calls alone ({m['device_name']}, {m['device']}, torch {m['torch']})", "",
             f"Demo pair; the target's calls are {results['tree']} trees, the drafter's a root and 4 children; "
             f"prompts of {results['prompt_tokens']} tokens on average; medians of {results['reps']} reps.", "",
             "| model | sequences | batched forward ms | the calls alone, ms | alone / batched | kernel launches per batched forward "
             "| host ms per batched forward | of which KV update ms | share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        profiled = (f"{row['launches']:.0f} | {row['host_ms']:.2f} | {row['kv_update_ms']:.2f} | {row['kv_update_share']:.0%}"
                    if "launches" in row else "- | - | - | -")
        lines.append(f"| {row['model']} | {row['sequences']} | {row['batched_ms']:.2f} | {row['alone_ms']:.2f} "
                     f"| {row['alone_ms'] / row['batched_ms']:.2f}x | {profiled} |")
    lines += ["", "KV update: `_BatchedLayer.update` over all layers — each sequence's new rows written into its own "
              "cache, then every sequence's rows copied into the padded batch that attention reads."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--tree", default="kary:2x3")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    _, _, target_model, drafter_model, _, prompts = load_demo()
    device = next(target_model.parameters()).device
    prompts = prompts[:4]
    update = batching._BatchedLayer.update

    def labelled(self, *a, **k):
        with record_function(UPDATE):
            return update(self, *a, **k)

    batching._BatchedLayer.update = labelled  # labelled for the profiler; same arithmetic
    kary, depth = (int(n) for n in args.tree.split(":")[1].split("x"))
    results = {"machine": machine(device.type), "tree": args.tree, "reps": args.reps,
               "prompt_tokens": sum(map(len, prompts)) / len(prompts), "rows": []}
    with torch.inference_mode():
        results["rows"] += measure("target", target_model, prompts, TreeShape.kary(kary, depth), args.sizes, args.reps, device)
        results["rows"] += measure("drafter", drafter_model, prompts, TreeShape.kary(4, 1),
                                   args.sizes, args.reps, device)
    save_results(args.out or f"batched_forward_bench_{device.type}", results, markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
