"""What the decoding benchmarks share: configurations ("arms") decoded prompt by prompt in a
rotating order, so that a slow stretch of this shared machine hits every arm alike."""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rayspec.demo import DEMO_DIR, DRAFTER_PATH, TARGET_PATH, load_prompts  # noqa: E402
from rayspec.engine import GenerationStats, LocalDrafter, LocalTarget, SpeculativeEngine  # noqa: E402
from rayspec.models import load_causal_lm  # noqa: E402
from rayspec.verify import verifier_class  # noqa: E402

RESULTS = Path(__file__).parent / "results"
ACCEPTANCE = DEMO_DIR / "acceptance"


def load_demo(device=None):
    """(target handle, drafter handle, target model, drafter model, tokenizer, prompt ids)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    target_model, tokenizer = load_causal_lm(TARGET_PATH, device)
    drafter_model, _ = load_causal_lm(DRAFTER_PATH, device)
    prompts = [tokenizer.encode(p, add_special_tokens=False) for p in load_prompts()]
    # No prefix cache (`prefix_cache_bench.py` measures it): the benches decode each prompt in
    # several arms, and a cache would hand every arm after the first its prefill.
    return (LocalTarget(target_model, tokenizer, prefix_cache_mb=0), LocalDrafter(drafter_model, tokenizer,
                                                                                   prefix_cache_mb=0),
            target_model, drafter_model,
            tokenizer, prompts)


def out_prefix(out: str | Path | None, default: str | None = None) -> Path:
    """Every script's `--out`: a path (from the current directory, or absolute) that its files
    extend with `.json`, `.md` or `.png`; no `--out`, bench/results/DEFAULT.  A bare name, with
    no directory part, goes under bench/results/ as the scripts that saved through here took
    it before the rule was shared.  The folder is made."""
    if out is None or str(out) == "":
        out = RESULTS / default
    elif "/" not in str(out):
        out = RESULTS / out
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def suffixed(prefix: Path, suffix: str) -> Path:
    """PREFIX + SUFFIX: appended, where `with_suffix` would eat a dotted tail such as `run.v2`."""
    return prefix.with_name(prefix.name + suffix)


def save_results(out: str | Path, results: dict, markdown: str) -> None:
    """OUT.json and OUT.md (`out_prefix`'s rule), the markdown printed too."""
    prefix = out_prefix(out)
    suffixed(prefix, ".json").write_text(json.dumps(results, indent=1))
    suffixed(prefix, ".md").write_text(markdown)
    print(markdown)


def machine(device: str) -> dict:
    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    return {"device": device, "device_name": name, "torch": torch.__version__, "threads": torch.get_num_threads()}


class Arm:
    """One configuration: how to decode a prompt, and its accumulated figures."""

    def __init__(self, name: str, run, kind: str = "rayspec", **meta):
        self.name, self.run, self.kind, self.meta = name, run, kind, meta
        self.tokens = self.steps = 0
        self.seconds = 0.0
        self.per_prompt: list[float] = []
        self.step_seconds: list[float] = []
        self.phases = {"draft": 0.0, "score": 0.0, "verify": 0.0, "other": 0.0}

    def decode(self, prompt, tokens, seed):
        start = time.perf_counter()
        produced, steps, phases, *walls = self.run(prompt, tokens, seed)
        elapsed = time.perf_counter() - start
        if walls:  # a run may also give each step's wall time
            self.step_seconds.extend(walls[0])
        self.tokens += produced
        self.steps += steps
        self.seconds += elapsed
        self.per_prompt.append(produced / elapsed)
        for phase, seconds in (phases or {}).items():
            self.phases[phase] += seconds

    def row(self) -> dict:
        return {
            "config": self.name, "kind": self.kind, **self.meta,
            "tokens": self.tokens, "steps": self.steps, "seconds": self.seconds,
            "tokens_per_step": self.tokens / max(self.steps, 1),
            "tokens_per_s": self.tokens / self.seconds if self.seconds else 0.0,
            "median_prompt_tokens_per_s": statistics.median(self.per_prompt) if self.per_prompt else 0.0,
            "phase_seconds": self.phases,
            **({"step_ms": {name: 1e3 * float(value) for name, value in zip(
                ("p50", "p99", "p999", "max"), np.quantile(self.step_seconds, [0.5, 0.99, 0.999, 1.0]))}}
               if self.step_seconds else {}),
        }


def fits(verifier: str, tree: str) -> bool:
    """Whether a static tree's widest node suits the verifier (Sequoia trees adapt to it)."""
    width = int(tree.split(":")[1].split("x")[0]) if tree.startswith("kary:") else 1
    return width <= (verifier_class(verifier).max_drafts or width)


def engine_arm(name, target, drafter, verifier, tree, temperature, acceptance_dir, costs=None, adaptive=True, **meta):
    engine = SpeculativeEngine(target, drafter, verifier=verifier, tree=tree, acceptance_dir=acceptance_dir,
                               costs=costs, adaptive=adaptive)

    def run(prompt, tokens, seed):
        stats = GenerationStats()
        # seeded for paired arms, yet drafting the adapted trees an adaptive engine is measured for
        for _ in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats,
                                 replayable=False):
            pass
        return stats.tokens, len(stats.steps), stats.phase_seconds(), [step.wall for step in stats.steps]

    arm = Arm(name, run, verifier=verifier, tree=tree, temperature=temperature, **meta)
    arm.engine = engine
    return arm


def interleave(arms, prompts, tokens, label, warm_up=True):
    """Every arm decodes prompt i before any decodes prompt i + 1, in a rotating order; first
    (`warm_up`) one short untimed decode each: a process's first decode loads kernels and
    grows its caches, which on a GPU would be charged to whichever arm went first."""
    if warm_up:
        for arm in arms:
            arm.run(prompts[0], min(tokens, 16), 0)
    for i, prompt in enumerate(prompts):
        order = arms[i % len(arms):] + arms[: i % len(arms)]
        for arm in order:
            arm.decode(prompt, tokens, seed=1000 + i)
        print(f"  {label}: prompt {i + 1}/{len(prompts)}", flush=True)
    return [arm.row() for arm in arms]
