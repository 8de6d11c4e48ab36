"""The HTTP app's ASGI middleware alone, on bare ASGI apps: what `CountResponses` counts."""

from __future__ import annotations

import asyncio

import pytest

from rayspec.serve.middleware import CountResponses


class Noted:
    def __init__(self):
        self.responses = []

    def observe_response(self, endpoint: str, status: int) -> None:
        self.responses.append((endpoint, status))


def _call(app) -> None:
    scope = {"type": "http", "path": "/v1/completions", "headers": []}

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    asyncio.run(app(scope, receive, send))


def test_a_request_ray_serve_cancels_as_its_client_left_is_counted_499_not_500():
    """Ray Serve's proxy cancels a replica's request whose client disconnected (and logs it
    499): the app sees a CancelledError, not the disconnect."""

    async def generating(scope, receive, send):
        raise asyncio.CancelledError

    noted = Noted()
    with pytest.raises(asyncio.CancelledError):
        _call(CountResponses(generating, noted))
    assert noted.responses == [("/v1/completions", 499)]


def test_a_failure_before_any_answer_is_counted_500():
    async def failing(scope, receive, send):
        raise RuntimeError("a bug")

    noted = Noted()
    with pytest.raises(RuntimeError):
        _call(CountResponses(failing, noted))
    assert noted.responses == [("/v1/completions", 500)]
