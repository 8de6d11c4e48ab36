"""Every causal LM of the installed transformers through tree attention (`make test-all`):
none may run wrong or fail — each is refused at load, or gives each tree node its own
forward's logits and HF's greedy decoding.  `bench/architecture_sweep.py` runs the sweep, in
a process of its own (its per-model time limit is an alarm, pytest-timeout's timer too);
about 30 s on one thread.  A transformers upgrade that adds or changes a model shows here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "architecture_sweep.py"


@pytest.mark.slow
def test_no_causal_lm_of_the_installed_transformers_runs_wrong_or_fails(tmp_path):
    subprocess.run([sys.executable, str(BENCH), "--out", str(tmp_path / "sweep")], check=True, timeout=900,
                   stdout=subprocess.DEVNULL)
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert not [(row["arch"], row["status"]) for row in rows if row["status"] in ("WRONG", "CRASH")]
    assert sum(row["status"] == "OK" for row in rows) >= 100, "the sweep must run the models, not skip them"
