"""Locust load test of the rayspec service: OpenAI-style HTTP users and gRPC SDK users.

    locust -f loadtest/locustfile.py --headless -u 4 -r 4 -t 60s --host http://127.0.0.1:8000
    locust -f loadtest/locustfile.py ... OpenAIHttpUser           # HTTP users only
    locust -f loadtest/locustfile.py ... GrpcUser --grpc-target 10.0.0.5:9000
    locust -f loadtest/locustfile.py ... --tags stream            # streaming requests only

Every request is a row of locust's table (type HTTP or gRPC).  The custom metrics are rows of
type METRIC whose "response time" columns hold the metric's value, so that locust computes
their percentiles, charts and CSV like any request's:

    <request> | tokens/s        completion tokens / whole request time, one sample per request
    <request> | TTFT ms         streams: request sent -> first chunk that carries text
    <request> | inter-chunk ms  streams: gap between consecutive chunks that carry text

Settings (locust option, environment variable, default):
    --grpc-target  RAYSPEC_GRPC         127.0.0.1:9000   the coordinator's gRPC address
    --prompts      RAYSPEC_PROMPTS      rayspec/demo/prompts.json, else built-in prompts
    --max-tokens   RAYSPEC_MAX_TOKENS   64
    --temperature  RAYSPEC_TEMPERATURE  0.6
    --seed         RAYSPEC_SEED         0     request n uses prompt n mod P and seed SEED + n
    --model        RAYSPEC_MODEL        the first id of GET /v1/models
    --verifier     RAYSPEC_VERIFIER     the server's default
    --tree         RAYSPEC_TREE         the server's default
    (none)         RAYSPEC_API_KEY      none     the service's API key, sent by both kinds of user
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests
from locust import User, constant, events, tag, task
from locust.exception import StopUser

try:  # gRPC's own threads must cooperate with locust's gevent loop (before any channel)
    import grpc.experimental.gevent as grpc_gevent

    grpc_gevent.init_gevent()
except ImportError:  # no grpcio: the gRPC users report the missing SDK as a failure
    pass

DEMO_PROMPTS = Path(__file__).resolve().parents[1] / "rayspec" / "demo" / "prompts.json"
BUILTIN_PROMPTS = [
    "def fibonacci(n):\n",
    "import os\n\n\ndef list_python_files(root):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "def parse_csv_line(line, sep=','):\n",
]
REQUEST_TIMEOUT_S = 300
METRIC = "METRIC"

# dest, environment variable, default, type, help
SETTINGS = [
    ("grpc_target", "RAYSPEC_GRPC", "127.0.0.1:9000", str, "host:port of the rayspec gRPC service"),
    ("prompts", "RAYSPEC_PROMPTS", "", str, "JSON prompt file: a list of strings or of {text}, or {prompts: [...]}"),
    ("max_tokens", "RAYSPEC_MAX_TOKENS", 64, int, "max_tokens of every request"),
    ("temperature", "RAYSPEC_TEMPERATURE", 0.6, float, "sampling temperature"),
    ("seed", "RAYSPEC_SEED", 0, int, "request n is sent with seed SEED + n"),
    ("model", "RAYSPEC_MODEL", "", str, "model field of HTTP requests (default: the first of GET /v1/models)"),
    ("verifier", "RAYSPEC_VERIFIER", "", str, "verifier name (default: the server's)"),
    ("tree", "RAYSPEC_TREE", "", str, "tree spec, e.g. kary:2x3 (default: the server's)"),
]


@events.init_command_line_parser.add_listener
def _add_options(parser):
    for dest, env_var, default, kind, help_text in SETTINGS:
        parser.add_argument(f"--{dest.replace('_', '-')}", dest=dest, env_var=env_var, default=default,
                            type=kind, help=help_text)


def setting(environment, dest: str):
    """A setting from locust's options, or from the environment when locust runs as a library."""
    options = environment.parsed_options
    if options is not None and hasattr(options, dest):
        return getattr(options, dest)
    _, env_var, default, kind, _ = next(s for s in SETTINGS if s[0] == dest)
    return kind(os.environ.get(env_var, default))


def load_prompts(path: str) -> list[str]:
    """Prompt texts from a JSON list of strings or of objects with "text" (or "prompt"), or
    from an object holding such a list under "prompts" (rayspec/demo/prompts.json)."""
    if not path:
        if not DEMO_PROMPTS.exists():
            return BUILTIN_PROMPTS
        path = DEMO_PROMPTS
    data = json.loads(Path(path).read_text())
    items = data["prompts"] if isinstance(data, dict) else data
    prompts = [item if isinstance(item, str) else item.get("text") or item["prompt"] for item in items]
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


class ProtocolError(Exception):
    """The service answered, but not as the API says it must."""


