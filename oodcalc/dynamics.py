"""Exact population gradient descent, batched, in the K×K logit coordinates.

Why this is exact: the gradient of the population loss with respect to ``Q`` is
``Σ_{n,k} ∂L/∂z[n,k] · f_n f_kᵀ``, so from ``Q = 0`` every iterate stays
``Q = F Z Fᵀ`` and GD on ``Q`` with step ``η`` is GD on ``Z`` with step ``η``
(orthonormal features). Fine-tuning on ``U`` from ``Q^(T1) = V Z1 Vᵀ`` adds
``U W Uᵀ``, so the OOD logits are ``MᵀZ1M + W`` and the source logits
``Z1 + M W Mᵀ`` (``M = VᵀU``): any orthonormal V and U, any d.

Arrays are stacks ``(B, K, K)``; each configuration stops on its own at the first step
where every ``e_k <= ε`` (MODEL.md's stopping rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ComputationError
from .model import attention, errors_from_attention, loss_gradient_from_attention


@dataclass(frozen=True)
class Descent:
    """Where a batch of descents ended.

    ``z``: final logits ``(B, K, K)``; ``steps``: the stopping step of each configuration
    (``max_steps`` where it did not converge); ``converged``: ``(B,)`` booleans;
    ``trajectory``: ``(T+1, B, K, K)`` when recorded, configurations that stopped earlier
    hold their final value.
    """

    z: np.ndarray
    steps: np.ndarray
    converged: np.ndarray
    trajectory: np.ndarray | None = None


def descend(z0: np.ndarray, eta: np.ndarray | float, eps: np.ndarray | float,
            max_steps: int, *, record: bool = False) -> Descent:
    """Full-batch GD ``z ← z − η ∇_z L`` from ``z0`` until every ``e_k <= ε``."""
    z = np.array(z0, dtype=np.float64, copy=True)
    B = z.shape[0]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))
    steps = np.full(B, max_steps, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    active = np.arange(B)
    za, eta_a, eps_a = z.copy(), eta[:, None, None], eps[:, None]
    history = [z.copy()] if record else None
    t = 0
    while True:
        attn = attention(za)
        done = (errors_from_attention(attn) <= eps_a).all(axis=1)
        if done.any():
            finished = active[done]
            z[finished], steps[finished], converged[finished] = za[done], t, True
            keep = ~done
            active, za, eta_a, eps_a, attn = (active[keep], za[keep], eta_a[keep],
                                              eps_a[keep], attn[keep])
        if active.size == 0 or t >= max_steps:
            break
        za -= eta_a * loss_gradient_from_attention(attn)
        t += 1
        if record:
            z[active] = za
            history.append(z.copy())
    z[active] = za
    trajectory = np.stack(history) if record else None
    return Descent(z, steps, converged, trajectory)


def require_converged(run: Descent, phase: str, describe) -> None:
    """Raise a ComputationError naming the parameters of the first stuck configuration."""
    if run.converged.all():
        return
    b = int(np.flatnonzero(~run.converged)[0])
    raise ComputationError(
        f"{phase} did not meet the stopping rule (every e_k <= eps) within "
        f"max_steps = {int(run.steps[b])} for {describe(b)}; raise --max-steps, "
        f"raise --eps or change the step size")


def ood_start(z1: np.ndarray, M: np.ndarray) -> np.ndarray:
    """OOD logits of ``Q = V Z1 Vᵀ``: ``Mᵀ Z1 M``, batched over leading axes."""
    return np.einsum("...nk,...nm,...ml->...kl", M, z1, M)


def source_logits(z1: np.ndarray, M: np.ndarray, z_ood0: np.ndarray,
                  z_ood: np.ndarray) -> np.ndarray:
    """Source logits after fine-tuning: ``Z1 + M (z_ood − z_ood0) Mᵀ`` (claim 7 for any M).

    ``z_ood`` may carry extra leading axes (a trajectory) in front of the batch axis.
    """
    return z1 + np.einsum("...nk,...kl,...ml->...nm", M, z_ood - z_ood0, M)
