"""``oodcalc sweep``: many configurations at once, written to a CSV (or NPZ) file.

Grid syntax (every option is text, parsed here with one-line errors):

- a RANGE is ``START:STOP:NUM``: NUM evenly spaced values, both ends included
  (``-1:1:201``); ``START:STOP:NUM:log`` spaces them geometrically (``1e-3:1e-1:5:log``).
- ``--gamma`` takes one entry per feature, comma-separated, each a number or a RANGE;
  the grid is their product: ``--gamma=-1:1:201,-1:1:201`` is the K = 2 phase diagram,
  ``--gamma 1,-0.9`` one configuration (as in ``oodcalc predict``). Repeat ``--gamma``
  to append more grids.
- ``--theta``, ``--K``, ``--eps``, ``--eta``, ``--eta-ft`` take comma-separated items,
  each a value or a RANGE (angles accept ``pi/6`` forms), and enter the product.
"""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from .. import limits
from ..errors import InputError
from ..setting import DEFAULT_EPS, DEFAULT_ETA, DEFAULT_MAX_STEPS
from . import options
from .app import app
from .setting_options import L2, Project, Replay, Weights, build_protocol, interventions

Text = Optional[str]
#: Show a progress bar (on a terminal) from this many configurations on.
PROGRESS_FROM = 2000


class Format(str, Enum):
    csv = "csv"
    npz = "npz"


def _range(option: str, item: str, parse, allow_log: bool) -> list[float]:
    parts = item.split(":")
    log = allow_log and len(parts) == 4 and parts[3].strip().lower() == "log"
    usage = ("expected a number or a range START:STOP:NUM"
             + (" (or START:STOP:NUM:log)" if allow_log else "") + ", e.g. -1:1:201")
    if len(parts) != 3 and not log:
        raise InputError(option, repr(item), usage)
    start, stop = parse(option, parts[0].strip()), parse(option, parts[1].strip())
    num_text = parts[2].strip()
    num = int(num_text) if num_text.isascii() and num_text.isdigit() else 0
    if num < 1:
        raise InputError(option, repr(item), f"NUM in START:STOP:NUM must be an integer >= 1, "
                         f"got {num_text!r}")
    if num > limits.MAX_AXIS:
        raise InputError(option, repr(item), f"NUM in START:STOP:NUM is at most "
                         f"{limits.MAX_AXIS:,} (a sweep holds at most {limits.MAX_ROWS:,} "
                         "configurations)")
    if log:
        if start <= 0 or stop <= 0:
            raise InputError(option, repr(item), "a :log range needs START and STOP > 0")
        return np.geomspace(start, stop, num).tolist()
    return np.linspace(start, stop, num).tolist()


def axis(option: str, text: str, parse=options.number, allow_log: bool = True) -> list[float]:
    """Comma-separated items, each a value or a RANGE, in the order given."""
    values: list[float] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise InputError(option, repr(text), "an empty entry; expected comma-separated "
                             "values or ranges START:STOP:NUM")
        if ":" in item:
            values += _range(option, item, parse, allow_log)
        else:
            values.append(parse(option, item))
    return values


def gamma_axes(option: str, text: str) -> list[list[float]]:
    """One axis per feature: ``-1:1:201,-1:1:201`` or ``1,-0.9``."""
    axes = []
    for item in text.split(","):
        if not item.strip():
            raise InputError(option, repr(text), "an empty entry; expected one number or "
                             "range START:STOP:NUM per feature, comma-separated")
        axes.append(axis(option, item, allow_log=False))
    return axes


def _positive(option: str, text: str) -> float:
    x = options.number(option, text, "expected a finite number > 0")
    if x <= 0:
        raise InputError(option, repr(text), "expected a finite number > 0")
    return x


def _K(option: str, text: str) -> float:
    return float(options.integer(option, text, 2))


def _count(option: str, values: list) -> int:
    return len(values)


