"""Optional fused loops compiled by Numba (``pip install "oodcalc[fast]"``).

Each kernel is the plain-Python source that oodcalc also runs without Numba, compiled
unchanged, so both give the same numbers (the tests check it); Numba is imported only
when a run is long enough to pay for the import and the compilation (about a second,
cached on disk after the first time). Without Numba every function here returns None
and the caller keeps its NumPy or plain-Python path.
"""

from __future__ import annotations

import functools


@functools.cache
def numba():
    try:
        import numba
    except ImportError:
        return None
    return numba


@functools.cache
def ray_step_loop():
    """:func:`oodcalc.dynamics.ray_step_loop`, compiled; None without Numba."""
    nb = numba()
    if nb is None:
        return None
    from .dynamics import ray_step_loop as loop
    return nb.njit(cache=True, nogil=True)(loop)


def available() -> bool:
    return numba() is not None
