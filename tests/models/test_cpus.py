"""Pinning a process to CPUs (rayspec.models.threads): taskset-style lists, clear errors,
and every thread of the process — running or started later — kept there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rayspec.models.threads import parse_cpu_list


@pytest.mark.parametrize("spec, cpus", [("0", {0}), ("0-3,8", {0, 1, 2, 3, 8}), (" 2, 4-5", {2, 4, 5}), ("1-1", {1})])
def test_cpu_lists_read_as_taskset_writes_them(spec, cpus):
    assert parse_cpu_list(spec) == cpus


@pytest.mark.parametrize("spec, message", [("", "cpus must be a list like"), ("0-", "cpus must be a list like"),
                                           ("a", "cpus must be a list like"), ("3-1", "runs backwards"),
                                           ("-1", "cpus must be a list like"), ("\u00b2", "cpus must be a list like"),
                                           ("0-99999999999", "'0-99999999999' names CPU 99999999999; no machine has CPU ids "
                                                             "above 65535")])
def test_bad_cpu_lists_are_refused_with_a_message(spec, message):
    """At once: a range of 10^11 ids was a set of them, which took the machine's memory."""
    with pytest.raises(ValueError, match=message):
        parse_cpu_list(spec)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU pinning is Linux-only")
def test_pinning_to_cpus_the_machine_lacks_names_a_few_of_them():
    from rayspec.models.threads import pin_process_to_cpus

    machine = os.cpu_count()
    with pytest.raises(ValueError, match=rf"CPU\(s\) \[{machine}, {machine + 1}, .*, {machine + 7} and 992 more\] are "
                                         rf"not available to this process"):
        pin_process_to_cpus(f"0-{machine + 999}")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU pinning is Linux-only")
def test_pinning_moves_running_threads_and_caps_torch_threads():
    # in a child process: pinning this one would pin the rest of the test session
    script = """
import json, os, threading, torch
from rayspec.models.threads import pin_process_to_cpus
torch.set_num_threads(64)
waiting = threading.Event()
before = threading.Thread(target=waiting.wait); before.start()
cpu = max(os.sched_getaffinity(0))
pin_process_to_cpus(str(cpu))
after = []
started = threading.Thread(target=lambda: after.append(os.sched_getaffinity(0))); started.start(); started.join()
print(json.dumps({"cpu": cpu, "before": sorted(os.sched_getaffinity(before.native_id)), "after": sorted(after[0]),
                  "main": sorted(os.sched_getaffinity(0)), "torch_threads": torch.get_num_threads()}))
waiting.set()
"""
    seen = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert seen["before"] == seen["after"] == seen["main"] == [seen["cpu"]]
    assert seen["torch_threads"] == 1