def build_grids(gamma: list[str] | None, theta: Text, K: Text, eps: Text, eta: Text,
                eta_ft: Text, workers: int = 1):
    """Turn the command-line text into validated grids (errors name the option); the
    number of configurations and their memory are checked before any grid is built."""
    from ..sweep import gamma_grid, theta_grid

    if bool(gamma) == (theta is not None):
        raise InputError("geometry", "--gamma and --theta" if gamma else "none",
                         "choose exactly one of --gamma (repeatable) or --theta with --K")
    protocol = {
        "eps": axis("--eps", eps, _positive) if eps is not None else DEFAULT_EPS,
        "eta": axis("--eta", eta, _positive) if eta is not None else DEFAULT_ETA,
        "eta_ft": axis("--eta-ft", eta_ft, _positive) if eta_ft is not None else None,
    }
    per_geometry = 1
    for values in protocol.values():
        per_geometry *= len(values) if isinstance(values, list) else 1
    if gamma:
        if K is not None:
            raise InputError("--K", K, "K follows from the number of --gamma entries; omit --K")
        planned = []
        for text in gamma:
            axes = gamma_axes("--gamma", text)
            if len(axes) < 2:
                raise InputError("--gamma", repr(text), "give one entry per feature, at "
                                 "least 2 (K >= 2), e.g. --gamma=-1:1:201,-1:1:201")
            planned.append((len(axes), per_geometry * _product(len(a) for a in axes), axes))
        _check_size(planned, "--gamma", workers)
        return [gamma_grid(axes, **protocol, name="--gamma") for _, _, axes in planned]
    if K is None:
        raise InputError("--K", "nothing", "--theta needs the number of features, e.g. --K 4 "
                         "or --K 2,4,8")
    thetas = axis("--theta", theta, options.angle, allow_log=False)
    Ks = [int(k) for k in axis("--K", K, _K, allow_log=False)]
    planned = [(k, per_geometry * len(thetas), None) for k in dict.fromkeys(Ks)]
    _check_size(planned, "--theta/--K", workers)
    return [theta_grid(thetas, k, **protocol) for k, _, _ in planned]


def _product(counts) -> int:
    n = 1
    for c in counts:
        n *= c
    return n


def _check_size(planned, option: str, workers: int) -> None:
    """The library's guard of a sweep's size, before any grid is built."""
    by_K: dict[int, int] = {}
    for k, n, _ in planned:
        by_K[k] = by_K.get(k, 0) + n
    options.name_parameters({"rows": option})
    limits.check_rows(by_K, workers)


def _executor(n: int | None, workers: Text, scheduler: Text, tasks: int):
    """``(executor, closer)`` for --workers / --scheduler; ``(None, None)`` for serial.
    Never more local processes than tasks (one configuration runs here)."""
    executor, close = options.scheduler_executor(scheduler, None if n is None else workers)
    if executor is not None:
        return executor, close
    n = min(n or 1, tasks)
    if n > 1:
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=n)
        return pool, lambda: pool.shutdown(cancel_futures=True)
    return None, None


