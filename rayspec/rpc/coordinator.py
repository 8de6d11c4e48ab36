"""The client-facing `rayspec.v1.Generation` service: the engine behind gRPC.

The coordinator owns no model: its engine drives remote (or in-process) drafter and target
handles.  `Generate` returns the whole completion; `GenerateStream` yields each verification
step's text as soon as it is verified, then a last message with the totals.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.engine.text import TextAssembler
from rayspec.rpc import codec
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc, health_pb2_grpc
from rayspec.rpc.server import HealthServicer, Servicer, rpc_errors, start_server


@dataclass
class Limits:
    default_max_tokens: int = 256
    max_tokens: int = 4096


def usage_of(stats: GenerationStats, prompt_tokens: int) -> dict:
    accepted = sum(s.accepted for s in stats.steps)
    drafted = sum(s.drafted for s in stats.steps)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": stats.tokens,
        "accepted_draft_tokens": accepted,
        "rejected_draft_tokens": drafted - accepted,
        "steps": len(stats.steps),
    }


class GenerationRequest:
    """A validated generation request, whatever the front end (gRPC or HTTP)."""

    def __init__(self, engine: SpeculativeEngine, tokenizer, limits: Limits, *, prompt=None, prompt_ids=None,
                 max_tokens=None, temperature=None, top_p=None, top_k=None, seed=None, stop=None,
                 verifier=None, tree=None, verifier_params=None, request_id=None):
        if (prompt is None) == (prompt_ids is None):
            raise ValueError("give exactly one of prompt (text) and prompt_ids (token ids)")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise ValueError("prompt must be a string")
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        self.prompt_ids = [int(t) for t in prompt_ids]
        max_tokens = limits.default_max_tokens if max_tokens in (None, 0) else int(max_tokens)
        if not 1 <= max_tokens <= limits.max_tokens:
            raise ValueError(f"max_tokens must be between 1 and {limits.max_tokens}, got {max_tokens}")
        stop = [stop] if isinstance(stop, str) else stop
        if stop is not None and not all(isinstance(s, str) for s in stop):
            raise ValueError("stop must be a string or a list of strings")
        if verifier_params is not None and not isinstance(verifier_params, dict):
            raise ValueError("verifier_params must be an object")
        self.seed = secrets.randbits(63) if seed is None else int(seed)
        self.request_id = request_id or uuid.uuid4().hex
        self.kwargs = dict(
            max_new_tokens=max_tokens,
            temperature=1.0 if temperature is None else float(temperature),
            top_p=1.0 if top_p is None else float(top_p),
            top_k=int(top_k or 0),
            seed=self.seed,
            stop=list(stop or []),
            verifier=verifier or None,
            tree=tree or None,
            verifier_params=verifier_params,
        )
        self.engine, self.tokenizer = engine, tokenizer

    def run(self):
        """Yield (text delta, token ids, step stats) per step; then `self.finish_reason`,
        `self.text`, `self.token_ids`, `self.stats` hold the totals."""
        self.stats = GenerationStats()
        self.token_ids, self.finish_reason = [], "length"
        assembler = TextAssembler(self.tokenizer, self.kwargs["stop"])
        for chunk in self.engine.generate(self.prompt_ids, stats=self.stats, **self.kwargs):
            self.token_ids += chunk.tokens
            self.finish_reason = chunk.finish_reason or self.finish_reason
            text = assembler.push(chunk.tokens)
            if chunk.finish_reason:
                text += assembler.finish()
            yield text, chunk.tokens, chunk.step
        self.text = assembler.text

    def usage(self) -> dict:
        return usage_of(self.stats, len(self.prompt_ids))


class GenerationServicer(Servicer, generation_pb2_grpc.GenerationServicer):
    def __init__(self, engine: SpeculativeEngine, tokenizer, limits: Limits | None = None, **server_limits):
        super().__init__(**server_limits)
        self.engine, self.tokenizer, self.limits = engine, tokenizer, limits or Limits()

    def _request(self, message) -> GenerationRequest:
        return GenerationRequest(
            self.engine, self.tokenizer, self.limits,
            prompt=message.prompt if message.prompt else None,
            prompt_ids=list(message.prompt_ids) if message.prompt_ids else None,
            max_tokens=message.max_tokens,
            temperature=message.temperature if message.HasField("temperature") else None,
            top_p=message.top_p if message.HasField("top_p") else None,
            top_k=message.top_k,
            seed=message.seed if message.HasField("seed") else None,
            stop=list(message.stop),
            verifier=message.verifier,
            tree=message.tree,
            verifier_params=codec.decode_msgpack_map(message.verifier_params, "verifier_params") or None,
            request_id=message.request_id,
        )

    def _complete(self, request: GenerationRequest, text: str) -> generation_pb2.GenerateResponse:
        return generation_pb2.GenerateResponse(
            text=text, token_ids=request.token_ids, finish_reason=request.finish_reason,
            usage=generation_pb2.Usage(**request.usage()), seed=request.seed, request_id=request.request_id,
        )

    @rpc_errors
    def Generate(self, message, context):
        request = self._request(message)
        for _ in request.run():
            pass
        return self._complete(request, request.text)

    @rpc_errors
    def GenerateStream(self, message, context):
        request = self._request(message)
        for text, tokens, step in request.run():
            yield generation_pb2.GenerateStreamResponse(
                chunk=generation_pb2.Chunk(text=text, token_ids=tokens, accepted=step.accepted)
            )
        yield generation_pb2.GenerateStreamResponse(complete=self._complete(request, ""))


def serve_generation(engine: SpeculativeEngine, tokenizer, address: str, limits: Limits | None = None):
    servicer = GenerationServicer(engine, tokenizer, limits)
    health = HealthServicer(["rayspec.v1.Generation"])

    def register(server):
        generation_pb2_grpc.add_GenerationServicer_to_server(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)

    return start_server(register, address)


def serve_generation_from_workers(address: str, target: str, drafter: str | None, verifier: str = "rrsw",
                                  tree: str = "kary:2x3", verify_at: str = "target", tokenizer_path=None):
    """The coordinator of plain-process workers: Generation on `address` over remote handles."""
    from transformers import AutoTokenizer

    from rayspec.demo import TARGET_PATH
    from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

    remote_target = RemoteTarget(target, verify_at=verify_at)
    remote_drafter = RemoteDrafter(drafter, remote_target.vocab_size) if drafter else None
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path or TARGET_PATH))
    engine = SpeculativeEngine(remote_target, remote_drafter, verifier=verifier, tree=tree, tokenizer=tokenizer)
    return serve_generation(engine, tokenizer, address)
