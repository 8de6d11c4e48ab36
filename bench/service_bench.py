"""The distributed service against the in-process engine, on the demo pair.

    python bench/service_bench.py [--prompts 10] [--tokens 96] [--skip-locust]
    python bench/service_bench.py --only-locust --target-where worker coordinator --out bench/results/service_bench_load
    python bench/service_bench.py --only-locust --users 16 --max-concurrent 4 --max-queued 256 0 --out bench/results/service_bench_queue
    python bench/service_bench.py --device cuda --parts overhead scale sweep floor --skip-locust --out bench/results/service_bench_gpu

`--device cuda` puts every model on the GPU, in the engine's process and the workers' (they
share one GPU here); the pinned and CPUs-kept-awake arms, which are about CPU-bound steps, are
left out there.  `--parts` picks parts of 1 and 2; each is written as soon as it is done.

1. Overhead of distribution: a target and a drafter worker as plain processes talking gRPC
   on loopback, driven by the same engine as the in-process run, on the same prompts, seeds,
   verifier and tree, interleaved prompt by prompt: the workers' calls on per-session Steps
   streams (the default) and as unary calls, and an arm with the drafter in the
   coordinator's process and one with the target there (one RPC per step instead of two; the
   latter is a coordinator that sits with its target), and in-process and distributed again
   with every process kept to a CPU of its own (workers `--cpus`; Linux wakes a waiting
   process onto an idle core, away from the caches it warmed), and both again with a busy loop
   at the lowest priority on every CPU (no virtual CPU ever halts: how much of the gap is
   this VM's wake-up from idle).  Reported: tokens/s of each
   (goal: the distributed path >= 90 % of in-process), whether the tokens are identical
   (they must be), bytes per step, the share of step time spent outside the drafter's and
   target's compute, and the part of it distribution adds (goal <= 5 %), the CPU time of
   every thread of each arm's processes and their time waiting for a CPU (Linux: whether
   the added time is work or waiting), next to the transport floor: a no-op RPC's round
   trip and a synthetic RPC whose handler computes for as long as a target step, each beside
   the same handler behind a bare TCP socket.
   Then in-process against distributed over trees of growing size (`--sweep-trees`): how
   the ratio moves as the step gets longer.
   A control with no RPC: the in-process engine with its target sleeping 5 or 10 ms before
   each verification, for how much slower this machine computes right after an idle wait.
   Then the same comparison at larger targets (`--scale-targets HIDDENxLAYERS ...`): targets
   of the demo target's architecture and vocabulary, widened and deepened and left at their
   seeded random initialisation (built at run time, nothing downloaded).  Their outputs
   are meaningless and the drafter's tokens are rarely accepted, but a step costs what a
   step of that size costs, so these arms show how distribution's per-step cost compares
   with a target step longer than the demo target's few milliseconds.
   Every process runs `--threads` torch threads (default 1): identical tokens need identical
   arithmetic, and CPU matmuls reduce in a different order with a different thread count
   (measured on the demo pair: logits differ by ~4e-6 at some tree sizes), which flips a
   sample whenever a uniform lands that close to a boundary.
2. Placement: bytes crossing per step for every verifier, with the verifier at the target
   (the default) and at the coordinator.
3. Load: `rayspec serve` (Ray Serve HTTP + the gRPC coordinator) under locust at 1, 4 and 16
   users of streaming requests: time to first token and inter-chunk latency, p50 and p99;
   with `--target-where worker coordinator`, once with the target in a worker of its own
   (the default) and once inside the HTTP coordinator (`target: {where: coordinator}`); with
   `--batching on off`, once with cross-request batching (the default) and once without
   (`max_batch_sequences: 1` on both models); with `--max-concurrent N` and `--max-queued M
   ...`, the served `limits.max_concurrent_requests` and, once per M, `max_queued_requests`
   (0: a busy service refuses, 429 / RESOURCE_EXHAUSTED).  Each row counts its failures, and
   the markdown lists what they were.
Writes bench/results/service_bench.{json,md} (`--out`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import torch
from common import ACCEPTANCE, RESULTS, fits, load_demo, machine, out_prefix, suffixed
from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import GenerationStats, LocalTarget, SpeculativeEngine
from rayspec.models import load_causal_lm
from rayspec.models.loading import resolve_dtype
from rayspec.models.threads import pin_process_to_cpus
from rayspec.rpc.generated import health_pb2, health_pb2_grpc
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.rpc.server import HealthServicer, start_server
from rayspec.verify import available_verifiers

ROOT = Path(__file__).resolve().parents[1]


def decode(engine, prompt, tokens, temperature, seed):
    stats = GenerationStats()
    produced = []
    start = time.perf_counter()
    for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats):
        produced += chunk.tokens
    return produced, stats, time.perf_counter() - start


ARMS = {  # name: (drafter, target, RPCs per step) — handles: in-process, remote on Steps streams, remote unary,
    # and remote on Steps streams to workers pinned to CPUs (with the coordinator pinned for the arm)
    "in-process": ("local", "local", 0),
    "distributed": ("stream", "stream", 2),
    "distributed, unary calls": ("unary", "unary", 2),
    "drafter in coordinator": ("local", "stream", 1),
    "target in coordinator": ("stream", "local", 1),
    "in-process, pinned": ("local", "local", 0),
    "distributed, pinned": ("pinned", "pinned", 2),
    "in-process, CPUs kept awake": ("local", "local", 0),
    "distributed, CPUs kept awake": ("stream", "stream", 2),
}
AWAKE = ", CPUs kept awake"

# Runs on every CPU at SCHED_IDLE priority: the kernel gives it a CPU only when nothing else
# wants one, and takes it back at once when something wakes.
_IDLE_SPINNER = """
import os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
print("spinning", flush=True)
while True:
    pass
