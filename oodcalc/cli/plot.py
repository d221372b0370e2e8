"""``oodcalc plot KIND -o FILE``: the pictures of oodcalc.plots (needs the plot extra)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import app, options
from .setting_options import (Dimension, Eps, Eta, EtaFt, Features, Gamma, MaxSteps, MeanQuery,
                              NumFeatures, Ood, Orthogonal, Theta, Tolerance, build_protocol,
                              build_setting)


class Kind(str, Enum):
    phase_diagram = "phase-diagram"
    ood_vs_theta = "ood-vs-theta"
    losses = "losses"
    weights = "weights"


@app.command()
def plot(
    kind: Annotated[Kind, typer.Argument(help="phase-diagram: F and regimes over (γ1, γ2), K = 2; "
                                         "ood-vs-theta: OOD error against rotation angle; "
                                         "losses / weights: trajectories for one geometry.")],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE",
        help="Where to write the figure; .png, .svg or .pdf (written atomically).")],
    grid: Annotated[str, typer.Option("--grid", metavar="N",
        help="phase-diagram: N × N points over [-1, 1]².")] = "201",
    prompts: Annotated[Optional[str], typer.Option("--prompts", metavar="N",
        help="ood-vs-theta: also mark the finite-prompt simulator with N tokens per prompt.")] = None,
    gamma: Gamma = None, theta: Theta = None, mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """Draw a figure. Examples: oodcalc plot losses --gamma 1,-0.9 -o losses.png;
    oodcalc plot phase-diagram -o phase.png; oodcalc plot ood-vs-theta --K 4 -o theta.svg"""
    from .. import plots

    plots.check_output(output)
    if kind in (Kind.losses, Kind.weights):
        from ..predict import predict
        report = predict(build_setting(gamma, theta, K, mean_query, orthogonal, features, ood,
                                       d, tol, eps, eta, eta_ft, max_steps))
        figure = (plots.loss_trajectories if kind is Kind.losses else plots.weight_trajectories)(report)
    else:
        protocol = build_protocol(eps, eta, eta_ft, max_steps)
        if kind is Kind.ood_vs_theta:
            from .reproduce import simulators
            chosen = simulators(options.integer("--prompts", prompts, 1), seed=0)
            figure = plots.ood_error_vs_theta(options.integer("--K", K, 2) or 4, protocol,
                                              simulators=chosen)
        else:
            figure = plots.phase_diagram_k2(options.integer("--grid", grid, 3), protocol)
    print(plots.save(figure, output))
