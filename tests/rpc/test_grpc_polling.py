"""rayspec's processes that serve or call workers run gRPC with the EventEngine experiments of
`rayspec.rpc.GRPC_POLLING` off, set before grpc loads (it reads them once); a process whose
environment names GRPC_EXPERIMENTS keeps its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rayspec.rpc import GRPC_POLLING, grpc_environment

ROOT = Path(__file__).resolve().parents[2]

# Runs `python -m rayspec.rpc.worker --help` in this process and prints GRPC_EXPERIMENTS as it
# was when grpc was first imported ("<unset>" if it was not set then).
_SEEN_BY_GRPC = textwrap.dedent("""
    import os, runpy, sys

    seen = []

    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name == "grpc" and not seen:
                seen.append(os.environ.get("GRPC_EXPERIMENTS", "<unset>"))
            return None

    sys.meta_path.insert(0, Watch())
    sys.argv = ["rayspec.rpc.worker", "--help"]
    try:
        runpy.run_module("rayspec.rpc.worker", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    print("SEEN", seen[0] if seen else "<grpc never imported>")
""")


def _seen_by_grpc(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", _SEEN_BY_GRPC], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    assert lines, done.stderr[-2000:]
    return lines[-1].removeprefix("SEEN ")


def _environment_without_experiments() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}


def test_a_plain_worker_sets_the_polling_before_grpc_loads():
    assert _seen_by_grpc(_environment_without_experiments()) == GRPC_POLLING


def test_a_plain_worker_keeps_the_callers_own_setting():
    assert _seen_by_grpc({**_environment_without_experiments(), "GRPC_EXPERIMENTS": ""}) == ""
    own = "-event_engine_client"
    assert _seen_by_grpc({**_environment_without_experiments(), "GRPC_EXPERIMENTS": own}) == own


def test_grpc_environment_defaults_and_defers(monkeypatch):
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    assert grpc_environment() == {"GRPC_EXPERIMENTS": GRPC_POLLING}
    assert all(name.startswith("-event_engine_") for name in GRPC_POLLING.split(","))
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")
    assert grpc_environment() == {"GRPC_EXPERIMENTS": ""}


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads a process's environment from /proc")
def test_worker_processes_are_started_with_it(tmp_path, monkeypatch):
    from rayspec.rpc.process import Worker
    from tests.rpc.processes import save_tiny_pair

    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    target_path, _ = save_tiny_pair(tmp_path)
    worker = Worker(tmp_path / "target.log", "--role", "target", "--model", str(target_path))
    try:
        raw = Path(f"/proc/{worker.process.pid}/environ").read_bytes()
    finally:
        worker.stop()
    environment = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    assert environment[b"GRPC_EXPERIMENTS"] == GRPC_POLLING.encode()
    assert environment[b"OMP_WAIT_POLICY"] == b"PASSIVE"


def test_ray_processes_are_given_it(monkeypatch):
    """Ray loads grpc in its processes before any of ours: the actors' and the Serve
    replica's runtime environments carry the setting from their start."""
    pytest.importorskip("ray")
    from rayspec.cluster.actors import coordinator_runtime_env, model_runtime_env
    from rayspec.serve.app import coordinator_actor_options

    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert coordinator_runtime_env() == {"env_vars": {"GRPC_EXPERIMENTS": GRPC_POLLING}}
    assert model_runtime_env() == {"env_vars": {"GRPC_EXPERIMENTS": GRPC_POLLING, "OMP_WAIT_POLICY": "PASSIVE"}}
    assert coordinator_actor_options(None)["runtime_env"] == {"env_vars": {"GRPC_EXPERIMENTS": GRPC_POLLING}}
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")
    assert model_runtime_env()["env_vars"]["GRPC_EXPERIMENTS"] == ""
