"""Where human output goes: a rich console that reads well on a terminal and when piped.

On a terminal, lines are wrapped at its width, but only at spaces that do not sit inside a
formula (``Q = 0``, ``e_k <= ε``, ``L = Σ e_k/K`` stay on one line). Piped (or redirected),
nothing is wrapped: a line of output is one line, and tables get ``PIPE_WIDTH`` columns;
``$COLUMNS``, when set, makes any output behave like a terminal of that width.
"""

from __future__ import annotations

import math
import os
import re
import sys

__all__ = [
    "COMPARISONS", "OPERATORS", "PIPE_WIDTH", "StripTrailing", "UNIVERSE_YEARS", "YEAR",
    "breaks", "duration", "make_console", "say",
]


#: Width given to tables when the output is not a terminal and $COLUMNS is not set.
PIPE_WIDTH = 160

#: A space next to one of these words binds its neighbours together (a formula).
OPERATORS = frozenset({"=", "<=", ">=", "≤", "≥", "≈", "±", "×", "→", "<", ">", "+", "−",
                       "-", "Σ", "in"})


#: A line may start with a comparison after a number: ``a = 0.9`` / ``< b = 1``.
COMPARISONS = frozenset({"<", ">", "<=", ">=", "≤", "≥"})
_NUMBER = re.compile(r"^[+−-]?\d[\d.e+−-]*[,;]?$")


def _breakable(plain: str) -> list[int]:
    """Offsets just after each run of spaces where a line may break."""
    out = []
    for match in re.finditer(r" +", plain):
        before = plain[:match.start()].rsplit(" ", 1)[-1]
        after = plain[match.end():].split(" ", 1)[0]
        after_number = after in COMPARISONS and _NUMBER.match(before)
        if before and after and before not in OPERATORS \
                and (after not in OPERATORS or after_number):
            out.append(match.end())
    return out


def make_console(stderr: bool = False):
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(highlight=False, stderr=stderr)
    return Console(highlight=False, stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


def breaks(plain: str, width: int, indent: int = 0) -> list[int]:
    """Offsets where a greedy wrap at ``width`` starts a new line (never inside a formula)."""
    starts, line_start, last = [], 0, None
    for offset in _breakable(plain) + [len(plain) + 1]:
        room = width - (indent if starts else 0)
        if len(plain[line_start:offset].rstrip()) > room and last is not None \
                and last > line_start:
            starts.append(last)
            line_start = last
        last = offset
    return starts


def say(console, markup: str, indent: int = 0, style: str | None = None) -> None:
    """Print rich markup, wrapped formula-aware on a terminal, never wrapped when piped."""
    from rich.text import Text
    text = Text.from_markup(markup, style=style or "")
    if console.soft_wrap:
        console.print(text, soft_wrap=True)
        return
    offsets = breaks(text.plain, console.width, indent)
    for i, line in enumerate(text.divide(offsets)):
        line.rstrip()
        if i:
            line = Text(" " * indent) + line
        console.print(line, soft_wrap=True)


#: Seconds in a (Julian) year, and the age of the universe in years (13.8 billion).
YEAR = 365.25 * 86400
UNIVERSE_YEARS = 1.38e10


def duration(seconds: float) -> str:
    """``95 s``, ``12 min``, ``3.1 h``, ``5.2 days``, ``1,400 years``: a duration as a
    person reads it, however long (an estimate of 10^290 hours stays one short phrase)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.2g} h"
    if seconds < 2 * YEAR:
        return f"{seconds / 86400:.2g} days" if seconds < 10 * 86400 \
            else f"{seconds / 86400:,.0f} days"
    years = seconds / YEAR
    if years < 1e6:
        return f"{years:,.0f} years"
    if not math.isfinite(years):
        return "forever"
    return (f"{years:.1g} years" if years < UNIVERSE_YEARS
            else f"{years:.1g} years (longer than the age of the universe)")


class StripTrailing:
    """A text stream that writes every line to ``stream`` without the spaces at its end.

    Piped, rich pads each line of a table (and typer its help) to the table's width; the
    padding is invisible on a terminal but stays in a file or a diff. A line's trailing
    spaces are held until the line goes on (they were inside it) or ends (dropped)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._spaces = ""          # spaces written at the end of the current line so far

    def write(self, text: str) -> int:
        lines = text.split("\n")
        out = []
        for i, line in enumerate(lines):
            if i:                                  # a line ended: its trailing spaces go
                out.append("\n")
                self._spaces = ""
            body = line.rstrip(" ")
            if body:
                out.append(self._spaces + body)
                self._spaces = line[len(body):]
            else:
                self._spaces += line
        self._stream.write("".join(out))
        return len(text)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
