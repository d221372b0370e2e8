"""Progress on stderr (rich, imported only when shown), so that stdout stays the result.

:class:`StepProgress`, for long ``predict`` runs: the bar appears only once a run has
lasted ``after`` seconds (short runs print nothing extra), only when stderr is a terminal,
and disappears when the run ends; the numbers it shows are the steps done against each
phase's estimate (``oodcalc.estimates``) and the time left at the pace so far.

:func:`rows_progress`, for the maps of ``explore`` and ``plot phase-k3``/``phase-diagram``
(one sweep of many configurations): on a terminal a bar counts the configurations and
shows the time left; piped or logged, nothing.

:func:`count_progress`, for runs made of items (the depth experiment's trainings, the
ledger's rows, the synthetic reproduction's settings): the library calls
``progress(done, total, label)`` as each item finishes; on a terminal a bar counts them,
otherwise a line per finished item can say so.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from typing import Callable, Iterator

from ..console import duration


class StepProgress:
    """``with StepProgress() as progress: predict(setting, progress=progress)``."""

    def __init__(self, after: float = 2.0) -> None:
        self.after = after
        self._lock = threading.Lock()
        self._phases: dict[str, tuple[int, float]] = {}      # phase → (done, expected)
        self._bar = None
        self._tasks: dict[str, int] = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "StepProgress":
        self._started = time.monotonic()
        self._timer = threading.Timer(self.after, self._show)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __call__(self, phase: str, done: int, expected: float) -> None:
        with self._lock:
            self._phases[phase] = (done, expected)
            if self._bar is not None:
                self._update(phase)

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
        with self._lock:
            # the time left, not the time spent: what someone waiting wants to know
            self._bar = Progress(
                TextColumn("{task.description:<12}"), BarColumn(),
                TextColumn("{task.completed:>13,.0f} of ≈{task.total:,.0f} steps"),
                TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True),
                transient=True)
            self._bar.start()
            for phase in self._phases:
                self._update(phase)

    def _update(self, phase: str) -> None:
        from rich.markup import escape
        done, expected = self._phases[phase]
        total = max(float(expected), float(done), 1.0)
        if phase not in self._tasks:
            self._tasks[phase] = self._bar.add_task(escape(phase), total=total)   # no markup
        self._bar.update(self._tasks[phase], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        with self._lock:
            if self._bar is not None:
                self._bar.stop()


def stderr_console():
    """The console progress is drawn on (a test replaces it by a terminal of its own)."""
    from rich.console import Console
    return Console(stderr=True)


@contextlib.contextmanager
def rows_progress(title: str, console=None) -> Iterator[Callable[[int, int], None] | None]:
    """``with rows_progress("K = 3 slices") as progress: sweep(..., progress=progress)``.

    On a terminal (stderr by default), ``progress(done, total)`` moves a bar that shows
    the configurations done and the time left, and disappears at the end. Otherwise
    (piped, logged, a test) it is None: nothing is printed and stdout stays the result."""
    console = console or stderr_console()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeRemainingColumn)
    with Progress(TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = None

        def update(done: int, total: int) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task("", total=total)
            bar.update(task, completed=done, total=total)
        yield update


#: A line :func:`count_progress` prints for a finished item (``verify: 3/13 claim 3 …``):
#: progress, not a diagnostic; a run that fails after it still ends with one error line.
PROGRESS_LINE = re.compile(r"^[a-z]+: \d+/\d+ ")


#: A run estimated to last longer than this says so on stderr before it starts.
LONG_RUN_SECONDS = 60.0


def announce(command: str, seconds: float, words: str) -> None:
    """``oodcalc: COMMAND: this run will take about 12 min WORDS`` on stderr, for a run
    estimated past :data:`LONG_RUN_SECONDS` (with or without --json: stdout is the result)."""
    if seconds > LONG_RUN_SECONDS:
        print(f"oodcalc: {command}: this run will take about {duration(seconds)}{words}",
              file=sys.stderr)


@contextlib.contextmanager
def count_progress(title: str, lines: bool = False, console=None,
                   eta: bool = False) -> Iterator[Callable[[int, int, str], None]]:
    """``with count_progress("verify", lines=True) as progress: ledger(..., progress=progress)``.

    ``progress(done, total, label)`` is told of each finished item (``done = 0``: the run
    starts). When ``console`` (default: stderr) is a terminal, a bar shows ``title``, the
    count, the time and the last label, and disappears at the end; otherwise, with
    ``lines``, each finished item prints one line ``title: done/total label`` on it (a piped
    or logged run is not silent), and without ``lines`` nothing is printed. With ``eta``
    each line ends with the time left at the pace so far, and a label given with
    ``done = 0`` (what will run) is printed as a line of its own."""
    from rich.console import Console

    console = console or Console(stderr=True)
    if not console.is_terminal:
        started = time.monotonic()

        def line(done: int, total: int, label: str) -> None:
            if not lines or not (done or (eta and label)):
                return
            text = f"{title}: {done}/{total} {label}" if done else f"{title}: {label}"
            if eta and 0 < done < total:
                left = (time.monotonic() - started) / done * (total - done)
                text += f" (ETA {duration(left)})"
            print(text, file=console.file, flush=True)
        yield line
        return

    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn
    with Progress(TextColumn(title), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = None

        def update(done: int, total: int, label: str) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task("", total=total)
            bar.update(task, completed=done, description=escape(label))   # text, not markup
        yield update
