"""A sequence of shifts by gradient descent on the full ``Q ∈ R^{d×d}``: the independent
check of :mod:`oodcalc.finetune.sequence`.

Pretraining and every stage are :mod:`oodcalc.simulate.population`'s own GD on Q (its
analytic gradient, explicit feature vectors); the losses are read off Q on every domain.
No Gram block and no logit recursion is used.
"""

from __future__ import annotations

import numpy as np

from .. import limits
from ..errors import ComputationError
from ..finetune.sequence import Shifts, check_shifts
from ..setting import Protocol, require_plain
from .population import errors_and_gradient, finetune, train


def _losses(Q: np.ndarray, domains: list[np.ndarray]) -> np.ndarray:
    return np.array([errors_and_gradient(Q, F)[0].mean() for F in domains])


def simulate_sequence(shifts: Shifts, protocol: Protocol | None = None) -> dict:
    """Pretrain on V from ``Q = 0``, fine-tune on each ``U_i`` in turn (population
    :func:`~oodcalc.simulate.population.finetune`, plain), then the joint reference
    (GD on Q on the mean of every domain's loss from ``Q^(T1)``). Returns ``{"R", "steps",
    "reached", "T1", "joint_losses", "joint_steps", "joint_reached"}`` as
    :class:`~oodcalc.finetune.sequence.SequenceResult` names them. A stage that does not
    meet its rule within the cap raises :class:`~oodcalc.errors.ComputationError`."""
    shifts = check_shifts(shifts)
    protocol = Protocol() if protocol is None else protocol
    require_plain(protocol, "simulate_sequence")
    D = shifts.arrays()
    V, K = D[0], shifts.K
    Q, T1 = train(np.zeros((shifts.d, shifts.d)), V, protocol.eta, protocol.eps,
                  limits.pretrain_cap(K, protocol), "pretraining")
    Q1 = Q.copy()
    rows, steps, reached = [_losses(Q, D)], [], []
    for U in D[1:]:
        Q, t, _, met = finetune(Q, U, V, protocol)
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
