"""The two front doors over one engine: the HTTP app and gRPC Generation (through the SDK), as
`rayspec serve` runs them side by side (the gRPC server over the HTTP service's engine and
limits).  The same mistake gets the same refusal through either."""

from __future__ import annotations

import grpc
import pytest

from rayspec.client import Client, GenerateRequest, InvalidRequestError
from rayspec.rpc.generated import generation_pb2, generation_pb2_grpc
from tests.serve.served import MODEL


@pytest.fixture(scope="module")
def sdk(server):
    service = server["service"]
    grpc_server, port = service.serve_generation_api("127.0.0.1:0")
    with Client(f"127.0.0.1:{port}", timeout=60, retries=0) as client:
        client.port = port  # for a raw stub: what no SDK would send
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


RULE = "request_id must be 1 to 256 printable ASCII characters, no spaces"


@pytest.mark.parametrize("request_id", ["x" * 257, "y" * 10_000_000, "a b", "job\x00\n\x1b[31m", "caf\u00e9"],
                         ids=["257", "10MB", "space", "control", "non-ASCII"])
def test_an_unusable_request_id_is_refused_alike_through_http_grpc_and_the_sdk(http, sdk, request_id):
    """HTTP refused it (400, param request_id); gRPC Generate took any, and echoed it in its
    response (10 MB, control characters and all); the SDK sent it."""
    if len(request_id) < 1000:  # HTTP's body limit answers 413 first
        reply = http.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2,
                                                   "request_id": request_id})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "request_id"
        assert reply.json()["error"]["message"] == RULE
    with grpc.insecure_channel(f"127.0.0.1:{sdk.port}") as channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        message = generation_pb2.GenerateRequest(prompt="Hi", max_tokens=2, request_id=request_id)
        for call in (stub.Generate, lambda m, **k: list(stub.GenerateStream(m, **k))):
            with pytest.raises(grpc.RpcError) as refused:
                call(message, timeout=60)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details() == RULE
    for call in (sdk.generate, lambda *a, **k: list(sdk.stream(*a, **k))):
        with pytest.raises(InvalidRequestError, match=f"^this request cannot be sent: {RULE}$"):
            call("Hi", max_tokens=2, request_id=request_id)
    with pytest.raises(InvalidRequestError, match=f"{RULE}$"):
        GenerateRequest("Hi", request_id=request_id).to_proto()


def test_a_usable_request_id_is_echoed_and_an_empty_one_refused_by_the_sdk(sdk):
    """256 printable characters name the request; the SDK replaced an explicit "" with a fresh
    id where HTTP refuses it (gRPC cannot tell "" from none: a fresh id there)."""
    assert sdk.generate("Hi", max_tokens=2, request_id="~" * 256).request_id == "~" * 256
    with pytest.raises(InvalidRequestError, match=f"^this request cannot be sent: {RULE}$"):
        sdk.generate("Hi", max_tokens=2, request_id="")
    with grpc.insecure_channel(f"127.0.0.1:{sdk.port}") as channel:
        reply = generation_pb2_grpc.GenerationStub(channel).Generate(
            generation_pb2.GenerateRequest(prompt="Hi", max_tokens=2, request_id=""), timeout=60)
    assert len(reply.request_id) == 32


def test_a_prediction_longer_than_the_context_is_refused_alike_as_text_and_as_token_ids(http, sdk, parts):
    """A text prediction was capped by its characters (64 a token) and an SDK's token ids not
    at all (a million went through, each checked and indexed); either is now refused once it
    holds more tokens than the model's context (512 here), with one message."""
    tokenizer = parts[2]
    text = " a" * 600
    tokens = len(tokenizer.encode(text, add_special_tokens=False))
    assert tokens > 512 and len(text) < 64 * 512
    reply = http.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2,
                                               "prediction": {"type": "content", "content": text}})
    assert reply.status_code == 400, reply.text
    message = f"the prediction has {tokens} tokens, more than the model's context of 512 tokens can hold"
    assert reply.json()["error"]["message"] == message
    for ids in ([5] * 513, [5] * 1_000_000):
        with pytest.raises(InvalidRequestError, match=f"^INVALID_ARGUMENT: the prediction has {len(ids)} tokens, "
                                                      f"more than the model's context of 512 tokens can hold$"):
            sdk.generate("Hi", max_tokens=2, prediction=ids)
    assert len(sdk.generate("Hi", max_tokens=2, prediction=[5] * 512).token_ids) == 2
