"""Small real servers that speak the service's protocols with made-up text, for the load-test
tests: an OpenAI-style HTTP app (Starlette on uvicorn) and a `rayspec.v1.Generation` gRPC
server.  Text is a deterministic function of (prompt, seed); chunks arrive a few milliseconds
apart, so that time to first token and inter-chunk latency are measurable.

Requests are checked as strictly as the real service checks them: a malformed one gets an
HTTP 422 / INVALID_ARGUMENT and is counted in `errors`.  Under the path prefix /broken the
HTTP app answers every request wrongly (unary: no usage; streams: no `data: [DONE]`); under
/empty every completion has no token (as one that meets EOS at once).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from concurrent import futures

import grpc
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from rayspec.rpc.generated import generation_pb2 as pb
from rayspec.rpc.generated import generation_pb2_grpc

MODEL_ID = "fake-model"
FIRST_CHUNK_S = 0.02
BETWEEN_CHUNKS_S = 0.01


def fake_tokens(prompt: str, seed: int, n: int) -> list[str]:
    digest = hashlib.sha256(f"{seed}:{prompt}".encode()).digest()
    return [f" t{digest[i % len(digest)] + i}" for i in range(n)]


def blocks(tokens: list[str]) -> list[list[str]]:
    """Tokens grouped as verification steps would accept them: 1, 2, 3, 1, 2, 3, ..."""
    out, i, size = [], 0, 1
    while i < len(tokens):
        out.append(tokens[i:i + size])
        i, size = i + size, size % 3 + 1
    return out


def usage(prompt: str, tokens: list[str]) -> dict:
    steps = len(blocks(tokens))
    prompt_tokens = len(prompt.split())
    return {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens),
            "total_tokens": prompt_tokens + len(tokens),
            "completion_tokens_details": {"accepted_prediction_tokens": len(tokens) - steps,
                                          "rejected_prediction_tokens": 2 * steps}}


def typed(value, kind) -> bool:
    """isinstance, without taking True for a number."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


class FakeOpenAI:
    """The HTTP app; `requests` and `errors` count what it received, `keys` the Authorization
    headers it was sent."""

    def __init__(self):
        self.requests = 0
        self.errors: list[str] = []
        self.keys: set[str | None] = set()
        routes = []
        for prefix, broken, empty in (("", False, False), ("/broken", True, False), ("/empty", False, True)):
            routes += [Route(f"{prefix}/v1/models", self.models),
                       Route(f"{prefix}/v1/completions", self.endpoint(False, broken, empty), methods=["POST"]),
                       Route(f"{prefix}/v1/chat/completions", self.endpoint(True, broken, empty), methods=["POST"])]
        self.app = Starlette(routes=routes + [Route("/health", self.health)])

    async def health(self, request: Request):
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    def invalid(self, message: str):
        self.errors.append(message)
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                       "param": None, "code": None}}, status_code=422)

    def parse(self, body, chat: bool) -> str:
        """The prompt text; ValueError names what is malformed."""
        if not isinstance(body, dict):
            raise ValueError("body is not a JSON object")
        if body.get("model") != MODEL_ID:
            raise ValueError(f"unknown model {body.get('model')!r}")
        for key, kind in (("max_tokens", int), ("seed", int), ("stream", bool), ("temperature", (int, float))):
            if not typed(body.get(key), kind):
                raise ValueError(f"{key} must be {kind}")
        if body["max_tokens"] <= 0:
            raise ValueError("max_tokens must be positive")
        extension = body.get("rayspec", {})
        if not isinstance(extension, dict) or set(extension) - {"verifier", "tree", "verifier_params"}:
            raise ValueError("bad rayspec extension")
        if chat:
            messages = body.get("messages")
            if not (isinstance(messages, list) and messages
                    and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)):
                raise ValueError("messages must be a list of {role, content}")
            return "\n".join(m["content"] for m in messages)
        if not isinstance(body.get("prompt"), str):
            raise ValueError("prompt must be a string")
        return body["prompt"]

    def endpoint(self, chat: bool, broken: bool, empty: bool = False):
        async def handle(request: Request):
            self.requests += 1
            self.keys.add(request.headers.get("authorization"))
            try:
                body = json.loads(await request.body())
                prompt = self.parse(body, chat)
            except ValueError as error:
                return self.invalid(str(error))
            tokens = [] if empty else fake_tokens(prompt, body["seed"], body["max_tokens"])
            if body["stream"]:
                include_usage = (body.get("stream_options") or {}).get("include_usage", False)
                return StreamingResponse(self.events(prompt, tokens, chat, include_usage, broken),
                                         media_type="text/event-stream")
            text = "".join(tokens)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "finish_reason": "length"})
            payload = {"id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion",
                       "model": MODEL_ID, "choices": [choice]}
            if not broken:
                payload["usage"] = usage(prompt, tokens)
            return JSONResponse(payload)
        return handle

    async def events(self, prompt: str, tokens: list[str], chat: bool, include_usage: bool, broken: bool):
        def event(choices, **extra) -> str:
            return "data: " + json.dumps({"id": "cmpl-fake", "model": MODEL_ID, "choices": choices, **extra}) + "\n\n"

        if chat:  # OpenAI's first chat chunk carries the role and no text
            yield event([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])
        await asyncio.sleep(FIRST_CHUNK_S)
        for i, block in enumerate(blocks(tokens)):
            if i:
                await asyncio.sleep(BETWEEN_CHUNKS_S)
            text = "".join(block)
            yield event([{"index": 0, "delta": {"content": text}, "finish_reason": None} if chat
                         else {"index": 0, "text": text, "finish_reason": None}])
        yield event([{"index": 0, "delta": {}, "finish_reason": "length"} if chat
                     else {"index": 0, "text": "", "finish_reason": "length"}])
        if include_usage:
            yield event([], usage=usage(prompt, tokens))
        if not broken:
            yield "data: [DONE]\n\n"


