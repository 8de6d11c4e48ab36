"""Statistical assertions with fixed seeds: chi-square goodness of fit against an exact law."""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import stats

ALPHA = 1e-4  # fixed seeds make each test deterministic; alpha bounds a false alarm anyway


def chi_square(samples, law: dict) -> tuple[float, float, list, list]:
    """(p-value, statistic, observed, expected) of a chi-square test of `samples` (hashable
    outcomes) against `law` {outcome: prob}, cells of small expected counts pooled so that
    the approximation holds (p-value 1.0 with fewer than two cells).  Outcomes of probability
    zero are the caller's to check."""
    counts = Counter(samples)
    n = sum(counts.values())
    outcomes = sorted(law, key=lambda o: law[o])
    observed, expected = [], []
    pool_obs = pool_exp = 0.0
    for o in outcomes:
        e = law[o] * n
        if e < 5:
            pool_obs += counts.get(o, 0)
            pool_exp += e
        else:
            observed.append(counts.get(o, 0))
            expected.append(e)
    if pool_exp > 0:
        observed.append(pool_obs)
        expected.append(pool_exp)
    if len(observed) < 2:
        return 1.0, 0.0, observed, expected
    expected = np.array(expected)
    expected *= n / expected.sum()
    statistic, pvalue = stats.chisquare(observed, expected)
    return float(pvalue), float(statistic), observed, expected


def assert_frequencies_match(samples, law: dict, alpha: float = ALPHA, what: str = "samples"):
    """Chi-square test of `samples` (hashable outcomes) against `law` {outcome: prob}.

    Outcomes of probability zero must never occur; cells with small expected counts are
    pooled so the chi-square approximation holds.
    """
    counts = Counter(samples)
    impossible = {o: c for o, c in counts.items() if law.get(o, 0.0) <= 0}
    assert not impossible, f"{what}: outcomes of probability zero occurred: {impossible}"
    pvalue, statistic, observed, expected = chi_square(samples, law)
    if len(observed) < 2:
        return
    n = sum(counts.values())
    assert pvalue > alpha, (
        f"{what}: chi-square p-value {pvalue:.2e} (stat {statistic:.1f}, {len(observed)} cells, n={n}); "
        f"observed {observed} vs expected {np.round(expected, 1).tolist()}"
    )


def law_of_tensor(probs) -> dict:
    return {i: float(x) for i, x in enumerate(probs) if float(x) > 0}
