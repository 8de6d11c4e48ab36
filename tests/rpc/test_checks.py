"""The rules the client SDK and the servers share (`rayspec.rpc.checks`): both sides give the same
verdict on every API key, each in its own words."""

from __future__ import annotations

import pytest

from rayspec.client import Client
from rayspec.rpc.checks import API_KEY_VARIABLE, api_key_from_environment, check_api_key

KEYS = [
    "secret", "sk-a b", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "x",  # printable ASCII, spaces inside
    "ключ", "café", "secret\n", "sec\tret", "a\x1bb", "\x7fdel", "a\u00a0b",  # not printable ASCII
    " secret", "secret ", "   ", "\tsecret",  # blank, or spaces that HTTP and gRPC strip
]


def _refused(check, *args) -> bool:
    try:
        check(*args)
    except ValueError:
        return True
    return False


def _client_refuses(key: str) -> bool:
    def construct():
        Client("127.0.0.1:9000", api_key=key).close()
    return _refused(construct)


@pytest.mark.parametrize("key", KEYS)
def test_the_sdk_and_the_server_refuse_the_same_api_keys(key, monkeypatch):
    """A key the server takes, from its config or $RAYSPEC_API_KEY, a client can send, and the
    SDK refuses only the keys the server refuses."""
    monkeypatch.setenv(API_KEY_VARIABLE, key)
    server = _refused(check_api_key, key)
    assert _refused(api_key_from_environment) == server
    assert _client_refuses(key) == server


def test_an_empty_api_key_is_none_to_the_sdk_and_the_environment_but_not_to_a_config(monkeypatch):
    monkeypatch.setenv(API_KEY_VARIABLE, "")
    assert not _client_refuses("") and api_key_from_environment() is None
    with pytest.raises(ValueError, match="^api_key must be a non-empty string, or null for none$"):
        check_api_key("")
