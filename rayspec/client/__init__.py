"""Client SDK of the rayspec gRPC service (`rayspec.v1.Generation`, default port 9000).

    from rayspec.client import Client

    with Client("127.0.0.1:9000", timeout=30) as client:
        completion = client.generate("Once upon a time", max_tokens=32, seed=1)
        print(completion.text, completion.usage)

- `Client` (blocking, `rayspec.client.sync`) and `AsyncClient` (asyncio,
  `rayspec.client.aio`): `generate`, `stream`, `health`, `close`, context managers.
- Typed values (`rayspec.client.types`): `GenerateRequest` (and `GenerationParams`, its
  fields as `generate`'s and `stream`'s keywords), `Completion`, `CompletionChunk`,
  `TokenLogprob`, `Usage`.
- Exceptions mapped from gRPC status codes (`rayspec.client.errors`), all `RayspecError`; a
  call on a closed client raises `ClientClosedError`.
- Retries only for idempotent calls, with exponential backoff (`rayspec.client.retry`).
"""

from rayspec.client.aio import AsyncClient, AsyncCompletionStream
from rayspec.client.errors import (
    AuthenticationError,
    ClientClosedError,
    DeadlineExceededError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    RayspecError,
    ServerError,
    UnavailableError,
)
from rayspec.client.retry import RetryPolicy
from rayspec.client.sync import Client, CompletionStream
from rayspec.client.types import Completion, CompletionChunk, GenerateRequest, GenerationParams, TokenLogprob, Usage

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "AsyncCompletionStream",
    "Client",
    "ClientClosedError",
    "Completion",
    "CompletionChunk",
    "CompletionStream",
    "DeadlineExceededError",
    "GenerateRequest",
    "GenerationParams",
    "InvalidRequestError",
    "NotFoundError",
    "OverloadedError",
    "RayspecError",
    "RetryPolicy",
    "ServerError",
    "TokenLogprob",
    "UnavailableError",
    "Usage",
]
