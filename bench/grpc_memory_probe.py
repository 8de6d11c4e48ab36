"""gRPC Python's own resident memory under a worker's pattern of calls, no model and no torch:
a server (threads, as a worker's) whose bidirectional streams answer each message with a reply
the size of a draft's q rows, and two clients opening short streams as sessions do (a few
steps each, then the stream ends), as fast as they can.  Every 60 s it prints the process's
resident MiB before and after `malloc_trim(0)`: growth here is gRPC's or protobuf's (or
glibc's), not the models' (`engine_memory_probe.py`).  With `--codec`, each message is a draft's
probability rows (7 x 8192 float32, kary:2x3's internal nodes over the demo vocabulary) that
the server decodes as a target worker does (`rayspec.rpc.codec.decode_rows`) and answers with
fresh rows it encodes as a drafter worker does (`encode_rows`): torch tensors made from and
into message bytes.

    python bench/grpc_memory_probe.py [MINUTES] [--codec]     # default 12
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent import futures

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from soak import resident_before_and_after_trim  # noqa: E402

STEPS = 12  # messages per stream: a session's steps
METHOD = "/probe.Probe/Steps"


REPLY_BYTES = 7 * 8192 * 4
ROWS, WIDTH = 7, 8192


def serve(codec: bool) -> tuple[grpc.Server, int]:
    if codec:
        import torch

        from rayspec.rpc.codec import decode_rows, encode_rows
        from rayspec.rpc.generated import tensor_pb2

    def steps(requests, context):
        for request in requests:
            if not codec:  # a fresh reply per step, as a worker builds its reply's bytes each time
                yield request[:8] + os.urandom(16) + bytes(REPLY_BYTES)
                continue
            rows = decode_rows(tensor_pb2.ProbabilityRows.FromString(request), ROWS, WIDTH)
            yield encode_rows(torch.softmax(torch.randn(ROWS, WIDTH) + rows, -1)).SerializeToString()

    handler = grpc.stream_stream_rpc_method_handler(steps)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=24),
                         options=[("grpc.max_send_message_length", 64 << 20),
                                  ("grpc.max_receive_message_length", 64 << 20)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("probe.Probe", {"Steps": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def client(port: int, end: float, done: list, request: bytes | None) -> None:
    """request: each step's message (None: a short one of its own)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        call = channel.stream_stream(METHOD)
        while time.monotonic() < end:
            replies = call(iter([request or b"%08d" % i + bytes(300) for i in range(STEPS)]), timeout=60)
            assert sum(1 for _ in replies) == STEPS
            done[0] += 1


def main() -> int:
    arguments = [a for a in sys.argv[1:] if a != "--codec"]
    codec = "--codec" in sys.argv[1:]
    minutes = float(arguments[0]) if arguments else 12
    request = None
    if codec:
        import torch

        from rayspec.rpc.codec import encode_rows

        torch.set_num_threads(1)
        request = encode_rows(torch.softmax(torch.randn(ROWS, WIDTH), -1)).SerializeToString()
    server, port = serve(codec)
    end, done = time.monotonic() + minutes * 60, [0]
    clients = [threading.Thread(target=client, args=(port, end, done, request)) for _ in range(2)]
    for thread in clients:
        thread.start()
    started = time.monotonic()
    print(f"# in this process: a server and 2 clients; streams of {STEPS} steps, "
          f"{'probability rows encoded and decoded' if codec else f'replies of {REPLY_BYTES} bytes'}", flush=True)
    while any(thread.is_alive() for thread in clients):
        time.sleep(60)
        before, after = resident_before_and_after_trim()
        print(f"{time.monotonic() - started:6.0f}s streams={done[0]} resident {before:.0f} MiB, "
              f"after malloc_trim {after:.0f}", flush=True)
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
