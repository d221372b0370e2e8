"""Simulator (a): population gradient descent on the full ``Q ∈ R^{d×d}``.

Works with the explicit feature vectors in R^d, the analytic gradient, float64. It shares
nothing with :mod:`oodcalc.dynamics` except the protocol: no K×K reduction, no closed
form. This is the ground truth the theory is checked against.
"""

from __future__ import annotations

import numpy as np

from .. import limits
from ..errors import ComputationError
from ..report import OOD, FeatureForgetting, Finetune, Pretrain, Report, directions, trend
from ..setting import Setting, check_setting


def _softmax_columns(logits: np.ndarray) -> np.ndarray:
    w = np.exp(logits - logits.max(axis=0, keepdims=True))
    return w / w.sum(axis=0, keepdims=True)


def errors_and_gradient(Q: np.ndarray, F: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conditional errors ``e_k``, attention, and ``∇_Q L`` for features ``F`` (d × K).

    For query ``f_k`` the prediction direction is ``F a_k`` with ``a_k = softmax(Fᵀ Q f_k)``;
    ``e_k = ½‖F a_k − f_k‖²`` and ``L = Σ_k e_k / K``.
    """
    K = F.shape[1]
    A = _softmax_columns(F.T @ Q @ F)           # A[n, k]
    residual = F @ A - F                        # column k: F a_k − f_k, in R^d
    errors = 0.5 * np.sum(residual**2, axis=0)
    de_da = F.T @ residual                      # ∂e_k/∂a_n
    de_dz = A * (de_da - np.sum(A * de_da, axis=0, keepdims=True))  # softmax Jacobian
    return errors, A, F @ de_dz @ F.T / K       # Σ_{n,k} ∂L/∂z_nk f_n f_kᵀ


#: Iterates read at once by :func:`logit_path` (a block of 256 × d × d floats, not a
#: second copy of the whole path).
PATH_BLOCK = 256


def logit_path(F: np.ndarray, path) -> np.ndarray:
    """``z[t] = Fᵀ Q^(t) F`` (t, K, K) for every stored iterate (a list or an array), block
    by block, as matrix products (BLAS). ``np.einsum("dn,tde,ek->tnk", ...)`` without
    ``optimize`` looped over all t·d²·K² terms in one C call (110× slower at d = 128,
    K = 64, and deaf to Ctrl-C), on a stacked copy of the path (twice its memory)."""
    d, K = F.shape
    out = np.empty((len(path), K, K))
    for start in range(0, len(path), PATH_BLOCK):
        block = np.asarray(path[start:start + PATH_BLOCK])
        right = (block.reshape(-1, d) @ F).reshape(len(block), d, K)     # Q^(t) F
        out[start:start + len(block)] = np.matmul(F.T, right)
    return out


def train(Q: np.ndarray, F: np.ndarray, eta: float, eps: float, max_steps: int,
          phase: str, watch: np.ndarray | None = None,
          snapshots: list | None = None) -> tuple[np.ndarray, int, list]:
    """GD on ``Q`` until every ``e_k <= eps`` (a negative ``eps``, ``setting.NEVER``:
    exactly ``max_steps`` steps); returns the final Q, the step count and, if ``watch``
    features are given, their errors at every step. If ``snapshots`` is a list, a copy of
    every iterate ``Q^(t)`` (t = 0 .. stop) is appended to it."""
    Q = Q.copy()
    watched = []
    for t in range(max_steps + 1):
        errors, _, grad = errors_and_gradient(Q, F)
        if watch is not None:
            watched.append(errors_and_gradient(Q, watch)[0])
        if snapshots is not None:
            snapshots.append(Q.copy())
        if np.all(errors <= eps) or (eps < 0 and t == max_steps):
            return Q, t, watched
        if t < max_steps:
            Q -= eta * grad
    raise ComputationError(f"{phase} (full-Q simulator) did not meet the stopping rule "
                           f"within max_steps = {max_steps} (eps = {eps:g}, eta = {eta:g})")


def simulate_population(setting: Setting) -> Report:
    """Plain gradient descent on the full ``Q ∈ R^{d×d}``: the ground truth for the theory.

    Pretrains on V from ``Q = 0``, evaluates on U, fine-tunes on U and watches the loss
    on V throughout, with the explicit feature vectors, the population loss and its
    analytic gradient (float64). It uses no closed form and not the ``K × K`` reduction
    of :func:`oodcalc.predict`, and costs ``O(d²)`` per step.

    Parameters
    ----------
    setting : Setting
        Geometry and protocol, as for :func:`oodcalc.predict`.

    Returns
    -------
    Report
        The theory's schema (``source`` names this simulator); closed-form fields such as
        ``pretrain.alpha_star`` are ``None``.

    Raises
    ------
    InputError
        Before any work, if ``setting`` is not a Setting, or its iterates would not fit
        the memory cap (:func:`oodcalc.limits.check_population`).
    ComputationError
        Before any work, if a phase is estimated past twice ``protocol.max_steps``
        (:func:`oodcalc.limits.check_simulation`, predict's rule); after, if a phase does
        not meet the stopping rule within it.

    Example
    -------
    >>> import oodcalc as oc
    >>> from oodcalc.simulate import simulate_population
    >>> setting = oc.Setting(oc.parallel_shift([1, -0.9]))
    >>> simulated, theory = simulate_population(setting), oc.predict(setting)
    >>> simulated.pretrain.T1 == theory.pretrain.T1, abs(simulated.F - theory.F) < 1e-12
    (True, True)
    """
    geo, proto = check_setting(setting).geometry, setting.protocol
    limits.check_population(geo.K, geo.d, proto)       # every iterate Q: refused first
    limits.check_simulation(geo.K, proto, diagonal=geo.known_diagonal,
                            M=geo.M if geo.known_diagonal is None else None)
    V, U, K = geo.V, geo.U, geo.K
    pre_path: list = []
    ft_path: list = []
    Q1, T1, _ = train(np.zeros((geo.d, geo.d)), V, proto.eta, proto.eps,
                      proto.max_steps, "pretraining", snapshots=pre_path)
    z1 = V.T @ Q1 @ V
    errors_v, _, _ = errors_and_gradient(Q1, V)
    errors_u, attn_u, _ = errors_and_gradient(Q1, U)
    Q2, T2, source_errors = train(Q1, U, proto.eta_ft, proto.finetune_stop,
                                  proto.finetune_cap, "fine-tuning", watch=V,
                                  snapshots=ft_path)
    source_loss = np.array(source_errors) / K
    first = source_loss[1] - source_loss[0] if T2 > 0 else np.zeros(K)   # no step: T2 = 0
    first_directions = directions(first)
    forgetting = [FeatureForgetting(k=k + 1, F_k=float(source_loss[-1, k] - source_loss[0, k]),
                                    loss_before=float(source_loss[0, k]),
                                    loss_after=float(source_loss[-1, k]),
                                    trend=trend(source_loss[:, k]),
                                    first_step=float(first[k]),
                                    initial_direction=first_directions[k])
                  for k in range(K)]
    return Report(
        source="simulation: population GD on Q (d×d)",
        parameters=setting.describe(),
        pretrain=Pretrain(T1=T1, z=z1, error=errors_v),
        ood=OOD(z=U.T @ Q1 @ U, attention=attn_u, error=errors_u),
        finetune=Finetune(T2=T2, z_ood=U.T @ Q2 @ U, z_source=V.T @ Q2 @ V,
                          error_ood=errors_and_gradient(Q2, U)[0]),
        forgetting=forgetting,
        trajectories={
            "finetune_source_loss": source_loss,
            # z[n, k] = f_nᵀ Q^(t) f_k at every step, read off the full Q
            "pretrain": logit_path(V, pre_path),
            "finetune_ood": logit_path(U, ft_path),
            "finetune_source": logit_path(V, ft_path),
        },
    )
