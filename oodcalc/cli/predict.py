"""``oodcalc predict``: what the theory predicts for one geometry and protocol."""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Annotated, Optional

import typer

from .. import limits
from ..errors import ComputationError, InputError
from .app import app
from .progress import announce
from .setting_options import (L2, Dimension, Eps, EpsFt, Eta, EtaFt, Features, FtSteps, Gamma,
                              MaxSteps, MeanQuery, NumFeatures, Ood, Orthogonal, Overlap, Project,
                              Replay, Theta, Tolerance, Weights, build_setting,
                              interventions)


@app.command()
def predict(
    gamma: Gamma = None, overlap: Overlap = None, theta: Theta = None,
    mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
    eps_ft: EpsFt = None, ft_steps: FtSteps = None,
    replay: Replay = None, l2: L2 = None, project: Project = None, weights: Weights = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (every key "
        "in the report guide of the documentation); K × K matrices in full up to K = 16, summarised above.")] = False,
    arrays: Annotated[Optional[str], typer.Option("--arrays", metavar="FILE.npz",
        help="Also write every K × K matrix and trajectory in full to FILE.npz (atomically, "
             "no pickles; keys as named in the JSON, e.g. pretrain.z).")] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", metavar="DIGITS",
        help="Print only the closed forms (α*, β*, OOD weights and errors at α*, step-size "
             "bound), evaluated with mpmath at DIGITS significant digits; --eps is read at "
             "that precision (e.g. 1e-30 or 1e-600). The float64 dynamics are not run.",
        show_default="off: float64 closed forms and dynamics")] = None,
) -> None:
    """Predict pretraining, OOD error and forgetting for a geometry, exactly.

    Example: oodcalc predict --gamma 1,-0.9
    """
    if precision is not None:
        for option, given in (("--overlap", overlap), ("--eps-ft", eps_ft),
                              ("--ft-steps", ft_steps),
                              ("--replay", replay), ("--l2", l2), ("--project", project),
                              ("--weights", weights)):
            if given is not None:
                raise InputError(option, given, "--precision prints the closed forms only; "
                                 "fine-tuning runs without it")
        from ..symbolic.highprec import parse_digits, print_high_precision
        digits = parse_digits(precision)
        setting = build_setting(gamma, theta, K, mean_query, orthogonal, features, ood, d, tol,
                                None, eta, eta_ft, max_steps,
                                checks=[partial(limits.check_precision, digits=digits)])
        print_high_precision(setting, eps, precision, as_json)
        return
    from ..prediction import expected_seconds, predict as run_predict

    if arrays is not None:
        from ..io import check_output
        check_output(arrays, "--arrays", suffixes=(".npz",))    # before the run
    setting = build_setting(gamma, theta, K, mean_query, orthogonal, features, ood, d, tol,
                            eps, eta, eta_ft, max_steps, eps_ft=eps_ft, ft_steps=ft_steps,
                            finetuning=interventions(replay, l2, project, weights),
                            checks=[limits.check_predict],   # predict's own guard, early
                            overlap=overlap)
    try:
        seconds, words = expected_seconds(setting)
    except ComputationError:          # predict refuses it, in its own words
        seconds, words = 0.0, ""
    announce("predict", seconds, f" ({words})")
    if as_json or not sys.stderr.isatty():
        report = run_predict(setting)
    else:                                  # a bar on stderr if the run lasts a while
        from .progress import StepProgress
        with StepProgress() as progress:
            report = run_predict(setting, progress=progress)
    for warning in report.warnings:
        print(f"oodcalc: warning: {warning}", file=sys.stderr)
    if arrays is not None:
        from ..io import write_npz_atomic
        write_npz_atomic(arrays, report.arrays(), option="--arrays")
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        from .render import render_prediction
        render_prediction(report)
