"""The rules the client SDK and the servers share (`rayspec.rpc.checks`): both sides give the same
verdict on every API key and HOST:PORT, each in its own words."""

from __future__ import annotations

import pytest

from rayspec.client import Client
from rayspec.rpc.checks import (
    API_KEY_VARIABLE, BAD_PORT, NO_HOST, NO_PORT, api_key_from_environment, check_api_key, host_port_problem,
)
from rayspec.rpc.worker import _worker_address

KEYS = [
    "secret", "sk-a b", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "x",  # printable ASCII, spaces inside
    "ключ", "café", "secret\n", "sec\tret", "a\x1bb", "\x7fdel", "a\u00a0b",  # not printable ASCII
    " secret", "secret ", "   ", "\tsecret",  # blank, or spaces that HTTP and gRPC strip
]

ADDRESSES = {  # what is wrong with each, if anything
    "127.0.0.1:9000": None, "localhost:1": None, "host.example:65535": None, "[::1]:9000": None,
    "[fe80::1%eth0]:80": None,
    ":9000": NO_HOST, "[]:9000": NO_HOST,
    "127.0.0.1:0": BAD_PORT, "127.0.0.1:00": BAD_PORT, "127.0.0.1:65536": BAD_PORT, "127.0.0.1:99999": BAD_PORT,
    "127.0.0.1:-1": BAD_PORT, "127.0.0.1:+80": BAD_PORT, "127.0.0.1: 80": BAD_PORT, "127.0.0.1:abc": BAD_PORT,
    "127.0.0.1:\u0661\u0662": BAD_PORT, "127.0.0.1:": BAD_PORT, "[::1]:": BAD_PORT,
    "127.0.0.1": NO_PORT, "::1": NO_PORT, "::1:9000": NO_PORT, "[::1]": NO_PORT, "[::1]x:80": NO_PORT,
    "[::1]:80]": NO_PORT,
}


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


def _client_refuses_target(target: str) -> bool:
    def construct():
        Client(target).close()
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


@pytest.mark.parametrize("address, problem", ADDRESSES.items())
def test_the_sdk_and_the_coordinator_refuse_the_same_host_ports(address, problem):
    """A HOST:PORT a client may dial is one a coordinator may wait for, and the other way round;
    only an address without a port differs: gRPC dials port 443 of it, which the SDK leaves to
    gRPC and the coordinator, whose workers never listen there, refuses."""
    assert host_port_problem(address) == problem
    worker = _refused(_worker_address, "--target", address)
    assert worker == (problem is not None)
    assert _client_refuses_target(address) == (worker and problem != NO_PORT)


def test_grpc_uris_are_the_sdks_to_leave_to_grpc_and_the_coordinators_to_check():
    for uri in ("dns:///127.0.0.1:99999", "ipv4:127.0.0.1:0", "unix:/tmp/rayspec.sock"):
        assert not _client_refuses_target(uri)
    assert not _refused(_worker_address, "--target", "dns:///127.0.0.1:9000")
    for uri in ("dns:///127.0.0.1:99999", "dns:///::1:9000", "unix:/tmp/rayspec.sock"):
        assert _refused(_worker_address, "--target", uri)
