"""``oodcalc reproduce depth`` and ``oodcalc plot depth``: the paper's TinyTransformer
experiment (1-3 layers, width 16) beside the one-layer theory (needs the nn extra, torch).

Results are cached by their parameters, so a rerun or the plot reads what is there and
trains only what is missing. torch is imported only when something must be trained.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import estimates, limits
from ..depth.protocol import CURVE_POINTS, CURVE_SEEDS
from ..errors import InputError, naming
from . import options
from .plot import Output, plot_app
from .progress import count_progress
from .reproduce import Format, FormatOption, OutputOption, output_format_for, \
    reproduce_app
from .sweep import axis

Text = Optional[str]
PANEL = "Protocol (defaults: the depth experiment's guide)"
#: --quick: a smoke run of the pipeline, not the experiment (its numbers are not the table's)
QUICK = {"seeds": 3, "eps": 0.05, "eval_prompts": 1024, "curve_prompts": 256}

Arch = Annotated[Text, typer.Option("--arch", metavar="NAME[,NAME]",
    help="attention (the theory's model, stacked) and/or standard (pre-LayerNorm + MLP).",
    show_default="attention,standard")]
Optimizer = Annotated[Text, typer.Option("--optimizer", metavar="NAME[,NAME]",
    help="sgd (lr 0.1, the theory's η) and/or adam (lr 1e-3, PyTorch's default).",
    show_default="sgd,adam")]
Layers = Annotated[str, typer.Option("--layers", metavar="L1,L2,...",
    help="Depths (number of blocks).")]
Seeds = Annotated[Text, typer.Option("--seeds", metavar="N",
    help="Seeds 0..N-1 (data, initialisation and batches all follow the seed).",
    show_default="10")]
CurveSeeds = Annotated[Text, typer.Option("--seeds", metavar="N",
    help="Seeds 0..N-1 (data, initialisation and batches all follow the seed).",
    show_default=str(CURVE_SEEDS))]
Workers = Annotated[str, typer.Option("--workers", metavar="N",
    help="Worker processes for runs not in the cache (1 thread each; same numbers).")]
Scheduler = Annotated[Text, typer.Option("--scheduler", metavar="ADDRESS",
    help="Train the runs not in the cache on a dask.distributed cluster (tcp://host:8786), "
         "one task per (configuration, seed); this process caches the results (same "
         "numbers as serially; start its workers with --nthreads 1). Needs pip install "
         "\"oodcalc\\[dask]\".",
    show_default="local")]
Quick = Annotated[bool, typer.Option("--quick",
    help=f"Smoke run: {QUICK['seeds']} seeds, ε = {QUICK['eps']}, {QUICK['eval_prompts']} "
         "evaluation prompts (not the experiment's protocol).")]
CacheDir = Annotated[Text, typer.Option("--cache-dir", metavar="DIR",
    help="Where results are cached.", show_default="$XDG_CACHE_HOME/oodcalc/depth")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the cache.")]
Eps = Annotated[Text, typer.Option("--eps", metavar="FLOAT", rich_help_panel=PANEL,
    help="Stopping rule of both phases: every e_k <= eps on the evaluation prompts.",
    show_default="0.01")]
Lr = Annotated[Text, typer.Option("--lr", metavar="FLOAT", rich_help_panel=PANEL,
    help="Step size of both phases.", show_default="0.1 for sgd, 1e-3 for adam")]
MaxSteps = Annotated[Text, typer.Option("--max-steps", metavar="INT", rich_help_panel=PANEL,
    help="Step cap per phase (a run that hits it is left out and counted).",
    show_default="5000")]
EvalPrompts = Annotated[Text, typer.Option("--eval-prompts", metavar="INT",
    rich_help_panel=PANEL, help="Fixed evaluation prompts per seed (even).", show_default="4096")]
FtSteps = Annotated[Text, typer.Option("--ft-steps", metavar="N", rich_help_panel=PANEL,
    help="Fine-tune exactly N steps (no stopping rule); the theory column follows the same "
         "protocol.", show_default="off: fine-tuning stops at --eps too")]


@contextmanager
def cluster(scheduler: str | None, workers: str, n_workers: int):
    """The dask executor for --scheduler (None without it), closed on leaving; checked
    after the other options and before any training."""
    executor, close = options.scheduler_executor(scheduler, workers if n_workers > 1 else None)
    try:
        yield executor
    finally:
        if close is not None:
            close()


def choices(option: str, text: str | None, allowed: tuple[str, ...]) -> list[str]:
    if text is None:
        return list(allowed)
    picked = [part.strip() for part in text.split(",")]
    for part in picked:
        if part not in allowed:
            raise InputError(option, repr(text), f"expected {' or '.join(allowed)} "
                             "(comma-separated for several)")
    return list(dict.fromkeys(picked))


def integers(option: str, text: str, minimum: int) -> list[int]:
    values = [options.integer(option, part.strip(), minimum) for part in text.split(",")]
    return list(dict.fromkeys(values))


def gamma_values(option: str, text: str) -> list[float]:
    values = axis(option, text, allow_log=False)
    for x in values:
        if not -1.0 <= x <= 1.0:
            raise InputError(option, repr(text), "each γ must lie in [-1, 1]")
    return list(dict.fromkeys(values))


def build_request(arch, optimizer, layers, seeds, quick, eps, lr, max_steps, eval_prompts,
                  cache_dir, no_cache, gammas, gamma, workers, default_seeds=10,
                  ft_steps=None, arms=None):
    """Parse every option (one-line errors) before any work: configs, seeds, cache, and
    the memory all of it needs."""
    from ..depth import ARCHITECTURES, OPTIMIZERS, Cache, configs
    n_workers = options.integer("--workers", workers, 1)

    protocol = protocol_options(QUICK if quick else None, eps, lr, max_steps, eval_prompts,
                                ft_steps)
    with naming(option_names(eps=eps, lr=lr, max_steps=max_steps, ft_steps=ft_steps)):
        chosen = configs(choices("--arch", arch, ARCHITECTURES),
                         choices("--optimizer", optimizer, OPTIMIZERS),
                         integers("--layers", layers, 1), **protocol)
    n_seeds = options.integer("--seeds", seeds, 1) or (QUICK["seeds"] if quick else default_seeds)
    every = chosen
    if arms is not None:       # each arm's configuration checked (replay × batch) first
        with naming({**option_names(eps=eps, lr=lr, max_steps=max_steps, ft_steps=ft_steps),
                     "DepthConfig.arm": "--arms"}):
            every = [c.with_(arm=None if a.plain else a) for c in chosen for a in arms]
    check_memory(every, n_seeds, gammas, n_workers, seeds, layers, eval_prompts, workers, gamma)
    if arms is not None:
        from ..depth.arms_table import ArmsCache
        return chosen, list(range(n_seeds)), ArmsCache(cache_dir, enabled=not no_cache)
    cache = Cache(cache_dir, enabled=not no_cache)
    return chosen, list(range(n_seeds)), cache


def protocol_options(quick: dict | None, eps, lr, max_steps, eval_prompts,
                     ft_steps=None) -> dict:
    """The protocol fields the options set: ``quick``'s values (but its seeds), then each
    option given, parsed with one-line errors."""
    protocol = {k: v for k, v in (quick or {}).items() if k != "seeds"}
    if eps is not None:
        protocol["eps"] = options.positive("--eps", eps)
    if lr is not None:
        protocol["lr"] = options.positive("--lr", lr)
    if max_steps is not None:
        protocol["max_steps"] = options.integer("--max-steps", max_steps, 1)
    if eval_prompts is not None:
        n = options.integer("--eval-prompts", eval_prompts, 2)
        if n % 2:
            raise InputError("--eval-prompts", repr(eval_prompts), "expected an even integer")
        protocol["eval_prompts"] = n
        protocol["curve_prompts"] = min(n, protocol.get("curve_prompts", 512))
    if ft_steps is not None:
        protocol["ft_steps"] = options.integer("--ft-steps", ft_steps, 1)
    return protocol


def option_names(**given) -> dict:
    """The options' names for DepthConfig's fields in its messages (with the value as given,
    where one was)."""
    return {f"DepthConfig.{field}": "--" + field.replace("_", "-") if text is None
            else ("--" + field.replace("_", "-"), text) for field, text in given.items()}


def check_memory(chosen, n_seeds, gammas, n_workers, seeds, layers, eval_prompts, workers,
                 gamma) -> None:
    """Refuse, before anything is allocated, a request over the memory cap (every run at
    once in the worst case: nothing cached), naming the option to change."""
    runs = len(chosen) * n_seeds * len(gammas)
    processes = 1 + (min(n_workers, len(chosen) * n_seeds) if n_workers > 1 else 0)
    prompts = max(c.eval_prompts for c in chosen)
    depth = max(c.layers for c in chosen)
    estimate = estimates.depth_bytes(runs, processes, prompts, depth)
    fewest = len(chosen) * len(gammas)
    limits.refuse_over_cap(estimate, "the depth experiment", [
        ("--workers", workers, estimates.depth_bytes(runs, 1, prompts, depth),
         "use fewer --workers"),
        ("--eval-prompts", eval_prompts, estimates.depth_bytes(runs, processes, 2, depth),
         "lower --eval-prompts"),
        ("--layers", layers, estimates.depth_bytes(runs, processes, prompts, 1), "lower --layers"),
        ("--seeds", seeds, estimates.depth_bytes(fewest, processes, prompts, depth),
         "lower --seeds"),
        ("--gamma", gamma, estimates.depth_bytes(len(chosen) * n_seeds, processes, prompts, depth),
         "give fewer γ values")])


@reproduce_app.command("depth")
def depth(
    arch: Arch = None, optimizer: Optimizer = None, layers: Layers = "1,2,3",
    gamma: Annotated[str, typer.Option("--gamma", metavar="G1,G2,...",
        help="γ = ⟨v2, u2⟩ values (γ1 = 1); numbers or ranges START:STOP:NUM.")
    ] = "-0.75,0,0.75",
    seeds: Seeds = None, workers: Workers = "1", scheduler: Scheduler = None,
    quick: Quick = False, output_format: FormatOption = None, output: OutputOption = None,
    cache_dir: CacheDir = None, no_cache: NoCache = False,
    eps: Eps = None, lr: Lr = None, max_steps: MaxSteps = None, eval_prompts: EvalPrompts = None,
    ft_steps: FtSteps = None,
    arms: Annotated[Text, typer.Option("--arms", metavar="NAME[:VALUE],...",
        help="Intervention arms of the fine-tuning, each beside plain and the theory's "
             "prediction for the same intervention (names and defaults: reproduce ladder "
             "--help, oodcalc.depth.arms).", show_default="off")] = None,
) -> None:
    """TinyTransformer forgetting F (1-3 layers, width 16) beside the paper and the theory."""
    from ..depth import reproduce
    from ..depth.table import markdown, show

    output_format = output_format_for(output, output_format)   # -o checked before training
    chosen_arms = None
    if arms is not None:
        from ..depth.arms import parse
        chosen_arms = parse(arms, "--arms")
    gammas = gamma_values("--gamma", gamma)
    chosen, seed_list, cache = build_request(arch, optimizer, layers, seeds, quick, eps, lr,
                                             max_steps, eval_prompts, cache_dir,
                                             no_cache, gammas, gamma, workers,
                                             ft_steps=ft_steps, arms=chosen_arms)
    n_workers = options.integer("--workers", workers, 1)
    with cluster(scheduler, workers, n_workers) as executor, \
            count_progress("training", lines=True, eta=True) as progress:  # piped: a line each
        if chosen_arms is not None:
            from ..depth.arms_table import arms_depth, markdown, show
            table = arms_depth(chosen_arms, chosen, seed_list, gammas, n_workers, progress,
                               cache, executor)
        else:
            table = reproduce(chosen, seed_list, gammas, cache, n_workers, progress, executor)
    if chosen_arms is not None:
        if output_format is Format.table:
            show(table, title="oodcalc reproduce depth --arms")
            return
        emit(table, output_format, output, markdown)
        return
    if output_format is Format.table:
        show(table)
        return
    emit(table, output_format, output, markdown)


def emit(table, output_format: Format, output: str | None, markdown) -> None:
    """``table`` as JSON (its ``to_dict``) or ``markdown(table)``, on stdout or written
    atomically to ``output``."""
    from ..io import write_text_atomic
    text = (json.dumps(table.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)
            if output_format is Format.json else markdown(table))
    if output is None:
        print(text)
    else:
        write_text_atomic(output, text + "\n", option="--output")


@plot_app.command("depth")
def plot_depth(
    output: Output,
    arch: Arch = None, optimizer: Optimizer = None, layers: Layers = "1,2,3",
    gamma: Annotated[str, typer.Option("--gamma", metavar="G1,G2,...",
        help="γ values of the curve; numbers or ranges START:STOP:NUM.")
    ] = f"-1:1:{CURVE_POINTS}",
    seeds: CurveSeeds = None, workers: Workers = "1", scheduler: Scheduler = None,
    quick: Quick = False, cache_dir: CacheDir = None, no_cache: NoCache = False,
    eps: Eps = None, lr: Lr = None, max_steps: MaxSteps = None, eval_prompts: EvalPrompts = None,
    ft_steps: FtSteps = None,
    record_file: Annotated[Text, typer.Option("--record", metavar="FILE|none",
        help="A record of runs to draw from (a clone's docs/depth.json, which its "
             "tools/depth_full_run.py writes; a wheel ships none); only runs in neither it "
             "nor the cache are trained (torch).",
        show_default="docs/depth.json of a clone")] = None,
) -> None:
    """F against γ per depth (mean and 95% CI over seeds), the one-layer theory's curve
    and the paper's nine points; one panel per architecture and optimizer. Draws from the
    cache and the record (no torch needed when they hold every run)."""
    from .. import plots
    from ..depth import collect
    from ..depth.plot import gamma_curves

    plots.check_output(output)
    gammas = sorted(gamma_values("--gamma", gamma))
    chosen, seed_list, cache = build_request(arch, optimizer, layers, seeds, quick, eps, lr,
                                             max_steps, eval_prompts, cache_dir, no_cache,
                                             gammas, gamma, workers, default_seeds=CURVE_SEEDS,
                                             ft_steps=ft_steps)
    cache = with_record(cache, record_file)
    n_workers = options.integer("--workers", workers, 1)
    with cluster(scheduler, workers, n_workers) as executor, \
            count_progress("training", lines=True, eta=True) as progress:  # piped: a line each
        results = collect(chosen, seed_list, gammas, cache, n_workers, progress, executor)
    print(plots.save(gamma_curves(results, chosen, seed_list, gammas), output))


def with_record(cache, record_file: str | None):
    """``cache``, answering also from the record's runs (``--record``; by default the
    clone's docs/depth.json, when there is one and its protocol version is this code's)."""
    from ..depth import documents, record
    if record_file is not None and record_file.strip().lower() == "none":
        return cache
    path = documents.RECORD if record_file is None else Path(record_file)
    if record_file is None and not path.is_file():
        return cache                              # an installed wheel: no record shipped
    try:
        saved, runs = record.load(path)
    except InputError as err:
        raise InputError("--record", str(path), err.accepted) from None
    if not record.current(saved):
        if record_file is not None:
            raise InputError("--record", str(path), f"its runs are of protocol version "
                             f"{saved.get('version')}, this code makes "
                             f"{record.PROTOCOL_VERSION}")
        return cache
    return record.FromRecord(cache, runs)
