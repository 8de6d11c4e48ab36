"""The gRPC Generation API stops a request whose RPC has ended, even one that ended before the
request was made: a deadline can pass while a long prompt is tokenized, and gRPC then refuses
the callback that would cancel it (`add_callback` returns False) rather than run it."""

from __future__ import annotations

import threading

from rayspec.rpc.coordinator import _cancel_when_over


class _Request:
    def __init__(self):
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


class _Context:
    def __init__(self, active: bool):
        self.active, self.callbacks = active, []

    def add_callback(self, callback) -> bool:
        if self.active:
            self.callbacks.append(callback)
        return self.active


def test_a_request_whose_rpc_already_ended_is_cancelled_at_once():
    request = _Request()
    _cancel_when_over(_Context(active=False), request)
    assert request.cancelled.is_set()


def test_a_request_whose_rpc_goes_on_is_cancelled_when_it_ends():
    request, context = _Request(), _Context(active=True)
    _cancel_when_over(context, request)
    assert not request.cancelled.is_set()
    for callback in context.callbacks:  # gRPC runs them as the RPC ends
        callback()
    assert request.cancelled.is_set()


def test_a_structured_output_compiling_when_its_rpc_ends_stops_its_compiler(monkeypatch, tmp_path):
    """A request's structured output is compiled as the request is made, before its generation
    runs: an RPC that ends meanwhile (past its deadline, cancelled) kills the compiler and frees
    its place (CANCELLED), rather than compile on for nobody up to COMPILE_SECONDS (a compiler
    that never answers stands in for a slow compilation)."""
    import os

    import grpc
    import pytest
    from transformers import AutoTokenizer

    from rayspec.client.types import GenerateRequest
    from rayspec.demo import TARGET_PATH
    from rayspec.engine import LocalTarget, SpeculativeEngine, structured
    from rayspec.rpc.coordinator import GenerationServicer
    from tests.serve.served import eventually
    from tests.tiny_models import tiny_llama

    started = tmp_path / "compiler.pid"
    monkeypatch.setattr(structured, "_COMPILER", f"import os, time\nopen({str(started)!r}, 'w').write(str(os.getpid()))"
                                                 "\ntime.sleep(120)")
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 40.0)  # without the watch, the child's end
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    target = LocalTarget(tiny_llama(vocab=8192, hidden=32, layers=2, context=512), tokenizer)
    target.eos_token_ids = (tokenizer.eos_token_id,)  # a match must be able to end
    servicer = GenerationServicer(SpeculativeEngine(target, None, tokenizer=tokenizer), tokenizer)
    message = GenerateRequest(prompt="x", max_tokens=4, structured_output={"regex": "(ant|bee)+ [0-9]{4}"}).to_proto()
    context = _Context(active=True)
    context.is_active = lambda: context.active
    ended = []

    def abort(code, details):
        ended.append(code)
        raise RuntimeError(details)  # as gRPC's abort ends the method

    context.abort = abort
    call = threading.Thread(target=pytest.raises, args=(RuntimeError, servicer.Generate, message, context),
                            daemon=True)
    call.start()
    eventually(lambda: started.exists() and started.read_text(), what="the compiler to start")
    context.active = False  # the RPC ends (its deadline passes) while its request compiles
    compiler = int(started.read_text())

    def compiler_gone() -> bool:
        try:
            os.kill(compiler, 0)  # a child killed and waited for is gone
        except ProcessLookupError:
            return True
        return False

    eventually(compiler_gone, what="the compiler killed")
    call.join(30)
    assert ended == [grpc.StatusCode.CANCELLED]
    assert structured._COMPILERS._value == structured.MAX_COMPILERS  # its place freed
