"""The paper's closed forms, numerically (float64, vectorised).

Each function is one claim of MODEL.md; the symbolic engine derives the same formulas from
the model's definitions, and the tests compare them with the exact dynamics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import conditional_errors

#: |value| below this counts as zero in the exact-equality cases of the theorems.
ZERO_TOL = 1e-12


# --- claim 3: convergence at T1 -------------------------------------------------------

def stopping_margin(K: int, eps: float) -> float:
    """Smallest margin ``s = α − β`` on the symmetric ray that meets the stopping rule.

    On that ray ``1 − Attn_k = (K−1)e^{−s} / (1 + (K−1)e^{−s})`` and
    ``e_k = ½ K/(K−1) (1 − Attn_k)²``, so ``e_k <= ε`` iff ``s >= ln((K−1)(1−δ)/δ)`` with
    ``δ = √(2ε(K−1)/K)``. Where ``Q = 0`` already meets the rule the threshold is 0.
    """
    delta = math.sqrt(2.0 * eps * (K - 1) / K)
    if delta >= 1.0:
        return 0.0
    return max(0.0, math.log((K - 1) * (1.0 - delta) / delta))


def alpha_star(K: int, eps: float) -> float:
    """``α*_{K,ε} = (K−1)/K · s*``: the α-type weight at the stopping threshold."""
    return (K - 1) / K * stopping_margin(K, eps)


def beta_from_alpha(K: int, alpha: float) -> float:
    """Conservation plus symmetry: ``β = −α/(K−1)``."""
    return -alpha / (K - 1)


def symmetric_logits(K: int, alpha: float) -> np.ndarray:
    """The T1 logits ``Z = αK/(K−1) (I − 11ᵀ/K)``: α on the diagonal, −α/(K−1) elsewhere."""
    return alpha * K / (K - 1) * (np.eye(K) - 1.0 / K)


def q_at_t1(V: np.ndarray, alpha: float) -> np.ndarray:
    """``Q^(T1) = αK/(K−1) (V Vᵀ − v̄ v̄ᵀ)`` with ``v̄ = (1/√K) Σ v_i``."""
    K = V.shape[1]
    vbar = V.sum(axis=1) / math.sqrt(K)
    return alpha * K / (K - 1) * (V @ V.T - np.outer(vbar, vbar))


# --- claim 5 and 6: OOD weights and the corollary -------------------------------------

def mean_projections(M: np.ndarray) -> np.ndarray:
    """``⟨u_k, v̄⟩ = (Mᵀ 1)_k / √K``."""
    return M.sum(axis=0) / math.sqrt(M.shape[0])


def ood_logits(M: np.ndarray, alpha: float) -> np.ndarray:
    """Claim 5: ``z[k', k] = αK/(K−1) ([MᵀM]_{k'k} − ⟨u_k, v̄⟩⟨u_k', v̄⟩)``;
    the diagonal is ``α_{u_k}``, the off-diagonal ``β_{u_k', u_k}``."""
    K = M.shape[0]
    b = mean_projections(M)
    return alpha * K / (K - 1) * (M.T @ M - np.outer(b, b))


def uniform_error(K: int) -> float:
    """Error of uniform attention 1/K, i.e. of random guessing: ``(K−1)/(2K)``."""
    return (K - 1) / (2 * K)


def corollary_cases(M: np.ndarray, tol: float = 1e-9) -> list[str | None]:
    """Per OOD feature, which failure case of the corollary applies (claim 6), if any:
    ``"orthogonal-subspaces"`` (``M = 0``) or ``"mean-query"`` (``u_k = v̄`` and
    span(U) = span(V))."""
    K = M.shape[0]
    if np.abs(M).max() <= tol:
        return ["orthogonal-subspaces"] * K
    same_span = np.abs(M.T @ M - np.eye(K)).max() <= tol
    b = mean_projections(M)
    return ["mean-query" if same_span and abs(b[k] - 1.0) <= tol else None for k in range(K)]


# --- claim 9: fine-tuning step size ---------------------------------------------------

def step_size_bounds(z_ood: np.ndarray) -> np.ndarray:
    """Per OOD query ``u_k``: ``min_{n≠k} exp(−β_{u_n,u_k}^(T1))``."""
    off = np.where(np.eye(z_ood.shape[-1], dtype=bool), np.inf, -z_ood)
    return np.exp(off.min(axis=-2))


# --- claim 8: forgetting threshold ----------------------------------------------------

@dataclass(frozen=True)
class Regime:
    """What the theorem says for source feature ``k`` (1-based) under a parallel shift."""

    k: int
    regime: str  # forgetting | backward-transfer | undetermined | unaffected
    condition: str
    m0: int
    m1: int


def forgetting_regimes(gamma: np.ndarray) -> list[Regime]:
    """Claim 8 with ``m0 = argmax_{m≠k} γ_kγ_m`` and ``m1 = argmin_{m≠k} γ_kγ_m``:
    ``−γ_kγ_m0 > γ_k²`` gives forgetting, ``−γ_kγ_m1 < γ_k²`` backward transfer.

    ``unaffected`` marks the exact cases where the source margins of feature k cannot
    move: ``γ_k = 0`` (claim 7 multiplies every change by γ_k), and for K = 2 the
    boundary ``γ_k² + γ_kγ_m = 0`` (the margin changes by that factor times Δα ≥ 0).
    For K > 2, ``undetermined`` is the band between the two sufficient conditions.
    """
    gamma = np.asarray(gamma, dtype=np.float64)
    K = len(gamma)
    out = []
    for k in range(K):
        others = [m for m in range(K) if m != k]
        products = gamma[k] * gamma[others]
        m0, m1 = others[int(np.argmax(products))], others[int(np.argmin(products))]
        square = gamma[k] ** 2
        lhs0, lhs1 = -gamma[k] * gamma[m0], -gamma[k] * gamma[m1]
        g0 = f"−γ{k + 1}·γ{m0 + 1} = {lhs0:+.4g}"
        g1 = f"−γ{k + 1}·γ{m1 + 1} = {lhs1:+.4g}"
        sq = f"γ{k + 1}² = {square:.4g}"
        if abs(gamma[k]) <= ZERO_TOL or (K == 2 and abs(square - lhs0) <= ZERO_TOL):
            regime, condition = "unaffected", f"{g0} = {sq}: source margins of v{k + 1} cannot move"
        elif lhs0 > square:
            regime, condition = "forgetting", f"{g0} > {sq}"
        elif lhs1 < square:
            regime, condition = "backward-transfer", f"{g1} < {sq}"
        else:
            regime, condition = "undetermined", f"{g0} <= {sq} <= {g1}"
        out.append(Regime(k + 1, regime, condition, m0 + 1, m1 + 1))
    return out


def ood_errors(M: np.ndarray, alpha: float) -> np.ndarray:
    """``e_k`` on OOD query ``u_k`` at T1, from the claim-5 logits."""
    return conditional_errors(ood_logits(M, alpha))
