"""gRPC between rayspec's processes: wire codecs, workers, and the handles that call them.

How gRPC polls.  grpcio 1.85 runs its client and server sockets on the EventEngine, which
hands each message across more threads than gRPC's older poller (iomgr), where the thread
that waits for a call polls for it itself.  With the EventEngine's paths off for a process
(`GRPC_POLLING`: gRPC experiments, read once, when grpc loads), a loopback call costs about
0.1-0.25 ms less beyond its handler on a 2-core VM (`bench/grpc_polling_abba.py`).  So
rayspec's own processes run with it: plain workers and coordinators (`python -m
rayspec.rpc.worker` sets it before grpc loads; `process.Worker` passes it on), Ray actors and
Serve replicas (their runtime environment).  A process whose environment names
GRPC_EXPERIMENTS keeps its own, an empty value being gRPC's defaults.  Processes that only use
the client SDK are left as they are.  A grpcio without these experiments logs "Unknown
experiment" and runs as it would.
"""

from __future__ import annotations

import os

GRPC_POLLING = ("-event_engine_client,-event_engine_listener,-event_engine_callback_cq,"
                "-event_engine_for_all_other_endpoints")


def grpc_environment() -> dict[str, str]:
    """The environment variables of a rayspec process that serves or calls workers: the
    caller's own GRPC_EXPERIMENTS, when it has one, else `GRPC_POLLING`."""
    return {"GRPC_EXPERIMENTS": os.environ.get("GRPC_EXPERIMENTS", GRPC_POLLING)}
