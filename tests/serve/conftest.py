"""The HTTP tests' fixtures: a real uvicorn server (one per test module) over an in-process
engine of the tiny random Llama pair whose target and drafter are `Watched`, and httpx and
`openai` clients of it."""

from __future__ import annotations

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.serve.config import LimitsConfig
from rayspec.serve.http import create_app
from rayspec.serve.service import Service
from tests.loopback import ServerThread
from tests.serve.served import MODEL, SETTING, Watched, eventually
from tests.tiny_models import noisy_copy, tiny_llama


@pytest.fixture(scope="module")
def parts():
    target = tiny_llama(vocab=8192, hidden=32, layers=2, context=512)
    drafter = noisy_copy(target, noise=0.3)
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    return target, drafter, tokenizer


@pytest.fixture(scope="module")
def reference(parts):
    """The in-process engine, unwrapped: what the service must reproduce."""
    target, drafter, tokenizer = parts
    return SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), tokenizer=tokenizer,
                             **SETTING)


@pytest.fixture(scope="module")
def server(parts):
    target, drafter, tokenizer = parts
    watched_target, watched_drafter = Watched(LocalTarget(target, tokenizer)), Watched(LocalDrafter(drafter, tokenizer))
    engine = SpeculativeEngine(watched_target, watched_drafter, tokenizer=tokenizer, **SETTING)
    limits = LimitsConfig(default_max_tokens=24, max_tokens=256, max_concurrent_requests=2)
    service = Service(engine, tokenizer, MODEL, limits)
    with ServerThread(create_app(service)) as http_server:
        yield {"url": http_server.url, "service": service, "target": watched_target, "drafter": watched_drafter}


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server["url"], timeout=60) as client:
        yield client
    for watched in (server["target"], server["drafter"]):
        if watched.permits is not None:
            watched.permits.release(1000)  # a failed test must not leave a generation held
        eventually(lambda: watched.open_sessions == 0, what="sessions released after the test")
        watched.reset()


@pytest.fixture
def with_eos(server, parts, monkeypatch):
    """The served tiny target declaring the tokenizer's EOS, where a structured output's match
    ends: it declares none, and a structured output is refused for that before its schema's
    expression is built, so the tests of a schema's own refusals need one."""
    monkeypatch.setattr(server["target"].inner, "eos_token_ids", (parts[2].eos_token_id,))


@pytest.fixture
def client(server, http):
    return openai.OpenAI(base_url=f"{server['url']}/v1", api_key="x", max_retries=0)
