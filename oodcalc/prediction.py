"""What the theory predicts for one setting: closed forms plus the exact population
dynamics, gathered into a :class:`~oodcalc.report.Report`.

The dynamics use the structure of the problem (``oodcalc.finetune.dynamics``): pretraining from
``Q = 0`` is the scalar recurrence of the symmetric ray, fine-tuning is the same
recurrence when ``M = cI`` (rotations, equal γ, orthogonal subspaces) and the K×K descent
otherwise. Memory does not grow with K² × steps: the per-feature trend is computed from
every step's loss as the run goes, and the trajectories kept in the report are every step
when they fit :data:`TRAJECTORY_BYTES`, evenly strided snapshots otherwise (their step
numbers are in ``trajectories["pretrain_steps"]`` and ``["finetune_steps"]``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import estimates, limits, theory
from .finetune import compiled, engine, gram, terms
from .finetune.dynamics import Descent, descend, descend_ray, first_step_change, ood_start, \
    ray_errors, ray_logits, require_converged, source_logits
from .errors import ComputationError, param
from .estimates import ENGINES, SECONDS_PER_UPDATE, TRAJECTORY_BYTES  # noqa: F401
from .model import attention, conditional_errors, errors_from_attention, is_diagonal
from .report import OOD, FeatureForgetting, Finetune, LazyArrays, Pretrain, Report, TREND_TOL, \
    directions, off_diagonal
from .setting import STALL_STEP, Setting, check_setting

from .limits import AUTO_STEP_LIMIT, WORK_LIMIT, phase_cap  # noqa: F401,E402


__all__ = [
    "FAST_HINT_SECONDS", "KERNEL_MAX_WORK", "KERNEL_MIN_WORK", "PROGRESS_WORK",
    "SHORT_PRETRAINING", "expected_seconds", "predict", "pretrain_logits",
]


def pretrain_logits(K: int, eps: float, eta: float, max_steps: int,
                    record: bool = False) -> Descent:
    """Pretraining from Q = 0 on any orthonormal V: the logits do not depend on V.

    Runs the symmetric ray's scalar recurrence (T1 identical to the K×K descent, logits to
    rounding); ``record`` keeps every step, ``trajectory`` ``(T1+1, 1, K, K)``.
    """
    expected = estimates.pretrain_steps(K, eps, eta)
    ray = descend_ray(0.0, 0.0, K, eta, eps, max_steps, stride=1 if record else 0,
                      expected_steps=expected)
    trajectory = _ray_trajectory(K, ray.path)[:, None] if record else None
    run = Descent(ray.logits(K)[None], np.array([ray.steps]), np.array([ray.converged]),
                  trajectory)
    require_converged(run, "pretraining", lambda b: f"K = {K}, eps = {eps:g}, eta = {eta:g}")
    return run


def _ray_trajectory(K: int, path: np.ndarray) -> np.ndarray:
    return ray_logits(K, path[:, 0], path[:, 1])


def _stride(K: int, expected: float, share: float) -> int:
    """Record every step if ``expected`` steps of K×K fit ``share`` of the budget."""
    budget = TRAJECTORY_BYTES * share
    return max(1, math.ceil(estimates.trajectory_bytes(K, int(expected)) / budget))


class _Trend:
    """Per-feature loss followed step by step: first and last value, rises and falls
    (``report.trend``'s rule without keeping the series)."""

    def __init__(self, K: int) -> None:
        self.first = self.prev = None
        self.rises = np.zeros(K, dtype=bool)
        self.falls = np.zeros(K, dtype=bool)

    def add(self, loss: np.ndarray) -> None:
        if self.prev is None:
            self.first = loss
        else:
            change = loss - self.prev
            self.rises |= change > TREND_TOL
            self.falls |= change < -TREND_TOL
        self.prev = loss

    def names(self) -> list[str]:
        return _trend_names(self.rises, self.falls)


def _trend_names(rises, falls) -> list[str]:
    return ["non-monotone" if r and f else "rising" if r else "falling" if f else "flat"
            for r, f in zip(rises, falls)]


#: Progress: ``progress(phase, steps done, steps expected)``, about every this many
#: logit updates (and at the start and end of each phase).
PROGRESS_WORK = 2e7
Progress = Callable[[str, int, float], None]


def _report(progress: Progress | None, phase: str, done: int, expected: float) -> None:
    if progress is not None:
        progress(phase, int(done), float(expected))


class _Snapshots:
    """Every ``stride``-th item; when more than ``limit`` are held, keep every other one
    and double the stride (an estimate that was short cannot blow the budget)."""

    def __init__(self, stride: int, limit: int) -> None:
        self.stride, self.limit = stride, max(limit, 2)
        self.steps: list[int] = []
        self.items: list[tuple] = []

    def offer(self, t: int, make: Callable[[], tuple]) -> None:
        if t % self.stride == 0:
            self.steps.append(t)
            self.items.append(make())
            if len(self.items) > self.limit:
                self.steps, self.items = self.steps[::2], self.items[::2]
                self.stride *= 2

    def close(self, t: int, make: Callable[[], tuple]) -> None:
        if not self.steps or self.steps[-1] != t:
            self.steps.append(t)
            self.items.append(make())


def predict(setting: Setting, progress: Progress | None = None) -> Report:
    """What the theory predicts for one setting: closed forms and the exact dynamics.

    Pretrains on the training features V from ``Q = 0`` until the stopping rule holds
    (``T1``), evaluates ``Q^(T1)`` on the OOD features U, fine-tunes on U until the rule
    holds again (``T2``) and measures how the loss on every source feature moved. The
    gradient descent is carried out exactly in the ``K × K`` logits (equivalent to GD on
    the full ``Q`` for orthonormal features); beside it sit the paper's closed forms: the
    threshold ``α*``, the claim-5 OOD weights, the corollary's failure cases, the
    step-size bound and, for parallel shifts, the forgetting regime of every feature.

    Parameters
    ----------
    setting : Setting
        A geometry (``parallel_shift``, ``rotation``, ``mean_query``, ``orthogonal``,
        ``from_arrays``, ``from_files``) and a :class:`Protocol` (ε, η, η_ft, step cap).
    progress : callable, optional
        ``progress(phase, done, expected)`` is told how many steps of ``"pretraining"``
        / ``"fine-tuning"`` are done against the estimate (which a run may exceed); it
        never changes the result.

    Returns
    -------
    Report
        Every phase's numbers, with the parameters that produced them (and, in
        ``report.run``, each phase's step cap and engine); ``report.F`` is the
        forgetting, ``report.to_dict()`` the JSON of ``oodcalc predict --json``.

    Raises
    ------
    InputError
        Before any work, if the run would not fit the memory cap
        (:func:`oodcalc.limits.check_predict`).
    ComputationError
        Before any work, if a phase is estimated far beyond ``protocol.max_steps`` or
        the K×K fine-tuning beyond ``limits.WORK_LIMIT`` logit updates; after, if a phase
        does not meet the stopping rule within ``protocol.max_steps``.

    Example
    -------
    >>> import oodcalc as oc
    >>> report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    >>> report.pretrain.T1, round(report.pretrain.alpha_star, 4)
    (357, 1.0986)
    >>> [f.regime for f in report.forgetting]
    ['backward-transfer', 'forgetting']
    >>> f"{report.F:+.3g}"                  # F > 0: the source loss rose overall
    '+0.00015'
    """
    geo, proto, K = check_setting(setting).geometry, setting.protocol, setting.K
    # Refuse what is out of reach first: before M, the report's description or any array
    # (for a constructed geometry the diagonal of M is known without forming it).
    if geo.orthonormal:
        limits.check_predict(K, geo.d, proto, diagonal=geo.known_diagonal,
                             M=geo.M if geo.known_diagonal is None else None)
    else:                 # overlapping features: the fine-tuning's cost is probed later
        limits.check_predict(K, geo.d, proto)
    params = setting.describe()
    M = geo.M
    warnings: list[str] = []
    try:
        if not geo.orthonormal:
            return _predict_gram(geo, proto, K, params, warnings, progress)
        return _predict(setting, geo, proto, K, params, M, warnings, progress)
    except MemoryError:
        need = estimates.dynamics_bytes(K)
        raise ComputationError(
            f"out of memory for K = {K} (the K×K dynamics need about {need / 2**20:,.0f} "
            f"MiB plus the report); lower K") from None


#: ``expected_seconds`` suggests the ``fast`` extra only for a run estimated to take at least
#: this long (a tenth of a second saved is not worth an install).
FAST_HINT_SECONDS = 10.0
#: Pretraining estimated to take at most this many steps is run by :func:`expected_seconds`
#: (milliseconds) to start its fine-tuning estimate from the logits pretraining reaches.
SHORT_PRETRAINING = 10_000


def expected_seconds(setting: Setting) -> tuple[float, str]:
    """How long :func:`predict` will take on ``setting``, to the order of magnitude, before
    it runs (milliseconds to compute): ``(seconds, what the time goes to)``, e.g.
    ``(10800.0, "fine-tuning ≈ 1.1e7 steps on 200×200 logits by the K×K descent
    (NumPy)")``. From the cost model (:mod:`oodcalc.estimates`) on this machine's engines;
    a run that :func:`predict` refuses before it starts raises the same error here, and a
    fine-tuning estimated past its step cap a ``ComputationError`` (predict's, after
    pretraining, names the cause).

    Parameters
    ----------
    setting : Setting
        What :func:`predict` would run.

    Returns
    -------
    (float, str)
        The estimated seconds, and in words the phase that takes them (its steps and
        engine; a hint to install the ``fast`` extra where that saves at least
        ``FAST_HINT_SECONDS``).

    Example
    -------
    >>> import oodcalc as oc
    >>> seconds, words = oc.expected_seconds(oc.Setting(oc.parallel_shift([1, -0.9])))
    >>> seconds < 10, words
    (True, 'fine-tuning ≈ 361 steps on 2×2 logits by the K×K descent (NumPy)')
    """
    geo, proto, K = check_setting(setting).geometry, setting.protocol, setting.K
    if not geo.orthonormal:
        return _gram_expected_seconds(geo, proto, K)
    limits.check_predict(K, geo.d, proto, diagonal=geo.known_diagonal,
                         M=geo.M if geo.known_diagonal is None else None)
    pretrain = estimates.pretrain_steps(K, proto.eps, proto.eta)
    alpha = None                  # α*, unless pretraining is short enough to run: a coarse
    if pretrain <= SHORT_PRETRAINING:  # step passes α* by far, and fine-tuning starts there
        alpha = float(descend_ray(0.0, 0.0, K, proto.eta, proto.eps, proto.max_steps,
                                  expected_steps=pretrain).logits(K)[0, 0])
    plan = estimates.finetune_plan(
        K, proto, diagonal=geo.known_diagonal,
        M=geo.M if geo.known_diagonal is None else None,
        compiled_available=compiled.available(), alpha=alpha)
    if plan is not None and proto.ft_steps is None:     # refused as predict refuses it
        phase_cap(proto.max_steps, proto.auto_steps, plan.log_steps, "fine-tuning",
                  f"K = {K}, eps_ft = {proto.eps_ft:g}, eta_ft = {proto.eta_ft:g}",
                  f"{param('eta', 'lower')} or {param('eps_ft', 'raise')}")
    seconds = estimates.predict_seconds(K, proto, plan, compiled.available())
    if proto.interventions and proto.ft_steps is None and alpha is not None:
        # the terms engine: its steps from a probe from where pretraining ends
        z1 = descend_ray(0.0, 0.0, K, proto.eta, proto.eps, proto.max_steps,
                         expected_steps=pretrain).logits(K)
        z_ood0 = ood_start(z1, geo.M)
        recipe = terms.recipe(proto, geo.M, z_ood0, z1)
        cap = proto.max_steps if plan is None or not proto.auto_steps else max(
            proto.max_steps, int(2 * estimates.exp_steps(plan.log_steps)) + 1000)
        log_steps, probe = _terms_estimate(z1, z_ood0, recipe, K, proto, cap)
        limits.check_terms_steps(K, proto, cap, log_steps, probe)
        seconds = estimates.predict_seconds(K, proto, None) / 2 + \
            estimates.terms_seconds(K, log_steps)
        return seconds, (f"fine-tuning with interventions ≈ "
                         f"{estimates.format_steps(log_steps)} steps on {K}×{K} logits by "
                         f"the terms engine, {probe}")
    if plan is None:
        return seconds, f"pretraining ≈ {pretrain:,.0f} steps on the symmetric ray"
    words = (f"fine-tuning ≈ {estimates.format_steps(plan.log_steps)} steps on {K}×{K} "
             f"logits by the {ENGINES[plan.engine]}")
    if plan.faster and seconds >= FAST_HINT_SECONDS:
        words += '; pip install "oodcalc[fast]" runs it about 10× faster'
    return seconds, words


def _gram_expected_seconds(geo, proto, K: int) -> tuple[float, str]:
    """:func:`expected_seconds` for overlapping features: both phases by the Gram
    dynamics, their steps estimated as the orthonormal ones at ``ε/c``, ``η c³``
    (:func:`oodcalc.estimates.gram_scale`), fine-tuning from the closed-form T1 logits
    where they are known (equal overlaps), else from the logits a pretraining reaches."""
    limits.check_predict(K, geo.d, proto)
    c_V, c_U = estimates.gram_scale(geo.G_V), estimates.gram_scale(geo.G_U)
    limits.pretrain_cap(K, proto, overlap=c_V)
    log_t1 = estimates.log_steps_from_margin(K, proto.eps / c_V, proto.eta * c_V**3, 0.0)
    a_star = theory.gram_alpha_star(geo.G_V, proto.eps)
    if proto.ft_steps is not None:
        log_t2 = math.log(max(proto.ft_steps, 1))
    else:
        z1 = (theory.symmetric_logits(K, a_star) if a_star is not None else
              gram.pretrain(geo.G_V, proto.eta, proto.eps, proto.max_steps).z[0])
        z_ood0 = gram.ood_start(z1, geo.G_V, geo.M)
        log_t2 = float(estimates.column_log_steps(z_ood0, proto.eps_ft / c_U,
                                                  proto.eta_ft * c_U**3).max())
    seconds = estimates.terms_seconds(K, log_t1) + estimates.terms_seconds(K, log_t2)
    return seconds, (f"pretraining ≈ {estimates.format_steps(log_t1)} and fine-tuning ≈ "
                     f"{estimates.format_steps(log_t2)} steps on {K}×{K} logits of "
                     "overlapping features (Gram dynamics, NumPy)")


def _predict(setting, geo, proto, K, params, M, warnings, progress) -> Report:
    # 1. Pretraining: the ray's scalar recurrence.
    a_star = theory.alpha_star(K, proto.eps)
    log_t1 = estimates.log_steps_from_margin(K, proto.eps, proto.eta, 0.0)
    # predict() has refused an unreachable pretraining or fine-tuning (the latter from the
    # OOD logits at α*) before it started; the checks below, on the exact Z^(T1), decide.
    cap1 = limits.pretrain_cap(K, proto)
    t1_expected = math.exp(min(log_t1, 700.0)) if log_t1 > -math.inf else 0.0
    _report(progress, "pretraining", 0, t1_expected)
    ray = descend_ray(0.0, 0.0, K, proto.eta, proto.eps, cap1,
                      stride=_stride(K, t1_expected, 1 / 3), expected_steps=t1_expected)
    _report(progress, "pretraining", ray.steps, ray.steps)
    if not ray.converged:
        raise ComputationError(
            f"pretraining did not meet the stopping rule (every e_k <= eps) within "
            f"max_steps = {cap1} for K = {K}, eps = {proto.eps:g}, eta = {proto.eta:g}; "
            f"{param('max_steps', 'raise')}, {param('eps', 'raise')} or change the step "
            "size")
    z1 = ray.logits(K)
    pretrain = Pretrain(T1=ray.steps, z=z1, error=np.full(K, ray_errors(K, ray.own, ray.other)),
                        alpha_star=a_star)
    overshoot = pretrain.alpha - a_star
    one_step = estimates.step_at_threshold(K, proto.eps, proto.eta)
    if overshoot > one_step and ray.steps > 0:
        warnings.append(
            f"--eta {proto.eta:g}: pretraining reaches α = {pretrain.alpha:.5g} at T1 = "
            f"{ray.steps}, past α* = {a_star:.5g} by {overshoot:.3g}, more than one GD "
            f"step at α* ({one_step:.3g}): the step is too coarse to resolve the approach, "
            f"and T1, α and everything after depend on it; use --eta <= "
            f"{estimates.resolving_eta(K, proto.eps):.3g} (10 steps or more to α*)")

    # 2. OOD logits at T1 (claim 5), from the exact Z1.
    z_ood0 = ood_start(z1, M)
    closed = theory.ood_logits(M, a_star)
    attention0 = attention(z_ood0)
    ood = OOD(z=z_ood0, attention=attention0, error=errors_from_attention(attention0),
              corollary=theory.corollary_cases(M),
              at_alpha_star={"alpha": np.diag(closed), "beta": off_diagonal(closed),
                             "error": conditional_errors(closed)})

    # 3. Fine-tuning on U, with the source view followed at every step: until the rule
    # holds at eps_ft, or for exactly ft_steps steps (the rule never holds at NEVER).
    if proto.ft_steps is not None:
        cap2 = proto.ft_steps
        log_t2 = math.log(cap2)
    else:
        column_logs = estimates.column_log_steps(z_ood0, proto.eps_ft, proto.eta_ft)
        worst = int(np.argmax(column_logs))
        log_t2 = float(column_logs[worst])
        cause = ""
        if warnings:
            cause = (f", because pretraining overshot α* (--eta {proto.eta:g}; "
                     f"{estimates.resolving_eta(K, proto.eps):.3g} or less resolves it)")
        margin = float(estimates.effective_margins(z_ood0)[worst])
        eps_name = "eps" if proto.eps_ft == proto.eps else "eps_ft"
        cap2 = phase_cap(proto.max_steps, proto.auto_steps, log_t2, "fine-tuning",
                         f"K = {K}, {eps_name} = {proto.eps_ft:g}, eta_ft = "
                         f"{proto.eta_ft:g}; the slowest OOD feature u{worst + 1} starts at "
                         f"margin {margin:.4g}{cause}",
                         param("eta", "lower") if cause
                         else f"raise {param(eps_name)} or {param('eta_ft')}")
    t2_expected = math.exp(min(log_t2, 700.0)) if log_t2 > -math.inf else 0.0
    path = _finetune_path(M, K, proto, log_t2) if not proto.interventions else "terms"

    if path == "terms":
        run = _finetune_terms(terms.recipe(proto, M, z_ood0, z1), z1, z_ood0, K, proto,
                              cap2, t2_expected, progress)
    elif path == "ray":
        run = _finetune_ray(z1, z_ood0, M, K, proto, cap2, t2_expected, progress)
    elif path == "compiled":
        run = _finetune_diagonal(z1, z_ood0, np.diag(M).copy(), K, proto, cap2,
                                 t2_expected, progress)
    else:
        run = _finetune_columns(z1, z_ood0, M, K, proto, cap2, t2_expected, progress)
    T2, z_ood, z_source = run.T2, run.z_ood, run.z_source
    if run.note is not None:
        warnings.append(run.note)
    trend_names, loss_before, loss_after = run.trend, run.loss_before, run.loss_after

    # The closed forms of claims 8 and 9 describe plain fine-tuning: not shown beside a
    # run with interventions.
    plain = not proto.interventions
    bounds = theory.step_size_bounds(z_ood0) if plain else None
    finetune = Finetune(T2=T2, z_ood=z_ood, z_source=z_source,
                        error_ood=conditional_errors(z_ood),
                        step_size_bound=float(bounds.min()) if plain else None,
                        step_size_bounds=bounds, eta_ft=proto.eta_ft, reached=run.reached)
    gamma = geo.gamma if plain else None
    regimes = theory.forgetting_regimes(gamma) if gamma is not None else [None] * K
    D = D_directions = [None] * K
    if gamma is not None:                      # claim 8c: one set of shares for both
        D, scale = theory.first_step_terms(gamma, z_ood0)
        D_directions = theory.directions_from_D(D, scale).tolist()
    # the exact first step (none when the rule held at T1: T2 = 0, nothing moved)
    if T2 == 0:
        first = np.zeros(K)
    elif proto.interventions:
        first = run.first_step
    else:
        first = first_step_change(z1[None], M[None], proto.eta_ft)[0] / K
    forgetting = _feature_rows(regimes, loss_before, loss_after, trend_names, first, D,
                               D_directions)

    trajectories = LazyArrays({"pretrain": lambda: _ray_trajectory(K, ray.path),
                               "pretrain_steps": ray.path_steps, **run.paths,
                               "finetune_steps": run.steps})
    return _theory_report(params, pretrain, ood, finetune, forgetting, trajectories, warnings,
                          (cap1, cap2), (ray.engine, run.engine))


def _predict_gram(geo, proto, K, params, warnings, progress) -> Report:
    """:func:`predict` for overlapping features (Gram matrices ``G_V``, ``G_U`` not the
    identity): pretraining by :func:`oodcalc.finetune.gram.pretrain`, fine-tuning (plain
    or with interventions) by the terms engine with the Grams, both exact population GD
    in the logits. The paper's verdicts read the γ of the construction (``shift``); the
    first-order criterion beside them is the overlap-aware ``C_k``
    (:func:`oodcalc.theory.overlap_first_order`)."""
    G_V, G_U, M = geo.G_V, geo.G_U, geo.M
    c_V, c_U = estimates.gram_scale(G_V), estimates.gram_scale(G_U)
    cap1 = limits.pretrain_cap(K, proto, overlap=c_V)
    t1_expected = estimates.pretrain_steps(K, proto.eps / c_V, proto.eta * c_V**3)
    _report(progress, "pretraining", 0, t1_expected)
    pre = gram.pretrain(G_V, proto.eta, proto.eps, cap1)
    T1 = int(pre.steps[0])
    _report(progress, "pretraining", T1, T1)
    if not pre.converged[0]:
        raise ComputationError(
            f"pretraining did not meet the stopping rule (every e_k <= eps) within "
            f"max_steps = {cap1} for K = {K}, eps = {proto.eps:g}, eta = {proto.eta:g} on "
            f"overlapping features; {param('max_steps', 'raise')} or {param('eps', 'raise')}")
    z1 = pre.z[0]
    pretrain = Pretrain(T1=T1, z=z1, error=terms.column_errors(z1, G_V),
                        alpha_star=theory.gram_alpha_star(G_V, proto.eps))

    z_ood0 = gram.ood_start(z1, G_V, M)
    ood = OOD(z=z_ood0, attention=attention(z_ood0), error=terms.column_errors(z_ood0, G_U),
              corollary=[None] * K)

    if proto.ft_steps is not None:
        cap2, log_t2 = proto.ft_steps, math.log(max(proto.ft_steps, 1))
    else:
        log_t2 = float(estimates.column_log_steps(z_ood0, proto.eps_ft / c_U,
                                                  proto.eta_ft * c_U**3).max())
        cap2 = phase_cap(proto.max_steps, proto.auto_steps, log_t2, "fine-tuning",
                         f"K = {K}, eps_ft = {proto.eps_ft:g}, eta_ft = {proto.eta_ft:g} "
                         f"on overlapping features", f"raise {param('eps_ft')} or "
                         f"{param('eta_ft')}")
    recipe = terms.recipe(proto, M, z_ood0, z1, G_V, G_U)
    run = _finetune_terms(recipe, z1, z_ood0, K, proto, cap2,
                          estimates.exp_steps(log_t2), progress)
    if run.note is not None:
        warnings.append(run.note)
    finetune = Finetune(T2=run.T2, z_ood=run.z_ood, z_source=run.z_source,
                        error_ood=terms.column_errors(run.z_ood, G_U), eta_ft=proto.eta_ft,
                        reached=run.reached if proto.interventions else None)
    plain = not proto.interventions
    shift = geo.shift if plain else None
    regimes = theory.forgetting_regimes(shift) if shift is not None else [None] * K
    C = theory.overlap_first_order(z1, G_V, z_ood0, G_U, M) if plain else [None] * K
    C_directions = directions(np.asarray(C, dtype=np.float64)) if plain else [None] * K
    first = run.first_step if run.T2 > 0 else np.zeros(K)
    forgetting = _feature_rows(regimes, run.loss_before, run.loss_after, run.trend, first, C,
                               C_directions)
    trajectories = {"pretrain": z1[None], "pretrain_steps": np.array([T1]), **run.paths,
                    "finetune_steps": run.steps}
    return _theory_report(params, pretrain, ood, finetune, forgetting, trajectories, warnings,
                          (cap1, cap2), (gram.ENGINE, run.engine))


def _theory_report(params, pretrain, ood, finetune, forgetting, trajectories, warnings,
                   caps: tuple[int, int], engines: tuple[str, str]) -> Report:
    """The theory's report, with each phase's step cap and engine under ``run``."""
    how = {"max_steps": {"pretrain": caps[0], "finetune": caps[1]},
           "engine": {"pretrain": engines[0], "finetune": engines[1]}}
    return Report(source="theory", parameters=params, pretrain=pretrain, ood=ood,
                  finetune=finetune, forgetting=forgetting, trajectories=trajectories,
                  warnings=warnings, run=how)


def _feature_rows(regimes, loss_before, loss_after, trend, first, D, D_directions
                  ) -> list[FeatureForgetting]:
    """The report's per-feature rows: the losses before and after, the trend, the
    paper's verdict (``regimes``, None where it says nothing), the exact first step and
    the first-order criterion ``D`` (None where there is none)."""
    first_directions = directions(first)
    return [FeatureForgetting(k=k + 1, F_k=float(loss_after[k] - loss_before[k]),
                              loss_before=float(loss_before[k]),
                              loss_after=float(loss_after[k]), trend=trend[k],
                              regime=r.regime if r else None,
                              condition=r.condition if r else None,
                              first_step=float(first[k]),
                              initial_direction=first_directions[k],
                              D_k=None if D[k] is None else float(D[k]),
                              D_k_direction=D_directions[k])
            for k, r in enumerate(regimes)]


def _finetune_path(M: np.ndarray, K: int, proto, log_t2: float) -> str:
    """The fine-tuning engine for ``log_t2`` (log of the estimated steps); raises when a
    K×K fine-tuning is out of reach (more than ``WORK_LIMIT`` logit updates)."""
    steps = estimates.exp_steps(log_t2)
    pays = is_diagonal(M) and estimates.compiled_pays(K, steps)
    path = "ray" if _on_ray(M) else \
        "compiled" if pays and compiled.finetune_diagonal() is not None else "numpy"
    if path != "ray":
        limits.check_finetune_work(K, proto, log_t2, path,
                                   faster=path == "numpy" and pays)
    return path


def _on_ray(M: np.ndarray) -> bool:
    """``M = cI``: the OOD logits ``c² Z1`` stay on the symmetric ray while fine-tuning."""
    c = M[0, 0]
    return bool(np.array_equal(M, c * np.eye(M.shape[0])))


@dataclass(frozen=True)
class _Finetuned:
    """One fine-tuning path's outcome: T2, final logits, per-feature source losses and
    trends, the (possibly strided) trajectories and which engine ran."""

    T2: int
    z_ood: np.ndarray
    z_source: np.ndarray
    trend: list[str]
    loss_before: np.ndarray
    loss_after: np.ndarray
    paths: dict[str, np.ndarray]
    steps: np.ndarray
    engine: str
    reached: bool | None = None          # interventions: whether the rule held at T2
    first_step: np.ndarray | None = None  # interventions: the source losses' first change
    note: str | None = None              # interventions: why the rule does not hold


def _finetune_terms(recipe, z1, z_ood0, K, proto, cap, expected, progress) -> _Finetuned:
    """Fine-tuning with interventions or overlapping features: the terms engine on both
    logits (:mod:`oodcalc.finetune`), the source losses read off ``z_V`` at every step."""
    fixed = proto.ft_steps is not None
    if not fixed:                      # no closed form for its steps: a probe estimates them
        log_steps, words = _terms_estimate(z1, z_ood0, recipe, K, proto, cap)
        limits.check_terms_steps(K, proto, cap, log_steps, words)
        expected = min(float(cap), estimates.exp_steps(log_steps))
    trend = _Trend(K)
    snaps = _snapshot_store(K, expected)
    last, losses = {}, []
    every = max(1, int(PROGRESS_WORK // (K * K)))
    _report(progress, "fine-tuning", 0, expected)

    def observe(t: int, z_U: np.ndarray, z_V: np.ndarray) -> None:
        z_U, z_V = z_U[0].copy(), z_V[0].copy()
        loss = terms.column_errors(z_V, recipe.G_V) / K
        if t < 2:
            losses.append(loss)
        trend.add(loss)
        last["t"], last["z"], last["source"], last["loss"] = t, z_U, z_V, loss
        snaps.offer(t, lambda: (z_U, z_V, loss))
        if t % every == 0:
            _report(progress, "fine-tuning", t, expected)

    run = engine.finetune(z_ood0[None], z1[None], recipe, proto.eta_ft, proto.eps_ft, cap,
                            fixed=fixed, observe=observe)
    reached = bool(run.reached[0])
    if not (reached or fixed or run.blocked[0] or run.stalled[0]):
        raise ComputationError(_stuck(cap, K, proto, "terms"))
    T2 = int(run.steps[0])
    _report(progress, "fine-tuning", T2, T2)
    snaps.close(T2, lambda: (last["z"], last["source"], last["loss"]))
    out = _finetuned(snaps, T2, run.z_U[0], run.z_V[0], trend.names(), trend.first,
                     trend.prev, engine.ENGINE)
    first = losses[1] - losses[0] if len(losses) > 1 else np.zeros(K)
    return dataclasses.replace(out, reached=reached, first_step=first,
                               note=None if reached else _not_reached(run, recipe, proto,
                                                                      fixed))


def _terms_estimate(z1, z_ood0, recipe, K, proto, cap: int) -> tuple[float, str]:
    """The log of the steps the terms engine will take, from a short run extrapolated
    (:func:`oodcalc.estimates.terms_log_steps`), and what the probe saw, in words. The
    probe doubles (from :func:`~oodcalc.estimates.terms_probe_steps`, continuing where
    it stopped) while its estimate is past twice ``cap``, up to ``cap /
    TERMS_PROBE_SHARE``: an error on a plateau extrapolates far too long from the plateau
    alone (``--project both`` at K = 2: 8.6e6 from 1,000 steps; the run stops at 20,014).
    A cap whose whole run is cheap (``advise``'s arms) is not probed: the probe would cost
    about as much as it could save."""
    if estimates.terms_seconds(K, math.log(cap)) <= estimates.TERMS_PROBE_FROM_SECONDS:
        return math.log(cap), (f"at most its cap (not probed: all {cap:,} steps take under "
                               f"{estimates.TERMS_PROBE_FROM_SECONDS:g} s)")
    t = estimates.terms_probe_steps(K)
    limit = max(t, cap // estimates.TERMS_PROBE_SHARE)
    z_U, z_V, e_half, done = z_ood0, z1, None, 0
    while True:
        stopped, e_end, z_U, z_V = engine.probe(z_U, z_V, recipe, proto.eta_ft,
                                                proto.eps_ft, t - done)
        if stopped:
            return math.log(t), f"a {t:,}-step probe stopped"
        if e_half is not None:
            log_steps = estimates.terms_log_steps(t, e_half, e_end, proto.eps_ft)
            if estimates.exp_steps(log_steps) <= 2 * cap or 2 * t > limit:
                return log_steps, (f"extrapolated from a {t:,}-step probe: the largest "
                                   f"error of a feature the rule covers went from "
                                   f"{e_half:.3g} at step {t // 2:,} to {e_end:.3g}")
        e_half, done, t = e_end, t, 2 * t


def _not_reached(run, recipe, proto, fixed: bool) -> str:
    """Why the rule on U does not hold at T2, for the report's warnings."""
    e = terms.column_errors(run.z_U[0], recipe.G_U)
    above = [k for k in np.flatnonzero(recipe.covered) if e[k] > proto.eps_ft]
    where = ", ".join(f"e_{k + 1} = {e[k]:.3g}" for k in above)
    head = f"the stopping rule on U was not reached ({where} > eps_ft = {proto.eps_ft:g})"
    if fixed:
        return f"{head} after the fixed {proto.ft_steps} fine-tuning steps"
    if run.blocked[0]:
        frozen = ", ".join(f"u{k + 1}" for k in above if recipe.frozen[k])
        side = "two-sided" if proto.project == "both" else f"{proto.project}-side"
        return (f"{head}: the {side} projection leaves {frozen} no update (in "
                f"span(V)); fine-tuning stopped at T2 = {int(run.steps[0])}, when every "
                "other feature met the rule")
    return (f"{head}: fine-tuning settled at T2 = {int(run.steps[0])}, where a step moves "
            f"no logit by more than {STALL_STEP:g} (the pull toward the pretrained weights "
            "balances the fit)")


def _finetune_ray(z1, z_ood0, M, K, proto, cap, expected, progress) -> _Finetuned:
    c = float(M[0, 0])
    own0, other0 = float(z_ood0[0, 0]), float(z_ood0[1, 0])
    a1, b1 = float(z1[0, 0]), float(z1[1, 0])
    _report(progress, "fine-tuning", 0, expected)
    ray = descend_ray(own0, other0, K, proto.eta_ft, proto.finetune_stop, cap,
                      stride=_stride(K, expected, 2 / 3 / 2), expected_steps=expected,
                      source=(a1, b1, c * c))
    if not ray.converged and proto.ft_steps is None:
        raise ComputationError(_stuck(cap, K, proto, "rotation"))
    _report(progress, "fine-tuning", ray.steps, ray.steps)
    # claim 7 with M = cI: the source column moves by c² times the OOD change, on the ray
    source_ray = np.array([a1, b1]) + c * c * (ray.path - [own0, other0])
    losses = np.repeat(ray_errors(K, source_ray[:, 0], source_ray[:, 1])[:, None], K,
                       axis=1) / K
    return _Finetuned(ray.steps, ray.logits(K), ray_logits(K, *source_ray[-1]),
                      [ray.trend] * K, np.full(K, ray.loss_first), np.full(K, ray.loss_last),
                      {"finetune_ood": lambda: _ray_trajectory(K, ray.path),
                       "finetune_source": lambda: _ray_trajectory(K, source_ray),
                       "finetune_source_loss": losses}, ray.path_steps, ray.engine)


def _snapshot_store(K: int, expected: float) -> _Snapshots:
    """Fine-tuning snapshots (OOD logits, source logits, source losses) within two thirds
    of :data:`TRAJECTORY_BYTES`."""
    limit = max(2, int(TRAJECTORY_BYTES * 2 / 3 // (3 * 8 * K * K)))
    return _Snapshots(_stride(K, expected, 2 / 3 / 2), limit)


def _finetuned(snaps: _Snapshots, T2: int, z_ood, z_source, trend: list[str],
               before, after, engine: str) -> _Finetuned:
    paths = {"finetune_ood": np.stack([s[0] for s in snaps.items]),
             "finetune_source": np.stack([s[1] for s in snaps.items]),
             "finetune_source_loss": np.stack([s[2] for s in snaps.items])}
    return _Finetuned(T2, z_ood, z_source, trend, before, after, paths,
                      np.array(snaps.steps, dtype=np.int64), engine)


def _finetune_columns(z1, z_ood0, M, K, proto, cap, expected, progress) -> _Finetuned:
    """The general path: NumPy K×K descent, the source view followed at every step (or,
    for short runs, computed from the whole recorded trajectory at once)."""
    if 4 * estimates.trajectory_bytes(K, int(expected)) <= TRAJECTORY_BYTES / 3:
        return _finetune_recorded(z1, z_ood0, M, K, proto, cap, expected, progress)
    trend = _Trend(K)
    snaps = _snapshot_store(K, expected)
    last = {}
    every = max(1, int(PROGRESS_WORK // (K * K)))

    def observe(t: int, z: np.ndarray) -> None:
        z = z[0]
        source = source_logits(z1, M, z_ood0, z)
        loss = conditional_errors(source) / K
        trend.add(loss)
        last["t"], last["z"], last["source"], last["loss"] = t, z, source, loss
        snaps.offer(t, lambda: (z.copy(), source, loss))
        if t % every == 0:
            _report(progress, "fine-tuning", t, expected)

    ft = descend(z_ood0[None], proto.eta_ft, proto.finetune_stop, cap, observe=observe)
    if not ft.converged[0] and proto.ft_steps is None:
        raise ComputationError(_stuck(cap, K, proto, "K×K"))
    T2 = int(ft.steps[0])
    _report(progress, "fine-tuning", T2, T2)
    snaps.close(last["t"], lambda: (last["z"].copy(), last["source"], last["loss"]))
    z_ood = ft.z[0]
    return _finetuned(snaps, T2, z_ood, source_logits(z1, M, z_ood0, z_ood), trend.names(),
                      trend.first, trend.prev, ENGINES["numpy"])


def _finetune_recorded(z1, z_ood0, M, K, proto, cap, expected, progress) -> _Finetuned:
    """``_finetune_columns`` for short runs: one batched descent that records every step,
    then the source view of the whole trajectory at once (no work per step in Python)."""
    _report(progress, "fine-tuning", 0, expected)
    ft = descend(z_ood0[None], proto.eta_ft, proto.finetune_stop, cap, record=True)
    if not ft.converged[0] and proto.ft_steps is None:
        raise ComputationError(_stuck(cap, K, proto, "K×K"))
    ood_path = ft.trajectory[:, 0]
    source_path = source_logits(z1, M, z_ood0, ood_path)
    losses = conditional_errors(source_path) / K
    change = np.diff(losses, axis=0)
    names = _trend_names((change > TREND_TOL).any(axis=0), (change < -TREND_TOL).any(axis=0))
    T2 = int(ft.steps[0])
    _report(progress, "fine-tuning", T2, T2)
    return _Finetuned(T2, ft.z[0], source_path[-1], names, losses[0], losses[-1],
                      {"finetune_ood": ood_path, "finetune_source": source_path,
                       "finetune_source_loss": losses}, np.arange(T2 + 1), ENGINES["numpy"])


#: Logit updates per call of the per-column kernel: at least this many (a call
#: synchronises the threads, which costs milliseconds on a loaded machine), at most
#: ``KERNEL_MAX_WORK`` (progress and Ctrl-C between calls).
KERNEL_MIN_WORK = 4e6
KERNEL_MAX_WORK = 4e8


def _block_length(t: int, expected: float, K: int, cap: int) -> int:
    """Steps in the next kernel call: half the way to the estimated end (so that the block
    where the rule is met, which is run twice, is short), growing again past it."""
    low = max(1, int(KERNEL_MIN_WORK // (K * K)))
    high = max(low, int(KERNEL_MAX_WORK // (K * K)))
    ahead = expected - t
    n = ahead / 2 if ahead > 0 else (t - expected) / 4
    return int(min(max(n, low), high, cap + 1 - t))


def _finetune_diagonal(z1, z_ood0, gamma, K, proto, cap, expected, progress) -> _Finetuned:
    """Parallel shifts (``M = diag(γ)``), compiled: every OOD column and its source column
    (``z1 + γ_n (z − z0) γ_k``) advance a block of steps per kernel call, each column on
    its own; the stopping rule is applied to the per-step flags the kernel returns, and
    the block where it is met is run again from its start up to that step."""
    kernel = compiled.finetune_diagonal()
    snaps = _snapshot_store(K, expected)
    stride = snaps.stride                                     # the kernel records these
    M = np.diag(gamma)
    X = np.ascontiguousarray(z_ood0.T)                        # X[k]: OOD column k
    X0, Z1 = X.copy(), np.ascontiguousarray(z1.T)
    rate = proto.eta_ft / K
    first, prev = np.zeros(K), np.zeros(K)
    rises, falls = np.zeros(K, dtype=bool), np.zeros(K, dtype=bool)

    def advance(t: int, n: int, update_last: bool) -> tuple[np.ndarray, int, np.ndarray]:
        above = np.empty((n, K), dtype=bool)
        start = -(-t // stride) * stride                      # first recorded step >= t
        snap = np.empty((max(0, (t + n - 1 - start) // stride + 1), K, K))
        kernel(X, X0, Z1, gamma, rate, proto.finetune_stop, t, n, update_last, above, first,
               prev, rises, falls, TREND_TOL, snap, start, stride)
        return above, start, snap

    def offer(start: int, snap: np.ndarray) -> None:
        for j, columns in enumerate(snap):
            snaps.offer(start + j * stride, lambda: _snapshot(columns.T.copy()))

    def _snapshot(z: np.ndarray) -> tuple:
        source = source_logits(z1, M, z_ood0, z)
        return z, source, conditional_errors(source) / K

    t, T2 = 0, None
    while T2 is None:
        _report(progress, "fine-tuning", t, expected)
        n = _block_length(t, expected, K, cap)                 # evaluates t .. t+n−1
        last_block = t + n - 1 == cap
        saved = X.copy(), prev.copy(), rises.copy(), falls.copy()
        above, start, snap = advance(t, n, not last_block)
        below = ~above.any(axis=1)
        if below.any():                                         # met at t + i: redo to there
            i = int(np.argmax(below))
            X[...], prev[...], rises[...], falls[...] = saved
            above, start, snap = advance(t, i + 1, False)
            T2 = t + i
        elif last_block and proto.ft_steps is not None:        # ran its fixed steps
            T2 = cap
        elif last_block:
            raise ComputationError(_stuck(cap, K, proto, "K×K"))
        else:
            t += n
        offer(start, snap)
    _report(progress, "fine-tuning", T2, T2)
    z_ood = X.T.copy()
    snaps.close(T2, lambda: _snapshot(z_ood.copy()))
    return _finetuned(snaps, T2, z_ood, source_logits(z1, M, z_ood0, z_ood),
                      _trend_names(rises, falls), first, prev,
                      f"{ENGINES['compiled'][:-1]}, {compiled.threads()} threads)")


def _stuck(cap: int, K: int, proto, path: str) -> str:
    eps_name = "eps" if proto.eps_ft == proto.eps else "eps_ft"
    return (f"fine-tuning did not meet the stopping rule (every e_k <= {eps_name}) within "
            f"max_steps = {cap} for K = {K}, {eps_name} = {proto.eps_ft:g}, eta_ft = "
            f"{proto.eta_ft:g}; {param('max_steps', 'raise')}, {param(eps_name, 'raise')} "
            "or change the step size")
