"""Claims 13a–13d, the theory for overlapping features (static part): unit-norm features
F = [f_1 … f_K] that need not be orthogonal, Gram matrix G = FᵀF (positive definite, unit
diagonal), logits z = FᵀQF.

* 13a — the population loss: query f_k has e_k = ½‖F a_k − f_k‖² = ½(a_k − δ_k)ᵀG(a_k − δ_k),
  a_k the column softmax of z (claim 1's grouping, which never uses orthogonality, and
  E_w[wwᵀ] = I with FᵀF = G).
* 13b — what replaces the conservation law: a GD step moves z by −ηG·g·G with g = ∂L/∂z,
  whose columns sum to 0 (shift invariance of the softmax). With Q = VWVᵀ the coefficients
  move by ΔW = −ηg: the law holds for W. It holds for z_V itself when every row of G has
  the same sum (every equal overlap among them), and fails otherwise (an exact
  counterexample, K = 3).
* 13c — the T1 state for equal overlaps G = (1−ρ)I + ρ11ᵀ: G acts on the error
  directions as (1−ρ)I, so e_k = (1−ρ)e_k(orthonormal) and, on the symmetric ray where
  g has zero row and column sums, G·g·G = (1−ρ)²g: pretraining is the orthonormal one at
  ε/(1−ρ) with step η(1−ρ)³. K = 2: α* = ½ln((1−q*)/q*), q* = √(ε/(1−ρ)).
* 13d — the OOD weights at T1: Q = VWVᵀ, so z_U = Mᵀ G_V⁻¹ z_V G_V⁻¹ M (M = VᵀU); equal
  overlaps give Kα/((K−1)(1−ρ)²)(MᵀM − bbᵀ); M = G_VΓ (oc.overlap, oc.gram) gives
  z_U = Γz_VΓ; G_V = I is claim 5.

Each derivation reuses the orthonormal ones' machinery (claim 1's grouping, claim 2's
matrix-derivative step, claim 3's ray gradient, α* and T1 logits, claim 5's form at
G_V = I). The numeric checks
run full-Q gradient descent on the explicit vectors (:mod:`oodcalc.simulate.population`,
no Gram formula inside it).
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from .. import theory
from ..symbolic.core import (EXPLICIT, NUMERIC, SYMBOLIC, Recorder, as_scalar, eq, is_zero,
                             matrix_expr_is_zero, sym_K)
from ..symbolic.model import attention
from . import claim1_attention as c1

__all__ = [
    "CLAIMED", "G_UNEQUAL", "NUMERIC_CLAIMED", "T1_CASES", "balanced_prompts",
    "check_conservation", "check_loss", "check_ood", "check_t1", "conservation_geometries",
    "derive_conservation", "derive_loss", "derive_ood", "derive_t1", "ood_geometries",
]


#: The counterexample of 13b (exact): ⟨v_1, v_2⟩ = ½, v_3 orthogonal to both.
G_UNEQUAL = ((1, sp.Rational(1, 2), 0), (sp.Rational(1, 2), 1, 0), (0, 0, 1))

CLAIMED = {
    # 13a: e_k from the attention vector A, the query's unit vector e and G (matrices)
    "error": lambda A, e, G: sp.Rational(1, 2) * (A - e).T * G * (A - e),
    # 13a: the same as a squared distance in R^d, F the features
    "distance": lambda F, A, e: sp.Rational(1, 2) * (F * A - F * e).T * (F * A - F * e),
    # 13b: e_k = ½(a − δ_k)ᵀG(a − δ_k) expanded, a_n = e^{z_n}/D: from Σ_nΣ_m e^{z_n}G_nm e^{z_m},
    # Σ_n e^{z_n}G_nk, D and G_kk
    "error-sums": lambda quad, lin, D, G_kk: sp.Rational(1, 2) * (quad / D ** 2 - 2 * lin / D
                                                                 + G_kk),
    # 13b: one GD step on Q seen in the logits of the same features
    "logit-step": lambda eta, G, g: -eta * G * g * G,
    # 13b: the step of the coefficients W of Q = VWVᵀ
    "coefficient-step": lambda eta, g: -eta * g,
    # 13b: when the orthonormal law holds for z_V (a predicate on an explicit Gram matrix)
    "law-holds": lambda G: len({sp.nsimplify(sum(G.row(i))) for i in range(G.rows)}) == 1,
    # 13b: the common row sum of equal overlaps G = (1−ρ)I + ρ11ᵀ
    "row-sum": lambda rho, K: 1 - rho + K * rho,
    # 13b: the column sums of Δz_V/η at the first step from Q = 0, G = G_UNEQUAL
    "counterexample-sums": (sp.Rational(7, 216), sp.Rational(7, 216), sp.Rational(-7, 162)),
    # 13c: e_k(G) / e_k(orthonormal) for equal overlaps ρ
    "error-scale": lambda rho: 1 - rho,
    # 13c: the power of (1−ρ) in the step on the symmetric ray
    "step-power": 3,
    # 13c: the orthonormal stopping level that the rule e_k <= ε becomes
    "eps-scale": lambda eps, rho: eps / (1 - rho),
    # 13c, K = 2: e_k on the ray from q = a_2 (the attention on the other feature)
    "k2-error": lambda rho, q: (1 - rho) * q ** 2,
    # 13c, K = 2: α* from q*, and q* from ε, ρ
    "k2-alpha": lambda q: sp.log((1 - q) / q) / 2,
    "k2-q": lambda eps, rho: sp.sqrt(eps / (1 - rho)),
    # 13d: one pretraining step on the coefficients of Q = VW_tVᵀ
    "span-step": lambda W, eta, g: W - eta * g,
    # 13d: the OOD logits from z_V, G_V and M (matrix expressions)
    "ood-start": lambda M, G, zV: M.T * G ** -1 * zV * G ** -1 * M,
    # 13d: M = G_VΓ (oc.overlap, oc.gram): the OOD logits from z_V and Γ
    "overlap-shift": lambda Gam, zV: Gam * zV * Gam,
    # 13d: equal overlaps at T1, from α, K, ρ, M and b = Mᵀ1/√K
    "equal-overlap": lambda alpha, K, rho, M, b: (K * alpha / ((K - 1) * (1 - rho) ** 2)
                                                  * (M.T * M - b * b.T)),
}


def _error_np(z: np.ndarray, G: np.ndarray) -> np.ndarray:
    """13a's e_k = ½(a_k − δ_k)ᵀG(a_k − δ_k) from the logits, numerically."""
    a = np.exp(z - z.max(axis=0))
    a /= a.sum(axis=0)
    r = a - np.eye(z.shape[0])
    return 0.5 * np.einsum("nk,nm,mk->k", r, G, r)


def _coefficients_np(z: np.ndarray, G: np.ndarray) -> np.ndarray:
    """W = G⁻¹zG⁻¹ (stacks): the coefficients of Q = VWVᵀ from z = VᵀQV."""
    Gi = np.linalg.inv(G)
    return Gi @ z @ Gi


def _equal_rows_np(G: np.ndarray, tol: float = 1e-12) -> bool:
    rows = G.sum(axis=1)
    return bool(np.ptp(rows) <= tol)


def _ood_start_np(zV: np.ndarray, G: np.ndarray, M: np.ndarray) -> np.ndarray:
    Gi = np.linalg.inv(G)
    return M.T @ Gi @ zV @ Gi @ M


def _equal_overlap_np(M: np.ndarray, alpha: float, rho: float) -> np.ndarray:
    K = M.shape[1]
    b = M.T @ np.ones(K) / math.sqrt(K)
    return K * alpha / ((K - 1) * (1 - rho) ** 2) * (M.T @ M - np.outer(b, b))


NUMERIC_CLAIMED = {
    "error": _error_np,
    "coefficients": _coefficients_np,
    "law_holds": _equal_rows_np,
    "first_step": (7 / 216, 7 / 216, -7 / 162),
    "alpha_star": lambda K, eps, rho: theory.alpha_star(K, eps / (1 - rho)),
    "step_power": 3,
    "eps_scale": lambda rho: 1 - rho,
    "ood_start": _ood_start_np,
    "equal_overlap": _equal_overlap_np,
    "overlap_shift": lambda zV, gamma: np.outer(gamma, gamma) * zV,
    # 13c's statement: full-Q GD's T1 (ε = 0.01, η = 0.1), K = 2 by ρ, and the unequal case
    "k2_T1": {-0.5: 150, 0.0: 357, 0.5: 1575, 0.8: 10869},
    "unequal_T1": 2655,
}


