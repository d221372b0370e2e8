"""``oodcalc reproduce real``: the paper's BERT experiments on real text (docs/real.md).

Needs the ``real`` extra (torch, transformers) and the two asset packages; without them
the command exits with 2 and one line naming the install step. torch is imported only
once the command runs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import numpy as np
import typer

from .. import estimates, limits
from ..console import duration
from ..errors import InputError
from ..io import read_input
from . import options
from .reproduce import Format, FormatOption, OutputOption, output_format_for, \
    reproduce_app

#: Rows of the shipped data set (an upper bound on the reviews an estimate counts).
REVIEWS = 979
#: Layers of all-MiniLM-L6-v2 (the cut --layer lies in 1 .. LAYERS - 1).
LAYERS = 6
#: Largest --ft-steps: 100 epochs of the source's training folds (about 9 steps each).
MAX_FT_STEPS = 1000
#: The theory's e_k at uniform attention (K = 2): a stopping rule at or above it is met at
#: the start.
UNIFORM_ERROR = 0.25

Quick = Annotated[bool, typer.Option("--quick",
    help="A smaller run of the same pipeline: 1 seed, 3 folds, 12 θ steps (a few minutes).")]
Seeds = Annotated[Optional[str], typer.Option("--seeds", metavar="N",
    help="Cross-validation repetitions (seeds 0..N-1).", show_default="5 (1 with --quick)")]
CacheDir = Annotated[Optional[str], typer.Option("--cache-dir", metavar="DIR",
    help="Where hidden states are cached.", show_default="$XDG_CACHE_HOME/oodcalc")]
Threads = Annotated[Optional[str], typer.Option("--threads", metavar="N",
    help="torch threads (1 is fastest on a shared machine; results can differ in the "
         "last digits with another count).", show_default="1")]
NoCache = Annotated[bool, typer.Option("--no-cache",
    help="Neither read nor write the finished (seed, fold) fits under --cache-dir "
         "(the hidden states are still cached).")]
Scheduler = Annotated[Optional[str], typer.Option("--scheduler", metavar="ADDRESS",
    help="Run the fits not in the cache on a dask.distributed cluster (tcp://host:8786), "
         "one task per (seed, fold), the hidden states sent to each worker once; this "
         "process caches the results (same numbers as serially; start its workers with "
         "--nthreads 1). Needs pip install \"oodcalc\\[dask]\".",
    show_default="local")]
Workers = Annotated[Optional[str], typer.Option("--workers", metavar="N",
    help="Worker processes for the fits not in the cache (each holds the hidden states and "
         "runs --threads torch threads; same numbers).", show_default="1")]
Input = Annotated[Optional[Path], typer.Option("--input", "-i", metavar="FILE",
    help="Show a saved result (the JSON of 'reproduce real -f json') instead of running.")]
PANEL = "Protocol (defaults: the real-text experiment's guide)"
Eps = Annotated[Optional[str], typer.Option("--eps", metavar="FLOAT", rich_help_panel=PANEL,
    help="The theory columns' stopping rule (every e_k <= eps).", show_default="0.01")]
FtSteps = Annotated[Optional[str], typer.Option("--ft-steps", metavar="N",
    rich_help_panel=PANEL,
    help="Forgetting fine-tunes run exactly N AdamW steps (batches of 16) instead of one "
         "epoch; the theory's F is then after N of its own steps.",
    show_default="off: one epoch")]
Layer = Annotated[Optional[str], typer.Option("--layer", metavar="L", rich_help_panel=PANEL,
    help="Where the rotations act: the input of layer L's attention block, which is trained "
         "with the head (layers below it frozen and cached; L's feed-forward part and the "
         "layers above it are not used).", show_default="5, the last")]
Arms = Annotated[Optional[str], typer.Option("--arms", metavar="NAME[:VALUE],...",
    rich_help_panel=PANEL,
    help="Intervention arms of the forgetting fine-tunes (plain, replay, l2, reweight, "
         "drop-negative, project-input, project-activations, project-qk, project-value, "
         "project-all; oodcalc.real.arms), each beside plain, the theory's F for the same "
         "intervention and F at matched OOD loss.", show_default="off")]


def config_for(quick: bool, seeds: str | None, threads: str | None, eps: str | None = None,
               ft_steps: str | None = None, layer: str | None = None,
               arms: str | None = None):
    from dataclasses import replace

    from ..real.experiment import FAMILIES, FORGET_THETAS, QUICK, Config
    config = QUICK if quick else Config()
    n = options.integer("--seeds", seeds, 1)
    t = options.integer("--threads", threads, 1, limits.MAX_THREADS,
                        "torch crashes on far larger counts")
    e = options.positive("--eps", eps)
    if e is not None and e >= UNIFORM_ERROR:
        raise InputError("--eps", eps, f"expected a number below {UNIFORM_ERROR} (at "
                         f"ε >= {UNIFORM_ERROR} the theory's model meets the rule at uniform "
                         "attention, before any step)")
    steps = options.integer("--ft-steps", ft_steps, 1, MAX_FT_STEPS,
                            f"{MAX_FT_STEPS} steps of 16 reviews are 100 epochs of the source's "
                            "training folds")
    cut = options.integer("--layer", layer, 1, LAYERS - 1,
                          f"all-MiniLM-L6-v2 has layers 0-{LAYERS - 1}; layer 0 takes the "
                          "embeddings, which are not cached")
    chosen = ()
    if arms is not None:        # no torch: the spec is checked before anything runs
        from ..depth.arms import parse
        chosen = parse(arms, "--arms")
    protocol = config.protocol
    if e is not None or steps is not None:   # a new Protocol: its own defaults (auto cap)
        from ..setting import Protocol
        protocol = Protocol(eps=protocol.eps if e is None else e, eta=protocol.eta,
                            ft_steps=steps)
        # the theory columns' runs, refused now rather than after the training
        options.name_parameters({"eps": ("--eps", eps), "max_steps": "lower --eps",
                                 "ft_steps": ("--ft-steps", ft_steps)})
        limits.check_predict(2, None, protocol, diagonal=np.zeros(2))
    config = replace(config, protocol=protocol, **({"seeds": n} if n is not None else {}),
                     **({"threads": t} if t is not None else {}),
                     **({"layer": cut} if cut is not None else {}),
                     **({"arms": chosen} if chosen else {}),
                     **({"finetune": replace(config.finetune, steps=steps)}
                        if steps is not None else {}))
    # the per-review losses of every seed, θ and rotation family, and the forgetting runs
    # (at most every review of the data set each), held until the statistics
    per_seed = (len(FAMILIES) * (config.steps + 1) + len(FORGET_THETAS) + 8) * REVIEWS * 8
    limits.refuse_over_cap(estimates.BASE_BYTES + estimates.TORCH_BYTES + config.seeds * per_seed,
                           "the real-text experiment", [("--seeds", seeds, 0.0, "lower --seeds")])
    return config


#: all-MiniLM-L6-v2's hidden size and weights (bytes, float32): what a worker process holds
#: beside torch, with the hidden states of every review at --max-len tokens.
HIDDEN = 384
MODEL_BYTES = 91 << 20


def worker_count(workers: str | None, config) -> int:
    """--workers, refused when the processes' copies of the hidden states would not fit."""
    n = options.integer("--workers", workers, 1)
    if n is None or n == 1:
        return 1
    # a process: torch, the model, the hidden states (padded) and their float64 means
    each = (estimates.TORCH_BYTES + MODEL_BYTES
            + REVIEWS * HIDDEN * (4 * config.max_len + 8))
    limits.refuse_over_cap(estimates.BASE_BYTES + n * each, "the real-text experiment",
                           [("--workers", workers, estimates.BASE_BYTES + each,
                             "lower --workers")])
    return n


