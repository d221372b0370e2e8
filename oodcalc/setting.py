"""A setting is one geometry plus one training protocol: the single input that the
closed forms, the exact dynamics and every simulator share (docs/theory.md, "Conventions")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import API_NAMES, InputError, param, shorten
from .geometry import Geometry

__all__ = [
    "DEFAULT_EPS", "DEFAULT_ETA", "DEFAULT_MAX_STEPS", "INTERVENTIONS", "MAX_STEP_COUNT",
    "NEVER", "PROJECTIONS", "Protocol", "STALL_STEP", "Setting", "VERDICT_SEEDS",
    "WEIGHT_RULES", "check_positive", "check_setting", "require_plain",
]


DEFAULT_EPS = 0.01
DEFAULT_ETA = 0.1
DEFAULT_MAX_STEPS = 1_000_000
#: The largest step count a Protocol takes: counts are exact in float64 and int64 up to
#: it (no run comes near: the caps refuse runs past about 2e12 logit updates).
MAX_STEP_COUNT = 2 ** 53
#: Where the fine-tuning update may be projected off span(V): ``ΔQ ← P ΔQ`` (key side),
#: ``ΔQ P`` (query side) or both, ``P = I − VVᵀ``.
PROJECTIONS = ("none", "key", "query", "both")
#: The Protocol fields that change fine-tuning itself (``Protocol.interventions``).
INTERVENTIONS = ("replay", "l2", "project", "weights")
#: Named rules for the OOD query weights (:func:`oodcalc.finetune.query_weights`).
WEIGHT_RULES = ("cosine", "drop-negative")
#: Fine-tuning that cannot reach its rule (a pull holds it back) stops at the first step
#: that moves no OOD or source logit by more than this: it has settled on its fixed point.
STALL_STEP = 1e-12
#: A stopping level no error meets (every e_k >= 0): fine-tuning for ``ft_steps`` steps.
NEVER = -1.0
#: No verdict (a PASS/FAIL mark, a ✓/✗, a shape) from fewer seeds than this: an interval
#: from 3 or 4 seeds says too little, whatever its width.
VERDICT_SEEDS = 5


def check_positive(value: Any, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(name, value, "expected a positive real number") from None
    if not (math.isfinite(x) and x > 0):
        raise InputError(name, value, "expected a finite number > 0")
    return x


def _real(value: Any) -> float:
    """``float(value)``, NaN for what is not a number (the range check then refuses it)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Protocol:
    """How both phases train: full-batch gradient descent from ``Q = 0``, each phase
    stopping at the first step with every ``e_k <= eps`` (``L_k <= eps/K``); fine-tuning
    may instead stop at its own ``eps_ft`` or run exactly ``ft_steps`` steps.

    Parameters
    ----------
    eps : float, default 0.01
        The stopping rule's ε (> 0): pretraining's, and fine-tuning's unless ``eps_ft``
        or ``ft_steps`` is given.
    eta : float, default 0.1
        Step size of pretraining on V (> 0).
    eta_ft : float, optional
        Step size of fine-tuning on U (> 0); defaults to ``eta``.
    max_steps : int or "auto", optional
        Cap per phase; a phase that has not met the rule by then fails with a
        :class:`~oodcalc.errors.ComputationError` naming its parameters. An integer is
        kept as given. ``"auto"`` (also what leaving it unset means) is
        ``DEFAULT_MAX_STEPS``, raised by ``predict`` to twice a phase's estimated steps
        where they exceed it (``oodcalc.estimates``), so that large K runs without a
        flag; then ``max_steps`` holds that base cap and ``auto_steps`` is true.
        ``describe()`` records what was asked (``"auto"`` or the integer: rerunning with
        it gives the same numbers); the cap each phase ran under is in the report
        (``Report.run["max_steps"]``).
    eps_ft : float, optional
        Fine-tuning's own ε (> 0); defaults to ``eps``.
    ft_steps : int, optional
        Fine-tune exactly this many steps (>= 1), with no stopping rule (not with
        ``eps_ft``); ``max_steps`` then caps pretraining only.
    replay : float, default 0
        Replay share λ in [0, 1): each fine-tuning step is ``(1 − λ)`` of the gradient on
        U plus ``λ`` of the gradient on V (the pretraining data).
    l2 : float, default 0
        Pull μ >= 0 toward the pretrained weights: ``(μ/2)‖Q − Q^(T1)‖²`` is added to the
        fine-tuning loss.
    project : {"none", "key", "query", "both"}, default "none"
        Project the fine-tuning update onto the complement of span(V) on the key side
        (``(I − VVᵀ) ΔQ``), the query side (``ΔQ (I − VVᵀ)``) or both.
    weights : sequence of float, "cosine" or "drop-negative", optional
        Weights ``c_k >= 0`` of the OOD queries in the fine-tuning loss
        ``(1/K) Σ_k c_k e_k``, or a rule on each ``u_k``'s cosine to the pretraining
        centre ``v̄``: ``cosine`` (``max(cos_k, 0)``, scaled to mean 1) or
        ``drop-negative`` (1 where ``cos_k >= 0``, else 0). The stopping rule covers the
        features with ``c_k > 0``.

    Raises
    ------
    InputError
        A bad value, naming the parameter.

    Example
    -------
    >>> from oodcalc import Protocol
    >>> Protocol(eps=1e-3, eta=0.5)
    Protocol(eps=0.001, eta=0.5, eta_ft=0.5, max_steps=1000000, eps_ft=0.001, ft_steps=None, replay=0.0, l2=0.0, project='none', weights=None, auto_steps=True)
    >>> Protocol(ft_steps=2000).finetune_rule
    'exactly 2000 steps'
    >>> Protocol(replay=0.5, project="key").interventions
    {'replay': 0.5, 'project': 'key'}
    """

    eps: float = DEFAULT_EPS
    eta: float = DEFAULT_ETA
    eta_ft: float | None = None
    max_steps: int | str | None = None
    eps_ft: float | None = None
    ft_steps: int | None = None
    replay: float = 0.0
    l2: float = 0.0
    project: str = "none"
    weights: tuple[float, ...] | str | None = None
    auto_steps: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._check_interventions()
        object.__setattr__(self, "eps", check_positive(self.eps, "eps"))
        object.__setattr__(self, "eta", check_positive(self.eta, "eta"))
        eta_ft = self.eta if self.eta_ft is None else check_positive(self.eta_ft, "eta_ft")
        object.__setattr__(self, "eta_ft", eta_ft)
        steps = self.max_steps
        auto = steps is None or (isinstance(steps, str) and steps.strip().lower() == "auto")
        object.__setattr__(self, "auto_steps", auto)
        if auto:
            steps = DEFAULT_MAX_STEPS
            object.__setattr__(self, "max_steps", steps)
        if (isinstance(steps, bool) or not isinstance(steps, (int, np.integer))
                or not 1 <= steps <= MAX_STEP_COUNT):
            raise InputError("max_steps", shorten(steps),
                             f'expected an integer from 1 to 2^53 or "auto"')
        object.__setattr__(self, "max_steps", int(steps))
        n = self.ft_steps
        if n is not None:
            if (isinstance(n, bool) or not isinstance(n, (int, np.integer))
                    or not 1 <= n <= MAX_STEP_COUNT):
                raise InputError("ft_steps", shorten(n), "expected an integer from 1 to 2^53")
            if self.eps_ft is not None:
                raise InputError("eps_ft", self.eps_ft, "give eps_ft or ft_steps, not both "
                                 "(a fixed number of steps has no stopping rule)")
            object.__setattr__(self, "ft_steps", int(n))
        eps_ft = self.eps if self.eps_ft is None else check_positive(self.eps_ft, "eps_ft")
        object.__setattr__(self, "eps_ft", eps_ft)

    def _check_interventions(self) -> None:
        replay = _real(self.replay)
        if not 0 <= replay < 1:
            raise InputError(param("replay"), shorten(self.replay), "expected a share λ with "
                             "0 <= λ < 1 (λ = 1 would not fine-tune on U at all)")
        object.__setattr__(self, "replay", replay)
        l2 = _real(self.l2)
        if not (math.isfinite(l2) and l2 >= 0):
            raise InputError(param("l2"), shorten(self.l2), "expected a finite number >= 0")
        object.__setattr__(self, "l2", l2)
        if self.project not in PROJECTIONS:
            raise InputError(param("project"), shorten(self.project),
                             f"expected one of {', '.join(PROJECTIONS)}")
        weights = self.weights
        if isinstance(weights, str):
            if weights not in WEIGHT_RULES:
                raise InputError(param("weights"), shorten(weights), "expected numbers c_1,...,c_K "
                                 f"or a rule: {', '.join(WEIGHT_RULES)}")
        elif weights is not None:
            try:
                values = tuple(_real(c) for c in weights)
            except TypeError:                    # not a sequence
                values = (math.nan,)
            if not values or not all(math.isfinite(c) and c >= 0 for c in values) \
                    or not any(values):
                raise InputError(param("weights"), shorten(weights), "expected finite numbers "
                                 "c_k >= 0, not all 0, one per feature")
            object.__setattr__(self, "weights", values)

    @property
    def interventions(self) -> dict[str, Any]:
        """The interventions asked for (those away from plain fine-tuning), by name."""
        out: dict[str, Any] = {}
        if self.replay:
            out["replay"] = self.replay
        if self.l2:
            out["l2"] = self.l2
        if self.project != "none":
            out["project"] = self.project
        if self.weights is not None:
            out["weights"] = self.weights if isinstance(self.weights, str) \
                else list(self.weights)
        return out

    @property
    def finetune_stop(self) -> float:
        """The ε fine-tuning stops at: ``eps_ft``, or :data:`NEVER` with ``ft_steps``."""
        return NEVER if self.ft_steps is not None else self.eps_ft

    @property
    def finetune_cap(self) -> int:
        """Fine-tuning's step cap: ``ft_steps``, else ``max_steps``."""
        return self.max_steps if self.ft_steps is None else self.ft_steps

    @property
    def finetune_rule(self) -> str:
        """How fine-tuning stops, in words."""
        if self.ft_steps is not None:
            return f"exactly {self.ft_steps} steps"
        return f"every e_k <= {self.eps_ft:g}"

    def describe(self) -> dict[str, Any]:
        """The protocol's part of a result's ``parameters`` (interventions only when set).

        Example
        -------
        >>> import oodcalc as oc
        >>> described = oc.Protocol(eps=0.05, replay=0.1).describe()
        >>> list(described)
        ['eps', 'eta', 'eta_ft', 'max_steps', 'eps_ft', 'ft_steps', 'replay']
        >>> described["eps_ft"], described["max_steps"], described["replay"]
        (0.05, 'auto', 0.1)
        """
        return {"eps": self.eps, "eta": self.eta, "eta_ft": self.eta_ft,
                "max_steps": "auto" if self.auto_steps else self.max_steps,
                "eps_ft": self.eps_ft, "ft_steps": self.ft_steps, **self.interventions}


