"""Positional acceptance vectors (Sequoia, Chen et al. 2024, §3.1): a[j] = P(the child of
draw rank j is the accepted one), estimated from verification outcomes.

An observation is one visited internal node: its number of drafted children w and the rank
accepted there (0: none).  It is a Bernoulli trial of "rank j accepted" with probability
a[j] for every j <= w, and says nothing about ranks beyond w.  So

    a[j] = hits[j] / trials[j],   trials[j] = visited nodes with at least j children,

which for a star tree of width W (the measuring setting) is the plain histogram over N
visits, and which also reads the accepted ranks of any served tree (deep nodes of a Sequoia
tree have few children).  This assumes, as the DP does, that a rank's acceptance does not
depend on how many siblings follow it: true for the sequential schemes (rrs, rrsw, sps),
an approximation for schemes that tune themselves to k (SpecTr's rho*).

Confidence intervals are Wilson score intervals (95%) on hits[j] out of trials[j]; they
stay inside [0, 1] and are not degenerate at 0 or N hits.  Depth-aware estimates keep one
row per depth of the visited node (the last row gathers every deeper node).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Z95 = 1.959963984540054


def wilson_interval(hits, trials, z: float = Z95) -> np.ndarray:
    """Wilson score interval [..., 2] for `hits` successes in `trials` (real counts allowed;
    no trials: [0, 1])."""
    hits, trials = np.asarray(hits, dtype=np.float64), np.asarray(trials, dtype=np.float64)
    safe = np.where(trials > 0, trials, 1.0)
    share = np.clip(hits / safe, 0.0, 1.0)
    z2n = z * z / safe
    centre = (share + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * np.sqrt(share * (1 - share) / safe + z2n / (4 * safe))
    interval = np.stack([np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)], axis=-1)
    return np.where((trials > 0)[..., None], interval, np.array([0.0, 1.0]))


@dataclass
class AcceptanceEstimate:
    """An estimated vector [W] (or depth-aware matrix [R, W]) with its evidence: the content
    of a vector file."""

    acceptance: np.ndarray
    none: np.ndarray  # 1 - sum(acceptance), per row
    samples: np.ndarray  # visited nodes per row (trials of rank 1)
    trials: np.ndarray  # per rank: visited nodes that had that rank drafted
    ci95: np.ndarray  # [..., W, 2]
    setting: dict = field(default_factory=dict)

    @property
    def depth_aware(self) -> bool:
        return self.acceptance.ndim == 2

    def to_json(self) -> dict:
        return {
            "acceptance": self.acceptance.tolist(),
            "none": self.none.tolist(),
            "samples": self.samples.tolist(),
            "trials": self.trials.tolist(),
            "ci95": self.ci95.tolist(),
            "setting": dict(self.setting),
        }

    @classmethod
    def from_json(cls, data: dict) -> "AcceptanceEstimate":
        """Reads a full estimate, or a bare {"acceptance": [...]} (then zero samples)."""
        acceptance = np.asarray(data["acceptance"], dtype=np.float64)
        rows = np.atleast_2d(acceptance)
        squeeze = (lambda x: x[0]) if acceptance.ndim == 1 else (lambda x: x)
        none = np.asarray(data.get("none", squeeze(np.clip(1 - rows.sum(axis=1), 0.0, 1.0))), dtype=np.float64)
        samples = np.asarray(data.get("samples", squeeze(np.zeros(rows.shape[0]))), dtype=np.float64)
        trials = np.asarray(data.get("trials", np.broadcast_to(samples[..., None], acceptance.shape)), dtype=np.float64)
        ci95 = np.asarray(data.get("ci95", wilson_interval(acceptance * trials, trials)), dtype=np.float64)
        return cls(acceptance, none, samples, trials, ci95, dict(data.get("setting", {})))


@dataclass
class RankCounts:
    """Hits and trials per (depth row, rank); real-valued so they can decay."""

    hits: np.ndarray  # [R, W]
    trials: np.ndarray  # [R, W]

    @classmethod
    def zeros(cls, width: int, depths: int = 1) -> "RankCounts":
        if width < 1 or depths < 1:
            raise ValueError(f"need width >= 1 and depths >= 1, got {width}, {depths}")
        return cls(np.zeros((depths, width)), np.zeros((depths, width)))

    @classmethod
    def from_histogram(cls, counts, none) -> "RankCounts":
        """A star tree's histogram: counts[j-1] visits accepted rank j, `none` accepted
        nothing ([W] and scalar, or [R, W] and [R])."""
        hits = np.atleast_2d(np.asarray(counts, dtype=np.float64))
        none = np.atleast_1d(np.asarray(none, dtype=np.float64))
        if (hits < 0).any() or (none < 0).any() or none.shape != (hits.shape[0],):
            raise ValueError("a histogram has non-negative counts, and one 'none' count per row")
        total = hits.sum(axis=1) + none
        return cls(hits, np.repeat(total[:, None], hits.shape[1], axis=1))

    @property
    def width(self) -> int:
        return self.hits.shape[1]

    def add(self, rank: int, width: int, depth: int = 0, weight: float = 1.0) -> None:
        """One visited node with `width` drafted children where rank `rank` (0: none) won."""
        if not 0 <= rank <= width:
            raise ValueError(f"rank {rank} accepted at a node with {width} children")
        row = min(depth, self.hits.shape[0] - 1)
        self.trials[row, : min(width, self.width)] += weight
        if 0 < rank <= self.width:
            self.hits[row, rank - 1] += weight

    def scale(self, factor: float) -> None:
        self.hits *= factor
        self.trials *= factor


def estimate(counts: RankCounts, prior=None, prior_weight: float = 0.0, setting: dict | None = None,
             depth_aware: bool | None = None) -> AcceptanceEstimate:
    """The vector from counts, optionally shrunk toward a prior vector worth `prior_weight`
    samples per rank (a Beta prior: (hits + w·prior) / (trials + w)).  Ranks never drafted
    and without a prior get 0: the DP then never relies on them.  A depth-aware estimate has
    one row per depth; `depth_aware=False` squeezes a single row to a vector."""
    hits, trials = counts.hits, counts.trials
    w = float(prior_weight)
    if w < 0:
        raise ValueError(f"prior_weight must be >= 0, got {prior_weight}")
    if prior is not None and w > 0:
        prior_rows = np.broadcast_to(_prior_rows(prior, hits.shape), hits.shape)
        hits, trials = hits + w * prior_rows, trials + w
    acceptance = np.where(trials > 0, hits / np.where(trials > 0, trials, 1.0), 0.0)
    # Separate Bernoulli estimates can overshoot a total of 1 by noise: rescale that row.
    total = acceptance.sum(axis=1, keepdims=True)
    acceptance = acceptance / np.maximum(total, 1.0)
    aware = hits.shape[0] > 1 if depth_aware is None else depth_aware
    if not aware and hits.shape[0] != 1:
        raise ValueError("depth_aware=False needs counts with a single row")
    squeeze = (lambda x: x) if aware else (lambda x: x[0])
    return AcceptanceEstimate(
        acceptance=squeeze(acceptance),
        none=squeeze(np.clip(1.0 - acceptance.sum(axis=1), 0.0, 1.0)),
        samples=squeeze(counts.trials[:, 0].copy()),
        trials=squeeze(counts.trials.copy()),
        ci95=squeeze(wilson_interval(hits, trials)),
        setting=dict(setting or {}),
    )


def estimate_from_counts(counts, none, setting: dict | None = None) -> AcceptanceEstimate:
    """The vector of a star tree's histogram (counts per rank 1..W and the 'none' count)."""
    return estimate(RankCounts.from_histogram(counts, none), setting=setting, depth_aware=np.ndim(counts) == 2)