#: Largest saved result read (bytes); the full run's JSON is about 100 kB.
MAX_RESULT_BYTES = 64 << 20
SAVED = "expected the JSON written by 'oodcalc reproduce real -f json'"


def load_result(path: Path) -> dict[str, Any]:
    data = read_input(path, "--input", max_bytes=MAX_RESULT_BYTES, expected="; " + SAVED)
    try:
        result = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise InputError("--input", str(path), "nested too deeply; " + SAVED) from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise InputError("--input", str(path), f"could not read JSON ({err})") from None
    needed = {"parameters": dict, "rotation": dict, "shift": dict, "forgetting": list,
              "paper": list}
    if not isinstance(result, dict) or any(not isinstance(result.get(k), kind)
                                           for k, kind in needed.items()):
        raise InputError("--input", str(path), SAVED)
    return result


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def shown(input_file: Path | None, show: Callable[[], Any]) -> Any:
    """Render a result; a saved one whose fields lack the shape a run writes is refused in
    one line (it was edited or written by something else), never a traceback."""
    if input_file is None:
        return show()
    try:
        return show()
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise InputError("--input", str(input_file), f"{SAVED} (a field is missing or "
                         f"malformed: {type(err).__name__} {str(err)[:60]})") from None


def cache_directory(cache_dir: str | None) -> Path:
    """--cache-dir (default: the user's cache, ``$XDG_CACHE_HOME/oodcalc``), checked
    before any work."""
    from ..io import check_cache_dir
    return check_cache_dir(cache_dir, "oodcalc")


