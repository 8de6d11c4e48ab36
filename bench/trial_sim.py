"""How well a load trial (`rayspec.engine.policy.TreeTrial`) serves the faster of two trees,
simulated on a fake clock: no models, so that its rule can be compared across settings and
commits with noise of a known size.

Each step's time is drawn log-normal (sigma 1, mean 1 / the tree's rate), so that a sample of
about 30 steps is off by some 22 %, as the demo pair's rates are under load (requests ending
and starting inside it).  Target-only is the faster tree by `--gaps`; each setting runs
`--runs` trials, half of them with target-only first.  Reported: the share of the steps that
went to target-only (1.0 is an oracle; 0.5 a coin), and how often it was the final choice.

    python bench/trial_sim.py [--runs 60] [--label NAME]

Writes bench/results/trial_sim[_NAME].{json,md} (`--out`).  The Welch-gated rule that was tried and
dropped is in commit bf88833; to compare it, run this script from a worktree of that commit
(`bench/common.py` puts the checkout the script sits in first on the path):

    git worktree add /tmp/wt bf88833 && cp bench/trial_sim.py /tmp/wt/bench/
    cd /tmp/wt && python bench/trial_sim.py --label welch_bf88833
"""

from __future__ import annotations

import argparse

import numpy as np

from common import save_results
from rayspec.engine import policy
from rayspec.engine.policy import TreeTrial

# (sequences at once, window, steps): the demo bench's levels 4 and 16 (windows as
# `SequoiaTrees.trial` sets them, at a tenth of the real 128 for level 4), short and long runs.
SETTINGS = ((4, 40, 1000), (4, 40, 4000), (16, 128, 3000), (16, 128, 6000))


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


def simulate(rng, gap: float, sequences: int, window: int, steps: int, first: int) -> tuple[float, bool]:
    """(share of steps on target-only, whether it was the final choice) of one trial."""
    clock = _Clock()
    trial = TreeTrial(("drafting", "target_only"), sequences, window, 7 * window, first=first, clock=clock)
    rates = {"drafting": 100.0, "target_only": 100.0 * (1 + gap)}
    on_target_only = 0
    for _ in range(steps):
        tree = trial.next()
        clock.now += rng.lognormal(-0.5, 1.0) / rates[tree]
        trial.record(tree, 1)
        on_target_only += tree == "target_only"
    return on_target_only / steps, trial.trees[trial.best] == "target_only"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60, help="trials per setting, half with target-only first")
    parser.add_argument("--gaps", type=float, nargs="+", default=[0.0, 0.10, 0.15, 0.30])
    parser.add_argument("--label", default="", help="names the rule simulated (the results file's suffix)")
    parser.add_argument("--out", default=None, help="default: bench/results/trial_sim[_LABEL]")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for sequences, window, steps in SETTINGS:
        for gap in args.gaps:
            runs = [simulate(rng, gap, sequences, window, steps, first=i % 2) for i in range(args.runs)]
            rows.append({"sequences": sequences, "window": window, "steps": steps, "gap": gap,
                         "target_only_share": float(np.mean([share for share, _ in runs])),
                         "chose_target_only": float(np.mean([chose for _, chose in runs]))})
    lines = [f"# Load trials on a fake clock{': ' + args.label if args.label else ''}", "",
             f"{args.runs} trials per row; each step's time log-normal (sigma 1; a sample of ~30 steps off by ~22 %); "
             f"exploit = 7 windows; `TreeTrial` from {policy.__file__}.", "",
             "| sequences | window | steps | target-only faster by | share of steps on target-only | "
             "target-only chosen at the end |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['sequences']} | {r['window']} | {r['steps']} | {100 * r['gap']:.0f} % | "
              f"{r['target_only_share']:.3f} | {r['chose_target_only']:.2f} |" for r in rows]
    name = f"trial_sim_{args.label}" if args.label else "trial_sim"
    save_results(args.out or name, {"runs": args.runs, "label": args.label, "rows": rows}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
