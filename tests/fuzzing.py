"""Hypothesis settings of the fuzz tests (tests/serve/test_fuzz.py, tests/rpc/test_codec_fuzz.py,
tests/rpc/test_worker_fuzz.py): the same examples every run, unless `RAYSPEC_FUZZ_EXPLORE` is
set to something other than 0 (new examples each run); `RAYSPEC_FUZZ_EXAMPLES` (default 60)
scales how many."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("RAYSPEC_FUZZ_EXAMPLES", "60"))


def exploring(environ=os.environ) -> bool:
    return environ.get("RAYSPEC_FUZZ_EXPLORE", "0").strip() not in ("", "0")


def fuzz_settings(max_examples: int, *more_health_checks: HealthCheck) -> settings:
    return settings(max_examples=max_examples, deadline=None, derandomize=not exploring(), database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, *more_health_checks])
