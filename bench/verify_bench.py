"""Time `verify_tree` for every verifier on a 64-node tree at realistic vocabulary sizes.

    python bench/verify_bench.py [--vocab 32000 128256] [--repeats 100] [--device cpu|cuda]

The tree: 64 nodes, depth <= 8, up to 8 children per node, grown best-first from a
positional acceptance vector (the shape a Sequoia-style planner produces).  Verifiers
limited to two drafts per node (SpecHub) get the binary tree grown the same way; the
single-draft ones (sps, mentored) a chain of 8.  Probability rows are float32 on the
device; each node's drafts are drawn by the verifier's own scheme from its q row; the
target rows are Zipf-like (top token 0.2-0.6) and the draft rows a noisy copy
(per-token 1 - TV about 0.7).

For each figure the physical floor is printed beside it: the time to read, once, the p and q
rows the walk actually touches (visited nodes), at the memory bandwidth measured by summing
a large buffer on the same device.  Writes bench/results/verify_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import heapq
import json
import platform
import statistics
import time

import torch

from common import out_prefix, suffixed
from rayspec.coupling import KeyedNoise
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify import available_verifiers, get_verifier

RANK_ACCEPTANCE = [0.55, 0.15, 0.08, 0.05, 0.03, 0.02, 0.015, 0.01]


def best_first_tree(size: int, max_children: int, max_depth: int) -> TreeShape:
    """The tree of the `size` nodes with the highest path acceptance products (EAGLE-2 style).

    A candidate child of rank r under node v scores score(v) * RANK_ACCEPTANCE[r]; a child never
    outscores its parent, so taking candidates best-first always yields a connected tree."""
    score, parents, depth = [1.0], [-1], [0]
    candidates = [(-RANK_ACCEPTANCE[0], 0, 0, 0)]  # (-score, tiebreak, parent, rank)
    while len(parents) < size and candidates:
        neg_score, _, parent, rank = heapq.heappop(candidates)
        node = len(parents)
        score.append(-neg_score)
        parents.append(parent)
        depth.append(depth[parent] + 1)
        if rank + 1 < max_children:
            heapq.heappush(candidates, (-score[parent] * RANK_ACCEPTANCE[rank + 1], node, parent, rank + 1))
        if depth[node] < max_depth:
            heapq.heappush(candidates, (-score[node] * RANK_ACCEPTANCE[0], node, node, 0))
    order = _bfs_order(parents)
    new_index = {old: new for new, old in enumerate(order)}
    return TreeShape(tuple(-1 if old == 0 else new_index[parents[old]] for old in order))


def _bfs_order(parents: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for node, parent in enumerate(parents[1:], start=1):
        children.setdefault(parent, []).append(node)
    order, queue = [], [0]
    while queue:
        node = queue.pop(0)
        order.append(node)
        queue.extend(children.get(node, []))
    return order


def tree_for(verifier) -> TreeShape:
    if verifier.max_drafts == 1:
        return TreeShape.chain(8)
    return best_first_tree(64, min(8, verifier.max_drafts or 8), 8)


def make_rows(size: int, vocab: int, device, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """LM-like rows: Zipf logits (exponent 1.1-2.0 per node, random token order) for the
    target; the drafter's logits are the target's plus Gaussian noise."""
    exponent = 1.1 + 0.9 * torch.rand(size, 1, generator=generator)
    ranks = torch.argsort(torch.rand(size, vocab, generator=generator), dim=-1) + 1
    logits = -exponent * ranks.double().log()
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits + 0.8 * torch.randn(size, vocab, generator=generator, dtype=torch.float64), -1)
    return target.float().to(device), draft.float().to(device)


def draft_tree(verifier, shape: TreeShape, q: torch.Tensor, randomness) -> DraftTree:
    tokens = torch.zeros(shape.size, dtype=torch.long)
    for node in shape.internal_nodes:
        kids = shape.children[node]
        noise = randomness.shifted(shape.depth[node]) if isinstance(randomness, KeyedNoise) else randomness
        drafts = verifier.sample_drafts_batch(q[node : node + 1], len(kids), noise)[0].cpu()
        tokens[list(kids)] = torch.where(drafts >= 0, drafts, 0)
    return DraftTree(shape, tokens)


def memory_bandwidth(device) -> float:
    """Bytes per second of a streaming read (sum of a 256 MB buffer), best of 5."""
    buffer = torch.ones(64 * 1024 * 1024, device=device)
    best = float("inf")
    for _ in range(5):
        _sync(device)
        start = time.perf_counter()
        buffer.sum()
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return buffer.numel() * 4 / best


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def bench(name: str, vocab: int, repeats: int, device, bandwidth: float) -> dict:
    verifier = get_verifier(name)
    shape = tree_for(verifier)
    generator = torch.Generator().manual_seed(0)
    p, q = make_rows(shape.size, vocab, device, generator)
    coupled = verifier.drafter_invariant
    times, touched, accepted = [], [], []
    for rep in range(repeats + 5):
        # The rows are the same at every repeat, where a served step's are new: a verifier that
        # remembers what it solved for rows (is-weighted's rules) would time its memory instead.
        verifier = get_verifier(name)
        randomness = KeyedNoise(rep, 100) if coupled else torch.Generator().manual_seed(rep)
        tree = draft_tree(verifier, shape, q, randomness)
        _sync(device)
        start = time.perf_counter()
        verdict = verifier.verify_tree(tree, p, q, randomness)
        _sync(device)
        elapsed = time.perf_counter() - start
        if rep >= 5:  # warm-up
            times.append(elapsed)
            visited = [0, *verdict.path]
            rows = len(visited) + sum(1 for v in visited if shape.children[v]) * verifier.needs_draft_probs
            touched.append(rows * vocab * p.element_size())
            accepted.append(verdict.num_accepted)
    median_bytes = statistics.median(touched)
    return {
        "verifier": name,
        "vocab": vocab,
        "tree_nodes": shape.size,
        "tree_depth": shape.max_depth,
        "max_children": shape.max_children,
        "median_ms": statistics.median(times) * 1e3,
        "p90_ms": sorted(times)[int(0.9 * len(times))] * 1e3,
        "mean_accepted": statistics.fmean(accepted),
        "median_bytes_touched": median_bytes,
        "floor_ms": median_bytes / bandwidth * 1e3,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--verifiers", nargs="+", default=available_verifiers())
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="default: bench/results/verify_bench")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    bandwidth = memory_bandwidth(args.device)
    rows = []
    for vocab in args.vocab:
        for name in args.verifiers:
            row = bench(name, vocab, args.repeats, args.device, bandwidth)
            rows.append(row)
            print(
                f"V={vocab:>6} {name:>12}: median {row['median_ms']:7.3f} ms  (floor {row['floor_ms']:.3f} ms, "
                f"{row['tree_nodes']} nodes, accepted {row['mean_accepted']:.2f})",
                flush=True,
            )
    meta = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "bandwidth_GBps": bandwidth / 1e9,
        "repeats": args.repeats,
    }
    out = out_prefix(args.out, "verify_bench")
    suffixed(out, ".json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    lines = [
        f"# verify_tree timings ({meta['device']}, {meta['device_name']}, torch {meta['torch']}, "
        f"{meta['threads']} threads, read bandwidth {meta['bandwidth_GBps']:.1f} GB/s)",
        "",
        "| V | verifier | tree (nodes/depth/max children) | median ms | p90 ms | floor ms | accepted/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['vocab']} | {r['verifier']} | {r['tree_nodes']}/{r['tree_depth']}/{r['max_children']} | "
            f"{r['median_ms']:.3f} | {r['p90_ms']:.3f} | {r['floor_ms']:.3f} | {r['mean_accepted']:.2f} |"
        )
    lines.append("")
    lines.append("floor = bytes of the p and q rows the walk touched (median) / measured read bandwidth.")
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {suffixed(out, '.json')} and {suffixed(out, '.md')}")


if __name__ == "__main__":
    main()
