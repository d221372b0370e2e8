"""Shared definitions of the symbolic engine and the types a derivation returns.

The model (MODEL.md, "Setting") in sympy, in the logit coordinates
``z[n, k] = f_nᵀ Q f_k`` (column ``k`` = query ``f_k``):

- ``attention(column)``: the softmax down one column, ``a_n = e^{z_n} / Σ_m e^{z_m}``;
- ``conditional_error(column, k)``: ``e_k = ½ Σ_n (a_n − δ_{nk})²``;
- ``loss(Z)``: ``L = Σ_k e_k / K``.

Nothing here states a claim; the claim modules derive from these.

Proof statuses (the registry's ``proof`` field): ``SYMBOLIC`` when sympy proves the claim
for a symbolic number of features K, ``EXPLICIT`` when it is proved for each explicit K in
a stated range, ``NUMERIC`` when only numbers support it, ``PAPER`` when the claim rests on
the paper's argument, which the engine does not reproduce.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import mpmath
import sympy as sp

SYMBOLIC = "symbolic K"
EXPLICIT = "explicit K"
NUMERIC = "numeric only"
PAPER = "rests on the paper"

#: The explicit range every claim that can be checked per K is checked on.
K_RANGE = tuple(range(2, 9))
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
    """One check the engine ran: what, how (``SYMBOLIC``, ``EXPLICIT``, ``NUMERIC``), and
    whether it passed; ``detail`` says on what (range of K, number of points)."""

    what: str
    method: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Derivation:
    """What the engine derived for one claim, with its checks and its proof status."""

    number: int
    title: str
    steps: tuple[Step, ...]
    checks: tuple[Check, ...]
    status: str          # one of SYMBOLIC, EXPLICIT, NUMERIC, PAPER
    scope: str           # one line: exactly what is proved, for which K and dynamics
    findings: tuple[str, ...] = field(default=())  # where the paper's statement differs

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)


class Recorder:
    """Collects steps and checks while a derivation runs."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.checks: list[Check] = []
        self.findings: list[str] = []

    def step(self, text: str, *math: sp.Basic) -> None:
        self.steps.append(Step(" ".join(text.split()), tuple(math)))

    def check(self, what: str, method: str, passed: bool, detail: str = "") -> bool:
        self.checks.append(Check(what, method, bool(passed), detail))
        return bool(passed)

    def finding(self, text: str) -> None:
        self.findings.append(" ".join(text.split()))

    def result(self, number: int, title: str, status: str, scope: str) -> Derivation:
        return Derivation(number, title, tuple(self.steps), tuple(self.checks), status,
                          " ".join(scope.split()), tuple(self.findings))


def eq(lhs, rhs) -> sp.Eq:
    """An unevaluated equation for display (matrices allowed on either side)."""
    def fix(x):
        return sp.ImmutableMatrix(x) if isinstance(x, sp.MatrixBase) else x
    return sp.Eq(fix(lhs), fix(rhs), evaluate=False)


# --- the model's definitions ----------------------------------------------------------

def attention(column: Sequence[sp.Expr]) -> list[sp.Expr]:
    """Softmax down one column of logits: ``a_n = e^{z_n} / Σ_m e^{z_m}``."""
    weights = [sp.exp(x) for x in column]
    total = sp.Add(*weights)
    return [w / total for w in weights]


def conditional_error(column: Sequence[sp.Expr], k: int) -> sp.Expr:
    """``e_k = ½‖Σ_n a_n f_n − f_k‖² = ½ Σ_n (a_n − δ_{nk})²`` (orthonormal features)."""
    a = attention(column)
    return sp.Rational(1, 2) * sp.Add(*[(a[n] - (1 if n == k else 0)) ** 2
                                        for n in range(len(a))])


def loss(Z: sp.Matrix) -> sp.Expr:
    """``L = Σ_k e_k / K`` with ``e_k`` computed from column ``k`` of ``Z``."""
    K = Z.shape[1]
    return sp.Add(*[conditional_error(list(Z[:, k]), k) for k in range(K)]) / K


def logits(K: int, name: str = "z") -> sp.Matrix:
    """A K×K matrix of real symbols ``z_{n,k}`` (1-based in the names)."""
    return sp.Matrix(K, K, lambda n, k: sp.Symbol(f"{name}_{{{n + 1},{k + 1}}}", real=True))


def column_symbols(K: int, name: str = "z") -> list[sp.Symbol]:
    return [sp.Symbol(f"{name}_{n + 1}", real=True) for n in range(K)]


def exp_to_positive(expr: sp.Expr, variables: Sequence[sp.Symbol]) -> tuple[sp.Expr, list]:
    """Replace every ``exp(Σ c_i z_i + r)`` by ``e^r Π x_i^{c_i}`` with positive symbols
    ``x_i = e^{z_i}``, so that identities among exponentials of the logits become
    identities among rational functions of the ``x_i``."""
    xs = [sp.Symbol(f"x_{i + 1}", positive=True) for i in range(len(variables))]

    def monomial(arg):
        arg = sp.expand(arg)
        coeffs = [arg.coeff(v) for v in variables]
        rest = sp.expand(arg - sp.Add(*[c * v for c, v in zip(coeffs, variables)]))
        return sp.exp(rest) * sp.Mul(*[x ** c for x, c in zip(xs, coeffs)])

    return expr.replace(sp.exp, monomial), xs


def is_zero_rational(expr: sp.Expr, variables: Sequence[sp.Symbol]) -> bool:
    """Decide ``expr == 0`` exactly for an expression rational in the ``exp(z_i)``: after
    the substitution the numerator of the combined fraction must expand to 0."""
    rational, _ = exp_to_positive(expr, variables)
    if rational.has(*variables):
        raise ValueError("expression is not rational in exp(z_i)")
    numerator, _ = sp.fraction(sp.together(rational))
    return sp.expand(numerator) == 0


def matrix_expr_is_zero(expr) -> bool:
    """Decide ``expr == 0`` for a sum of products of matrix symbols (symbolic shapes):
    expand, collect the scalar coefficient of each matrix monomial, simplify each."""
    expr = sp.expand(expr)
    if expr == 0 or getattr(expr, "is_ZeroMatrix", False):
        return True
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    coefficients: dict = {}
    for term in terms:
        coefficient, monomial = term.as_coeff_mmul()
        coefficients[monomial] = coefficients.get(monomial, 0) + coefficient
    return all(sp.simplify(c) == 0 for c in coefficients.values())


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


def mp_lambdify(variables: Sequence[sp.Symbol], expr: sp.Expr) -> Callable:
    return sp.lambdify(variables, expr, modules="mpmath")


@functools.lru_cache(maxsize=None)
def sym_K() -> sp.Symbol:
    return sp.Symbol("K", integer=True, positive=True)


def k_range_text(ks: Sequence[int]) -> str:
    return f"K = {ks[0]}..{ks[-1]}" if len(ks) > 1 else f"K = {ks[0]}"
