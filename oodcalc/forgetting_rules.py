"""How well each forgetting rule of claim 8 predicts the exact dynamics, over random γ.

Three rules say, per source feature k of a parallel shift, whether fine-tuning on U makes
``L_{v_k}`` rise (forgetting, ``F_k > 0``) or fall (backward transfer, ``F_k < 0``):

- ``paper``: the paper's theorem (``theory.forgetting_regimes``): ``−γ_kγ_m0 > γ_k²``
  forgetting, ``−γ_kγ_m1 < γ_k²`` backward transfer, else undetermined;
- ``corrected``: the derived sufficient condition (``theory.corrected_regimes``):
  ``−γ_kγ_m0 > (K−1)γ_k²`` forgetting, the paper's backward-transfer condition;
- ``D_sign``: the sign of the first-step criterion ``theory.first_step_D``; it decides
  every feature (``flat`` only where ``D_k = 0``).

:func:`agreement` draws ``n`` settings ``γ ~ U[−1, 1]^K`` from ``seed``, runs them all
through the batched sweep (``sweep.gamma_rows``), and counts for each rule how many
features it decides (coverage) and how many of those it gets right against the sign of
the exact ``F_k`` (accuracy). Every miss is explained by the shape of the exact
trajectory of ``L_{v_k}`` (recorded only for the rows with a miss), keyed
``"verdict→shape"``: a rule can miss because the trajectory turns (``rise-then-fall``,
``fall-then-rise``, ...), because it is monotone the other way (``forgetting→falling``),
or, for ``D_sign``, because the exact first step at ``η_ft`` already differs from its
first-order sign (``first-step``). It also counts the features where hypothesis H (every
OOD share ``Λ_n`` of column k is >= 0 at T1) fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import theory
from .finetune.dynamics import descend, first_step_change, ood_start, source_logits
from .errors import InputError
from .geometry import check_K
from .model import attention, conditional_errors, loss_gradient_from_attention
from .prediction import pretrain_logits
from .report import TREND_TOL
from .setting import Protocol, require_plain
from .sweep import gamma_rows, sweep

__all__ = [
    "Agreement", "H_violation_rate", "PATH_BUDGET", "PROMISE", "RULES", "RuleScore",
    "agreement", "exact_first_step", "first_order_ratio", "random_gammas", "shape", "signs",
    "source_loss_paths", "source_slopes", "table",
]


RULES = ("paper", "corrected", "D_sign")

#: the sign of F_k each verdict promises
PROMISE = {"forgetting": 1, "backward-transfer": -1, "unaffected": 0,
           "rising": 1, "falling": -1, "flat": 0}

#: floats of recorded trajectory held at once while explaining misses (~32 MB)
PATH_BUDGET = 1 << 22


def signs(x: np.ndarray, tol: float = TREND_TOL) -> np.ndarray:
    """+1, −1, or 0 where ``|x| <= tol`` (the trend's tolerance for no change)."""
    return np.where(x > tol, 1, np.where(x < -tol, -1, 0))


def shape(series: np.ndarray, tol: float = TREND_TOL) -> str:
    """The shape of a 1-D series: ``flat``, ``rising``, ``falling``, the runs joined when
    it turns once or twice (``rise-then-fall``, ``fall-then-rise``,
    ``rise-then-fall-then-rise``, ...), ``oscillating`` from three turns on; steps within
    ``tol`` of zero (the trend's tolerance) do not count."""
    s = signs(np.diff(series), tol)
    s = s[s != 0]
    if s.size == 0:
        return "flat"
    runs = s[np.r_[True, s[1:] != s[:-1]]]
    if len(runs) == 1:
        return "rising" if runs[0] > 0 else "falling"
    if len(runs) <= 3:
        return "-then-".join("rise" if r > 0 else "fall" for r in runs)
    return "oscillating"


def exact_first_step(gamma: np.ndarray, z1: np.ndarray, eta_ft: float | np.ndarray
                     ) -> np.ndarray:
    """The exact change of ``e_k`` on ``v_k`` after one fine-tuning step of size
    ``eta_ft`` from ``Q^(T1)`` (one step of ``dynamics.descend``, carried to the source
    logits by claim 7), for a stack of parallel shifts ``gamma`` ``(B, K)``; ``z1`` is
    the T1 source logits ``(K, K)`` or ``(B, K, K)``."""
    gamma = np.atleast_2d(np.asarray(gamma, dtype=np.float64))
    M = gamma[:, :, None] * np.eye(gamma.shape[1])
    return first_step_change(np.broadcast_to(z1, M.shape), M, eta_ft)


def source_slopes(z1: np.ndarray) -> np.ndarray:
    """``g_k = ∂e_k/∂z[n, k]`` (n ≠ k) on the T1 source logits ``(..., K, K)``, from the
    model's gradient; the column is symmetric at T1, so every n ≠ k gives the same value
    (the mean is taken) and the diagonal is ``−(K−1)g_k``."""
    K = z1.shape[-1]
    grad = K * loss_gradient_from_attention(attention(z1))     # ∂e_k/∂z[n, k]
    off = ~np.eye(K, dtype=bool)
    return np.where(off, grad, 0.0).sum(axis=-2) / (K - 1)


def first_order_ratio(gamma: np.ndarray, z1: np.ndarray, D: np.ndarray, eta: float
                      ) -> np.ndarray:
    """The exact first-step change of ``e_k`` (:func:`exact_first_step`) over the
    first-order prediction ``(η/K) g_k D_k``; tends to 1 as ``η → 0`` when ``D`` is
    right. ``D``: any candidate formula's values, ``(B, K)``."""
    K = np.shape(gamma)[-1]
    return exact_first_step(gamma, z1, eta) / (eta / K * source_slopes(z1) * D)


def source_loss_paths(gamma: np.ndarray, z1: np.ndarray, protocol: Protocol) -> np.ndarray:
    """``L_{v_k}`` at every fine-tuning step, ``(T+1, B, K)``, for a stack of parallel
    shifts; rows that stopped earlier hold their final value."""
    M = gamma[:, :, None] * np.eye(gamma.shape[1])
    z1 = np.broadcast_to(z1, M.shape)
    z_ood0 = ood_start(z1, M)
    run = descend(z_ood0, protocol.eta_ft, protocol.eps, protocol.max_steps, record=True)
    return conditional_errors(source_logits(z1, M, z_ood0, run.trajectory)) / gamma.shape[1]


@dataclass(frozen=True)
class RuleScore:
    """One rule over ``features`` source features: how many it decides and gets right."""

    features: int
    decided: int
    correct: int
    misses: dict[str, int] = field(default_factory=dict)   # "verdict→shape": count

    @property
    def coverage(self) -> float:
        return self.decided / self.features if self.features else float("nan")

    @property
    def accuracy(self) -> float:
        return self.correct / self.decided if self.decided else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"features": self.features, "decided": self.decided, "correct": self.correct,
                "coverage": self.coverage, "accuracy": self.accuracy,
                "misses": dict(self.misses)}


