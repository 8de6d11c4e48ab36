"""The README's examples run as written: its Python blocks and its quick-start curl, against
the demo pair served over real HTTP (uvicorn) and gRPC on loopback, with only the ports
changed.  An example that no longer runs, or prints other than it says, fails here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
HTTP_DOCUMENTED, GRPC_DOCUMENTED = "http://127.0.0.1:8000", "127.0.0.1:9000"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def _block(language: str, marker: str) -> str:
    """The one `language` block that contains `marker`."""
    found = [block for block in _blocks(language) if marker in block]
    assert len(found) == 1, f"{len(found)} {language} blocks of the README contain {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def served():
    """The demo pair in one engine, served over HTTP and gRPC as `make serve` serves it."""
    from rayspec.demo import DRAFTER_PATH, TARGET_PATH
    from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
    from rayspec.models import load_causal_lm
    from rayspec.rpc.coordinator import serve_generation
    from rayspec.serve.http import create_app
    from rayspec.serve.service import Service
    from tests.loopback import ServerThread

    target, tokenizer = load_causal_lm(TARGET_PATH)
    drafter, _ = load_causal_lm(DRAFTER_PATH)
    engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), verifier="rrsw",
                               tree="kary:2x3", tokenizer=tokenizer)
    server, port = serve_generation(engine, tokenizer, "127.0.0.1:0")
    try:
        with ServerThread(create_app(Service(engine, tokenizer, "rayspec-demo"))) as http:
            yield http.url, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _run(code: str, served) -> str:
    http_url, grpc_address = served
    code = code.replace(HTTP_DOCUMENTED, http_url).replace(GRPC_DOCUMENTED, grpc_address)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the example failed:\n{code}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_quick_start_curl_gets_a_completion(served):
    if shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    command = _block("bash", "curl http://127.0.0.1:8000/v1/completions")
    command = command.replace("\\\n", " ").replace(HTTP_DOCUMENTED, served[0])
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    reply = json.loads(done.stdout)
    assert reply["model"] == "rayspec-demo" and reply["usage"]["completion_tokens"] == 48
    assert reply["choices"][0]["finish_reason"] == "length" and reply["choices"][0]["text"]


def test_the_openai_client_example_streams_a_completion(served):
    printed = _run(_block("python", "from openai import OpenAI"), served)
    assert len(printed) > 20, printed  # 48 tokens of text, printed chunk by chunk


def test_the_sdk_example_prints_a_completion_logprobs_and_schema_shaped_json(served):
    printed = _run(_block("python", "from rayspec.client import Client"), served)
    assert re.search(r"Usage\(prompt_tokens=\d+, completion_tokens=48,", printed), printed
    assert "TokenLogprob(token_id=" in printed, printed
    # the last line: the structured output, parsed and printed as a dict with its one key
    assert re.fullmatch(r"\{'debug': (True|False)\}", printed.strip().splitlines()[-1]), printed


def test_the_library_example_decodes_in_one_process():
    printed = _run(_block("python", "from rayspec.engine import LocalDrafter"), (HTTP_DOCUMENTED, GRPC_DOCUMENTED))
    assert len(printed) > 20, printed


def test_the_verifier_example_runs_on_a_pair_of_small_laws():
    import torch

    generator = torch.Generator().manual_seed(7)  # V = 10: its exact laws enumerate draft tuples
    p = torch.softmax(torch.randn(10, generator=generator), -1)
    q = torch.softmax(torch.randn(10, generator=generator), -1)
    names = {"p": p, "q": q}
    exec(_block("python", "from rayspec.verify import get_verifier"), names)
    token, index = names["token"], names["index"]
    drafts = names["drafts"]
    assert 0 <= int(token) < 10 and -1 <= int(index) < len(drafts)
    if int(index) >= 0:
        assert int(drafts[int(index)]) == int(token)
