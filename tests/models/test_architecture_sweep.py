"""Every causal LM of the installed transformers through tree attention (`make test-all`):
none may run wrong or fail — each is refused at load, or gives each tree node its own
forward's logits and HF's greedy decoding (`bench/architecture_sweep.py`, whose sweep this
runs, 30 s on one thread).  A transformers upgrade that adds or changes a model shows here."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_no_causal_lm_of_the_installed_transformers_runs_wrong_or_fails(monkeypatch):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    monkeypatch.syspath_prepend(str(BENCH))  # the bench's `common`
    spec = importlib.util.spec_from_file_location("architecture_sweep", BENCH / "architecture_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    previous = signal.signal(signal.SIGALRM, sweep._alarm)  # a model's pass is cut off, not the suite
    try:
        rows = [sweep.sweep(name) for name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)]
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not [(row["arch"], row["status"]) for row in rows if row["status"] in ("WRONG", "CRASH")]
    assert sum(row["status"] == "OK" for row in rows) >= 100, "the sweep must run the models, not skip them"
