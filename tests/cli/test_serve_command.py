"""`rayspec serve` as `make serve` runs it: a process of its own on a config file that prints a
ready line with a curl example, answers a completion over HTTP and the gRPC SDK, and stops
cleanly on Ctrl-C (SIGINT): exit status 0, a last line saying so, its ports closed, and no
error line of Ray's on the way."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.loopback import free_port
from tests.signals import NESTED_SIGNALS
from tests.rpc.processes import save_tiny_pair

ROOT = Path(__file__).resolve().parents[2]


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue, marker: str, seconds: float) -> list[str]:
    seen, deadline = [], time.monotonic() + seconds
    while not any(marker in line for line in seen):
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        assert line is not None, "rayspec serve exited early:\n" + "".join(seen)
        seen.append(line)
    return seen


def _refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _tiny_service(tmp_path: Path) -> tuple[Path, int, int]:
    """A service config of the tiny pair on free ports: (its file, HTTP port, gRPC port)."""
    target_path, drafter_path = save_tiny_pair(tmp_path)
    http_port, grpc_port = free_port(), free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({
        "model_id": "tiny", "target": {"path": str(target_path), "threads": 1},
        "drafters": [{"path": str(drafter_path), "threads": 1}], "tree": "kary:2x2", "adaptive_trees": False,
        "http": {"port": http_port}, "grpc": {"port": grpc_port},
    }))
    return config, http_port, grpc_port


def test_serve_prints_a_ready_line_answers_and_stops_on_ctrl_c(tmp_path):
    from rayspec.client import Client

    config, http_port, grpc_port = _tiny_service(tmp_path)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "serve.err", "w") as errors:
        server = subprocess.Popen([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
    try:
        lines = _lines(server.stdout)
        ready = "".join(_read_until(lines, "Ctrl-C stops it", 300))
        assert f"rayspec is ready: HTTP http://127.0.0.1:{http_port}" in ready
        assert f"gRPC 127.0.0.1:{grpc_port}" in ready
        assert f"curl http://127.0.0.1:{http_port}/v1/completions" in ready
        reply = httpx.post(f"http://127.0.0.1:{http_port}/v1/completions", timeout=60,
                           json={"model": "tiny", "prompt": "def f(x):", "max_tokens": 5, "seed": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5
        with Client(f"127.0.0.1:{grpc_port}") as sdk:
            assert len(sdk.generate("def f(x):", max_tokens=5, seed=3).token_ids) == 5

        server.send_signal(signal.SIGINT)
        assert server.wait(120) == 0
        after = _read_until(lines, "stopping rayspec", 5)
        assert any("stopping rayspec" in line for line in after)
        assert _refused(http_port) and _refused(grpc_port)
        # Ray's own error lines, which once came at every start (a restartable actor given
        # actor handles) and every stop (`serve.shutdown()` killing its controller mid-call).
        while (line := lines.get(timeout=5)) is not None:
            after.append(line)
        logged = ready + "".join(after) + (tmp_path / "serve.err").read_text()
        assert "constructor arguments in the object store" not in logged
        assert "graceful_shutdown failed" not in logged
        # nor Serve's claim that the ports given "will not be applied" (they were: see above)
        assert "will not be applied" not in logged
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def test_serve_refuses_a_bad_config_with_a_message(tmp_path, capsys):
    from rayspec.cli import main

    assert main(["serve", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read the service config" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: {where: edge}\n")
    assert main(["serve", str(bad)]) == 2
    assert "target.where must be worker or coordinator, got 'edge'" in capsys.readouterr().err


def test_serve_refuses_a_bad_api_key_variable_before_ray_starts(capsys, monkeypatch):
    """It passed the config's check and was refused only once Ray had started, by a message
    that did not name the variable."""
    import rayspec.cluster.launch
    from rayspec.cli import main

    monkeypatch.setattr(rayspec.cluster.launch, "serve_forever", lambda *args: pytest.fail("Ray was started"))
    monkeypatch.setenv("RAYSPEC_API_KEY", "   ")
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == "rayspec: error: $RAYSPEC_API_KEY must be a non-empty string, or unset for none\n"
    monkeypatch.setenv("RAYSPEC_API_KEY", "secret\n")
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == ("rayspec: error: $RAYSPEC_API_KEY holds '\\n': a key is printable ASCII, "
                                       "as HTTP headers and gRPC metadata carry it\n")


def _serve_until_it_exits(config: Path) -> subprocess.CompletedProcess:
    """`rayspec serve config` as a process of its own, for a start that must fail."""
    return subprocess.run([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True,
                          timeout=300, start_new_session=True)


@pytest.mark.parametrize("where", ["worker", pytest.param("coordinator", marks=pytest.mark.slow)])
def test_a_model_that_cannot_load_stops_the_start_with_one_line_saying_why(tmp_path, where):
    """A drafter worker whose directory holds no checkpoint, or a target in the Serve replica
    (which Serve quotes only in its deployment status): exit status 1 and one error line
    naming the part and the loader's message, not Ray's tracebacks of it.  (A directory that
    is not there at all is refused before Ray starts: the next test.)"""
    missing = tmp_path / "no-such-model"
    missing.mkdir()
    if where == "worker":
        models, part = {"drafters": [{"path": str(missing)}]}, "the drafter worker 0"
    else:
        models, part = {"target": {"path": str(missing), "where": "coordinator"}}, "the HTTP app"
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({**models, "http": {"port": free_port()}, "grpc": {"port": free_port()}}))
    done = _serve_until_it_exits(config)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rayspec serve: error: {part} could not start: FileNotFoundError: "
                           f"cannot load a causal LM from '{missing}'"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "retries" not in done.stderr


@pytest.mark.parametrize("part", ["target", "drafter 1"])
def test_a_model_directory_that_is_not_there_stops_the_start_before_ray(tmp_path, capsys, monkeypatch, part):
    import rayspec.cluster.launch
    from rayspec.cli import main

    monkeypatch.setattr(rayspec.cluster.launch, "join_ray", lambda *args: pytest.fail("Ray was started"))
    missing = tmp_path / "no-such-model"
    models = ({"target": {"path": str(missing)}} if part == "target"
              else {"drafters": [{"path": None}, {"path": str(missing), "where": "coordinator"}]})
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({**models, "http": {"port": free_port()}, "grpc": {"port": free_port()}}))
    assert main(["serve", str(config)]) == 1
    assert capsys.readouterr().err == (f"rayspec serve: error: the {part} could not start: FileNotFoundError: "
                                       f"cannot load a causal LM from '{missing}': no such directory on this machine\n")


@pytest.mark.parametrize("taken", ["http", "grpc"])
def test_a_port_in_use_stops_the_start_before_ray_with_one_line_saying_which(tmp_path, capsys, monkeypatch, taken):
    """Found once Ray, the workers and the models had started (46 s here), now before."""
    import rayspec.cluster.launch
    from rayspec.cli import main

    monkeypatch.setattr(rayspec.cluster.launch, "join_ray", lambda *args: pytest.fail("Ray was started"))
    ports = {"http": free_port(), "grpc": free_port()}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({name: {"port": port} for name, port in ports.items()}))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[taken]))
        squatter.listen()
        assert main(["serve", str(config)]) == 1
    expected = {
        "http": f"HTTP server could not start: OSError: cannot bind the HTTP server to 127.0.0.1:{ports['http']}",
        "grpc": f"gRPC coordinator could not start: OSError: cannot bind a gRPC server to 127.0.0.1:{ports['grpc']}",
    }[taken]
    assert capsys.readouterr().err == (f"rayspec serve: error: the {expected}: the port is in use, or the address "
                                       f"is not this machine's (Address already in use)\n")


# A port taken after that check, as the front ends bind it: each start costs some 20 s of Ray.
@pytest.mark.slow
@pytest.mark.parametrize("taken", ["http", "grpc"])
def test_a_port_taken_after_the_check_stops_the_start_with_one_line_saying_which(tmp_path, taken):
    ports = {"http": free_port(), "grpc": free_port()}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({name: {"port": port} for name, port in ports.items()}))
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", ports[taken]))
    squatter.listen()
    unchecked = ("import sys, rayspec.cluster.launch as launch; from rayspec.cli import main; "
                 "launch.check_before_ray = lambda config: None; sys.exit(main(sys.argv[1:]))")
    try:
        done = subprocess.run([sys.executable, "-c", unchecked, "serve", str(config)], cwd=ROOT,
                              env={**os.environ, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True,
                              timeout=300, start_new_session=True)
    finally:
        squatter.close()
    assert done.returncode == 1, done.stderr
    expected = {
        "http": f"the HTTP server could not start on 127.0.0.1:{ports['http']}: RuntimeError: Failed to bind",
        "grpc": f"the gRPC coordinator could not start: OSError: cannot bind a gRPC server to "
                f"127.0.0.1:{ports['grpc']}",
    }[taken]
    assert done.stderr.strip().splitlines()[-1].startswith(f"rayspec serve: error: {expected}"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="asks for a GPU the machine must not have")
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_start_waiting_for_resources_says_what_it_waits_for_and_stops_on_a_signal(tmp_path, stop_signal):
    """Ctrl-C, or SIGTERM (as a process manager stops it), while waiting: a line and exit
    status 130, not Ray's stack dump.  A wait for a cluster that may grow: a Ray of its own,
    which cannot, has its refusal (see below) taken away here."""
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"target": {"num_gpus": 1}, "http": {"port": free_port()},
                                      "grpc": {"port": free_port()}}))
    waiting = ("import sys, rayspec.cluster.launch as launch; from rayspec.cli import main; "
               "launch.check_fits_here = lambda *args: None; sys.exit(main(sys.argv[1:]))")
    server = subprocess.Popen([sys.executable, "-c", waiting, "serve", str(config)], cwd=ROOT,
                              env={**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = _lines(server.stderr)
        waiting = _read_until(lines, "rayspec: waiting for the cluster to place", 120)[-1]
        assert "'GPU': 1.0" in waiting and "(PACK); it has {'CPU'" in waiting and "Ctrl-C stops" in waiting
        server.send_signal(stop_signal)
        assert server.wait(60) == 130
        assert any("rayspec serve: stopped while starting" in line for line in _read_until(lines, "stopped", 10))
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="asks for a GPU the machine must not have")
def test_a_gpu_asked_of_a_machine_without_refuses_the_start_at_once_naming_the_field(tmp_path):
    """On a Ray `rayspec serve` started itself no node will bring the GPU: refused once Ray
    has started (exit status 2, the CLI's for a config that cannot work), not waited for
    10 minutes; Ray is shut down with the process."""
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"target": {"num_gpus": 1}, "http": {"port": free_port()},
                                      "grpc": {"port": free_port()}}))
    done = subprocess.run([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True,
                          timeout=120, start_new_session=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "rayspec: error: the config asks 1 GPU of this machine (target.num_gpus: 1), and the local Ray instance "
        "rayspec started finds 0 on it: ask for what it has (num_gpus: auto takes the GPUs there are), or join a "
        "cluster that has it (--address)")
    assert "waiting for the cluster" not in done.stderr and "Traceback" not in done.stderr


def test_a_ray_address_where_nothing_answers_is_refused_at_once():
    """`ray.init` would try a dead cluster's GCS for ever, a log line every 5 s: `rayspec serve
    --address host:port` says there is none there instead (one error line, via the CLI)."""
    from rayspec.cluster.launch import check_ray_answers

    port = free_port()
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"no Ray cluster answers at 127\.0\.0\.1:{port}: .*refused"):
        check_ray_answers(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    with socket.create_server(("127.0.0.1", 0)) as listening:
        check_ray_answers(f"127.0.0.1:{listening.getsockname()[1]}")
    for address in ("local", "auto", "ray://127.0.0.1:1"):  # Ray's own to resolve
        check_ray_answers(address)


def test_ctrl_c_ends_the_streams_in_flight_with_the_shutdown_error_at_once(tmp_path):
    """As vLLM aborts its requests on shutdown: an HTTP stream in flight ends with an error
    event and `[DONE]`, a gRPC one with UNAVAILABLE, both saying why, within seconds — not cut
    without a word after Serve's 20 s grace."""
    import grpc

    from rayspec.client.types import GenerateRequest
    from rayspec.rpc.generated import generation_pb2_grpc

    config, http_port, grpc_port = _tiny_service(tmp_path)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        lines = _lines(server.stdout)
        _read_until(lines, "Ctrl-C stops it", 300)
        long = {"model": "tiny", "prompt": "def f(x):", "max_tokens": 480, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"http://127.0.0.1:{http_port}/v1/completions", json=long, timeout=60) as http, \
                grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            events = (line for line in http.iter_lines() if line.startswith("data: "))
            assert "choices" in next(events)
            message = GenerateRequest(prompt="def f(x):", max_tokens=480, ignore_eos=True).to_proto()
            stream = generation_pb2_grpc.GenerationStub(channel).GenerateStream(message, timeout=60)
            assert next(stream).HasField("chunk")
            server.send_signal(signal.SIGINT)
            sent = time.monotonic()
            *_, error, done = events
            assert time.monotonic() - sent < 10
            assert json.loads(error.removeprefix("data: ")) == {"error": {
                "message": "the service is shutting down", "type": "service_unavailable", "param": None, "code": None}}
            assert done == "data: [DONE]"
            with pytest.raises(grpc.RpcError) as ended:
                for _ in stream:
                    pass
            assert (ended.value.code(), ended.value.details()) == (grpc.StatusCode.UNAVAILABLE,
                                                                  "the service is shutting down")
            assert time.monotonic() - sent < 10
        # Until the process ends, a request that arrives is told why (503), never Serve's 404
        # of an application deleted before its Ray instance went.
        answers = set()
        while server.poll() is None and time.monotonic() - sent < 60:
            try:
                answers.add(httpx.post(f"http://127.0.0.1:{http_port}/v1/completions", timeout=5,
                                       json={"model": "tiny", "prompt": "x", "max_tokens": 2}).status_code)
            except httpx.TransportError:  # the server has gone
                break
            time.sleep(0.05)
        assert answers <= {503}, answers
        assert server.wait(60) == 0
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


def test_a_second_ctrl_c_stops_at_once_without_waiting_for_the_requests_in_flight(tmp_path):
    """Serve gives a replica's requests in flight up to 20 s to end as it stops; a second Ctrl-C
    cuts them.  The request in flight here waits on a drafter stopped with SIGSTOP (its first
    draft has the call's minute), so it would hold the first stop for Serve's whole grace."""
    psutil = pytest.importorskip("psutil")
    config, http_port, grpc_port = _tiny_service(tmp_path)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    drafter = None
    try:
        lines = _lines(server.stdout)
        _read_until(lines, "Ctrl-C stops it", 300)
        workers = httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=10).json()["workers"]
        drafter_port = int(next(name for name in workers if name.startswith("drafter")).rsplit(":", 1)[1])
        drafter = next(psutil.Process(c.pid) for c in psutil.net_connections("tcp")
                       if c.status == psutil.CONN_LISTEN and c.laddr.port == drafter_port)
        drafter.suspend()

        def waiting_request():
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(f"http://127.0.0.1:{http_port}/v1/completions", timeout=120,
                           json={"model": "tiny", "prompt": "def f(x):", "max_tokens": 5})

        threading.Thread(target=waiting_request, daemon=True).start()
        time.sleep(2)
        server.send_signal(signal.SIGINT)
        _read_until(lines, "stopping rayspec", 30)
        time.sleep(2)
        server.send_signal(signal.SIGINT)
        second = time.monotonic()
        assert server.wait(20) == 0, "the second Ctrl-C was not heeded"
        assert time.monotonic() - second < 20
        assert _refused(http_port) and _refused(grpc_port)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        if drafter is not None:
            with contextlib.suppress(psutil.Error):
                drafter.resume()


# `serve_forever` with Ray and the service stood in for, every signal handler's lines met by
# another SIGTERM (`tests.signals`).
_SIGNALS_WITHIN_A_HANDLER = NESTED_SIGNALS + r'''
import ray
from rayspec.cluster import launch
from rayspec.serve.config import ServiceConfig


class StandIn:
    http_address, grpc_address = "http://127.0.0.1:1", "127.0.0.1:2"

    def __init__(self, config, address, owns_ray):
        self.config = config

    def stop(self):
        print("stopped", flush=True)

    def stop_now(self):
        print("stopped without waiting", flush=True)


launch.ray_to_join, launch.join_ray, launch.Service = (lambda address: "cluster"), (lambda address: False), StandIn
ray.shutdown = lambda: None
nest_signals()
_sys.exit(launch.serve_forever(ServiceConfig()))
'''


def test_a_signal_arriving_while_the_stop_signals_handler_runs_still_stops_the_service():
    """The handler of `rayspec serve`'s Ctrl-C / SIGTERM took an Event's lock (`stop.set()`); a
    second signal arriving while it held it ran a nested handler in the same thread, which
    waited for that lock for ever: a service found hung after a SIGINT under `timeout`, with
    py-spy showing five nested handlers blocked there.  Here every line of the handler meets
    another SIGTERM: the service still stops, waiting for its requests (no second stop)."""
    process = subprocess.Popen([sys.executable, "-c", _SIGNALS_WITHIN_A_HANDLER], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        lines = _lines(process.stdout)
        _read_until(lines, "Ctrl-C stops it.", 60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        rest = []
        while (line := lines.get(timeout=5)) is not None:
            rest.append(line)
        assert rest[0].startswith("stopping rayspec ...") and "stopped\n" in rest, rest
        assert "stopped without waiting\n" not in rest, rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