def _prior_rows(prior, shape: tuple[int, int]) -> np.ndarray:
    """A prior vector or matrix cut or zero-padded to `shape` (depths beyond its rows reuse
    its last row)."""
    rows = np.atleast_2d(np.asarray(prior, dtype=np.float64))
    out = np.zeros(shape)
    width = min(rows.shape[1], shape[1])
    for k in range(shape[0]):
        out[k, :width] = rows[min(k, rows.shape[0] - 1), :width]
    return out


class RunningAcceptance:
    """A running estimate of the vector while serving, for trees that adapt.

    Counts decay by half every `half_life` steps (None: they never decay); an estimate is
    reported once the root's decayed count reaches `min_samples`.  A depth-aware estimate
    (depths > 1) reports the leading rows that reached the floor (the DP lets the last row
    it gets serve every deeper node).
    `prior` (the measured vector) is mixed in worth `prior_weight` samples."""

    def __init__(self, width: int, depths: int = 1, half_life: float | None = 2000.0, min_samples: float = 200.0,
                 prior=None, prior_weight: float = 0.0):
        self.counts = RankCounts.zeros(width, depths)
        if half_life is not None and half_life <= 0:
            raise ValueError(f"half_life must be positive or None, got {half_life}")
        self.decay = 1.0 if half_life is None else 0.5 ** (1.0 / half_life)
        if self.decay < 1.0 and min_samples > 1.0 / (1.0 - self.decay):
            raise ValueError(
                f"with a half-life of {half_life} steps the decayed count never exceeds "
                f"{1.0 / (1.0 - self.decay):.0f}; min_samples={min_samples} would never be reached"
            )
        self.min_samples = float(min_samples)
        self.prior, self.prior_weight = prior, float(prior_weight)
        self.steps = 0

    @property
    def samples(self) -> np.ndarray:
        """Decayed visits per depth row."""
        return self.counts.trials[:, 0].copy()

    def observe(self, ranks, widths) -> None:
        """One verification step: at the visited node of depth d, widths[d] children were
        drafted and rank ranks[d] (0: none) was accepted."""
        if len(ranks) != len(widths):
            raise ValueError(f"{len(ranks)} ranks for {len(widths)} visited nodes")
        self.counts.scale(self.decay)
        for depth, (rank, width) in enumerate(zip(ranks, widths)):
            self.counts.add(int(rank), int(width), depth)
        self.steps += 1

    def observe_walk(self, shape, path, ranks) -> None:
        """One step from a tree walk's outcome: the drafted tree's shape, the accepted path
        (node indices) and the ranks at the visited internal nodes (`Outcome.ranks`)."""
        visited = (0, *path)
        self.observe(ranks, [shape.num_children[visited[d]] for d in range(len(ranks))])

    def estimate(self, setting: dict | None = None) -> AcceptanceEstimate | None:
        below = self.samples < self.min_samples
        ready = int(np.argmax(below)) if below.any() else below.size
        if ready == 0:
            return None
        counts = RankCounts(self.counts.hits[:ready], self.counts.trials[:ready])
        return estimate(counts, self.prior, self.prior_weight, setting, depth_aware=self.counts.hits.shape[0] > 1)

    def vector(self) -> np.ndarray | None:
        found = self.estimate()
        return None if found is None else found.acceptance