class FakeGeneration(generation_pb2_grpc.GenerationServicer):
    """`rayspec.v1.Generation` with made-up tokens; `errors` counts malformed requests, `keys`
    holds the authorization metadata sent."""

    def __init__(self):
        self.requests = 0
        self.errors: list[str] = []
        self.keys: set[str | None] = set()

    def _tokens(self, request, context) -> list[str]:
        self.requests += 1
        self.keys.add(dict(context.invocation_metadata()).get("authorization"))
        if not request.prompt or request.max_tokens <= 0 or not request.HasField("seed"):
            self.errors.append(str(request))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "prompt, max_tokens > 0 and seed are required")
        return fake_tokens(request.prompt, request.seed, request.max_tokens)

    def _complete(self, request, tokens, with_text: bool) -> pb.GenerateResponse:
        """A stream's final message repeats every total but the text (as the coordinator's)."""
        counts = usage(request.prompt, tokens)
        return pb.GenerateResponse(
            text="".join(tokens) if with_text else "", token_ids=range(len(tokens)),
            finish_reason="length", seed=request.seed, request_id=request.request_id,
            usage=pb.Usage(prompt_tokens=counts["prompt_tokens"], completion_tokens=len(tokens),
                           accepted_draft_tokens=counts["completion_tokens_details"]["accepted_prediction_tokens"],
                           rejected_draft_tokens=counts["completion_tokens_details"]["rejected_prediction_tokens"],
                           steps=len(blocks(tokens))))

    def Generate(self, request, context):
        return self._complete(request, self._tokens(request, context), with_text=True)

    def GenerateStream(self, request, context):
        tokens = self._tokens(request, context)
        time.sleep(FIRST_CHUNK_S)
        start = 0
        for i, block in enumerate(blocks(tokens)):
            if i:
                time.sleep(BETWEEN_CHUNKS_S)
            yield pb.GenerateStreamResponse(chunk=pb.Chunk(
                text="".join(block), token_ids=range(start, start + len(block)), accepted=len(block) - 1))
            start += len(block)
        yield pb.GenerateStreamResponse(complete=self._complete(request, tokens, with_text=False))


class GrpcServer:
    """A gRPC server with `servicer` on a free loopback port."""

    def __init__(self, servicer: FakeGeneration):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        generation_pb2_grpc.add_GenerationServicer_to_server(servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> GrpcServer:
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=None)