"""


@contextlib.contextmanager
def cpus_kept_awake():
    """A busy loop at the lowest priority on every CPU, so that no CPU ever goes idle: a
    virtual CPU with nothing to run halts and hands its core back to the host, and whatever
    wakes it next (an RPC's reply, the next request) may wait to get it back.  A diagnostic
    of how much of distribution's cost on this VM is that wake-up, not a setting rayspec uses:
    the loops hold the cores at full power, and where the host shares them they take time from
    other guests."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    loops = [subprocess.Popen([sys.executable, "-c", _IDLE_SPINNER, str(cpu)], stdout=subprocess.PIPE, text=True)
             for cpu in cpus]
    try:
        for loop in loops:
            loop.stdout.readline()
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def cpu_plan() -> dict | None:
    """CPUs for the pinned arms: the coordinator on the first CPU this process may use, the
    target on the next, the drafter on the one after (or with the target on a 2-core
    machine: the two never compute at once).  None on one CPU or without Linux affinity."""
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return {"all": ",".join(map(str, cpus)), "coordinator": str(cpus[0]), "target": str(cpus[1]),
            "drafter": str(cpus[min(2, len(cpus) - 1)])}


def coordinator_cpus(name: str, plan: dict | None) -> None:
    """Pin this (the coordinator's) process for a pinned arm, release it for the others."""
    if plan:
        pin_process_to_cpus(plan["coordinator"] if name.endswith(", pinned") else plan["all"])


