"""Sequences of shifts: pretrain on V, then fine-tune on U_1, then U_2, ..., U_S, each
stage by plain gradient descent from where the last one ended, to its own stopping rule.

The state: the logits of every domain
---------------------------------------
Write ``D_0 = V`` and ``D_i = U_i`` (``d × K``, orthonormal columns) and ``z_j = D_jᵀ Q D_j``
for ``j = 0..S``. A plain step on domain ``i`` is ``ΔQ = −η ∇_Q L_i``; since
``L_i`` depends on Q only through ``z_i = D_iᵀ Q D_i``, the chain rule gives
``∇_Q L_i = D_i g_i D_iᵀ`` with ``g_i = ∂L_i/∂z_i`` (:func:`~oodcalc.finetune.loss_gradient`
of ``z_i``). Every domain's logits then move by

    Δz_j = D_jᵀ ΔQ D_j = −η (D_jᵀ D_i) g_i (D_iᵀ D_j),

which needs only the Gram blocks ``G[j, i] = D_jᵀ D_i`` (``G[i, i] = I``, ``G[i, j] =
G[j, i]ᵀ``). The system is closed: pretraining leaves ``Q^(T1) = V Z1 Vᵀ``, so
``z_j(T1) = G[j, 0] Z1 G[0, j]``, and every later ``Q − Q^(T1)`` is a sum of
``D_i X D_iᵀ`` (the updates build nothing else), so ``z_j`` at any time is ``G[j, 0] Z1
G[0, j]`` plus ``Σ_i G[j, i] X_i G[i, j]``: the recursion above, with no Q. With ``S = 1``
it is the plain fine-tuning of :mod:`oodcalc.finetune.terms` (``G[0, 1] = M``:
``Δz_V = −η M g_U Mᵀ``). Checked against gradient descent on the full Q
(:mod:`oodcalc.simulate.sequence`, tests/test_sequence.py).

For parallel shifts (:func:`parallel_shifts`: ``u^(i)_k = γ^(i)_k v_k + √(1 − γ^(i)_k²)
w^(i)_k``, every ``w`` orthonormal to the others and to span(V)) the blocks are diagonal:
``G[0, i] = diag(γ^(i))`` and ``G[i, j] = diag(γ^(i) ⊙ γ^(j))`` for ``i ≠ j``.

The continual-learning metrics, in loss
---------------------------------------
``R[i][j]`` is the loss ``L_j = (1/K) Σ_k e_k(z_j)`` after stage ``i`` (row 0: after
pretraining), the matrix the literature calls the accuracy matrix ``a_{i,j}`` ("task"
``j`` is domain ``j``; pretraining on V is task 0). The metrics are the libraries'
formulas with accuracy read as minus the loss, so each keeps the sign of its name:

* backward transfer (Lopez-Paz & Ranzato 2017; mammoth ``utils/metrics.py``
  ``backward_transfer``: mean over ``i < T−1`` of ``results[-1][i] − results[i][i]``;
  avalanche ``evaluation/metrics/forgetting_bwt.py``: ``BWT = −forgetting``, forgetting
  the value right after training an experience minus the last one):
  ``BWT = (1/S) Σ_{j<S} (R[j][j] − R[S][j])``. Negative: the losses of earlier domains
  rose, i.e. forgetting. With ``S = 1`` it is ``−F``, the forgetting of
  :func:`oodcalc.predict`.
* forgetting (Chaudhry et al. 2018, "Riemannian Walk": ``f_j = max_{l<T−1} a_{l,j} −
  a_{T−1,j}``; mammoth ``forgetting`` takes the max over every row, the last included,
  and pads the rows before task j was trained with 0): ``forgetting = (1/S) Σ_{j<S}
  (R[S][j] − min_{j<=l<S} R[l][j])``, the rise of each earlier domain's loss above the
  best it had since it was trained. Positive: forgetting. Unlike mammoth's (never
  negative) it is negative when the last stage left a domain better than ever.
* forward transfer (Lopez-Paz & Ranzato 2017; mammoth ``forward_transfer``: mean over
  ``i >= 1`` of ``results[i−1][i] − random_results[i]``; avalanche
  ``evaluation/metrics/forward_transfer.py``: the value after the previous experience
  minus the value at initialisation): ``FWT = (1/S) Σ_{i=1..S} (b_i − R[i−1][i])``, with
  ``b_i`` the loss of the untrained model (``Q = 0``, where pretraining starts: uniform
  attention, ``(K − 1)/(2K)`` on every domain). Positive: what was trained before lowered
  the loss on domain ``i`` before it was trained.

The same two backward metrics over the shifts alone (``1 <= j < S``: how later shifts
treat earlier shifts, the source left out) are undefined with one shift.

The joint reference
-------------------
Gradient descent on the mean ``(1/(S+1)) Σ_j L_j`` over every domain, the source
included, from ``Q^(T1)``, until every domain meets the rule: the model trained on
everything at once, from the same pretrained start as the sequence (so the comparison
is about the order of the data, not the start). From ``Q^(T1)`` the joint updates stay
in the same span (``ΔQ = −η/(S+1) Σ_i D_i g_i D_iᵀ``), so the recursion above computes it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InputError, item_name, param, shorten
from ..limits import refuse_over_cap
from ..geometry import check_dimension, check_finite, check_K, check_orthonormal, \
    check_sequence, from_arrays, ORTHONORMAL_TOL
from ..setting import INTERVENTIONS, STALL_STEP, Protocol
from .terms import errors_and_gradient, query_weights


__all__ = [
    "BWT_DEFINITION", "FORGETTING_DEFINITION", "FROZEN_TOL", "FWT_DEFINITION", "Joint",
    "Metric", "SPAN_TOL", "SequenceResult", "Shifts", "Stage", "WORKING_COPIES",
    "check_shifts", "check_size", "check_stage_weights", "descend", "descend_stage",
    "earlier_span_blocks", "losses", "metrics", "parallel_shifts", "replay_shares",
    "report_every", "run_sequence", "shifts_from_arrays", "stage_plan", "stage_protocols",
    "start_logits",
]


# --- geometry: a sequence of shifts ---------------------------------------------------

@dataclass(frozen=True)
class Shifts:
    """The source V and the shifts U_1..U_S of a sequence: ``gram[j, i] = D_jᵀ D_i``
    (``(S+1, S+1, K, K)``, ``D_0 = V``), and the arrays (``arrays()``: ``[V, U_1, ...]``,
    ``d × K`` each; built on demand for a constructed sequence)."""

    kind: str
    K: int
    d: int
    gram: np.ndarray
    params: dict
    _arrays: tuple | None = None

    @property
    def S(self) -> int:
        return self.gram.shape[0] - 1

    def arrays(self) -> list[np.ndarray]:
        if self._arrays is not None:
            return list(self._arrays)
        return _parallel_arrays(np.array(self.params["gammas"]), self.d)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "K": self.K, "d": self.d, "stages": self.S, **self.params}


def parallel_shifts(gammas: Sequence[Sequence[float]], d: int | None = None, *,
                    names: Sequence[str] | None = None) -> Shifts:
    """A sequence of parallel shifts: stage ``i`` has its own ``γ^(i)`` (K values in
    [−1, 1]), ``u^(i)_k = γ^(i)_k v_k + √(1 − γ^(i)_k²) w^(i)_k`` with every ``w``
    orthonormal to the others and to span(V), so ``U_iᵀU_j = diag(γ^(i) ⊙ γ^(j))``.

    Parameters
    ----------
    gammas : sequence of sequences of float
        ``γ^(1), ..., γ^(S)``, each K >= 2 values in [−1, 1], the same K for every stage.
    d : int, optional
        Dimension; default and minimum ``K + #{(i, k) : |γ^(i)_k| < 1}`` (a larger ``d``
        pads with zeros and changes no result).
    names : sequence of str, keyword-only, optional
        How a message names stage ``i``'s γ (default ``gammas[i]``).

    Returns
    -------
    Shifts
        The Gram blocks ``gram[j, i] = D_jᵀ D_i`` (diagonal, from the γ's; ``D_0 = V``)
        and ``arrays()``, the d × K features ``[V, U_1, ..., U_S]``.

    Example
    -------
    >>> import oodcalc as oc
    >>> shifts = oc.parallel_shifts([[1, -0.9], [1, 0.5]])
    >>> shifts.S, shifts.K, shifts.d, shifts.gram[1, 2].tolist()
    (2, 2, 4, [[1.0, 0.0], [0.0, -0.45]])
    """
    stages = check_sequence(gammas, "gammas", "one sequence of K values per stage, e.g. "
                            "[[1, -0.9], [1, 0.5]]")
    if not stages:
        raise InputError("gammas", "no stage", "give at least one shift")
    names = list(names) if names is not None else [f"gammas[{i}]" for i in range(len(stages))]
    rows = []
    for i, (gamma, name) in enumerate(zip(stages, names)):
        gamma = check_sequence(gamma, name, "K values, e.g. [1, -0.9]")
        values = [check_finite(g, item_name(name, k)) for k, g in enumerate(gamma)]
        if i == 0:
            check_K(len(values), f"{name} (number of values)")
        elif len(values) != len(rows[0]):
            raise InputError(name, ",".join(f"{g:g}" for g in values),
                             f"give K = {len(rows[0])} values, as many as {names[0]} has")
        for k, g in enumerate(values):
            if not -1.0 <= g <= 1.0:
                raise InputError(item_name(name, k), g, "each γ must lie in [-1, 1]")
        rows.append(values)
    gam = np.array(rows)                                   # (S, K)
    S, K = gam.shape
    check_size(K, S)
    d = check_dimension(d, K + int((np.abs(gam) < 1.0).sum()))
    # D_0 = V: the cosines of D_i with V are γ^(i) (γ^(0) = 1), with each other their products
    cos = np.vstack([np.ones(K), gam])
    gram = np.einsum("ik,jk,kl->ijkl", cos, cos, np.eye(K))
    gram[np.arange(S + 1), np.arange(S + 1)] = np.eye(K)   # D_iᵀD_i = I (the w's too)
    return Shifts("parallel-shifts", K, d, gram, {"gammas": rows})


#: Copies of the Gram blocks and the logits of every domain a run holds at once (the
#: blocks, the logits, a step's products and their sum).
WORKING_COPIES = 6


def check_size(K: int, S: int) -> None:
    """Refuse, before any array, a sequence whose ``(S+1)² K × K`` Gram blocks and
    working copies would exceed the memory cap (naming K, the stages when fewer would fit)."""
    need = lambda k, s: WORKING_COPIES * 8.0 * (s + 1) ** 2 * k * k   # noqa: E731
    refuse_over_cap(need(K, S), f"the sequence's Gram blocks ({S + 1}² blocks of K × K)",
                    [(param("K"), K, need(2, S), param("K", "lower")),
                     ("stages", S, need(K, 1), "give fewer shifts")])


def _parallel_arrays(gam: np.ndarray, d: int) -> list[np.ndarray]:
    """V = the first K unit vectors; each moved u^(i)_k gets the next fresh unit vector."""
    S, K = gam.shape
    V = np.eye(d, K)
    out, fresh = [V], K
    for i in range(S):
        U = np.zeros((d, K))
        U[np.arange(K), np.arange(K)] = gam[i]
        for k in np.flatnonzero(np.abs(gam[i]) < 1.0):
            U[fresh, k] = math.sqrt(1.0 - gam[i, k] ** 2)
            fresh += 1
        out.append(U)
    return out


def shifts_from_arrays(V: Any, Us: Sequence[Any], *, tol: float = ORTHONORMAL_TOL) -> Shifts:
    """A sequence from arrays: the source ``V`` and the shifts ``Us = [U_1, ..., U_S]``.

    Parameters
    ----------
    V : array_like
        The training features, ``d × K`` with orthonormal columns (``d >= K >= 2``).
    Us : sequence of array_like
        One ``d × K`` array with orthonormal columns per stage, checked as
        :func:`oodcalc.from_arrays` checks them (a message names ``Us[i]``).
    tol : float, keyword-only, default 1e-6
        Tolerance of the orthonormality check.

    Returns
    -------
    Shifts
        The Gram blocks ``gram[j, i] = D_jᵀ D_i`` (``D_0 = V``, ``D_i = U_i``) and the
        arrays.

    Example
    -------
    >>> import numpy as np, oodcalc as oc
    >>> V = np.eye(3, 2)
    >>> turned = np.array([[0.6, 0], [0, 1], [0.8, 0]])   # u_1 turned toward e_3
    >>> shifts = oc.shifts_from_arrays(V, [turned, V])
    >>> shifts.S, shifts.gram[1, 2].tolist()
    (2, [[0.6, 0.0], [0.0, 1.0]])
    """
    stages = check_sequence(Us, "Us", "a list of d × K arrays, one per stage")
    if not stages:
        raise InputError("Us", "an empty list", "give at least one shift (a d × K array)")
    checked = [from_arrays(V, U, tol=tol, names=("V", f"Us[{i}]")) for i, U in enumerate(stages)]
    for i, g in enumerate(checked):      # the sequence engine is the orthonormal one
        if not g.orthonormal:
            for F, name in ((g.V, "V"), (g.U, f"Us[{i}]")):
                check_orthonormal(F, name, tol, "sequences do not take overlapping "
                                  "features yet (oc.predict does)")
    D = [checked[0].V] + [g.U for g in checked]
    check_size(checked[0].K, len(stages))
    gram = np.array([[a.T @ b for b in D] for a in D])
    return Shifts("arrays", checked[0].K, checked[0].d, gram, {}, tuple(D))


def check_shifts(shifts: Any, name: str = "shifts") -> Shifts:
    if not isinstance(shifts, Shifts):
        raise InputError(name, shorten(repr(shifts)), "expected a sequence of shifts: "
                         "oc.parallel_shifts([[1, -0.9], [1, 0.5]]) or oc.shifts_from_arrays")
    return shifts


# --- the engine -------------------------------------------------------------------------

def start_logits(gram: np.ndarray, z1: np.ndarray) -> np.ndarray:
    """``z_j(T1) = G[j, 0] Z1 G[0, j]`` for every domain, ``(S+1, K, K)``."""
    return gram[:, 0] @ z1 @ gram[0, :]


def descend(z: np.ndarray, gram: np.ndarray, trained: Sequence[int], eta: float,
            eps: float, max_steps: int, fixed: bool = False,
            report: Callable[[int], None] | None = None) -> tuple[int, bool]:
    """GD on the mean loss of the domains ``trained``, in place on every domain's logits
    ``z`` (``(S+1, K, K)``): ``Δz_j = −(η/n) Σ_{i∈trained} G[j, i] g_i G[i, j]``. Stops at
    the first step where every ``e_k(z_i) <= eps`` for every trained ``i`` (``fixed``:
    after exactly ``max_steps`` steps); returns the steps and whether the rule holds.
    ``report(t)`` is told of the steps done now and then (:func:`report_every`)."""
    trained = list(trained)
    rate = eta / len(trained)
    every = report_every(z)
    for t in range(max_steps + 1):
        if report is not None and t % every == 0:
            report(t)
        errors, grads = errors_and_gradient(z[trained])
        met = bool((errors <= eps).all())
        if (met and not fixed) or t == max_steps:
            return t, met
        z -= rate * sum(_step(gram, i, g) for i, g in zip(trained, grads))
    raise AssertionError("unreachable")


def report_every(z: np.ndarray) -> int:
    """Steps between progress reports: about 10^7 multiply-adds (a few hundredths of a
    second), at most 1,000 steps."""
    n, K = z.shape[0], z.shape[-1]
    return max(1, min(1000, int(1e7 // (2 * n * K ** 3))))


def _step(gram: np.ndarray, i: int, g: np.ndarray) -> np.ndarray:
    """``G[j, i] g G[i, j]`` for every domain j: what ``D_i g D_iᵀ`` does to each ``z_j``."""
    return gram[:, i] @ g @ gram[i, :]


def losses(z: np.ndarray) -> np.ndarray:
    """``L_j = (1/K) Σ_k e_k(z_j)`` of every domain."""
    return errors_and_gradient(z)[0].mean(axis=-1)


@dataclass(frozen=True)
class Metric:
    """One continual-learning metric: its value (None when undefined, ``undefined`` says
    why), the per-domain terms it averages, and its definition in one line."""

    name: str
    value: float | None
    terms: list
    definition: str
    undefined: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "terms": self.terms, "definition": self.definition,
                "undefined": self.undefined}


@dataclass(frozen=True)
class Joint:
    """The joint reference: GD on the mean loss of every domain from ``Q^(T1)``."""

    losses: np.ndarray
    steps: int
    reached: bool


@dataclass(frozen=True)
class SequenceResult:
    """A sequence of fine-tuning stages: ``R[i][j]`` the loss on domain ``j`` after stage
    ``i`` (row 0 after pretraining; column 0 the source V), each stage's steps and
    whether it met its rule, the logits at the end, the untrained model's loss on every
    domain (``Q = 0``, the forward-transfer baseline), the metrics and the joint reference.
    Every key of ``to_dict()`` is the attribute of the same name.

    Example
    -------
    >>> import oodcalc as oc
    >>> result = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
    >>> result.R.shape, result.steps, result.reached          # S = 2 stages after V
    ((3, 3), [360, 331], [True, True])
    >>> f"{result.metrics['bwt'].value:+.3e}", result.untrained_loss.tolist()
    ('+2.161e-03', [0.25, 0.25, 0.25])
    """

    R: np.ndarray
    steps: list
    reached: list
    T1: int
    z: np.ndarray
    untrained_loss: np.ndarray
    metrics: dict
    joint: Joint
    parameters: dict

    @property
    def S(self) -> int:
        return len(self.steps)

    @property
    def reference(self) -> np.ndarray:
        """Deprecated: :attr:`untrained_loss` (the JSON's name)."""
        warnings.warn("SequenceResult.reference is deprecated; use untrained_loss (the "
                      "JSON's name)", DeprecationWarning, stacklevel=2)
        return self.untrained_loss

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``oodcalc sequence --json``: every key the attribute of its name.

        Example
        -------
        >>> import oodcalc as oc
        >>> result = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
        >>> data = result.to_dict()
        >>> list(data)
        ['parameters', 'T1', 'R', 'steps', 'reached', 'untrained_loss', 'metrics', 'joint']
        >>> data["R"] == result.R.tolist() and data["joint"]["steps"] == result.joint.steps
        True
        """
        return {"parameters": self.parameters, "T1": self.T1,
                "R": self.R.tolist(), "steps": self.steps, "reached": self.reached,
                "untrained_loss": self.untrained_loss.tolist(),
                "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
                "joint": {"losses": self.joint.losses.tolist(), "steps": self.joint.steps,
                          "reached": self.joint.reached}}


BWT_DEFINITION = ("mean over earlier domains j of R[j][j] − R[S][j] (accuracy read as "
                  "−loss; < 0: the loss rose, forgetting)")
FORGETTING_DEFINITION = ("mean over earlier domains j of R[S][j] − min_{j<=l<S} R[l][j] "
                         "(Chaudhry 2018 in loss; > 0: forgetting)")
FWT_DEFINITION = ("mean over i >= 1 of b_i − R[i−1][i], b = the untrained (Q = 0) loss "
                  "(> 0: earlier training helped domain i)")


def metrics(R: np.ndarray, reference: np.ndarray) -> dict[str, Metric]:
    """Backward transfer, forgetting and forward transfer of a loss matrix ``R``
    (``(S+1, S+1)``), over every earlier domain and over the earlier shifts alone; see
    the module's docstring for the definitions and where they come from."""
    S = R.shape[0] - 1
    bwt = [float(R[j, j] - R[S, j]) for j in range(S)]
    forget = [float(R[S, j] - R[j:S, j].min()) for j in range(S)]
    fwt = [float(reference[i] - R[i - 1, i]) for i in range(1, S + 1)]
    none = "undefined, because no stage was trained after pretraining" if S == 0 else None
    one = "undefined, because there is one shift: no earlier shift to forget" if S < 2 \
        else None

    def mean(terms, why):
        return None if why else float(np.mean(terms))
    return {
        "bwt": Metric("backward transfer", mean(bwt, none), bwt, BWT_DEFINITION, none),
        "forgetting": Metric("forgetting", mean(forget, none), forget,
                             FORGETTING_DEFINITION, none),
        "fwt": Metric("forward transfer", mean(fwt, none), fwt, FWT_DEFINITION, none),
        "bwt_shifts": Metric("backward transfer on the shifts", mean(bwt[1:], one), bwt[1:],
                             "BWT over the earlier shifts 1 <= j < S (source left out)", one),
        "forgetting_shifts": Metric("forgetting on the shifts", mean(forget[1:], one),
                                    forget[1:], "forgetting over the earlier shifts "
                                    "1 <= j < S (source left out)", one),
    }


#: A projected query column whose ``|c_j (D_iᵀ P D_i)[j, k]|`` are all below this is
#: frozen (no step moves it): the projector comes from a pseudo-inverse, so a feature
#: inside the earlier span projects to ~1e-16, not to 0.
FROZEN_TOL = 1e-10
#: Eigenvalues of the earlier domains' Gram matrix below this (relative to the largest)
#: are directions the earlier features do not span.
SPAN_TOL = 1e-10


@dataclass(frozen=True)
class Stage:
    """Stage ``i``'s step, built from the Gram blocks: the fit ``(1−λ) L_j (g_i c) R_j``
    (``L_j = D_jᵀ P_l D_i``, ``R_j = D_iᵀ P_r D_j`` for every domain j; ``P = I − Π``, Π
    the projector onto the span of the earlier domains' features ``D_0..D_{i−1}``), the
    replay share λ spread equally over the earlier domains, the pull μ toward the
    logits at the stage's start, the query weights ``c`` and which columns of ``z_i``
    no step moves."""

    i: int
    eta: float
    left: np.ndarray
    right: np.ndarray
    weights: np.ndarray
    replay: float
    l2: float
    frozen: np.ndarray


def earlier_span_blocks(gram: np.ndarray, i: int) -> np.ndarray:
    """``D_jᵀ P D_i`` for every domain j, ``(S+1, K, K)``, with ``P = I − Π`` and Π the
    orthogonal projector onto span(D_0..D_{i−1}): ``Π = E (EᵀE)⁺ Eᵀ`` with
    ``E = [D_0 .. D_{i−1}]``, so ``D_jᵀ Π D_i = G[j, <i] (G[<i, <i])⁺ G[<i, i]`` (the
    pseudo-inverse: earlier domains may share features)."""
    n, K = gram.shape[0], gram.shape[-1]
    inner = gram[:i, :i].transpose(0, 2, 1, 3).reshape(i * K, i * K)        # EᵀE
    w, W = np.linalg.eigh(inner)
    keep = w > SPAN_TOL * w.max()
    pinv = (W[:, keep] / w[keep]) @ W[:, keep].T
    to_earlier = gram[:, :i].transpose(0, 2, 1, 3).reshape(n, K, i * K)     # D_jᵀ E
    from_earlier = gram[:i, i].reshape(i * K, K)                            # Eᵀ D_i
    return gram[:, i] - to_earlier @ pinv @ from_earlier


def replay_shares(i: int) -> np.ndarray:
    """How stage i's replay share λ is split over the earlier domains ``D_0..D_{i−1}``:
    equally (``λ/i`` each), as a replay buffer balanced over past experiences."""
    return np.full(i, 1.0 / i)


def stage_plan(gram: np.ndarray, i: int, protocol: Protocol) -> Stage:
    """Stage ``i``'s step under ``protocol``'s interventions (see :func:`run_sequence`)."""
    K = gram.shape[-1]
    plain_left, plain_right = gram[:, i], gram[i, :]
    if protocol.project != "none":
        H = earlier_span_blocks(gram, i)
    left = H if protocol.project in ("key", "both") else plain_left
    right = np.swapaxes(H, -1, -2) if protocol.project in ("query", "both") else plain_right
    weights = query_weights(protocol, gram[0, i])      # cosines to the pretraining centre
    if protocol.replay:
        frozen = np.zeros(K, dtype=bool)               # replay moves every column
    else:
        frozen = ~(np.abs(weights[:, None] * right[i]) > FROZEN_TOL).any(axis=0)
    return Stage(i, protocol.eta_ft, left, right, weights, protocol.replay, protocol.l2, frozen)


def descend_stage(z: np.ndarray, gram: np.ndarray, stage: Stage, eps: float,
                  max_steps: int, fixed: bool = False, anchor: np.ndarray | None = None,
                  report: Callable[[int], None] | None = None) -> tuple[int, bool]:
    """Stage ``stage.i`` with interventions, in place on every domain's logits:
    ``Δz_j = −η [(1−λ) L_j (g_i c) R_j + (λ/i) Σ_{m<i} G[j, m] g_m G[m, j]
    + μ (z_j − z_j(start))]``. Stops when every covered (``c_k > 0``) ``e_k(z_i) <= eps``,
    when the only ones above it are frozen, or (with a pull) when a step moves no logit
    of any domain by more than ``STALL_STEP``; ``fixed``: after exactly ``max_steps``.
    ``anchor``: the logits the pull is toward, default ``z`` at the start (the stage's
    start). Returns the steps and whether the rule holds."""
    i, eta = stage.i, stage.eta
    covered = stage.weights > 0
    start = z.copy() if anchor is None else anchor
    earlier = list(range(i))
    every = report_every(z)
    for t in range(max_steps + 1):
        if report is not None and t % every == 0:
            report(t)
        errors, grads = errors_and_gradient(z[[i] + (earlier if stage.replay else [])])
        within = (errors[0] <= eps) | ~covered
        met = bool(within.all())
        if (not fixed and (within | stage.frozen).all()) or t == max_steps:
            return t, met
        g = grads[0] * stage.weights[None, :]
        step = (1.0 - stage.replay) * (stage.left @ g @ stage.right)
        if stage.replay:
            shares = stage.replay * replay_shares(i)
            step += sum(w * _step(gram, m, grads[1 + m]) for m, w in zip(earlier, shares))
        if stage.l2:
            step += stage.l2 * (z - start)
        change = eta * step
        if stage.l2 and not fixed and np.abs(change).max() <= STALL_STEP:
            return t, met                              # settled: the pull balances the fit
        z -= change
    raise AssertionError("unreachable")


def stage_protocols(protocol: Protocol, S: int, stages: Sequence[Any] | None
                    ) -> list[Protocol]:
    """One protocol per stage: ``protocol``, with ``stages[i]``'s interventions (a dict
    of ``replay``, ``l2``, ``project``, ``weights``; None: as ``protocol``) for stage i+1."""
    if stages is None:
        return [protocol] * S
    if isinstance(stages, dict):
        raise InputError("stages", shorten(repr(stages)), "expected a list: one dict of "
                         "interventions (or None) per stage")
    stages = check_sequence(stages, "stages", "one dict of interventions per stage, e.g. "
                            "[{'replay': 0.2}, None]")
    if len(stages) != S:
        raise InputError("stages", f"{len(stages)} entries",
                         f"give one per shift: {S} (None for a stage as the protocol says)")
    out = []
    for n, entry in enumerate(stages):
        if entry is None:
            out.append(protocol)
            continue
        if not isinstance(entry, dict) or not set(entry) <= set(INTERVENTIONS):
            raise InputError(f"stages[{n}]", shorten(repr(entry)), "expected a dict with "
                             f"keys among {', '.join(INTERVENTIONS)}, or None")
        try:
            out.append(replace(protocol, **entry))
        except InputError as error:              # named by the stage and the key
            key = error.what.strip("⟦⟧")
            raise InputError(f"stages[{n}]['{key}']", error.value, error.accepted) from None
    return out


def check_stage_weights(protocols: list[Protocol], K: int) -> None:
    for n, p in enumerate(protocols):
        w = p.weights
        if w is not None and not isinstance(w, str) and len(w) != K:
            raise InputError(param("weights"), f"{len(w)} values", "expected one weight per "
                             f"feature: K = {K} (stage {n + 1})")


def run_sequence(shifts: Shifts, z1: np.ndarray, protocol: Protocol, T1: int = 0,
                 stages: Sequence[Protocol] | None = None,
                 progress: Callable[[str, int, float], None] | None = None,
                 expected: Sequence[float] | None = None) -> SequenceResult:
    """Every stage of ``shifts`` from the pretrained logits ``z1`` (``K × K``, ``Q^(T1)
    = V z1 Vᵀ``), with ``protocol``'s ``eta_ft``, ``eps_ft`` (or ``ft_steps``) and step
    cap per stage, and each stage's interventions (``stages``: one protocol per stage,
    default ``protocol`` for every one); then the joint reference (plain GD, to
    ``eps_ft`` within ``max_steps``). ``progress(phase, done, expected)`` is told of
    each stage's steps (``"stage i"``, then ``"joint"``) against ``expected`` (the
    estimated steps of the S stages and the joint reference, from
    :func:`oodcalc.continual.sequence_estimate`)."""
    gram, S = shifts.gram, shifts.S
    stages = [protocol] * S if stages is None else list(stages)
    fixed = protocol.ft_steps is not None
    z = start_logits(gram, np.asarray(z1, dtype=np.float64))
    start = z.copy()
    rows, steps, reached = [losses(z)], [], []
    expected = list(expected) if expected is not None else [0.0] * (S + 1)

    def reporter(phase, guess):
        if progress is None:
            return None
        return lambda t: progress(phase, t, guess)
    for i, p in zip(range(1, S + 1), stages):
        report = reporter(f"stage {i}", expected[i - 1])
        if p.interventions:
            t, met = descend_stage(z, gram, stage_plan(gram, i, p), protocol.eps_ft,
                                   protocol.finetune_cap, fixed=fixed, report=report)
        else:
            t, met = descend(z, gram, [i], protocol.eta_ft, protocol.eps_ft,
                             protocol.finetune_cap, fixed=fixed, report=report)
        if progress is not None:
            progress(f"stage {i}", t, t)
        rows.append(losses(z))
        steps.append(t)
        reached.append(met)
    R = np.array(rows)
    K = shifts.K
    reference = losses(np.zeros((S + 1, K, K)))
    joint_t, joint_met = descend(start, gram, range(S + 1), protocol.eta_ft,
                                 protocol.eps_ft, protocol.max_steps,
                                 report=reporter("joint", expected[S]))
    if progress is not None:
        progress("joint", joint_t, joint_t)
    parameters = {**shifts.describe(), **protocol.describe()}
    if any(p.interventions for p in stages):
        parameters["stage_interventions"] = [p.interventions for p in stages]
    return SequenceResult(R, steps, reached, T1, z, reference, metrics(R, reference),
                          Joint(losses(start), joint_t, joint_met), parameters)
