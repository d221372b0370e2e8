"""The paper oodcalc implements, and every figure of it that oodcalc compares against.

The figures live in ``paper_figures.toml`` beside this module (one record per printed
number: value, quantity, setting, and the table row that reports it), so the
reproductions, the docs and the tests read one source.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

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
