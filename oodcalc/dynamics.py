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
from typing import Callable

import numpy as np

from .errors import ComputationError


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
            max_steps: int, *, record: bool = False,
            progress: Callable[[int], None] | None = None) -> Descent:
    """Full-batch GD ``z ← z − η ∇_z L`` from ``z0`` until every ``e_k <= ε``.

    ``progress``, if given, is called with the number of configurations that have just
    stopped (met the rule), whenever some have; it never changes the result.

    Implementation: the batch is held as ``x[n, k, b]`` (batch axis last, contiguous), so
    every operation runs over long contiguous runs and every reduction over ``n`` adds
    whole slabs in a fixed order: each configuration's arithmetic is the same whatever
    else is in the batch. Buffers are reused between steps; configurations that stop are
    frozen in place (step 0) and dropped from the batch once they are a quarter of it.
    """
    z = np.array(z0, dtype=np.float64, copy=True)
    B = z.shape[0]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))
    steps = np.full(B, max_steps, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    history = [z.copy()] if record else None
    batch = _Batch(z, eta, eps)
    t = 0
    while True:
        done = batch.evaluate()
        if done.any():
            finished = batch.index[done]
            z[finished], steps[finished], converged[finished] = batch.logits(done), t, True
            batch.freeze(done)
            if progress is not None:
                progress(int(finished.size))
        if batch.alive == 0 or t >= max_steps:
            break
        batch.step()
        t += 1
        if record:
            z[batch.index] = batch.logits()
            history.append(z.copy())
    live = batch.live()
    z[batch.index[live]] = batch.logits(live)
    trajectory = np.stack(history) if record else None
    return Descent(z, steps, converged, trajectory)


class _Batch:
    """The configurations still descending, as ``x[n, k, b]`` with reusable buffers."""

    def __init__(self, z: np.ndarray, eta: np.ndarray, eps: np.ndarray) -> None:
        self.K = z.shape[-1]
        self.index = np.arange(z.shape[0])
        self._load(np.ascontiguousarray(z.transpose(1, 2, 0)), np.array(eta), np.array(eps))

    def _load(self, x: np.ndarray, eta: np.ndarray, eps: np.ndarray) -> None:
        K, B = self.K, x.shape[-1]
        self.x, self.eta, self.eps = x, eta, eps
        self.rate = eta / K                  # ∇L = a (r − Σ_n a r) / K; 1/K rides on η
        self.is_live = np.ones(B, dtype=bool)
        self.alive = B
        self.a, self.r, self.g = np.empty((K, K, B)), np.empty((K, K, B)), np.empty((K, K, B))
        self.col, self.e = np.empty((K, B)), np.empty((K, B))
        self.diagonal = self.r.reshape(K * K, B)[::K + 1]   # view of r[k, k, :]

    def evaluate(self) -> np.ndarray:
        """Attention, residual and errors at the current logits; which live
        configurations meet the stopping rule."""
        x, a, r, g, col, e = self.x, self.a, self.r, self.g, self.col, self.e
        np.max(x, axis=0, out=col)
        np.subtract(x, col, out=a)           # softmax down each column, max subtracted
        np.exp(a, out=a)
        np.sum(a, axis=0, out=col)
        np.divide(a, col, out=a)
        np.copyto(r, a)                      # r = Attn − I
        self.diagonal -= 1.0
        np.multiply(r, r, out=g)
        np.sum(g, axis=0, out=e)
        e *= 0.5                             # e_k = ½ Σ_n r[n, k]²
        done = (e <= self.eps).all(axis=0)
        done &= self.is_live
        return done

    def step(self) -> None:
        """``x ← x − η/K · a (r − Σ_n a r)`` in place, from ``evaluate``'s a and r."""
        a, r, g, col = self.a, self.r, self.g, self.col
        np.multiply(a, r, out=g)
        np.sum(g, axis=0, out=col)           # Σ_n a[n, k] r[n, k]
        np.subtract(r, col, out=g)
        g *= a
        g *= self.rate                       # frozen configurations: rate 0, x unchanged
        self.x -= g

    def logits(self, which: np.ndarray | None = None) -> np.ndarray:
        x = self.x if which is None else self.x[..., which]
        return x.transpose(2, 0, 1)

    def freeze(self, done: np.ndarray) -> None:
        """Stop the ``done`` configurations; compact once a quarter of the batch is frozen."""
        self.is_live &= ~done
        self.rate[done] = 0.0
        self.alive = int(self.is_live.sum())
        if self.alive and 4 * self.alive <= 3 * self.is_live.size:
            keep = self.is_live
            self.index = self.index[keep]
            a, r = self.a[..., keep], self.r[..., keep]   # step() still needs them
            self._load(np.ascontiguousarray(self.x[..., keep]), self.eta[keep], self.eps[keep])
            self.a[...], self.r[...] = a, r

    def live(self) -> np.ndarray:
        return self.is_live


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
