"""Plain-process workers at start-up, as the README starts them on a machine without Ray: a
model that cannot load is one error line and exit status 1; a coordinator started before
its workers waits for them (they may still be loading) and then serves; one whose worker
never comes gives up at `--wait-for-workers` with a line saying which."""

from __future__ import annotations

import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests.loopback import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER = [sys.executable, "-m", "rayspec.rpc.worker"]


def test_a_worker_whose_model_cannot_load_says_so_and_exits(tmp_path):
    missing = tmp_path / "no-such-model"
    done = subprocess.run([*WORKER, "--role", "drafter", "--model", str(missing)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"rayspec worker: error: cannot load a causal LM from '{missing}'"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_coordinator_started_before_its_workers_waits_for_them_then_serves():
    from rayspec.client import Client

    target_port, drafter_port, port = free_port(), free_port(), free_port()
    coordinator = subprocess.Popen(
        [*WORKER, "--role", "coordinator", "--port", str(port), "--target", f"127.0.0.1:{target_port}",
         "--drafter", f"127.0.0.1:{drafter_port}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    workers = []
    try:
        time.sleep(4)
        assert coordinator.poll() is None, coordinator.communicate()
        for role, worker_port in (("target", target_port), ("drafter", drafter_port)):
            workers.append(subprocess.Popen([*WORKER, "--role", role, "--port", str(worker_port)], cwd=ROOT,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        assert coordinator.stdout.readline().strip() == f"READY coordinator 127.0.0.1:{port}"
        with Client(f"127.0.0.1:{port}", timeout=60) as sdk:
            assert len(sdk.generate("def f(x):", max_tokens=5, seed=3).token_ids) == 5
    finally:
        for process in (coordinator, *workers):
            process.kill()
            process.wait(30)
    assert f"waiting for the target worker at 127.0.0.1:{target_port}" in coordinator.stderr.read()


def test_a_coordinator_gives_up_on_a_worker_that_never_comes():
    target_port = free_port()
    done = subprocess.run([*WORKER, "--role", "coordinator", "--target", f"127.0.0.1:{target_port}",
                           "--wait-for-workers", "3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"rayspec worker: error: the target worker at 127.0.0.1:{target_port} did not answer within 3 s")


@pytest.mark.parametrize("flags, status, message", [
    (["--role", "target", "--port", "70000"], 2,
     "argument --port: a port is a whole number from 0 to 65535 (0: any free one), got '70000'"),
    (["--role", "target", "--port", "-5"], 2, "argument --port: a port is a whole number from 0 to 65535"),
    (["--role", "target", "--threads", "0"], 2,
     "argument --threads: a whole number, 1 or more, is needed, got '0'"),
    (["--role", "coordinator", "--target", "here", "--wait-for-workers", "-1"], 2,
     "--wait-for-workers is a number of seconds, 0 or more, got -1"),
    (["--role", "target", "--device", "tpu"], 1, "rayspec worker: error: device must be auto, cpu, cuda or cuda:N"),
    (["--role", "drafter", "--dtype", "float64"], 1,
     "rayspec worker: error: dtype must be one of auto, float32, float16, bfloat16; got 'float64'"),
    (["--role", "coordinator", "--target", "here", "--verifier", "nope"], 2,
     "unknown verifier 'nope'; available: greedy"),
    (["--role", "target", "--prefix-cache-mb", "inf"], 2,
     "--prefix-cache-mb must be a finite number of megabytes, 0 or more, got inf"),
    # before waiting (here 600 s) for workers that never come
    (["--role", "coordinator", "--target", "127.0.0.1:1", "--tree", "kary:2x3x4"], 2, "bad tree spec 'kary:2x3x4'"),
    (["--role", "coordinator", "--target", "127.0.0.1:1", "--tree", "kary:4x2", "--verifier", "sps"], 2,
     "verifier 'sps' takes at most 1 draft(s) per node, the tree has a node with 4 children"),
])
def test_a_workers_bad_flags_are_one_error_line_before_it_serves(flags, status, message, capsys, monkeypatch):
    """Bad flags are refused with what is wrong and nothing else: an exit status (2: argparse's
    usage error; 1: refused by the model or engine), a message, no traceback, no server."""
    from rayspec.rpc import worker
    from rayspec.rpc.worker import main

    class Served(Exception):
        pass

    def serving():  # instead of waiting for a signal, in this test's process
        raise Served("the worker started serving")

    monkeypatch.setattr(worker, "threading", types.SimpleNamespace(Event=serving))
    try:
        outcome = main([*flags, "--port", "0"] if "--port" not in flags else flags)
    except SystemExit as exit:
        outcome = exit.code
    assert outcome == status
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1] and "Traceback" not in err
