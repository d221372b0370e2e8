"""A setting is one geometry plus one training protocol: the single input that the
closed forms, the exact dynamics and every simulator share (docs/theory.md, "Conventions")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import InputError, shorten
from .geometry import Geometry

DEFAULT_EPS = 0.01
DEFAULT_ETA = 0.1
DEFAULT_MAX_STEPS = 1_000_000
#: The largest step count a Protocol takes: counts are exact in float64 and int64 up to
#: it (no run comes near: the caps refuse runs past about 2e12 logit updates).
MAX_STEP_COUNT = 2 ** 53
#: A stopping level no error meets (every e_k >= 0): fine-tuning for ``ft_steps`` steps.
NEVER = -1.0


def check_positive(value: Any, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(name, value, "expected a positive real number") from None
    if not (math.isfinite(x) and x > 0):
        raise InputError(name, value, "expected a finite number > 0")
    return x


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

    A bad value raises :class:`~oodcalc.errors.InputError` naming the parameter.

    Example
    -------
    >>> from oodcalc import Protocol
    >>> Protocol(eps=1e-3, eta=0.5)
    Protocol(eps=0.001, eta=0.5, eta_ft=0.5, max_steps=1000000, eps_ft=0.001, ft_steps=None, auto_steps=True)
    >>> Protocol(ft_steps=2000).finetune_rule
    'exactly 2000 steps'
    """

    eps: float = DEFAULT_EPS
    eta: float = DEFAULT_ETA
    eta_ft: float | None = None
    max_steps: int | str | None = None
    eps_ft: float | None = None
    ft_steps: int | None = None
    auto_steps: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
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
        return {"eps": self.eps, "eta": self.eta, "eta_ft": self.eta_ft,
                "max_steps": "auto" if self.auto_steps else self.max_steps,
                "eps_ft": self.eps_ft, "ft_steps": self.ft_steps}


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

    @property
    def K(self) -> int:
        return self.geometry.K

    def describe(self) -> dict[str, Any]:
        """The ``parameters`` block every result carries, so anyone can recompute it."""
        return {"K": self.K, "d": self.geometry.d, **self.protocol.describe(),
                "geometry": self.geometry.describe()}


def check_setting(setting: Any, name: str = "setting") -> Setting:
    """``setting`` if it is a :class:`Setting`, else a clear error: the entry points take
    one (``oc.Setting(oc.parallel_shift([1, -0.9]))``)."""
    if not isinstance(setting, Setting):
        hint = ("wrap the geometry: oc.Setting(geometry, oc.Protocol())"
                if isinstance(setting, Geometry)
                else "e.g. oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol())")
        raise InputError(name, shorten(repr(setting)), f"expected a Setting; {hint}")
    return setting
