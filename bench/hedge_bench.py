"""Hedged drafts: steps that go on target-only while their draft is late, against waiting.

    PYTHONPATH=. python bench/hedge_bench.py [--prompts 8] [--tokens 96] [--stall-ms 50] [--stall-share 0.05]

A target and a drafter worker as plain processes on loopback gRPC, the demo pair, Gumbel
coupling (drafter-invariant: every arm must give the same tokens for a seed) on sequoia:auto
trees planned from one calibration (`--tree`), not adapted while serving, decoded by the
engine waiting for every draft (`draft_hedge` off) and hedging (`draft_hedge` 3), each on the
link as it is and on a link that stalls: a seeded `--stall-share` of draft calls answered
`--stall-ms` late (a sleep in the coordinator before the call, as a far link's reply that
comes late).  The four arms decode prompt by prompt in a rotating order.  Reported per arm:
tokens/s, each step's wall time (p50, p99, max: the stream's inter-chunk latency), the share
of steps hedged, and whether the tokens equal the first arm's.  On the plain link the ratio
is what hedging costs when no draft is late (a thread hand-off per draft); on the stalling
link, what it saves.

Writes bench/results/hedge_bench.{json,md} (`--name`).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch
from common import Arm, interleave, load_demo, machine, save_results

from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import GenerationStats, SpeculativeEngine
from rayspec.rpc.process import Worker
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget

HEDGE = 3.0


class StallingLink:
    """A drafter handle whose sessions' draft calls are, with probability `share` (seeded per
    session, so every arm stalls at the same calls of a prompt), answered `stall` seconds late."""

    def __init__(self, drafter, share: float, stall: float):
        self.drafter, self.share, self.stall = drafter, share, stall

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def open(self, spec):
        session = self.drafter.open(spec)
        draws, draft = random.Random(spec.seed), session.draft

        def late_now_and_then(shape, previous):
            if draws.random() < self.share:
                time.sleep(self.stall)
            return draft(shape, previous)

        session.draft = late_now_and_then
        return session


def arm(name, target, drafter, hedge, temperature, tree, costs, outputs):
    engine = SpeculativeEngine(target, drafter, verifier="gumbel", tree=tree, adaptive=False, costs=costs,
                               draft_hedge=hedge)

    def run(prompt, tokens, seed):
        stats, produced = GenerationStats(), []
        for chunk in engine.generate(prompt, max_new_tokens=tokens, temperature=temperature, seed=seed, stats=stats):
            produced += chunk.tokens
        outputs.setdefault(name, {})[seed] = produced
        hedged.append((stats.hedged_steps, len(stats.steps)))
        return stats.tokens, len(stats.steps), stats.phase_seconds(), [step.wall for step in stats.steps]

    hedged: list[tuple[int, int]] = []
    result = Arm(name, run, hedge=hedge)
    result.hedged = hedged
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--tree", default="sequoia:auto")
    parser.add_argument("--stall-ms", type=float, default=50.0)
    parser.add_argument("--stall-share", type=float, default=0.05)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the workers' device (the models of both share it)")
    parser.add_argument("--out", "--name", dest="out", default="hedge_bench",
                        help="default: bench/results/hedge_bench (--name: its old spelling)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    *_, prompts = load_demo("cpu")  # for the prompts: the models decode in the workers
    logs = Path(tempfile.mkdtemp())
    workers = [Worker(logs / f"{role}.log", "--role", role, "--prefix-cache-mb", "0", "--model", str(path),
                      "--device", args.device, threads=1)
               for role, path in (("target", TARGET_PATH), ("drafter", DRAFTER_PATH))]
    try:
        target = RemoteTarget(workers[0].address)
        drafter = RemoteDrafter(workers[1].address, target.vocab_size)
        stalling = StallingLink(drafter, args.stall_share, args.stall_ms / 1e3)
        # one calibration, so that every arm drafts the same sequoia:auto trees
        costs = SpeculativeEngine(target, drafter, verifier="gumbel", tree="chain:1").costs()
        outputs: dict = {}
        arms = [arm(name, target, link, hedge, args.temperature, args.tree, costs, outputs)
                for name, link, hedge in (("waits, plain link", drafter, None), ("hedges, plain link", drafter, HEDGE),
                                          ("waits, stalling link", stalling, None),
                                          ("hedges, stalling link", stalling, HEDGE))]
        rows = interleave(arms, prompts[: args.prompts], args.tokens, "hedge")
    finally:
        for worker in workers:
            worker.stop()
    first = outputs[arms[0].name]
    for row, one in zip(rows, arms):
        steps = sum(total for _, total in one.hedged[1:])  # past the warm-up decode
        row["hedged_share"] = sum(h for h, _ in one.hedged[1:]) / max(steps, 1)
        row["same_tokens_as_first_arm"] = all(outputs[one.name][seed] == tokens for seed, tokens in first.items())
    result = {"machine": machine(args.device), "args": vars(args), "hedge_factor": HEDGE, "arms": rows}
    save_results(args.out, result, markdown(result))


def markdown(result) -> str:
    args, rows = result["args"], {row["config"]: row for row in result["arms"]}
    lines = [
        f"# Hedged drafts against waiting (demo pair, workers on loopback gRPC on {result['machine']['device_name']}, "
        f"gumbel, {args['tree']}, "
        f"T = {args['temperature']}, {args['prompts']} prompts x {args['tokens']} tokens)",
        "",
        f"The stalling link answers {args['stall_share']:.0%} of draft calls {args['stall_ms']:g} ms late.  "
        f"Hedging: a step waits for its draft at most {result['hedge_factor']:g} times the drafter's recent "
        "median draft time.",
        "",
        "| arm | tokens/s | step ms p50 | p99 | max | steps hedged | same tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        ms = row["step_ms"]
        lines.append(f"| {name} | {row['tokens_per_s']:.1f} | {ms['p50']:.1f} | {ms['p99']:.1f} | {ms['max']:.1f} | "
                     f"{row['hedged_share']:.1%} | {row['same_tokens_as_first_arm']} |")
    plain = rows["hedges, plain link"]["tokens_per_s"] / rows["waits, plain link"]["tokens_per_s"]
    stalling = rows["hedges, stalling link"]["tokens_per_s"] / rows["waits, stalling link"]["tokens_per_s"]
    lines += ["", f"Hedging / waiting, tokens/s: **{plain:.3f}** on the plain link (its cost when no draft is late), "
                  f"**{stalling:.3f}** on the stalling link."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
