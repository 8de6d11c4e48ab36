"""A mix of the requests a service meets in a day, each answer checked: HTTP completions, chat
streams, `n: 2`, streams whose client leaves after the first chunk, requests whose client times
out mid-generation, bad input; gRPC `Generate`, streams read to their end and streams cancelled
after one chunk, bad input.  Anything but the due answer (a 200 with its tokens, a 400 with a
message, a stream ending in `[DONE]`...) is a failure, kept with its message.  Used by the
launch tests (a short run) and `bench/soak.py` (minutes, watching for leaks)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import grpc
import httpx

PROMPTS = ["def fibonacci(n):\n", "import os\n\n\ndef list_python_files(root):\n", "class Stack:\n    def push(self, item):\n"]
MAX_TOKENS = 24


class Unexpected(Exception):
    """An answer the service should not have given."""


@dataclass
class Caller:
    """One simulated user's connections and its stream of prompts and seeds."""
    http: httpx.Client
    sdk: object
    model: str
    context_length: int
    rng: random.Random

    def body(self, **fields) -> dict:
        return {"model": self.model, "prompt": self.rng.choice(PROMPTS), "max_tokens": MAX_TOKENS,
                "temperature": 0.6, "seed": self.rng.randrange(1 << 30), **fields}


def expect_status(reply: httpx.Response, status: int) -> dict:
    if reply.status_code != status:
        raise Unexpected(f"HTTP {reply.status_code} where {status} was due: {reply.text[:200]}")
    return reply.json()


def http_completion(c: Caller) -> None:
    answer = expect_status(c.http.post("/v1/completions", json=c.body()), 200)
    choice, usage = answer["choices"][0], answer["usage"]
    # 0 tokens: the model's first token ended it (the stop token is not counted)
    if choice["finish_reason"] not in ("length", "stop") or not 0 <= usage["completion_tokens"] <= MAX_TOKENS:
        raise Unexpected(f"a completion that ended {choice['finish_reason']} after {usage['completion_tokens']} tokens")


def http_two_choices(c: Caller) -> None:
    answer = expect_status(c.http.post("/v1/completions", json=c.body(n=2)), 200)
    if sorted(choice["index"] for choice in answer["choices"]) != [0, 1]:
        raise Unexpected(f"n: 2 answered {len(answer['choices'])} choices")


def http_chat_stream(c: Caller) -> None:
    body = c.body(stream=True, messages=[{"role": "user", "content": c.rng.choice(PROMPTS)}])
    del body["prompt"]
    with c.http.stream("POST", "/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise Unexpected(f"HTTP {reply.status_code} for a chat stream")
        events = [line for line in reply.iter_lines() if line.startswith("data: ")]
    if events[-1] != "data: [DONE]" or len(events) < 3:
        raise Unexpected(f"a chat stream of {len(events)} events ended {events[-1][:80]!r}")


def http_stream_left(c: Caller) -> None:
    """The client reads the first chunk that carries text and closes the connection (a stream
    the model's first token ended has none: it is read to its end)."""
    with c.http.stream("POST", "/v1/completions", json=c.body(stream=True, max_tokens=4 * MAX_TOKENS)) as reply:
        if reply.status_code != 200:
            raise Unexpected(f"HTTP {reply.status_code} for a stream")
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                return
            if line == "data: [DONE]":
                return
    raise Unexpected("a stream ended without [DONE]")


def http_timed_out(c: Caller) -> None:
    """The client gives up on a long non-streamed request mid-generation."""
    try:
        c.http.post("/v1/completions", json=c.body(max_tokens=4 * MAX_TOKENS), timeout=0.15)
    except httpx.TimeoutException:
        return


def http_bad_input(c: Caller) -> None:
    bad = c.rng.choice([
        ("max_tokens", {**c.body(), "max_tokens": -3}),
        ("verifier", {**c.body(), "rayspec": {"verifier": "no-such-verifier"}}),
        ("context", {**c.body(), "prompt": [7] * (c.context_length + 1)}),
        ("json", b'{"model": "x", "prompt": '),
    ])
    name, body = bad
    reply = c.http.post("/v1/completions", **({"content": body, "headers": {"content-type": "application/json"}}
                                             if isinstance(body, bytes) else {"json": body}))
    answer = expect_status(reply, 400)
    if not answer.get("error", {}).get("message"):
        raise Unexpected(f"a 400 without a message for bad {name}")


def grpc_generate(c: Caller) -> None:
    done = c.sdk.generate(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, temperature=0.6, seed=c.rng.randrange(1 << 30))
    if not 0 <= len(done.token_ids) <= MAX_TOKENS or (not done.token_ids and done.finish_reason != "stop"):
        raise Unexpected(f"Generate gave {len(done.token_ids)} tokens")


def grpc_stream(c: Caller) -> None:
    stream = c.sdk.stream(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, temperature=0.6, seed=c.rng.randrange(1 << 30))
    chunks = list(stream)
    if stream.completion is None:
        raise Unexpected(f"a gRPC stream of {len(chunks)} chunks without its completion")


def grpc_stream_cancelled(c: Caller) -> None:
    with c.sdk.stream(c.rng.choice(PROMPTS), max_tokens=4 * MAX_TOKENS, temperature=0.6) as stream:
        next(stream)


def grpc_bad_input(c: Caller) -> None:
    from rayspec.client import InvalidRequestError

    try:
        c.sdk.generate(c.rng.choice(PROMPTS), max_tokens=MAX_TOKENS, verifier="no-such-verifier")
    except InvalidRequestError as error:
        if "no-such-verifier" not in str(error):
            raise Unexpected(f"INVALID_ARGUMENT without naming the verifier: {error}") from None
        return
    raise Unexpected("an unknown verifier was accepted over gRPC")


KINDS = {  # name -> (call, weight)
    "HTTP completion": (http_completion, 3), "HTTP n=2": (http_two_choices, 1), "HTTP chat stream": (http_chat_stream, 2),
    "HTTP stream, client left": (http_stream_left, 2), "HTTP client timed out": (http_timed_out, 1),
    "HTTP bad input": (http_bad_input, 1), "gRPC Generate": (grpc_generate, 2), "gRPC stream": (grpc_stream, 2),
    "gRPC stream, cancelled": (grpc_stream_cancelled, 2), "gRPC bad input": (grpc_bad_input, 1),
}


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    seconds: dict = field(default_factory=lambda: defaultdict(list))
    examples: list = field(default_factory=list)
    finished: list = field(default_factory=list)  # (kind, seconds) in the order they ended
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, failure: str | None) -> None:
        with self.lock:
            self.counts[kind] += 1
            self.seconds[kind].append(seconds)
            self.finished.append((kind, seconds))
            if failure is not None:
                self.failures[kind] += 1
                if len(self.examples) < 20:
                    self.examples.append(f"{kind}: {failure}")


