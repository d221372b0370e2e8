"""The symmetric ray's scalar recurrence in plain Python: the one source that both
:mod:`oodcalc.finetune.dynamics` runs as is and :mod:`oodcalc.finetune.compiled` hands to Numba (so both
give the same numbers bit for bit). It imports nothing of oodcalc.

From Q = 0 the logits stay on Z = aI + b(11ᵀ − I): every column is two-valued (its own
logit a, K−1 others b), so a whole K×K descent is one scalar recurrence.
"""

from __future__ import annotations

import math


__all__ = ["ray_step_loop"]


def ray_step_loop(own: float, other: float, K: int, eta: float, eps: float,
                  max_steps: int, stride: int, path: np.ndarray,
                  src_own: float, src_other: float, scale: float) -> tuple:
    """GD on a two-valued column to the stopping rule (plain floats; Numba compiles the
    same source when it is installed).

    Returns ``(own, other, steps, converged, recorded, loss_first, loss_last, rises,
    falls)``. Every ``stride``-th step (``stride > 0``) and the last write ``(own, other)`` into
    ``path`` (``recorded`` counts them, also past its end: then call again, larger). ``src_*``/``scale``: the source column that moves with it
    (``src + scale · (logits − start)``, claim 7 with M = cI); its per-feature loss
    ``e/K`` is followed at every step: first and last value, and whether it ever rose or
    fell by more than ``TREND_TOL``.
    """
    m = K - 1.0
    rate = eta / K
    own0, other0 = own, other
    recorded = 0
    prev = 0.0
    first = 0.0
    rises = False
    falls = False
    t = 0
    while True:
        if stride > 0 and t % stride == 0:
            if recorded < path.shape[0]:
                path[recorded, 0] = own
                path[recorded, 1] = other
            recorded += 1
        # the column's attention, error and gradient (softmax with max subtracted: the
        # larger weight is exp(0) = 1 exactly, one exp a step)
        if own >= other:
            wo = 1.0
            wb = math.exp(other - own)
        else:
            wo = math.exp(own - other)
            wb = 1.0
        total = wo + m * wb
        p = wo / total
        q = wb / total
        r = p - 1.0
        e = 0.5 * (r * r + m * q * q)
        # the source column's loss, for the trend
        if scale != 0.0 or t == 0:                # scale 0 (pretraining): a fixed column
            so = src_own + scale * (own - own0)
            sb = src_other + scale * (other - other0)
            if so >= sb:
                sw = 1.0
                sv = math.exp(sb - so)
            else:
                sw = math.exp(so - sb)
                sv = 1.0
            stotal = sw + m * sv
            sr = sw / stotal - 1.0
            sq = sv / stotal
            loss = 0.5 * (sr * sr + m * sq * sq) / K
        else:
            loss = prev
        if t == 0:
            first = loss
        elif loss - prev > 1e-15:
            rises = True
        elif prev - loss > 1e-15:
            falls = True
        prev = loss
        if e <= eps or t >= max_steps:
            break
        S = p * r + m * q * q
        own -= (r - S) * p * rate
        other -= (q - S) * q * rate
        t += 1
    if stride > 0 and (t % stride) != 0:
        if recorded < path.shape[0]:
            path[recorded, 0] = own
            path[recorded, 1] = other
        recorded += 1
    return own, other, t, e <= eps, recorded, first, prev, rises, falls
