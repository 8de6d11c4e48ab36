"""An API key (`ServiceConfig.api_key`) on both front ends, with real servers: the HTTP app
(uvicorn) answers 401 without `Authorization: Bearer <key>` — the `openai` client's `api_key`
— but leaves /health and /metrics open; the gRPC Generation server answers UNAUTHENTICATED
without the key in the metadata — the SDK's `api_key` — but leaves the health service open."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rayspec.client import AsyncClient, AuthenticationError, Client
from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.rpc.coordinator import serve_generation
from rayspec.rpc.checks import API_KEY_VARIABLE
from rayspec.serve.config import LimitsConfig, ServiceConfig
from rayspec.serve.http import create_app
from rayspec.serve.service import Service
from tests.loopback import ServerThread
from tests.serve.served import MODEL, PROMPT, SETTING
from tests.tiny_models import noisy_copy, tiny_llama

KEY = "sk-rayspec-test"


@pytest.fixture(scope="module")
def engine():
    target = tiny_llama(vocab=8192, hidden=32, layers=2, context=512)
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    return SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, noise=0.3)), tokenizer=tokenizer,
                             **SETTING)


def test_http_needs_the_key_but_for_health_and_metrics(engine):
    service = Service(engine, engine.tokenizer, MODEL, LimitsConfig(default_max_tokens=4, max_request_bytes=1000),
                      api_key=KEY)
    with ServerThread(create_app(service)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        keyed = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        completion = keyed.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, seed=1)
        assert completion.usage.completion_tokens == 4
        for wrong, message in ((None, "a valid API key is needed"), ("sk-other", "not this service's")):
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=wrong or "x", max_retries=0,
                                   default_headers={"Authorization": ""} if wrong is None else None)
            with pytest.raises(openai.AuthenticationError, match=message):
                client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4)
        for path in ("/v1/models", "/tokenizer_info"):
            refused = http.get(path)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["error"]["code"] == "invalid_api_key"
            assert http.get(path, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        refused = http.post("/tokenize", json={"prompt": "x"})
        assert refused.status_code == 401
        # refused before the body is read: over the body limit and keyless is a 401, not a 413
        big = json.dumps({"prompt": "x" * 2000}).encode()
        headers = {"Content-Type": "application/json"}
        assert http.post("/v1/completions", content=big, headers=headers).status_code == 401
        assert http.post("/v1/completions", content=big, headers={**headers, "Authorization": f"Bearer {KEY}"}
                         ).status_code == 413
        assert http.get("/health").status_code == 200 and http.get("/metrics").status_code == 200
        assert 'status="401"' in http.get("/metrics").text


def test_grpc_needs_the_key_but_for_health(engine):
    server, port = serve_generation(engine, engine.tokenizer, "127.0.0.1:0", api_key=KEY)
    address = f"127.0.0.1:{port}"
    try:
        with Client(address, timeout=60, api_key=KEY) as keyed:
            assert len(keyed.generate(PROMPT, max_tokens=4, seed=1).token_ids) == 4
            assert len(list(keyed.stream(PROMPT, max_tokens=4, seed=1))) >= 1
        for key, message in ((None, "a valid API key is needed"), ("sk-other", "not this service's")):
            with Client(address, timeout=60, api_key=key) as client:
                with pytest.raises(AuthenticationError, match=message):
                    client.generate(PROMPT, max_tokens=4, seed=1)
                with pytest.raises(AuthenticationError, match=message):
                    list(client.stream(PROMPT, max_tokens=4, seed=1))
                assert client.health() is True

        async def asynchronous():
            async with AsyncClient(address, timeout=60, api_key=KEY) as keyed:
                completion = await keyed.generate(PROMPT, max_tokens=4, seed=1)
            async with AsyncClient(address, timeout=60) as keyless:
                with pytest.raises(AuthenticationError):
                    await keyless.generate(PROMPT, max_tokens=4, seed=1)
            return completion

        assert len(asyncio.run(asynchronous()).token_ids) == 4
    finally:
        server.stop(0)


def test_the_key_comes_from_the_config_or_the_environment(monkeypatch):
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    assert ServiceConfig().resolved_api_key is None
    monkeypatch.setenv(API_KEY_VARIABLE, "from-env")
    assert ServiceConfig().resolved_api_key == "from-env"
    assert ServiceConfig(api_key="from-config").resolved_api_key == "from-config"
    assert ServiceConfig.from_dict({"api_key": "k"}).api_key == "k"
    for bad in ("", "  ", 5):
        with pytest.raises(ValueError, match="api_key must be a non-empty string, or null for none"):
            ServiceConfig(api_key=bad)
