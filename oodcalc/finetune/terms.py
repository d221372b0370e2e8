"""The terms a fine-tuning step is made of, in the K×K logits of both feature sets.

Fine-tuning moves ``Q`` from ``Q^(T1) = V Z1 Vᵀ`` by

    ΔQ = −η [(1−λ) P_l U g_U Uᵀ P_r + λ V g_V Vᵀ + μ (Q − Q^(T1))],

``g_U = ∂L_U^c/∂z_U`` for the query-weighted loss ``L_U^c = (1/K) Σ_k c_k e_k(z_U)``,
``g_V = ∂L_V/∂z_V``, and ``P_l, P_r`` each ``I`` or ``I − VVᵀ`` (project the key side,
the query side). Reading ``z_U = UᵀQU`` and ``z_V = VᵀQV`` off it with ``M = VᵀU``
(``UᵀV = Mᵀ``, ``VᵀV = UᵀU = I``, ``Vᵀ(I − VVᵀ) = 0``):

    Δz_U = −η [(1−λ) A_l g_U A_r + λ Mᵀ g_V M + μ (z_U − z_U^(T1))]
    Δz_V = −η [(1−λ) B_l g_U B_rᵀ + λ g_V + μ (z_V − z_V^(T1))]

with ``A = UᵀPU`` (``I``, or ``I − MᵀM`` projected) and ``B = VᵀPU`` (``M``, or 0
projected). Each bracket is a :class:`Term`; the engine (:mod:`oodcalc.finetune.engine`)
sums the ones a recipe asks for. The pair ``(z_U, z_V)`` is a closed system: the
gradients read only ``z_U`` and ``z_V``, and the pull is linear in ``Q``. Derived by
sympy with K a Symbol (claim 10: ``oodcalc derive interventions``) and checked against
full-Q gradient descent doing each term on Q (its ledger row, tests/test_interventions.py).

Overlapping features (Gram matrices ``G_V = VᵀV``, ``G_U = UᵀU`` not the identity) change
only the matrices: the unprojected ``A`` is ``G_U``, the projected one
``G_U − Mᵀ G_V⁻¹ M`` (``P = I − V G_V⁻¹ Vᵀ``), replay's source share is ``G_V g_V G_V``, and
the errors and gradients read ``G`` (:mod:`oodcalc.finetune.gram`). A recipe without
Grams is the orthonormal one, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, param
from ..setting import Protocol
from ..model import errors_and_gradient
from . import gram


__all__ = [
    "Fit", "IN_SPAN_TOL", "Pull", "Recipe", "Replay", "Term", "centre_cosines",
    "column_errors", "frozen_columns", "in_span_exactly", "loss_gradient", "query_weights",
    "recipe",
]


def loss_gradient(z: np.ndarray, G: np.ndarray | None = None) -> np.ndarray:
    """``∂L/∂z`` for ``L = (1/K) Σ_k e_k(z)``, stacks ``(..., K, K)``: column ``k`` is
    ``a ⊙ (r − Σ_n a r) / K`` with ``a`` the softmax of column ``k`` and ``r = a − e_k``
    (with a Gram matrix, ``r`` becomes ``s = G r`` outside the ``½ rᵀ s`` error)."""
    return errors_and_gradient(z, G)[1]


def column_errors(z: np.ndarray, G: np.ndarray | None = None) -> np.ndarray:
    """``e_k(z)`` of a stack ``(..., K, K)`` (:func:`oodcalc.model.conditional_errors`,
    without its layout for large batches: for one matrix, ~7× faster)."""
    return errors_and_gradient(z, G)[0]


class Term:
    """One bracket of the step: adds its share to ``(dU, dV)`` (the step is
    ``z −= η d``). ``source_gradient``: whether it reads ``g_V`` (computed only then)."""

    source_gradient = False

    def add(self, z_U, z_V, g_U, g_V, dU, dV) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Fit(Term):
    """``(1−λ) A_l (g_U c) A_r`` on the OOD logits and ``(1−λ) B_l (g_U c) B_rᵀ`` on the
    source logits (``B = None``: a projected side, no change); ``c`` weights the columns
    of the gradient (the queries)."""

    scale: np.ndarray | float
    weights: np.ndarray
    A_left: np.ndarray | None      # None: the identity (orthonormal U, no projection)
    A_right: np.ndarray | None
    B_left: np.ndarray | None      # None: 0 (the key side projected)
    B_right: np.ndarray | None

    def add(self, z_U, z_V, g_U, g_V, dU, dV) -> None:
        g = g_U * (self.scale * self.weights[..., None, :])
        dU += _sandwich(self.A_left, g, self.A_right)
        if self.B_left is not None and self.B_right is not None:
            dV += self.B_left @ g @ np.swapaxes(self.B_right, -1, -2)


@dataclass(frozen=True)
class Replay(Term):
    """``λ Mᵀ g_V M`` and ``λ G_V g_V G_V``: a share λ of every step is the source loss."""

    share: np.ndarray | float
    M: np.ndarray
    G_V: np.ndarray | None = None     # None: orthonormal V
    source_gradient = True

    def add(self, z_U, z_V, g_U, g_V, dU, dV) -> None:
        g = self.share * g_V
        dU += np.swapaxes(self.M, -1, -2) @ g @ self.M
        dV += gram.gram_step(self.G_V, g)


@dataclass(frozen=True)
class Pull(Term):
    """``μ (z − z^(T1))`` on both: the L2 pull ``(μ/2)‖Q − Q^(T1)‖²`` toward the
    pretrained weights, read in each set of logits."""

    strength: np.ndarray | float
    z_U1: np.ndarray
    z_V1: np.ndarray

    def add(self, z_U, z_V, g_U, g_V, dU, dV) -> None:
        dU += self.strength * (z_U - self.z_U1)
        dV += self.strength * (z_V - self.z_V1)


def _sandwich(left, g, right):
    out = g if left is None else left @ g
    return out if right is None else out @ right


def centre_cosines(M: np.ndarray, G_V: np.ndarray | None = None) -> np.ndarray:
    """``cos(u_k, v̄)`` for the pretraining centre ``v̄ = (1/K) Σ v_n``: ``u_kᵀv̄ / ‖v̄‖``
    ``= Σ_n M[n, k] / √(1ᵀ G_V 1)`` (orthonormal V: ``√K``)."""
    total = M.shape[-1] if G_V is None else G_V.sum(axis=(-2, -1))[..., None]
    return M.sum(axis=-2) / np.sqrt(total)


def query_weights(protocol: Protocol, M: np.ndarray, G_V: np.ndarray | None = None
                  ) -> np.ndarray:
    """The weights ``c_k`` of the OOD queries: as given, or by a named rule on the
    cosines to the pretraining centre. ``cosine``: ``max(cos_k, 0)`` scaled to mean 1
    (the step size keeps its meaning); ``drop-negative``: 1 where ``cos_k >= 0``, else 0
    (the paper's advice to leave out data negatively correlated with the source).
    Unweighted: all 1."""
    K, rule = M.shape[-1], protocol.weights
    if rule is None:
        return np.ones(K)
    if not isinstance(rule, str):
        return np.array(rule, dtype=np.float64)
    cos = centre_cosines(M, G_V)                   # (..., K): one row per geometry
    kept = np.maximum(cos, 0.0) if rule == "cosine" else (cos >= 0).astype(np.float64)
    empty = ~kept.any(axis=-1)
    if empty.any():
        first = cos[np.argmax(empty)] if cos.ndim > 1 else cos
        raise InputError(param("weights"), rule, f"every OOD feature has a negative cosine to the "
                         f"pretraining centre ({', '.join(f'{c:.3g}' for c in first)}): "
                         "nothing would be fine-tuned; give explicit weights")
    return kept * (K / kept.sum(axis=-1, keepdims=True)) if rule == "cosine" else kept


@dataclass(frozen=True)
class Recipe:
    """A fine-tuning step for one geometry: its terms, which OOD features the stopping
    rule covers (those with ``c_k > 0``: a feature left out is not trained) and which
    OOD columns no step can move (:func:`frozen_columns`)."""

    terms: tuple[Term, ...]
    covered: np.ndarray
    weights: np.ndarray
    frozen: np.ndarray
    G_U: np.ndarray | None = None      # the Grams the errors and gradients read
    G_V: np.ndarray | None = None      # (None: orthonormal features)

    @property
    def source_gradient(self) -> bool:
        return any(term.source_gradient for term in self.terms)

    @property
    def settles(self) -> bool:
        """Whether a run may settle short of its rule: a pull has a fixed point."""
        return any(isinstance(term, Pull) for term in self.terms)


def recipe(protocol: Protocol, M: np.ndarray, z_U1: np.ndarray, z_V1: np.ndarray,
           G_V: np.ndarray | None = None, G_U: np.ndarray | None = None) -> Recipe:
    """The terms ``protocol`` asks for, built for ``M = VᵀU`` and the logits at T1 (one
    geometry, ``(K, K)``, or a stack ``(B, K, K)``: then per row); ``G_V``, ``G_U``: the
    Gram matrices of overlapping features (both or neither; None: orthonormal)."""
    K = M.shape[-1]
    weights = query_weights(protocol, M, G_V)
    left = protocol.project in ("key", "both")
    right = protocol.project in ("query", "both")
    MT = np.swapaxes(M, -1, -2)
    if G_V is None:                         # UᵀPU with P = I − VVᵀ, or I − V G_V⁻¹ Vᵀ
        A = in_span_exactly(np.eye(K) - MT @ M)
    else:
        A = in_span_exactly(G_U - MT @ np.linalg.solve(G_V, M))
    terms: list[Term] = [Fit(1.0 - protocol.replay, weights, A if left else G_U,
                             A if right else G_U, None if left else M, None if right else M)]
    if protocol.replay:
        terms.append(Replay(protocol.replay, M, G_V))
    if protocol.l2:
        terms.append(Pull(protocol.l2, z_U1, z_V1))
    return Recipe(tuple(terms), weights > 0, weights, frozen_columns(terms, K), G_U, G_V)


#: ``‖P u_k‖² = (UᵀPU)_kk`` at or below this is round-off: u_k lies in span(V).
IN_SPAN_TOL = 1e-12


def in_span_exactly(A: np.ndarray) -> np.ndarray:
    """``UᵀPU`` with the rows and columns of features in span(V) set to exactly 0.

    ``A_kk = ‖P u_k‖²`` and ``|A_jk| <= √(A_jj A_kk)``, so ``A_kk = 0`` zeroes row and
    column k; computed from M (and the Gram matrices) it comes out ~1e-16 instead, which would let a
    projection nudge a column that cannot move (and hide it from :func:`frozen_columns`)."""
    inside = np.diagonal(A, axis1=-2, axis2=-1) <= IN_SPAN_TOL
    if not inside.any():
        return A
    keep = ~inside
    return A * keep[..., :, None] * keep[..., None, :]


def frozen_columns(terms: tuple[Term, ...] | list[Term], K: int) -> np.ndarray:
    """The OOD columns no step can move, ``(K,)`` (``(B, K)`` for a stack): the fit's share of column ``k`` is
    ``Σ_j (g c)_j A_r[j, k]``, zero for every gradient when ``c_j A_r[j, k] = 0`` for all
    ``j`` (``A_r = I``: when ``c_k = 0``); replay moves every column, and the pull moves
    none that has not moved."""
    if any(isinstance(term, Replay) for term in terms):
        return np.zeros(K, dtype=bool)
    fit = next(term for term in terms if isinstance(term, Fit))
    right = np.eye(K) if fit.A_right is None else fit.A_right
    return ~(fit.weights[..., :, None] * right).any(axis=-2)
