"""The dynamics for unit-norm features that need not be orthogonal: Gram matrices ``G = FᵀF``.

With ``z = FᵀQF`` the population error of query ``f_k`` is

    e_k = ½ ‖F a_k − f_k‖² = ½ (a_k − δ_k)ᵀ G (a_k − δ_k),   a_k = softmax(z[:, k]),

and its gradient ``g = ∂L/∂z`` (``L = (1/K) Σ_k e_k``) is
``g[n, k] = a_nk (s_nk − Σ_m a_mk s_mk) / K`` with ``s = G (a − I)``. A step on ``Q``,
``ΔQ = −η F g Fᵀ``, reads ``Δz = −η G g G`` in the logits of ``F`` and ``−η (F'ᵀF) g (FᵀF')``
in those of any other set ``F'``: from ``Q = 0`` pretraining keeps ``Q = V W Vᵀ`` with
``z_V = G_V W G_V``, so the OOD logits at T1 are ``Mᵀ G_V⁻¹ z_V G_V⁻¹ M`` (``M = VᵀU``).
At ``G = I`` every formula here is the orthonormal one (docs/theory.md, "Overlapping
features").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import errors_and_gradient  # noqa: F401  (e_k and ∂L/∂z for a Gram matrix)


__all__ = ["ENGINE", "Pretrained", "gram_step", "ood_start", "pretrain"]


#: How the report names the pretraining engine for overlapping features.
ENGINE = "Gram-matrix K×K descent (NumPy)"


def gram_step(G: np.ndarray | None, g: np.ndarray) -> np.ndarray:
    """``G g G``: a gradient ``g`` on ``Q`` in the logits of the same features."""
    return g if G is None else G @ g @ G


@dataclass(frozen=True)
class Pretrained:
    """Where pretraining ended, per Gram matrix: the logits ``z_V`` at T1 ``(B, K, K)``,
    the steps ``T1`` and whether the rule held (``max_steps`` reached otherwise)."""

    z: np.ndarray
    steps: np.ndarray
    converged: np.ndarray


def pretrain(G_V: np.ndarray, eta, eps, max_steps: int) -> Pretrained:
    """Population GD on the source from ``Q = 0``: ``z ← z − η G_V g(z; G_V) G_V`` until
    every ``e_k(z; G_V) <= eps``, for a stack of Grams ``(B, K, K)`` (or one ``(K, K)``:
    then the result has ``B = 1``). ``eta``, ``eps``: numbers or ``(B,)``. Configurations
    that stop are frozen."""
    G = np.array(G_V, dtype=np.float64, ndmin=3)
    B, K = G.shape[0], G.shape[-1]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))[:, None, None]
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))[:, None]
    z = np.zeros((B, K, K))
    steps = np.full(B, max_steps, dtype=np.int64)
    live = np.ones(B, dtype=bool)
    for t in range(max_steps + 1):
        e, g = errors_and_gradient(z, G)
        done = live & (e <= eps).all(axis=-1)
        steps[done], live[done] = t, False
        if t == max_steps or not live.any():
            break
        z -= np.where(live[:, None, None], eta, 0.0) * (G @ g @ G)
    return Pretrained(z, steps, ~live | (steps < max_steps))


def ood_start(z_V: np.ndarray, G_V: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The OOD logits of ``Q = V W Vᵀ`` given its source logits ``z_V = G_V W G_V``:
    ``Mᵀ G_V⁻¹ z_V G_V⁻¹ M`` (solves, no explicit inverse; stacks broadcast)."""
    W = np.linalg.solve(G_V, np.swapaxes(np.linalg.solve(G_V, z_V), -1, -2))
    W = np.swapaxes(W, -1, -2)                   # G_V⁻¹ z_V G_V⁻¹ (G_V symmetric)
    return np.swapaxes(M, -1, -2) @ W @ M
