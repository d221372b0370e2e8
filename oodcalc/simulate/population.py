"""Simulator (a): population gradient descent on the full ``Q ∈ R^{d×d}``.

Works with the explicit feature vectors in R^d, the analytic gradient, float64. It shares
nothing with :mod:`oodcalc.finetune.dynamics` except the protocol: no K×K reduction, no closed
form. This is the ground truth the theory is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import limits
from ..errors import ComputationError
from ..report import OOD, FeatureForgetting, Finetune, Pretrain, Report, directions, trend
from ..setting import STALL_STEP, Setting, check_setting


__all__ = [
    "Interventions", "PATH_BLOCK", "errors_and_gradient", "finetune", "logit_path",
    "off_span", "query_weights", "simulate_population", "train",
]


def _softmax_columns(logits: np.ndarray) -> np.ndarray:
    w = np.exp(logits - logits.max(axis=0, keepdims=True))
    return w / w.sum(axis=0, keepdims=True)


def errors_and_gradient(Q: np.ndarray, F: np.ndarray, weights: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conditional errors ``e_k``, attention, and ``∇_Q L`` for features ``F`` (d × K).

    For query ``f_k`` the prediction direction is ``F a_k`` with ``a_k = softmax(Fᵀ Q f_k)``;
    ``e_k = ½‖F a_k − f_k‖²`` and ``L = Σ_k e_k / K`` (with ``weights``,
    ``L = Σ_k c_k e_k / K``: the gradient's query columns scaled by ``c_k``).
    """
    K = F.shape[1]
    A = _softmax_columns(F.T @ Q @ F)           # A[n, k]
    residual = F @ A - F                        # column k: F a_k − f_k, in R^d
    errors = 0.5 * np.sum(residual**2, axis=0)
    de_da = F.T @ residual                      # ∂e_k/∂a_n
    de_dz = A * (de_da - np.sum(A * de_da, axis=0, keepdims=True))  # softmax Jacobian
    if weights is not None:
        de_dz = de_dz * weights
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
          phase: str, snapshots: list | None = None) -> tuple[np.ndarray, int]:
    """GD on ``Q`` until every ``e_k <= eps`` (pretraining; fine-tuning is
    :func:`finetune`); returns the final Q and the step count. If ``snapshots`` is a
    list, a copy of every iterate ``Q^(t)`` (t = 0 .. stop) is appended to it."""
    Q = Q.copy()
    for t in range(max_steps + 1):
        errors, _, grad = errors_and_gradient(Q, F)
        if snapshots is not None:
            snapshots.append(Q.copy())
        if np.all(errors <= eps):
            return Q, t
        if t < max_steps:
            Q -= eta * grad
    raise ComputationError(f"{phase} (full-Q simulator) did not meet the stopping rule "
                           f"within max_steps = {max_steps} (eps = {eps:g}, eta = {eta:g})")


