"""How many steps and how much memory a run needs, before running it.

Plain functions of the protocol's numbers (no Setting needed), for the CLI's validation
layer and for ``predict`` itself:

* :func:`pretrain_steps` ``(K, eps, eta)``: the gradient-flow estimate of T1;
* :func:`column_steps` ``(z, eps, eta)``: of the steps until every column of the logits
  ``z`` meets the rule (fine-tuning: ``z`` = the OOD logits at T1);
* :func:`steps_from_margin` ``(K, eps, eta, margin)``: the same on the symmetric ray,
  from a given margin (natural log available through :func:`log_steps_from_margin`,
  for starts so bad that the count overflows a float);
* :func:`dynamics_bytes` ``(K, columns)``, :func:`trajectory_bytes` ``(K, steps)``: memory.

The estimate integrates the margin's gradient flow ``ds/dt = η h(s)`` on the symmetric ray
(own logit against K−1 equal others; a general column enters through its effective margin,
the own logit minus the log-mean-exp of the others). For the default protocol it is within
1 % of the exact T1 (``tests/test_fast_paths.py`` checks K = 2..64); with large
steps it is a lower bound of the right order. Every function is cheap (microseconds to a
millisecond).
"""

from __future__ import annotations

import math

import numpy as np

from .theory import stopping_margin

#: Natural log of the largest step count we express as a float.
_LOG_MAX = math.log(1e300)


def margin_rate(s: np.ndarray | float, K: int) -> np.ndarray:
    """``h(s)``: the margin's change per step per unit η on the ray, at margin ``s``.

    With ``u = (K−1)e^{−s}``, ``p = 1/(1+u)`` (own attention), ``q = (1−p)/(K−1)``,
    ``S = Σ a r = (K−1)q² − p(1−p)``: ``h = [q(q − S) + p(1 − p + S)]/K``.
    """
    s = np.asarray(s, dtype=np.float64)
    m = K - 1.0
    u = m * np.exp(-np.maximum(s, -700.0))
    p = 1.0 / (1.0 + u)
    rest = u * p
    q = rest / m
    S = m * q * q - p * rest
    return (q * (q - S) + p * (rest + S)) / K


def _log_inverse_rate(s: np.ndarray, K: int) -> np.ndarray:
    """``log(1/h(s))``, with the saturated asymptote ``h ≈ p(1 + 1/m)/K`` far below."""
    m = K - 1.0
    far = s < -30.0
    out = np.empty_like(s)
    out[~far] = -np.log(margin_rate(s[~far], K))
    # p ≈ e^{s}/m: log(1/h) = −s + log m − log(1 + 1/m) + log K
    out[far] = -s[far] + math.log(m) - math.log1p(1.0 / m) + math.log(K)
    return out


def log_steps_from_margin(K: int, eps: float, eta: float, margin: float) -> float:
    """Natural log of the gradient-flow steps from ``margin`` to the stopping margin
    (``-inf`` when ``margin`` already meets the rule)."""
    target = stopping_margin(K, eps)
    if margin >= target:
        return -math.inf
    parts = []
    low = margin
    if low < -30.0:            # ∫ C e^{−s} ds from margin to −30, in closed form
        logC = math.log(K - 1.0) - math.log1p(1.0 / (K - 1.0)) + math.log(K)
        parts.append(logC - low + math.log(-math.expm1(low - min(target, -30.0))))
        low = -30.0
    if target > low:
        s = np.linspace(low, target, 2001)
        f = _log_inverse_rate(s, K)
        w = np.full(s.size, (target - low) / (s.size - 1))
        w[[0, -1]] /= 2
        top = f.max()
        parts.append(top + math.log(float(np.sum(w * np.exp(f - top)))))
    return float(np.logaddexp.reduce(parts)) - math.log(eta)


def steps_from_margin(K: int, eps: float, eta: float, margin: float) -> float:
    """Estimated steps from ``margin`` (``inf`` past 1e300, 0 if already below ε)."""
    log_t = log_steps_from_margin(K, eps, eta, margin)
    return 0.0 if log_t == -math.inf else (math.exp(log_t) if log_t < _LOG_MAX else math.inf)


def pretrain_steps(K: int, eps: float, eta: float) -> float:
    """Estimated T1 from Q = 0 (margin 0)."""
    return steps_from_margin(K, eps, eta, 0.0)


def effective_margins(z: np.ndarray) -> np.ndarray:
    """Per column k of ``z`` (K×K): ``z[k,k] − log(mean_{n≠k} e^{z[n,k]})``, the margin of
    the two-valued column with the same own attention."""
    z = np.asarray(z, dtype=np.float64)
    K = z.shape[-1]
    own = np.diagonal(z, axis1=-2, axis2=-1)
    others = np.where(np.eye(K, dtype=bool), -np.inf, z)
    top = others.max(axis=-2)
    lse = top + np.log(np.exp(others - top[..., None, :]).sum(axis=-2))
    return own - lse + math.log(K - 1)


def column_log_steps(z: np.ndarray, eps: float, eta: float) -> np.ndarray:
    """Per column of ``z`` (K×K): natural log of the estimated steps to ``e <= ε``."""
    K = z.shape[-1]
    return np.array([log_steps_from_margin(K, eps, eta, float(s))
                     for s in effective_margins(z)])


def column_steps(z: np.ndarray, eps: float, eta: float) -> float:
    """Estimated steps until every column of ``z`` meets the rule (their maximum)."""
    log_t = float(column_log_steps(z, eps, eta).max())
    return 0.0 if log_t == -math.inf else (math.exp(log_t) if log_t < _LOG_MAX else math.inf)


def step_at_threshold(K: int, eps: float, eta: float) -> float:
    """The change of α in one GD step at the threshold α* (on the ray α = (K−1)s/K)."""
    return eta * float(margin_rate(stopping_margin(K, eps), K)) * (K - 1) / K


def resolving_eta(K: int, eps: float, steps: int = 10) -> float:
    """The step size at which the fastest part of pretraining still takes ``steps``
    steps to reach the threshold margin: ``s*/(steps · max h)``."""
    target = stopping_margin(K, eps)
    if target <= 0:
        return math.inf
    s = np.linspace(0.0, target, 512)
    return target / (steps * float(margin_rate(s, K).max()))


def dynamics_bytes(K: int, columns: int | None = None) -> int:
    """Working memory of the K×K dynamics: about eight float64 arrays of the logits'
    size (state, attention, residual, gradient, the source view and temporaries)."""
    columns = K if columns is None else columns
    return 8 * 8 * K * columns


def trajectory_bytes(K: int, steps: int) -> int:
    """One K×K float64 matrix per recorded step."""
    return 8 * K * K * (int(steps) + 1)


def format_steps(log_steps: float) -> str:
    """``2.6e+12`` or ``10^4886`` for a natural-log step count."""
    if log_steps < _LOG_MAX:
        return f"{math.exp(log_steps):,.0f}" if log_steps < math.log(1e7) \
            else f"{math.exp(log_steps):.2g}"
    return f"10^{log_steps / math.log(10):.0f}"


def eps_for_steps(K: int, eta: float, steps: float, margin: float = 0.0) -> float:
    """The smallest ε (to 1 %) whose estimated steps from ``margin`` fit in ``steps``."""
    lo, hi = math.log(1e-300), math.log(0.5)
    if steps_from_margin(K, math.exp(hi), eta, margin) > steps:
        return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if steps_from_margin(K, math.exp(mid), eta, margin) > steps:
            lo = mid
        else:
            hi = mid
    return math.exp(hi) * 1.01
