"""A progress bar on stderr for long ``predict`` runs (rich, imported only when shown).

The bar appears only once a run has lasted ``after`` seconds (short runs print nothing
extra), only when stderr is a terminal, and disappears when the run ends; the numbers it
shows are the steps done against each phase's estimate (``oodcalc.estimates``).
"""

from __future__ import annotations

import threading
import time


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
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        with self._lock:
            self._bar = Progress(
                TextColumn("{task.description:<12}"), BarColumn(),
                TextColumn("{task.completed:>13,.0f} of ≈{task.total:,.0f} steps"),
                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            for phase in self._phases:
                self._update(phase)

    def _update(self, phase: str) -> None:
        done, expected = self._phases[phase]
        total = max(float(expected), float(done), 1.0)
        if phase not in self._tasks:
            self._tasks[phase] = self._bar.add_task(phase, total=total)
        self._bar.update(self._tasks[phase], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