@dataclass
class Outcome:
    """What one request measured; `metrics` turns it into METRIC samples."""

    start: float
    end: float
    length: int                     # bytes of text received
    tokens: int | None              # completion tokens, None when the server did not say
    chunk_times: list[float] = field(default_factory=list)  # arrivals of chunks with text

    def metrics(self):
        if self.tokens is not None:  # a completion of no tokens (EOS at once) is a sample of 0
            yield "tokens/s", self.tokens / max(self.end - self.start, 1e-9)
        if self.chunk_times:
            yield "TTFT ms", (self.chunk_times[0] - self.start) * 1e3
        for before, after in itertools.pairwise(self.chunk_times):
            yield "inter-chunk ms", (after - before) * 1e3


_request_numbers = itertools.count()


class RayspecUser(User):
    """Closed-loop users (no think time), so `-u N` means N requests in flight."""

    abstract = True
    wait_time = constant(0)

    def on_start(self):
        self.prompts = load_prompts(setting(self.environment, "prompts"))
        self.settings = {dest: setting(self.environment, dest) for dest, *_ in SETTINGS}

    def next_request(self) -> tuple[str, int]:
        """(prompt, seed) of the next request: request n uses prompt n mod P and seed SEED + n."""
        n = next(_request_numbers)
        return self.prompts[n % len(self.prompts)], self.settings["seed"] + n

    def fire(self, request_type: str, name: str, response_time: float, length: int = 0, exception=None):
        self.environment.events.request.fire(
            request_type=request_type, name=name, response_time=response_time,
            response_length=length, exception=exception, context={},
        )

    def measure(self, request_type: str, name: str, call) -> None:
        """Run `call(start) -> Outcome`; report the request, then its metric samples."""
        start = time.perf_counter()
        try:
            outcome = call(start)
        except Exception as error:  # any failure is the request's, reported and counted
            self.fire(request_type, name, (time.perf_counter() - start) * 1e3, exception=error)
            return
        self.fire(request_type, name, (outcome.end - start) * 1e3, outcome.length)
        for metric, value in outcome.metrics():
            self.fire(METRIC, f"{name} | {metric}", value)


def check_usage(usage: dict, max_tokens: int) -> int:
    """The OpenAI usage object with rayspec's draft counts; returns completion_tokens."""
    try:
        prompt, completion, total = usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]
        details = usage["completion_tokens_details"]
        accepted, rejected = details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]
    except (KeyError, TypeError) as error:
        raise ProtocolError(f"usage lacks {error}: {usage}") from None
    counts = (prompt, completion, total, accepted, rejected)
    if not all(isinstance(c, int) and c >= 0 for c in counts):
        raise ProtocolError(f"usage counts must be non-negative integers: {usage}")
    if total != prompt + completion or completion > max_tokens:
        raise ProtocolError(f"inconsistent usage for max_tokens={max_tokens}: {usage}")
    return completion


def chunk_text(payload: dict, chat: bool) -> str:
    """The text of a completion (or of one streamed chunk of it); '' when it carries none."""
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise ProtocolError(f"no choices in {payload}")
    if not choices:  # the usage-only chunk that ends a stream
        return ""
    choice = choices[0]
    text = (choice.get("delta") or choice.get("message") or {}).get("content") if chat else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise ProtocolError(f"text is not a string in {payload}")
    return text or ""


