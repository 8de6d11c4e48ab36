"""Servers and ports on loopback for the tests."""

from __future__ import annotations

import random
import socket
import threading
import time

import uvicorn


# Ray's worker processes bind ports in 10002-19999 (its min/max_worker_port defaults).
_ABOVE_RAYS_WORKER_PORTS = 20000
_given: set[int] = set()


def _ephemeral_ports_start() -> int:
    """Where the ports the kernel hands out for binds to port 0 begin (Linux; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback TCP port nothing listens on now.  It is free only until somebody binds it, so
    a server that can take a bound socket or bind port 0 itself should do that instead.

    It is drawn between Ray's worker ports and the kernel's ephemeral ones, and never given
    twice: a Ray service binds its ports tens of seconds after choosing them, meanwhile its
    actors, gRPC and every client socket bind ports the kernel chooses, and one of those took
    a port that came from the ephemeral range ("the port is in use" at start-up)."""
    low, high = _ABOVE_RAYS_WORKER_PORTS, _ephemeral_ports_start()
    for _ in range(200 if high - low > 1000 else 0):
        port = random.randrange(low, high)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving `app` from a background thread on a loopback socket bound here (no
    window in which another process could take the port)."""

    def __init__(self, app):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test's HTTP server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


def stalled_request(url: str, head: bytes, parts: list[bytes], pause: float) -> tuple[bytes, float]:
    """Sends `head`, then `parts` `pause` seconds apart, never the rest, on a socket of its
    own; returns the reply (all of it, until the server closes) and how long after the head it
    began.  The socket gives up 10 s after the last part: a server with no deadline fails the
    test rather than hanging it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(head)
        sent, reply = time.monotonic(), b""
        raw.settimeout(pause)
        for part in parts:
            raw.sendall(part)
            try:
                reply = raw.recv(65536)
                break
            except TimeoutError:
                continue
        raw.settimeout(10)
        reply = reply or raw.recv(65536)
        answered = time.monotonic() - sent
        while more := raw.recv(65536):
            reply += more
    return reply, answered
