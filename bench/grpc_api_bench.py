"""What a round trip costs with gRPC Python's two APIs, to decide whether the workers should
serve with `grpc.aio` rather than the threaded server they use.

    python bench/grpc_api_bench.py [--handler-ms 0 12] [--calls 300] [--repeats 3]

A server process with one unary and one bidirectional-streaming method whose handler computes
(a busy loop) for the request's milliseconds, served either by `grpc.server` on a thread pool
(what `rayspec.rpc.server` runs) or by `grpc.aio.server` with the handler run on its event
loop; a client in this process calls it with the blocking API (what `rayspec.rpc.remote`
uses) or with `grpc.aio`, as unary calls or as messages on one stream (a worker session's
Steps stream).  Reported: the median round trip beyond the handler's own time, for a handler
of 0 ms and one about as long as a demo-pair step, each configuration repeated in rounds.

Written to bench/results/grpc_api_bench.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import queue
import statistics
import time
from concurrent import futures

import grpc

SERVICE = "bench.Echo"
UNARY, STREAM = f"/{SERVICE}/Unary", f"/{SERVICE}/Stream"


def _same(data: bytes) -> bytes:
    return data


def _spin(ms: float) -> None:
    deadline = time.perf_counter() + ms / 1e3
    while time.perf_counter() < deadline:
        pass


def _handlers(unary, stream):
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, _same, _same),
        "Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same),
    })


def _serve_threaded(ports) -> None:
    def unary(request, context):
        _spin(float(request))
        return b"."

    def stream(requests, context):
        for request in requests:
            _spin(float(request))
            yield b"."

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[_handlers(unary, stream)])
    ports.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


def _serve_aio(ports) -> None:
    async def main():
        async def unary(request, context):
            _spin(float(request))
            return b"."

        async def stream(requests, context):
            async for request in requests:
                _spin(float(request))
                yield b"."

        server = grpc.aio.server(handlers=[_handlers(unary, stream)])
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


SERVERS = {"threaded": _serve_threaded, "aio": _serve_aio}


def _beyond(ms: float, seconds: list[float]) -> float:
    """Median milliseconds beyond the handler's, the first few calls left out."""
    return statistics.median(s * 1e3 - ms for s in seconds[5:])


def _blocking_client(port: int, ms: float, calls: int) -> dict[str, float]:
    request = f"{ms}".encode()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        unary = channel.unary_unary(UNARY, _same, _same)
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            unary(request, timeout=30)
            seconds.append(time.perf_counter() - start)
        result = {"unary": _beyond(ms, seconds)}
        requests = queue.SimpleQueue()
        replies = channel.stream_stream(STREAM, _same, _same)(iter(requests.get, None), timeout=300)
        seconds = []
        for _ in range(calls):
            start = time.perf_counter()
            requests.put(request)
            next(replies)
            seconds.append(time.perf_counter() - start)
        requests.put(None)
        result["stream"] = _beyond(ms, seconds)
    return result


def _aio_client(port: int, ms: float, calls: int) -> dict[str, float]:
    request = f"{ms}".encode()

    async def main():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary(UNARY, _same, _same)
            seconds = []
            for _ in range(calls):
                start = time.perf_counter()
                await unary(request, timeout=30)
                seconds.append(time.perf_counter() - start)
            result = {"unary": _beyond(ms, seconds)}
            call = channel.stream_stream(STREAM, _same, _same)(timeout=300)
            seconds = []
            for _ in range(calls):
                start = time.perf_counter()
                await call.write(request)
                await call.read()
                seconds.append(time.perf_counter() - start)
            await call.done_writing()
            result["stream"] = _beyond(ms, seconds)
            return result

    return asyncio.run(main())


CLIENTS = {"blocking": _blocking_client, "aio": _aio_client}


def measure(handler_ms: list[float], calls: int, repeats: int) -> list[dict]:
    """One row per (server, client, call kind, handler time): the median over `repeats`
    rounds of each round's median; rounds alternate the servers."""
    samples: dict[tuple, list[float]] = {}
    for _ in range(repeats):
        for server_name, serve in SERVERS.items():
            ports = multiprocessing.Queue()
            server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
            server.start()
            try:
                port = ports.get(timeout=60)
                for ms in handler_ms:
                    for client_name, client in CLIENTS.items():
                        # fewer calls with a long handler: the round's time stays bounded
                        count = calls if ms == 0 else max(30, int(calls * 5 / max(ms, 5)))
                        for kind, value in client(port, ms, count).items():
                            samples.setdefault((server_name, client_name, kind, ms), []).append(value)
            finally:
                server.terminate()
                server.join()
    return [{"server": s, "client": c, "call": k, "handler_ms": ms, "beyond_handler_ms": round(statistics.median(v), 3),
             "rounds": [round(x, 3) for x in v]} for (s, c, k, ms), v in samples.items()]


def markdown(rows: list[dict], meta: dict) -> str:
    handlers = sorted({r["handler_ms"] for r in rows})
    lines = [f"# gRPC Python round trips on loopback ({meta['machine']}, {meta['cpus']} CPUs, grpcio {meta['grpcio']})",
             "", "Median milliseconds beyond the handler's own time (median of "
             f"{meta['repeats']} rounds).  The workers serve threaded and the coordinator calls blocking, on Steps "
             "streams by default.", "",
             "| server | client | call | " + " | ".join(f"handler {ms:g} ms" for ms in handlers) + " |",
             "|---|---|---|" + "---|" * len(handlers)]
    keyed = {(r["server"], r["client"], r["call"], r["handler_ms"]): r["beyond_handler_ms"] for r in rows}
    for server in SERVERS:
        for client in CLIENTS:
            for call in ("unary", "stream"):
                values = " | ".join(f"{keyed[server, client, call, ms]:.3f}" for ms in handlers)
                lines.append(f"| {server} | {client} | {call} | {values} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handler-ms", type=float, nargs="+", default=[0.0, 12.0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="default: bench/results/grpc_api_bench")
    args = parser.parse_args()
    rows = measure(args.handler_ms, args.calls, args.repeats)
    meta = {"machine": platform.machine(), "cpus": multiprocessing.cpu_count(), "grpcio": grpc.__version__,
            "repeats": args.repeats, "calls": args.calls}
    # common brings torch and the engine; imported only now, so the measured processes never hold them
    from common import out_prefix, suffixed

    out = out_prefix(args.out, "grpc_api_bench")
    suffixed(out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    suffixed(out, ".md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
