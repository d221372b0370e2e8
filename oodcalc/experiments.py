"""The synthetic experiments of the seed (``shared/seeds/000_6cb633026ef0d740.txt``),
reproduced under MODEL.md's protocol, with the seed's printed figure beside ours.

Nothing here is tuned to a printed number: every row runs the stated protocol (defaults
ε = 0.01, η = 0.1) and reports what comes out; the agreement column says plainly where
the seed's figure does not follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import geometry as geo
from .predict import predict
from .report import Report
from .setting import Protocol, Setting

SEED_FILE = "shared/seeds/000_6cb633026ef0d740.txt"

#: A simulator: ``Setting → Report`` in the shared schema.
Simulator = Callable[[Setting], Report]


@dataclass(frozen=True)
class Quantity:
    """One number of one experiment: how to read it off a Report, and what the seed printed."""

    experiment: str
    name: str
    read: Callable[[Report], float]
    seed_text: str
    seed_value: float
    seed_line: int


def _source_loss_at_t1(r: Report) -> float:
    return float(r.pretrain.error.max() / r.parameters["K"])   # max_k L_k, L_k = e_k/K


def _ood_loss(r: Report) -> float:
    return float(r.ood.error.sum() / r.parameters["K"])         # L = Σ_k e_k / K


def _first_attention(r: Report) -> float:
    return float(r.ood.attention[0, 0])


def _first_error(r: Report) -> float:
    return float(r.ood.error[0])


def _forgetting(r: Report) -> float:
    return r.F


K4_EXPERIMENTS: dict[str, Callable[[], geo.Geometry]] = {
    "θ = 0": lambda: geo.rotation(0.0, 4, d=8),
    "θ = π/6": lambda: geo.rotation(math.pi / 6, 4, d=8),
    "θ = π/3": lambda: geo.rotation(math.pi / 3, 4, d=8),
    "mean query": lambda: geo.mean_query(4, d=8),
    "orthogonal": lambda: geo.orthogonal(4, d=8),
}

K4_QUANTITIES = (
    Quantity("θ = 0", "max L_k(V) at T1", _source_loss_at_t1,
             "L^(tr) = 0.0024", 0.0024, 32),
    Quantity("θ = π/6", "OOD L at T1", _ood_loss, "L^(ft) = 0.0182", 0.0182, 33),
    Quantity("θ = π/3", "OOD L at T1", _ood_loss, "L^(ft) = 0.1450", 0.1450, 34),
    Quantity("mean query", "Attn_1(u_1)", _first_attention,
             "Attn = 0.250", 0.250, 35),
    Quantity("mean query", "e_1(u_1)", _first_error,
             "error 0.375", 0.375, 35),
    Quantity("orthogonal", "Attn_1(u_1)", _first_attention,
             "Attn = 0.250", 0.250, 36),
    Quantity("orthogonal", "e_1(u_1)", _first_error, "error 0.375", 0.375, 36),
)

K2_GAMMA2 = {-0.9: ("F = +0.421", 0.421, 44), -0.2: ("F = -0.112", -0.112, 45),
             0.0: ("F = -0.084", -0.084, 46), 0.5: ("F = -0.053", -0.053, 47),
             0.95: ("F ≈ 0.000", 0.0, 48)}


def k2_experiments() -> dict[str, Callable[[], geo.Geometry]]:
    return {f"γ2 = {g:+.2f}": (lambda g=g: geo.parallel_shift([1.0, g]))
            for g in K2_GAMMA2}


K2_QUANTITIES = tuple(
    Quantity(f"γ2 = {g:+.2f}", "F", _forgetting, text, value, line)
    for g, (text, value, line) in K2_GAMMA2.items())


def agreement(ours: float, seed: float, rel_tol: float = 0.05) -> tuple[str, str]:
    """(sign verdict, magnitude verdict) of our figure against the seed's."""
    if seed == 0.0:   # the seed prints "≈ 0.000": three decimals
        return "seed ≈ 0", "agrees" if abs(ours) < 5e-4 else f"|ours|={abs(ours):.2g}"
    sign = "same sign" if np.sign(ours) == np.sign(seed) else "opposite sign"
    ratio = ours / seed
    return sign, "agrees" if abs(ratio - 1) <= rel_tol else f"ours/seed = {ratio:.3g}"


