"""Inference over seeds (issue 31, items 4 and 5): the Student-t interval, the
Benjamini–Hochberg count, runs counted, and the torch experiments on a dask cluster."""

from __future__ import annotations

import numpy as np
import pytest

from oodcalc.depth.statistics import t_interval

# t_{9, 0.975} = 2.262157162798205: python -c "from scipy import stats; print(stats.t.ppf(0.975, 9))"
# values 1..10: mean 5.5, sd = sqrt(55/6), so half = 2.262157162798205 * sqrt(55/6) / sqrt(10)
TEN = np.arange(1.0, 11.0)
HALF_TEN = 2.262157162798205 * np.sqrt(55 / 6) / np.sqrt(10)


def _agrees_with_student_t(interval) -> bool:
    """The hand example and scipy's own t interval (loc/scale path) on skewed data."""
    from scipy import stats
    lo, hi = interval(TEN)
    if not (abs(lo - (5.5 - HALF_TEN)) < 1e-12 and abs(hi - (5.5 + HALF_TEN)) < 1e-12):
        return False
    x = np.random.default_rng(7).exponential(size=10) ** 2
    ref = stats.t.interval(0.9, x.size - 1, loc=x.mean(), scale=stats.sem(x))
    return bool(np.allclose(interval(x, 0.9), ref, rtol=0, atol=1e-12))


def test_t_interval_is_the_student_t_interval():
    assert _agrees_with_student_t(t_interval)


def test_a_normal_quantile_at_ten_seeds_is_caught():
    from scipy import stats

    def z_interval(values, level=0.95):
        x = np.asarray(values, float)
        half = stats.norm.ppf(0.5 + level / 2) * x.std(ddof=1) / np.sqrt(x.size)
        return x.mean() - half, x.mean() + half

    def plug_in_sd(values, level=0.95):
        x = np.asarray(values, float)
        half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=0) / np.sqrt(x.size)
        return x.mean() - half, x.mean() + half

    assert not _agrees_with_student_t(z_interval)
    assert not _agrees_with_student_t(plug_in_sd)


def test_t_interval_edges():
    assert all(np.isnan(t_interval([1.0])))
    assert all(np.isnan(t_interval([1.0, np.inf, 2.0])))
    assert t_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    with pytest.raises(ValueError, match="level"):
        t_interval(TEN, 1.0)