def query_weights(protocol, U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """The OOD query weights ``c_k``, from the vectors: as given, or by the protocol's
    rule on ``cos(u_k, v̄)`` with ``v̄`` the mean of the columns of V (``Protocol.weights``).
    The cosine is read off the vectors (``u_kᵀv̄ / ‖v̄‖``, unit-norm ``u_k``), so it needs no
    orthonormality: for overlapping V, ``‖Σ v_n‖ = √(1ᵀG_V1)`` is what the recipe uses."""
    K, rule = U.shape[1], protocol.weights
    if rule is None:
        return np.ones(K)
    if not isinstance(rule, str):
        return np.array(rule, dtype=np.float64)
    centre = V.mean(axis=1)
    cos = U.T @ centre / np.linalg.norm(centre)
    if rule == "cosine":
        kept = np.maximum(cos, 0.0)
        return kept * (K / kept.sum())
    return (cos >= 0).astype(np.float64)


def off_span(V: np.ndarray) -> np.ndarray:
    """``P = I − V(VᵀV)⁻¹Vᵀ``, the orthogonal projector off span(V) for independent columns
    (``I − VVᵀ`` is one only when they are orthonormal: for overlapping features it leaves
    part of span(V) in, and the projected fine-tuning then moves the source logits)."""
    return np.eye(V.shape[0]) - V @ np.linalg.solve(V.T @ V, V.T)


@dataclass(frozen=True)
class Interventions:
    """What fine-tuning with a protocol's interventions needs from the vectors: the query
    weights ``c_k`` and the features the rule covers (``c_k > 0``), the projector off
    span(V) ``P = I − V(VᵀV)⁻¹Vᵀ`` (``I − VVᵀ`` for orthonormal V), and
    the OOD queries no update reaches (without replay: ``c_j (UᵀP_rU)[j, k] = 0`` for
    all ``j``)."""

    protocol: Any
    weights: np.ndarray
    covered: np.ndarray
    P: np.ndarray
    frozen: np.ndarray

    @staticmethod
    def of(protocol, U: np.ndarray, V: np.ndarray) -> "Interventions":
        weights = query_weights(protocol, U, V)
        P = off_span(V)
        right = P if protocol.project in ("query", "both") else np.eye(V.shape[0])
        frozen = ~(weights[:, None] * (U.T @ right @ U)).any(axis=0) & (protocol.replay == 0)
        return Interventions(protocol, weights, weights > 0, P, frozen)

    def projected(self, step: np.ndarray) -> np.ndarray:
        """``P_l step P_r``: the update off span(V) on the sides the protocol projects."""
        if self.protocol.project in ("key", "both"):
            step = self.P @ step
        if self.protocol.project in ("query", "both"):
            step = step @ self.P
        return step


def finetune(Q1: np.ndarray, U: np.ndarray, V: np.ndarray, protocol,
             snapshots: list | None = None) -> tuple[np.ndarray, int, list, bool]:
    """Fine-tuning GD on ``Q`` from ``Q1`` with the protocol's interventions, each done
    to Q itself: ``ΔQ = −η[(1−λ) P_l ∇L_U^c P_r + λ ∇L_V + μ(Q − Q1)]``, ``P`` the projector
    off span(V) (:func:`off_span`) on a projected side. Stops when every weighted (``c_k > 0``) ``e_k`` on U is within
    ``eps_ft``, when the only ones above it are queries no update reaches (without
    replay: ``c_j (UᵀP_rU)[j, k] = 0`` for all ``j``), or, with a pull, when a step
    moves no logit (``UᵀΔQU``, ``VᵀΔQV``) by more than ``STALL_STEP``; with
    ``ft_steps``, after exactly that many steps. Returns the final Q, the steps, the
    source errors at every step and whether the rule held at the end."""
    p = protocol
    plan = Interventions.of(p, U, V)
    weights, covered, frozen = plan.weights, plan.covered, plan.frozen
    fixed = p.ft_steps is not None
    Q, watched = Q1.copy(), []
    for t in range(p.finetune_cap + 1):
        errors, _, grad = errors_and_gradient(Q, U, None if p.weights is None else weights)
        source_errors, _, source_grad = errors_and_gradient(Q, V)
        watched.append(source_errors)
        if snapshots is not None:
            snapshots.append(Q.copy())
        within = (errors <= p.eps_ft) | ~covered
        reached = bool(within.all())
        if (not fixed and (within | frozen).all()) or t == p.finetune_cap:
            break
        step = plan.projected((1.0 - p.replay) * grad if p.replay else grad)
        if p.replay:
            step = step + p.replay * source_grad
        if p.l2:
            step = step + p.l2 * (Q - Q1)
        change = p.eta_ft * step
        if p.l2 and not fixed and all(np.abs(F.T @ change @ F).max() <= STALL_STEP
                                      for F in (U, V)):
            break                                         # settled: the pull balances the fit
        Q = Q - change
    if t == p.finetune_cap and not (reached or fixed or (within | frozen).all()):
        raise ComputationError(f"fine-tuning (full-Q simulator) did not meet the stopping "
                               f"rule within max_steps = {p.finetune_cap} (eps = "
                               f"{p.eps_ft:g}, eta = {p.eta_ft:g})")
    return Q, t, watched, reached


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
                            M=geo.M if geo.known_diagonal is None else None,
                            grams=None if geo.orthonormal else (geo.G_V, geo.G_U))
    V, U, K = geo.V, geo.U, geo.K
    pre_path: list = []
    ft_path: list = []
    Q1, T1 = train(np.zeros((geo.d, geo.d)), V, proto.eta, proto.eps,
                      proto.max_steps, "pretraining", snapshots=pre_path)
    z1 = V.T @ Q1 @ V
    errors_v, _, _ = errors_and_gradient(Q1, V)
    errors_u, attn_u, _ = errors_and_gradient(Q1, U)
    Q2, T2, source_errors, reached = finetune(Q1, U, V, proto, snapshots=ft_path)
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
