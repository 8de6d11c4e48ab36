"""How gRPC polls, side by side: gRPC's default (grpcio 1.85's EventEngine) against its older
iomgr poller (the EventEngine experiments off, `IOMGR_POLLING`), in ABBA order: whether the
fewer thread hand-offs of the older poller shorten the distributed step.

    python bench/grpc_polling_abba.py [--rounds 1] [--calls 200]
    python bench/grpc_polling_abba.py --report bench/results/grpc_polling_abba.json  # the table again

Each arm runs, as child processes with GRPC_EXPERIMENTS set for them and their workers,
`grpc_api_bench.py` (round trips beyond the handler, 0 and 12 ms handlers) and the overhead
part of `service_bench.py` (the demo pair, in-process against workers on loopback gRPC,
interleaved prompt by prompt).  Reported per run: the Steps-stream and unary round trips of
the threaded server with the blocking client (what rayspec runs), the distributed path's
tokens/s over in-process, the step time distribution adds, and whether the tokens are
identical.  Written to bench/results/grpc_polling_abba.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent

IOMGR_POLLING = ("-event_engine_client,-event_engine_listener,-event_engine_callback_cq,"
                 "-event_engine_for_all_other_endpoints")
ARMS = {"gRPC default": "", "iomgr polling": IOMGR_POLLING}


def run_arm(experiments: str, calls: int, scratch: Path, tag: str) -> dict:
    env = {**os.environ, "GRPC_EXPERIMENTS": experiments, "PYTHONPATH": str(BENCH.parent)}
    api, service = scratch / f"api_{tag}", scratch / f"service_{tag}"
    subprocess.run([sys.executable, str(BENCH / "grpc_api_bench.py"), "--repeats", "3", "--calls", str(calls),
                    "--out", str(api)], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, str(BENCH / "service_bench.py"), "--parts", "overhead", "--skip-locust",
                    "--out", str(service)], env=env, check=True, capture_output=True)
    trips = json.loads(api.with_suffix(".json").read_text())
    overhead = json.loads(service.with_suffix(".json").read_text())["overhead"]
    local, remote = overhead["in-process"], overhead["distributed"]
    row = {
        "distributed_over_in_process": overhead["distributed_over_in_process"],
        "identical_tokens": overhead["identical_tokens"],
        "added_step_ms": remote["step_ms"] - local["step_ms"],
        "in_process_step_ms": local["step_ms"],
        "distributed_step_ms": remote["step_ms"],
        "added_share": remote["added_share"],
        "tree": remote["tree"],
    }
    for entry in trips["rows"]:
        if entry["server"] == "threaded" and entry["client"] == "blocking":
            row[f"{entry['call']}_{entry['handler_ms']:g}ms"] = entry["beyond_handler_ms"]
    return row


def report(runs: list[dict]) -> tuple[dict, list[str]]:
    """(medians per arm, the markdown's lines)."""
    columns = [key for key in runs[0] if key.startswith(("stream_", "unary_"))]
    lines = [
        "# gRPC's polling: its default against the iomgr poller, ABBA (demo pair, loopback)", "",
        f"iomgr polling: `GRPC_EXPERIMENTS={IOMGR_POLLING}`, for the bench process (the coordinator) and its "
        "workers.  Round trips: ms beyond the handler, "
        "threaded server and blocking client (`grpc_api_bench.py`, median of 3 rounds).  Overhead: "
        "`service_bench.py --parts overhead` (rrsw, sequoia:auto, T = 0.6).", "",
        "| run | arm | " + " | ".join(columns) + " | distributed / in-process | step ms added | identical tokens |",
        "|---|---|" + "---|" * len(columns) + "---|---|---|",
    ]
    for i, run in enumerate(runs):
        lines.append(f"| {i + 1} | {run['arm']} | " + " | ".join(f"{run[c]:.3f}" for c in columns)
                     + f" | {run['distributed_over_in_process']:.3f} | {run['added_step_ms']:.2f} "
                       f"| {run['identical_tokens']} |")
    summary = {}
    for name in ARMS:
        mine = [run for run in runs if run["arm"] == name]
        summary[name] = {key: statistics.median(run[key] for run in mine)
                         for key in (*columns, "distributed_over_in_process", "added_step_ms")}
    lines += ["", "Medians: " + "; ".join(
        f"{name}: distributed / in-process {s['distributed_over_in_process']:.3f}, step +{s['added_step_ms']:.2f} ms, "
        f"stream round trip beside a 12-ms handler {s.get('stream_12ms', float('nan')):.3f} ms"
        for name, s in summary.items()) + "."]
    return summary, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--report", type=Path, help="write the markdown of this JSON of runs again, run nothing")
    parser.add_argument("--out", default=None, help="default: bench/results/grpc_polling_abba")
    args = parser.parse_args()
    if args.report:
        runs = json.loads(args.report.read_text())["runs"]
    else:
        order = [name for _ in range(args.rounds) for name in ("gRPC default", "iomgr polling", "iomgr polling",
                                                                "gRPC default")]
        runs = []
        with tempfile.TemporaryDirectory() as scratch:
            for i, name in enumerate(order):
                row = run_arm(ARMS[name], args.calls, Path(scratch), str(i))
                runs.append({"arm": name, **row})
                print(name, {k: v for k, v in row.items() if isinstance(v, float)}, flush=True)
    summary, lines = report(runs)
    # common brings torch and the engine, which this driver of subprocesses has no use for until now
    from common import out_prefix, suffixed

    out = out_prefix(args.out, "grpc_polling_abba")
    suffixed(out, ".json").write_text(json.dumps({"runs": runs, "medians": summary}, indent=1))
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
