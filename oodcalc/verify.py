"""The verification ledger: every statement of the claim registry beside what gradient
descent does: the ledger runner. The checks themselves live with their claims
(``oodcalc/claims/``), and what they share (budgets, result types, statistics, the settings
and runs several checks reuse) in :mod:`oodcalc.checks`.

Each statement gets one :class:`Row`:

* ``symbolic``: the level its derivation earned in this run: the derivation runs (its
  outcome cached by a hash of the code it runs, :mod:`oodcalc.symbolic.cache`), and the row
  FAILs when a check failed or the level is not the registry's;
* ``population``: the closed form against simulator (a), population GD on the full
  ``Q ∈ R^{d×d}`` with explicit vectors (:mod:`oodcalc.simulate.population`), with the
  largest absolute and relative error and the tolerance the check uses;
* ``prompts``: the claim against simulator (b), GD on sampled prompts of N tokens
  (:mod:`oodcalc.simulate.prompts`), at several N with a Monte Carlo error bar over seeds.

Verdicts: ``PASS`` — the derivation earned its level and oodcalc's closed forms agree with
simulation; ``REFUTED`` — a statement of the paper is contradicted by a counterexample that
the derivation establishes and full-Q GD reproduces in the same run; ``FAIL`` — a check of
the derivation failed (or it earned another level than the registry states), oodcalc's own
closed forms disagree with simulation, or a refutation's counterexample no longer
reproduces. ``oodcalc verify`` exits 1 on a FAIL.

Tolerances, and why they are what they are:

* identities that hold exactly in real arithmetic are checked to ``EXACT_TOL = 1e-10``
  absolute on O(1) numbers: float64 rounding over a few thousand steps is ~1e-14, so a
  real violation cannot hide below it;
* the closed-form threshold α* of claim 3 is met by discrete GD between two steps, so the
  check is the bracket ``α(T1−1) < α* <= α(T1)``: the tolerance is the last GD step;
* Monte Carlo quantities are never compared with a fixed tolerance. For each N the ledger
  reports the seed mean ± standard error (SE) of the signed deviation from the population
  theory. A row's prompt check passes when no deviation is detected at any N — two tests
  over all the N together (Stouffer's signed z and a χ² of the t-corrected scores,
  Bonferroni, family-wise false-alarm rate ``ALPHA`` ≈ 0.27 %) — or when the detected
  deviation shrinks with N: the slope ``p`` of ``log|deviation|`` against ``log N``
  (weighted least squares) is nearer ``MIN_RATE`` than 0, not below ``MIN_RATE`` by more
  than ``K_SIGMA`` SE, and still that fast between the two largest N. Where it fails,
  rows whose simulator trains on mini-batches ask whether the offset is SGD noise: the same
  test along the batch size at fixed N (:func:`with_batch_sweep`).

Simulator (b) runs with fresh mini-batches (SGD) by default: the per-step noise averages
over the trajectory, which leaves the finite-N bias visible. Its stopping rule is evaluated
on the population errors of the current Q (see :mod:`oodcalc.simulate.prompts`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .checks import EXACT_TOL, K_SIGMA, MAIN, OOD_SETTING, QUICK, Budget, Context, \
    PopulationCheck, PromptCheck
from .claims import CLAIMS, Claim
from .report import jsonable


__all__ = [
    "Ledger", "Row", "SymbolicCheck", "cached_derivation", "ledger", "row_label",
    "run_claim", "symbolic_check",
]


# --- results --------------------------------------------------------------------------

@dataclass
class SymbolicCheck:
    """The claim's derivation, run (or read from the cache of its code's outcome)."""

    level: str                    # the level its decisive checks earned in this run
    expected: str                 # the registry's level
    checks: int
    failed: tuple[str, ...]       # ids of the checks that failed
    cached: bool = False
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failed and self.level == self.expected

    @property
    def details(self) -> list[str]:
        origin = "read from the cache of its code's outcome" if self.cached else \
            f"ran in {self.seconds:.1f} s"
        out = [f"derivation: {self.checks - len(self.failed)}/{self.checks} checks passed, "
               f"level {self.level!r} ({origin})"]
        if self.failed:
            out.append("failed checks: " + ", ".join(self.failed))
        if self.level != self.expected:
            out.append(f"the registry states {self.expected!r}")
        return out


@dataclass
class Row:
    claim: str                    # the registry id: "3", "8b", ...
    key: str
    title: str
    symbolic: str                 # the level the derivation earned in this run
    population: PopulationCheck
    prompts: PromptCheck | None
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    refutes: bool = False         # the statement is the paper's; passing checks refute it
    derivation: SymbolicCheck | None = None

    @property
    def passed(self) -> bool:
        """No FAIL: the checks passed (for a refutation: the counterexample reproduced)."""
        return ((self.derivation is None or self.derivation.passed) and self.population.passed
                and (self.prompts is None or self.prompts.passed))

    @property
    def verdict(self) -> str:
        if not self.passed:
            return "FAIL"
        return "REFUTED" if self.refutes else "PASS"

    def to_dict(self) -> dict[str, Any]:
        def block(check):
            if check is None:
                return None
            out = dict(vars(check))
            for name in ("points", "batch_points"):
                if out.get(name) is not None:
                    out[name] = [vars(p) for p in out[name]]
            return out
        return jsonable({"claim": self.claim, "key": self.key, "title": self.title,
                         "verdict": self.verdict,
                         "symbolic": self.symbolic,
                         "derivation": None if self.derivation is None else {
                             **vars(self.derivation), "passed": self.derivation.passed},
                         "population": block(self.population),
                         "prompts": block(self.prompts), "findings": self.findings,
                         "seconds": round(self.seconds, 2)})


@dataclass
class Ledger:
    budget: Budget
    rows: list[Row]
    seconds: float

    @property
    def passed(self) -> bool:
        """No row FAILs (REFUTED rows are findings about the paper, not failures)."""
        return all(r.passed for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        b = self.budget
        return jsonable({
            "mode": b.name, "passed": self.passed, "seconds": round(self.seconds, 2),
            "conventions": {
                "exact_tol": EXACT_TOL, "k_sigma": K_SIGMA,
                "prompts": {"Ns": b.Ns, "seeds": b.seeds, "batch": b.batch,
                            "resample": True, "stop": "population"},
                "main_setting": MAIN.describe(), "ood_setting": OOD_SETTING.describe()},
            "rows": [r.to_dict() for r in self.rows]})


# --- the ledger -----------------------------------------------------------------------

#: ``derive(claim)``: the outcome of the claim's derivation (:mod:`oodcalc.symbolic.cache`).
Derive = Callable[[Claim], Any]


def cached_derivation(claim: Claim):
    """The default :data:`Derive`: the outcome on disk when the claim's code is unchanged,
    else the derivation runs (and is stored)."""
    from .symbolic.cache import outcome
    return outcome(claim)


def symbolic_check(claim: Claim, derive: Derive | None = None) -> SymbolicCheck:
    """Run the claim's derivation (by default through the cache of its code's outcome)."""
    result = (derive or cached_derivation)(claim)
    return SymbolicCheck(result.level, claim.level, result.checks, tuple(result.failed),
                         result.cached, result.seconds)


def run_claim(claim: Claim, ctx: Context, derive: Derive | None = None) -> Row:
    """The claim's row: its derivation (``derive``, default: cached by its code's hash)
    and its numeric checks."""
    start = time.perf_counter()
    derivation = symbolic_check(claim, derive)
    population, prompts, findings = claim.load("check")(ctx)
    return Row(claim.id, claim.key, claim.title, derivation.level, population, prompts,
               findings, time.perf_counter() - start, claim.refutes, derivation)


#: ``progress(done, total, label)``: the run starts (0, total, ""), then once per finished
#: row, labelled with its claim, title, verdict and time.
Progress = Callable[[int, int, str], None]


def row_label(row: Row) -> str:
    """``claim 8b (Forgetting threshold …): REFUTED, 3.2 s``: a finished row in a line."""
    return f"claim {row.claim} ({row.title}): {row.verdict}, {row.seconds:.1f} s"


def ledger(budget: Budget = QUICK, claims=None, progress: Progress | None = None,
           derive: Derive | None = None) -> Ledger:
    """Run the derivations and numeric checks of ``claims`` (default: every registry
    entry), in registry order; ``progress``, if given, is told of each finished row (see
    :data:`Progress`); ``derive`` replaces the cached derivations (see :func:`run_claim`)."""
    start = time.perf_counter()
    ctx = Context.shared(budget)
    chosen = list(CLAIMS) if claims is None else [c for c in CLAIMS if c in set(claims)]
    rows: list[Row] = []
    if progress is not None:
        progress(0, len(chosen), "")
    for c in chosen:
        rows.append(run_claim(c, ctx, derive))
        if progress is not None:
            progress(len(rows), len(chosen), row_label(rows[-1]))
    return Ledger(budget, rows, time.perf_counter() - start)
