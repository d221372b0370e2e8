"""``oodcalc predict``: what the theory predicts for one geometry and protocol."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import geometry as geo
from ..errors import InputError
from ..setting import DEFAULT_EPS, DEFAULT_ETA, DEFAULT_MAX_STEPS, Protocol, Setting
from . import app, options

Text = Optional[str]
GEOMETRY_OPTIONS = "--gamma, --theta, --mean-query, --orthogonal or --features/--ood"


def build_setting(gamma: Text, theta: Text, K: Text, mean_query: bool, orthogonal: bool,
                  features: Optional[Path], ood: Optional[Path], d: Text, tol: Text,
                  eps: Text, eta: Text, eta_ft: Text, max_steps: Text) -> Setting:
    """Turn the command-line text into a validated Setting (errors name the option)."""
    chosen = [name for name, given in (("--gamma", gamma is not None),
                                       ("--theta", theta is not None),
                                       ("--mean-query", mean_query),
                                       ("--orthogonal", orthogonal),
                                       ("--features/--ood", features or ood)) if given]
    if len(chosen) != 1:
        raise InputError("geometry", " and ".join(chosen) if chosen else "none",
                         f"choose exactly one of {GEOMETRY_OPTIONS}")
    d_value = options.integer("--d", d, 2)
    k_value = options.integer("--K", K, 2)
    if k_value is not None and chosen[0] in ("--gamma", "--features/--ood"):
        raise InputError("--K", K, f"K follows from {chosen[0]}; omit --K")
    if chosen[0] in ("--theta", "--mean-query", "--orthogonal") and k_value is None:
        raise InputError("--K", "nothing", f"{chosen[0]} needs the number of features, "
                         "e.g. --K 4")
    try:
        geometry = _geometry(chosen[0], gamma, theta, k_value, features, ood, d_value, tol)
    except InputError as err:
        if err.what != "d":
            raise
        raise InputError("--d", d, err.accepted) from None
    protocol = Protocol(eps=options.positive("--eps", eps) or DEFAULT_EPS,
                        eta=options.positive("--eta", eta) or DEFAULT_ETA,
                        eta_ft=options.positive("--eta-ft", eta_ft),
                        max_steps=options.integer("--max-steps", max_steps, 1)
                        or DEFAULT_MAX_STEPS)
    return Setting(geometry, protocol)


def _geometry(kind: str, gamma: Text, theta: Text, K: int | None, features: Optional[Path],
              ood: Optional[Path], d: int | None, tol: Text) -> geo.Geometry:
    if kind == "--gamma":
        return geo.parallel_shift(options.numbers("--gamma", gamma), d, name="--gamma")
    if kind == "--theta":
        return geo.rotation(options.angle("--theta", theta), K, d)
    if kind == "--mean-query":
        return geo.mean_query(K, d)
    if kind == "--orthogonal":
        return geo.orthogonal(K, d)
    if features is None or ood is None:
        missing = "--ood" if features else "--features"
        raise InputError(missing, "nothing", "--features and --ood go together: "
                         "two d × K files, each column a feature")
    tolerance = options.positive("--tol", tol) or geo.ORTHONORMAL_TOL
    return geo.from_files(features, ood, d, tol=tolerance, names=("--features", "--ood"))


@app.command()
def predict(
    gamma: Annotated[Text, typer.Option("--gamma", metavar="G1,G2,...",
        help="Parallel shift: γ_k = ⟨v_k, u_k⟩ in [-1, 1], one per feature (K = count).",
        rich_help_panel="Geometry (choose one)")] = None,
    theta: Annotated[Text, typer.Option("--theta", metavar="RAD",
        help="Rotation of every feature by θ radians (e.g. 0.5236 or pi/6); needs --K.",
        rich_help_panel="Geometry (choose one)")] = None,
    mean_query: Annotated[bool, typer.Option("--mean-query",
        help="u_1 = v̄, the others complete a basis of span(V); needs --K.",
        rich_help_panel="Geometry (choose one)")] = False,
    orthogonal: Annotated[bool, typer.Option("--orthogonal",
        help="span(U) ⊥ span(V); needs --K.", rich_help_panel="Geometry (choose one)")] = False,
    features: Annotated[Optional[Path], typer.Option("--features", metavar="V_FILE",
        help="Training features V: d × K .npy, .csv or .json, each column a feature.",
        rich_help_panel="Geometry (choose one)")] = None,
    ood: Annotated[Optional[Path], typer.Option("--ood", metavar="U_FILE",
        help="OOD features U, same shape as V.", rich_help_panel="Geometry (choose one)")] = None,
    K: Annotated[Text, typer.Option("--K", "-K", metavar="INT",
        help="Number of features for --theta, --mean-query, --orthogonal.")] = None,
    d: Annotated[Text, typer.Option("--d", metavar="INT",
        help="Ambient dimension [default: smallest that holds the geometry].")] = None,
    tol: Annotated[Text, typer.Option("--tol", metavar="FLOAT",
        help=f"Orthonormality tolerance for feature files [default: {geo.ORTHONORMAL_TOL:g}].")] = None,
    eps: Annotated[Text, typer.Option("--eps", metavar="FLOAT",
        help=f"Stopping rule: every e_k <= eps (L_k <= eps/K) [default: {DEFAULT_EPS:g}].",
        rich_help_panel="Protocol")] = None,
    eta: Annotated[Text, typer.Option("--eta", metavar="FLOAT",
        help=f"Pretraining step size [default: {DEFAULT_ETA:g}].", rich_help_panel="Protocol")] = None,
    eta_ft: Annotated[Text, typer.Option("--eta-ft", metavar="FLOAT",
        help="Fine-tuning step size [default: --eta].", rich_help_panel="Protocol")] = None,
    max_steps: Annotated[Text, typer.Option("--max-steps", metavar="INT",
        help=f"Step cap per phase [default: {DEFAULT_MAX_STEPS}].", rich_help_panel="Protocol")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (schema in the README).")] = False,
) -> None:
    """Predict pretraining, OOD error and forgetting for a geometry, exactly.

    Example: oodcalc predict --gamma 1,-0.9
    """
    from ..predict import predict as run_predict

    setting = build_setting(gamma, theta, K, mean_query, orthogonal, features, ood, d, tol,
                            eps, eta, eta_ft, max_steps)
    report = run_predict(setting)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        from .render import render_prediction
        render_prediction(report)
