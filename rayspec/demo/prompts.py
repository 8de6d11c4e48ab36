"""Held-out code prompts for tests and benchmarks.

A prompt is a piece of a held-out file that ends right after a one-line ``def ...:`` header and
starts at a line boundary: the model is asked to write the function body, the completion task
speculative decoding is most often measured on.  Each prompt takes as many whole lines before
the header as fit in a length drawn uniformly from ``[min_tokens, max_tokens]``, so that prompt
lengths vary as requests' do.
"""

from __future__ import annotations

import random
import re

from rayspec.demo.corpus import SourceFile

_DEF_LINE = re.compile(r"^\s*(async\s+)?def\s+\w+\s*\(.*\)\s*(->.*)?:\s*$")


def _candidates(text: str, count, min_tokens: int, max_tokens: int,
                rng: random.Random) -> list[tuple[int, str, int]]:
    lines = text.splitlines(keepends=True)
    found = []
    for end, line in enumerate(lines):
        if not _DEF_LINE.match(line):
            continue
        budget = rng.randint(min_tokens, max_tokens)
        start, best = end, None
        while start >= 0:
            n = count("".join(lines[start:end + 1]))
            if n > budget:
                break
            best = (start, n)
            start -= 1
        if best is not None and best[1] >= min_tokens:
            found.append((end + 1, "".join(lines[best[0]:end + 1]), best[1]))
    return found


def build_prompts(files: list[SourceFile], count, n: int = 100, min_tokens: int = 32,
                  max_tokens: int = 128, seed: int = 0) -> list[dict]:
    """``n`` prompts drawn round-robin over ``files`` (so no file dominates), reproducibly.

    ``count(text) -> int`` is the tokenizer's length of ``text``.
    """
    rng = random.Random(seed)
    per_file = []
    for f in sorted(files, key=lambda f: f.relpath):
        cands = _candidates(f.read(), count, min_tokens, max_tokens, rng)
        rng.shuffle(cands)
        if cands:
            per_file.append((f.relpath, cands))
    rng.shuffle(per_file)
    prompts: list[dict] = []
    depth = 0
    while len(prompts) < n and any(depth < len(c) for _, c in per_file):
        for relpath, cands in per_file:
            if depth < len(cands) and len(prompts) < n:
                line, text, n_tokens = cands[depth]
                prompts.append({"source": relpath, "line": line, "n_tokens": n_tokens, "text": text})
        depth += 1
    return prompts