def run_traffic(http_address: str, grpc_address: str, seconds: float, users: int, seed: int = 0,
                tally: Tally | None = None) -> Tally:
    """`users` threads cycling through `KINDS` (drawn by weight, seeded) for `seconds`."""
    from rayspec.client import Client

    tally = tally or Tally()
    with httpx.Client(base_url=http_address, timeout=120) as http:
        model = http.get("/v1/models").json()["data"][0]
        model_id, context_length = model["id"], model["max_model_len"]
    names = list(KINDS)
    weights = [KINDS[name][1] for name in names]
    end = time.monotonic() + seconds

    def user(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        with httpx.Client(base_url=http_address, timeout=120) as http, Client(grpc_address, timeout=120) as sdk:
            caller = Caller(http, sdk, model_id, context_length, rng)
            while time.monotonic() < end:
                kind = rng.choices(names, weights)[0]
                start = time.perf_counter()
                try:
                    KINDS[kind][0](caller)
                    failure = None
                except Exception as error:  # noqa: BLE001 — every failure is counted, with its message
                    failure = f"{type(error).__name__}: {error}"[:300]
                tally.add(kind, time.perf_counter() - start, failure)

    threads = [threading.Thread(target=user, args=(i,), name=f"soak-user-{i}") for i in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally


def worker_infos(running) -> dict:
    """role -> its worker's `WorkerInfo` now."""
    from rayspec.rpc.generated import worker_pb2, worker_pb2_grpc

    addresses = {"target": running.target_address, **{f"drafter {i}": a for i, a in enumerate(running.drafter_addresses)}}
    infos = {}
    for role, address in addresses.items():
        with grpc.insecure_channel(address) as channel:
            stub = (worker_pb2_grpc.TargetServiceStub if role == "target" else worker_pb2_grpc.DrafterServiceStub)(channel)
            infos[role] = stub.Info(worker_pb2.InfoRequest(), timeout=10)
    return infos


def gauges(http_address: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{http_address}/metrics", timeout=30).text
    wanted = {"rayspec_generations_in_flight": "in flight", "rayspec_requests_waiting": "waiting"}
    return {wanted[s.name]: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in wanted}


def idle(running, timeout: float = 60.0) -> bool:
    """Wait for every session to be released and nothing in flight."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        now = gauges(running.http_address)
        held = [info.open_sessions for info in worker_infos(running).values()]
        if not any(held) and not now.get("in flight") and not now.get("waiting"):
            return True
        time.sleep(0.5)
    return False
