"""Shared helpers for the benchmark scripts: timing, the machine line, a plain table."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout too


def timed(fn, *args, repeat: int = 3, **kwargs):
    """``(best seconds, last result)`` over ``repeat`` calls."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best, result


def user_env(**extra: str) -> dict[str, str]:
    """The environment for a timed fresh process, as a user's install runs: Python may
    cache compiled bytecode (this machine sets PYTHONDONTWRITEBYTECODE=1, and compiling
    oodcalc's sources on every start took ~12 ms of a 0.2 s command)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return env | extra


def median(xs):
    return statistics.median(xs)


def machine() -> str:
    import numpy as np
    blas = "?"
    try:
        from threadpoolctl import threadpool_info
        info = threadpool_info()
        blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} "
                         f"({i.get('architecture')}, {i.get('num_threads')} threads)" for i in info)
    except ImportError:
        pass
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, numpy {np.__version__}; BLAS: {blas}; "
            f"OPENBLAS env: {env or 'unset'}")


def table(headers, rows) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in cells)])


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def load() -> str:
    """The 1-minute load average now (the machine is shared: read every time beside it)."""
    return f"{os.getloadavg()[0]:.1f}"