@dataclass(frozen=True)
class Agreement:
    """The outcome of :func:`agreement` for one K (counts over source features)."""

    K: int
    n: int
    seed: int
    protocol: dict[str, Any]
    rows: int                    # settings counted: both phases converged and T2 >= 1
    skipped: int                 # settings not counted (no fine-tuning step, or stuck)
    scores: dict[str, RuleScore]
    first_step_agree: int        # sign D_k = sign of the exact first step of L_{v_k}
    first_step_features: int
    H_violated: int              # features with some Λ_n < 0 at T1
    H_violated_misses: dict[str, int]     # per rule: misses on features where H fails
    corrected_rise_without_D: int         # corrected says forgetting, yet D_k <= 0

    @property
    def features(self) -> int:
        return self.rows * self.K

    def to_dict(self) -> dict[str, Any]:
        return {"K": self.K, "n": self.n, "seed": self.seed, "protocol": self.protocol,
                "gamma": f"uniform in [-1, 1]^{self.K}, numpy default_rng({self.seed})",
                "rows": self.rows, "skipped": self.skipped, "features": self.features,
                "rules": {name: s.to_dict() for name, s in self.scores.items()},
                "first_step": {"agree": self.first_step_agree,
                               "features": self.first_step_features},
                "H_violated": self.H_violated, "H_violated_misses": self.H_violated_misses,
                "corrected_rise_without_D": self.corrected_rise_without_D}


