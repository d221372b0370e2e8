"""``oodcalc reproduce ladder``: from the theory's model to a standard transformer, one
change per rung, under the depth experiment's protocol (needs the nn extra, torch).

Runs are cached by their parameters (in their own directory), so a rerun or another
output format reads what is there and trains only what is missing.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import naming
from . import options
from .plot import Output, plot_app
from .progress import count_progress
from .reproduce import Format, FormatOption, OutputOption, output_format_for, reproduce_app
from .reproduce_depth import PANEL, EvalPrompts, Eps, FtSteps, MaxSteps, NoCache, Scheduler, \
    Seeds, Workers, check_memory, cluster, emit, gamma_values, option_names, protocol_options

#: --quick: 3 seeds at ε = 0.02 (about 2 minutes on one thread). At depth's quick ε = 0.05
#: the theory's F at γ = −0.75 (+0.00024) is a 4% residue of two opposite F_k and cannot be
#: told from 0 over 3 seeds (docs/depth.md, "The ladder").
QUICK = {"seeds": 3, "eps": 0.02, "eval_prompts": 1024, "curve_prompts": 128}

Quick = Annotated[bool, typer.Option("--quick",
    help=f"Smoke run: {QUICK['seeds']} seeds, ε = {QUICK['eps']}, {QUICK['eval_prompts']} "
         "evaluation prompts (not the experiment's protocol).")]


Lr = Annotated[Optional[str], typer.Option("--lr", metavar="FLOAT", rich_help_panel=PANEL,
    help="SGD step size of both phases, every rung.", show_default="0.1")]


Gamma = Annotated[str, typer.Option("--gamma", metavar="G1,G2,...",
    help="γ = ⟨v2, u2⟩ values (γ1 = 1); numbers or ranges START:STOP:NUM.")]
Arms = Annotated[Optional[str], typer.Option("--arms", metavar="NAME[:VALUE],...",
    help="Intervention arms of the fine-tuning, each beside plain and the theory's "
         "prediction for the same intervention: replay[:share], l2[:mu], reweight, "
         "drop-negative[:threshold], project-input, project-activations[:energy], project-qk, "
         "project-value, project-all[:energy] (defaults: oodcalc.depth.arms).",
    show_default="off: the ladder itself")]
CacheDir = Annotated[Optional[str], typer.Option("--cache-dir", metavar="DIR",
    help="Where results are cached.", show_default="$XDG_CACHE_HOME/oodcalc/ladder")]


def obtain(gamma, seeds, workers, quick, cache_dir, no_cache, eps, lr, max_steps,
           eval_prompts, ft_steps=None, arms=None, scheduler=None):
    """Parse every option (one-line errors), then train or read every run: the table
    (with ``arms``: the arms' table)."""
    from ..depth.ladder import LadderCache, ladder_configs, reproduce_ladder
    chosen_arms = None
    if arms is not None:
        from ..depth.arms import parse
        chosen_arms = parse(arms, "--arms")
    gammas = gamma_values("--gamma", gamma)
    n_workers = options.integer("--workers", workers, 1)
    protocol = protocol_options(QUICK if quick else None, eps, lr, max_steps, eval_prompts,
                                ft_steps)
    n_seeds = options.integer("--seeds", seeds, 1) or (QUICK["seeds"] if quick else 10)
    with naming({**option_names(eps=eps, lr=lr, max_steps=max_steps, ft_steps=ft_steps),
                 "DepthConfig.arm": "--arms"}):
        chosen = [c for _, c in ladder_configs(**protocol)]
        if chosen_arms is not None:    # e.g. replay's share × batch: checked before training
            chosen = [c.with_(arm=None if a.plain else a) for c in chosen for a in chosen_arms]
    check_memory(chosen, n_seeds, gammas, n_workers, seeds, None, eval_prompts, workers, gamma)
    if chosen_arms is not None:
        from ..depth.arms_table import LadderArmsCache, arms_ladder
        cache = LadderArmsCache(cache_dir, enabled=not no_cache)
    else:
        cache = LadderCache(cache_dir, enabled=not no_cache)
    with cluster(scheduler, workers, n_workers) as executor, \
            count_progress("training", lines=True, eta=True) as progress:
        if chosen_arms is not None:
            return arms_ladder(chosen_arms, range(n_seeds), gammas, n_workers, progress, cache,
                               executor, **protocol)
        return reproduce_ladder(range(n_seeds), gammas, n_workers, progress, cache, executor,
                                **protocol)


@reproduce_app.command("ladder")
def ladder(
    gamma: Gamma = "-0.75,0,0.75", seeds: Seeds = None, workers: Workers = "1",
    scheduler: Scheduler = None, quick: Quick = False,
    output_format: FormatOption = None, output: OutputOption = None,
    cache_dir: CacheDir = None, no_cache: NoCache = False,
    eps: Eps = None, lr: Lr = None, max_steps: MaxSteps = None, eval_prompts: EvalPrompts = None,
    ft_steps: FtSteps = None, arms: Arms = None,
) -> None:
    """Forgetting F rung by rung: theory → read-out → factorised → depth → LayerNorm+MLP."""
    from ..depth.ladder import markdown, show

    output_format = output_format_for(output, output_format)   # -o checked before training
    table = obtain(gamma, seeds, workers, quick, cache_dir, no_cache, eps, lr, max_steps,
                   eval_prompts, ft_steps, arms, scheduler)
    if arms is not None:
        from ..depth.arms_table import markdown, show
    if output_format is Format.table:
        show(table)
        return
    emit(table, output_format, output, markdown)


@plot_app.command("ladder")
def plot_ladder(
    output: Output, gamma: Gamma = "-0.75,0,0.75", seeds: Seeds = None, workers: Workers = "1",
    scheduler: Scheduler = None, quick: Quick = False, cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    eps: Eps = None, lr: Lr = None, max_steps: MaxSteps = None, eval_prompts: EvalPrompts = None,
    ft_steps: FtSteps = None, arms: Arms = None,
) -> None:
    """F per rung of the ladder (mean, 95% CI, every seed), one panel per γ, with the
    one-layer theory's F; with --arms, F against the OOD loss per arm (matched loss)."""
    from .. import plots
    from ..depth.plot import ladder_plot

    plots.check_output(output)
    table = obtain(gamma, seeds, workers, quick, cache_dir, no_cache, eps, lr, max_steps,
                   eval_prompts, ft_steps, arms, scheduler)
    if arms is not None:
        from ..depth.arms_table import matched_plot
        print(plots.save(matched_plot(table), output))
        return
    print(plots.save(ladder_plot(table), output))
