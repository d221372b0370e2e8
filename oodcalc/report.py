"""The result schema shared by the theory and every simulator.

A :class:`Report` holds, for one setting, the three phases of the protocol
(docs/theory.md): where pretraining stops (T1), what Q^(T1) does on the OOD features, and
what fine-tuning (T2) does to the source features. Theory and simulation fill the same
fields, so comparing them is a field-by-field diff. ``to_dict`` is the documented JSON
(docs/report.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np


__all__ = [
    "CURVE_POINTS", "FULL_MATRIX_K", "FeatureForgetting", "Finetune", "LazyArrays", "OOD",
    "Pretrain", "Report", "TREND_TOL", "directions", "jsonable", "matrix_summary", "off_diagonal",
    "trend",
]


def jsonable(value: Any) -> Any:
    """numpy → plain Python; NaN/inf → None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def off_diagonal(z: np.ndarray) -> np.ndarray:
    """``z`` with NaN on the diagonal: the β-type weights ``beta[n][k]``, n ≠ k."""
    out = np.array(z, dtype=np.float64, copy=True)
    np.fill_diagonal(out, np.nan)
    return out


#: Loss changes smaller than this (absolute) count as no change when naming a trend.
TREND_TOL = 1e-15


def trend(series: np.ndarray) -> str:
    """``rising``, ``falling``, ``flat`` or ``non-monotone`` for a 1-D series."""
    steps = np.diff(series)
    if steps.size == 0 or np.all(np.abs(steps) <= TREND_TOL):
        return "flat"
    if np.all(steps >= -TREND_TOL):
        return "rising"
    if np.all(steps <= TREND_TOL):
        return "falling"
    return "non-monotone"


def directions(change: np.ndarray) -> np.ndarray:
    """``rising``, ``falling`` or ``flat`` (within :data:`TREND_TOL`) for loss changes,
    elementwise, as :func:`trend` names a one-step series; object dtype."""
    change = np.asarray(change, dtype=np.float64)
    out = np.empty(change.shape, dtype=object)
    out.fill("falling")                 # one str for all (np.where makes one per entry)
    out[change > 0] = "rising"
    out[np.abs(change) <= TREND_TOL] = "flat"
    return out


class LazyArrays(Mapping):
    """A read-only mapping of arrays, each given as an array or as a function that makes
    it on first access (kept then): the symmetric ray's K × K trajectories are two
    numbers a step until someone reads them (at K = 1024, 8 MB a step)."""

    def __init__(self, items: dict[str, np.ndarray | Callable[[], np.ndarray]]):
        self._items = dict(items)

    def __getitem__(self, name: str) -> np.ndarray:
        value = self._items[name]
        if callable(value):
            value = self._items[name] = value()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"LazyArrays({list(self._items)})"


@dataclass(frozen=True)
class Pretrain:
    T1: int
    z: np.ndarray            # source logits z[n, k] = v_nᵀ Q^(T1) v_k
    error: np.ndarray        # e_k on the source features at T1
    alpha_star: float | None = None  # closed-form threshold (theory only)

    @property
    def alpha(self) -> float:
        return float(np.mean(np.diag(self.z)))

    @property
    def beta(self) -> float:
        return float(np.nanmean(off_diagonal(self.z)))

    @property
    def loss(self) -> float:
        """``L = Σ_k e_k / K`` on the source features at T1."""
        return float(self.error.sum() / self.z.shape[0])

    @property
    def beta_star(self) -> float | None:
        """The closed-form β at T1, ``−α*/(K−1)`` (theory only)."""
        return None if self.alpha_star is None else -self.alpha_star / (self.z.shape[0] - 1)

    def to_dict(self) -> dict[str, Any]:
        out = {"T1": self.T1, "alpha": self.alpha, "beta": self.beta,
               "z": self.z, "error": self.error, "loss": self.loss}
        if self.alpha_star is not None:
            out |= {"alpha_star": self.alpha_star, "beta_star": self.beta_star}
        return out