class OpenAIHttpUser(RayspecUser):
    """OpenAI-style requests to the Ray Serve HTTP app at locust's --host."""

    _model: str | None = None  # discovered once per process

    def on_start(self):
        super().on_start()
        if not self.host:
            raise ValueError("OpenAIHttpUser needs --host, e.g. http://127.0.0.1:8000")
        self.session = requests.Session()
        if key := os.environ.get("RAYSPEC_API_KEY"):
            self.session.headers["Authorization"] = f"Bearer {key}"
        self.model = self.settings["model"] or self._discover_model()

    def on_stop(self):
        self.session.close()

    def _discover_model(self) -> str:
        if OpenAIHttpUser._model is None:
            start = time.perf_counter()
            try:
                response = self.session.get(f"{self.host}/v1/models", timeout=30)
                response.raise_for_status()
                OpenAIHttpUser._model = response.json()["data"][0]["id"]
            except Exception as error:
                self.fire("HTTP", "GET /v1/models", (time.perf_counter() - start) * 1e3, exception=error)
                raise StopUser() from error
            self.fire("HTTP", "GET /v1/models", (time.perf_counter() - start) * 1e3, len(response.content))
        return OpenAIHttpUser._model

    @tag("http", "completions", "unary")
    @task
    def completion(self):
        self.post("/v1/completions", stream=False)

    @tag("http", "completions", "stream")
    @task
    def completion_stream(self):
        self.post("/v1/completions", stream=True)

    @tag("http", "chat", "unary")
    @task
    def chat(self):
        self.post("/v1/chat/completions", stream=False)

    @tag("http", "chat", "stream")
    @task
    def chat_stream(self):
        self.post("/v1/chat/completions", stream=True)

    def body(self, chat: bool, stream: bool) -> dict:
        prompt, seed = self.next_request()
        s = self.settings
        body = {"model": self.model, "max_tokens": s["max_tokens"], "temperature": s["temperature"],
                "seed": seed, "stream": stream}
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if stream:  # the OpenAI way to get usage at the end of a stream
            body["stream_options"] = {"include_usage": True}
        extension = {key: s[key] for key in ("verifier", "tree") if s[key]}
        if extension:
            body["rayspec"] = extension
        return body

    def post(self, path: str, stream: bool):
        chat = "chat" in path
        body = self.body(chat, stream)

        def call(start: float) -> Outcome:
            response = self.session.post(f"{self.host}{path}", json=body, stream=stream, timeout=REQUEST_TIMEOUT_S)
            with response:
                if response.status_code != 200:
                    raise ProtocolError(f"HTTP {response.status_code}: {response.text[:300]}")
                if stream:
                    return self.read_events(response, chat, start)
                payload = response.json()
                text = chunk_text(payload, chat)
                tokens = check_usage(payload.get("usage"), body["max_tokens"])
                return Outcome(start, time.perf_counter(), len(text.encode()), tokens)

        self.measure("HTTP", f"POST {path}{' stream' if stream else ''}", call)

    def read_events(self, response, chat: bool, start: float) -> Outcome:
        """Server-sent events: `data: {json}` lines, the last one `data: [DONE]`."""
        outcome = Outcome(start, start, 0, None)
        # chunk_size=None: hand over each chunk as it arrives, so that its time is its arrival
        for line in response.iter_lines(chunk_size=None, decode_unicode=True):
            if not line or line.startswith(":") or not line.startswith("data:"):
                continue  # event separators, comments, `event:`/`id:` fields
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                outcome.end = time.perf_counter()
                return outcome
            try:
                payload = json.loads(data)
            except ValueError:
                raise ProtocolError(f"event data is not JSON: {data[:200]}") from None
            if "error" in payload:
                raise ProtocolError(f"error event: {payload['error']}")
            text = chunk_text(payload, chat)
            if text:
                outcome.chunk_times.append(time.perf_counter())
                outcome.length += len(text.encode())
            if payload.get("usage"):
                outcome.tokens = check_usage(payload["usage"], self.settings["max_tokens"])
        raise ProtocolError("the stream ended without data: [DONE]")


class GrpcUser(RayspecUser):
    """Requests through the gRPC SDK (`rayspec.client.Client`) at --grpc-target."""

    def on_start(self):
        super().on_start()
        target = self.settings["grpc_target"]
        try:
            from rayspec.client import Client  # lazy: the HTTP users run without the SDK
        except ImportError as error:
            self.fire("gRPC", "import rayspec.client", 0, exception=error)
            raise StopUser() from error
        # No retries: a load test must see every failure, not a replay of it.
        self.client = Client(target, timeout=REQUEST_TIMEOUT_S, retries=0, api_key=os.environ.get("RAYSPEC_API_KEY"))

    def on_stop(self):  # also after on_start's StopUser, which leaves no client
        if client := getattr(self, "client", None):
            client.close()

    def arguments(self) -> dict:
        prompt, seed = self.next_request()
        s = self.settings
        extension = {key: s[key] for key in ("verifier", "tree") if s[key]}
        return dict(prompt=prompt, max_tokens=s["max_tokens"], temperature=s["temperature"], seed=seed, **extension)

    @tag("grpc", "unary")
    @task
    def generate(self):
        arguments = self.arguments()

        def call(start: float) -> Outcome:
            completion = self.client.generate(**arguments)
            end = time.perf_counter()
            check_grpc_usage(completion.usage, len(completion.token_ids), arguments["max_tokens"])
            return Outcome(start, end, len(completion.text.encode()), completion.usage.completion_tokens)

        self.measure("gRPC", "Generate", call)

    @tag("grpc", "stream")
    @task
    def generate_stream(self):
        arguments = self.arguments()

        def call(start: float) -> Outcome:
            outcome = Outcome(start, start, 0, None)
            streamed = 0
            with self.client.stream(**arguments) as stream:
                for chunk in stream:
                    streamed += len(chunk.token_ids)
                    if chunk.text:
                        outcome.chunk_times.append(time.perf_counter())
                        outcome.length += len(chunk.text.encode())
            outcome.end = time.perf_counter()
            if stream.completion is None:
                raise ProtocolError("the stream ended without its completion")
            check_grpc_usage(stream.completion.usage, streamed, arguments["max_tokens"])
            outcome.tokens = streamed
            return outcome

        self.measure("gRPC", "GenerateStream", call)


def check_grpc_usage(usage, received: int, max_tokens: int) -> None:
    """The usage counts every token received, and no more than max_tokens."""
    if usage.completion_tokens != received or received > max_tokens:
        raise ProtocolError(f"{usage} does not match the {received} tokens received (max_tokens={max_tokens})")
