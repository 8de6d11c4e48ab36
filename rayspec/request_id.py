"""The rule of a request id a client names, which every front end applies (HTTP's header and
body, gRPC's Generate, the SDK before sending), in a module of its own that imports nothing:
the RPC layer may not import the HTTP server's, and the gRPC SDK (`rayspec.client`) neither
(the engine's package imports torch)."""

from __future__ import annotations

MAX_REQUEST_ID_CHARS = 256
REQUEST_ID_RULE = f"request_id must be 1 to {MAX_REQUEST_ID_CHARS} printable ASCII characters, no spaces"


def usable_request_id(given: bytes | str) -> bool:
    """Whether a client's request id can name a request: 1-256 printable ASCII characters (it
    goes into logs, headers and response ids)."""
    if not 0 < len(given) <= MAX_REQUEST_ID_CHARS:
        return False
    return all(32 < code < 127 for code in (given if isinstance(given, bytes) else map(ord, given)))


def check_request_id(given: str) -> str:
    """`given`, or ValueError saying the rule (`usable_request_id`), as HTTP's 400 says it."""
    if not isinstance(given, str) or not usable_request_id(given):
        raise ValueError(REQUEST_ID_RULE)
    return given
