"""Statistics over seeds: mean, sd, Student-t intervals, paired depth ratios, the
Wilcoxon sign-rank test, the Benjamini–Hochberg count and the sign patterns of the
per-feature forgetting (numpy; scipy's t and sign-rank distributions when summarising).

Intervals of a mean over seeds are Student t (:func:`t_interval`). The percentile bootstrap
stays only for the depth ratio mean(deep)/mean(shallow) − 1, which has no t form; it draws
from its own fixed generator, so an interval is a function of the values alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..setting import VERDICT_SEEDS  # noqa: F401  (the tables' and records' rule)

__all__ = [
    "BOOTSTRAP_SEED", "LEVEL", "RESAMPLES", "Ratio", "Summary", "benjamini_hochberg",
    "benjamini_hochberg_rejects", "forgetting_patterns", "percentile_interval",
    "sign_rank_pvalue", "t_interval", "t_pvalue",
]


RESAMPLES = 10_000
LEVEL = 0.95
BOOTSTRAP_SEED = 20260413


def _resample_indices(n: int, resamples: int = RESAMPLES) -> np.ndarray:
    return np.random.default_rng(BOOTSTRAP_SEED).integers(0, n, size=(resamples, n))


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Student-t interval for the mean over seeds: ``mean ± t_{n−1} · sd/√n``.

    With 10 seeds the percentile bootstrap under-covers: it spreads like the plug-in sd
    (/n, not /(n − 1)) with normal tails; a nominal 95 % covered 91.5 % of 2,000 standard
    normal samples of 10 (2,000 resamples each, numpy default_rng(1)). The tables'
    intervals are this kind. Fewer than 2 values (or a non-finite one) give (nan, nan).
    """
    x = np.asarray(values, dtype=float).ravel()
    if not 0 < level < 1:
        raise ValueError(f"level: got {level}; a coverage strictly between 0 and 1")
    if x.size < 2 or not np.all(np.isfinite(x)):
        return float("nan"), float("nan")
    from scipy import stats                  # ~0.2 s to import: only when summarising
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    m = float(x.mean())
    return float(m - half), float(m + half)


def percentile_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """The 95 % percentile bootstrap of the mean (the tables' interval before the t one;
    kept to count the verdicts that change between the two)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    return _interval(x[_resample_indices(x.size)].mean(axis=1), level)


def t_pvalue(values: Sequence[float], null: float = 0.0) -> float:
    """Two-sided one-sample t test of mean = ``null`` (the p-value the t interval inverts:
    p < 0.05 exactly when the 95 % t interval excludes ``null``)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < 2 or not np.all(np.isfinite(x)):
        return float("nan")
    from scipy import stats
    sd = float(x.std(ddof=1))
    if sd == 0:
        return 1.0 if float(x.mean()) == null else 0.0
    t = (float(x.mean()) - null) / (sd / np.sqrt(x.size))
    return float(2 * stats.t.sf(abs(t), x.size - 1))