def random_gammas(K: int, n: int, seed: int) -> np.ndarray:
    """``n`` settings ``γ ~ U[−1, 1]^K`` from ``numpy.random.default_rng(seed)``."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, K))


def agreement(K: int, n: int, seed: int, protocol: Protocol | None = None) -> Agreement:
    """Score the three rules of claim 8 against the exact dynamics on ``n`` random
    parallel shifts of ``K`` features (``random_gammas(K, n, seed)``).

    A setting whose OOD error already meets the stopping rule at T1 (``T2 = 0``: no
    fine-tuning, every ``F_k = 0``) or where a phase hits ``max_steps`` is skipped and
    counted in ``skipped``. Same arguments, same counts.
    """
    K = check_K(K)
    for name, value in (("n", n), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise InputError(name, value, "expected an integer >= 0")
    protocol = protocol or Protocol()
    require_plain(protocol, "the claim-8 rule scores")
    gamma = random_gammas(K, int(n), int(seed))
    result = sweep(gamma_rows(gamma, protocol.eps, protocol.eta, protocol.eta_ft),
                   max_steps=protocol.max_steps, seed=int(seed))
    keep = result["converged"] & (result["T2"] >= 1)
    gamma = gamma[keep]

    def per_feature(prefix: str) -> np.ndarray:
        return np.stack([result[f"{prefix}_{k + 1}"][keep] for k in range(K)], axis=1)

    outcome = signs(per_feature("F"))                                  # sign of F_k
    verdicts = {"paper": per_feature("regime"),
                "corrected": theory.regime_names(gamma, corrected=True),
                "D_sign": per_feature("D_direction")}

    z1 = pretrain_logits(K, protocol.eps, protocol.eta, protocol.max_steps).z[0]
    z_ood0 = ood_start(z1, gamma[:, :, None] * np.eye(K))
    H = theory.hypothesis_H(z_ood0)
    D_sign = np.vectorize(PROMISE.get, otypes=[int])(verdicts["D_sign"])
    first = signs(exact_first_step(gamma, z1, protocol.eta_ft))

    decided, wrong = {}, {}
    for name, v in verdicts.items():
        decided[name] = np.isin(v, list(PROMISE))
        promised = np.vectorize(lambda x: PROMISE.get(x, 9), otypes=[int])(v)
        wrong[name] = decided[name] & (promised != outcome)

    # Why each miss: the shape of the exact trajectory (recorded for those rows only).
    any_wrong = np.zeros(len(gamma), dtype=bool)
    for w in wrong.values():
        any_wrong |= w.any(axis=1)
    shapes = _shapes(gamma, z1, protocol, np.flatnonzero(any_wrong),
                     result["T2"][keep])
    scores = {}
    for name in RULES:
        why = Counter()
        for b, k in zip(*np.nonzero(wrong[name])):
            first_differs = name == "D_sign" and first[b, k] != D_sign[b, k]
            why[f"{verdicts[name][b, k]}→"
                f"{'first-step' if first_differs else shapes[b][k]}"] += 1
        scores[name] = RuleScore(features=gamma.size, decided=int(decided[name].sum()),
                                 correct=int((decided[name] & ~wrong[name]).sum()),
                                 misses=dict(sorted(why.items())))

    corrected_rise = verdicts["corrected"] == "forgetting"
    return Agreement(
        K=K, n=int(n), seed=int(seed), protocol=protocol.describe(),
        rows=len(gamma), skipped=int((~keep).sum()), scores=scores,
        first_step_agree=int((first == D_sign).sum()), first_step_features=gamma.size,
        H_violated=int((~H).sum()),
        H_violated_misses={name: int((wrong[name] & ~H).sum()) for name in RULES},
        corrected_rise_without_D=int((corrected_rise & (D_sign <= 0)).sum()))


def _shapes(gamma: np.ndarray, z1: np.ndarray, protocol: Protocol, rows: np.ndarray,
            T2: np.ndarray) -> dict[int, list[str]]:
    """Trajectory shape of every feature of ``rows``, recorded in blocks of rows that fit
    ``PATH_BUDGET`` floats."""
    K = gamma.shape[1]
    out: dict[int, list[str]] = {}
    if rows.size == 0:
        return out
    size = max(1, PATH_BUDGET // (K * K * (int(T2[rows].max()) + 2)))
    for start in range(0, len(rows), size):
        block = rows[start:start + size]
        paths = source_loss_paths(gamma[block], z1, protocol)
        for i, b in enumerate(block):
            out[int(b)] = [shape(paths[:, i, k]) for k in range(K)]
    return out


def H_violation_rate(K: int, eps: float, n: int, seed: int) -> float:
    """Fraction of source features whose OOD column violates hypothesis H at T1, over
    ``random_gammas(K, n, seed)``, with the closed-form logits at ``α*_{K,ε}`` (claim 5;
    no dynamics, so any ε is cheap)."""
    gamma = random_gammas(K, n, seed)
    z = theory.ood_logits(gamma[:, :, None] * np.eye(K), theory.alpha_star(K, eps))
    return float((~theory.hypothesis_H(z)).mean())


def table(results: list[Agreement]) -> str:
    """A Markdown table of :func:`agreement` results, one row per K."""
    def scored(s: RuleScore, coverage: bool = True) -> str:
        wrong = s.decided - s.correct
        accuracy = "—" if not s.decided else f"{100 * s.accuracy:.2f} % ({wrong} wrong)"
        return f"{100 * s.coverage:.1f} % · {accuracy}" if coverage else accuracy

    def misses(s: RuleScore) -> str:
        return ", ".join(f"{k} {v}" for k, v in s.misses.items()) or "—"

    def H(r: Agreement) -> str:
        if not r.H_violated:
            return "0"
        m = r.H_violated_misses
        return (f"{r.H_violated} (misses there: paper {m['paper']}, corrected "
                f"{m['corrected']}, D_k {m['D_sign']})")

    lines = ["| K | settings | paper: coverage · accuracy | corrected: coverage · accuracy "
             "| sign D_k: accuracy | sign D_k = exact first step | paper's misses "
             "| D_k's misses | H fails |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, c, d = (r.scores[name] for name in RULES)
        lines.append(
            f"| {r.K} | {r.rows} | {scored(p)} | {scored(c)} | {scored(d, coverage=False)} "
            f"| {r.first_step_agree}/{r.first_step_features} | {misses(p)} | {misses(d)} "
            f"| {H(r)} |")
    return "\n".join(lines)
