"""The result types of the symbolic engine, the proof levels, and exact decision procedures.

A derivation records steps (prose and displayed math) and checks. Each check says how it
was decided (``SYMBOLIC``: sympy, with the number of features K a Symbol; ``EXPLICIT``: sympy,
for each K in a stated range; ``NUMERIC``: numbers) and whether it is *decisive*: the step
the claim rests on. A derivation's proof level is computed from its decisive checks, never
declared: "symbolic K" only when every decisive check passed with K a Symbol.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import mpmath
import sympy as sp

__all__ = [
    "Check", "Derivation", "EXPLICIT", "K_RANGE", "MP_DPS", "MP_TOL", "NUMERIC", "PAPER",
    "PROSE", "PROSE_SUFFIX", "REFUTED", "Recorder", "SYMBOLIC", "Step", "as_scalar",
    "cayley_orthonormal", "certify_nonnegative", "coefficients_nonnegative", "eq",
    "is_zero", "is_zero_rational", "k_range_text", "level_of", "matrix_expr_is_zero",
    "mp_max_residual", "mp_points", "prose_lemmas", "simplex_nonnegative",
]


SYMBOLIC = "symbolic K"
EXPLICIT = "explicit K"
NUMERIC = "numeric"
#: a step argued in prose, not derived: recorded (always "passed") so that, when decisive,
#: the level says so ("symbolic K + lemma in prose"); `oodcalc derive --list` names it.
PROSE = "prose lemma"
#: what a decisive prose lemma appends to the level the other decisive checks earn
PROSE_SUFFIX = " + lemma in prose"

#: proof levels (what `oodcalc derive --list` shows); EXPLICIT becomes "K = a..b".
PAPER = "rests on the paper"
REFUTED = "refuted"

#: The explicit range checked as a backstop to the symbolic-K derivations.
K_RANGE = tuple(range(2, 7))
#: Working precision (decimal digits) and pass threshold of the random mpmath checks.
MP_DPS = 50
MP_TOL = mpmath.mpf(10) ** -40


# --- result types ---------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One step: prose (plain Unicode) and displayed math (sympy objects)."""

    text: str
    math: tuple[sp.Basic, ...] = ()


@dataclass(frozen=True)
class Check:
    """One check the engine ran. ``id`` is a stable slug (the mutation tests name checks by
    it); ``ks`` the explicit K it covered (EXPLICIT checks); ``decisive`` marks the checks
    the claim's proof level rests on."""

    id: str
    what: str
    method: str
    passed: bool
    detail: str = ""
    decisive: bool = False
    ks: tuple[int, ...] = ()


def level_of(checks: Sequence[Check], refutes: bool = False) -> str:
    """The proof level earned by the decisive checks: ``symbolic K`` if all are symbolic,
    ``K = a..b`` if the weakest is explicit, ``numeric`` if one is numeric, and
    ``rests on the paper`` when there is none. A refutation reports ``refuted`` when its
    decisive checks pass (the counterexample stands)."""
    decisive = [c for c in checks if c.decisive]
    if not decisive:
        return PAPER
    if not all(c.passed for c in decisive):
        return "not established (a decisive check failed)"
    if refutes:
        return REFUTED
    methods = {c.method for c in decisive}
    suffix = PROSE_SUFFIX if PROSE in methods else ""
    methods.discard(PROSE)
    if not methods:
        return "lemma in prose"
    if NUMERIC in methods:
        return NUMERIC + suffix
    if EXPLICIT in methods:
        ks = sorted({k for c in decisive if c.method == EXPLICIT for k in c.ks})
        return (f"K = {ks[0]}..{ks[-1]}" if len(ks) > 1 else f"K = {ks[0]}") + suffix
    return SYMBOLIC + suffix


def prose_lemmas(checks: Sequence["Check"]) -> list["Check"]:
    """The decisive steps argued in prose (what keeps a level below "symbolic K")."""
    return [c for c in checks if c.decisive and c.method == PROSE]


@dataclass(frozen=True)
class Derivation:
    """What the engine derived for one statement, with its checks."""

    id: str                    # "3", "8a", ...
    title: str
    steps: tuple[Step, ...]
    checks: tuple[Check, ...]
    scope: str                 # one line: exactly what is proved, for which K and dynamics
    findings: tuple[str, ...] = field(default=())  # where the paper's statement differs
    refutes: bool = False      # the statement is the paper's, and the checks refute it

    @property
    def level(self) -> str:
        return level_of(self.checks, self.refutes)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def failed(self) -> list[str]:
        return [c.id for c in self.checks if not c.passed]

    def check(self, check_id: str) -> Check:
        return next(c for c in self.checks if c.id == check_id)

    def _repr_markdown_(self) -> str:
        """Jupyter shows a derivation as its Markdown document (LaTeX math in $$…$$)."""
        from ..claims import get_claim
        from .render import to_markdown
        return to_markdown(self, get_claim(self.id))


