"""The geometry and protocol options that every command taking a setting shares
(``predict``, ``simulate``, ``plot``...), and their conversion into a validated Setting.

Declare them in a command's signature with these aliases, then call ``build_setting``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Optional, Sequence

import numpy as np
import typer

from .. import geometry as geo
from .. import limits
from ..errors import InputError
from ..setting import DEFAULT_EPS, DEFAULT_ETA, DEFAULT_MAX_STEPS, PROJECTIONS, WEIGHT_RULES, \
    Protocol, Setting
from . import options

Text = Optional[str]
GEOMETRY_OPTIONS = "--gamma, --theta, --mean-query, --orthogonal or --features/--ood"
GEOMETRY_PANEL = "Geometry (choose one)"
PROTOCOL_PANEL = "Protocol"

Gamma = Annotated[Text, typer.Option("--gamma", metavar="G1,G2,...",
    help="Parallel shift: γ_k = ⟨v_k, u_k⟩ in [-1, 1], one per feature (K = count).",
    rich_help_panel=GEOMETRY_PANEL)]
Overlap = Annotated[Text, typer.Option("--overlap", metavar="RHO|GRAM",
    help="With --gamma: overlapping training features, ⟨v_n, v_k⟩ = ρ for n ≠ k "
    "(−1/(K−1) < ρ < 1), or their whole Gram matrix VᵀV (rows inline, '1,0.5;0.5,1', or a "
    "K × K .npy, .csv or .json file); each u_k = γ_k v_k + √(1 − γ_k²) w_k.",
    rich_help_panel=GEOMETRY_PANEL)]
Theta = Annotated[Text, typer.Option("--theta", metavar="RAD",
    help="Rotation of every feature by θ radians (e.g. 0.5236 or pi/6); needs --K.",
    rich_help_panel=GEOMETRY_PANEL)]
MeanQuery = Annotated[bool, typer.Option("--mean-query",
    help="u_1 = v̄, the others complete a basis of span(V); needs --K.",
    rich_help_panel=GEOMETRY_PANEL)]
Orthogonal = Annotated[bool, typer.Option("--orthogonal",
    help="span(U) ⊥ span(V); needs --K.", rich_help_panel=GEOMETRY_PANEL)]
Features = Annotated[Optional[str], typer.Option("--features", metavar="V_FILE",
    help="Training features V: d × K .npy, .csv or .json, each column a feature.",
    rich_help_panel=GEOMETRY_PANEL)]
Ood = Annotated[Optional[str], typer.Option("--ood", metavar="U_FILE",
    help="OOD features U, same shape as V.", rich_help_panel=GEOMETRY_PANEL)]
NumFeatures = Annotated[Text, typer.Option("--K", "-K", metavar="INT",
    help="Number of features for --theta, --mean-query, --orthogonal.",
    rich_help_panel=GEOMETRY_PANEL)]
Dimension = Annotated[Text, typer.Option("--d", metavar="INT",
    help="Ambient dimension.", show_default="smallest that holds the geometry",
    rich_help_panel=GEOMETRY_PANEL)]
Tolerance = Annotated[Text, typer.Option("--tol", metavar="FLOAT",
    help="Orthonormality tolerance for feature files.", show_default=f"{geo.ORTHONORMAL_TOL:g}",
    rich_help_panel=GEOMETRY_PANEL)]
Eps = Annotated[Text, typer.Option("--eps", metavar="FLOAT",
    help="Stopping rule: every e_k <= eps (L_k <= eps/K).", show_default=f"{DEFAULT_EPS:g}",
    rich_help_panel=PROTOCOL_PANEL)]
Eta = Annotated[Text, typer.Option("--eta", metavar="FLOAT",
    help="Pretraining step size.", show_default=f"{DEFAULT_ETA:g}", rich_help_panel=PROTOCOL_PANEL)]
EtaFt = Annotated[Text, typer.Option("--eta-ft", metavar="FLOAT",
    help="Fine-tuning step size.", show_default="--eta", rich_help_panel=PROTOCOL_PANEL)]
EpsFt = Annotated[Text, typer.Option("--eps-ft", metavar="FLOAT",
    help="Fine-tuning's own stopping rule: every e_k <= eps-ft.", show_default="--eps",
    rich_help_panel=PROTOCOL_PANEL)]
FtSteps = Annotated[Text, typer.Option("--ft-steps", metavar="INT",
    help="Fine-tune exactly INT steps, with no stopping rule (not with --eps-ft).",
    show_default="off: until the stopping rule", rich_help_panel=PROTOCOL_PANEL)]
FINETUNING_PANEL = "Fine-tuning interventions"
Replay = Annotated[Text, typer.Option("--replay", metavar="λ",
    help="Replay: each fine-tuning step is (1 − λ) of the gradient on U plus λ of the "
    "gradient on V, 0 <= λ < 1.", show_default="0", rich_help_panel=FINETUNING_PANEL)]
L2 = Annotated[Text, typer.Option("--l2", metavar="μ",
    help="Pull toward the pretrained weights: adds (μ/2)‖Q − Q^(T1)‖² to the fine-tuning "
    "loss, μ >= 0.", show_default="0", rich_help_panel=FINETUNING_PANEL)]
Project = Annotated[Text, typer.Option("--project", metavar="|".join(PROJECTIONS[1:]),
    help="Project the fine-tuning update off span(V) on the key side, the query side or "
    "both.", show_default="none", rich_help_panel=FINETUNING_PANEL)]
Weights = Annotated[Text, typer.Option("--weights", metavar="C1,...|RULE",
    help="Weights c_k >= 0 of the OOD queries in the fine-tuning loss, or a rule on each "
    "u_k's cosine to the pretraining centre: cosine (max(cos, 0), mean 1) or "
    "drop-negative (0 where cos < 0). The stopping rule covers c_k > 0.",
    show_default="all 1", rich_help_panel=FINETUNING_PANEL)]


def interventions(replay: Text = None, l2: Text = None, project: Text = None,
                  weights: Text = None) -> dict:
    """The intervention options as :class:`~oodcalc.setting.Protocol` keywords (the
    Protocol checks their ranges, named by these options)."""
    out: dict = {}
    if replay is not None:
        out["replay"] = options.number("--replay", replay, "expected a share 0 <= λ < 1")
    if l2 is not None:
        out["l2"] = options.number("--l2", l2, "expected a finite number >= 0")
    if project is not None:
        out["project"] = project.strip().lower()
    if weights is not None:
        rule = weights.strip().lower()
        out["weights"] = rule if rule in WEIGHT_RULES or not any(
            c.isdigit() for c in rule) else tuple(options.numbers("--weights", weights))
    return out


def _power(n: int) -> str:
    """A power of ten as ``10^12`` (the caps are powers of ten)."""
    return f"10^{len(str(n)) - 1}" if str(n).rstrip("0") == "1" else f"{n:,}"


MaxSteps = Annotated[Text, typer.Option("--max-steps", metavar="INT|auto",
    help=f"Most steps per phase, up to {_power(limits.MAX_STEPS)}. auto: {DEFAULT_MAX_STEPS:,}, "
    f"or twice a phase's estimated steps where it needs more, up to "
    f"{_power(limits.AUTO_STEP_LIMIT)}.",
    show_default="auto", rich_help_panel=PROTOCOL_PANEL)]


def build_protocol(eps: Text, eta: Text, eta_ft: Text, max_steps: Text = None,
                   eps_ft: Text = None, ft_steps: Text = None,
                   finetuning: dict | None = None) -> Protocol:
    # "auto" is accepted so that the parameters block of --json (max_steps: "auto") reruns as is
    steps = None
    if max_steps is not None and max_steps.strip().lower() != "auto":
        steps = options.integer("--max-steps", max_steps, 1, limits.MAX_STEPS,
                                "steps per phase", accepted='expected an integer >= 1 or "auto"')
    n = None
    if ft_steps is not None:
        n = options.integer("--ft-steps", ft_steps, 1, limits.MAX_STEPS, "fine-tuning steps")
        if eps_ft is not None:
            raise InputError("--eps-ft", eps_ft, "give --eps-ft or --ft-steps, not both (a "
                             "fixed number of steps has no stopping rule)")
    return Protocol(eps=options.positive("--eps", eps) or DEFAULT_EPS,
                    eta=options.positive("--eta", eta) or DEFAULT_ETA,
                    eta_ft=options.positive("--eta-ft", eta_ft), max_steps=steps,
                    eps_ft=options.positive("--eps-ft", eps_ft), ft_steps=n,
                    **(finetuning or {}))


#: ``check(K, d, protocol, diagonal=...)``: a guard of the library (``limits.check_*``,
#: or a ``functools.partial`` of one) for the entry point a command will call, run before
#: the geometry's arrays exist; ``d`` None: the smallest; ``diagonal``: diag M where the
#: options already give it.
Check = Callable[..., None]


def build_setting(gamma: Text, theta: Text, K: Text, mean_query: bool, orthogonal: bool,
                  features: Text, ood: Text, d: Text, tol: Text,
                  eps: Text, eta: Text, eta_ft: Text, max_steps: Text = None, *,
                  checks: Sequence[Check] = (), eps_ft: Text = None,
                  ft_steps: Text = None, finetuning: dict | None = None,
                  overlap: Text = None) -> Setting:
    """Turn the command-line text into a validated Setting (errors name the option).

    With ``checks`` (the library's guards of what the command will run), what is out of
    reach is refused before the geometry's arrays exist (for feature files, once their
    shape is known); the library's errors then name this command's options (the names
    are registered with :func:`options.name_parameters`)."""
    files = features is not None or ood is not None
    chosen = [name for name, given in (("--gamma", gamma is not None),
                                       ("--theta", theta is not None),
                                       ("--mean-query", mean_query),
                                       ("--orthogonal", orthogonal),
                                       ("--features/--ood", files)) if given]
    if len(chosen) != 1:
        raise InputError("geometry", " and ".join(chosen) if chosen else "none",
                         f"choose exactly one of {GEOMETRY_OPTIONS}")
    if overlap is not None and chosen[0] != "--gamma":
        raise InputError("--overlap", overlap, "--overlap goes with --gamma (one γ per "
                         "feature): e.g. --overlap 0.8 --gamma 1,0.5")
    rho = None if overlap is None else _overlap(overlap)
    d_value = options.integer("--d", d, 2)
    k_value = options.integer("--K", K, 2)
    if k_value is not None and chosen[0] in ("--gamma", "--features/--ood"):
        raise InputError("--K", K, f"K follows from {chosen[0]}; omit --K")
    if chosen[0] in ("--theta", "--mean-query", "--orthogonal") and k_value is None:
        raise InputError("--K", "nothing", f"{chosen[0]} needs the number of features, "
                         "e.g. --K 4")
    protocol = build_protocol(eps, eta, eta_ft, max_steps, eps_ft, ft_steps, finetuning)
    options.name_parameters({"d": ("--d", d)})
    if checks and chosen[0] != "--features/--ood":
        values = options.numbers("--gamma", gamma) if chosen[0] == "--gamma" else None
        count = k_value if k_value is not None else len(values)
        if k_value is not None:
            options.name_parameters({"K": ("--K", K)})
        else:
            options.name_parameters({"K": ("--gamma", f"{count} values"),
                                     "lower K": "give fewer --gamma values"})
        if count >= 2:   # fewer: the geometry below says what it needs
            diagonal = (np.array(values) if values is not None and _in_range(values)
                        and rho is None else None)
            for check in checks:
                check(count, d_value, protocol, diagonal=diagonal)
    if checks and chosen[0] == "--features/--ood" and features is not None:
        shape = geo.feature_shape(features)   # a .npy's header: refuse before reading it
        if shape is not None and len(shape) == 2 and shape[1] >= 2:
            options.name_parameters({"K": ("--features", f"{shape[1]} features")})
            for check in checks:
                check(shape[1], None, protocol)
    try:
        geometry = _geometry(chosen[0], gamma, theta, k_value, features, ood, d_value, tol,
                             rho)
    except InputError as err:
        if err.what != "d":
            raise
        raise InputError("--d", d, err.accepted) from None
    if checks and chosen[0] == "--features/--ood":
        options.name_parameters({"K": ("--features", f"{geometry.K} features")})
        for check in checks:
            check(geometry.K, None, protocol)
    return Setting(geometry, protocol)


def _in_range(values: list[float]) -> bool:
    return all(-1.0 <= g <= 1.0 for g in values)


def _overlap(text: str) -> float | np.ndarray:
    """``--overlap``: one number ρ, rows of a Gram matrix inline (``1,0.5;0.5,1``) or the
    path of a K × K file."""
    if ";" in text:
        rows = [options.numbers("--overlap", row) for row in text.split(";")]
        if len({len(row) for row in rows}) > 1:
            raise InputError("--overlap", repr(text), "a Gram matrix's rows, separated by "
                             "';', each with K numbers, e.g. '1,0.5;0.5,1'")
        return np.array(rows)
    if Path(text).suffix.lower() in geo.FEATURE_FILE_SUFFIXES:
        return geo.load_features(text, "--overlap")
    return options.number("--overlap", text, "expected the overlap ρ (a number), a Gram "
                          "matrix's rows inline ('1,0.5;0.5,1') or a .npy, .csv or .json file")


def _geometry(kind: str, gamma: Text, theta: Text, K: int | None, features: Text,
              ood: Text, d: int | None, tol: Text,
              rho: float | np.ndarray | None) -> geo.Geometry:
    if kind == "--gamma" and isinstance(rho, np.ndarray):
        return geo.gram(rho, options.numbers("--gamma", gamma), d,
                        names=("--overlap", "--gamma"))
    if kind == "--gamma" and rho is not None:
        return geo.overlap(rho, options.numbers("--gamma", gamma), d,
                           names=("--overlap", "--gamma"))
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