@dataclass(frozen=True)
class OOD:
    z: np.ndarray            # OOD logits z[n, k] = u_nᵀ Q^(T1) u_k
    attention: np.ndarray    # attention[n][k]: tokens of u_n, query u_k
    error: np.ndarray        # e_k on query u_k
    corollary: list[str | None] = field(default_factory=list)
    at_alpha_star: dict[str, Any] | None = None  # claim 5 evaluated at α* (theory only)

    @property
    def alpha(self) -> np.ndarray:
        """``α_{u_k} = z[k, k]``, per OOD feature."""
        return np.diag(self.z).copy()

    @property
    def beta(self) -> np.ndarray:
        """``β_{u_n,u_k} = z[n, k]`` for n ≠ k, NaN on the diagonal."""
        return off_diagonal(self.z)

    @property
    def attention_correct(self) -> np.ndarray:
        """``Attn_k``: the attention query ``u_k`` gives its own feature's tokens."""
        return np.diag(self.attention).copy()

    @property
    def loss(self) -> float:
        """The OOD loss ``L = Σ_k e_k / K`` at T1."""
        return float(self.error.sum() / self.z.shape[0])

    def to_dict(self) -> dict[str, Any]:
        out = {"alpha": self.alpha, "beta": self.beta,
               "attention": self.attention,
               "attention_correct": self.attention_correct,
               "error": self.error, "loss": self.loss,
               "corollary": self.corollary}
        if self.at_alpha_star is not None:
            out["at_alpha_star"] = self.at_alpha_star
        return out


@dataclass(frozen=True)
class FeatureForgetting:
    k: int                   # 1-based, as in the paper
    F_k: float
    loss_before: float
    loss_after: float
    trend: str               # rising | falling | flat | non-monotone, along fine-tuning
    regime: str | None = None      # the theorem's verdict (parallel shifts only)
    condition: str | None = None   # its inequality, in numbers
    #: the exact change of L_{v_k} over the first fine-tuning step (0 when T2 = 0)
    first_step: float | None = None
    #: rising | falling | flat: the sign of ``first_step`` (the trend's tolerance)
    initial_direction: str | None = None
    #: claim 8c's first-order criterion (parallel shifts): the first step changes e_k by
    #: (η_ft/K) g_k D_k + O(η_ft²), g_k > 0
    D_k: float | None = None
    D_k_direction: str | None = None   # rising | falling | flat: the sign of D_k

    @property
    def D_k_agrees(self) -> bool | None:
        """Whether the first-order sign of ``D_k`` is the exact first step's direction
        (it can differ where ``D_k ≈ 0``: the O(η²) term decides); None without both."""
        if self.D_k_direction is None or self.initial_direction is None:
            return None
        return self.D_k_direction == self.initial_direction

    @property
    def theorem_holds(self) -> bool | None:
        """Whether the exact trajectory does what the theorem's verdict says (claim 8:
        a monotone rise, a monotone fall, or no motion); None where it says nothing."""
        expected = {"forgetting": "rising", "backward-transfer": "falling",
                    "unaffected": "flat"}.get(self.regime)
        return None if expected is None else self.trend == expected


@dataclass(frozen=True)
class Finetune:
    T2: int
    z_ood: np.ndarray        # OOD logits at T1+T2
    z_source: np.ndarray     # source logits at T1+T2 (carried through M)
    error_ood: np.ndarray    # e_k on the OOD features at T1+T2
    step_size_bound: float | None = None   # claim 9, min over k
    step_size_bounds: np.ndarray | None = None
    eta_ft: float | None = None
    reached: bool | None = None   # with interventions: whether the rule on U held at T2

    @property
    def eta_ft_within_bound(self) -> bool | None:
        """Whether ``η_ft`` is within the step-size bound (None without a bound)."""
        if self.step_size_bound is None:
            return None
        return bool(self.eta_ft <= self.step_size_bound)

    def to_dict(self) -> dict[str, Any]:
        out = {"T2": self.T2, "z_ood": self.z_ood, "z_source": self.z_source,
               "error_ood": self.error_ood}
        if self.reached is not None:
            out["reached"] = self.reached
        if self.step_size_bound is not None:
            out |= {"step_size_bound": self.step_size_bound,
                    "step_size_bounds": self.step_size_bounds,
                    "eta_ft_within_bound": self.eta_ft_within_bound}
        return out


