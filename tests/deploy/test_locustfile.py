"""loadtest/locustfile.py drives real servers: short headless locust runs against a small fake
OpenAI-style HTTP app and a fake `rayspec.v1.Generation` gRPC server (tests/deploy/fakes.py).

Locust monkey-patches the standard library with gevent on import, so it only ever runs in a
subprocess here; the fake servers run in this process.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.fakes import BETWEEN_CHUNKS_S, FIRST_CHUNK_S, FakeGeneration, FakeOpenAI, GrpcServer
from tests.loopback import ServerThread

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
HTTP_REQUESTS = ["POST /v1/completions", "POST /v1/completions stream",
                 "POST /v1/chat/completions", "POST /v1/chat/completions stream"]
HTTP_STREAMS = [name for name in HTTP_REQUESTS if name.endswith("stream")]
GRPC_REQUESTS = ["Generate", "GenerateStream"]
MAX_TOKENS = 12
HAVE_SDK = importlib.util.find_spec("rayspec.client") is not None


def locust(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=90,
    )


def headless(host: str, users: list[str], n_users: int, seconds: int, csv_prefix: Path, **env: str):
    """A headless run; (completed process, CSV rows by (type, name))."""
    run = locust("--headless", "-u", str(n_users), "-r", str(n_users), "-t", f"{seconds}s", "--host", host,
                 "--only-summary", "--exit-code-on-error", "1", "--csv", str(csv_prefix), *users,
                 RAYSPEC_MAX_TOKENS=str(MAX_TOKENS), **env)
    with open(f"{csv_prefix}_stats.csv", newline="") as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    return run, rows


def count(rows, kind: str, name: str) -> int:
    row = rows.get((kind, name))
    return int(row["Request Count"]) if row else 0


def median(rows, kind: str, name: str) -> float:
    return float(rows[(kind, name)]["50%"])


def test_locustfile_imports_and_lists_its_users():
    run = locust("--list")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "OpenAIHttpUser" in run.stdout and "GrpcUser" in run.stdout
    assert "RayspecUser" not in run.stdout  # the abstract base is not a user


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    """Eight seconds of HTTP users (and gRPC users when the SDK is there) against the fakes."""
    http, generation = FakeOpenAI(), FakeGeneration()
    users = ["OpenAIHttpUser"] + (["GrpcUser"] if HAVE_SDK else [])
    with ServerThread(http.app) as server, GrpcServer(generation) as grpc_server:
        run, rows = headless(f"http://127.0.0.1:{server.port}", users, 2 * len(users), 8,
                             tmp_path_factory.mktemp("locust") / "run",
                             RAYSPEC_GRPC=f"127.0.0.1:{grpc_server.port}", RAYSPEC_API_KEY="sk-load")
    return run, rows, http, generation


def test_the_run_exits_cleanly(good_run):
    """Exit code 0 under --exit-code-on-error 1: no failure and no exception in any user."""
    run, rows, _, _ = good_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert int(rows[("", "Aggregated")]["Failure Count"]) == 0


def test_http_users_run_without_failures(good_run):
    _, rows, http, _ = good_run
    assert http.errors == [], http.errors[:3]  # every request was well formed
    for name in HTTP_REQUESTS:
        assert count(rows, "HTTP", name) > 0, name
        assert int(rows[("HTTP", name)]["Failure Count"]) == 0, name
    assert count(rows, "HTTP", "GET /v1/models") >= 1  # the model id is discovered, not guessed
    assert http.keys == {"Bearer sk-load"}  # $RAYSPEC_API_KEY, sent with every request


def test_http_users_record_the_custom_metrics(good_run):
    _, rows, _, _ = good_run
    for name in HTTP_REQUESTS:  # one tokens/s sample per successful request
        assert count(rows, "METRIC", f"{name} | tokens/s") == count(rows, "HTTP", name)
        assert median(rows, "METRIC", f"{name} | tokens/s") > 0
    for name in HTTP_STREAMS:
        assert count(rows, "METRIC", f"{name} | TTFT ms") == count(rows, "HTTP", name)
        # 12 tokens arrive in 6 chunks: 5 gaps per stream
        assert count(rows, "METRIC", f"{name} | inter-chunk ms") == 5 * count(rows, "HTTP", name)
        # chunks are timed as they arrive, not when the whole body is in
        assert median(rows, "METRIC", f"{name} | TTFT ms") >= FIRST_CHUNK_S * 1e3 * 0.9
        assert median(rows, "METRIC", f"{name} | inter-chunk ms") >= BETWEEN_CHUNKS_S * 1e3 * 0.9
        assert median(rows, "METRIC", f"{name} | TTFT ms") < median(rows, "HTTP", name)
    for name in ["POST /v1/completions", "POST /v1/chat/completions"]:
        assert ("METRIC", f"{name} | TTFT ms") not in rows  # no TTFT for unary requests


@pytest.mark.skipif(not HAVE_SDK, reason="the gRPC SDK rayspec.client is not installed")
def test_grpc_users_run_and_record_the_custom_metrics(good_run):
    _, rows, _, generation = good_run
    assert generation.errors == [], generation.errors[:3]
    assert generation.keys == {"Bearer sk-load"}
    for name in GRPC_REQUESTS:
        assert count(rows, "gRPC", name) > 0, name
        assert int(rows[("gRPC", name)]["Failure Count"]) == 0, name
        assert count(rows, "METRIC", f"{name} | tokens/s") == count(rows, "gRPC", name)
    assert count(rows, "METRIC", "GenerateStream | TTFT ms") == count(rows, "gRPC", "GenerateStream")
    assert count(rows, "METRIC", "GenerateStream | inter-chunk ms") == 5 * count(rows, "gRPC", "GenerateStream")
    assert median(rows, "METRIC", "GenerateStream | TTFT ms") >= FIRST_CHUNK_S * 1e3 * 0.9


def test_a_completion_of_no_tokens_is_a_tokens_per_second_sample_of_zero(tmp_path):
    """One tokens/s sample per successful request, 0 for one that met EOS at once: left out,
    it would raise every percentile of the per-request speed."""
    http = FakeOpenAI()
    with ServerThread(http.app) as server:
        run, rows = headless(f"http://127.0.0.1:{server.port}/empty", ["OpenAIHttpUser"], 2, 3, tmp_path / "run")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name in HTTP_REQUESTS:
        assert count(rows, "HTTP", name) > 0, name
        assert count(rows, "METRIC", f"{name} | tokens/s") == count(rows, "HTTP", name), name
        assert float(rows[("METRIC", f"{name} | tokens/s")]["Max Response Time"]) == 0, name
    for name in HTTP_STREAMS:  # no text: no first token, no gap
        assert ("METRIC", f"{name} | TTFT ms") not in rows and ("METRIC", f"{name} | inter-chunk ms") not in rows


def test_grpc_users_without_the_sdk_report_it_and_stop_quietly(tmp_path):
    """No rayspec.client: each gRPC user reports the import as a failure and stops, without
    an exception of its own on the way out (locust calls on_stop after on_start's StopUser)."""
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["rayspec.client"] = None\n')
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    run, rows = headless("http://127.0.0.1:9", ["GrpcUser"], 1, 2, tmp_path / "run", PYTHONPATH=path)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert int(rows[("gRPC", "import rayspec.client")]["Failure Count"]) == 1
    assert "in on_stop" not in run.stderr, run.stderr[-3000:]  # no traceback through on_stop


# locust's own writers: the CSV and --json-file of a run whose HTTP users streamed 3 chats
# (time to first token 100 ms) and 1 completion (10 ms), after their model discovery
WRITE_STATS = """
import csv, sys
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV, save_stats_json
environment = Environment()
log = environment.stats.log_request
log("HTTP", "GET /v1/models", 5, 100)
for name, n, ttft in (("POST /v1/chat/completions stream", 3, 100), ("POST /v1/completions stream", 1, 10)):
    for _ in range(n):
        log("HTTP", name, 500, 100)
        log("METRIC", name + " | TTFT ms", ttft, 0)
with open(sys.argv[1] + "_stats.csv", "w", newline="") as f:
    StatsCSV(environment, PERCENTILES_TO_REPORT).requests_csv(csv.writer(f))
save_stats_json(environment.stats, sys.argv[1])
"""


def bench_read_locust(prefix):
    """bench/service_bench.py's `read_locust` of the run at `prefix`."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from service_bench import read_locust
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return read_locust(prefix)


def test_the_service_benchmark_reads_each_metric_over_all_its_rows(tmp_path):
    """bench/service_bench.py's p50 of a metric is over the samples of both HTTP streams (not
    the last row's alone), and its requests are the generations (not GET /v1/models)."""
    subprocess.run([sys.executable, "-c", WRITE_STATS, str(tmp_path / "run")], check=True, timeout=60)
    read = bench_read_locust(tmp_path / "run")
    assert read["requests"] == 4 and read["failures"] == 0
    assert read["TTFT ms p50"] == 100 and read["TTFT ms p99"] == 100
    assert read["TTFT ms mean"] == pytest.approx((3 * 100 + 10) / 4)


# locust's own writers again: 2 completions streamed, 3 refused with a 429 and 1 with Serve's 503
WRITE_FAILURES = """
import csv, sys
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV, save_stats_json
environment = Environment()
name = "POST /v1/completions stream"
for _ in range(2):
    environment.stats.log_request("HTTP", name, 500, 100)
for error in ["ProtocolError('HTTP 429: queue full')"] * 3 + ["ProtocolError('HTTP 503: backpressure')"]:
    environment.stats.log_request("HTTP", name, 5, 0)
    environment.stats.log_error("HTTP", name, error)
writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
with open(sys.argv[1] + "_stats.csv", "w", newline="") as f:
    writer.requests_csv(csv.writer(f))
with open(sys.argv[1] + "_failures.csv", "w", newline="") as f:
    writer.failures_csv(csv.writer(f))
save_stats_json(environment.stats, sys.argv[1])
"""


def test_the_service_benchmark_says_what_its_failures_were(tmp_path):
    """bench/service_bench.py counts a run's failures and reads their kinds from locust's
    failures CSV: a 429 of the app's queue and a 503 of Serve's are told apart."""
    subprocess.run([sys.executable, "-c", WRITE_FAILURES, str(tmp_path / "run")], check=True, timeout=60)
    read = bench_read_locust(tmp_path / "run")
    assert read["requests"] == 6 and read["failures"] == 4
    assert read["failure kinds"] == {
        "POST /v1/completions stream: ProtocolError('HTTP 429: queue full')": 3,
        "POST /v1/completions stream: ProtocolError('HTTP 503: backpressure')": 1,
    }


def test_a_misbehaving_server_fails_the_run(tmp_path):
    """Unary answers without usage and streams without `data: [DONE]` are failures."""
    http = FakeOpenAI()
    with ServerThread(http.app) as server:
        run, rows = headless(f"http://127.0.0.1:{server.port}/broken", ["OpenAIHttpUser"], 2, 3, tmp_path / "run")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    for name in HTTP_REQUESTS:
        row = rows[("HTTP", name)]
        assert int(row["Failure Count"]) == int(row["Request Count"]) > 0, name
    assert not [key for key in rows if key[0] == "METRIC"]  # failed requests give no samples