def explain(q: Quantity, theory: Report) -> str:
    """Why the seed's figure does or does not follow from the protocol."""
    eps, K = theory.parameters["eps"], theory.parameters["K"]
    if q.read is _forgetting:
        before = sum(f.loss_before for f in theory.forgetting)
        if q.seed_value < -before:
            return (f"impossible under the protocol: F >= −L^(tr)(T1) = {-before:.4g}, "
                    f"since every L_k <= ε/K at T1")
        if abs(q.seed_value) > 10 * max(abs(theory.F), eps / K):
            return (f"the stopping rule keeps L^(tr) <= ε = {eps:g} before and the losses "
                    f"small after, so F is of order ε/K = {eps / K:g}; the seed's magnitude "
                    "needs another loss scale or protocol")
        return (f"U is close to V, yet e_k on U at T1 reaches {theory.ood.error.max():.3g} > ε, "
                f"so fine-tuning runs T2 = {theory.finetune.T2} steps that also raise the "
                f"source margins: F = {theory.F:+.3g}, {abs(theory.F) / (eps / K):.0%} of ε/K")
    if q.read is _source_loss_at_t1:
        return (f"the stopping rule L_k <= ε/K = {eps / K:g} holds; the seed's 0.0024 is "
                f"consistent with {q.read(theory):.7f} truncated to 4 decimals")
    if q.read is _ood_loss:
        return ("cos²θ scales the T1 logits (claim 5); the seed's value follows from "
                "ε = 0.01, η = 0.1 neither as L = Σ e_k/K nor as L_k = e_k/K")
    return "exact: uniform attention 1/K, error (K−1)/(2K) (claim 6)"


@dataclass(frozen=True)
class Row:
    quantity: Quantity
    theory: float
    simulations: dict[str, float]
    sign: str
    magnitude: str
    note: str

    def to_dict(self) -> dict[str, Any]:
        q = self.quantity
        return {"experiment": q.experiment, "quantity": q.name, "theory": self.theory,
                "simulation": self.simulations, "seed": q.seed_value,
                "seed_text": q.seed_text, "seed_source": f"{SEED_FILE}:{q.seed_line}",
                "sign": self.sign, "magnitude": self.magnitude, "note": self.note}


def run_table(experiments: dict[str, Callable[[], geo.Geometry]],
              quantities: tuple[Quantity, ...], protocol: Protocol,
              simulators: dict[str, Simulator]) -> list[Row]:
    rows = []
    for name, make in experiments.items():
        setting = Setting(make(), protocol)
        theory = predict(setting)
        simulated = {label: sim(setting) for label, sim in simulators.items()}
        for q in (q for q in quantities if q.experiment == name):
            ours = q.read(theory)
            sign, magnitude = agreement(ours, q.seed_value)
            rows.append(Row(q, ours, {label: q.read(r) for label, r in simulated.items()},
                            sign, magnitude, explain(q, theory)))
    return rows


def reproduce(protocol: Protocol | None = None,
              simulators: dict[str, Simulator] | None = None) -> dict[str, list[Row]]:
    """Both synthetic tables of the seed: ``{"K=4, d=8": rows, "K=2 γ sweep": rows}``."""
    from .simulate import simulate_population
    protocol = protocol or Protocol()
    simulators = {"GD on Q": simulate_population} if simulators is None else simulators
    return {
        "K = 4, d = 8: convergence at T1, rotation by θ, the corollary's two cases": run_table(
            K4_EXPERIMENTS, K4_QUANTITIES, protocol, simulators),
        "K = 2, γ1 = 1: forgetting F after fine-tuning, by γ2": run_table(
            k2_experiments(), K2_QUANTITIES, protocol, simulators),
    }