# --- exact features and Gram errors for the explicit backstops ----------------------------

#: exact rational unit vectors, not orthogonal: f_1·f_2 = 3/5, f_2·f_3 = 12/25, f_1·f_3 = 0
_EXACT_F = sp.Matrix([[1, sp.Rational(3, 5), 0], [0, sp.Rational(4, 5), sp.Rational(3, 5)],
                      [0, 0, sp.Rational(4, 5)]])


def _gram_error(column, k: int, G: sp.Matrix) -> sp.Expr:
    """e_k = ½(a − δ_k)ᵀG(a − δ_k) on one explicit column of logits."""
    a = sp.Matrix(attention(list(column)))
    r = a - sp.eye(len(column))[:, k]
    return (r.T * G * r)[0] / 2


def _column_error(xs, k: int, G: sp.Matrix, claimed: dict) -> sp.Expr:
    """e_k of one column as a rational function of x_n = e^{z_n} (positive symbols):
    claimed["error-sums"], the definition over one denominator."""
    K = len(xs)
    quad = sp.Add(*[xs[n] * G[n, m] * xs[m] for n in range(K) for m in range(K)])
    lin = sp.Add(*[xs[n] * G[n, k] for n in range(K)])
    return claimed["error-sums"](quad, lin, sp.Add(*xs), G[k, k])


def _column_derivatives(K: int, k: int, G: sp.Matrix, claimed: dict):
    """``(xs, [∂e_k/∂z_n])``: ∂/∂z_n = x_n ∂/∂x_n (chain rule, x_n = e^{z_n})."""
    xs = sp.symbols(f"x1:{K + 1}", positive=True)
    e_k = _column_error(xs, k, G, claimed)
    return xs, [xs[n] * sp.diff(e_k, xs[n]) for n in range(K)]


def _gradient(values: sp.Matrix, G: sp.Matrix, claimed: dict = CLAIMED) -> sp.Matrix:
    """g = ∂L/∂z of L = Σ_k e_k/K at the logits ``values`` (K×K, any expressions),
    differentiated from the definition: column k of L is e_k/K alone, so each column is
    differentiated on its own."""
    K = values.shape[0]
    out = sp.zeros(K, K)
    for k in range(K):
        xs, derivatives = _column_derivatives(K, k, G, claimed)
        at = {x: sp.exp(v) for x, v in zip(xs, values[:, k])}
        for n in range(K):
            out[n, k] = derivatives[n].xreplace(at) / K
    return out


def _numerator_zero(expr: sp.Expr) -> bool:
    """A rational function is 0: its numerator over one denominator expands to 0."""
    return sp.expand(sp.fraction(sp.together(expr))[0]) == 0


def _symmetric_symbols(K: int, name: str = "G") -> tuple[sp.Matrix, dict]:
    """A symmetric K×K matrix of symbols with unit diagonal (a Gram matrix of unit
    vectors), and its symbols by position (i < j)."""
    sym = {}
    for i in range(K):
        for j in range(i + 1, K):
            sym[(i, j)] = sp.Symbol(f"{name}_{{{i + 1}{j + 1}}}", real=True)
    return sp.Matrix(K, K, lambda i, j: 1 if i == j else sym[(min(i, j), max(i, j))]), sym


# === 13a: the population loss ============================================================

