"""Optional fused loops compiled by Numba (``pip install "oodcalc[fast]"``).

Two kinds of kernels, both used only when a run is long enough to pay for importing Numba
and loading the compiled code (about a second; compiled once, then cached on disk):

* the symmetric ray's scalar recurrence: the plain-Python source that oodcalc also runs
  without Numba (:func:`oodcalc.finetune.ray_loop.ray_step_loop`), compiled unchanged, so both
  give the same numbers bit for bit (the tests check it);
* the per-column K×K fine-tuning and the sweeps' margin pass
  (:mod:`oodcalc.finetune._kernels`), whose fallbacks are the NumPy K×K descent and margin
  engine: the same arithmetic up to rounding (T2 identical and F_k to 1e-12 in the
  tests).

Without Numba every accessor here returns None and the caller keeps its NumPy or
plain-Python path. This module is a plug-in of :mod:`oodcalc.finetune.dynamics` (and of ``predict``
and ``sweep``): it imports the loops it compiles, never the modules that choose them.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys

from ..errors import InputError


__all__ = [
    "PAYS_FROM_WORK", "THREADS_VARIABLE", "expected_threads", "loaded", "threads",
    "threads_variable",
]


#: Logit updates (steps × logits) from which a sweep's compiled column kernel pays for
#: importing Numba and loading its code (about a second, more on a loaded machine; the
#: batched NumPy descent does about 3e7 updates a second there, the kernel 2-3e8).
PAYS_FROM_WORK = 2e8


#: Margin work, estimated as rows × K × T1, from which a sweep's compiled margin pass
#: pays for importing Numba and loading its code when Numba is not loaded yet (0.9 s of
#: CPU measured at load 13; the pass saves ~8 ns a distinct margin-step over the NumPy
#: margin engine, and the estimate counts ~3.6× the distinct margin-steps of a 201² map).
PAYS_FROM_MARGIN_STEPS = 2e8


#: Numba's thread-count variable: Numba reads it when imported and crashes on a bad value
#: (0: a ValueError inside Numba; 1,000,000: a segmentation fault, nothing on stderr).
THREADS_VARIABLE = "NUMBA_NUM_THREADS"


def threads_variable() -> int | None:
    """``NUMBA_NUM_THREADS`` as a thread count (None when unset or empty), refused unless
    it is an integer from 1 to the machine's cores: checked before Numba is imported."""
    text = os.environ.get(THREADS_VARIABLE)
    if not text:
        return None
    cores = os.cpu_count() or 1
    if not re.fullmatch(r"\s*\+?[0-9]{1,7}\s*", text, re.ASCII) or \
            not 1 <= int(text) <= cores:
        raise InputError(THREADS_VARIABLE, repr(text[:40] + ("…" if len(text) > 40 else "")),
                         f"expected an integer from 1 to {cores} (this machine's cores), "
                         f"or leave {THREADS_VARIABLE} unset for one thread per core")
    return int(text)


@functools.cache
def numba():
    threads_variable()     # Numba reads it on import: refuse a bad value before then
    try:
        import numba
    except ImportError:
        return None
    return numba


@functools.cache
def available() -> bool:
    """Numba is installed, found without importing it (the import alone takes ~0.15 s, as
    long as a whole small ``predict``); the kernels' accessors import it when a run uses
    them, and return None if that fails."""
    return importlib.util.find_spec("numba") is not None


def loaded() -> bool:
    """Numba is already imported in this process (a compiled kernel costs less now)."""
    return "numba" in sys.modules


def threads() -> int:
    """Threads the parallel kernels use (Numba's default: one per core)."""
    nb = numba()
    return nb.get_num_threads() if nb is not None else 1


def expected_threads() -> int:
    """:func:`threads` as Numba will choose them, without importing it (for estimates):
    ``NUMBA_NUM_THREADS``, else the cores this process may run on."""
    n = threads_variable()
    if n is None:
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        n = max(1, len(cores) if cores else os.cpu_count() or 1)
    return n


@functools.cache
def ray_step_loop():
    """:func:`oodcalc.finetune.ray_loop.ray_step_loop`, compiled; None without Numba."""
    nb = numba()
    if nb is None:
        return None
    from .ray_loop import ray_step_loop as loop
    return nb.njit(cache=True, nogil=True)(loop)


@functools.cache
def finetune_diagonal():
    """:func:`oodcalc.finetune._kernels.finetune_diagonal`; None without Numba."""
    if numba() is None:
        return None
    from ._kernels import finetune_diagonal
    return finetune_diagonal


@functools.cache
def column_kernels():
    """``(serial, parallel)`` :func:`oodcalc.finetune._kernels.columns_advance`; None without
    Numba."""
    if numba() is None:
        return None
    from ._kernels import columns_advance, columns_advance_parallel
    return columns_advance, columns_advance_parallel


@functools.cache
def margin_pass():
    """:func:`oodcalc.finetune._kernels.margin_pass`; None without Numba."""
    if numba() is None:
        return None
    from ._kernels import margin_pass
    return margin_pass
