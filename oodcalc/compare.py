"""Field-by-field comparison of two Reports (theory against a simulator).

Both sides share one schema (:mod:`oodcalc.report`), so the comparison walks the JSON form
of each: every numeric field gets its largest absolute and relative difference, every
text field (a trend) whether it agrees; fields only one side has (the theory's α*, its
regimes, the step-size bound) are listed with the other side empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .report import Report

__all__ = ["FieldDiff", "SKIP", "compare"]


SKIP = {"source", "parameters"}


@dataclass(frozen=True)
class FieldDiff:
    field: str
    theory: Any
    simulation: Any
    max_abs: float | None = None   # numeric fields present on both sides
    max_rel: float | None = None   # relative to the largest |theory| entry of the field
    agree: bool | None = None      # text fields present on both sides

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "theory": self.theory, "simulation": self.simulation,
                "max_abs": self.max_abs, "max_rel": self.max_rel, "agree": self.agree}


def _numeric(value: Any) -> np.ndarray | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return np.array(value, dtype=np.float64)
    if isinstance(value, list):
        try:
            arr = np.array(value, dtype=np.float64)   # None -> nan (diagonals of β)
        except (TypeError, ValueError):
            return None
        return arr if arr.dtype.kind == "f" else None
    return None


def _walk(path: str, a: Any, b: Any, out: list[FieldDiff]) -> None:
    if isinstance(a, dict) or isinstance(b, dict):
        a, b = a or {}, b or {}
        for key in list(a) + [k for k in b if k not in a]:
            if not path and key in SKIP:
                continue
            _walk(f"{path}.{key}" if path else key, a.get(key), b.get(key), out)
        return
    if (isinstance(a, list) and a and isinstance(a[0], dict)) or \
            (isinstance(b, list) and b and isinstance(b[0], dict)):
        for i in range(max(len(a or []), len(b or []))):
            left = a[i] if a and i < len(a) else None
            right = b[i] if b and i < len(b) else None
            label = (left or right).get("k", i + 1)
            _walk(f"{path}[k={label}]", left, right, out)
        return
    x, y = _numeric(a), _numeric(b)
    if x is not None and y is not None and x.shape == y.shape:
        both = np.isfinite(x) & np.isfinite(y)
        diff = np.abs(x - y)[both]
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(x[both]).max()) if diff.size else 0.0
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        out.append(FieldDiff(path, a, b, max_abs, max_rel))
    elif a is not None and b is not None and not isinstance(a, (list, float, int)):
        out.append(FieldDiff(path, a, b, agree=a == b))
    else:
        out.append(FieldDiff(path, a, b))


def compare(theory: Report, simulation: Report) -> list[FieldDiff]:
    """Every field of the shared schema, theory beside simulation."""
    out: list[FieldDiff] = []
    _walk("", theory.to_dict(full=True), simulation.to_dict(full=True), out)
    return out
