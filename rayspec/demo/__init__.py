"""The demo target/drafter pair, trained here on the Python standard library and shipped.

Both directories load offline exactly like a downloaded pair::

    AutoModelForCausalLM.from_pretrained(TARGET_PATH, dtype=torch.float32)
    AutoTokenizer.from_pretrained(TARGET_PATH)

``python -m rayspec.demo.train`` reproduces them; ``pair/README.md`` is the model card.
"""

from __future__ import annotations

import json
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent / "pair"
TARGET_PATH = DEMO_DIR / "target"
DRAFTER_PATH = DEMO_DIR / "drafter"
METRICS_PATH = DEMO_DIR / "metrics.json"
PROMPTS_PATH = Path(__file__).resolve().parent / "prompts.json"


def load_prompts(n: int | None = None) -> list[str]:
    """The held-out code prompts (texts), in their fixed order; the first ``n`` if given."""
    prompts = [p["text"] for p in json.loads(PROMPTS_PATH.read_text())["prompts"]]
    return prompts if n is None else prompts[:n]


__all__ = ["DEMO_DIR", "TARGET_PATH", "DRAFTER_PATH", "METRICS_PATH", "PROMPTS_PATH", "load_prompts"]
