"""The paper's closed forms, numerically (float64, vectorised).

Each function is one claim of the paper (docs/theory.md lists them); the symbolic engine derives the same formulas from
the model's definitions, and the tests compare them with the exact dynamics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import attention_first, column_gram, conditional_errors, errors_and_gradient, \
    features_first, features_last, matrices_first, matrices_last

__all__ = [
    "DIRECTIONS", "FLAT_RTOL", "PAPER_K3_COUNTEREXAMPLES", "PROMISE", "REGIMES", "Regime",
    "ZERO_TOL", "alpha_star", "beta_from_alpha", "centred_gram_spectrum", "corollary_cases",
    "corrected_regimes", "directions_from_D", "first_step_D", "first_step_terms",
    "flow_time", "forgetting_regimes", "gram_alpha_star", "hypothesis_H",
    "initial_directions", "k2_error", "k2_flow_margin", "k2_flow_time", "mean_projections",
    "ood_errors", "ood_logits", "ood_shares", "overlap_first_order", "promised_signs",
    "q_at_t1", "regime_names", "step_size_bounds", "stopping_margin", "symmetric_logits",
    "t1_bracket", "uniform_error", "uniform_errors", "uniform_overlap",
]


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


def centred_gram_spectrum(G: np.ndarray) -> np.ndarray:
    """The eigenvalues of a Gram matrix on the directions the errors live in: every
    column of ``a − δ_k`` sums to 0, so only ``G`` on ``1⊥`` acts (``P G P``,
    ``P = I − 11ᵀ/K``; ``K − 1`` values, ascending). Equal values: ``G`` acts there as a
    multiple of the identity (equal overlaps ``⟨v_n, v_k⟩ = ρ``: ``1 − ρ``)."""
    K = G.shape[-1]
    basis = np.linalg.qr(np.eye(K) - 1.0 / K)[0][:, :K - 1]     # orthonormal basis of 1⊥
    return np.linalg.eigvalsh(basis.T @ G @ basis)


def uniform_overlap(G: np.ndarray, tol: float = 1e-12) -> float | None:
    """``c`` when the Gram matrix acts on ``1⊥`` as ``c I`` (every pair of features at the
    same overlap ``ρ``: ``c = 1 − ρ``), else None. Then ``s = G r = c r`` and
    ``G g G = c² g``: the Gram dynamics are the orthonormal ones with ``η c³`` and
    ``ε / c`` (docs/theory.md, "Overlapping features")."""
    spectrum = centred_gram_spectrum(G)
    return float(spectrum.mean()) if spectrum[-1] - spectrum[0] <= tol else None


def gram_alpha_star(G: np.ndarray, eps: float) -> float | None:
    """The α-type weight at the stopping threshold for overlapping features when the
    dynamics reduce to the orthonormal ones (:func:`uniform_overlap`):
    ``α*_{K, ε/c}``; K = 2: ``½ ln((1 − q*)/q*)``, ``q* = √(ε/(1 − ρ))``. None otherwise
    (no closed form known)."""
    c = uniform_overlap(G)
    return None if c is None else alpha_star(G.shape[-1], eps / c)


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


# --- claim 4: how T1 grows -------------------------------------------------------------

def flow_time(K: int, eps: float, eta: float) -> float:
    """Gradient-flow time to the stopping margin on the symmetric ray (claim 4):
    ``T_flow = ∫_{u*}^{1} (1 + m u)³/(ηK u³) du`` with ``m = K − 1``, ``u = e^{−s}`` and
    ``u* = δ/(m(1 − δ))``; 0 when Q = 0 already meets the rule."""
    if stopping_margin(K, eps) == 0.0:
        return 0.0
    m = K - 1
    delta = math.sqrt(2.0 * eps * m / K)
    u = delta / (m * (1.0 - delta))

    def antiderivative(x: float) -> float:
        return -0.5 / x ** 2 - 3 * m / x + 3 * m ** 2 * math.log(x) + m ** 3 * x
    return (antiderivative(1.0) - antiderivative(u)) / (eta * K)


def t1_bracket(K: int, eps: float, eta: float) -> tuple[float, float]:
    """Bounds ``T_flow/ρ₊ <= T1 < T_flow/ρ₋ + 1`` on the discrete T1 (claim 4): each GD step
    advances the flow clock by between ``ρ₋ = (1 − e^{−cH})/(cH)`` and ``ρ₊ = (e^{cH} − 1)/(cH)``
    with ``c = 2`` (a bound on |(log h)'|) and ``H = 4ηK/(27(K − 1)²)`` (the largest step)."""
    T = flow_time(K, eps, eta)
    cH = 2.0 * 4.0 * eta * K / (27.0 * (K - 1) ** 2)
    rho_minus, rho_plus = -math.expm1(-cH) / cH, math.expm1(cH) / cH
    return T / rho_plus, T / rho_minus + 1.0


# --- claim 5 and 6: OOD weights and the corollary -------------------------------------

def mean_projections(M: np.ndarray) -> np.ndarray:
    """``⟨u_k, v̄⟩ = (Mᵀ 1)_k / √K`` (batched over leading axes)."""
    return M.sum(axis=-2) / math.sqrt(M.shape[-2])


def ood_logits(M: np.ndarray, alpha: float) -> np.ndarray:
    """Claim 5: ``z[k', k] = αK/(K−1) ([MᵀM]_{k'k} − ⟨u_k, v̄⟩⟨u_k', v̄⟩)``;
    the diagonal is ``α_{u_k}``, the off-diagonal ``β_{u_k', u_k}``. ``M`` may be a
    stack ``(..., K, K)``."""
    K = M.shape[-1]
    b = mean_projections(M)
    return alpha * K / (K - 1) * (column_gram(M) - b[..., :, None] * b[..., None, :])


#: The sign of F_k each verdict promises (None: no promise): the regimes of the paper's and
#: the corrected rule, and the directions of a first-order criterion or a first step.
PROMISE = {"forgetting": 1, "backward-transfer": -1, "unaffected": 0, "undetermined": None,
           "rising": 1, "falling": -1, "flat": 0}


def promised_signs(names: np.ndarray) -> np.ndarray:
    """The sign of F_k each verdict name promises, elementwise (:data:`PROMISE`); NaN where
    it promises none."""
    out = np.full(np.shape(names), np.nan)
    for name, sign in PROMISE.items():
        if sign is not None:
            out[names == name] = sign
    return out


def uniform_error(K: int) -> float:
    """Error of uniform attention 1/K, i.e. of random guessing: ``(K−1)/(2K)``."""
    return (K - 1) / (2 * K)


def uniform_errors(G: np.ndarray) -> np.ndarray:
    """Per feature, the error of uniform attention for unit features with Gram matrix
    ``G``: ``e_k = ½ (1/K − δ_k)ᵀ G (1/K − δ_k) = ½ [1 − 2(G1)_k/K + 1ᵀG1/K²]``; every
    entry is :func:`uniform_error` at ``G = I``, and overlap lowers it."""
    G = np.asarray(G, dtype=np.float64)
    K = G.shape[-1]
    row = G.sum(axis=-1)
    return 0.5 * (1.0 - 2.0 * row / K + row.sum(axis=-1, keepdims=True) / K**2)


def corollary_cases(M: np.ndarray, tol: float = 1e-9) -> list[str | None]:
    """Per OOD feature, which failure case of the corollary applies (claim 6), if any:
    ``"orthogonal-subspaces"`` (``M = 0``) or ``"mean-query"`` (``u_k = v̄`` and
    span(U) = span(V))."""
    K = M.shape[0]
    if np.abs(M).max() <= tol:
        return ["orthogonal-subspaces"] * K
    same_span = np.abs(column_gram(M) - np.eye(K)).max() <= tol
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


#: Parallel shifts (K = 3) that meet the paper's forgetting condition for feature 1 and
#: yet make L_{v_1} fall at every step (claim 8b): the first exactly, the second
#: numerically.
PAPER_K3_COUNTEREXAMPLES = ((0.5, -0.9, -0.9), (-0.7, 0.9, 0.95))


def forgetting_regimes(gamma: np.ndarray) -> list[Regime]:
    """Claim 8 with ``m0 = argmax_{m≠k} γ_kγ_m`` and ``m1 = argmin_{m≠k} γ_kγ_m``:
    ``−γ_kγ_m0 > γ_k²`` gives forgetting, ``−γ_kγ_m1 < γ_k²`` backward transfer.

    ``unaffected`` marks the exact cases where the source margins of feature k cannot
    move: ``γ_k = 0`` (claim 7 multiplies every change by γ_k), and for K = 2 the
    boundary ``γ_k² + γ_kγ_m = 0`` (the margin changes by that factor times Δα ≥ 0).
    For K > 2, ``undetermined`` is the band between the two sufficient conditions.
    The paper's forgetting condition is not sufficient for K > 2 (see
    :func:`corrected_regimes` and :func:`first_step_D`); this is the paper's verdict.
    """
    return _regimes(gamma, corrected=False)


def corrected_regimes(gamma: np.ndarray) -> list[Regime]:
    """Claim 8 with the derived forgetting threshold: ``−γ_kγ_m0 > (K−1)γ_k²`` gives
    ``forgetting`` (sufficient for an initial rise of L_{v_k} when every OOD share
    ``Λ_n`` of column k is >= 0, see :func:`first_step_D`), ``−γ_kγ_m1 < γ_k²`` the
    paper's ``backward-transfer``; ``unaffected`` and ``undetermined`` as in
    :func:`forgetting_regimes`. For K = 2 the two functions agree (K − 1 = 1)."""
    return _regimes(gamma, corrected=True)


def _regimes(gamma: np.ndarray, corrected: bool) -> list[Regime]:
    gamma = np.asarray(gamma, dtype=np.float64)
    K = len(gamma)
    names = regime_names(gamma[None], corrected=corrected)[0]
    factor = K - 1 if corrected else 1
    # per k, the other feature with the largest and the smallest γ_k·γ_m (the first on a tie)
    products = gamma[:, None] * gamma[None, :]
    diagonal = np.eye(K, dtype=bool)
    m0s = np.argmax(np.where(diagonal, -np.inf, products), axis=1)
    m1s = np.argmin(np.where(diagonal, np.inf, products), axis=1)
    out = []
    for k in range(K):
        m0, m1 = int(m0s[k]), int(m1s[k])
        square = gamma[k] ** 2
        lhs0, lhs1 = -gamma[k] * gamma[m0], -gamma[k] * gamma[m1]
        g0 = f"−γ{k + 1}·γ{m0 + 1} = {lhs0:+.4g}"
        g1 = f"−γ{k + 1}·γ{m1 + 1} = {lhs1:+.4g}"
        sq = f"γ{k + 1}² = {square:.4g}"
        threshold = sq if factor == 1 else f"{factor}·γ{k + 1}² = {factor * square:.4g}"
        regime = names[k]
        condition = {
            "unaffected": f"{g0} = {sq}: source margins of v{k + 1} cannot move",
            "forgetting": f"{g0} > {threshold}",
            "backward-transfer": f"{g1} < {sq}",
            "undetermined": (f"{g0} <= {sq} <= {g1}" if factor == 1
                             else f"{g0} <= {threshold}, {g1} >= {sq}"),
        }[regime]
        out.append(Regime(k + 1, regime, condition, m0 + 1, m1 + 1))
    return out


REGIMES = ("forgetting", "backward-transfer", "undetermined", "unaffected")
_NAMES = np.array(REGIMES, dtype=object)


def regime_names(gamma: np.ndarray, corrected: bool = False) -> np.ndarray:
    """The verdicts of :func:`forgetting_regimes` (or, with ``corrected``, of
    :func:`corrected_regimes`) for a stack ``γ`` of shape ``(B, K)``: one name per row
    and source feature, shape ``(B, K)``, object dtype."""
    g = features_first(gamma)                                 # g[k, b]
    K = g.shape[0]
    products = g[:, None] * g[None, :]                        # γ_m γ_k at [m, k, b]
    diagonal = np.arange(K)
    products[diagonal, diagonal] = -np.inf                    # over m ≠ k
    lhs0 = -products.max(axis=0)                              # −γ_kγ_m0
    products[diagonal, diagonal] = np.inf
    lhs1 = -products.min(axis=0)                              # −γ_kγ_m1
    square = g ** 2
    unaffected = np.abs(g) <= ZERO_TOL
    if K == 2:
        unaffected |= np.abs(square - lhs0) <= ZERO_TOL
    code = np.full(g.shape, REGIMES.index("undetermined"))
    code[lhs1 < square] = REGIMES.index("backward-transfer")
    code[lhs0 > (K - 1 if corrected else 1) * square] = REGIMES.index("forgetting")
    code[unaffected] = REGIMES.index("unaffected")
    return _NAMES[np.moveaxis(code, 0, -1)]   # one str object per name, shared


# --- claim 8, derived: the direction of the first fine-tuning step ----------------------

#: ``D_k`` counts as zero (direction ``flat``) when ``|D_k|`` is at most this fraction of
#: the magnitudes it is made of (float64 rounding of a sum of K terms is far below it).
FLAT_RTOL = 1e-12

DIRECTIONS = ("rising", "falling", "flat")


def ood_shares(z_ood: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What one fine-tuning step does to the OOD logits, in units of ``η/K``.

    For column k with attention ``a = softmax(z_ood[:, k])``, ``Λ[n, k] =
    a_n (a_n + a_k − Σ_m a_m²)`` is the decrease of ``β_{u_n,u_k}`` (n ≠ k; zero on the
    diagonal) and ``Δ_k = Σ_n Λ[n, k] = 2 a_k e_k`` the growth of ``α_{u_k}``
    (conservation). Shapes ``(..., K, K)`` → ``(..., K, K)``, ``(..., K)``.
    """
    shares = _shares(matrices_first(z_ood))[0]
    return matrices_last(shares), features_last(shares.sum(axis=0))


def _shares(x: np.ndarray | None, a: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """``Λ[n, k]`` and the magnitudes it is computed from, ``a_n (a_n + a_k + Σ a_m²)``,
    of the OOD logits ``x[n, k, ...]`` (:func:`~oodcalc.model.matrices_first`), in that
    layout; or of their attention ``a`` when the caller has it (``attention_first(x)``)."""
    a = attention_first(x) if a is None else a
    diagonal = np.arange(a.shape[0])
    a_k = a[diagonal, diagonal]                                    # a[k, k, ...]
    sum_sq = (a * a).sum(axis=0)
    shares, size = a * (a + a_k - sum_sq), a * (a + a_k + sum_sq)
    shares[diagonal, diagonal] = 0.0
    size[diagonal, diagonal] = 0.0
    return shares, size


def first_step_terms(gamma: np.ndarray, z_ood: np.ndarray, *,
                     attention: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``D_k`` (see :func:`first_step_D`) and the sum of the magnitudes it is made of
    (inside ``Λ_n`` too), the scale against which :data:`FLAT_RTOL` decides that ``D_k``
    is zero. A caller that has the attention of ``z_ood`` (``attention_first`` of its
    ``matrices_first``, same batch) passes it as ``attention``: the same bits."""
    gamma, z_ood = np.asarray(gamma, dtype=np.float64), np.asarray(z_ood, dtype=np.float64)
    batch = np.broadcast_shapes(gamma.shape[:-1], z_ood.shape[:-2])
    K = gamma.shape[-1]
    g = features_first(np.broadcast_to(gamma, batch + (K,)))         # γ[k, ...]
    shares, size = _shares(None, attention) if attention is not None else \
        _shares(matrices_first(np.broadcast_to(z_ood, batch + (K, K))))
    cross = g[:, None] * g[None, :]                                # γ_n γ_k at [n, k]
    square = g ** 2
    D = -(cross * shares).sum(axis=0) - (K - 1) * square * shares.sum(axis=0)
    scale = (np.abs(cross) * size).sum(axis=0) + (K - 1) * square * size.sum(axis=0)
    return features_last(D), features_last(scale)


def first_step_D(gamma: np.ndarray, z_ood: np.ndarray) -> np.ndarray:
    """Claim 8, derived: the first fine-tuning step changes the source error ``e_k`` (on
    ``v_k``) by ``(η/K) g_k D_k + O(η²)`` with ``g_k > 0``, where

    ``D_k = Σ_{n≠k} (−γ_kγ_n) Λ_n − (K−1) γ_k² Δ``

    with ``Λ_n``, ``Δ`` the shares of OOD column k at T1 (:func:`ood_shares`). Why: the
    source column k is symmetric at T1 (claim 3), so ``∂e_k/∂z_{n,k}`` is the same
    ``g_k`` for every n ≠ k and ``−(K−1)g_k`` on the diagonal (conservation), and the
    step moves the source column by ``γ_k²`` times the OOD diagonal change and
    ``γ_nγ_k`` times the off-diagonal ones (claim 7). For K = 2, ``D_k =
    −Δγ_k(γ_k + γ_m)``: the paper's theorem.

    ``gamma``: ``(..., K)`` of a parallel shift; ``z_ood``: the T1 OOD logits
    ``(..., K, K)``, ``z[n, k] = u_nᵀQ^(T1)u_k``. Returns ``(..., K)``.
    """
    return first_step_terms(gamma, z_ood)[0]


def overlap_first_order(z_V: np.ndarray, G_V: np.ndarray, z_U: np.ndarray,
                        G_U: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The first-order criterion for any features: the first plain fine-tuning step
    changes the source error ``e_k`` by ``η_ft C_k + O(η_ft²)`` with

    ``C_k = −⟨∇_{z_V} e_k, M g_U Mᵀ⟩``,

    ``g_U = ∂L_U/∂z_U`` at the OOD logits ``z_U`` and ``∇_{z_V} e_k`` the gradient of the
    source error at ``z_V`` (nonzero in column k only: ``K g_V[:, k]``), because the step
    moves the source logits by ``−η M g_U Mᵀ``. Orthonormal parallel shifts: ``C_k`` is
    ``g_k D_k / K`` (:func:`first_step_D`); with overlap it replaces the paper's rule.
    Stacks ``(..., K, K)``; returns ``(..., K)``."""
    K = z_V.shape[-1]
    g_U = errors_and_gradient(z_U, G_U)[1]
    g_V = errors_and_gradient(z_V, G_V)[1]
    move = M @ g_U @ np.swapaxes(M, -1, -2)
    return -K * (g_V * move).sum(axis=-2)


def directions_from_D(D: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``rising`` (D > 0), ``falling`` (D < 0) or ``flat`` (``|D| <= FLAT_RTOL·scale``),
    elementwise, object dtype."""
    out = np.empty(np.shape(D), dtype=object)
    out.fill("falling")                 # one str for all (np.where makes one per entry)
    out[D > 0] = "rising"
    out[np.abs(D) <= FLAT_RTOL * scale] = "flat"
    return out


def initial_directions(gamma: np.ndarray, z_ood: np.ndarray) -> list[str] | np.ndarray:
    """Which way ``L_{v_k}`` moves at the first fine-tuning step, from the sign of
    :func:`first_step_D`: ``rising``, ``falling``, or ``flat`` where ``D_k`` is zero
    (``γ_k = 0``, or for K = 2 the boundary ``γ_k² = −γ_kγ_m``) within
    :data:`FLAT_RTOL` of its terms' magnitudes. A list for one setting (``gamma`` of shape
    ``(K,)``), an object array ``(..., K)`` for a batch."""
    out = directions_from_D(*first_step_terms(gamma, z_ood))
    return out.tolist() if np.ndim(gamma) == 1 else out


def hypothesis_H(z_ood: np.ndarray) -> np.ndarray:
    """Whether every share ``Λ_n`` (n ≠ k) of OOD column k is >= 0 at T1, per k: under it
    ``−γ_kγ_m0 > (K−1)γ_k²`` makes ``D_k > 0`` (an initial rise). Holds for K = 2, when
    the other γ are equal, and whenever ``a_k + a_n >= max_m a_m``."""
    return (ood_shares(z_ood)[0] >= 0.0).all(axis=-2)


def ood_errors(M: np.ndarray, alpha: float) -> np.ndarray:
    """``e_k`` on OOD query ``u_k`` at T1, from the claim-5 logits."""
    return conditional_errors(ood_logits(M, alpha))


# --- long fine-tuning, K = 2 (claim 8e): the OOD margin's flow ------------------------------

def k2_error(margin):
    """e of a two-feature column with margin s = z_own − z_other: (1 + e^s)^−2."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(np.asarray(margin, dtype=np.float64))) ** 2


def k2_flow_time(m, eta):
    """The flow time T(m) = [−e^{−m} + 3m + 3e^m + e^{2m}/2]/(2η) of the OOD margin's
    recurrence m ← m + 2ηe^m/(1 + e^m)³ (increasing in m; inf where it overflows)."""
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(over="ignore"):
        return (-np.exp(-m) + 3 * m + 3 * np.exp(m) + np.exp(2 * m) / 2) / (2 * eta)


def k2_flow_margin(m0, t, eta, flow_time=k2_flow_time):
    """The flow's margin after time t from m0: the root of T(m) = T(m0) + t (bisection,
    T increasing), vectorised; ``flow_time`` replaceable (the claim's mutations)."""
    m0 = np.asarray(m0, dtype=np.float64)
    target = flow_time(m0, eta) + np.asarray(t, dtype=np.float64)
    lo = np.array(m0, copy=True)
    hi = np.maximum(m0, 0.0) + 1.0
    for _ in range(200):                       # grow hi until T(hi) >= target
        short = flow_time(hi, eta) < target
        if not short.any():
            break
        hi = np.where(short, hi + (hi - lo) + 1.0, hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        below = flow_time(mid, eta) < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2
