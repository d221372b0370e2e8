"""The paper oodcalc implements, and every figure of it that oodcalc compares against.

The figures live in ``paper_figures.toml`` beside this module (one record per printed
number: value, quantity, setting, and the table row that reports it), so the
reproductions, the docs and the tests read one source.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

__all__ = ["ARXIV", "CITATION", "Figure", "TITLE", "URL", "VENUE", "figure", "radians"]


TITLE = "Theory on Attention Dynamics for Out-of-Distribution In-Context Learning"
VENUE = "NeurIPS 2026"
ARXIV = "2609.36448"
CITATION = f"{TITLE} ({VENUE}), arXiv {ARXIV}"
URL = f"https://arxiv.org/abs/{ARXIV}"


@dataclass(frozen=True)
class Figure:
    """One number (or qualitative statement) the paper reports."""

    id: str
    experiment: str
    quantity: str
    printed: str
    where: str
    value: float | None = None
    setting: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def source(self) -> str:
        """Where the figure is reported: the table row, and the paper."""
        return f"arXiv {ARXIV}, {self.where}"


@functools.lru_cache(maxsize=None)
def figures() -> dict[str, Figure]:
    """Every figure, by id, in the order of the data file."""
    text = resources.files(__package__).joinpath("paper_figures.toml").read_text("utf-8")
    return {row["id"]: Figure(**row) for row in tomllib.loads(text)["figure"]}


def figure(figure_id: str) -> Figure:
    """One figure by id; a KeyError names the ids that exist."""
    try:
        return figures()[figure_id]
    except KeyError:
        raise KeyError(f"no paper figure {figure_id!r}; known: {', '.join(figures())}") from None


_MULTIPLE_OF_PI = re.compile(r"^\s*([+-]?\d*\.?\d*)\s*pi\s*(?:/\s*(\d+\.?\d*))?\s*$")


def radians(angle: float | str) -> float:
    """An angle of a figure's setting in radians: a number, or ``"pi/6"``-style text
    (the data file writes multiples of π as text, since TOML has no π)."""
    if isinstance(angle, (int, float)):
        return float(angle)
    match = _MULTIPLE_OF_PI.match(angle)
    if match is None:
        raise ValueError(f"not an angle: {angle!r} (expected a number or a multiple of pi)")
    factor = {"": 1.0, "+": 1.0, "-": -1.0}.get(match.group(1))
    factor = float(match.group(1)) if factor is None else factor
    return factor * math.pi / float(match.group(2) or 1)