@dataclass(frozen=True)
class Setting:
    """One geometry under one protocol: the single input of the theory
    (:func:`oodcalc.predict`) and of every simulator, so their reports compare field by
    field.

    Parameters
    ----------
    geometry : Geometry
        The training features V and the OOD features U (see ``parallel_shift``,
        ``rotation``, ``mean_query``, ``orthogonal``, ``from_arrays``, ``from_files``).
    protocol : Protocol, default ``Protocol()``
        ε, η, η_ft and the step cap.

    Example
    -------
    >>> import oodcalc as oc
    >>> setting = oc.Setting(oc.rotation(0.5, K=3), oc.Protocol(eps=0.01, eta=0.1))
    >>> setting.K, setting.describe()["d"]
    (3, 6)
    """

    geometry: Geometry
    protocol: Protocol = Protocol()

    def __post_init__(self) -> None:
        if not isinstance(self.geometry, Geometry):
            raise InputError("Setting.geometry", shorten(repr(self.geometry)), "expected a Geometry "
                             "(oc.parallel_shift, oc.rotation, oc.mean_query, oc.orthogonal, "
                             "oc.from_arrays, oc.from_files)")
        if not isinstance(self.protocol, Protocol):
            raise InputError("Setting.protocol", shorten(repr(self.protocol)),
                             "expected a Protocol, e.g. oc.Protocol(eps=0.01, eta=0.1)")
        weights = self.protocol.weights
        if weights is not None and not isinstance(weights, str) and len(weights) != self.K:
            raise InputError(param("weights"), f"{len(weights)} values", f"expected one weight per "
                             f"feature: K = {self.K}")

    @property
    def K(self) -> int:
        return self.geometry.K

    def describe(self) -> dict[str, Any]:
        """The ``parameters`` block every result carries, so anyone can recompute it.

        Example
        -------
        >>> import oodcalc as oc
        >>> described = oc.Setting(oc.parallel_shift([1, -0.9])).describe()
        >>> described["K"], described["eps"], described["geometry"]["gamma"]
        (2, 0.01, [1.0, -0.9])
        """
        return {"K": self.K, "d": self.geometry.d, **self.protocol.describe(),
                "geometry": self.geometry.describe()}


def require_plain(protocol: Protocol, where: str) -> None:
    """Refuse a protocol with fine-tuning interventions in ``where``, which runs plain
    fine-tuning only (rather than ignore them)."""
    if protocol.interventions:
        asked = ", ".join(f"{k} = {v}" for k, v in protocol.interventions.items())
        place = param(where) if where in API_NAMES else where    # a caller may rename it
        raise InputError(param(next(iter(protocol.interventions))), asked,
                         f"{place} runs plain fine-tuning only; {param('predict')} and "
                         f"{param('simulate_population')} run the interventions")


def check_setting(setting: Any, name: str = "setting") -> Setting:
    """``setting`` if it is a :class:`Setting`, else a clear error: the entry points take
    one (``oc.Setting(oc.parallel_shift([1, -0.9]))``)."""
    if not isinstance(setting, Setting):
        hint = ("wrap the geometry: oc.Setting(geometry, oc.Protocol())"
                if isinstance(setting, Geometry)
                else "e.g. oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol())")
        raise InputError(name, shorten(repr(setting)), f"expected a Setting; {hint}")
    return setting
