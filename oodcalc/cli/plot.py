"""``oodcalc plot KIND -o FILE``: the pictures of oodcalc.plots (needs the plot extra).

One subcommand per kind of figure, each with only the options it uses; a new figure is one
more ``@plot_app.command``. The figures of other experiments register here too.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Optional

import typer

from .. import limits
from ..errors import InputError
from . import options
from .app import app
from .reproduce_real import CacheDir as RealCacheDir
from .reproduce_real import Input as RealInput
from .reproduce_real import Quick as RealQuick
from .reproduce_real import Seeds as RealSeeds
from .reproduce_real import Threads as RealThreads
from .setting_options import (Dimension, Eps, EpsFt, Eta, EtaFt, Features, FtSteps, Gamma,
                              MaxSteps, MeanQuery, NumFeatures, Ood, Orthogonal, Theta,
                              Tolerance, build_protocol, build_setting)

plot_app = typer.Typer(help="Draw a figure to a file (PNG, SVG or PDF by the extension). "
                       "Examples: oodcalc plot losses --gamma 1,-0.9 -o losses.png; "
                       "oodcalc plot phase-diagram -o phase.png")
app.add_typer(plot_app, name="plot")

SUFFIXES = (".png", ".svg", ".pdf")


@plot_app.callback(invoke_without_command=True)
def plot(ctx: typer.Context) -> None:
    """Draw a figure to a file (PNG, SVG or PDF by the extension)."""
    if ctx.invoked_subcommand is None:
        kinds = ", ".join(ctx.command.list_commands(ctx))
        raise InputError("plot", "no figure", f"name one: {kinds} (e.g. oodcalc plot losses "
                         "--gamma 1,-0.9 -o losses.png; oodcalc plot KIND -h for its options)")

Output = Annotated[str, typer.Option("--output", "-o", metavar="FILE",
    help="Where to write the figure; .png, .svg or .pdf (written atomically).")]


def draw(make_figure, output: str) -> None:
    """Check the destination first, then build the figure and write it."""
    from .. import plots
    plots.check_output(output)
    print(plots.save(make_figure(), output))


def trajectories(kind: str, output: str, gamma, theta, K, mean_query, orthogonal, features,
                 ood, d, tol, eps, eta, eta_ft, max_steps, eps_ft=None, ft_steps=None) -> None:
    from .. import plots
    from ..prediction import predict

    def make():
        report = predict(build_setting(gamma, theta, K, mean_query, orthogonal, features, ood,
                                       d, tol, eps, eta, eta_ft, max_steps, eps_ft=eps_ft,
                                       ft_steps=ft_steps, checks=[
                                           partial(limits.check_trajectory_plot, figure=kind),
                                           limits.check_predict]))
        return getattr(plots, kind)(report)
    draw(make, output)


@plot_app.command("losses")
def losses(
    output: Output,
    gamma: Gamma = None, theta: Theta = None, mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """Source and OOD errors e_k through pretraining and fine-tuning, against ε, for one geometry."""
    trajectories("loss_trajectories", output, gamma, theta, K, mean_query, orthogonal,
                 features, ood, d, tol, eps, eta, eta_ft, max_steps)


@plot_app.command("forgetting-curve")
def forgetting_curve(
    output: Output,
    gamma: Gamma = None, theta: Theta = None, mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
    eps_ft: EpsFt = None, ft_steps: FtSteps = None,
) -> None:
    """Forgetting F and every F_k at every fine-tuning step (e.g. --ft-steps 100000)."""
    trajectories("forgetting_curve", output, gamma, theta, K, mean_query, orthogonal,
                 features, ood, d, tol, eps, eta, eta_ft, max_steps, eps_ft, ft_steps)


@plot_app.command("weights")
def weights(
    output: Output,
    gamma: Gamma = None, theta: Theta = None, mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """α- and β-type weights through both phases, with the conservation law."""
    trajectories("weight_trajectories", output, gamma, theta, K, mean_query, orthogonal,
                 features, ood, d, tol, eps, eta, eta_ft, max_steps)


@plot_app.command("ood-vs-theta")
def ood_vs_theta(
    output: Output,
    K: Annotated[Optional[str], typer.Option("--K", "-K", metavar="INT",
        help="Number of features.", show_default="4")] = None,
    prompts: Annotated[Optional[str], typer.Option("--prompts", metavar="N",
        help="Also mark the finite-prompt simulator with N tokens per prompt.",
        show_default="population GD only")] = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """OOD error against the rotation angle θ: theory line, simulation markers."""
    from .. import plots
    from .reproduce import simulators
    protocol = build_protocol(eps, eta, eta_ft, max_steps)
    n_tokens = options.integer("--prompts", prompts, 1)
    chosen = simulators(n_tokens, seed=0)
    n = options.integer("--K", K, 2) or 4
    options.name_parameters({"K": ("--K", K), "prompts": ("--prompts", prompts)})
    limits.check_ood_vs_theta(n, protocol, n_tokens)    # before the output is checked
    draw(lambda: plots.ood_error_vs_theta(n, protocol, simulators=chosen), output)


@plot_app.command("phase-diagram")
def phase_diagram(
    output: Output,
    grid: Annotated[str, typer.Option("--grid", metavar="N",
        help="N × N points over [-1, 1]².")] = "201",
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """Forgetting F and the theorem's regimes over (γ1, γ2), K = 2."""
    from .. import plots
    protocol = build_protocol(eps, eta, eta_ft, max_steps)
    n = options.integer("--grid", grid, 3, math.isqrt(limits.MAX_ROWS),
                        f"N × N points: a sweep holds at most {limits.MAX_ROWS:,}")
    options.name_parameters({"n": ("--grid", grid)})
    limits.check_phase_diagram(n)                       # before the output is checked
    from .progress import rows_progress

    def make():
        with rows_progress("K = 2 grid") as progress:
            return plots.phase_diagram_k2(n, protocol, progress=progress)
    draw(make, output)


