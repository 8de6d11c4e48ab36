"""Plain-process workers at start-up, as the README starts them on a machine without Ray: a
model that cannot load is one error line and exit status 1; a coordinator started before
its workers waits for them (they may still be loading) and then serves; one whose worker
never comes gives up at `--wait-for-workers` with a line saying which."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests.loopback import free_port
from tests.signals import NESTED_SIGNALS

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


@pytest.mark.parametrize("where, said", [("/no/such/tokenizer", "Repo id must"), ("/etc", "")])
def test_a_coordinators_tokenizer_that_cannot_load_is_one_line_naming_the_flag_before_any_wait(where, said):
    """Before the wait for workers that may take minutes, and in one line that names the
    flag (the loader's own messages run to five lines, or speak of repo ids)."""
    done = subprocess.run([*WORKER, "--role", "coordinator", "--target", f"127.0.0.1:{free_port()}",
                           "--tokenizer", where], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rayspec worker: error: --tokenizer: cannot load a tokenizer from '{where}': {said}")
    assert "waiting for the target worker" not in done.stderr


@pytest.mark.parametrize("key, said", [("secret\n", "$RAYSPEC_API_KEY holds '\\n'"),
                                       (" secret", "$RAYSPEC_API_KEY begins or ends with a space")])
def test_a_coordinators_api_key_no_client_can_send_is_refused_before_it_waits(key, said, monkeypatch, capsys):
    """As `rayspec serve` refuses it: a key HTTP and gRPC cannot carry as given matches no call."""
    from rayspec.rpc import worker

    monkeypatch.setenv("RAYSPEC_API_KEY", key)
    monkeypatch.setattr(worker, "wait_for_worker", lambda *_: pytest.fail("waited for the workers"))
    with pytest.raises(SystemExit) as exited:
        worker.main(["--role", "coordinator", "--target", "127.0.0.1:1", "--port", "0"])
    assert exited.value.code == 2 and said in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("seconds", [float("inf"), 1e10])
def test_a_wait_for_workers_beyond_grpcs_deadlines_waits_for_ever(seconds):
    """gRPC's deadline overflowed past ~290 years: `--wait-for-workers inf` gave up after the
    first 2 s, saying the worker "did not answer within inf s"."""
    import threading

    from rayspec.rpc.server import HealthServicer, start_server
    from rayspec.rpc.generated import health_pb2_grpc
    from rayspec.rpc.worker import _wait_for_worker

    port, servers = free_port(), []

    def come_late():
        time.sleep(3)
        servers.append(start_server(lambda server: health_pb2_grpc.add_HealthServicer_to_server(
            HealthServicer([]), server), f"127.0.0.1:{port}")[0])

    threading.Thread(target=come_late, daemon=True).start()
    try:
        assert _wait_for_worker("target", f"127.0.0.1:{port}", seconds)
    finally:
        for server in servers:
            server.stop(0)


@pytest.mark.parametrize("flags, status, message", [
    (["--role", "target", "--port", "70000"], 2,
     "argument --port: a port is a whole number from 0 to 65535 (0: any free one), got '70000'"),
    (["--role", "target", "--port", "-5"], 2, "argument --port: a port is a whole number from 0 to 65535"),
    (["--role", "target", "--threads", "0"], 2,
     "argument --threads: a whole number, 1 or more, is needed, got '0'"),
    (["--role", "coordinator", "--target", "here", "--wait-for-workers", "-1"], 2,
     "--wait-for-workers is a number of seconds, 0 or more, got -1"),
    (["--role", "coordinator", "--target", "here", "--max-concurrent-requests", "0"], 2,
     "argument --max-concurrent-requests: a whole number, 1 or more, is needed, got '0'"),
    (["--role", "coordinator", "--target", "here", "--max-queued-requests", "-1"], 2,
     "argument --max-queued-requests: a whole number, 0 or more, is needed, got '-1'"),
    (["--role", "target", "--device", "tpu"], 1, "rayspec worker: error: device must be auto, cpu, cuda or cuda:N"),
    (["--role", "drafter", "--dtype", "float64"], 1,
     "rayspec worker: error: dtype must be one of auto, float32, float16, bfloat16; got 'float64'"),
    (["--role", "coordinator", "--target", "here", "--verifier", "nope"], 2,
     "unknown verifier 'nope'; available: greedy"),
    # command-line errors name the flags, as --prefix-cache-mb's did
    (["--role", "target", "--max-batch-sequences", "0"], 2,
     "python -m rayspec.rpc.worker: error: --max-batch-sequences must be a whole number, 1 or more, got 0"),
    (["--role", "target", "--max-batch-tokens", "0"], 2,
     "python -m rayspec.rpc.worker: error: --max-batch-tokens must be a whole number, 1 or more, got 0"),
    (["--role", "drafter", "--prefill-chunk-tokens", "-1"], 2,
     "python -m rayspec.rpc.worker: error: --prefill-chunk-tokens must be a whole number, 0 or more, got -1"),
    (["--role", "drafter", "--draft-top-k", "-1"], 2,
     "python -m rayspec.rpc.worker: error: --draft-top-k must be a whole number, 0 (off) or more, got -1"),
    (["--role", "target", "--prefix-cache-mb", "inf"], 2,
     "--prefix-cache-mb must be a finite number of megabytes, 0 or more, got inf"),
    # before waiting (here 600 s) for workers that never come
    (["--role", "coordinator", "--target", "127.0.0.1:1", "--tree", "kary:2x3x4"], 2, "bad tree spec 'kary:2x3x4'"),
    (["--role", "coordinator", "--target", "127.0.0.1:1", "--tree", "kary:4x2", "--verifier", "sps"], 2,
     "verifier 'sps' takes at most 1 draft(s) per node, the tree has a node with 4 children"),
    # a worker's address that names no port would be waited for in vain; gRPC dials a port past
    # 65535 modulo 65536 (99999: 34463, where another server may well answer)
    (["--role", "coordinator", "--target", "127.0.0.1"], 2,
     "--target: a worker's address is HOST:PORT ([IPv6]:PORT) or 'here', got '127.0.0.1'"),
    (["--role", "coordinator", "--target", "::1"], 2,  # not port 1 of host ":"
     "--target: a worker's address is HOST:PORT ([IPv6]:PORT) or 'here', got '::1'"),
    (["--role", "coordinator", "--target", "[::1]"], 2,
     "--target: a worker's address is HOST:PORT ([IPv6]:PORT) or 'here', got '[::1]'"),
    (["--role", "coordinator", "--target", "127.0.0.1:abc"], 2,
     "--target '127.0.0.1:abc': a port is a whole number from 0 to 65535"),
    (["--role", "coordinator", "--target", "127.0.0.1:\u0661\u0662"], 2,  # Arabic-Indic 12: int() reads it, gRPC not
     "--target '127.0.0.1:\u0661\u0662': a port is a whole number from 0 to 65535"),
    (["--role", "coordinator", "--target", "here", "--drafter", "127.0.0.1:99999"], 2,
     "--drafter '127.0.0.1:99999': a port is a whole number from 0 to 65535 (0: any free one), got '99999'"),
    (["--role", "coordinator", "--target", "[::1]:0"], 2, "--target '[::1]:0': port 0 names no worker"),
    # an empty --host (an unset variable's) was refused by gRPC once the model had loaded, as a port in use
    (["--role", "target", "--host", ""], 2,
     "argument --host: a host name or IP address is needed (0.0.0.0: every interface), got ''"),
    (["--role", "coordinator", "--target", "here", "--host", " "], 2, "argument --host: a host name or IP address"),
    # a --host that is not this machine's, refused before the model loads, with port 0 as with another
    (["--role", "target", "--host", "192.0.2.99"], 1, "rayspec worker: error: cannot"),
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


@pytest.mark.parametrize("flags, message", [
    *((["--role", role, flag, value],
       f"{flag} is a coordinator's flag (--role coordinator); a {role} worker ignores it")
      for role, flag, value in (
          ("target", "--tree", "kary:4x2"), ("drafter", "--verifier", "greedy"), ("target", "--verify-at", "target"),
          ("drafter", "--draft-timeout", "5"), ("target", "--draft-hedge", "2"), ("drafter", "--acceptance-dir", "a"),
          ("target", "--tokenizer", "t"), ("drafter", "--target", "here"), ("target", "--drafter", "127.0.0.1:1"),
          ("drafter", "--wait-for-workers", "600"), ("target", "--max-concurrent-requests", "4"),
          ("drafter", "--max-queued-requests", "0"))),
    (["--role", "target", "--draft-top-k", "16"], "--draft-top-k is the drafter's flag (--role drafter, or --role "
     "coordinator with --drafter here); a target worker ignores it"),
    (["--role", "coordinator", "--target", "here", "--drafter", "127.0.0.1:1", "--draft-top-k", "16"],
     "--draft-top-k is the drafter's flag (--role drafter, or --role coordinator with --drafter here); "
     "a coordinator without --drafter here ignores it"),
    (["--role", "coordinator", "--target", "127.0.0.1:1", "--drafter", "127.0.0.1:2", "--model", "m"],
     "--model names the model a coordinator runs itself (--target here or --drafter here); this one runs none"),
    *((["--role", "coordinator", "--target", "127.0.0.1:1", flag, value],
       f"{flag} sets the model a coordinator runs itself (--target here or --drafter here); this one runs none")
      for flag, value in (("--device", "cuda"), ("--dtype", "bfloat16"), ("--prefix-cache-mb", "0"),
                          ("--max-batch-sequences", "1"), ("--max-batch-tokens", "512"),
                          ("--prefill-chunk-tokens", "0"))),
])
def test_a_flag_the_role_ignores_is_a_usage_error_before_anything_loads(flags, message, capsys, monkeypatch):
    """A coordinator's flag given to a target or drafter worker, --draft-top-k where no drafter
    runs, --model or a model's setting (--device, --prefix-cache-mb, ...) where no model runs:
    each was checked, then silently ignored, and the operator believed it had taken effect."""
    import rayspec.models
    from rayspec.rpc.worker import main

    def loading(*_, **__):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(rayspec.models, "load_causal_lm", loading)
    with pytest.raises(SystemExit) as exit:
        # a coordinator's workers not waited for: were the flag ignored, the test would not wait 600 s
        main([*flags, "--port", "0", *(["--wait-for-workers", "0"] if flags[1] == "coordinator" else [])])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"python -m rayspec.rpc.worker: error: {message}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_coordinator_stopped_while_it_waits_for_its_workers_says_so_in_a_line(sig):
    """Ctrl-C or SIGTERM before the READY line (loading a model, waiting for workers): one
    line and status 130, as `rayspec serve` answers, not a KeyboardInterrupt's traceback."""
    coordinator = subprocess.Popen(
        [*WORKER, "--role", "coordinator", "--target", f"127.0.0.1:{free_port()}", "--wait-for-workers", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        waiting = ""
        while "waiting for the target worker" not in waiting:  # logged 2 s into the wait
            line = coordinator.stderr.readline()
            assert line, f"the coordinator ended before waiting: {waiting}"
            waiting += line
        coordinator.send_signal(sig)
        _, err = coordinator.communicate(timeout=30)
    finally:
        coordinator.kill()
    assert coordinator.returncode == 130, err
    assert err.strip().splitlines()[-1] == "rayspec worker: stopped while starting" and "Traceback" not in err


# `python -m rayspec.rpc.worker` held inside its `import torch`, as if that import took its
# seconds there: the signal arrives before `main` has run.
_HELD_IN_ITS_IMPORTS = """
import importlib.abc, pathlib, runpy, sys, time

MARKER = pathlib.Path(sys.argv[1])

class HoldTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            MARKER.write_text("importing torch")
            time.sleep(120)
        return None

sys.meta_path.insert(0, HoldTorch())
sys.argv = ["rayspec.rpc.worker", "--role", "target", "--port", "0"]
runpy.run_module("rayspec.rpc.worker", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_stopped_during_its_imports_says_so_in_a_line(sig, tmp_path):
    """The README's "before the READY line" includes the first seconds, which are torch's
    import: a SIGTERM there ended the process silently with status 143, a Ctrl-C with a
    traceback from inside torch."""
    importing = tmp_path / "importing"
    worker = subprocess.Popen([sys.executable, "-c", _HELD_IN_ITS_IMPORTS, str(importing)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not importing.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                worker.kill()
                pytest.fail(f"the worker never reached its import of torch: {worker.communicate()}")
            time.sleep(0.02)
        worker.send_signal(sig)
        _, err = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 130, err
    assert err.strip().splitlines() == ["rayspec worker: stopped while starting"]


# A target worker whose main thread is traced from its READY line on, every signal handler's
# lines met by another SIGTERM (`tests.signals`).
_SIGNALS_WITHIN_A_HANDLER = NESTED_SIGNALS + r'''
class Watching:  # stdout, starting the trace as the READY line is written
    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if text.startswith("READY"):
            nest_signals()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


_sys.stdout = Watching(_sys.stdout)
from rayspec.rpc.worker import main
_sys.exit(main(["--role", "target", "--port", "0", "--model", _sys.argv[1]]))
'''


def test_a_signal_arriving_while_the_stop_signals_handler_runs_still_stops_the_worker(tmp_path):
    """As `rayspec serve`'s (tests/cli/test_serve_command.py): the worker's handler set an
    Event, whose lock a nested handler then waited for for ever (this test hung there, given a
    moment after READY; at once, the old handlers were not yet set and the worker said it was
    stopped while starting); every line of the handler meeting another SIGTERM, the worker
    still stops, status 0."""
    from tests.rpc.processes import save_tiny_pair

    target_path, _ = save_tiny_pair(tmp_path)
    worker = subprocess.Popen([sys.executable, "-c", _SIGNALS_WITHIN_A_HANDLER, str(target_path)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().startswith("READY target "), worker.stderr.read()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.stderr.read()
    finally:
        worker.kill()
        worker.communicate()


def test_a_worker_run_in_process_puts_back_the_signal_handlers_it_replaced(monkeypatch):
    from rayspec.rpc.worker import main

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert main(["--role", "target", "--device", "tpu"]) == 1
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_coordinator_given_the_wrong_kind_of_worker_names_it():
    """A drafter's port given as --target (or a target's as --drafter): the error says which
    worker, where, and what it is not, rather than a bare UNIMPLEMENTED."""
    from rayspec.engine import LocalDrafter, LocalTarget
    from rayspec.rpc.remote import RemoteDrafter, RemoteError, RemoteTarget
    from rayspec.rpc.worker import serve_drafter, serve_target
    from tests.tiny_models import tiny_llama

    model = tiny_llama(vocab=64, seed=0)
    drafter, drafter_port = serve_drafter(LocalDrafter(model), "127.0.0.1:0")
    target, target_port = serve_target(LocalTarget(model), "127.0.0.1:0")
    try:
        with pytest.raises(RemoteError, match=rf"the target worker at 127.0.0.1:{drafter_port} \(is it a target "
                                              rf"worker\? it serves no rayspec target service\): UNIMPLEMENTED"):
            RemoteTarget(f"127.0.0.1:{drafter_port}")
        with pytest.raises(RemoteError, match=rf"the drafter worker at 127.0.0.1:{target_port} \(is it a drafter "
                                              rf"worker\? it serves no rayspec drafter service\): UNIMPLEMENTED"):
            RemoteDrafter(f"127.0.0.1:{target_port}", vocab_size=64)
    finally:
        drafter.stop(0)
        target.stop(0)


def test_a_workers_help_states_the_defaults_the_readme_relies_on_and_the_api_key(capsys, monkeypatch):
    """`--help` is the plain processes' reference: the README's "--tree defaults to kary:2x3
    here" and "listen on 127.0.0.1 unless given --host", and the key a coordinator takes from
    $RAYSPEC_API_KEY, which it did not mention."""
    from rayspec.rpc.worker import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for stated in ("default 127.0.0.1", "(default rrsw)", "(default kary:2x3", "$RAYSPEC_API_KEY"):
        assert stated in text, stated
