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