@dataclass(frozen=True)
class Report:
    """One setting's outcome, phase by phase; ``source`` says who produced it.

    The theory (:func:`oodcalc.predict`) and every simulator
    (:func:`oodcalc.simulate.simulate_population`,
    :func:`oodcalc.simulate.simulate_prompts`) return a Report, so comparing them is a
    field-by-field diff (:mod:`oodcalc.compare`). In Jupyter a Report displays as tables;
    ``print(report)`` gives a plain-text summary within 80 columns and ``repr`` one line.

    Attributes
    ----------
    source : str
        ``"theory"``, or the name of the simulator that produced it.
    parameters : dict
        Everything needed to recompute it: ``K``, ``d``, ``eps``, ``eta``, ``eta_ft``,
        ``max_steps`` and the ``geometry`` (its kind, inputs and ``M = VᵀU``).
    pretrain : Pretrain
        Where pretraining on V stops: ``T1``, the logits ``z`` (``z[n, k] = v_nᵀQv_k``),
        ``error`` (``e_k``), ``alpha``/``beta`` reached and, for the theory, the
        closed-form threshold ``alpha_star``.
    ood : OOD
        ``Q^(T1)`` on the OOD features: logits ``z``, ``attention[n, k]`` (tokens of
        ``u_n``, query ``u_k``), ``error`` (``e_k``) and the ``corollary`` case per feature.
    finetune : Finetune
        Fine-tuning on U: ``T2``, the logits at ``T1 + T2`` and the step-size bound.
    forgetting : list of FeatureForgetting
        Per source feature ``k`` (from 1): ``F_k``, the loss before and after, its
        ``trend`` along fine-tuning, the paper's verdict ``regime``/``condition`` and
        ``theorem_holds``, the exact ``first_step`` change of ``L_{v_k}`` with its
        ``initial_direction``, and claim 8c's first-order criterion ``D_k`` with its sign
        ``D_k_direction``.
    trajectories : mapping of str → ndarray
        Logits along both phases: ``"pretrain"``, ``"finetune_ood"``,
        ``"finetune_source"`` (strided when a run is very long; on the symmetric ray
        formed on first access, :class:`LazyArrays`).
    warnings : list of str
        What the user should know about the run (e.g. an overshoot of the threshold).
    run : dict
        How the numbers were computed: ``max_steps`` (the cap each phase ran under,
        ``pretrain`` and ``finetune``) and ``engine`` (the engine of each phase).

    Notes
    -----
    The JSON (:meth:`to_dict`) and the attributes have the same names: the JSON's
    ``ood.loss`` is ``report.ood.loss``, ``pretrain.beta_star`` is
    ``report.pretrain.beta_star`` (dicts, ``parameters`` and ``run``, by key). One
    block differs: the JSON's ``forgetting`` is ``{"F", "per_feature", "curve"}``, which
    are ``report.F``, the list ``report.forgetting`` (``per_feature[i]`` is
    ``report.forgetting[i]``, its keys attributes) and ``report.forgetting_curve()``.

    Example
    -------
    >>> import oodcalc as oc
    >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    >>> report.ood.loss == report.to_dict()["ood"]["loss"]
    True
    >>> report.pretrain.T1, report.finetune.T2
    (357, 360)
    >>> [(f.k, f.regime, f.trend) for f in report.forgetting]
    [(1, 'backward-transfer', 'falling'), (2, 'forgetting', 'rising')]
    >>> sorted(report.to_dict())          # the JSON of ``oodcalc predict --json``
    ['finetune', 'forgetting', 'ood', 'parameters', 'pretrain', 'run', 'source', 'warnings']
    """

    source: str
    parameters: dict[str, Any]
    pretrain: Pretrain
    ood: OOD
    finetune: Finetune
    forgetting: list[FeatureForgetting]
    trajectories: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: What the user should know about how the numbers came about (e.g. a step size too
    #: coarse to resolve pretraining); the CLI prints each on stderr.
    warnings: list[str] = field(default_factory=list)
    #: How the numbers were computed, beside what was asked (``parameters``): with
    #: ``parameters.max_steps = "auto"`` the caps follow the step estimate; rerunning
    #: with ``parameters`` gives the same numbers.
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def F(self) -> float:
        """Forgetting ``F = L^(tr)(after) − L^(tr)(before) = Σ_k F_k`` (> 0: forgetting).

        Example
        -------
        >>> import oodcalc as oc
        >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
        >>> f"{report.F:+.3e}", [f"{f.F_k:+.3e}" for f in report.forgetting]
        ('+1.499e-04', ['-8.635e-04', '+1.013e-03'])
        """
        return float(sum(f.F_k for f in self.forgetting))

    def forgetting_curve(self) -> dict[str, np.ndarray] | None:
        """``F_k`` and ``F`` along fine-tuning: ``{"steps": (T,), "F_k": (T, K), "F": (T,)}``
        at the kept steps (every step when they fit, evenly strided snapshots otherwise;
        the last is ``T2``), from ``trajectories["finetune_source_loss"]``; None without it.

        Example
        -------
        >>> import oodcalc as oc
        >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
        >>> curve = report.forgetting_curve()
        >>> curve["F_k"].shape, int(curve["steps"][-1])      # T2 = 360 steps, K = 2
        ((361, 2), 360)
        >>> bool(abs(curve["F"][-1] - report.F) < 1e-12)
        True
        """
        loss = self.trajectories.get("finetune_source_loss")
        if loss is None:
            return None
        loss = np.asarray(loss)
        steps = self.trajectories.get("finetune_steps")
        steps = np.arange(len(loss)) if steps is None else np.asarray(steps)
        F_k = loss - loss[0]
        return {"steps": steps, "F_k": F_k, "F": F_k.sum(axis=1)}

    def __str__(self) -> str:
        """A plain-text summary within 80 columns (T1, OOD loss, T2, F_k with verdicts, F):
        what ``oodcalc predict`` prints.

        Example
        -------
        >>> import oodcalc as oc
        >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
        >>> print(str(report).splitlines()[2])
        1 · Pretraining on V: T1 = 357 (α = 1.0994, threshold α* = 1.0986)
        >>> max(len(line) for line in str(report).splitlines()) <= 80
        True
        """
        from .display import to_text
        return to_text(self)

    def __repr__(self) -> str:
        from .display import one_line
        return one_line(self)

    def _repr_markdown_(self) -> str:
        from .display import to_markdown
        return to_markdown(self)

    def _repr_html_(self) -> str:
        from .display import to_html
        return to_html(self)

    def to_dict(self, full: bool | None = None) -> dict[str, Any]:
        """The JSON form (``oodcalc predict --json``; the report guide in the
        documentation describes every key). ``full``: every K × K matrix in full (default:
        only up to ``K = FULL_MATRIX_K``; above it each is a summary, named under
        ``matrices``, and :meth:`arrays` holds it in full).

        Example
        -------
        >>> import oodcalc as oc
        >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
        >>> data = report.to_dict()
        >>> list(data)
        ['source', 'parameters', 'pretrain', 'ood', 'finetune', 'forgetting', 'warnings', 'run']
        >>> data["finetune"]["T2"] == report.finetune.T2 == 360
        True
        """
        tree = self._tree()
        K = self.pretrain.z.shape[-1]
        if full is None:
            full = K <= FULL_MATRIX_K
        if not full:
            summarised = []
            for path, matrix in _matrices(tree, K):
                _put(tree, path, matrix_summary(matrix))
                summarised.append(".".join(path))
            tree["matrices"] = {"full": False, "summarised": summarised,
                                "in_full": "Report.arrays(), or oodcalc predict --arrays "
                                           "FILE.npz (keys: these names)"}
        return jsonable(tree)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every K × K matrix of :meth:`to_dict` (keyed by its path there, e.g.
        ``"pretrain.z"``, ``"ood.beta"``) and every trajectory (``"trajectories.NAME"``),
        in full: what ``oodcalc predict --arrays FILE.npz`` writes.

        Example
        -------
        >>> import oodcalc as oc
        >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
        >>> arrays = report.arrays()
        >>> arrays["pretrain.z"].shape, "ood.beta" in arrays
        ((2, 2), True)
        """
        K = self.pretrain.z.shape[-1]
        out = {".".join(path): np.asarray(m, dtype=np.float64)
               for path, m in _matrices(self._tree(), K)}
        out |= {f"trajectories.{name}": np.asarray(value)
                for name, value in self.trajectories.items()}
        return out

    def _curve_json(self) -> dict[str, Any] | None:
        """The forgetting curve for the JSON: at most ``CURVE_POINTS`` of the kept steps
        (evenly spaced, the first and last always), ``F_k`` only up to
        ``FULL_MATRIX_K`` features (``arrays()`` has every one)."""
        curve = self.forgetting_curve()
        if curve is None:
            return None
        n = len(curve["steps"])
        keep = np.unique(np.linspace(0, n - 1, min(n, CURVE_POINTS)).round().astype(int))
        out = {"steps": curve["steps"][keep], "F": curve["F"][keep]}
        if curve["F_k"].shape[1] <= FULL_MATRIX_K:
            out["F_k"] = curve["F_k"][keep]
        return out

    def _tree(self) -> dict[str, Any]:
        """The JSON form before ``jsonable``, its dicts fresh copies (safe to edit)."""
        per_feature = [{"k": f.k, "regime": f.regime, "condition": f.condition,
                        "F_k": f.F_k, "loss_before": f.loss_before,
                        "loss_after": f.loss_after, "trend": f.trend,
                        "theorem_holds": f.theorem_holds, "first_step": f.first_step,
                        "initial_direction": f.initial_direction, "D_k": f.D_k,
                        "D_k_direction": f.D_k_direction, "D_k_agrees": f.D_k_agrees}
                       for f in self.forgetting]
        return _copy_dicts({
            "source": self.source,
            "parameters": self.parameters,
            "pretrain": self.pretrain.to_dict(),
            "ood": self.ood.to_dict(),
            "finetune": self.finetune.to_dict(),
            "forgetting": {"F": self.F, "per_feature": per_feature,
                           **({"curve": curve} if (curve := self._curve_json()) else {})},
            "warnings": list(self.warnings),
            "run": self.run,
        })


def _copy_dicts(tree: Any) -> Any:
    """``tree`` with every dict copied (arrays and other leaves shared)."""
    return ({key: _copy_dicts(value) for key, value in tree.items()}
            if isinstance(tree, dict) else tree)


#: ``Report.to_dict`` gives K × K matrices in full up to this K; above it, a summary of
#: each (a K = 1024 report would otherwise print about 200 MB of JSON).
FULL_MATRIX_K = 16
#: Points of the forgetting curve in the JSON (the API and ``--arrays`` keep every one).
CURVE_POINTS = 1000


def matrix_summary(matrix: Any) -> dict[str, Any]:
    """What the JSON keeps of a large K × K matrix: min, max and mean of its diagonal and
    of its off-diagonal entries (NaN entries, e.g. β's diagonal, left out)."""
    m = np.asarray(matrix, dtype=np.float64)
    K = m.shape[0]
    on = np.eye(K, dtype=bool)

    def stats(values: np.ndarray) -> dict[str, float] | None:
        values = values[np.isfinite(values)]
        return ({"min": values.min(), "max": values.max(), "mean": values.mean()}
                if values.size else None)

    return {"shape": [K, K], "diagonal": stats(m[on]), "off_diagonal": stats(m[~on])}


def _is_matrix(value: Any, K: int) -> bool:
    if isinstance(value, np.ndarray):
        return value.shape == (K, K)
    return (isinstance(value, list) and len(value) == K and K > 0
            and all(isinstance(row, list) and len(row) == K for row in value))


def _matrices(tree: dict[str, Any], K: int, path: tuple[str, ...] = ()):
    """``(path, matrix)`` for every K × K matrix in a nested dict."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _matrices(value, K, (*path, key))
        elif _is_matrix(value, K):
            yield (*path, key), value


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value
