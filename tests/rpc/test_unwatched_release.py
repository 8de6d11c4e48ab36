"""An unwatched Release (`release_unwatched`: a session left by a call that failed, or by a
client that left, on a worker that may be hung) reaches the worker once it answers, even when
the connection it was sent on is dropped meanwhile: a hung worker's connection is, once its
keepalive ping goes unanswered."""

from __future__ import annotations

import socket
import threading
import time

import grpc

from rayspec.engine import LocalTarget
from rayspec.engine.interfaces import SequenceSpec
from rayspec.rpc import codec
from rayspec.rpc.generated import worker_pb2, worker_pb2_grpc
from rayspec.rpc.remote import RemoteTarget, release_unwatched
from rayspec.rpc.worker import serve_target
from rayspec.verify.processing import SamplingParams
from tests.rpc.conftest import TINY_VOCAB


class _Link:
    """A TCP relay to a local port that can hold the bytes it is sent (a hung peer) and cut its
    connections (what a keepalive ping unanswered does)."""

    def __init__(self, port: int):
        self.port, self.holding, self.sockets = port, threading.Event(), []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return
            far = socket.create_connection(("127.0.0.1", self.port))
            self.sockets += [near, far]
            for source, sink in ((near, far), (far, near)):
                threading.Thread(target=self._relay, args=(source, sink), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.holding.is_set():
                    time.sleep(0.01)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def cut(self) -> None:
        for end in self.sockets:
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
        self.sockets = []

    def close(self) -> None:
        self.listener.close()
        self.cut()


def test_a_release_whose_connection_drops_before_the_worker_reads_it_is_sent_again(pair):
    model, _ = pair
    server, port = serve_target(LocalTarget(model), "127.0.0.1:0")
    link = _Link(port)
    target = RemoteTarget(link.address)
    try:
        spec = SequenceSpec((11, 5, 7, 40), SamplingParams(temperature=1.0), 1, "gumbel", vocab_size=TINY_VOCAB)
        session = target.open(spec)
        link.holding.set()  # the worker hangs: the Release waits, unread
        released = release_unwatched(target.stub, session.session_id)
        time.sleep(0.5)
        link.cut()  # its connection dropped
        link.holding.clear()
        try:
            released.result(timeout=10)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE  # the first try's end: the worker never read it
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = worker_pb2_grpc.TargetServiceStub(channel)
            again = worker_pb2.OpenRequest(session_id=session.session_id, spec=codec.encode_spec(spec))
            deadline = time.monotonic() + 8
            while True:  # the session's id opens again once the worker has released it
                try:
                    stub.Open(again, timeout=5)
                    break
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "already open" in error.details()
                    assert time.monotonic() < deadline, "the session was never released"
                    time.sleep(0.2)
            stub.Release(worker_pb2.ReleaseRequest(session_id=session.session_id), timeout=5)
    finally:
        target.close()
        link.close()
        server.stop(grace=None)
