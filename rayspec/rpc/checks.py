"""Rules the client SDK and the servers check alike, each stated once: an API key a client can
send, and a HOST:PORT that gRPC dials as written.  A key's refusal is worded here, naming the
setting that held it (`check_api_key`); an address's each side words itself, from what
`host_port_problem` finds wrong.

Only the standard library: the SDK (`rayspec.client`) imports this module, and must not pull in
the server side or torch.
"""

from __future__ import annotations

import os

API_KEY_VARIABLE = "RAYSPEC_API_KEY"

# What `host_port_problem` finds wrong with an address
NO_PORT = "no port"
NO_HOST = "no host"
BAD_PORT = "bad port"


def check_api_key(key, name: str = "api_key", none: str = "null") -> str:
    """`key`, or ValueError naming `name` for one no client can send: HTTP's Authorization
    header and gRPC's metadata carry printable ASCII (gRPC clients refuse other bytes) and
    strip the spaces around a value, so a key with a newline, a non-ASCII letter or a space at
    either end was accepted and then matched no request.  `none`: how to ask for no key.  The
    servers' config, their environment variable (`api_key_from_environment`) and the SDK's
    `api_key=` all obey it."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"{name} must be a non-empty string, or {none} for none")
    bad = next((c for c in key if not " " <= c <= "~"), None)
    if bad is not None:  # the character, not the key: it is a secret
        raise ValueError(f"{name} holds {bad!r}: a key is printable ASCII, as HTTP headers and gRPC metadata "
                         f"carry it")
    if key != key.strip():
        raise ValueError(f"{name} begins or ends with a space, which HTTP and gRPC strip from what a client sends")
    return key


def api_key_from_environment() -> str | None:
    """$RAYSPEC_API_KEY as `check_api_key` takes it (ValueError naming the variable), or None
    where it is unset or empty."""
    key = os.environ.get(API_KEY_VARIABLE)
    return check_api_key(key, f"${API_KEY_VARIABLE}", "unset") if key else None


def host_port_problem(address: str) -> str | None:
    """None where `address` is HOST:PORT or [IPv6]:PORT with a port gRPC dials as written, or
    what is wrong with it:

    NO_PORT: no colon, a "]" after the last one ("[::1]"), or a bare IPv6 address ("::1",
        "::1:9000"), whose last group is the address's own and no port;
    NO_HOST: nothing before the port (":9000", "[]:9000");
    BAD_PORT: a port other than ASCII digits from 1 to 65535.  gRPC dials 99999 modulo 65536,
        somewhere else, and dials no "١٢" although int() reads it; 0 names no server.
    """
    host, sep, port = address.rpartition(":")
    if not sep or "]" in port or (":" in host and not (host.startswith("[") and host.endswith("]"))):
        return NO_PORT
    if not host.strip("[]"):
        return NO_HOST
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return BAD_PORT
    return None