class Recorder:
    """Collects steps and checks while a derivation runs."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.checks: list[Check] = []
        self.findings: list[str] = []

    def step(self, text: str, *math: sp.Basic) -> None:
        """Record a step; with empty ``text`` the math continues the previous step."""
        if not text and self.steps:
            last = self.steps[-1]
            self.steps[-1] = Step(last.text, last.math + tuple(math))
            return
        self.steps.append(Step(" ".join(text.split()), tuple(math)))

    def check(self, check_id: str, what: str, method: str, passed: bool, detail: str = "",
              *, decisive: bool = False, ks: Sequence[int] = ()) -> bool:
        if any(c.id == check_id for c in self.checks):
            raise ValueError(f"duplicate check id {check_id!r}")
        ks = tuple(ks)
        if method == EXPLICIT and not detail:
            detail = k_range_text(ks)
        self.checks.append(Check(check_id, " ".join(what.split()), method, bool(passed),
                                 detail, decisive, ks))
        return bool(passed)

    def lemma(self, lemma_id: str, statement: str, *, decisive: bool = True) -> None:
        """A step argued in prose, not derived: it cannot fail, so it is no check; when
        decisive it lowers the level to "... + lemma in prose"."""
        self.check(lemma_id, statement, PROSE, True, "argued in prose, not derived",
                   decisive=decisive)

    def finding(self, text: str) -> None:
        self.findings.append(" ".join(text.split()))

    def result(self, claim_id: str, title: str, scope: str,
               refutes: bool = False) -> Derivation:
        return Derivation(claim_id, title, tuple(self.steps), tuple(self.checks),
                          " ".join(scope.split()), tuple(self.findings), refutes)


def eq(lhs, rhs) -> sp.Eq:
    """An unevaluated equation for display (matrices allowed on either side)."""
    def fix(x):
        return sp.ImmutableMatrix(x) if isinstance(x, sp.MatrixBase) else x
    return sp.Eq(fix(lhs), fix(rhs), evaluate=False)


# --- exact zero tests -----------------------------------------------------------------

def is_zero(expr: sp.Expr) -> bool:
    """Decide ``expr == 0`` for a rational function of symbols and exponentials: combine
    over one denominator, then expand the numerator with exponentials merged. Exact (no
    floating point); for the expressions built here it is complete, because every
    exponential is ``exp`` of a linear form in the logits and merging makes them monomials."""
    numerator, _ = sp.fraction(sp.together(sp.expand(expr)))
    return sp.expand(sp.powsimp(sp.expand(numerator), combine="exp")) == 0


def is_zero_rational(expr: sp.Expr, variables: Sequence[sp.Symbol]) -> bool:
    """Decide ``expr == 0`` for an expression rational in the ``exp(z_i)``: with positive
    symbols ``x_i = e^{z_i}`` it becomes a rational function whose numerator must expand
    to 0."""
    xs = [sp.Symbol(f"x_{i + 1}", positive=True) for i in range(len(variables))]

    def monomial(arg):
        arg = sp.expand(arg)
        coeffs = [arg.coeff(v) for v in variables]
        rest = sp.expand(arg - sp.Add(*[c * v for c, v in zip(coeffs, variables)]))
        return sp.exp(rest) * sp.Mul(*[x ** c for x, c in zip(xs, coeffs)])

    rational = expr.replace(sp.exp, monomial)
    if rational.has(*variables):
        raise ValueError("expression is not rational in exp(z_i)")
    numerator, _ = sp.fraction(sp.together(rational))
    return sp.expand(numerator) == 0


def matrix_expr_is_zero(expr) -> bool:
    """Decide ``expr == 0`` for a sum of products of matrix symbols (symbolic shapes):
    expand, collect the scalar coefficient of each matrix monomial, and require each to
    vanish (coefficients are rational in K and the scalars)."""
    expr = sp.expand(expr)
    if expr == 0 or getattr(expr, "is_ZeroMatrix", False):
        return True
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    coefficients: dict = {}
    for term in terms:
        coefficient, monomial = term.as_coeff_mmul()
        coefficients[monomial] = coefficients.get(monomial, 0) + coefficient
    return all(sp.cancel(sp.expand(c)) == 0 for c in coefficients.values())


def as_scalar(expr, values: dict) -> sp.Expr:
    """A sum of 1×1 matrix products (``AᵀA − 2Aᵀe``...) as a scalar, each product replaced by
    its value from ``values`` (keyed by the product, e.g. ``A.T * A``)."""
    expr = sp.expand(expr)
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    total = sp.Integer(0)
    for term in terms:
        coefficient, monomial = term.as_coeff_mmul()
        total += coefficient * values[monomial]
    return total


# --- inequalities: nonnegativity certificates ------------------------------------------

def coefficients_nonnegative(expr: sp.Expr, variables: Sequence[sp.Symbol],
                             strict: bool = False,
                             positive: Sequence[sp.Symbol] | None = None) -> bool:
    """``expr`` as a polynomial in ``variables`` (each a quantity known to be ≥ 0) has every
    coefficient nonnegative, so ``expr ≥ 0``. A coefficient may be symbolic (γ_k², a
    positive symbol) when sympy decides its sign; an undecided or negative one fails. With
    ``strict`` some positive coefficient must multiply a monomial in the ``positive``
    variables only (default: all of them, declared > 0 by the caller): then ``expr > 0``."""
    expr = sp.expand(expr)
    try:
        poly = sp.Poly(expr, *variables)
    except sp.PolynomialError:
        return False
    coeffs = poly.coeffs()
    if not coeffs or poly.is_zero:
        return False if strict else True
    nonneg = all(bool(sp.expand(c).is_nonnegative) for c in coeffs)
    if not strict:
        return nonneg
    allowed = set(variables if positive is None else positive)
    return nonneg and any(bool(sp.expand(c).is_positive)
                          and all(e == 0 or v in allowed for v, e in zip(variables, m))
                          for m, c in poly.terms())


def certify_nonnegative(expr: sp.Expr, certificate: sp.Expr, meaning: dict,
                        strict: bool = False) -> bool:
    """``expr ≥ 0`` by a certificate: a polynomial in symbols ``u`` (each standing for a
    quantity known to be ≥ 0, ``meaning[u]`` its expression) whose coefficients are all
    nonnegative, and which equals ``expr`` once every ``u`` is replaced by its meaning
    (decided exactly by :func:`is_zero`). Both parts can fail: a wrong certificate, or one
    with a negative coefficient. The hypotheses that each ``meaning[u]`` is ≥ 0 are not
    checked here: they are asserted only in the calling check's text (and derived, where
    they are, by other checks)."""
    if not coefficients_nonnegative(certificate, list(meaning), strict):
        return False
    return is_zero(sp.expand(expr - certificate.xreplace(meaning)))


def simplex_nonnegative(expr: sp.Expr, simplex: Sequence[sp.Symbol],
                        extras: dict | None = None, max_power: int = 6) -> bool:
    """``expr ≥ 0`` wherever the ``simplex`` variables are ≥ 0 and sum to 1 (and each symbol
    of ``extras`` is ≥ 0; ``extras`` maps it to the degree it counts for): Pólya's
    certificate. Homogenise with ``1 = Σ simplex``, multiply by ``(Σ simplex)^N`` for
    N = 0..max_power, and succeed when every coefficient is nonnegative. Sound (a
    polynomial with nonnegative coefficients is ≥ 0 on the orthant); it fails on a
    polynomial that is negative somewhere on the simplex."""
    extras = dict(extras or {})
    variables = list(simplex) + list(extras)
    total = sp.Add(*simplex)
    poly = sp.Poly(sp.expand(expr), *variables)

    def degree(monomial):
        return (sum(monomial[:len(simplex)])
                + sum(e * d for e, d in zip(monomial[len(simplex):], extras.values())))
    top = max(degree(m) for m in poly.monoms()) if poly.monoms() else 0
    homogeneous = sp.Add(*[c * sp.Mul(*[v ** e for v, e in zip(variables, m)])
                           * total ** (top - degree(m)) for m, c in poly.terms()])
    for power in range(max_power + 1):
        if coefficients_nonnegative(homogeneous * total ** power, variables):
            return True
    return False


# --- exact orthonormal frames ---------------------------------------------------------

def cayley_orthonormal(d: int, K: int, seed: int) -> sp.Matrix:
    """A d×K matrix with exactly orthonormal rational columns: the first K columns of the
    Cayley transform ``(I − S)(I + S)^{-1}`` of a random rational skew-symmetric S."""
    rng = random.Random(seed)
    S = sp.zeros(d, d)
    for i in range(d):
        for j in range(i + 1, d):
            S[i, j] = sp.Rational(rng.randint(-5, 5), rng.randint(1, 4))
            S[j, i] = -S[i, j]
    R = (sp.eye(d) - S) * (sp.eye(d) + S).inv()
    return R[:, :K]


# --- random high-precision checks -----------------------------------------------------

def mp_points(count: int, dims: int, seed: int, low: float = -3.0,
              high: float = 3.0) -> list[list[mpmath.mpf]]:
    """Deterministic random points at ``MP_DPS`` digits."""
    rng = random.Random(seed)
    with mpmath.workdps(MP_DPS):
        return [[mpmath.mpf(rng.uniform(low, high)) for _ in range(dims)]
                for _ in range(count)]


def mp_max_residual(residual: Callable[..., object], points: Iterable[Sequence]) -> mpmath.mpf:
    """Largest ``|residual(*point)|`` over the points, at ``MP_DPS`` digits."""
    worst = mpmath.mpf(0)
    with mpmath.workdps(MP_DPS):
        for point in points:
            worst = max(worst, abs(mpmath.mpmathify(residual(*point))))
    return worst


@functools.lru_cache(maxsize=None)
def sym_K() -> sp.Symbol:
    """The number of features as a Symbol: a positive integer (K ≥ 2 where it matters)."""
    return sp.Symbol("K", integer=True, positive=True)


def k_range_text(ks: Sequence[int]) -> str:
    return f"K = {ks[0]}..{ks[-1]}" if len(ks) > 1 else f"K = {ks[0]}"