def derive_loss(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()
    grouping = c1.grouped_attention(c1.CLAIMED | {k: claimed[k] for k in ("grouped",
                                                                          "population")
                                                  if k in claimed})
    r.step("A prompt has N tokens, each one of the unit-norm features f_1..f_K (not "
           "necessarily orthogonal), a task w ~ N(0, I_d), labels y = wᵀx and a query f_k. "
           "Token i scores x_iᵀQf_k; every token equal to f_n scores z_n = f_nᵀQf_k, "
           "whatever the overlaps, so claim 1's grouping applies verbatim: sympy sums the "
           "token softmax over the c_n tokens of each feature (symbolic K and counts):",
           eq(grouping["block"], grouping["block"].doit()),
           eq(sp.Symbol("Attn_n"), grouping["grouped"]))
    r.check("grouping", "the token softmax summed over each feature's tokens is "
            "c_n e^{z_n}/Σ_m c_m e^{z_m} (claim 1's derivation; the scores alone enter, so "
            "no orthogonality is used; symbolic K, symbolic counts)", SYMBOLIC,
            grouping["grouping"], decisive=True)
    r.step("Balanced counts (the population limit, or a prompt with every feature equally "
           "often) cancel:", eq(sp.Symbol("Attn_n"), grouping["balanced"]))
    r.check("balanced", "c_n = N/K cancels: a_k is the column softmax of z (symbolic K, N)",
            SYMBOLIC, grouping["balanced_ok"], decisive=True)

    # The error, matrix symbols: E[wwᵀ] = I and FᵀF = G.
    d = sp.Symbol("d", integer=True, positive=True)
    F = sp.MatrixSymbol("F", d, K)
    G = sp.MatrixSymbol("G", K, K)
    A = sp.MatrixSymbol("a_k", K, 1)
    e_k = sp.MatrixSymbol("delta_k", K, 1)
    ww = sp.MatrixSymbol("Sigma_w", d, d)
    resid = A - e_k
    squared = (resid.T * F.T * ww * F * resid).expand()
    squared = squared.subs(ww, sp.Identity(d)).doit().subs(F.T * F, G).doit().expand()
    r.step("The prediction is ŷ = Σ_n Attn_n wᵀf_n = wᵀFa_k and the target wᵀf_k = wᵀFδ_k. "
           "With E[wwᵀ] = I_d and the Gram matrix G = FᵀF (no longer I) sympy reduces "
           "E_w[(ŷ − wᵀf_k)²] to", eq(sp.Symbol("E_w"), squared))
    stated = claimed["error"](A, e_k, G)
    r.check("error", "½E_w(ŷ − wᵀf_k)² = ½(a_k − δ_k)ᵀG(a_k − δ_k) (matrix symbols, "
            "symbolic K and d)", SYMBOLIC,
            matrix_expr_is_zero((squared / 2 - stated).expand()), decisive=True)
    distance = claimed["distance"](F, A, e_k).expand().subs(F.T * F, G).doit().expand()
    r.check("distance", "½‖Fa_k − f_k‖² (the squared distance of the prediction direction "
            "from the query, in R^d) is the same quadratic form with FᵀF = G (matrix "
            "symbols)", SYMBOLIC,
            matrix_expr_is_zero((distance - stated.expand()).expand()))
    A_k, Qs = sp.symbols("A_k Q", nonnegative=True)
    at_identity = stated.subs(G, sp.Identity(K)).doit().expand()
    scalar = {A.T * A: A_k ** 2 + Qs, A.T * e_k: A_k, e_k.T * A: A_k, e_k.T * e_k: 1}
    value = sp.expand(as_scalar(at_identity, scalar))
    r.step("At G = I, with a_kᵀa_k = A_k² + Σ_{n≠k} A_n², a_kᵀδ_k = A_k, δ_kᵀδ_k = 1 (Q the "
           "sum of the others' squares), it is claim 1's form:",
           eq(sp.Symbol("e_k"), sp.factor(value)))
    r.check("orthonormal", "at G = I the form is claim 1's ½[(1−A_k)² + Σ_{n≠k} A_n²] "
            "(symbolic K)", SYMBOLIC, sp.expand(value - c1.CLAIMED["error"](A_k, Qs)) == 0)

    # Backstop: exact rational features that overlap, E[w_i w_j] = δ_ij monomial by monomial.
    ok = True
    for Kx in (2, 3):
        Fx = _EXACT_F[:, :Kx]
        Gx = Fx.T * Fx
        As = sp.symbols(f"A1:{Kx + 1}", real=True)
        w = sp.symbols(f"w1:{Fx.rows + 1}", real=True)
        for k in range(Kx):
            y = [sum(w[j] * Fx[j, q] for j in range(Fx.rows)) for q in range(Kx)]
            residual = sp.expand((sp.Add(*[As[q] * y[q] for q in range(Kx)]) - y[k]) ** 2)
            poly = sp.Poly(residual, *w)
            expectation = sum(coef for mon, coef in poly.terms()
                              if all(p in (0, 2) for p in mon))
            stated_x = 2 * claimed["error"](sp.Matrix(As), sp.eye(Kx)[:, k], Gx)[0]
            ok &= sp.expand(expectation - stated_x) == 0
    r.check("error-explicit", "the error with exact rational unit features that overlap "
            "(f_1·f_2 = 3/5, f_2·f_3 = 12/25) and E[w_i w_j] = δ_ij, monomial by monomial, "
            "every query", EXPLICIT, ok, ks=(2, 3))

    from ..model import errors_and_gradient as gram_errors
    from ..simulate.population import errors_and_gradient as full_q
    rng = np.random.default_rng(13)
    worst = 0.0
    for Kx, dx in ((2, 3), (3, 5), (5, 6)):
        for _ in range(3):
            Fn = rng.standard_normal((dx, Kx))
            Fn /= np.linalg.norm(Fn, axis=0)
            Qn = rng.normal(scale=2.0, size=(dx, dx))
            worst = max(worst, float(np.abs(gram_errors(Fn.T @ Qn @ Fn, Fn.T @ Fn)[0]
                                            - full_q(Qn, Fn)[0]).max()))
    r.check("matches-engines", "oodcalc.model.errors_and_gradient with G (the Gram engine) "
            "equals the full-Q simulator's ½‖Fa_k − f_k‖² on the explicit vectors", NUMERIC,
            worst < 1e-12, "random unit-norm F, K = 2, 3, 5, 3 random Q each, max |difference| "
            "< 1e-12")
    return r.result("13a", "Population loss with overlapping features",
                    "Symbolic K: claim 1's grouping and balanced limit (they use the scores "
                    "only) and the error ½(a_k − δ_k)ᵀG(a_k − δ_k) from E[wwᵀ] = I and "
                    "FᵀF = G with matrix symbols; claim 1's form at G = I.")


# --- 13a: numeric check ---------------------------------------------------------------

def _unequal_geometry():
    from .. import geometry as geo
    return geo.gram(np.array(G_UNEQUAL, dtype=float), [1.0, 0.5, -0.5])


def balanced_prompts(F: np.ndarray, copies: int, B: int, rng: np.random.Generator):
    """``B`` prompts over ``F`` (d × K) with every feature ``copies`` times (shuffled),
    queries cycling over the features, tasks w ~ N(0, I_d), labels y = wᵀx."""
    from ..simulate.prompts import Prompts
    d, K = F.shape
    tokens = np.array([rng.permutation(np.repeat(np.arange(K), copies)) for _ in range(B)])
    q = np.arange(B) % K
    w = rng.standard_normal((B, d))
    X = np.transpose(F[:, tokens], (1, 2, 0))            # (B, N, d)
    y = np.einsum("bnd,bd->bn", X, w)
    xq = F.T[q]
    return Prompts(X, xq, y, np.einsum("bd,bd->b", xq, w), q, tokens), w


def check_loss(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..checks import EXACT_TOL, Point, PopulationCheck, mean_se, monte_carlo_check
    from ..setting import Protocol
    from ..simulate.population import errors_and_gradient
    from ..simulate.prompts import sampled_loss_and_gradient
    rng = np.random.default_rng(131)
    formula_gap, prompt_gap, lines = 0.0, 0.0, []
    # the unequal overlaps of 13b's counterexample (K = 3) and its circulant (K = 4)
    runs = {"G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]]": _unequal_geometry().V,
            "K = 4, circulant overlaps 0.3, −0.2": _circulant_V()}
    for name, V in runs.items():
        G, K = V.T @ V, V.shape[1]
        _, T1, path = ctx.population_path(V, Protocol())
        cases = [path[t] for t in sorted({0, T1 // 4, T1 // 2, T1})]
        cases += [rng.normal(scale=3.0, size=path[0].shape) for _ in range(2)]
        for Q in cases:
            z = V.T @ Q @ V
            formula = claimed["error"](z, G)
            formula_gap = max(formula_gap, float(np.abs(formula - errors_and_gradient(Q, V)[0])
                                                 .max()))
            a = np.exp(z - z.max(axis=0))
            a /= a.sum(axis=0)
            for copies in (1, 3):
                P, w = balanced_prompts(V, copies, 60, rng)
                half_sq = sampled_loss_and_gradient(Q, P)[2]
                direct = 0.5 * np.einsum("bd,db->b", w, V @ (a - np.eye(K))[:, P.q]) ** 2
                prompt_gap = max(prompt_gap, float(np.abs(half_sq - direct).max()))
        lines.append(f"{name}: T1 = {T1}, Q^(t) at t = 0, T1/4, T1/2, T1 and 2 random Q")
    worst = max(formula_gap, prompt_gap)
    population = PopulationCheck(
        "½(a_k − δ_k)ᵀG(a_k − δ_k) against the full-Q simulator's ½‖Fa_k − f_k‖², and the "
        "sampled ½(ŷ − y)² of balanced prompts (1 and 3 copies of each feature, shuffled, "
        "60 tasks w each) against ½(wᵀF(a_k − δ_k))², at Q along full-Q GD pretraining "
        "(ε = 0.01, η = 0.1) on two Gram matrices with unequal overlaps, and random Q",
        worst, worst, f"<= {EXACT_TOL:g} (exact identities)", worst <= EXACT_TOL,
        lines + [f"formula vs simulator (a): {formula_gap:.2g}; balanced prompt vs "
                 f"wᵀF(a_k − δ_k): {prompt_gap:.2g}"])

    # Monte Carlo over the task: the mean sampled error of balanced prompts, at the
    # budget's prompt lengths (multiples of K = 4)
    V = _circulant_V()
    G, K = V.T @ V, V.shape[1]
    _, T1, path = ctx.population_path(V, Protocol())
    Q = path[T1 // 4]
    formula = claimed["error"](V.T @ Q @ V, G)
    B = 3000
    points = []
    for N in ctx.budget.Ns:
        if N % K:
            raise ValueError(f"claim 13a: prompt length {N} is no multiple of K = {K}")
        dev = []
        for s in ctx.seeds():
            P, _ = balanced_prompts(V, N // K, B, np.random.default_rng([13, N, s]))
            half_sq = sampled_loss_and_gradient(Q, P)[2]
            per_query = np.bincount(P.q, weights=half_sq, minlength=K) / np.bincount(P.q)
            dev.append(float((per_query - formula).mean()))
        points.append(Point(N, *mean_se(dev), len(dev)))
    prompts = monte_carlo_check(
        f"mean over w ~ N(0, I) of the sampled ½(ŷ − y)² of balanced prompts (every feature "
        f"N/K times, shuffled; {B} prompts per seed, queries cycling) minus "
        f"½(a_k − δ_k)ᵀG(a_k − δ_k), averaged over the queries, at Q^({T1 // 4}) of full-Q GD "
        f"on K = 4 features with circulant overlaps 0.3, −0.2 (e_k = "
        f"{', '.join(f'{x:.4f}' for x in formula)}); seeds [13, N, s]", points)
    return population, prompts, []


# === 13b: what replaces the conservation law ============================================

def _shift_invariance(claimed: dict) -> tuple[sp.Expr, bool]:
    """e_k = ½(a − δ_k)ᵀG(a − δ_k) written with symbolic K (sums over the features, G an
    indexed symmetric array), and whether e_k(z + c1) = e_k(z)."""
    K = sym_K()
    n, m, j = sp.symbols("n m j", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    z, Gi = sp.IndexedBase("z"), sp.IndexedBase("G")
    c = sp.Symbol("c", real=True)
    D = sp.Sum(sp.exp(z[j]), (j, 1, K))
    # the quadratic form expanded: aᵀGa − 2aᵀGδ_k + G_kk, a_n = e^{z_n}/D
    quad = sp.Sum(sp.Sum(sp.exp(z[n]) * Gi[n, m] * sp.exp(z[m]), (m, 1, K)), (n, 1, K))
    lin = sp.Sum(sp.exp(z[n]) * Gi[n, k], (n, 1, K))
    e = claimed["error-sums"](quad, lin, D, Gi[k, k])
    shifted = e.replace(lambda x: isinstance(x, sp.Indexed) and x.base == z, lambda x: x + c)
    return e, sp.simplify(sp.powsimp(sp.expand(shifted - e))) == 0



def _first_step_sums(G: sp.Matrix, claimed: dict) -> sp.Matrix:
    """The column sums of Δz/η = −G·g·G at Q = 0 (uniform attention), g differentiated from
    the definition of e_k: exact rationals."""
    K = G.shape[0]
    g = _gradient(sp.zeros(K, K), G, claimed).applyfunc(sp.nsimplify)
    return sp.ones(1, K) * (-G * g * G)


def derive_conservation(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()
    d = sp.Symbol("d", integer=True, positive=True)
    eta = sp.Symbol("eta", positive=True)
    F, Q = sp.MatrixSymbol("F", d, K), sp.MatrixSymbol("Q", d, d)
    G, g = sp.MatrixSymbol("G", K, K), sp.MatrixSymbol("g", K, K)
    one = sp.MatrixSymbol("1", K, 1)

    grad_Q = sp.Trace(g.T * F.T * Q * F).diff(Q)
    step = (F.T * (-eta * grad_Q) * F).expand().subs(F.T * F, G).doit()
    r.step("L depends on Q only through z = FᵀQF, linearly, so L(Q + dQ) − L(Q) = "
           "tr(gᵀ·Fᵀ·dQ·F) to first order, g = ∂L/∂z. sympy's matrix derivative (claim 2's "
           "step) and one step Q ← Q − η∇_Q L give, with FᵀF = G (symbolic K, d):",
           eq(sp.Symbol("nabla_Q L"), grad_Q), eq(sp.Symbol("Delta z"), step))
    r.check("gd-on-logits", "∇_Q tr(gᵀFᵀQF) = F·g·Fᵀ, and the step moves z by −ηG·g·G when "
            "FᵀF = G (matrix symbols, symbolic K and d)", SYMBOLIC,
            matrix_expr_is_zero((step - claimed["logit-step"](eta, G, g)).expand()),
            decisive=True)

    e, invariant = _shift_invariance(claimed)
    r.step("The columns of g sum to zero. e_k depends on column k of z only through its "
           "softmax a; written with symbolic K (a_n = e^{z_n}/Σ_j e^{z_j}, G any symmetric "
           "array) it is", eq(sp.Symbol("e_k"), e))
    r.check("shift-invariance", "e_k(z + c·1) = e_k(z) for symbolic K and any G (sympy pulls "
            "e^c out of every sum); so Σ_n ∂e_k/∂z_nk = d/dc e_k(z + c·1) = 0 (chain rule) "
            "and 1ᵀg = 0", SYMBOLIC, invariant, decisive=True)
    ok = True
    for Kx in (2, 3):
        Gx, _ = _symmetric_symbols(Kx)
        for k in range(Kx):
            xs, derivatives = _column_derivatives(Kx, k, Gx, claimed)
            a = sp.Matrix(xs) / sp.Add(*xs)
            form = claimed["error"](a, sp.eye(Kx)[:, k], Gx)[0]
            ok &= _numerator_zero(form - _column_error(xs, k, Gx, claimed))
            ok &= _numerator_zero(sp.Add(*derivatives))
    r.check("column-sums-explicit", "on a full column with a symmetric G of free symbols, "
            "every query: the expanded form equals ½(a − δ_k)ᵀG(a − δ_k), and its "
            "derivatives (∂/∂z_n = x_n∂/∂x_n, x_n = e^{z_n}) sum to 0", EXPLICIT, ok,
            ks=(2, 3))
    from ..model import errors_and_gradient as gram_gradient
    rng = np.random.default_rng(21)
    worst = 0.0
    for Kx in (2, 3):
        Gx, where = _symmetric_symbols(Kx)
        free = list(where.values())
        columns = []
        for k in range(Kx):
            xs, derivatives = _column_derivatives(Kx, k, Gx, claimed)
            columns.append(sp.lambdify([*xs, *free], derivatives, "numpy"))
        for _ in range(3):
            Fn = rng.standard_normal((Kx + 2, Kx))
            Fn /= np.linalg.norm(Fn, axis=0)
            Gn = Fn.T @ Fn
            zv = rng.uniform(-3, 3, (Kx, Kx))
            vals = [Gn[i, j] for i, j in where]
            mine = np.array([columns[k](*np.exp(zv[:, k]), *vals) for k in range(Kx)]).T / Kx
            worst = max(worst, float(np.abs(mine - gram_gradient(zv, Gn)[1]).max()))
    r.check("numeric-gradient", "sympy's ∂L/∂z from the definition equals "
            "oodcalc.model.errors_and_gradient with G (the Gram engine's closed form)", NUMERIC,
            worst < 1e-12, "K = 2, 3, random unit-norm features, max |difference| < 1e-12")

    # Consequences: the coefficients W, and z_V itself.
    V = sp.MatrixSymbol("V", d, K)
    W = sp.MatrixSymbol("W", K, K)
    grad_V = sp.Trace(g.T * V.T * Q * V).diff(Q)
    r.step("The gradient is V·g·Vᵀ, in span{v_n v_kᵀ}: from Q = 0 every iterate is Q = VWVᵀ "
           "(induction), with z_V = VᵀQV = G·W·G, so W = G⁻¹z_VG⁻¹ and one step moves W by",
           eq(sp.Symbol("nabla_Q L"), grad_V))
    z_V = (V.T * (V * W * V.T) * V).subs(V.T * V, G)
    dW = (G.I * claimed["logit-step"](eta, G, g) * G.I).doit()
    r.step("", eq(sp.Symbol("z_V"), z_V), eq(sp.Symbol("Delta W"), dW))
    sums_W = (one.T * dW).expand().subs(one.T * g, sp.ZeroMatrix(1, K)).doit()
    r.check("coefficients", "ΔW = G⁻¹Δz_VG⁻¹ = −ηg, whose columns sum to 0 by 1ᵀg = 0: the "
            "conservation law holds for the coefficients W of Q in V (matrix symbols)",
            SYMBOLIC, matrix_expr_is_zero((dW - claimed["coefficient-step"](eta, g)).expand())
            and matrix_expr_is_zero(sums_W) and z_V == G * W * G, decisive=True)
    rr = sp.Symbol("r", real=True)
    sums_z = (one.T * claimed["logit-step"](eta, G, g)).expand()
    sums_z = sums_z.subs(one.T * G, rr * one.T).doit().expand()
    sums_z = sums_z.subs(one.T * g, sp.ZeroMatrix(1, K)).doit()
    r.step("The column sums of Δz_V are 1ᵀΔz_V = −η1ᵀG·g·G. When every row of G has the same "
           "sum r (1ᵀG = r1ᵀ, G symmetric), it is −ηr·1ᵀgG = 0:",
           eq(sp.Symbol("1^T Delta z_V"), sums_z))
    r.check("equal-rows", "1ᵀG = r1ᵀ and 1ᵀg = 0 give 1ᵀΔz_V = 0: Δα_k = Σ_{n≠k} Λ_{k,n} "
            "(the orthonormal law) for z_V itself (matrix symbols, symbolic K)", SYMBOLIC,
            matrix_expr_is_zero(sums_z), decisive=True)
    rho = sp.Symbol("rho", real=True)
    G_eq = (1 - rho) * sp.Identity(K) + rho * one * one.T
    rows = (one.T * G_eq).expand().subs(one.T * one, K * sp.Identity(1)).doit().expand()
    r.check("equal-overlaps", "equal overlaps G = (1−ρ)I + ρ11ᵀ have 1ᵀG = (1 − ρ + Kρ)1ᵀ "
            "(1ᵀ1 = K): the law holds for z_V (matrix symbols)", SYMBOLIC,
            matrix_expr_is_zero((rows - claimed["row-sum"](rho, K) * one.T).expand()))

    # The counterexample: unequal overlaps, the first step from Q = 0 in exact rationals.
    G3 = sp.Matrix(G_UNEQUAL)
    sums = _first_step_sums(G3, claimed)
    fails = list(sums) == list(claimed["counterexample-sums"]) and any(x != 0 for x in sums)
    r.step("Unequal overlaps break it. G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]] (⟨v_1, v_2⟩ = ½, "
           "v_3 orthogonal to both; rows sum to 3/2, 3/2, 1): at Q = 0 the attention is "
           "uniform and sympy differentiates e_k from its definition; the first step's column "
           "sums of Δz_V/η are, exactly,", eq(sp.Symbol("1^T Delta z_V / eta"),
                                                 sp.Tuple(*sums)))
    ok = fails and not claimed["law-holds"](G3)
    # equal row sums with unequal overlaps (K = 4, circulant) and equal overlaps (K = 3): 0
    a, b = sp.Rational(3, 10), sp.Rational(-1, 5)
    circulant = sp.Matrix([[1, a, b, a], [a, 1, a, b], [b, a, 1, a], [a, b, a, 1]])
    equal = sp.Matrix(3, 3, lambda i, j: 1 if i == j else sp.Rational(1, 3))
    for Gx in (circulant, equal):
        ok &= claimed["law-holds"](Gx) and all(x == 0 for x in _first_step_sums(Gx, claimed))
    r.check("counterexample", "the first step at G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]] has "
            "column sums (7/216, 7/216, −7/162)·η ≠ 0 (α_3 grows by 7η/81 while β_{1,3} and "
            "β_{2,3} fall by 7η/108 each: the law fails), while G with equal row sums (K = 4, "
            "circulant overlaps 3/10, −1/5; K = 3, equal overlaps 1/3) gives 0 exactly",
            EXPLICIT, ok, "K = 3, 4: exact rationals", ks=(3, 4))
    return r.result("13b", "Conservation with overlapping features",
                    "Symbolic K: GD on Q moves z by −ηG·g·G; the columns of g sum to 0 (shift "
                    "invariance, any G); hence ΔW = −ηg for Q = VWVᵀ (the law for W) and "
                    "1ᵀΔz_V = 0 when 1ᵀG = r1ᵀ (equal overlaps included). That it fails "
                    "otherwise: one exact counterexample (K = 3).")


# --- 13b: numeric check ---------------------------------------------------------------

def _circulant_V() -> np.ndarray:
    a, b = 0.3, -0.2
    G = np.array([[1, a, b, a], [a, 1, a, b], [b, a, 1, a], [a, b, a, 1]])
    return np.linalg.cholesky(G).T                     # columns: unit v_k with VᵀV = G


def _random_unit(seed: int, d: int, K: int) -> np.ndarray:
    F = np.random.default_rng(seed).standard_normal((d, K))
    return F / np.linalg.norm(F, axis=0)


def conservation_geometries() -> dict[str, np.ndarray]:
    from .. import geometry as geo
    return {"unequal ⟨v_1, v_2⟩ = ½ (K = 3)": _unequal_geometry().V,
            "equal overlaps ρ = 0.5 (K = 3)": geo.overlap(0.5, [1.0, 0.5, -0.5]).V,
            "equal row sums, overlaps 0.3 and −0.2 (K = 4)": _circulant_V(),
            "random unit-norm (K = 3, d = 5, seed 7)": _random_unit(7, 5, 3)}


def check_conservation(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..checks import EXACT_TOL, PopulationCheck, z_path
    from ..setting import Protocol
    protocol = Protocol()
    ok, worst_W, worst_span, worst_law, lines = True, 0.0, 0.0, 0.0, []
    for name, V in conservation_geometries().items():
        G = V.T @ V
        _, T1, path = ctx.population_path(V, protocol)
        z = z_path(V, path)
        W = claimed["coefficients"](z, G)
        sums_W = float(np.abs(np.diff(W, axis=0).sum(axis=-2)).max())
        span = max(float(np.abs(Q - V @ Wt @ V.T).max()) for Q, Wt in zip(path, W))
        sums_z = np.diff(z, axis=0).sum(axis=-2)
        law = float(np.abs(sums_z).max())
        holds = claimed["law_holds"](G)
        worst_W, worst_span = max(worst_W, sums_W), max(worst_span, span)
        if holds:
            worst_law = max(worst_law, law)
            ok &= law <= EXACT_TOL
            verdict = f"z_V column sums {law:.2g} (law holds)"
        else:
            first = float(np.abs(sums_z[0] / protocol.eta - np.array(claimed["first_step"]))
                          .max()) if name.startswith("unequal") else 0.0
            ok &= law > 1e-6 and first <= EXACT_TOL
            verdict = (f"z_V column sums up to {law:.3g} per step (law fails)"
                       + (f"; first step − η(7/216, 7/216, −7/162): {first:.2g}"
                          if name.startswith("unequal") else ""))
        lines.append(f"{name}: T1 = {T1}, ΔW column sums {sums_W:.2g}, Q − VWVᵀ {span:.2g}; "
                     + verdict)
    ok &= worst_W <= EXACT_TOL and worst_span <= EXACT_TOL
    worst = max(worst_W, worst_span, worst_law)
    population = PopulationCheck(
        "full-Q GD pretraining (explicit vectors, ε = 0.01, η = 0.1), every step: column "
        "sums of ΔW (W = G⁻¹VᵀQVG⁻¹) and Q − VWVᵀ; column sums of Δz_V where every row of G "
        "has the same sum; the first step's exact column sums where not; 4 Gram matrices",
        worst, worst, f"<= {EXACT_TOL:g} where an identity holds; > 1e-6 where the law "
        "fails", ok, lines)
    return population, None, []


# === 13c: the T1 state ===================================================================

def _alpha_star_general():
    """claim 3's α*_{K,ε} (solved there) as a function of (K, ε), and its symbols."""
    from .claim3_convergence import CLAIMED as C3
    K = sym_K()
    eps = sp.Symbol("epsilon", positive=True)
    return lambda e: C3["alpha-star"](K, sp.sqrt(2 * e * (K - 1) / K)), eps


def derive_t1(claimed: dict = CLAIMED):
    from .claim3_convergence import _solve_alpha_star, ray_gradient
    r = Recorder()
    K = sym_K()
    rho = sp.Symbol("rho", real=True)
    eta = sp.Symbol("eta", positive=True)
    one = sp.MatrixSymbol("1", K, 1)
    G = (1 - rho) * sp.Identity(K) + rho * one * one.T
    rvec = sp.MatrixSymbol("r", K, 1)

    # 1. e_k(G) = (1−ρ) e_k(orthonormal), for every z.
    n = sp.Symbol("n", integer=True, positive=True)
    z = sp.IndexedBase("z")
    total = sp.simplify(sp.Sum(sp.exp(z[n]) / sp.Sum(sp.exp(z[n]), (n, 1, K)), (n, 1, K)))
    quad = (rvec.T * G * rvec).expand().subs(one.T * rvec, sp.ZeroMatrix(1, 1)).doit()
    quad = quad.subs(rvec.T * one, sp.ZeroMatrix(1, 1)).doit().expand()
    r.step("Equal overlaps: G = (1−ρ)I + ρ11ᵀ, −1/(K−1) < ρ < 1. The error direction "
           "r = a_k − δ_k sums to zero for every z, because the softmax does (symbolic K):",
           eq(sp.Symbol("Sigma_n a_n"), total))
    r.step("so 1ᵀr = 0 and sympy reduces the quadratic form:", eq(sp.Symbol("r^T G r"), quad))
    r.check("error-scale", "Σ_n a_n = 1, so G acts on the error directions as (1−ρ)I: "
            "e_k with G is (1−ρ) times e_k with I for every z, hence g_G = (1−ρ)g_I "
            "(matrix symbols, symbolic K)", SYMBOLIC,
            total == 1 and matrix_expr_is_zero((quad - claimed["error-scale"](rho)
                                                * rvec.T * rvec).expand()), decisive=True)

    # 2. On the symmetric ray g has zero row and column sums: G·g·G = (1−ρ)²g.
    alpha, beta, own, other = ray_gradient()
    ray_law = is_zero(own + (K - 1) * other)
    r.step("On the symmetric ray z = αI + β(11ᵀ − I), claim 3's derivation gives the "
           "orthonormal gradient with one diagonal value a = ∂e_k/∂z_kk and one off-diagonal "
           "value b = ∂e_k/∂z_nk (up to 1/K), and a + (K−1)b = 0:",
           eq(sp.Symbol("a + (K-1) b"), sp.factor(own + (K - 1) * other)))
    r.check("ray-sums", "at a symmetric z the orthonormal gradient is symmetric with zero "
            "column sums, so its rows sum to zero too: 1ᵀg = 0 and g1 = 0 (claim 3's ray "
            "gradient, symbolic K)", SYMBOLIC,
            ray_law and (own.free_symbols | other.free_symbols) <= {alpha, beta, K},
            decisive=True)
    g = sp.MatrixSymbol("g", K, K)
    step = (G * (claimed["error-scale"](rho) * g) * G).expand()
    step = step.subs({one.T * g: sp.ZeroMatrix(1, K), g * one: sp.ZeroMatrix(K, 1)}).doit()
    step = (-eta * step).expand()
    stated = -eta * (1 - rho) ** claimed["step-power"] * g
    r.step("A step on Q moves z by −ηG·g_G·G (13b) = −η(1−ρ)G·g_I·G, g_I the orthonormal "
           "gradient; with 1ᵀg_I = 0 and g_I1 = 0 sympy gets",
           eq(sp.Symbol("Delta z"), sp.factor(step.as_coeff_mmul()[0]) * g))
    r.check("gram-step", "on the symmetric ray −ηG·g_G·G = −η(1−ρ)³g_I: the "
            "orthonormal step with η(1−ρ)³ (matrix symbols, symbolic K); by claim 3 it "
            "keeps the ray, so from Q = 0 every iterate is on it (induction)", SYMBOLIC,
            matrix_expr_is_zero((step - stated).expand()), decisive=True)

    # 3. The stopping rule: ε/(1−ρ); α* from claim 3's closed form.
    e_t, t, eps, delta, t_root, alpha_star = _solve_alpha_star()
    eps_orth = claimed["eps-scale"](eps, rho)
    roots = sp.solve(eq(claimed["error-scale"](rho) * e_t, eps), t)
    c = sp.Symbol("c", positive=True)                         # c = 1 − ρ > 0
    sample = {K: 4, eps: sp.Rational(1, 100), c: sp.Rational(1, 2)}
    roots = [x.subs(rho, 1 - c) for x in roots]
    roots = [x for x in roots if sp.N(x.subs(sample)) > 0]
    same = len(roots) == 1 and is_zero(roots[0] - t_root.subs(eps, eps_orth.subs(rho, 1 - c)))
    alpha_fn, _ = _alpha_star_general()
    r.step("The rule e_k <= ε with G is e_k <= ε/(1−ρ) with I; on the ray e_k depends on "
           "t = e^{α − β} alone (claim 3) and sympy solves (1−ρ)e_k(t) = ε:",
           eq(t, roots[0].subs(c, 1 - rho) if roots else sp.nan))
    from .claim3_convergence import CLAIMED as C3
    r.step("which is claim 3's root at ε/(1−ρ), so", eq(sp.Symbol("alpha^*(rho)"),
                                                          C3["alpha-star"](K, delta)),
           eq(delta, sp.sqrt(2 * eps_orth * (K - 1) / K)))
    r.check("stopping", "the threshold solved from (1−ρ)e_k = ε on the ray is claim 3's "
            "at ε/(1−ρ): α*(ρ) = α*_{K, ε/(1−ρ)} (symbolic K)", SYMBOLIC, same,
            decisive=True)

    # K = 2 in closed form.
    q = sp.Symbol("q", positive=True)
    k2_alpha = sp.simplify(alpha_fn(eps_orth).subs(K, 2))
    q_star = claimed["k2-q"](eps, rho)
    k2_ok = sp.simplify((sp.exp(2 * k2_alpha) - sp.exp(2 * claimed["k2-alpha"](q_star)))
                        .subs(rho, 1 - c)) == 0          # radicals: 1 − ρ = c > 0
    r.step("K = 2 (every pair of unit vectors has one overlap ρ): on the ray β = −α the "
           "attention on the other feature is q = 1/(1 + e^{2α}) and", eq(sp.Symbol(
               "alpha^*(rho)"), claimed["k2-alpha"](q)), eq(q, q_star))
    r.check("k2", "claim 3's α* at K = 2 and ε/(1−ρ) is ½ln((1−q*)/q*), "
            "q* = √(ε/(1−ρ))", SYMBOLIC, k2_ok, decisive=True)
    a2 = sp.Symbol("alpha", real=True)
    G2 = sp.Matrix([[1, rho], [rho, 1]])
    e1 = _gram_error([a2, -a2], 0, G2)
    q_of = 1 / (1 + sp.exp(2 * a2))
    grad2 = _gradient(sp.Matrix([[a2, -a2], [-a2, a2]]), G2)
    step2 = -G2 * grad2 * G2
    on_ray = is_zero(step2[0, 0] + step2[0, 1]) and is_zero(step2[0, 0] - step2[1, 1]) \
        and is_zero(step2[0, 1] - step2[1, 0])
    r.check("k2-explicit", "K = 2 from the definition with G = [[1, ρ], [ρ, 1]]: e_1 = "
            "(1−ρ)q² at z = α(2I − 11ᵀ), and the step −G·g·G keeps the form α(2I − 11ᵀ)",
            EXPLICIT, is_zero(e1 - claimed["k2-error"](rho, q_of)) and on_ray, ks=(2,))

    ok = True
    for Kx in (3,):
        Gx = sp.Matrix(Kx, Kx, lambda i, jj: 1 if i == jj else rho)
        ray = sp.Matrix(Kx, Kx, lambda i, jj: a2 if i == jj else -a2 / (Kx - 1))
        gG, gI = _gradient(ray, Gx), _gradient(ray, sp.eye(Kx))
        lhs = -Gx * gG * Gx
        rhs = -(1 - rho) ** claimed["step-power"] * gI
        ok &= all(is_zero(x) for x in (lhs - rhs))
    r.check("gram-step-explicit", "−G·g_G·G = −(1−ρ)³g_I entry by entry at a "
            "symmetric point, differentiated from the definition (ρ a symbol)", EXPLICIT, ok,
            ks=(3,))

    rng = np.random.default_rng(31)
    worst = 0.0
    for _ in range(20):
        Kx = int(rng.integers(2, 9))
        rx = float(rng.uniform(-0.9 / (Kx - 1), 0.9))
        ex = float(10 ** rng.uniform(-4, -2))
        Gx = (1 - rx) * np.eye(Kx) + rx
        ref = float(theory.gram_alpha_star(Gx, ex))
        mine = float(alpha_fn(eps_orth).subs({K: Kx, eps: ex, rho: rx}))
        worst = max(worst, abs(mine - ref) / ref)
    r.check("matches-theory", "the stated α*(ρ) agrees with oodcalc.theory.gram_alpha_star "
            "(what predict uses)", NUMERIC, worst < 1e-12,
            "20 random (K ≤ 8, ρ, ε), relative difference < 1e-12")
    r.step("Unequal overlaps (K ≥ 3): G no longer acts on the error directions as a multiple "
           "of I and GD leaves the symmetric ray; no closed form is known (the ledger row "
           "measures one case).")
    return r.result("13c", "T1 state with equal overlaps",
                    "Symbolic K for equal overlaps: G acts on the error directions as "
                    "(1−ρ)I, on the symmetric ray G·g·G = (1−ρ)²g, so pretraining is the "
                    "orthonormal one at ε/(1−ρ) and step η(1−ρ)³, α* from claim 3; K = 2 "
                    "in closed form. Unequal overlaps: numeric only.")


# --- 13c: numeric check ---------------------------------------------------------------

#: (K, ρ, γ): equal-overlap geometries (oc.overlap); γ matters only for U (13d uses them)
T1_CASES = ((2, -0.5, (1.0, 0.5)), (2, 0.0, (1.0, 0.5)), (2, 0.5, (1.0, 0.5)),
            (2, 0.8, (1.0, 0.5)), (3, 0.5, (1.0, 0.5, -0.5)),
            (4, -0.2, (1.0, -0.5, 0.3, 0.8)))


def check_t1(ctx, claimed: dict = NUMERIC_CLAIMED):
    from .. import geometry as geo
    from ..checks import EXACT_TOL, PopulationCheck, z_path
    from ..finetune.dynamics import descend
    from ..setting import Protocol
    p = Protocol()
    ok, worst_flat, worst_ray, over, lines = True, 0.0, 0.0, 0.0, []
    for K, rho, gamma in T1_CASES:
        V = geo.overlap(rho, list(gamma)).V
        _, T1, path = ctx.population_path(V, p)
        z = z_path(V, path)
        c = claimed["eps_scale"](rho)
        flat = descend(np.zeros((1, K, K)), p.eta * c ** claimed["step_power"], p.eps / c,
                       p.max_steps)
        a_star = claimed["alpha_star"](K, p.eps, rho)
        alpha_T, alpha_prev = np.diag(z[T1]), np.diag(z[T1 - 1])
        bracket = bool(np.all(alpha_prev < a_star) and np.all(a_star <= alpha_T))
        same_T1 = int(flat.steps[0]) == T1
        gap = float(np.abs(flat.z[0] - z[T1]).max()) if same_T1 else math.inf
        ray = float(np.abs(z[T1] - theory.symmetric_logits(K, float(alpha_T.mean()))).max())
        stated = claimed["k2_T1"].get(rho) if K == 2 else None
        ok &= bracket and same_T1 and gap <= 1e-9 and ray <= EXACT_TOL
        ok &= stated is None or stated == T1
        worst_flat, worst_ray = max(worst_flat, gap), max(worst_ray, ray)
        over = max(over, float(np.abs(alpha_T - a_star).max()))
        lines.append(f"K = {K}, ρ = {rho:g}: T1 = {T1} (orthonormal at ε/(1−ρ), η(1−ρ)³: "
                     f"{int(flat.steps[0])}" + ("" if stated is None else f"; stated {stated}")
                     + f"), α* = {a_star:.6g}, α(T1−1) = "
                     f"{alpha_prev.mean():.6g}, α(T1) = {alpha_T.mean():.6g} "
                     f"({'bracketed' if bracket else 'NOT bracketed'})")
    # unequal overlaps: what is known is measured (the statement's T1, off the ray)
    V = _unequal_geometry().V
    _, T1u, path = ctx.population_path(V, p)
    zu = V.T @ path[T1u] @ V
    asym = float(np.abs(zu - zu.T).max())
    ok &= T1u == claimed["unequal_T1"] and asym > 1e-3
    lines.append(f"unequal overlaps G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]]: T1 = {T1u} (stated "
                 f"{claimed['unequal_T1']}), |z_V − z_Vᵀ| = {asym:.3g} at T1 (off the ray)")
    population = PopulationCheck(
        "full-Q GD pretraining on equal-overlap features (oc.overlap, explicit vectors, "
        "ε = 0.01, η = 0.1): T1 and z_V(T1) against the orthonormal dynamics at ε/(1−ρ) "
        "with step η(1−ρ)³, α(T1−1) < α*_{K,ε/(1−ρ)} <= α(T1), z_V(T1) on the "
        f"symmetric ray, the statement's T1 values; {len(T1_CASES)} (K, ρ), and the "
        "statement's unequal-overlap T1 (off the ray)",
        max(worst_flat, worst_ray), max(worst_flat, worst_ray),
        "T1 equal, z_V within 1e-9 of the orthonormal run, on the ray <= "
        f"{EXACT_TOL:g}, α* bracketed by the last step", ok,
        lines + [f"largest α(T1) − α* (the discrete overshoot): {over:.3g}"])
    findings = [f"Unequal overlaps, G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]] (ε = 0.01, η = 0.1): "
                f"full-Q GD stops at T1 = {T1u} off the symmetric ray (α = "
                f"{', '.join(f'{x:.4f}' for x in np.diag(zu))}, |z_V − z_Vᵀ| up to "
                f"{asym:.3g}); no closed form is known."]
    return population, None, findings


# === 13d: OOD weights at T1 ==============================================================

def _J_algebra():
    """Matrices xI + yJ, J = 11ᵀ (J² = KJ), as polynomials in a commutative J reduced mod
    J² − KJ: symbolic K."""
    K = sym_K()
    J = sp.Symbol("J")

    def reduce(expr):
        return sp.expand(sp.rem(sp.expand(expr), J ** 2 - K * J, J))
    return K, J, reduce


def _factored(expr):
    """A sum of matrix monomials with each scalar coefficient factored (for display)."""
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    parts = [term.as_coeff_mmul() for term in terms]
    return sp.MatAdd(*[sp.factor(c) * m for c, m in parts])


def _in_J(expr, one, J) -> sp.Expr:
    """A matrix expression in I and 11ᵀ (claim 3's Z) as the polynomial x + yJ."""
    expr = sp.expand(expr)
    out = sp.Integer(0)
    for term in (expr.args if isinstance(expr, sp.MatAdd) else (expr,)):
        coefficient, monomial = term.as_coeff_mmul()
        factors = monomial.args if isinstance(monomial, sp.MatMul) else (monomial,)
        factors = [f for f in factors if not f.is_number]
        if len(factors) == 1 and isinstance(factors[0], sp.Identity):
            out += coefficient
        elif factors == [one, one.T]:
            out += coefficient * J
        else:
            raise ValueError(f"not in the algebra of I and 11ᵀ: {term}")
    return out


def derive_ood(claimed: dict = CLAIMED):
    from .claim3_convergence import t1_logits
    from .claim5_ood_weights import CLAIMED as C5
    r = Recorder()
    K = sym_K()
    d = sp.Symbol("d", integer=True, positive=True)
    V, U = sp.MatrixSymbol("V", d, K), sp.MatrixSymbol("U", d, K)
    Q = sp.MatrixSymbol("Q", d, d)
    G, g, W = (sp.MatrixSymbol(x, K, K) for x in ("G_V", "g", "W"))
    M = sp.MatrixSymbol("M", K, K)
    eta = sp.Symbol("eta", positive=True)

    grad = sp.Trace(g.T * V.T * Q * V).diff(Q)
    W_step = sp.MatrixSymbol("W_t", K, K)
    nxt = (V * W_step * V.T - eta * grad).expand()
    in_span = matrix_expr_is_zero((nxt - V * claimed["span-step"](W_step, eta, g) * V.T)
                                  .expand())
    r.step("Pretraining on V: the gradient of L(VᵀQV) is V·g·Vᵀ (claim 2's matrix derivative), "
           "so a step maps Q = VW_tVᵀ to", eq(sp.Symbol("Q_{t+1}"), nxt))
    r.check("stays-in-span", "∇_Q = V·g·Vᵀ, so Q = VW_tVᵀ goes to V(W_t − ηg)Vᵀ: from Q = 0 every "
            "iterate, Q^(T1) included, is VWVᵀ (matrix symbols, induction)", SYMBOLIC,
            in_span, decisive=True)
    Qw = V * W * V.T
    zV = (V.T * Qw * V).subs(V.T * V, G)
    zU = (U.T * Qw * U).subs({V.T * U: M, U.T * V: M.T})
    stated = claimed["ood-start"](M, G, zV).doit()
    r.step("Then z_V = VᵀQV = G_V·W·G_V (VᵀV = G_V) and z_U = UᵀQU = Mᵀ·W·M (M = VᵀU); sympy "
           "substitutes W = G_V⁻¹z_VG_V⁻¹ in the stated form:", eq(sp.Symbol("z_V"), zV),
           eq(sp.Symbol("z_U"), zU))
    r.check("ood-start", "Mᵀ G_V⁻¹ z_V G_V⁻¹ M with z_V = G_V·W·G_V is UᵀQU = Mᵀ·W·M (matrix "
            "symbols, symbolic K and d)", SYMBOLIC,
            matrix_expr_is_zero((zU - stated).expand()), decisive=True)
    Gam = sp.MatrixSymbol("Gamma", K, K)
    zVs = sp.MatrixSymbol("z_V", K, K)
    shifted = claimed["ood-start"](G * Gam, G, zVs).doit()
    shifted = shifted.subs({G.T: G, Gam.T: Gam}).doit()
    r.step("oc.overlap and oc.gram build u_k = γ_kv_k + √(1−γ_k²)w_k (w ⊥ span V), so "
           "M = G_VΓ, Γ = diag(γ); with G_V and Γ symmetric", eq(sp.Symbol("z_U"), shifted))
    r.check("overlap-shift", "M = G_VΓ gives z_U = Γz_VΓ for any G_V: entries γ_nγ_k z_V[n, k] "
            "(matrix symbols)", SYMBOLIC,
            matrix_expr_is_zero((shifted - claimed["overlap-shift"](Gam, zVs)).expand()))

    # Equal overlaps: G_V⁻¹ and the closed form, in the algebra of xI + yJ.
    Ks, J, reduce = _J_algebra()
    rho = sp.Symbol("rho", real=True)
    x, y = sp.symbols("x y")
    Gpoly = (1 - rho) + rho * J
    prod = reduce((x + y * J) * Gpoly)
    sol = sp.solve([prod.coeff(J, 0) - 1, prod.coeff(J, 1)], [x, y], dict=True)[0]
    Ginv = sol[x] + sol[y] * J
    r.step("Equal overlaps G_V = (1−ρ)I + ρJ, J = 11ᵀ, J² = K·J: matrices x·I + y·J multiply "
           "as polynomials in J modulo J² − K·J (symbolic K). sympy solves (x·I + y·J)·G_V = I:",
           eq(sp.Symbol("G_V^{-1}"), sp.factor(sol[x]) + sp.factor(sol[y]) * J))
    alpha, Z = t1_logits()
    one = sp.MatrixSymbol("1", K, 1)
    Zpoly = _in_J(Z, one, J)                  # claim 3's Z = αI + β(11ᵀ − I), β solved there
    inner = reduce(Ginv * Zpoly * Ginv)
    cI, cJ = (sp.factor(sp.cancel(inner.coeff(J, power))) for power in (0, 1))
    b = sp.MatrixSymbol("b", K, 1)
    zU_eq = (M.T * (cI * sp.Identity(K) + cJ * one * one.T) * M).expand()
    zU_eq = zU_eq.subs({M.T * one: sp.sqrt(K) * b, one.T * M: sp.sqrt(K) * b.T}).doit()
    r.step("By claim 13c z_V(T1) is on the symmetric ray, claim 3's Z = αI − α/(K−1)(J − I) "
           "(α = α*_{K,ε/(1−ρ)} at the threshold, or the value GD reached); "
           "G_V⁻¹ZG_V⁻¹ = c·I + c'·J with", eq(sp.Symbol("c"), cI), eq(sp.Symbol("c'"), cJ),
           eq(sp.Symbol("z_U"), _factored(zU_eq)))
    stated_eq = claimed["equal-overlap"](alpha, K, rho, M, b)
    ok_inverse = sp.cancel(reduce(Ginv * Gpoly)) == 1
    r.check("equal-overlap", "G_V⁻¹ZG_V⁻¹ = Kα/((K−1)(1−ρ)²)(I − J/K), so "
            "z_U = Kα/((K−1)(1−ρ)²)(MᵀM − bbᵀ), b = Mᵀ1/√K (symbolic K: the algebra of "
            "I and J, then matrix symbols)", SYMBOLIC,
            ok_inverse and matrix_expr_is_zero((zU_eq - stated_eq).expand()), decisive=True)
    at_zero = stated_eq.subs(rho, 0)
    r.check("orthonormal", "at ρ = 0 (G_V = I) the form is claim 5's Kα/(K−1)(MᵀM − bbᵀ)",
            SYMBOLIC, matrix_expr_is_zero((at_zero - C5["ood"](alpha, K, M, b)).expand()))

    ok = True
    for Kx in (2, 3):
        Gx = sp.Matrix(Kx, Kx, lambda i, j: 1 if i == j else rho)
        Mx = sp.Matrix(Kx, Kx, lambda i, j: sp.Symbol(f"M_{{{i + 1}{j + 1}}}", real=True))
        Zx = sp.Matrix(Kx, Kx, lambda i, j: alpha if i == j else -alpha / (Kx - 1))
        Gi = Gx.inv().applyfunc(sp.factor)
        inner = (Gi * Zx * Gi).applyfunc(sp.cancel)
        bx = Mx.T * sp.ones(Kx, 1) / sp.sqrt(Kx)
        formula = claimed["equal-overlap"](alpha, Kx, rho, Mx, bx)
        ok &= all(_numerator_zero(v) for v in (Mx.T * inner * Mx - formula))
    r.check("entries-explicit", "entry by entry with G_V = (1−ρ)I + ρ11ᵀ inverted by sympy "
            "and M a matrix of free symbols", EXPLICIT, ok, ks=(2, 3))

    from ..finetune.gram import ood_start
    rng = np.random.default_rng(41)
    worst = 0.0
    for Kx in (2, 3, 5):
        Fn = rng.standard_normal((Kx + 2, Kx))
        Fn /= np.linalg.norm(Fn, axis=0)
        Un = rng.standard_normal((Kx + 2, Kx))
        zv = rng.normal(size=(Kx, Kx))
        Gn, Mn = Fn.T @ Fn, Fn.T @ Un
        stated = claimed["ood-start"](sp.Matrix(Mn), sp.Matrix(Gn), sp.Matrix(zv))
        worst = max(worst, float(np.abs(ood_start(zv, Gn, Mn)
                                        - np.array(stated, dtype=float)).max()))
    r.check("matches-engine", "oodcalc.finetune.gram.ood_start (what predict uses) equals "
            "Mᵀ G_V⁻¹ z_V G_V⁻¹ M", NUMERIC, worst < 1e-10,
            "random unit-norm V, random U, K = 2, 3, 5, max |difference| < 1e-10")
    return r.result("13d", "OOD weights at T1 with overlapping features",
                    "Symbolic K: pretraining keeps Q = VWVᵀ, so z_U = Mᵀ G_V⁻¹ z_V G_V⁻¹ M "
                    "(matrix symbols); M = G_VΓ gives Γz_VΓ; equal overlaps give "
                    "Kα/((K−1)(1−ρ)²)(MᵀM − bbᵀ) (the algebra of I and 11ᵀ); claim 5 at "
                    "ρ = 0.")


# --- 13d: numeric check ---------------------------------------------------------------

def ood_geometries():
    from .. import geometry as geo
    out = {f"equal overlaps ρ = {rho:g}, γ = {gamma}": (geo.overlap(rho, list(gamma)), rho,
                                                         np.array(gamma))
           for K, rho, gamma in T1_CASES if K > 2 or rho == 0.5}
    out["unequal ⟨v_1, v_2⟩ = ½, γ = (1, 0.5, −0.5)"] = (_unequal_geometry(), None,
                                                         np.array([1.0, 0.5, -0.5]))
    rng_V, rng_U = _random_unit(7, 5, 3), _random_unit(8, 5, 3)
    out["random unit-norm V, U (K = 3, d = 5, seeds 7, 8)"] = (
        geo.from_arrays(rng_V, rng_U), None, None)
    return out


def check_ood(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..checks import EXACT_TOL, PopulationCheck, rel
    from ..setting import Protocol
    p = Protocol()
    ok, worst, scale, lines = True, 0.0, 0.0, []
    for name, (geometry, rho, gamma) in ood_geometries().items():
        V, U = geometry.V, geometry.U
        G, M, K = V.T @ V, V.T @ U, V.shape[1]
        _, T1, path = ctx.population_path(V, p)
        Q1 = path[T1]
        zV, zU = V.T @ Q1 @ V, U.T @ Q1 @ U
        gap = float(np.abs(claimed["ood_start"](zV, G, M) - zU).max())
        parts = [f"|z_U − MᵀG⁻¹z_VG⁻¹M| = {gap:.2g}"]
        ok &= gap <= EXACT_TOL
        worst, scale = max(worst, gap), max(scale, float(np.abs(zU).max()))
        if gamma is not None:
            g2 = float(np.abs(claimed["overlap_shift"](zV, gamma) - zU).max())
            ok &= g2 <= EXACT_TOL
            worst = max(worst, g2)
            parts.append(f"|z_U − Γz_VΓ| = {g2:.2g}")
        if rho is not None:
            a_T = float(np.diag(zV).mean())
            a_prev = float(np.diag(V.T @ path[T1 - 1] @ V).mean())
            closed = float(np.abs(claimed["equal_overlap"](M, a_T, rho) - zU).max())
            a_star = claimed["alpha_star"](K, p.eps, rho)
            star = float(np.abs(claimed["equal_overlap"](M, a_star, rho) - zU).max())
            allowed = (a_T - a_prev) * float(np.abs(claimed["equal_overlap"](M, 1.0, rho)).max())
            ok &= closed <= EXACT_TOL and star <= allowed + EXACT_TOL
            worst = max(worst, closed)
            parts.append(f"closed form at α(T1): {closed:.2g}, at α*: {star:.3g} (one-step "
                         f"allowance {allowed:.3g})")
        lines.append(f"{name}: T1 = {T1}; " + "; ".join(parts))
    population = PopulationCheck(
        "UᵀQ^(T1)U of full-Q GD pretraining on the explicit vectors (ε = 0.01, η = 0.1) "
        "against Mᵀ G_V⁻¹ z_V(T1) G_V⁻¹ M, against Γz_VΓ where M = G_VΓ, and against "
        "Kα/((K−1)(1−ρ)²)(MᵀM − bbᵀ) for equal overlaps (at the α reached; at α* within "
        "one GD step)", worst, rel(worst, scale),
        f"<= {EXACT_TOL:g} (identities given Q^(T1)); at α* within one step", ok, lines)
    return population, None, []
