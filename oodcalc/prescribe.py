"""What to do about forgetting, for one geometry: every fine-tuning intervention run
exactly, side by side.

:func:`advise` runs plain fine-tuning and each intervention of
:class:`~oodcalc.setting.Protocol` through :func:`oodcalc.predict` (the exact population
dynamics, the terms engine of :mod:`oodcalc.finetune`), finds the smallest replay share
λ* and the smallest pull μ* with which fine-tuning meets its stopping rule on U and
does not forget (``F <= 0``), judges the paper's three pieces of advice on this geometry,
and marks the outcomes no other arm beats on every one of (F, final OOD loss, steps).

Every number is a run of gradient descent; nothing here is a closed form. λ* and μ*
are bracketed to ``tolerance``: ``F`` is not proven monotone in λ or μ, so the bracket
is the first sign change on a doubling grid, narrowed by regula falsi; a test checks a
grid below λ* on the geometries it covers. Each is found twice: for the total ``F`` and
for every feature's ``F_k`` (λₖ*, μₖ*): at K >= 3 the total rarely forgets while single
features do.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .errors import ComputationError, InputError, param
from .prediction import predict
from .report import jsonable
from .setting import Setting, check_setting

__all__ = [
    "Advice", "Arm", "CAP_FACTOR", "CRITERIA", "FIXED_ARMS", "MIN_CAP", "PAPER_ADVICE",
    "PULL_GRID", "REPLAY_GRID", "SAME_LOSS", "TOLERANCE", "Threshold", "Verdict", "advise",
    "judge", "judge_advice", "pareto_front",
]


#: λ* and μ* are bracketed to this width unless asked otherwise.
TOLERANCE = 1e-6
#: An arm runs at most CAP_FACTOR × plain fine-tuning's steps (at least MIN_CAP): an
#: intervention that needs more is reported "not reached" with its state at the cap.
CAP_FACTOR = 20
MIN_CAP = 1000
#: Losses closer than this are the same outcome: the terms engine and the plain one agree
#: to ~1e-17 on the same run (tests/test_interventions.py), not to the last bit.
SAME_LOSS = 1e-12
#: Where the searches look for the first λ (μ) that prevents forgetting.
REPLAY_GRID = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 0.9)
PULL_GRID = tuple(1e-4 * 4.0 ** i for i in range(9))          # 1e-4 … 6.6

#: The paper's closing advice, in its words, and the arms that test each piece (claims
#: 12a, 12b, 12c: their ledger rows judge it with :func:`judge_advice`).
PAPER_ADVICE = (
    ("weight fine-tuning samples by their cosine similarity to the pretraining centre",
     ("weights cosine",)),
    ("avoid fine-tuning data strongly negatively correlated with the source features",
     ("weights drop-negative",)),
    ("restrict fine-tuning updates to the subspace orthogonal to the source features",
     ("project key", "project query", "project both")),
)
FIXED_ARMS = {"plain": {}, "weights cosine": {"weights": "cosine"},
              "weights drop-negative": {"weights": "drop-negative"},
              "project key": {"project": "key"}, "project query": {"project": "query"},
              "project both": {"project": "both"}}


@dataclass(frozen=True)
class Arm:
    """One fine-tuning run: its interventions, the forgetting ``F`` (the source loss's
    change) and ``F_k``, the final OOD loss ``L_U = (1/K) Σ e_k(z_U)``, its steps,
    whether the stopping rule on U held at the end (``note``: why not) and which OOD
    features are still above ε (a weight rule's rule covers only the kept ones)."""

    name: str
    interventions: dict[str, Any]
    F: float
    F_k: tuple[float, ...]
    loss_ood: float
    steps: int
    reached: bool
    note: str | None = None
    unlearned: tuple[int, ...] = ()      # features k (from 1) with e_k(z_U) > ε_ft at the end

    def forgets(self, criterion: str) -> float:
        """What a threshold drives to <= 0: ``F`` ("total") or the worst ``F_k`` ("each")."""
        return self.F if criterion == "total" else max(self.F_k)

    def meets(self, criterion: str) -> bool:
        return self.reached and self.forgets(criterion) <= 0


@dataclass(frozen=True)
class Threshold:
    """The smallest value of one intervention (``replay`` or ``l2``) whose run reaches
    the rule with ``F <= 0`` (``criterion`` "total") or with every ``F_k <= 0`` ("each"):
    ``value`` (None when none on the grid does, ``why``), the bracket ``(low, value)`` it
    was narrowed to (``low`` fails), the run at it, and every run the search made
    (``tried``, by value: the value, F, the worst F_k, steps and whether the rule on U
    was met)."""

    intervention: str
    criterion: str
    value: float | None
    low: float | None
    tolerance: float
    arm: Arm | None
    runs: int
    why: str
    tried: tuple[tuple[float, float, float, int, bool], ...] = ()


@dataclass(frozen=True)
class Verdict:
    advice: str
    arms: tuple[str, ...]
    verdict: str
    reason: str


@dataclass
class Advice:
    """:func:`advise`'s result; ``to_dict`` is the JSON the command line prints, and every
    key of it is the attribute of the same name (``advice.arms[0].F`` is
    ``to_dict()["arms"][0]["F"]``, ``advice.thresholds["replay_each"].value`` is
    ``to_dict()["thresholds"]["replay_each"]["value"]``).

    Example
    -------
    >>> import oodcalc as oc
    >>> advice = oc.advise(oc.Setting(oc.parallel_shift([1, -0.5]), oc.Protocol(eps=0.1)),
    ...                    tolerance=0.01)
    >>> [arm.name for arm in advice.arms][-2:], len(advice.fixed_arms)
    (['project both', 'replay λₖ*'], 6)
    >>> f"{advice.thresholds['replay_each'].value:.3f}", advice.replay.value
    ('0.151', 0.0)
    >>> advice.to_dict()["thresholds"]["replay_each"]["value"] == advice.replay_each.value
    True
    """

    parameters: dict[str, Any]
    cap: int
    fixed_arms: list[Arm]        # plain, the query weights, the projections
    replay: Threshold
    l2: Threshold
    replay_each: Threshold
    l2_each: Threshold
    verdicts: list[Verdict]
    pareto: list[str] = field(default_factory=list)

    def arm(self, name: str) -> Arm:
        """The run called ``name`` (one of :attr:`arms`).

        Example
        -------
        >>> import oodcalc as oc
        >>> advice = oc.advise(oc.Setting(oc.parallel_shift([1, -0.5]), oc.Protocol(eps=0.1)),
        ...                    tolerance=0.01)
        >>> run = advice.arm("project key")
        >>> run.F, run.steps, run.reached
        (0.0, 119, True)
        """
        return next(a for a in self.arms if a.name == name)

    @property
    def thresholds(self) -> dict[str, Threshold]:
        """``replay``, ``l2`` (F <= 0) and ``replay_each``, ``l2_each`` (every F_k <= 0)."""
        return {"replay": self.replay, "l2": self.l2, "replay_each": self.replay_each,
                "l2_each": self.l2_each}

    @property
    def arms(self) -> list[Arm]:
        """Every run: the fixed arms, then the runs at the thresholds (as the JSON lists)."""
        found = [t.arm for t in self.thresholds.values() if t.arm is not None]
        names = {b.name for b in self.fixed_arms}
        return self.fixed_arms + [a for a in found if a.name not in names]

    @property
    def all_arms(self) -> list[Arm]:
        """Deprecated: the same list as :attr:`arms` (the JSON's name)."""
        warnings.warn("Advice.all_arms is deprecated; use Advice.arms (the JSON's name)",
                      DeprecationWarning, stacklevel=2)
        return self.arms

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``oodcalc advise --json``: every key the attribute of its name.

        Example
        -------
        >>> import oodcalc as oc
        >>> advice = oc.advise(oc.Setting(oc.parallel_shift([1, -0.5]), oc.Protocol(eps=0.1)),
        ...                    tolerance=0.01)
        >>> data = advice.to_dict()
        >>> list(data)
        ['parameters', 'cap', 'arms', 'thresholds', 'verdicts', 'pareto']
        >>> sorted(data["thresholds"])
        ['l2', 'l2_each', 'replay', 'replay_each']
        >>> f"{data['arms'][0]['F']:+.2e}"                       # plain fine-tuning
        '-3.43e-03'
        """
        return jsonable({"parameters": self.parameters, "cap": self.cap,
                         "arms": [dataclasses.asdict(a) for a in self.arms],
                         "thresholds": {name: dataclasses.asdict(t)
                                        for name, t in self.thresholds.items()},
                         "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
                         "pareto": self.pareto})


def advise(setting: Setting, *, tolerance: float = TOLERANCE,
           progress: Callable[[str], None] | None = None) -> Advice:
    """Every intervention's outcome for ``setting``'s geometry and protocol (which must
    be plain fine-tuning: advise varies the interventions itself).

    Parameters
    ----------
    setting : Setting
        The geometry and the protocol (ε, η, η_ft; stopping rule, not ``ft_steps``).
    tolerance : float
        Width to which the thresholds are bracketed (> 0, at most 0.01).
    progress : callable, optional
        Called with the name of each run as it starts.

    Returns
    -------
    Advice
        ``arms``: plain, the query weights, the projections (``fixed_arms``), then the
        runs at the thresholds; the thresholds ``replay`` and ``l2`` (F <= 0) and
        ``replay_each`` and ``l2_each`` (every F_k <= 0); one ``verdicts`` entry per piece
        of the paper's advice and the ``pareto`` front; ``to_dict()`` is the JSON.

    Example
    -------
    >>> import oodcalc as oc
    >>> setting = oc.Setting(oc.parallel_shift([1, -0.5]), oc.Protocol(eps=0.1))
    >>> advice = oc.advise(setting, tolerance=0.01)       # coarse: a fast example
    >>> f"{advice.replay_each.value:.3f}", advice.verdicts[2].verdict
    ('0.151', 'removes forgetting exactly')
    >>> advice.arm("project key").F, advice.arm("project key").steps
    (0.0, 119)
    """
    setting = check_setting(setting)
    protocol = setting.protocol
    if protocol.interventions:
        asked = ", ".join(f"{k} = {v}" for k, v in protocol.interventions.items())
        raise InputError(param(next(iter(protocol.interventions))), asked,
                         "advise compares every intervention itself; give a plain protocol")
    if protocol.ft_steps is not None:
        raise InputError(param("ft_steps"), protocol.ft_steps, "advise compares runs to the "
                         "stopping rule; give no fixed number of fine-tuning steps")
    if not (isinstance(tolerance, (int, float)) and 0 < tolerance <= 0.01):
        raise InputError(param("tolerance"), tolerance, "expected a width 0 < w <= 0.01")
    say = progress or (lambda name: None)

    say("plain")
    plain_report = predict(setting)
    cap = _cap(plain_report)

    done: dict[tuple, Arm] = {}              # the searches share their grid runs

    def run(name: str, interventions: dict[str, Any]) -> Arm:
        key = tuple(sorted(interventions.items()))
        if key in done:
            return dataclasses.replace(done[key], name=name)
        say(name)
        try:
            done[key] = _run(setting, name, interventions, cap)
        except InputError as refused:      # e.g. a weight rule that keeps no feature
            done[key] = Arm(name, dict(interventions), math.nan, (), math.nan, 0, False,
                            f"not run: {refused.accepted}")
        return done[key]

    arms = [_arm("plain", {}, plain_report, True)]
    arms += [run(name, fields) for name, fields in FIXED_ARMS.items() if name != "plain"]
    plain = arms[0]
    searches = [_threshold(name, grid, criterion, plain, run, tolerance)
                for criterion in ("total", "each")
                for name, grid in (("replay", REPLAY_GRID), ("l2", PULL_GRID))]
    advice = Advice(setting.describe(), cap, arms, *searches, [])
    advice.verdicts = [_judge(text, names, advice) for text, names in PAPER_ADVICE]
    advice.pareto = pareto_front(advice.arms)
    return advice


def _cap(plain_report) -> int:
    return max(CAP_FACTOR * plain_report.finetune.T2, 2 * plain_report.pretrain.T1, MIN_CAP)


def judge_advice(setting: Setting, piece: int,
                 interventions: dict[str, dict[str, Any]] | None = None
                 ) -> tuple[Verdict, dict[str, Arm]]:
    """The verdict :func:`advise` gives on piece ``piece`` (0, 1, 2) of PAPER_ADVICE for
    ``setting`` (a plain protocol), from plain fine-tuning and that piece's arms only;
    ``interventions`` replaces an arm's fields (e.g. explicit weights). Claims 12a–12c
    judge the paper's advice through this function, so their verdicts are advise's."""
    setting = check_setting(setting)
    text, names = PAPER_ADVICE[piece]
    fields = {**{n: FIXED_ARMS[n] for n in names}, **(interventions or {})}
    plain_report = predict(setting)
    arms = {"plain": _arm("plain", {}, plain_report, True)}
    arms.update((n, _run(setting, n, fields[n], _cap(plain_report))) for n in names)
    return judge(text, names, arms.__getitem__), arms


def _run(setting: Setting, name: str, interventions: dict[str, Any], cap: int) -> Arm:
    protocol = dataclasses.replace(setting.protocol, max_steps=cap, **interventions)
    try:
        report = predict(Setting(setting.geometry, protocol))
    except ComputationError:           # the rule not met within the cap: its state there
        fixed = dataclasses.replace(protocol, ft_steps=cap, eps_ft=None)
        report = predict(Setting(setting.geometry, fixed))
        return _arm(name, interventions, report, False,
                    f"the rule on U is not met within {cap} steps (the cap)")
    reached = report.finetune.reached is not False
    note = None if reached else "; ".join(report.warnings) or "the rule on U is not met"
    return _arm(name, interventions, report, reached, note)


def _arm(name, interventions, report, reached, note=None) -> Arm:
    p = report.parameters
    errors = np.asarray(report.finetune.error_ood)
    return Arm(name, dict(interventions), float(report.F),
               tuple(float(f.F_k) for f in report.forgetting),
               float(errors.sum() / p["K"]), int(report.finetune.T2), bool(reached), note,
               tuple(int(k) + 1 for k in np.flatnonzero(errors > p["eps_ft"])))


#: What each threshold's run must bring to <= 0, in words.
CRITERIA = {"total": "F <= 0", "each": "every F_k <= 0"}


def _threshold(intervention: str, grid, criterion: str, plain: Arm, run,
               tolerance: float) -> Threshold:
    """The first grid value whose run meets ``criterion`` (and the rule on U), then
    regula falsi on the criterion's measure between it and the grid value before (whose
    run does not), to ``tolerance``."""
    label = ("λ" if intervention == "replay" else "μ") + ("" if criterion == "total" else "ₖ")
    goal = CRITERIA[criterion]

    def arm_at(x: float) -> Arm:
        return run(f"{intervention} {x:.9g}", {intervention: x})

    if plain.meets(criterion):
        return Threshold(intervention, criterion, 0.0, None, tolerance, None, 0,
                         f"plain fine-tuning has {goal}: no "
                         + ("replay" if intervention == "replay" else "pull") + " needed")
    tried: dict[float, Arm] = {}
    low = 0.0
    for x in grid:
        tried[x] = arm_at(x)
        if tried[x].meets(criterion):
            break
        if not tried[x].reached:
            break                   # a stronger one would reach the rule even less
        low = x
    else:
        x = None
    measure = "F" if criterion == "total" else "the worst F_k"
    if x is None or not tried[x].meets(criterion):
        last = tried[max(tried)]
        stop = (f"; at {label} = {max(tried):g} the rule on U is no longer met"
                if not last.reached else "")
        return Threshold(intervention, criterion, None, None, tolerance, None, len(tried),
                         f"no {label} on the grid {grid[0]:g} … {max(tried):g} both meets the "
                         f"rule and gives {goal} ({measure} from "
                         f"{tried[min(tried)].forgets(criterion):+.3g} to "
                         f"{last.forgets(criterion):+.3g}){stop}", _tried(tried))
    high = x
    # bisection on the criterion, each step placed by the secant of its measure (Illinois
    # regula falsi: a step kept on one side halves that end's weight): F is smooth in λ
    # between the jumps where T2 changes by a step
    f_low = (plain if low == 0.0 else tried[low]).forgets(criterion)
    f_high = tried[high].forgets(criterion)
    runs = len(tried)
    side = 0
    while high - low > tolerance:
        guess = high - f_high * (high - low) / (f_high - f_low) if f_high < f_low else math.nan
        inner = low + 0.05 * (high - low), high - 0.05 * (high - low)
        # every third step halves the bracket whatever the secant says: F jumps where
        # T2 changes by a step, and a secant across a jump can crawl
        bisect = (runs % 3 == 2) or not inner[0] <= guess <= inner[1]
        x = 0.5 * (low + high) if bisect else guess
        arm = tried[x] = arm_at(x)
        runs += 1
        if arm.meets(criterion):
            high, f_high = x, arm.forgets(criterion)
            if side == 1:
                f_low /= 2
            side = 1
        else:                        # F > 0, or the rule not met (F then says nothing)
            low = x
            f_low = arm.forgets(criterion) if arm.reached else f_low
            if side == -1:
                f_high /= 2
            side = -1
    best = dataclasses.replace(tried[high], name=f"{intervention} {label}*")
    return Threshold(intervention, criterion, high, low, tolerance, best, runs,
                     f"smallest {label} with {goal} and the rule met, bracketed to "
                     f"({low:.9g}, {high:.9g}] after {runs} runs", _tried(tried))


def _tried(tried: dict[float, Arm]) -> tuple[tuple[float, float, float, int, bool], ...]:
    return tuple((x, a.F, max(a.F_k), a.steps, a.reached) for x, a in sorted(tried.items()))


def _judge(advice: str, names: tuple[str, ...], result: Advice) -> Verdict:
    return judge(advice, names, result.arm)


def judge(advice: str, names: tuple[str, ...], arm_of: Callable[[str], Arm]) -> Verdict:
    """One piece of the paper's advice judged from the runs ``arm_of(name)`` ("plain" and
    each of ``names``): by the total F against plain fine-tuning's."""
    plain = arm_of("plain")
    arms = [arm_of(n) for n in names]
    if names[0].startswith("project"):
        zero = all(a.F == 0 for a in arms)
        reached = [a.name for a in arms if a.reached]
        cost = ", ".join(f"{a.name}: {a.steps} steps" + ("" if a.reached else " (rule not met)")
                         for a in arms)
        lost = (f"; plain fine-tuning's backward transfer (F = {plain.F:+.3g}) is lost too"
                if plain.F < 0 else "")
        if zero:
            return Verdict(advice, names, "removes forgetting exactly",
                           f"F = 0 in every projected run (plain {plain.steps} steps; {cost})"
                           + lost + ("" if reached else "; no projected run meets the rule on U"))
        return Verdict(advice, names, "does not remove forgetting",
                       f"F = {', '.join(f'{a.F:+.3g}' for a in arms)} ({cost})")
    arm = arms[0]
    if math.isnan(arm.F):
        return Verdict(advice, names, "not applicable here", arm.note or "")
    if abs(arm.F - plain.F) <= SAME_LOSS and arm.steps == plain.steps:
        return Verdict(advice, names, "no effect here",
                       f"every weight is 1 (F = {arm.F:+.3g}, as plain fine-tuning)")
    change = f"F {plain.F:+.3g} → {arm.F:+.3g}"
    if arm.unlearned:
        left = ", ".join(f"u{k}" for k in arm.unlearned)
        change += (f", but {left} not learned (final OOD loss {plain.loss_ood:.3g} → "
                   f"{arm.loss_ood:.3g})")
    if arm.F < plain.F - SAME_LOSS:
        verdict = "helps here" if not arm.unlearned else "helps here only by not learning U"
    elif arm.F > plain.F + SAME_LOSS:
        verdict = "backfires here"
    else:
        verdict = "no effect here"
    return Verdict(advice, names, verdict, change)


def pareto_front(arms: list[Arm]) -> list[str]:
    """The arms no other arm beats on every one of (F, final OOD loss, steps), each
    smaller being better; losses within SAME_LOSS tie (a tie on all three keeps both)."""
    def beats(a: Arm, b: Arm) -> bool:
        no_worse = (a.F <= b.F + SAME_LOSS and a.loss_ood <= b.loss_ood + SAME_LOSS
                    and a.steps <= b.steps)
        better = (a.F < b.F - SAME_LOSS or a.loss_ood < b.loss_ood - SAME_LOSS
                  or a.steps < b.steps)
        return no_worse and better

    ran = [a for a in arms if not math.isnan(a.F)]
    return [b.name for b in ran if not any(beats(a, b) for a in ran if a is not b)]