def cpu_seconds(pids) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one), summed over every thread of
    the processes `pids` (Linux's per-thread schedstat; None elsewhere).  Threads that end in
    between take their time with them: gRPC's and torch's live as long as their process."""
    if not os.path.exists("/proc/self/task"):
        return None
    on_cpu = waiting = 0
    for pid in pids:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                with open(f"/proc/{pid}/task/{thread}/schedstat") as schedstat:
                    ran, waited, _ = schedstat.read().split()
                on_cpu += int(ran)
                waiting += int(waited)
    return on_cpu / 1e9, waiting / 1e9


OWN_PLAN = "distributed, planned from its own costs"
OWN_PLAN_ARM = ("stream", "stream", 2)  # ARMS' form: its handles are the distributed arm's


def arm_handles(name: str, handles: dict) -> tuple:
    """(target, drafter) of an arm, from `handles`: kind of handle -> (target, drafter)."""
    drafter_kind, target_kind, _ = ARMS.get(name, OWN_PLAN_ARM)
    return handles[target_kind][0], handles[drafter_kind][1]


def arm_processes(name: str, worker_pids: dict) -> list[int]:
    """This (the coordinator's) process and the worker processes an arm's handles talk to.
    `worker_pids`: kind of handle -> (target worker's pid, drafter worker's pid)."""
    drafter_kind, target_kind, _ = ARMS.get(name, OWN_PLAN_ARM)
    return [os.getpid(), *(pid for pid in (worker_pids.get(target_kind, (None, None))[0],
                                           worker_pids.get(drafter_kind, (None, None))[1]) if pid)]


SWEEP_ARMS = ("in-process", "distributed")


def overhead(handles, prompts, tokens, temperature, verifier, tree, costs, arms=tuple(ARMS), plan=None, worker_pids=None,
             own_plan=False):
    """Every arm decodes the same tree (planned from the in-process costs) so that their tokens
    can be compared; for sequoia:auto one more arm plans from costs measured through gRPC, as a
    deployment does (with `own_plan`) — its tree, and so its tokens, may differ.  `handles`: (target, drafter)
    per kind of handle; arms whose kind is missing are left out.  `plan`: `cpu_plan()`, for
    the pinned arms.  `worker_pids`: kind of handle -> (target worker's pid, drafter worker's
    pid), for the CPU time of each arm's processes."""
    engines = {
        name: SpeculativeEngine(*arm_handles(name, handles), verifier=verifier, tree=tree, acceptance_dir=ACCEPTANCE,
                                costs=costs, adaptive=False)
        for name in arms if ARMS[name][0] in handles and ARMS[name][1] in handles
    }
    if own_plan and tree == "sequoia:auto":
        engines[OWN_PLAN] = SpeculativeEngine(*arm_handles(OWN_PLAN, handles), verifier=verifier, tree=tree,
                                              acceptance_dir=ACCEPTANCE, adaptive=False)
    for engine in engines.values():  # untimed: a process's first decode loads kernels and grows its caches
        decode(engine, prompts[0], min(tokens, 16), temperature, seed=0)
    totals = {name: {"tokens": 0, "seconds": 0.0, "steps": 0, "wall": 0.0, "other": 0.0, "bytes": 0, "cpu": 0.0,
                     "cpu_wait": 0.0} for name in engines}
    identical = True
    for i, prompt in enumerate(prompts):
        outputs = {}
        shift = i % len(engines)
        for name in list(engines)[shift:] + list(engines)[:shift]:
            coordinator_cpus(name, plan)
            processes = arm_processes(name, worker_pids or {})
            with cpus_kept_awake() if name.endswith(AWAKE) else contextlib.nullcontext():
                before = cpu_seconds(processes)
                produced, stats, seconds = decode(engines[name], prompt, tokens, temperature, seed=500 + i)
                after = cpu_seconds(processes)
            outputs[name] = produced
            t = totals[name]
            t["tokens"] += len(produced)
            t["seconds"] += seconds
            t["steps"] += len(stats.steps)
            t["wall"] += sum(s.wall for s in stats.steps)
            t["other"] += sum(s.other for s in stats.steps)
            t["bytes"] += sum(s.wire_bytes for s in stats.steps)
            if before is not None:
                t["cpu"] += after[0] - before[0]
                t["cpu_wait"] += after[1] - before[1]
        coordinator_cpus("", plan)
        identical &= all(output == outputs["in-process"] for name, output in outputs.items() if name != OWN_PLAN)
        print(f"  overhead: prompt {i + 1}/{len(prompts)}", flush=True)
    rows = {}
    base = totals["in-process"]
    for name, t in totals.items():
        wall = t["wall"] / t["steps"]
        rows[name] = {"tokens_per_s": t["tokens"] / t["seconds"], "tokens_per_step": t["tokens"] / t["steps"],
                      "step_ms": wall * 1e3, "other_share": t["other"] / t["wall"],
                      "compute_ms": (t["wall"] - t["other"]) / t["steps"] * 1e3,
                      # what distribution adds to the in-process engine's own bookkeeping
                      "added_share": max(t["other"] / t["steps"] - base["other"] / base["steps"], 0.0) / wall,
                      "bytes_per_step": t["bytes"] / t["steps"],
                      # every thread of the arm's processes (the models, gRPC, codecs, Python) over the
                      # whole decode, prompt included, beside the decode's wall time per step
                      "decode_ms_per_step": t["seconds"] / t["steps"] * 1e3,
                      **({"cpu_ms": t["cpu"] / t["steps"] * 1e3, "cpu_wait_ms": t["cpu_wait"] / t["steps"] * 1e3}
                         if t["cpu"] else {"cpu_ms": None, "cpu_wait_ms": None})}
        rows[name]["over_in_process"] = rows[name]["tokens_per_s"] / (base["tokens"] / base["seconds"])
        rows[name]["rpcs_per_step"] = ARMS.get(name, OWN_PLAN_ARM)[2]
    for name, engine in engines.items():
        shape = engine.policy(tree).shape_for(verifier, temperature)
        rows[name]["tree"] = {"nodes": shape.size, "depth": shape.max_depth}
    rows["distributed_over_in_process"] = rows["distributed"]["over_in_process"]
    if "distributed, pinned" in rows and "in-process, pinned" in rows:
        rows["pinned_over_in_process_pinned"] = (rows["distributed, pinned"]["tokens_per_s"]
                                                 / rows["in-process, pinned"]["tokens_per_s"])
    if "distributed" + AWAKE in rows and "in-process" + AWAKE in rows:
        rows["awake_over_in_process_awake"] = (rows["distributed" + AWAKE]["tokens_per_s"]
                                               / rows["in-process" + AWAKE]["tokens_per_s"])
    rows["identical_tokens"] = identical
    rows["setting"] = {"verifier": verifier, "tree": tree, "temperature": temperature}
    return rows


class _WaitingTarget:
    """The in-process target, waiting `pause` seconds before each verification as a remote
    target's process waits for its next call: compute after an idle wait, without any RPC."""

    def __init__(self, target, pause: float):
        self.target, self.pause = target, pause

    def __getattr__(self, name):  # vocab_size, context_length, eos_token_ids
        return getattr(self.target, name)

    def open(self, spec):
        return _WaitingSession(self.target.open(spec), self.pause)


class _WaitingSession:
    def __init__(self, session, pause: float):
        self.session, self.pause = session, pause

    def verify(self, draft):
        time.sleep(self.pause)
        return self.session.verify(draft)

    def close(self):
        self.session.close()


def idle_control(target, drafter, prompts, tokens, temperature, verifier, tree, costs, pauses=(0.0, 0.005, 0.010),
                 rounds=2) -> list[dict]:
    """In-process decoding whose target sleeps before each verification: how much slower this
    machine computes right after an idle wait — a cost any placement that waits on another
    process pays, whatever the transport.  Pauses alternate prompt by prompt, `rounds` times."""
    totals = {pause: {"steps": 0, "draft": 0.0, "score": 0.0} for pause in pauses}
    engines = {pause: SpeculativeEngine(_WaitingTarget(target, pause), drafter, verifier=verifier, tree=tree,
                                        acceptance_dir=ACCEPTANCE, costs=costs, adaptive=False) for pause in pauses}
    for _ in range(rounds):
        for i, prompt in enumerate(prompts):
            for pause in pauses[i % len(pauses):] + pauses[: i % len(pauses)]:
                _, stats, _ = decode(engines[pause], prompt, tokens, temperature, seed=900 + i)
                t = totals[pause]
                t["steps"] += len(stats.steps)
                t["draft"] += sum(s.draft for s in stats.steps)
                t["score"] += sum(s.score for s in stats.steps)
    print("  idle control", flush=True)
    return [{"pause_ms": pause * 1e3, "draft_ms": t["draft"] / t["steps"] * 1e3, "score_ms": t["score"] / t["steps"] * 1e3}
            for pause, t in totals.items()]


def random_target(hidden: int, layers: int, directory: Path, device: str = "cpu") -> Path:
    """A checkpoint of the demo target's architecture, vocabulary and tokenizer at hidden size
    `hidden` and `layers` layers, with seeded random weights: a target whose steps cost what
    a model of that size costs, for timing only.  Built on `device`, in the dtype
    `load_causal_lm` gives there (float32 on CPU, bfloat16 on CUDA: a 6-billion-parameter
    target is built in seconds on a GPU and in minutes on a CPU)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(TARGET_PATH)
    config.hidden_size, config.num_hidden_layers = hidden, layers
    config.num_attention_heads = config.num_key_value_heads = hidden // config.head_dim
    config.intermediate_size = hidden * 8 // 3 // 64 * 64
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=resolve_dtype("auto", torch.device(device)))
    path = directory / f"target-{hidden}x{layers}"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(TARGET_PATH).save_pretrained(path)
    return path


def pinned_only_with(plan: dict | None, arms) -> tuple:
    """`arms` less the pinned ones where nothing is pinned (one CPU, or a GPU run): they would
    repeat their unpinned twins."""
    return tuple(name for name in arms if plan or not name.endswith(", pinned"))


SCALE_ARMS = ("in-process", "distributed", "target in coordinator", "in-process, pinned", "distributed, pinned")


def scaled_targets(args, drafter, drafter_workers: dict, prompts, logs: Path, plan: dict | None) -> list[dict]:
    """In-process against distributed at larger (random-weight) targets, on a fixed tree; the
    remote arms use the running demo drafter workers (`drafter_workers`: kind of handle ->
    Worker), the pinned arms a second target worker kept to its CPU."""
    rows = []
    for size in args.scale_targets:
        hidden, layers = (int(n) for n in size.split("x"))
        path = random_target(hidden, layers, logs, args.device)
        model, _ = load_causal_lm(path, args.device)
        workers = {"stream": Worker(logs / f"target-{size}.log", "--role", "target", "--prefix-cache-mb", "0", "--model", str(path),
                                    "--device", args.device, threads=args.threads)}
        try:
            if plan:
                workers["pinned"] = Worker(logs / f"target-{size}-pinned.log", "--role", "target", "--prefix-cache-mb", "0", "--model", str(path),
                                           threads=args.threads, cpus=plan["target"])
            handles = {"local": (LocalTarget(model, prefix_cache_mb=0), drafter)}
            for kind, worker in workers.items():
                remote = RemoteTarget(worker.address)
                handles[kind] = (remote, RemoteDrafter(drafter_workers[kind].address, remote.vocab_size))
            pids = {kind: (worker.process.pid, drafter_workers[kind].process.pid) for kind, worker in workers.items()}
            result = overhead(handles, prompts[: args.scale_prompts], args.scale_tokens, args.temperature,
                              args.verifier, args.scale_tree, None, arms=pinned_only_with(plan, SCALE_ARMS), plan=plan,
                              worker_pids=pids)
            result["target"] = {"size": size, "parameters": sum(p.numel() for p in model.parameters())}
            rows.append(result)
            for kind in workers:
                for handle in handles[kind]:
                    handle.close()
        finally:
            for worker in workers.values():
                worker.stop()
            del model
            shutil.rmtree(path, ignore_errors=True)  # a 6-billion-parameter checkpoint is 13 GB
        print(f"  scale: target {size}", flush=True)
    return rows


def placement(target_address, drafter_address, prompts, tokens, temperature, tree, costs):
    rows = []
    for verifier in available_verifiers():
        row = {"verifier": verifier}
        for where in ("target", "coordinator"):
            remote = RemoteTarget(target_address, verify_at=where)
            tree_for = "dynamic:32" if verifier == "topk" else tree if fits(verifier, tree) else "chain:4"
            engine = SpeculativeEngine(remote, RemoteDrafter(drafter_address, remote.vocab_size), verifier=verifier,
                                       tree=tree_for, acceptance_dir=ACCEPTANCE, costs=costs, adaptive=False)
            steps = byte_count = 0
            for i, prompt in enumerate(prompts):
                _, stats, _ = decode(engine, prompt, tokens, 0.0 if verifier == "greedy" else temperature, seed=i)
                steps += len(stats.steps)
                byte_count += sum(s.wire_bytes for s in stats.steps)
            row[f"bytes_per_step_verify_at_{where}"] = byte_count / steps
            remote.close()
        rows.append(row)
        print(f"  placement: {verifier}", flush=True)
    return rows


def _spin(ms: float) -> None:
    deadline = time.perf_counter() + ms / 1e3
    while time.perf_counter() < deadline:
        pass


class _BusyHealth(HealthServicer):
    """A health service whose Check computes for `service` milliseconds: an RPC as long as a
    decoding step, with nothing of rayspec in it."""

    def Check(self, request, context):
        _spin(float(request.service or 0))
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def _serve_busy_health(ports):
    server, port = start_server(lambda s: health_pb2_grpc.add_HealthServicer_to_server(_BusyHealth([]), s), "127.0.0.1:0")
    ports.put(port)
    server.wait_for_termination()


def _serve_bare_tcp(ports):
    """The busy handler behind a bare loopback TCP socket: each request is the handler's
    milliseconds as 16 ASCII bytes, each reply one byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    ports.put(listener.getsockname()[1])
    connection, _ = listener.accept()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while request := connection.recv(16, socket.MSG_WAITALL):
        _spin(float(request))
        connection.sendall(b"\n")


def _round_trips(call, ms: float, calls: int) -> float:
    """Median seconds of `call(ms)` beyond `ms`, its first few calls left out."""
    extra = []
    for _ in range(calls if ms == 0 else max(20, int(calls * 5 / max(ms, 5)))):
        start = time.perf_counter()
        call(ms)
        extra.append(time.perf_counter() - start - ms / 1e3)
    return statistics.median(extra[5:])


@contextlib.contextmanager
def _grpc_caller(port: int):
    """call(ms): one health Check whose handler computes for `ms`."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        yield lambda ms: stub.Check(health_pb2.HealthCheckRequest(service=f"{ms:.3f}"), timeout=10)


@contextlib.contextmanager
def _bare_tcp_caller(port: int):
    """call(ms): one request to `_serve_bare_tcp` and its reply."""
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def call(ms):
            connection.sendall(f"{ms:<16.3f}".encode())
            connection.recv(1)

        yield call


TRANSPORTS = {"grpc": (_serve_busy_health, _grpc_caller), "bare_tcp": (_serve_bare_tcp, _bare_tcp_caller)}


def transport_floor(step_ms: float, calls: int = 200) -> dict:
    """Median round trip on loopback beyond the handler's own time, for a handler of 0 ms and
    of `step_ms` (this machine wakes slower from a longer wait): a gRPC call, and the same
    handler behind a bare TCP socket — what the kernel and this VM cost without gRPC."""
    floor = {}
    for transport, (serve, caller) in TRANSPORTS.items():
        ports = multiprocessing.Queue()
        server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
        server.start()
        try:
            with caller(ports.get(timeout=60)) as call:
                floor[transport] = {f"{ms:.0f}ms": _round_trips(call, ms, calls) * 1e3 for ms in (0.0, step_ms)}
        finally:
            server.terminate()
    return floor


def locust_sweep(users, seconds, max_tokens, target_where="worker", batching="on", max_concurrent=None,
                 max_queued=None):
    """`rayspec serve` (its defaults, but the target's `where`, with batching "off" one
    sequence per forward, and `limits.max_concurrent_requests` / `max_queued_requests` when
    given) under locust: streaming HTTP and gRPC users; TTFT and inter-chunk percentiles,
    requests per second, failures."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    limits = {name: value for name, value in (("max_concurrent_requests", max_concurrent),
                                              ("max_queued_requests", max_queued)) if value is not None}
    tag = "".join(f"_{name.split('_')[1]}{value}" for name, value in limits.items())
    log = open(RESULTS / f"service_bench_serve_{target_where}_{batching}{tag}.log", "w")  # one per configuration
    config = Path(tempfile.mkdtemp()) / "serve.yaml"
    alone = ", max_batch_sequences: 1" if batching == "off" else ""
    drafters = f"drafters: [{{{alone[2:]}}}]\n" if alone else ""
    config.write_text(f"target: {{where: {target_where}{alone}}}\n" + drafters
                      + (f"limits: {json.dumps(limits)}\n" if limits else ""))
    serve = subprocess.Popen([sys.executable, "-m", "rayspec.cli", "serve", str(config)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = serve.stdout.readline()
            if "rayspec is ready" in line or (not line and serve.poll() is not None):
                break
        if serve.poll() is not None:
            raise RuntimeError(f"rayspec serve exited; see {log.name}")
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for user_class in ("OpenAIHttpUser", "GrpcUser"):
                for count in users:
                    prefix = Path(tmp) / f"{user_class}_{count}"
                    subprocess.run(
                        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtest/locustfile.py"), "--headless",
                         "-u", str(count), "-r", str(count), "-t", f"{seconds}s", "--host", "http://127.0.0.1:8000",
                         "--tags", "stream", "--only-summary", "--csv", str(prefix), "--json-file", str(prefix), user_class],
                        cwd=ROOT, env={**env, "RAYSPEC_GRPC": "127.0.0.1:9000", "RAYSPEC_MAX_TOKENS": str(max_tokens)},
                        capture_output=True, text=True, timeout=seconds + 120,
                    )
                    rows.append({"target": target_where, "batching": batching, **limits, "users": count,
                                 "client": user_class, **read_locust(prefix)})
                    print(f"  locust ({target_where} target, batching {batching}{tag.replace('_', ', ')}): "
                          f"{user_class} x {count}", flush=True)
        return rows
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
        log.close()


def read_locust(prefix: Path) -> dict:
    """Requests, failures and requests/s of the request rows of `<prefix>_stats.csv` (the
    requests/s of the generations, not of the HTTP users' GET /v1/models, one per user); each
    metric's p50, p99 and mean over all its rows (an HTTP run's completions and chat streams
    both), from the samples' histograms in `<prefix>.json` (locust's --json-file): the CSV has
    only each row's own percentiles."""
    stats = Path(f"{prefix}_stats.csv")
    out = {"requests": 0, "failures": 0, "requests/s": 0.0}
    if not stats.exists():
        return out
    for row in csv.DictReader(stats.open()):
        if row["Name"] == "Aggregated" or row["Type"] == "METRIC":
            continue
        out["failures"] += int(row["Failure Count"])
        if row["Name"] != "GET /v1/models":
            out["requests"] += int(row["Request Count"])
            out["requests/s"] += float(row["Requests/s"] or 0)
    failures = Path(f"{prefix}_failures.csv")
    if out["failures"] and failures.exists():  # what the failures were: a refusal, a 503 of Serve's, a crash
        out["failure kinds"] = {f"{row['Name']}: {row['Error'][:300]}": int(row["Occurrences"])
                                for row in csv.DictReader(failures.open())}
    entries = json.loads(Path(f"{prefix}.json").read_text()) if Path(f"{prefix}.json").exists() else []
    metrics = {}  # metric: (histogram {value: samples}, [samples, sum])
    for entry in entries:
        if entry["method"] == "METRIC":
            histogram, totals = metrics.setdefault(entry["name"].split(" | ")[-1], ({}, [0, 0.0]))
            for value, samples in entry["response_times"].items():
                histogram[float(value)] = histogram.get(float(value), 0) + samples
            totals[0] += entry["num_requests"]
            totals[1] += entry["total_response_time"]
    for metric, (histogram, (samples, total)) in metrics.items():
        out[f"{metric} p50"] = locust_percentile(histogram, 0.5)
        out[f"{metric} p99"] = locust_percentile(histogram, 0.99)
        out[f"{metric} mean"] = total / max(samples, 1)
    return out


def locust_percentile(histogram: dict[float, int], fraction: float) -> float:
    """Locust's percentile of a {value: samples} histogram (`calculate_response_time_percentile`),
    the CSV's `50%` ... columns for one row's histogram.  Written out rather than imported:
    importing locust patches the whole process with gevent (threads become greenlets)."""
    samples, seen = sum(histogram.values()), 0
    for value in sorted(histogram, reverse=True):
        seen += histogram[value]
        if samples - seen <= int(samples * fraction):
            return value
    return 0.0


def in_process_vs_distributed(args, save=lambda parts: None) -> dict:
    """The overhead, scale, sweep, idle-control, transport-floor and bytes-by-verifier parts
    (`args.parts`); `save(parts so far)` after each, so that a run cut short keeps them."""
    target, drafter, target_model, _, _, prompts = load_demo(args.device)
    costs = SpeculativeEngine(target, drafter, verifier=args.verifier, tree="chain:1", acceptance_dir=ACCEPTANCE).costs()
    logs = Path(tempfile.mkdtemp())
    # Pinning and keeping CPUs awake are about a CPU-bound step on this VM; on a GPU the
    # models do not compute on the CPUs those arms manage.
    on_cpu = args.device == "cpu"
    plan = cpu_plan() if on_cpu else None
    arms = pinned_only_with(plan, (name for name in ARMS if on_cpu or not name.endswith(AWAKE)))
    device = ("--device", args.device)
    workers = [
        Worker(logs / "target.log", "--role", "target", "--prefix-cache-mb", "0", "--model", str(TARGET_PATH), *device, threads=args.threads),
        Worker(logs / "drafter.log", "--role", "drafter", "--prefix-cache-mb", "0", "--model", str(DRAFTER_PATH), *device, threads=args.threads),
    ]
    if plan:  # the same pair again, each process kept to its CPU
        workers += [
            Worker(logs / "target-pinned.log", "--role", "target", "--prefix-cache-mb", "0", "--model", str(TARGET_PATH), threads=args.threads,
                   cpus=plan["target"]),
            Worker(logs / "drafter-pinned.log", "--role", "drafter", "--prefix-cache-mb", "0", "--model", str(DRAFTER_PATH), threads=args.threads,
                   cpus=plan["drafter"]),
        ]
    try:
        handles = {"local": (target, drafter)}
        if plan:
            pinned_target = RemoteTarget(workers[2].address)
            handles["pinned"] = (pinned_target, RemoteDrafter(workers[3].address, pinned_target.vocab_size))
        for kind in ("stream", "unary"):
            remote_target = RemoteTarget(workers[0].address, streams=kind == "stream")
            handles[kind] = (remote_target, RemoteDrafter(workers[1].address, remote_target.vocab_size,
                                                          streams=kind == "stream"))
        pids = {kind: (workers[0].process.pid, workers[1].process.pid) for kind in ("stream", "unary")}
        if plan:
            pids["pinned"] = (workers[2].process.pid, workers[3].process.pid)
        result = {"costs": costs.to_json(), "cpu_plan": plan}
        if "overhead" in args.parts:
            result["overhead"] = overhead(handles, prompts[: args.prompts], args.tokens, args.temperature, args.verifier,
                                          args.tree, costs, arms=arms, plan=plan, worker_pids=pids, own_plan=True)
        save(result)
        if "scale" in args.parts and args.scale_targets:
            drafters = {"stream": workers[1], **({"pinned": workers[3]} if plan else {})}
            result["scale"] = scaled_targets(args, drafter, drafters, prompts, logs, plan)
            save(result)
        if "sweep" in args.parts:
            result["sweep"] = [
                overhead(handles, prompts[: args.sweep_prompts], args.tokens, args.temperature, args.verifier, tree,
                         costs, arms=SWEEP_ARMS, worker_pids=pids)
                for tree in args.sweep_trees
            ]
            save(result)
        if "idle" in args.parts:
            result["idle_control"] = idle_control(target, drafter, prompts[: args.sweep_prompts], args.tokens,
                                                  args.temperature, args.verifier, args.tree, costs)
        if "floor" in args.parts and "overhead" in result:
            result["transport_floor"] = transport_floor(result["overhead"]["distributed"]["step_ms"] / 2)
        if "placement" in args.parts:
            result["placement"] = placement(workers[0].address, workers[1].address, prompts[: args.placement_prompts],
                                            48, args.temperature, "kary:2x3", costs)
    finally:
        for worker in workers:
            worker.stop()
    return result


PARTS = ("overhead", "sweep", "idle", "scale", "floor", "placement")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--tree", default="sequoia:auto")
    parser.add_argument("--sweep-trees", nargs="*", default=["kary:2x3", "sequoia:32", "sequoia:64", "sequoia:128"],
                        help="trees of growing step time, in-process vs distributed")
    parser.add_argument("--sweep-prompts", type=int, default=4)
    parser.add_argument("--scale-targets", nargs="*", default=["512x8", "1024x12"],
                        help="random-weight targets HIDDENxLAYERS: in-process vs distributed at longer steps")
    parser.add_argument("--scale-tree", default="kary:2x3")
    parser.add_argument("--scale-prompts", type=int, default=6)
    parser.add_argument("--scale-tokens", type=int, default=48)
    parser.add_argument("--placement-prompts", type=int, default=3)
    parser.add_argument("--users", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--locust-seconds", type=int, default=60)
    parser.add_argument("--skip-locust", action="store_true")
    parser.add_argument("--only-locust", action="store_true", help="the load part alone")
    parser.add_argument("--target-where", nargs="+", default=["worker"], choices=["worker", "coordinator"],
                        help="locust: `rayspec serve` once per target placement, one after the other")
    parser.add_argument("--batching", nargs="+", default=["on"], choices=["on", "off"],
                        help="locust: `rayspec serve` once per setting of cross-request batching")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="locust: the served limits.max_concurrent_requests (default: the config's default)")
    parser.add_argument("--max-queued", type=int, nargs="+", default=[None],
                        help="locust: the served limits.max_queued_requests, `rayspec serve` once per value "
                             "(0: no queue, a busy service refuses; default: the config's default)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS,
                        help="which parts of the in-process vs distributed comparison to run")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the models compute, in every process (the load part always runs on CPU)")
    parser.add_argument("--out", default=None, help="default: bench/results/service_bench")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    result = {"meta": {**machine(args.device), **vars(args)}}
    out = out_prefix(args.out, "service_bench")

    def save(parts: dict | None = None):
        if parts is not None:
            parts = dict(parts)
            result["meta"]["costs"] = parts.pop("costs")
            result["meta"]["cpu_plan"] = parts.pop("cpu_plan")
            result.update(parts)
        suffixed(out, ".json").write_text(json.dumps(result, indent=2))
        write_markdown(suffixed(out, ".md"), result)

    if not args.only_locust:
        save(in_process_vs_distributed(args, save))
    if not args.skip_locust:
        result["locust"] = [row for where in args.target_where for batching in args.batching for queued in args.max_queued
                            for row in locust_sweep(args.users, args.locust_seconds, 64, where, batching,
                                                    args.max_concurrent, queued)]
        save()
    print(suffixed(out, ".md").read_text())


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _ms_more(row: dict, base: dict) -> str:
    return "–" if row["cpu_ms"] is None else f"{row['cpu_ms'] - base['cpu_ms']:.1f}"


def write_markdown(path, result):
    meta = result["meta"]
    threads = meta.get("threads_text") or f"{meta['threads']} torch thread(s) per process"
    lines = [f"# The distributed path on the demo pair ({meta['device_name']}, {threads})"]
    if meta.get("note"):
        lines += ["", meta["note"]]
    floor = result.get("transport_floor", {})
    if "overhead" in result:
        o = result["overhead"]
        s = o["setting"]
        lines += ["",
                  f"## Overhead: workers as plain processes on loopback gRPC vs in-process ({s['verifier']}, {s['tree']}, T = {s['temperature']:g})", "",
                  "| path | RPCs/step | tree (nodes, depth) | tokens/s | vs in-process | tokens/step | step ms | compute ms | outside compute | added by distribution | CPU ms/step | waiting for a CPU, ms/step | bytes/step |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name in [*ARMS, OWN_PLAN]:
            if name not in o:
                continue
            r = o[name]
            lines.append(f"| {name} | {r['rpcs_per_step']} | {r['tree']['nodes']}, {r['tree']['depth']} | {r['tokens_per_s']:.1f} | "
                         f"{r['over_in_process']:.3f} | {r['tokens_per_step']:.2f} | {r['step_ms']:.1f} | {r['compute_ms']:.1f} | "
                         f"{r['other_share'] * 100:.1f} % | {r['added_share'] * 100:.1f} % | {_ms(r['cpu_ms'])} | "
                         f"{_ms(r['cpu_wait_ms'])} | {r['bytes_per_step']:.0f} |")
        lines += ["", f"Distributed / in-process tokens/s: **{o['distributed_over_in_process']:.3f}** (goal ≥ 0.90); "
                  f"identical tokens for the same seeds and tree on every path: **{o['identical_tokens']}**.  "
                  "'Compute' is the drafter's and target's forwards and the verifier, timed where they run; "
                  "'outside compute' the rest of the step; 'added by distribution' that minus the in-process "
                  "engine's own (goal ≤ 5 %).  Step time the distributed path adds = its added share plus the "
                  "compute it loses in separate processes (the compute column's difference)."]
        if o["in-process"]["cpu_ms"] is not None:
            added_wall = o["distributed"]["decode_ms_per_step"] - o["in-process"]["decode_ms_per_step"]
            lines[-1] += ("  'CPU ms/step': CPU time of every thread of the arm's processes (coordinator and workers: "
                          "models, gRPC, codecs, Python) over whole decodes, prompts included, per step; beside it, "
                          "the time those threads were runnable but waiting for a CPU.  The distributed path's "
                          f"processes spend **{_ms_more(o['distributed'], o['in-process'])} ms** more CPU per step than "
                          f"the in-process engine, of the **{added_wall:.1f} ms** per step it adds to a decode.")
        if "pinned_over_in_process_pinned" in o:
            plan = meta.get("cpu_plan") or {}
            lines += ["", f"Pinned arms: every process kept to its CPU (coordinator {plan.get('coordinator')}, target "
                      f"{plan.get('target')}, drafter {plan.get('drafter')}; workers `--cpus`, the coordinator "
                      "pinned for the arm only).  Distributed / in-process, both pinned: "
                      f"**{o['pinned_over_in_process_pinned']:.3f}**."]
        if "awake_over_in_process_awake" in o:
            lines += ["", "CPUs kept awake: a busy loop at SCHED_IDLE priority on every CPU during the arm's decoding, "
                      "so that no virtual CPU halts while its process waits (a diagnostic of this VM's wake-up cost, "
                      "not a rayspec setting).  Distributed / in-process, both kept awake: "
                      f"**{o['awake_over_in_process_awake']:.3f}**; distributed kept awake / plain in-process: "
                      f"**{o['distributed' + AWAKE]['over_in_process']:.3f}**."]
    if result.get("sweep"):
        lines += ["", "### Longer steps: in-process vs distributed (Steps streams) by tree", "",
                  "| tree | nodes, depth | in-process tokens/s | distributed tokens/s | ratio | in-process step ms | "
                  "distributed step ms | added ms/step | of it, slower compute | added CPU ms/step | added by distribution | identical tokens |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for sweep in result["sweep"]:
            local, remote = sweep["in-process"], sweep["distributed"]
            lines.append(
                f"| {sweep['setting']['tree']} | {local['tree']['nodes']}, {local['tree']['depth']} | "
                f"{local['tokens_per_s']:.1f} | {remote['tokens_per_s']:.1f} | **{remote['over_in_process']:.3f}** | "
                f"{local['step_ms']:.1f} | {remote['step_ms']:.1f} | {remote['step_ms'] - local['step_ms']:.1f} | "
                f"{remote['compute_ms'] - local['compute_ms']:.1f} | {_ms_more(remote, local)} | "
                f"{remote['added_share'] * 100:.1f} % | {sweep['identical_tokens']} |")
    if result.get("scale"):
        lines += ["", f"### Larger targets (random weights, demo architecture and vocabulary), tree {result['scale'][0]['setting']['tree']}", "",
                  "Timing only: these targets' outputs are meaningless and they rarely accept a draft, "
                  "so tokens/s is the inverse of step time here; the tokens are still compared.", "",
                  "| target (hidden x layers) | parameters | path | tokens/s | vs in-process | step ms | compute ms | "
                  "added ms/step | of it, slower compute | added CPU ms/step | added by distribution | identical tokens |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for scale in result["scale"]:
            local = scale["in-process"]
            for name in (arm for arm in SCALE_ARMS if arm in scale):
                r = scale[name]
                lines.append(
                    f"| {scale['target']['size']} | {scale['target']['parameters'] / 1e6:.0f} M | {name} | "
                    f"{r['tokens_per_s']:.2f} | **{r['over_in_process']:.3f}** | {r['step_ms']:.1f} | {r['compute_ms']:.1f} | "
                    f"{r['step_ms'] - local['step_ms']:.1f} | {r['compute_ms'] - local['compute_ms']:.1f} | "
                    f"{_ms_more(r, local)} | {r['added_share'] * 100:.1f} % | {scale['identical_tokens']} |")
    if result.get("idle_control"):
        rows = result["idle_control"]
        lines += ["", "### Compute after an idle wait, in-process (no RPC: the target sleeps before each verification)", "",
                  "| wait before each verification | draft ms/step | score ms/step | score vs no wait |", "|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['pause_ms']:.0f} ms | {r['draft_ms']:.2f} | {r['score_ms']:.2f} | "
                         f"{r['score_ms'] / rows[0]['score_ms']:.3f} |")
    if floor:
        labels = {"grpc": "gRPC Python", "bare_tcp": "a bare TCP socket with the same handlers"}
        lines += ["", "Transport floor on this machine (loopback, median round trip beyond the handler's own): "
                  + "; ".join(labels[transport] + " " + ", ".join(f"{v:.2f} ms with a {k[:-2]} ms handler"
                                                               for k, v in handlers.items())
                              for transport, handlers in floor.items()) + "."]
    if result.get("placement"):
        lines += ["",
                  "## Bytes crossing per step, by verifier and where it runs (tree kary:2x3; single-draft verifiers chain:4; topk dynamic:32)", "",
                  "| verifier | verifier at the target (default) | verifier at the coordinator |", "|---|---|---|"]
        for r in result["placement"]:
            lines.append(f"| {r['verifier']} | {r['bytes_per_step_verify_at_target']:.0f} | {r['bytes_per_step_verify_at_coordinator']:.0f} |")
    if result.get("locust"):
        # the served limits, as columns only where a run set them
        limits = [name for name in ("max_concurrent_requests", "max_queued_requests")
                  if any(name in r for r in result["locust"])]
        lines += ["", "## Load: `rayspec serve` under locust, streaming requests of 64 tokens", "",
                  "| target | batching | " + "".join(f"{name} | " for name in limits) + "client | users | requests | requests/s | failures | TTFT p50 ms | TTFT p99 ms | inter-chunk p50 ms | inter-chunk p99 ms | tokens/s per request p50 |",
                  "|---|---|" + "---|" * len(limits) + "---|---|---|---|---|---|---|---|---|---|"]
        for r in result["locust"]:
            lines.append(f"| {r.get('target', 'worker')} | {r.get('batching', 'none')} | "
                         + "".join(f"{r.get(name, 'default')} | " for name in limits) + f"{r['client']} | {r['users']} "
                         f"| {r['requests']} | {r.get('requests/s', 0):.2f} | {r['failures']} | {r.get('TTFT ms p50', 0):.0f} | "
                         f"{r.get('TTFT ms p99', 0):.0f} | {r.get('inter-chunk ms p50', 0):.0f} | {r.get('inter-chunk ms p99', 0):.0f} | "
                         f"{r.get('tokens/s p50', 0):.1f} |")
        kinds = [(r, kind, count) for r in result["locust"] for kind, count in r.get("failure kinds", {}).items()]
        if kinds:
            lines += ["", "Failures:", ""] + [
                f"- {r['client']} x {r['users']}" + "".join(f", {name} {r[name]}" for name in limits)
                + f": {count} x `{kind}`" for r, kind, count in kinds]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
