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

from ..errors import InputError
from ..setting import DEFAULT_EPS, DEFAULT_ETA, DEFAULT_MAX_STEPS
from . import app, options

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
    try:
        num = int(parts[2])
    except ValueError:
        num = 0
    if num < 1:
        raise InputError(option, repr(item), f"NUM in START:STOP:NUM must be an integer >= 1, "
                         f"got {parts[2].strip()!r}")
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


def build_grids(gamma: list[str] | None, theta: Text, K: Text, eps: Text, eta: Text,
                eta_ft: Text):
    """Turn the command-line text into validated grids (errors name the option)."""
    from ..sweep import gamma_grid, theta_grid

    if bool(gamma) == (theta is not None):
        raise InputError("geometry", "--gamma and --theta" if gamma else "none",
                         "choose exactly one of --gamma (repeatable) or --theta with --K")
    protocol = {
        "eps": axis("--eps", eps, _positive) if eps is not None else DEFAULT_EPS,
        "eta": axis("--eta", eta, _positive) if eta is not None else DEFAULT_ETA,
        "eta_ft": axis("--eta-ft", eta_ft, _positive) if eta_ft is not None else None,
    }
    if gamma:
        if K is not None:
            raise InputError("--K", K, "K follows from the number of --gamma entries; omit --K")
        grids = []
        for text in gamma:
            axes = gamma_axes("--gamma", text)
            if len(axes) < 2:
                raise InputError("--gamma", repr(text), "give one entry per feature, at "
                                 "least 2 (K >= 2), e.g. --gamma=-1:1:201,-1:1:201")
            grids.append(gamma_grid(axes, **protocol, name="--gamma"))
        return grids
    if K is None:
        raise InputError("--K", "nothing", "--theta needs the number of features, e.g. --K 4 "
                         "or --K 2,4,8")
    thetas = axis("--theta", theta, options.angle, allow_log=False)
    Ks = [int(k) for k in axis("--K", K, _K, allow_log=False)]
    return [theta_grid(thetas, k, **protocol) for k in dict.fromkeys(Ks)]


def _executor(workers: Text, scheduler: Text):
    """``(executor, closer)`` for --workers / --scheduler; ``(None, None)`` for serial."""
    n = options.integer("--workers", workers, 1)
    if n is not None and scheduler is not None:
        raise InputError("--workers", workers, "use --workers (local processes) or "
                         "--scheduler (a dask cluster), not both")
    if scheduler is not None:
        try:
            from dask.distributed import Client
        except ImportError:
            raise InputError("--scheduler", scheduler, "needs dask.distributed: "
                             "pip install 'oodcalc[dask]'") from None
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as err:
            raise InputError("--scheduler", scheduler, f"could not connect to a dask "
                             f"scheduler there ({err})") from None
        return client.get_executor(), client.close
    if n is not None and n > 1:
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
        help=f"Stopping rule(s) e_k <= eps: values or ranges (1e-3:1e-1:5:log) "
             f"[default: {DEFAULT_EPS:g}].", rich_help_panel="Protocol")] = None,
    eta: Annotated[Text, typer.Option("--eta", metavar="LIST",
        help=f"Pretraining step size(s) [default: {DEFAULT_ETA:g}].",
        rich_help_panel="Protocol")] = None,
    eta_ft: Annotated[Text, typer.Option("--eta-ft", metavar="LIST",
        help="Fine-tuning step size(s) [default: each row's --eta].",
        rich_help_panel="Protocol")] = None,
    max_steps: Annotated[Text, typer.Option("--max-steps", metavar="INT",
        help=f"Step cap per phase; rows that hit it are marked converged=false "
             f"[default: {DEFAULT_MAX_STEPS}].", rich_help_panel="Protocol")] = None,
    fmt: Annotated[Optional[Format], typer.Option("--format",
        help="Output format [default: from the file suffix, else csv].",
        case_sensitive=False)] = None,
    workers: Annotated[Text, typer.Option("--workers", metavar="N",
        help="Fine-tune in N local processes.", rich_help_panel="Execution")] = None,
    scheduler: Annotated[Text, typer.Option("--scheduler", metavar="ADDRESS",
        help="Run on a dask.distributed cluster (tcp://host:8786); needs oodcalc[dask].",
        rich_help_panel="Execution")] = None,
    chunk_size: Annotated[Text, typer.Option("--chunk-size", metavar="INT",
        help="Configurations per task [default: all at once serially, 1/16 of the grid "
             "otherwise].", rich_help_panel="Execution")] = None,
    seed: Annotated[Text, typer.Option("--seed", metavar="INT",
        help="Root seed; each chunk gets its own via SeedSequence.spawn (recorded; the "
             "exact dynamics are deterministic) [default: 0].",
        rich_help_panel="Execution")] = None,
    progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress",
        help="Progress bar on stderr [default: on a terminal, for long sweeps].")] = None,
) -> None:
    """Sweep γ, θ, ε and η: T1, T2, OOD loss, forgetting F and F_k, regimes per row.

    Example: oodcalc sweep --gamma=-1:1:201,-1:1:201 -o phase.csv
    """
    from ..sweep import output_format, sweep as run_sweep

    grids = build_grids(gamma, theta, K, eps, eta, eta_ft)
    steps = options.integer("--max-steps", max_steps, 1) or DEFAULT_MAX_STEPS
    chunk = options.integer("--chunk-size", chunk_size, 1)
    root_seed = options.integer("--seed", seed, 0) or 0
    form = fmt.value if fmt is not None else ("csv" if output == "-" else output_format(output))
    if output == "-" and form != "csv":
        raise InputError("--format", form, "only csv can go to stdout; give -o FILE.npz")
    if output != "-":
        directory = Path(output).parent
        if not directory.is_dir():
            raise InputError("--output", output, f"the directory {directory} does not exist")
    total = sum(len(g) for g in grids)
    show = progress if progress is not None else (sys.stderr.isatty() and total >= PROGRESS_FROM)

    executor, close = _executor(workers, scheduler)
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
                                   chunk_size=chunk, seed=root_seed,
                                   progress=lambda done, _: bar.update(task, completed=done))
        else:
            result = run_sweep(grids, max_steps=steps, executor=executor, chunk_size=chunk,
                               seed=root_seed)
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
