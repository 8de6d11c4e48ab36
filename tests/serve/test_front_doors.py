"""The two front doors over one engine: the HTTP app and gRPC Generation (through the SDK), as
`rayspec serve` runs them side by side (the gRPC server over the HTTP service's engine and
limits).  The same mistake gets the same refusal through either."""

from __future__ import annotations

import pytest

from rayspec.client import Client, InvalidRequestError
from rayspec.rpc.coordinator import serve_generation
from tests.serve.served import MODEL


@pytest.fixture(scope="module")
def sdk(server):
    service = server["service"]
    grpc_server, port = serve_generation(service.engine, service.tokenizer, "127.0.0.1:0", service.request_limits)
    with Client(f"127.0.0.1:{port}", timeout=60, retries=0) as client:
        yield client
    grpc_server.stop(None)


@pytest.mark.parametrize("prompt", ["", []], ids=["text", "token ids"])
def test_an_empty_prompt_is_refused_alike_through_http_and_the_sdk(http, sdk, prompt):
    # HTTP refuses "" as holding no token, and [] as no prompt; the SDK's "" was refused as if
    # no prompt had been given at all, its () likewise, after a call
    reply = http.post("/v1/completions", json={"model": MODEL, "prompt": "", "max_tokens": 4})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "the prompt must contain at least one token"
    assert reply.json()["error"]["param"] == "prompt"
    with pytest.raises(InvalidRequestError, match=r"the prompt must contain at least one token$"):
        sdk.generate(prompt, max_tokens=4)
    with pytest.raises(InvalidRequestError, match=r"the prompt must contain at least one token$"):
        list(sdk.stream(prompt, max_tokens=4))