class Bar:
    """The experiment's progress as a bar on stderr (nothing when stderr is no terminal)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        console = Console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=console, transient=True,
                                 disable=not console.is_terminal)
        self.lines = not console.is_terminal      # piped or logged: a line per stage
        self.task = None
        self.notes: list[str] = []

    def __enter__(self) -> "Bar":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def stage(self, name: str, total: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, visible=False)
        from rich.markup import escape
        self.task = self.progress.add_task(escape(name), total=total)   # text, not markup
        self.name, self.total, self.done, self.started = name, total, 0, time.perf_counter()
        if self.lines:
            print(f"oodcalc: real: {name}: 0/{total:,}", file=sys.stderr, flush=True)

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)
        tenth = max(1, self.total // 10)
        before, self.done = self.done, self.done + n
        if self.lines and self.done // tenth > before // tenth and self.done < self.total:
            left = (time.perf_counter() - self.started) / self.done * (self.total - self.done)
            print(f"oodcalc: real: {self.name}: {self.done:,}/{self.total:,} (ETA "
                  f"{duration(left)})", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)


#: Wall minutes of a run on this project's 2-core machine (docs/real.md: the full run, 5
#: seeds × 5 folds, 13-16 min beside other jobs; --quick runs 3 folds), for messages only.
QUICK_MINUTES = 3
MINUTES_PER_SEED = 3
#: Each arm adds a fine-tune per forgetting condition and fit, with its loss curves read
#: after every step: about a whole plain run's time (measured: a (seed, fold) task of the
#: full run with nine arms took 11 min on a worker, against ~1.2 plain; the quick run with
#: three arms 887 s against ~3 min plain). For the message only.
ARM_SHARE = 1.0


def obtain(input_file: Path | None, quick: bool, seeds: str | None, cache_dir: Path | None,
           threads: str | None, eps: str | None = None, ft_steps: str | None = None,
           layer: str | None = None, arms: str | None = None, no_cache: bool = False,
           scheduler: str | None = None, workers: str | None = None) -> dict[str, Any]:
    """A saved result, or a fresh run (progress on stderr, timing on stderr)."""
    if input_file is not None:
        given = [name for name, value in (("--quick", quick or None), ("--seeds", seeds),
                                          ("--eps", eps), ("--ft-steps", ft_steps),
                                          ("--layer", layer), ("--threads", threads),
                                          ("--arms", arms),
                                          ("--cache-dir", cache_dir),
                                          ("--no-cache", no_cache or None),
                                          ("--scheduler", scheduler),
                                          ("--workers", workers)) if value is not None]
        if given:
            raise InputError("--input", str(input_file), "cannot be combined with "
                             f"{', '.join(given)} (a saved result is shown as it was run)")
        return load_result(input_file)
    config = config_for(quick, seeds, threads, eps, ft_steps, layer, arms)
    n_workers = worker_count(workers, config)
    directory = cache_directory(cache_dir)
    # connected before the model loads: a bad address is one line, at once
    client, close = options.scheduler_client(scheduler, workers if n_workers > 1 else None)
    try:
        from ..real import run_installed
        from ..real.encoder import require
        require()
        minutes = QUICK_MINUTES if quick else MINUTES_PER_SEED * config.seeds
        minutes *= 1 + ARM_SHARE * max(0, len(config.arms) - 1)
        print(f"oodcalc: loading all-MiniLM-L6-v2 and the drug reviews (offline); the run "
              f"takes about {minutes:.0f} min on 2 cores (save it with -f json -o FILE and "
              "draw from it with --input FILE"
              f"{'' if no_cache else '; finished fits are cached: a rerun resumes'}) …",
              file=sys.stderr)
        start = time.perf_counter()
        with Bar() as bar:
            result = run_installed(config, directory, progress=bar, task_cache=not no_cache,
                                   client=client, workers=n_workers)
    finally:
        if close is not None:
            close()
    print(f"oodcalc: real-text experiment done in {time.perf_counter() - start:.0f} s "
          f"({'; '.join(bar.notes)})", file=sys.stderr)
    return result


@reproduce_app.command("real")
def real(
    quick: Quick = False, seeds: Seeds = None,
    output_format: FormatOption = None, output: OutputOption = None,
    cache_dir: CacheDir = None, threads: Threads = None, input_file: Input = None,
    eps: Eps = None, ft_steps: FtSteps = None, layer: Layer = None, arms: Arms = None,
    no_cache: NoCache = False, scheduler: Scheduler = None, workers: Workers = None,
) -> None:
    """The paper's BERT experiments on real text: rotation, natural shift and forgetting
    with a pretrained MiniLM on drug reviews, beside the paper's figures and the theory."""
    from ..io import write_text_atomic
    from ..real import render

    output_format = output_format_for(output, output_format)   # -o checked before the run
    result = obtain(input_file, quick, seeds, cache_dir, threads, eps, ft_steps, layer, arms,
                    no_cache, scheduler, workers)
    if output_format is Format.table:
        shown(input_file, lambda: render.show(result))
        return
    text = json.dumps(result, indent=1, ensure_ascii=False) if output_format is Format.json \
        else shown(input_file, lambda: render.markdown(result))
    if output is None:
        print(text)
    else:
        write_text_atomic(output, text + "\n", option="--output")
