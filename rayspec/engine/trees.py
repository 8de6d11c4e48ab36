"""Tree specifications as users write them.

    chain:N        N drafted tokens in a line
    kary:KxD       K children under every node, D drafted levels
    file:PATH      a JSON tree file: {"parents": [...], "child_rank": [...], ...}
    none           the root alone: target-only decoding
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rayspec.tree.structure import TreeShape

TREE_SPEC_HELP = "chain:N, kary:KxD (K children per node, D levels), file:PATH.json, or none"


def parse_tree_spec(spec: str | TreeShape) -> TreeShape:
    if isinstance(spec, TreeShape):
        return spec
    text = str(spec).strip()
    try:
        if text == "none":
            return TreeShape.chain(0)
        if match := re.fullmatch(r"chain:(\d+)", text):
            return TreeShape.chain(int(match[1]))
        if match := re.fullmatch(r"kary:(\d+)x(\d+)", text):
            return TreeShape.kary(int(match[1]), int(match[2]))
        if text.startswith("file:"):
            path = Path(text[5:])
            return TreeShape.from_json(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, KeyError, ValueError) as error:
        raise ValueError(f"bad tree spec {text!r}: {error}") from error
    raise ValueError(f"bad tree spec {text!r}; expected {TREE_SPEC_HELP}")
