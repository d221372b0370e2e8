"""A sequence of shifts by gradient descent on the full ``Q ∈ R^{d×d}``: the independent
check of :mod:`oodcalc.finetune.sequence`.

Pretraining and every stage are GD on Q with :mod:`oodcalc.simulate.population`'s
analytic gradient on the explicit feature vectors; each stage's interventions are done to
Q itself (the projector off the earlier domains from an SVD of their vectors, replay as
the gradients of the earlier domains' losses, the pull as ``μ(Q − Q_start)``); the losses
are read off Q on every domain. No Gram block and no logit recursion is used.
"""

from __future__ import annotations

import numpy as np

from .. import limits
from ..errors import ComputationError
from ..finetune.sequence import FROZEN_TOL, SPAN_TOL, Shifts, check_shifts, \
    check_stage_weights, stage_protocols
from ..setting import STALL_STEP, Protocol
from .population import errors_and_gradient, query_weights, train


__all__ = ["off_span", "simulate_sequence"]


def _losses(Q: np.ndarray, domains: list[np.ndarray]) -> np.ndarray:
    return np.array([errors_and_gradient(Q, F)[0].mean() for F in domains])


def off_span(earlier: list[np.ndarray]) -> np.ndarray:
    """``P = I − Π``, Π the orthogonal projector onto the span of the columns of the
    earlier domains' features, from an SVD of the vectors (not the Gram matrix)."""
    E = np.hstack(earlier)
    basis, s, _ = np.linalg.svd(E, full_matrices=False)
    basis = basis[:, s > np.sqrt(SPAN_TOL) * s.max()]
    return np.eye(E.shape[0]) - basis @ basis.T


def _stage(Q: np.ndarray, D: list[np.ndarray], i: int, p: Protocol, base: Protocol
           ) -> tuple[np.ndarray, int, bool]:
    """Stage i on Q itself: ``ΔQ = −η[(1−λ) P_l ∇L_i^c P_r + (λ/i) Σ_{m<i} ∇L_m
    + μ (Q − Q_start)]``, P off span(D_0..D_{i−1}); the rule of
    :func:`~oodcalc.finetune.sequence.descend_stage` (covered, frozen, stalled)."""
    U, eta, fixed, cap = D[i], base.eta_ft, base.ft_steps is not None, base.finetune_cap
    weights = query_weights(p, U, D[0])
    P = off_span(D[:i]) if p.project != "none" else None
    left = P if p.project in ("key", "both") else None
    right = P if p.project in ("query", "both") else None
    A = U.T @ (np.eye(len(U)) if right is None else right) @ U
    frozen = ~(np.abs(weights[:, None] * A) > FROZEN_TOL).any(axis=0) & (p.replay == 0)
    start = Q.copy()
    for t in range(cap + 1):
        errors, _, grad = errors_and_gradient(Q, U, weights)
        within = (errors <= base.eps_ft) | (weights <= 0)
        met = bool(within.all())
        if (not fixed and (within | frozen).all()) or t == cap:
            return Q, t, met
        if left is not None:
            grad = left @ grad
        if right is not None:
            grad = grad @ right
        step = (1.0 - p.replay) * grad
        if p.replay:
            step = step + (p.replay / i) * sum(errors_and_gradient(Q, F)[2] for F in D[:i])
        if p.l2:
            step = step + p.l2 * (Q - start)
        change = eta * step
        if p.l2 and not fixed and all(np.abs(F.T @ change @ F).max() <= STALL_STEP
                                      for F in D):
            return Q, t, met                           # settled: the pull balances the fit
        Q = Q - change
    raise AssertionError("unreachable")


def simulate_sequence(shifts: Shifts, protocol: Protocol | None = None, *,
                      stages: list | None = None) -> dict:
    """Pretrain on V from ``Q = 0``, fine-tune on each ``U_i`` in turn with its
    interventions done to Q itself (``stages`` as :func:`oodcalc.sequence` takes it),
    then the joint reference (plain GD on Q on the mean of every domain's loss from
    ``Q^(T1)``). Returns ``{"R", "steps", "reached", "T1", "joint_losses",
    "joint_steps", "joint_reached"}`` as :class:`~oodcalc.finetune.sequence.SequenceResult`
    names them."""
    shifts = check_shifts(shifts)
    protocol = Protocol() if protocol is None else protocol
    plans = stage_protocols(protocol, shifts.S, stages)
    check_stage_weights(plans, shifts.K)
    D = shifts.arrays()
    V, K = D[0], shifts.K
    Q, T1 = train(np.zeros((shifts.d, shifts.d)), V, protocol.eta, protocol.eps,
                  limits.pretrain_cap(K, protocol), "pretraining")
    Q1 = Q.copy()
    rows, steps, reached = [_losses(Q, D)], [], []
    for i, p in zip(range(1, len(D)), plans):
        Q, t, met = _stage(Q, D, i, p, protocol)
        rows.append(_losses(Q, D))
        steps.append(t)
        reached.append(met)
    Q, n = Q1, len(D)
    for t in range(protocol.max_steps + 1):
        parts = [errors_and_gradient(Q, F) for F in D]
        met = all(bool((errors <= protocol.eps_ft).all()) for errors, _, _ in parts)
        if met or t == protocol.max_steps:
            break
        Q = Q - protocol.eta_ft * sum(grad for _, _, grad in parts) / n
    if not met:
        raise ComputationError("joint training (full-Q simulator) did not meet the rule "
                               f"within max_steps = {protocol.max_steps}")
    return {"R": np.array(rows), "steps": steps, "reached": reached, "T1": T1,
            "joint_losses": _losses(Q, D), "joint_steps": t, "joint_reached": met}
