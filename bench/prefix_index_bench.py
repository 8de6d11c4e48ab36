"""The prefix cache's lookup and store against how many sequences it holds: its vectorised token
index (`rayspec.models.prefix_cache._TokenIndex`) against the loop over the sequences it
replaced (`LoopedPrefixCache` below, the code before, one tensor comparison per sequence).

    python bench/prefix_index_bench.py [--out bench/results/prefix_index_bench]

Sequences of 55 tokens of their own after a head all share (`--heads`: 5 tokens, and a
500-token system prompt), one layer of one-value rows (the rows' size does not enter either
search); a lookup is a prompt sharing the head and 15 tokens more with one of them, then 20 of
its own; a store a new sequence.  One torch thread.  The entries a default
1024-MiB cache holds of the demo pair's 60-token sequences (float32 on CPU) are in the table's
header: the target's 21.5 kB a token give about 830 of them, the drafter's 2 kB about 8,700.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rayspec.models.prefix_cache import PrefixCache  # noqa: E402

OWN = 55  # tokens of a sequence after the shared head


class LoopedPrefixCache:
    """The search as it was: every lookup and store compares the tokens with each cached
    sequence in turn (lookup and store only: no capacity, no rows)."""

    def __init__(self, min_tokens: int = 16):
        self.min_tokens = min_tokens
        self._entries: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._next_key = 0

    def lookup(self, tokens) -> int:
        query = torch.as_tensor(list(tokens), dtype=torch.long)
        best, best_key = 0, None
        for key, held in self._entries.items():
            shared = _shared_prefix(held, query)
            if shared > best:
                best, best_key = shared, key
        if best < self.min_tokens or best_key is None:
            return 0
        self._entries.move_to_end(best_key)
        return best

    def store(self, tokens) -> None:
        tokens = torch.as_tensor(list(tokens), dtype=torch.long)
        for _ in range(2):  # as the cache did: before the rows' copy and after it
            for key, held in list(self._entries.items()):
                shared = _shared_prefix(held, tokens)
                if shared == len(tokens):
                    self._entries.move_to_end(key)
                    return
                if shared == len(held):
                    del self._entries[key]
        self._entries[self._next_key] = tokens
        self._next_key += 1


def _shared_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    differs = (a[:n] != b[:n]).nonzero()
    return int(differs[0]) if len(differs) else n


def sequence(generator, head: int) -> list[int]:
    return [i % 100 for i in range(head)] + torch.randint(100, 8192, (OWN,), generator=generator).tolist()


def rows(n: int):
    return [(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1))]


def timed(call, repeats: int) -> float:
    """Median milliseconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(entries: int, head: int, repeats: int, looped: bool) -> dict:
    generator = torch.Generator().manual_seed(entries)
    held = [sequence(generator, head) for _ in range(entries)]
    cache = LoopedPrefixCache() if looped else PrefixCache(1 << 50)
    for tokens in held:  # the loop's own store would take minutes here: its entries are set directly
        if looped:
            cache._entries[len(cache._entries)] = torch.tensor(tokens)
            cache._next_key = len(cache._entries)
        else:
            cache.store(tokens, rows(len(tokens)))
    prompts = [held[int(i)][:head + 15] + torch.randint(100, 8192, (20,), generator=generator).tolist()
               for i in torch.randint(0, entries, (repeats,), generator=generator)]
    found = [cache.lookup(p) if looped else cache.lookup(p)[0] for p in prompts[:3]]
    assert found == [head + 15] * 3, found  # both find the shared tokens
    prompt = iter(prompts)
    lookup = timed(lambda: cache.lookup(next(prompt)), repeats)
    new = iter([sequence(generator, head) for _ in range(repeats)])
    store = timed(lambda: (lambda t: cache.store(t) if looped else cache.store(t, rows(len(t))))(next(new)), repeats)
    return {"entries": entries, "head": head, "search": "loop" if looped else "radix tree", "lookup_ms": round(lookup, 4),
            "store_ms": round(store, 4)}


def demo_entries() -> dict:
    """How many 60-token sequences of each demo model a default cache holds (float32 rows)."""
    pair = Path(__file__).resolve().parents[1] / "rayspec" / "demo" / "pair"
    held = {}
    for model in ("target", "drafter"):
        config = json.loads((pair / model / "config.json").read_text())
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        per_token = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * 4
        held[model] = {"bytes_per_token": per_token, "entries_in_1024_mib": 1024 * 2**20 // (per_token * (5 + OWN))}
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, nargs="+", default=[10, 100, 1000, 3000, 10000])
    parser.add_argument("--heads", type=int, nargs="+", default=[5, 500])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default="bench/results/prefix_index_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows_out = [measure(n, head, args.repeats, looped) for head in args.heads for n in args.entries
                for looped in (True, False)]
    demo = demo_entries()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "repeats": args.repeats, "demo": demo,
              "rows": rows_out}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    by = {(r["head"], r["entries"], r["search"]): r for r in rows_out}
    lines = ["# Prefix cache: lookup and store against the sequences held", "",
             f"{result['date']}, `python bench/prefix_index_bench.py`, one torch thread, medians of {args.repeats} "
             f"calls.  A default 1024-MiB cache holds about the demo pair's 60-token sequences: "
             f"{demo['target']['entries_in_1024_mib']:,} of the demo target's ({demo['target']['bytes_per_token']:,} "
             f"bytes a token) and {demo['drafter']['entries_in_1024_mib']:,} of its drafter's "
             f"({demo['drafter']['bytes_per_token']:,} bytes a token).", "",
             "| shared head | sequences held | lookup ms, loop | lookup ms, radix tree | store ms, loop | "
             "store ms, radix tree |", "|---|---|---|---|---|---|"]
    for head in args.heads:
        for n in args.entries:
            loop, tree = by[(head, n, "loop")], by[(head, n, "radix tree")]
            lines.append(f"| {head} | {n:,} | {loop['lookup_ms']:.3f} | {tree['lookup_ms']:.3f} | "
                         f"{loop['store_ms']:.3f} | {tree['store_ms']:.3f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