def sign_rank_pvalue(values: Sequence[float]) -> float:
    """Two-sided Wilcoxon sign-rank test of a median of 0 (no normality assumed), beside the
    t test. Exact and in integers when no two |values| tie (the signed-rank sums counted by
    dynamic programming: p = 2 #{subsets with rank sum <= min(T+, T−)} / 2^n), so the
    p-value does not move with a CPU's last bits (scipy's exact path sums floats, and a
    count of p-values at a threshold moved with them); with ties, scipy's approximation."""
    x = np.asarray(values, dtype=float).ravel()
    x = x[x != 0]
    n = int(x.size)
    if n < 1:
        return float("nan")
    magnitude = np.abs(x)
    if np.unique(magnitude).size < n:
        from scipy import stats
        return float(stats.wilcoxon(x, alternative="two-sided").pvalue)
    ranks = np.empty(n, dtype=np.int64)
    ranks[np.argsort(magnitude, kind="stable")] = np.arange(1, n + 1)
    positive = int(ranks[x > 0].sum())
    t = min(positive, n * (n + 1) // 2 - positive)
    counts = [1] + [0] * (n * (n + 1) // 2)          # subsets of {1..n} by their rank sum
    for r in range(1, n + 1):
        for total in range(len(counts) - 1, r - 1, -1):
            counts[total] += counts[total - r]
    return min(1.0, 2 * sum(counts[: t + 1]) / 2 ** n)


def benjamini_hochberg_rejects(pvalues: Sequence[float], q: float = 0.05) -> np.ndarray:
    """Which of ``pvalues`` the Benjamini–Hochberg step-up procedure rejects at false
    discovery rate ``q``: the k smallest, k the largest with p_(k) <= k q / m. A nan p-value
    is never rejected but counts in m (conservative)."""
    p = np.asarray(pvalues, dtype=float).ravel()
    reject = np.zeros(p.shape, dtype=bool)
    m = p.size
    if m == 0:
        return reject
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    below = np.nonzero(p[order] <= q * np.arange(1, m + 1) / m)[0]   # nan <= x is False
    if below.size:
        reject[order[: below[-1] + 1]] = True
    return reject


def benjamini_hochberg(pvalues: Sequence[float], q: float = 0.05) -> int:
    """How many of ``pvalues`` the Benjamini–Hochberg step-up procedure rejects at false
    discovery rate ``q`` (:func:`benjamini_hochberg_rejects`)."""
    return int(benjamini_hochberg_rejects(pvalues, q).sum())


def _interval(samples: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    tail = (1 - level) / 2
    # inverted_cdf picks resampled values (no interpolation, so +inf stays +inf)
    lo, hi = np.quantile(samples, [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


@dataclass(frozen=True)
class Summary:
    """Mean over seeds with its sample sd and a 95 % Student-t interval."""

    n: int
    mean: float
    sd: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> "Summary":
        x = np.asarray(values, dtype=float)
        if x.size == 0:
            return Summary(0, float("nan"), float("nan"), float("nan"), float("nan"))
        sd = float(x.std(ddof=1)) if x.size > 1 else float("nan")
        low, high = t_interval(x)
        return Summary(int(x.size), float(x.mean()), sd, low, high)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def sign(self) -> int:
        """+1 or −1 when the interval excludes 0, else 0."""
        return 1 if self.low > 0 else -1 if self.high < 0 else 0

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class Ratio:
    """``mean(deep) / mean(shallow) − 1`` over paired seeds, with a paired percentile
    bootstrap interval (seeds resampled together: a ratio of means has no t form), and the
    paired difference ``deep − shallow`` (a t interval)."""

    n: int
    increase: float | None
    low: float | None
    high: float | None
    difference: Summary

    @staticmethod
    def of(shallow: Sequence[float], deep: Sequence[float]) -> "Ratio":
        a, b = np.asarray(shallow, dtype=float), np.asarray(deep, dtype=float)
        if a.shape != b.shape:
            raise ValueError("paired samples must have the same length")
        difference = Summary.of(b - a)
        if a.size == 0 or a.mean() <= 0:      # a ratio to a non-positive mean means nothing
            return Ratio(int(a.size), None, None, None, difference)
        idx = _resample_indices(a.size)
        means_a, means_b = a[idx].mean(axis=1), b[idx].mean(axis=1)
        # a resample whose shallow mean is <= 0 has no finite ratio: it counts as +inf, so
        # when the shallow mean's own interval reaches 0 the upper bound is unbounded
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(means_a > 0, means_b / means_a - 1, np.inf)
        low, high = _interval(ratios)
        return Ratio(int(a.size), float(b.mean() / a.mean() - 1), low, high, difference)

    def to_dict(self) -> dict:
        return {"n": self.n, "increase": self.increase,
                "ci95": None if self.low is None else [self.low, self.high],
                "difference": self.difference.to_dict()}


def forgetting_patterns(F_k: np.ndarray) -> dict[str, int]:
    """How many seeds forget which feature (F_k > 0), and in how many feature 1 loses more
    than feature 2 (the split that shows a bimodal outcome): rows are seeds, columns F_1, F_2."""
    F_k = np.asarray(F_k, dtype=float).reshape(-1, 2)
    up = F_k > 0
    return {"only 1": int(np.sum(up[:, 0] & ~up[:, 1])),
            "only 2": int(np.sum(~up[:, 0] & up[:, 1])),
            "both": int(np.sum(up[:, 0] & up[:, 1])),
            "neither": int(np.sum(~up[:, 0] & ~up[:, 1])),
            "F_1 > F_2": int(np.sum(F_k[:, 0] > F_k[:, 1]))}