@plot_app.command("overlap-map")
def overlap_map(
    output: Output,
    grid: Annotated[str, typer.Option("--grid", metavar="N",
        help="N points of γ2 over [-1, 1]; ρ takes the same step within [-RHO_MAX, RHO_MAX].")
    ] = "41",
    rho_max: Annotated[str, typer.Option("--rho-max", metavar="RHO_MAX",
        help="Largest |ρ|, in [0, 1) (T1 grows as 1/(1-ρ)³: 10,869 steps at ρ = 0.8, "
             "40,878 at 0.9).")] = "0.9",
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """K = 2 with overlapping training features (⟨v1, v2⟩ = ρ, γ1 = 1): the exact sign of
    F_k over (ρ, γ2), the paper's rule (which ignores ρ) and the overlap-aware first-order
    criterion C_k, where each is wrong; prints the fractions."""
    from .. import plots
    from ..overlap_map import MAX_GRID, check_grid
    protocol = build_protocol(eps, eta, eta_ft, max_steps)
    n = options.integer("--grid", grid, 3, MAX_GRID,
                        "N × N points of exact Gram dynamics: N = 401 takes minutes")
    top = options.number("--rho-max", rho_max, "a number in [0, 1)")
    options.name_parameters({"n": ("--grid", grid), "rho_max": ("--rho-max", rho_max)})
    check_grid(n, top)                                  # before the output is checked
    from .progress import rows_progress
    plots.check_output(output)
    with rows_progress("overlap map") as progress:
        figure, m = plots.overlap_map_figure(n, protocol, rho_max=top, progress=progress)
    written = plots.save(figure, output)
    for k in (2, 1):
        f = m.fractions(k)
        print(f"feature {k}: the paper's rule contradicts the sign of F_{k} on "
              f"{100 * f['paper']:.1f} % of the {m.F_sign[..., 0].size:,} points, the sign "
              f"of C_{k} on {100 * f['C_sign']:.1f} %")
    print(written)


Gamma1 = Annotated[str, typer.Option("--gamma1", metavar="G1[,G1...]",
    help="γ_1 of each slice, in [-1, 1] (comma-separated: one block of panels per slice).")]
K3Grid = Annotated[str, typer.Option("--grid", metavar="N",
    help="N × N points of (γ2, γ3) over [-1, 1]² per slice.")]


def k3_slices(gamma1: str, grid: str, protocol):
    """Parse ``--gamma1`` and ``--grid``, check the cost, return ``(values, n)``."""
    from ..k3maps import check_gamma1
    values = check_gamma1(options.numbers("--gamma1", gamma1), "--gamma1")
    n = options.integer("--grid", grid, 3, math.isqrt(limits.MAX_ROWS),
                        f"N × N points: a sweep holds at most {limits.MAX_ROWS:,}")
    if len(values) * n * n > limits.MAX_ROWS:
        raise InputError("--grid", grid, f"{len(values)} slices × N × N must be at most "
                         f"{limits.MAX_ROWS:,} configurations; lower --grid or give fewer "
                         "--gamma1 values")
    options.name_parameters({"grid": ("--grid", grid), "gamma1": "--gamma1"})
    return values, n


@plot_app.command("phase-k3")
def phase_k3(
    output: Output,
    gamma1: Gamma1 = "0.25",     # the slice where all five answers differ (1: all agree)
    grid: K3Grid = "201",
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """K = 3, feature 1, slices at fixed γ1 over (γ2, γ3): the paper's verdict, the corrected
    condition, sign D_1, the exact first step and the exact sign of F_1, where they disagree;
    prints the area fractions."""
    from .. import plots
    from ..k3maps import fractions_table
    protocol = build_protocol(eps, eta, eta_ft, max_steps)
    values, n = k3_slices(gamma1, grid, protocol)
    from .progress import rows_progress
    plots.check_output(output)
    with rows_progress("K = 3 slices") as progress:
        figure, maps = plots.phase_k3_slices(values, n, protocol, progress=progress)
    written = plots.save(figure, output)
    print(fractions_table(maps))
    print(written)


@plot_app.command("real-rotation")
def real_rotation(
    output: Output,
    input_file: RealInput = None, quick: RealQuick = False, seeds: RealSeeds = None,
    cache_dir: RealCacheDir = None, threads: RealThreads = None,
) -> None:
    """Real encoder: cross-entropy against the rotation angle θ (three rotations), with the
    theory's OOD error for γ = cos θ. Runs the experiment unless --input names a saved result."""
    real_figure("rotation", output, input_file, quick, seeds, cache_dir, threads)


@plot_app.command("real-shift")
def real_shift(
    output: Output,
    input_file: RealInput = None, quick: RealQuick = False, seeds: RealSeeds = None,
    cache_dir: RealCacheDir = None, threads: RealThreads = None,
) -> None:
    """Real encoder: loss on each review domain against its representation's similarity to
    the source and the theory's OOD error. Runs the experiment unless --input is given."""
    real_figure("shift", output, input_file, quick, seeds, cache_dir, threads)


@plot_app.command("real-arms")
def real_arms(output: Output, input_file: RealInput = None) -> None:
    """Real encoder: forgetting against the new task's loss per intervention arm (F at
    matched loss), from a saved 'reproduce real --arms ... -f json' result."""
    from ..errors import InputError
    if input_file is None:
        raise InputError("--input", "nothing", "expected the JSON of 'oodcalc reproduce real "
                         "--arms NAME,... -f json -o FILE' (the arms run too long to redo "
                         "for a figure)")
    from .. import plots
    from ..real import plots as real_plots
    from .reproduce_real import load_result, shown
    plots.check_output(output)
    result = load_result(input_file)
    if "arms" not in result:
        raise InputError("--input", str(input_file), "has no intervention arms; expected the "
                         "JSON of 'oodcalc reproduce real --arms NAME,... -f json -o FILE'")
    figure = shown(input_file, lambda: real_plots.arms(result))
    print(plots.save(figure, output))


def real_figure(kind, output, input_file, quick, seeds, cache_dir, threads) -> None:
    from .. import plots
    from ..real import plots as real_plots
    from .reproduce_real import obtain, shown
    plots.check_output(output)
    result = obtain(input_file, quick, seeds, cache_dir, threads)
    figure = shown(input_file, lambda: getattr(real_plots, kind)(result))
    print(plots.save(figure, output))


@plot_app.command("advise")
def advise(
    output: Output,
    gamma: Gamma = None, theta: Theta = None, mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """Every fine-tuning intervention's F against its steps, and F along the replay and
    pull searches (oodcalc advise as a picture)."""
    from .. import plots
    from ..prescribe import advise as run_advise
    setting = build_setting(gamma, theta, K, mean_query, orthogonal, features, ood, d, tol,
                            eps, eta, eta_ft, max_steps, checks=[limits.check_predict])
    draw(lambda: plots.advice_figure(run_advise(setting)), output)
