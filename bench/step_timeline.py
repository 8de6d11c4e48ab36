"""Where a distributed step's time goes, call by call: the coordinator's Steps calls and the
workers' handlers, timestamped on the machine's one monotonic clock.

    python bench/step_timeline.py [--prompts 6] [--tokens 96] [--rounds 2] [--tree sequoia:4]

Workers run as plain processes on loopback (one torch thread each, as `service_bench.py`'s
overhead part), each wrapping its `Servicer.serve_steps` so that it notes when a call reached
its handler, when the handler's result was ready and when the next was asked for; the
coordinator notes when it sent each call and when its reply was in hand.  Per worker, the
medians (and means) of: the request's way from the coordinator's `send` to the handler, the
handler, and the reply's way back; and the coordinator's own time between two calls.  The
in-process engine decodes the same prompts in between (rounds in the order in-process,
distributed), for the step time distribution adds.  Written to
bench/results/step_timeline.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TRACE_VARIABLE = "RAYSPEC_STEP_TIMELINE"


def traced_worker(argv: list[str]) -> int:
    """A worker (`rayspec.rpc.worker`'s arguments) whose Steps calls are timestamped; the
    timestamps are written, as JSON, to $RAYSPEC_STEP_TIMELINE when it exits."""
    import atexit

    from rayspec.rpc import server
    from rayspec.rpc.worker import main

    marks = []
    serve_steps = server.Servicer.serve_steps

    def traced(self, calls, context, result_type, handlers):
        def arriving():
            for call in calls:
                marks.append(("in", time.monotonic_ns(), call.WhichOneof("call")))
                yield call

        for result in serve_steps(self, arriving(), context, result_type, handlers):
            marks.append(("out", time.monotonic_ns()))
            yield result

    server.Servicer.serve_steps = traced
    atexit.register(lambda: Path(os.environ[TRACE_VARIABLE]).write_text(json.dumps(marks)))
    return main(argv)


def _handler_spans(marks: list) -> list[tuple[str, int, int]]:
    """(call kind, reached the handler, result ready) per call, in order."""
    spans = []
    for mark, after in zip(marks, marks[1:]):
        if mark[0] == "in" and after[0] == "out":
            spans.append((mark[2], mark[1], after[1]))
    return spans


def _summary(values_ms: list[float]) -> dict:
    return {"median_ms": round(statistics.median(values_ms), 3), "mean_ms": round(statistics.mean(values_ms), 3)}


def measure(args) -> dict:
    from common import ACCEPTANCE, load_demo, machine

    from rayspec.demo import DRAFTER_PATH, TARGET_PATH
    from rayspec.engine import GenerationStats, SpeculativeEngine
    from rayspec.rpc import remote
    from rayspec.rpc.process import Worker
    from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

    sent = []  # (the worker's name, sent, reply in hand) per call
    send = remote.CallStream.send

    def timed_send(self, message, timeout=None):
        start = time.monotonic_ns()
        try:
            return send(self, message, timeout)
        finally:
            sent.append((self.what, start, time.monotonic_ns()))

    remote.CallStream.send = timed_send
    target, drafter, _, _, _, prompts = load_demo("cpu")
    logs = Path(tempfile.mkdtemp())
    traces = {role: logs / f"{role}.json" for role in ("target", "drafter")}
    program = (str(Path(__file__).resolve()), "--traced-worker")
    workers = {}
    try:
        for role, model in (("target", TARGET_PATH), ("drafter", DRAFTER_PATH)):
            os.environ[TRACE_VARIABLE] = str(traces[role])
            workers[role] = Worker(logs / f"{role}.log", "--role", role, "--prefix-cache-mb", "0",
                                   "--model", str(model), program=program)
        remote_target = RemoteTarget(workers["target"].address)
        engines = {
            "in-process": SpeculativeEngine(target, drafter, verifier=args.verifier, tree=args.tree,
                                            acceptance_dir=ACCEPTANCE),
            "distributed": SpeculativeEngine(remote_target, RemoteDrafter(workers["drafter"].address,
                                                                          remote_target.vocab_size),
                                             verifier=args.verifier, tree=args.tree, acceptance_dir=ACCEPTANCE),
        }
        steps = {name: [] for name in engines}  # (steps, seconds) per decode
        phases = {name: [] for name in engines}  # each timed decode's phase seconds

        decodes = []  # each distributed decode's (first call, calls after its last): its calls in `sent`

        def decode(name, prompt, seed):
            stats, start, first = GenerationStats(), time.perf_counter(), len(sent)
            for _ in engines[name].generate(prompt, max_new_tokens=args.tokens, temperature=args.temperature,
                                            seed=seed, stats=stats):
                pass
            phases[name].append(stats.phase_seconds())
            if name == "distributed":
                decodes.append((first, len(sent)))
            return len(stats.steps), time.perf_counter() - start

        for name in engines:  # untimed: kernels load, caches grow
            decode(name, prompts[0], 0)
            phases[name].clear()
        decodes.clear()
        warm = len(sent)
        for _ in range(args.rounds):
            for name in engines:
                for i, prompt in enumerate(prompts[: args.prompts]):
                    steps[name].append(decode(name, prompt, i))
    finally:
        for worker in workers.values():
            worker.stop()
    calls = sent[warm:]
    result = {"machine": machine("cpu"), "settings": vars(args), "workers": {}}
    for role in ("target", "drafter"):
        mine = [call for call in calls if call[0].startswith(role)]
        spans = _handler_spans(json.loads(traces[role].read_text()))[-len(mine):]
        ways = {"request to handler": [], "handler": [], "reply to caller": []}
        for (_, sent_at, replied_at), (kind, reached, ready) in zip(mine, spans):
            assert sent_at <= reached <= ready <= replied_at, "a worker's marks out of its calls' order"
            ways["request to handler"].append((reached - sent_at) / 1e6)
            ways["handler"].append((ready - reached) / 1e6)
            ways["reply to caller"].append((replied_at - ready) / 1e6)
        result["workers"][role] = {"calls": len(mine), "kinds": sorted({span[0] for span in spans}),
                                   **{way: _summary(values) for way, values in ways.items()}}
    # Within each decode only: the gap from one decode's last call to the next's first holds
    # the sessions' Release and Open (the target's prefill), which a step never waits for.
    between = [(after[1] - before[2]) / 1e6 for first, end in decodes
               for before, after in zip(sent[first:end], sent[first + 1:end])]
    result["coordinator between calls"] = _summary(between)
    result["step_ms"] = {name: round(1000 * sum(s for _, s in runs) / sum(n for n, _ in runs), 3)
                         for name, runs in steps.items()}
    # The engine's own split of a step (the workers report their draft, score and verify
    # seconds): whether the handlers' compute itself is slower than in-process, or only the
    # time around it.
    result["phase_ms_per_step"] = {
        name: {phase: round(1000 * sum(p[phase] for p in runs) / sum(n for n, _ in steps[name]), 3)
               for phase in runs[0]} for name, runs in phases.items()}
    result["calls_per_step"] = round(len(calls) / sum(n for n, _ in steps["distributed"]), 3)
    return result


def markdown(result: dict) -> str:
    settings = result["settings"]
    lines = [f"# A distributed step, call by call ({result['machine']['device_name']}, demo pair, "
             f"{settings['verifier']}, {settings['tree']}, T = {settings['temperature']})", "",
             "Milliseconds per call, median (mean), from one monotonic clock: the coordinator's `send` to the "
             "worker's handler, the handler, the handler's result to the reply in the coordinator's hands.", "",
             "| worker | calls | request to handler | handler | reply to caller |", "|---|---|---|---|---|"]
    for role, figures in result["workers"].items():
        cells = [f"{figures[way]['median_ms']:.3f} ({figures[way]['mean_ms']:.3f})"
                 for way in ("request to handler", "handler", "reply to caller")]
        lines.append(f"| {role} ({', '.join(figures['kinds'])}) | {figures['calls']} | " + " | ".join(cells) + " |")
    between = result["coordinator between calls"]
    steps = result["step_ms"]
    transit = sum(figures[way]["mean_ms"] for figures in result["workers"].values()
                  for way in ("request to handler", "reply to caller"))
    lines += ["", f"The coordinator between two calls: {between['median_ms']:.3f} ms ({between['mean_ms']:.3f}).  "
              f"Step: {steps['in-process']:.2f} ms in-process, {steps['distributed']:.2f} ms distributed "
              f"({result['calls_per_step']:.2f} calls a step); the calls' ways there and back add "
              f"{transit:.2f} ms a step (means, one call to each worker).", "",
              "The engine's split of a step, ms (a worker reports its own draft, score and verify seconds; "
              "`other` is the rest of the step's wall time):", "",
              "| engine | " + " | ".join(result["phase_ms_per_step"]["in-process"]) + " |",
              "|---|" + "---|" * len(result["phase_ms_per_step"]["in-process"])]
    lines += [f"| {name} | " + " | ".join(f"{v:.3f}" for v in split.values()) + " |"
              for name, split in result["phase_ms_per_step"].items()]
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--traced-worker":
        sys.exit(traced_worker(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--verifier", default="rrsw")
    parser.add_argument("--tree", default="sequoia:4")
    parser.add_argument("--out", default=None, help="default: bench/results/step_timeline")
    args = parser.parse_args()
    import torch
    from common import out_prefix, suffixed

    torch.set_num_threads(1)
    result = measure(args)
    out = out_prefix(args.out, "step_timeline")
    suffixed(out, ".json").write_text(json.dumps(result, indent=1))
    suffixed(out, ".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
