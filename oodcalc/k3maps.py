"""K = 3 maps of claim 8 for source feature 1: slices of the (γ_2, γ_3) plane at fixed γ_1.

On every point of a slice five answers to "does fine-tuning on U make L_{v_1} rise or
fall?" are set side by side:

- ``paper``: the paper's verdict (``theory.forgetting_regimes``; forgetting when
  ``−γ_1γ_m0 > γ_1²``, backward transfer when ``−γ_1γ_m1 < γ_1²``, else undetermined);
- ``corrected``: the derived sufficient condition (``theory.corrected_regimes``: forgetting
  when ``−γ_1γ_m0 > (K−1)γ_1²``);
- ``D_sign``: the sign of claim 8c's first-order criterion ``D_1``;
- ``first_step``: the sign of the exact first fine-tuning step's change of ``L_{v_1}``;
- ``F_sign``: the exact sign of ``F_1`` over the whole run (what the others are scored
  against; ``|F_1| <= TREND_TOL`` counts as 0).

A rule *disagrees* at a point when it promises a sign (forgetting / rising: ``F_1 > 0``;
backward transfer / falling: ``F_1 < 0``; unaffected / flat: ``F_1 = 0``) and the exact
``F_1`` has another; ``undetermined`` promises nothing. Points where fine-tuning takes no
step (``T2 = 0``: the OOD error already meets the stopping rule at T1, as at γ = (1, 1, 1))
or a phase did not converge are not scored. :meth:`K3Slice.fractions` gives the area
fractions over the slice's grid. Everything comes from one batched sweep
(``sweep.gamma_grid``), by the same exact dynamics as ``predict``.

The dynamics depend on γ only through ``M = diag(γ)`` up to sign: ``γ → −γ`` leaves the OOD
logits ``MᵀZM`` and the source change ``MWMᵀ`` unchanged, so the slice at ``−γ_1`` is the
slice at ``γ_1`` turned by 180°. Claim 8b's counterexamples (``theory.PAPER_K3_COUNTEREXAMPLES``) are
marked on a slice through them or through their mirror image ``−γ``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import limits, theory
from .errors import InputError
from .report import TREND_TOL
from .setting import Protocol, require_plain

__all__ = [
    "DEFAULT_GAMMA1", "DEFAULT_GRID", "DIRECTION_CODES", "K3Slice", "LABELS", "MAP_FLOATS",
    "RULES", "SHORT", "VERDICT_CODES", "check_gamma1", "fractions_table", "slices",
]


#: The rules scored against the exact sign of F_1, in the order they are drawn.
RULES = ("paper", "corrected", "D_sign", "first_step")
LABELS = {"paper": "paper's verdict (claim 8b)",
          "corrected": "corrected sufficient condition",
          "D_sign": "sign of D_1 (first order, claim 8c)",
          "first_step": "exact first step of L_v1",
          "F_sign": "exact sign of F_1 (whole run)"}
#: Codes of the verdicts in :attr:`K3Slice.codes` (the explorer page uses them too).
VERDICT_CODES = {"backward-transfer": 0, "undetermined": 1, "forgetting": 2, "unaffected": 3}
DIRECTION_CODES = {"falling": 0, "flat": 1, "rising": 2}

#: Default slices and grid.
DEFAULT_GAMMA1 = (0.25,)
DEFAULT_GRID = 201


@dataclass(frozen=True)
class K3Slice:
    """One slice: γ_1 fixed, γ_2 along ``axis`` (x, columns), γ_3 along ``axis`` (y, rows).

    ``verdicts[rule]`` holds the verdict names ``(n, n)`` (rows: γ_3, columns: γ_2) for
    each rule of :data:`RULES`; ``F1`` the exact ``F_1``, ``F_sign`` its sign (−1, 0, +1);
    ``D1`` the criterion's value; ``T2`` the fine-tuning steps; ``converged`` whether both
    phases met the stopping rule.
    """

    gamma1: float
    axis: np.ndarray
    protocol: dict[str, Any]
    verdicts: dict[str, np.ndarray]
    F1: np.ndarray
    F_sign: np.ndarray
    D1: np.ndarray
    T2: np.ndarray
    converged: np.ndarray
    counterexamples: list[tuple[float, float, float]] = field(default_factory=list)

    def promise(self, rule: str) -> np.ndarray:
        """The sign ``rule`` promises at every point; NaN where it promises none."""
        return theory.promised_signs(self.verdicts[rule])

    @property
    def scored(self) -> np.ndarray:
        """Points that are scored: both phases converged and fine-tuning took a step."""
        return self.converged & (self.T2 >= 1)

    def disagrees(self, rule: str) -> np.ndarray:
        """Where ``rule`` promises a sign of F_1 and the exact F_1 has another (scored
        points only)."""
        p = self.promise(rule)
        return self.scored & ~np.isnan(p) & (p != self.F_sign)

    def fractions(self) -> dict[str, dict[str, float]]:
        """Per rule, the area fractions of the slice (grid points over all points) where it
        ``agrees`` with the exact sign of F_1, ``disagrees``, is ``undecided``, or the point
        is ``not_scored`` (no fine-tuning step, or not converged)."""
        total = self.F_sign.size
        scored = self.scored
        out = {}
        for rule in RULES:
            decided = scored & ~np.isnan(self.promise(rule))
            wrong = self.disagrees(rule)
            out[rule] = {"agrees": float((decided & ~wrong).sum() / total),
                         "disagrees": float(wrong.sum() / total),
                         "undecided": float((scored & ~decided).sum() / total),
                         "not_scored": float((~scored).sum() / total)}
        return out

    def disagreement_classes(self) -> tuple[np.ndarray, list[str]]:
        """An integer class per point for the combination of rules that disagree with the
        exact sign of F_1 (0: none), and the names of the classes that occur, in order
        of first code (0 first)."""
        bits = np.zeros(self.F_sign.shape, dtype=np.int64)
        for i, rule in enumerate(RULES):
            bits |= self.disagrees(rule).astype(np.int64) << i
        present = np.unique(bits)
        if present[0] != 0:
            present = np.concatenate([[0], present])
        codes = np.searchsorted(present, bits)
        names = []
        for b in present:
            wrong = [rule for i, rule in enumerate(RULES) if b >> i & 1]
            names.append("no rule contradicts the sign of F_1" if not wrong
                         else "wrong: " + ", ".join(SHORT[r] for r in wrong))
        return codes, names

    def codes(self) -> dict[str, np.ndarray]:
        """Compact ``uint8`` codes per rule (``VERDICT_CODES`` / ``DIRECTION_CODES``) and
        ``F_sign + 1``: what the explorer page embeds."""
        out = {}
        for rule in RULES:
            table = VERDICT_CODES if rule in ("paper", "corrected") else DIRECTION_CODES
            names = self.verdicts[rule]
            code = np.zeros(names.shape, dtype=np.uint8)
            for name, c in table.items():
                code[names == name] = c
            out[rule] = code
        out["F_sign"] = (self.F_sign + 1).astype(np.uint8)
        return out


SHORT = {"paper": "paper", "corrected": "corrected", "D_sign": "sign D_1",
         "first_step": "first step"}


#: Floats a slice's images hold per point (four verdict maps, the signs, the mask).
MAP_FLOATS = 32


def check_gamma1(values: Sequence[float], option: str = "gamma1") -> list[float]:
    out = []
    for x in values:
        x = float(x)
        if not (np.isfinite(x) and abs(x) <= 1.0):
            raise InputError(option, repr(x), "each γ_1 must be a finite number in [-1, 1]")
        out.append(x)
    if not out:
        raise InputError(option, "nothing", "give at least one γ_1 in [-1, 1]")
    return out


def slices(gamma1: Sequence[float] = DEFAULT_GAMMA1, n: int = DEFAULT_GRID,
           protocol: Protocol | None = None, **sweep_options) -> list[K3Slice]:
    """The K = 3 slices at each ``γ_1`` over an ``n × n`` grid of ``(γ_2, γ_3) ∈ [−1, 1]²``,
    computed in one sweep (``sweep_options`` go to :func:`oodcalc.sweep.sweep`).

    >>> s = slices([0.5], n=21)[0]          # axis −1, −0.9, ..., 1
    >>> s.verdicts["paper"][1, 1], int(s.F_sign[1, 1])    # γ = (0.5, −0.9, −0.9): claim 8b
    ('forgetting', -1)
    >>> s.fractions()["corrected"]["disagrees"]
    0.0
    """
    from .sweep import gamma_grid, sweep
    gamma1 = check_gamma1(gamma1)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError("grid", n, "expected an integer >= 2")
    protocol = protocol or Protocol()
    require_plain(protocol, "the K = 3 maps")
    limits.check_maps({3: len(gamma1) * int(n) ** 2}, MAP_FLOATS,
                      "the K = 3 slices (N × N rows per slice and their images)")
    # predict's refusal: every row pretrains alike, under max_steps as given (the sweep
    # never raises it), so a pretraining estimated past twice it would leave no row scored
    limits.pretrain_cap(3, protocol, auto=False)
    axis = np.linspace(-1.0, 1.0, int(n))
    result = sweep(gamma_grid([np.array(gamma1), axis, axis], eps=protocol.eps,
                              eta=protocol.eta, eta_ft=protocol.eta_ft),
                   max_steps=protocol.max_steps, **sweep_options)

    def grid(name: str) -> np.ndarray:
        # (eps, eta, [eta_ft,] γ1, γ2, γ3) → (slice, γ3 rows, γ2 columns)
        values = result[name].reshape(len(gamma1), n, n)
        return np.swapaxes(values, 1, 2)

    verdicts = {"paper": grid("regime_1"), "corrected": grid("corrected_regime_1"),
                "D_sign": grid("D_direction_1"), "first_step": grid("initial_direction_1")}
    F1 = grid("F_1")
    F_sign = np.where(F1 > TREND_TOL, 1, np.where(F1 < -TREND_TOL, -1, 0))
    D1, T2, ok = grid("D_1"), grid("T2"), grid("converged")
    out = []
    for i, g1 in enumerate(gamma1):
        marked = [c for c in theory.PAPER_K3_COUNTEREXAMPLES if c[0] == g1]
        marked += [tuple(-x for x in c) for c in theory.PAPER_K3_COUNTEREXAMPLES
                   if -c[0] == g1]
        out.append(K3Slice(g1, axis, protocol.describe(),
                           {rule: v[i] for rule, v in verdicts.items()},
                           F1[i], F_sign[i], D1[i], T2[i], ok[i], marked))
    return out


def fractions_table(maps: Sequence[K3Slice]) -> str:
    """Area fractions per slice and rule, as a Markdown table (percent of grid points)."""
    lines = ["| γ_1 | rule | agrees with sign F_1 | disagrees | undecided | not scored (T2 = 0) |",
             "|---|---|---|---|---|---|"]
    for s in maps:
        for rule, f in s.fractions().items():
            lines.append(f"| {s.gamma1:g} | {LABELS[rule]} | {100 * f['agrees']:.2f} % "
                         f"| {100 * f['disagrees']:.2f} % | {100 * f['undecided']:.2f} % "
                         f"| {100 * f['not_scored']:.2f} % |")
    return "\n".join(lines)
