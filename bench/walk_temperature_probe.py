"""Do verifiers' walks cost what the calibration times at T = 1 at other temperatures?

    python bench/walk_temperature_probe.py [--verifiers rrsw spectr is-weighted gumbel] [--temperatures 1 0.6 0.3]
                                           [--repeats 5] [--out walk_temperature_probe]

sequoia:auto prices a step as drafting + the target's forward + the verifier's walk, and the
calibration (`rayspec.engine.calibrate`) times each verifier's walk on the trees it would plan,
drafted by the drafter and verified by the target, at T = 1 and at `COOL_TEMPERATURE` (0.5),
and prices a request's temperature between the two (at T = 1 only before 2026-11-28).
A walk's cost grows with the levels it accepts and, for the LP verifiers, with the distinct
tokens its drafts hold, both of which change with the temperature.  This times the same walks
(`_walks_of_steps`, the calibration's own) at each temperature, on that temperature's planned
trees, on the demo pair in-process.  Writes bench/results/{out}.{json,md}.
"""

from __future__ import annotations

import argparse

import torch
from common import ACCEPTANCE, load_demo, machine, save_results

import rayspec.engine.calibrate as calibrate
from rayspec.engine.policy import AcceptanceLibrary, planned_tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifiers", nargs="+", default=["rrsw", "spectr", "is-weighted", "gumbel"])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.6, 0.3])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="walk_temperature_probe")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target, drafter, *_ = load_demo("cpu")
    library = AcceptanceLibrary(ACCEPTANCE)
    rows = []
    for verifier in args.verifiers:
        for temperature in args.temperatures:
            times = calibrate._walks_of_steps(target, drafter, verifier, args.repeats,
                                              lambda v, n, t: planned_tree(library, v, t, n), None, temperature)
            rows.append({"verifier": verifier, "temperature": temperature,
                         "walk_ms": {int(n): 1e3 * s for n, s in zip(times.sizes, times.seconds)}})
            print(rows[-1], flush=True)
    save_results(args.out, {"machine": machine("cpu"), "args": vars(args), "rows": rows}, markdown(rows, args))
    return 0


def markdown(rows, args) -> str:
    sizes = sorted({n for row in rows for n in row["walk_ms"]})
    lines = [f"# Verifiers' walks by temperature (demo pair, in-process, median of {args.repeats})", "",
             "Milliseconds per walk, by the planned tree's nodes; the calibration times them at T = 1.", "",
             "| verifier | T | " + " | ".join(f"{n} nodes" for n in sizes) + " |",
             "|---|---|" + "---|" * len(sizes)]
    for row in rows:
        cells = [f"{row['walk_ms'][n]:.2f}" if n in row["walk_ms"] else "–" for n in sizes]
        lines.append(f"| {row['verifier']} | {row['temperature']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
