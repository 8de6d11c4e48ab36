"""Tree specifications as users write them.

    chain:N        N drafted tokens in a line
    kary:KxD       K children under every node, D drafted levels
    file:PATH      a JSON tree file: {"parents": [...], "child_rank": [...], ...}
    dynamic:B      an EAGLE-2 tree chosen each step, B nodes (also dynamic:BxDxK: D levels,
                   top-K expansion); its drafts are deterministic: verify with topk
    sequoia:B[xD]  Sequoia's optimal tree, B nodes, D levels (see `rayspec.engine.policy`)
    sequoia:auto   the size minimising seconds per token on this deployment
    none           the root alone: target-only decoding
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import TreeShape

TREE_SPEC_HELP = "chain:N, kary:KxD, file:PATH.json, dynamic:B[xDxK], sequoia:B[xD], sequoia:auto, or none"


MAX_TREE_NODES = 1024  # per step: a larger tree is a mistake or an attack, not a speed-up


def _capped(nodes: int, text: str) -> None:
    if nodes > MAX_TREE_NODES:
        raise ValueError(f"tree spec {text!r} has over {MAX_TREE_NODES} nodes (the root counts); "
                         f"at most {MAX_TREE_NODES} are allowed")


def _kary_nodes(k: int, depth: int) -> int:
    """The nodes of kary:KxD, the root counted: exact up to the cap, and once past it only some
    count above it, for D may be in the millions (and k**D beyond counting)."""
    nodes, width = 1, 1
    for _ in range(depth):
        width *= k
        if not width:
            break
        nodes += width
        if nodes > MAX_TREE_NODES:
            break
    return nodes


def parse_tree_spec(spec: str | TreeShape | DynamicPlan) -> TreeShape | DynamicPlan:
    if isinstance(spec, (TreeShape, DynamicPlan)):
        return spec
    text = str(spec).strip()
    try:
        if text == "none":
            return TreeShape.chain(0)
        if match := re.fullmatch(r"chain:(\d+)", text):
            _capped(int(match[1]) + 1, text)
            return TreeShape.chain(int(match[1]))
        if match := re.fullmatch(r"kary:(\d+)x(\d+)", text):
            k, depth = int(match[1]), int(match[2])
            _capped(_kary_nodes(k, depth), text)
            return TreeShape.kary(k, depth)
        if match := re.fullmatch(r"dynamic:(\d+)(?:x(\d+)x(\d+))?", text):
            extra = {} if match[2] is None else {"depth": int(match[2]), "top_k": int(match[3])}
            plan = DynamicPlan(int(match[1]), **extra)
            _capped(max(plan.budget, plan.depth * plan.top_k**2), text)  # the drafter expands k^2 per level
            return plan
        if text.startswith("sequoia:"):
            raise ValueError("sequoia trees are planned per verifier: give the spec to the engine, not a shape")
        if text.startswith("file:"):
            path = Path(text[5:]).expanduser()  # a shell expands no `~` after `file:`, nor a YAML file
            shape = TreeShape.from_json(path.read_text())
            _capped(shape.size, text)
            return shape
    except (OSError, json.JSONDecodeError, KeyError, ValueError) as error:
        raise ValueError(f"bad tree spec {text!r}: {error}") from error
    raise ValueError(f"bad tree spec {text!r}; expected {TREE_SPEC_HELP}")