@app.command()
def sweep(
    output: Annotated[str, typer.Option("--output", "-o", metavar="PATH",
        help="Result file, written atomically: .csv (one row per configuration) or .npz; "
             "'-' prints CSV to stdout.")],
    gamma: Annotated[Optional[list[str]], typer.Option("--gamma", metavar="SPEC,SPEC,...",
        help="Parallel shift, one entry per feature, each a number or a range START:STOP:NUM; "
             "the grid is their product (--gamma=-1:1:201,-1:1:201). Repeatable.",
        rich_help_panel="Geometry (choose one)")] = None,
    theta: Annotated[Text, typer.Option("--theta", metavar="LIST",
        help="Rotation angles in radians: values or ranges, comma-separated "
             "(0:pi/2:91); needs --K.", rich_help_panel="Geometry (choose one)")] = None,
    K: Annotated[Text, typer.Option("--K", "-K", metavar="LIST",
        help="Number(s) of features for --theta, e.g. 4 or 2,4,8.",
        rich_help_panel="Geometry (choose one)")] = None,
    eps: Annotated[Text, typer.Option("--eps", metavar="LIST",
        help="Stopping rule(s) e_k <= eps: values or ranges (1e-3:1e-1:5:log).",
        show_default=f"{DEFAULT_EPS:g}", rich_help_panel="Protocol")] = None,
    eta: Annotated[Text, typer.Option("--eta", metavar="LIST",
        help="Pretraining step size(s).", show_default=f"{DEFAULT_ETA:g}",
        rich_help_panel="Protocol")] = None,
    eta_ft: Annotated[Text, typer.Option("--eta-ft", metavar="LIST",
        help="Fine-tuning step size(s).", show_default="each row's --eta",
        rich_help_panel="Protocol")] = None,
    max_steps: Annotated[Text, typer.Option("--max-steps", metavar="INT",
        help="Step cap per phase; rows that hit it are marked converged=false.",
        show_default=f"{DEFAULT_MAX_STEPS}", rich_help_panel="Protocol")] = None,
    eps_ft: Annotated[Text, typer.Option("--eps-ft", metavar="FLOAT",
        help="Fine-tuning's own stopping rule (every row): every e_k <= eps-ft.",
        show_default="each row's --eps", rich_help_panel="Protocol")] = None,
    ft_steps: Annotated[Text, typer.Option("--ft-steps", metavar="INT",
        help="Fine-tune every row exactly INT steps, with no stopping rule (not with "
             "--eps-ft).", show_default="off: until the stopping rule",
        rich_help_panel="Protocol")] = None,
    replay: Replay = None, l2: L2 = None, project: Project = None, weights: Weights = None,
    fmt: Annotated[Optional[Format], typer.Option("--format",
        help="Output format.", show_default="from the file's extension; csv for -",
        case_sensitive=False)] = None,
    workers: Annotated[Text, typer.Option("--workers", metavar="N",
        help="Fine-tune in N local processes (never more than there are chunks).",
        show_default="1", rich_help_panel="Execution")] = None,
    scheduler: Annotated[Text, typer.Option("--scheduler", metavar="ADDRESS",
        help="Run on a dask.distributed cluster (tcp://host:8786); needs "
             "pip install \"oodcalc\\[dask]\".", show_default="local",
        rich_help_panel="Execution")] = None,
    chunk_size: Annotated[Text, typer.Option("--chunk-size", metavar="INT",
        help="Configurations per task.", show_default="all at once serially, 1/16 of the "
        "grid otherwise", rich_help_panel="Execution")] = None,
    seed: Annotated[Text, typer.Option("--seed", metavar="INT",
        help="Root seed; each chunk gets its own via SeedSequence.spawn (recorded; the "
             "exact dynamics are deterministic).", show_default="0",
        rich_help_panel="Execution")] = None,
    progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress",
        help="Progress bar on stderr.",
        show_default=f"on a terminal, from {PROGRESS_FROM} configurations")] = None,
) -> None:
    """Sweep γ, θ, ε and η: T1, T2, OOD loss, forgetting F and F_k, regimes per row.

    Examples: oodcalc sweep --gamma=-1:1:201,-1:1:201 -o phase.csv;
    oodcalc sweep --gamma=1,-1:1:21 --replay 0.1 -o replay.csv (interventions for every row)
    """
    from ..io import check_output
    from ..sweep import FORMATS, sweep as run_sweep

    steps = options.integer("--max-steps", max_steps, 1, limits.MAX_STEPS, "steps per phase") \
        or DEFAULT_MAX_STEPS
    rule = build_protocol(None, None, None, None, eps_ft, ft_steps)   # checks the pair
    finetune = {"eps_ft": None if eps_ft is None else rule.eps_ft, "ft_steps": rule.ft_steps,
                "interventions": interventions(replay, l2, project, weights) or None}
    chunk = options.integer("--chunk-size", chunk_size, 1)
    root_seed = options.integer("--seed", seed, 0) or 0
    n_workers = options.integer("--workers", workers, 1)
    if output == "-":
        form = fmt.value if fmt is not None else "csv"
        if form != "csv":
            raise InputError("--format", form, "only csv can go to stdout; give -o FILE.npz")
    else:
        suffix = Path(output).suffix.lower().lstrip(".")
        form = fmt.value if fmt is not None else suffix
        if suffix != form:
            raise InputError("--output", repr(output), "a file name ending in .csv or .npz"
                             + (f" (.{form} for --format {form})" if fmt is not None else ""))
        check_output(output, "--output", suffixes=tuple(f".{f}" for f in FORMATS))
    grids = build_grids(gamma, theta, K, eps, eta, eta_ft, workers=n_workers or 1)
    total = sum(len(g) for g in grids)
    show = progress if progress is not None else (sys.stderr.isatty() and total >= PROGRESS_FROM)
    tasks = -(-total // chunk) if chunk else (16 if total >= 16 else total)
    executor, close = _executor(n_workers, workers, scheduler, tasks)
    started = time.perf_counter()
    try:
        if show:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)
            with Progress(TextColumn("fine-tuning"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=Console(stderr=True),
                          transient=True) as bar:
                task = bar.add_task("sweep", total=total)
                result = run_sweep(grids, max_steps=steps, executor=executor,
                                   chunk_size=chunk, seed=root_seed, **finetune,
                                   progress=lambda done, _: bar.update(task, completed=done))
        else:
            result = run_sweep(grids, max_steps=steps, executor=executor, chunk_size=chunk,
                               seed=root_seed, **finetune)
    finally:
        if close is not None:
            close()
    elapsed = time.perf_counter() - started

    if output == "-":
        sys.stdout.write(result.to_csv())
        where = "stdout"
    else:
        where = str(result.write(output, form, option="--output"))
    stuck = int((~result["converged"]).sum())
    kinds = ", ".join(sorted({f"K = {g.K} {g.geometry}" for g in grids}))
    print(f"oodcalc sweep: {len(result)} configurations ({kinds}) in {elapsed:.2f} s "
          f"-> {where}", file=sys.stderr)
    if stuck:
        print(f"oodcalc sweep: warning: {stuck} configuration(s) did not meet the stopping "
              f"rule within max_steps = {steps} (converged = false in their rows); raise "
              "--max-steps or --eps, or lower the step size", file=sys.stderr)
