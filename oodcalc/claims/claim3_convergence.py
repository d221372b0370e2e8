"""Claim 3, convergence at T1: pretraining from Q = 0 stays on the symmetric ray
Z = αI + β(11ᵀ − I) with β = −α/(K−1), and stops where e_k = ε, at α*_{K,ε}.

Derivation (symbolic K): at a symmetric Z every column is two-valued, so in the symbolic-K
column encoding sympy finds ∂e_k/∂z_kk and ∂e_k/∂z_nk as functions of (α, β, K) alone —
the same for every k and every n ≠ k — with a zero column sum: the gradient is itself of
the form aI + b(11ᵀ − I) with a + (K−1)b = 0, so GD from Z = 0 never leaves the ray
α + (K−1)β = 0. On the ray e_k is a decreasing function of the margin; sympy solves
e_k = ε for α*. Q^(T1) = VZVᵀ follows by matrix algebra.

Numeric check: the bracket α(T1−1) < α* ≤ α(T1) and the structure of Q^(T1) in
simulator (a); finite prompts in simulator (b).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import sympy as sp

from .. import theory
from ..symbolic.core import (EXPLICIT, NUMERIC, SYMBOLIC, Recorder, eq, is_zero,
                             matrix_expr_is_zero, sym_K)
from ..symbolic.model import Column, column_symbols, conditional_error

__all__ = ["CLAIMED", "NUMERIC_CLAIMED", "check", "derive", "population_check"]


CLAIMED = {
    # the conservation law on the ray: own + (K − 1)·other = 0 (the residual)
    "ray-law": lambda own, other, K: own + (K - 1) * other,
    # how e_k moves with the margin t on the ray
    "monotone": "decreasing",
    # β at T1 from α
    "beta": lambda alpha, K: -alpha / (K - 1),
    # e_k on the ray, from the attention a_k on the query's own feature
    "ray-error": lambda a_k, K: K * (1 - a_k) ** 2 / (2 * (K - 1)),
    # α*_{K,ε} with δ = √(2ε(K−1)/K)
    "alpha-star": lambda K, delta: (K - 1) / K * sp.log((K - 1) * (1 - delta) / delta),
    # Q^(T1) from α, V and v̄ (matrix expressions)
    "q-t1": lambda alpha, K, V, vbar: alpha * K / (K - 1) * (V * V.T - vbar * vbar.T),
}
NUMERIC_CLAIMED = {"alpha_star": theory.alpha_star,
                   "q_t1": theory.q_at_t1, "symmetric_logits": theory.symmetric_logits,
                   # what finite prompts approach: the α population GD reaches at T1
                   "population_alpha": lambda report: report.pretrain.alpha}


@functools.lru_cache(maxsize=None)
def ray_gradient():
    """``(α, β, own, other)``: ∂e_k/∂z_kk and ∂e_k/∂z_nk at a symmetric column, as
    expressions in α, β and the Symbol K only (the two named entries are k and n; the K − 2
    others are β)."""
    alpha, beta = sp.symbols("alpha beta", real=True)
    col = Column("k", "n")
    ray = col.on_ray(alpha, beta)
    own = sp.factor(sp.together(col.d("k").xreplace(ray)))
    other = sp.factor(sp.together(col.d("n").xreplace(ray)))
    return alpha, beta, own, other


@functools.lru_cache(maxsize=None)
def _solve_alpha_star():
    """α* solved by sympy from e_k = ε on the conserved ray, written with δ."""
    K = sym_K()
    t = sp.Symbol("t", positive=True)                 # t = e^{α − β}, the margin's exp
    eps = sp.Symbol("epsilon", positive=True)
    alpha, beta = sp.symbols("alpha beta", real=True)
    col = Column("k")
    e_t = sp.factor(sp.simplify(col.error.xreplace(col.on_ray(beta + sp.log(t), beta))))
    roots = sp.solve(eq(e_t, eps), t)
    sample = {K: 4, eps: sp.Rational(1, 100)}        # the root > 0 for 0 < ε < (K−1)/(2K)
    roots = [x for x in roots if sp.N(x.subs(sample)) > 0]
    assert len(roots) == 1, roots
    delta = sp.Symbol("delta", positive=True)
    m = sp.Symbol("m", positive=True)                 # m = K − 1 > 0, so √((K−1)²) = K − 1
    t_star = sp.factor(sp.simplify(
        roots[0].subs(eps, delta ** 2 * K / (2 * (K - 1))).subs(K, m + 1))).subs(m, K - 1)
    return e_t, t, eps, delta, roots[0], (K - 1) / K * sp.log(t_star)


@functools.lru_cache(maxsize=None)
def t1_logits():
    """``(α, Z)``: the logits at T1 as a matrix expression, α on the diagonal and the β
    derived from the ray invariant off it (claim 5 starts from this)."""
    K = sym_K()
    alpha, beta = sp.symbols("alpha beta", real=True)
    beta_of_alpha = sp.solve(eq(alpha + (K - 1) * beta, 0), beta)[0]
    one = sp.MatrixSymbol("1", K, 1)
    I = sp.Identity(K)
    return alpha, alpha * I + beta_of_alpha * (one * one.T - I)


def derive(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()

    # 1. The gradient at a symmetric point is symmetric (the premise), symbolic K.
    alpha, beta, own, other = ray_gradient()
    r.step("Symmetry. Let Z = αI + β(11ᵀ − I): every column has α on the diagonal and β "
           "elsewhere. In the symbolic-K column encoding (named entries k and n, the K − 2 "
           "others β, so R = (K − 2)e^β and P = (K − 2)e^{2β}) sympy differentiates e_k:",
           eq(sp.Symbol("∂e_k/∂z_{k,k}"), own), eq(sp.Symbol("∂e_k/∂z_{n,k}"), other))
    symmetric = own.free_symbols <= {alpha, beta, K} and other.free_symbols <= {alpha, beta, K}
    law = is_zero(claimed["ray-law"](own, other, K))
    r.step("Both depend on α, β and K only — not on which k, nor on which n ≠ k (any n can "
           "be the named one, and the rest of its column is the same) — and the column sums "
           "to zero. Column k of L = Σ e_k/K involves e_k alone, so ∇_Z L = (1/K)[a I + "
           "b(11ᵀ − I)] with a + (K − 1)b = 0: one GD step maps the symmetric form to "
           "itself and keeps α + (K − 1)β. From Z^(0) = 0, by induction, every iterate lies on "
           "the ray α + (K − 1)β = 0.")
    r.check("ray-gradient", "the gradient at Z = αI + β(11ᵀ − I) has one diagonal value and "
            "one off-diagonal value, functions of (α, β, K) only, with zero column sums "
            "(symbolic K)", SYMBOLIC, symmetric and law, decisive=True)
    ok = True
    for Kx in (2, 3, 4):
        # ∂L/∂z_ij = (1/K) ∂e_j/∂z_ij: column j of L is e_j alone
        for j in range(Kx):
            zs = column_symbols(Kx)
            e_j = conditional_error(zs, j)
            ray = {zs[i]: (alpha if i == j else beta) for i in range(Kx)}
            ok &= all(is_zero(sp.diff(e_j, zs[i]).xreplace(ray)
                              - (own if i == j else other).subs(K, Kx)) for i in range(Kx))
    r.check("ray-gradient-explicit", "every entry of the K×K gradient at a symmetric point, "
            "differentiated on the full column, equals the value above", EXPLICIT, ok,
            ks=(2, 3, 4))

    # 2. β from the invariant.
    a_sym, Z_t1 = t1_logits()
    beta_of_alpha = sp.solve(eq(alpha + (K - 1) * beta, 0), beta)[0]
    r.step("So at every step, T1 included, sympy solves", eq(beta, beta_of_alpha))
    r.check("beta", "β = −α/(K−1) solved from α + (K−1)β = 0", SYMBOLIC,
            is_zero(beta_of_alpha - claimed["beta"](alpha, K)), decisive=True)

    # 3. The stopping rule on the ray.
    e_t, t, eps, delta, t_root, alpha_star = _solve_alpha_star()
    a_k = sp.Symbol("a_k", positive=True)
    col = Column("k")
    ray = col.on_ray(alpha, beta_of_alpha)
    x = sp.Symbol("x", positive=True)               # e^{α − β}: a_k = x/(x + K − 1)
    ek_a = sp.simplify(col.error.xreplace(ray).subs(alpha, (K - 1) / K * sp.log(x)))
    ek_a = sp.simplify(ek_a.subs(x, (K - 1) * a_k / (1 - a_k)))
    r.step("On the ray every wrong feature gets the same attention (1 − a_k)/(K − 1); sympy "
           "builds e_k from the encoding and finds", eq(sp.Symbol("e_k"), sp.factor(ek_a)))
    r.check("ray-error", "e_k = K(1 − a_k)²/(2(K − 1)) on the symmetric ray (symbolic K)",
            SYMBOLIC, is_zero(ek_a - claimed["ray-error"](a_k, K)))
    decreasing = sp.factor(sp.diff(e_t, t))
    j = sp.Symbol("j", nonnegative=True)
    r.step("With t = e^{α − β} (the exponentiated margin), e_k depends on t alone and falls "
           "as t grows:", eq(sp.Symbol("e_k"), e_t),
           eq(sp.Derivative(sp.Symbol("e_k"), t), decreasing))
    slope = sp.simplify(decreasing.subs(K, j + 2))
    r.check("monotone", "de_k/dt < 0 for every K ≥ 2, t > 0", SYMBOLIC,
            bool(slope.is_negative if claimed["monotone"] == "decreasing" else slope.is_positive),
            decisive=True)
    stated = claimed["alpha-star"](K, delta)
    r.step("α only grows (claim 2), so the rule e_k ≤ ε is first met where e_k = ε. sympy "
           "solves e_k(t) = ε for t > 0 and, with α − β = αK/(K − 1), α = (K − 1)/K · ln t:",
           eq(t, t_root), eq(sp.Symbol("alpha^*_{K,epsilon}"), alpha_star),
           eq(delta, sp.sqrt(2 * eps * (K - 1) / K)))
    r.check("alpha-star", "the solved α* equals (K−1)/K · ln((K−1)(1−δ)/δ), "
            "δ = √(2ε(K−1)/K) (symbolic K)", SYMBOLIC,
            is_zero(sp.exp(alpha_star * K / (K - 1)) - sp.exp(stated * K / (K - 1))),
            decisive=True)
    f = sp.lambdify((K, delta), stated, "mpmath")
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(30):
        Kx = int(rng.integers(2, 51))
        ex = 10 ** rng.uniform(-12, math.log10((Kx - 1) / (2 * Kx)) - 0.01)
        ref = theory.alpha_star(Kx, ex)
        worst = max(worst, abs(float(f(Kx, math.sqrt(2 * ex * (Kx - 1) / Kx))) - ref) / ref)
    r.check("matches-theory", "the stated α* agrees with oodcalc.theory.alpha_star (the "
            "closed form predict uses)", NUMERIC, worst < 1e-12,
            "30 random (K ≤ 50, ε), relative difference < 1e-12")
    r.step("Domain: α* > 0 iff δ < (K − 1)/K, i.e. ε < (K − 1)/(2K); for larger ε the rule "
           "holds at Q = 0 already (uniform attention has e_k = (K − 1)/(2K)) and T1 = 0.")

    # 4. Q at T1, from the derived Z.
    d = sp.Symbol("d", integer=True, positive=True)
    V = sp.MatrixSymbol("V", d, K)
    one = sp.MatrixSymbol("1", K, 1)
    vbar = V * one / sp.sqrt(K)
    lhs = (V * Z_t1 * V.T).expand()
    r.step("The gradient of L lies in span{v_n v_kᵀ} (claim 2), so every iterate is "
           "Q = VZVᵀ; with the Z above and v̄ = (1/√K) Σ_i v_i = V1/√K,",
           eq(sp.Symbol("Q^{(T_1)}"), claimed["q-t1"](a_sym, K, V,
                                                    sp.MatrixSymbol("vbar", d, 1))))
    r.check("q-t1", "V(αI + β(11ᵀ − I))Vᵀ with the solved β equals αK/(K−1)(VVᵀ − v̄v̄ᵀ) "
            "(matrix symbols, symbolic K)", SYMBOLIC,
            matrix_expr_is_zero(lhs - claimed["q-t1"](a_sym, K, V, vbar).expand()),
            decisive=True)

    # 5. The discrete value.
    from ..finetune.dynamics import descend
    rows, ok = [], True
    for Kx in (2, 3, 4, 5):
        run = descend(np.zeros((1, Kx, Kx)), 0.1, 0.01, 100_000, record=True)
        T1 = int(run.steps[0])
        a1, a0 = run.z[0][0, 0], run.trajectory[T1 - 1][0][0, 0]
        target = float(f(Kx, math.sqrt(2 * 0.01 * (Kx - 1) / Kx)))
        ok &= a0 < target <= a1
        rows.append(f"K = {Kx}: T1 = {T1}, α^(T1) − α* = {a1 - target:.3g}")
    r.step("Closed form versus discrete GD: α* is where e_k = ε exactly; GD stops at the "
           "first step past it, so α^(T1) ≥ α* and α^(T1) − α* is less than the last "
           "increment (2η/K) a_k e_k. With ε = 0.01, η = 0.1: " + "; ".join(rows) + ".")
    r.check("bracket", "α^(T1−1) < α* ≤ α^(T1) in the exact dynamics (ε = 0.01, η = 0.1)",
            NUMERIC, ok, "K = 2..5")
    return r.result("3", "Convergence at T1",
                    "Symbolic K: the gradient at a symmetric point is symmetric with zero "
                    "column sums (so GD from Q = 0 stays on the ray), β = −α/(K−1), the "
                    "closed form of α*, and Q^(T1); the overshoot of discrete GD past α* "
                    "measured numerically.")


# --- numeric check against gradient descent -------------------------------------------

def population_check(ctx, claimed: dict = NUMERIC_CLAIMED):
    """Against simulator (a): the bracket of α* by the last GD step, and the exact
    structure of β and Q^(T1) at the α reached."""
    from ..setting import Protocol
    from ..checks import EXACT_TOL, PopulationCheck, general_position, z_path
    cases = ((2, 0.01, 0.1, 3), (3, 0.01, 0.1, 6), (4, 0.01, 0.4, 8), (4, 0.001, 0.5, 5),
             (8, 0.02, 0.2, 11))
    bracket_ok, structure_err, overshoot_abs, overshoot_rel, lines = True, 0.0, 0.0, 0.0, []
    for K, eps, eta, d in cases:
        V = general_position(10 + K, d, K).V
        Q1, T1, path = ctx.population_path(V, Protocol(eps=eps, eta=eta))
        z = z_path(V, path)
        a_star = claimed["alpha_star"](K, eps)
        alpha_T, alpha_prev = np.diag(z[T1]), np.diag(z[T1 - 1])
        inside = bool(np.all(alpha_prev < a_star) and np.all(a_star <= alpha_T))
        bracket_ok &= inside
        a = float(alpha_T.mean())
        structure_err = max(structure_err, float(np.abs(Q1 - claimed["q_t1"](V, a)).max()),
                            float(np.abs(z[T1] - claimed["symmetric_logits"](K, a)).max()))
        over = float(np.abs(alpha_T - a_star).max())
        overshoot_abs, overshoot_rel = max(overshoot_abs, over), max(overshoot_rel, over / a_star)
        lines.append(f"K={K}, ε={eps:g}, η={eta:g}: T1={T1}, α*={a_star:.6g}, "
                     f"α(T1−1)={alpha_prev.mean():.6g}, α(T1)={a:.6g} "
                     f"({'bracketed' if inside else 'NOT bracketed'})")
    return PopulationCheck(
        "closed-form α* against the α simulator (a) reaches at T1 (GD overshoots the "
        "threshold by less than one step); β(T1) = −α(T1)/(K−1) and Q^(T1) = "
        "α(T1)K/(K−1)(VVᵀ − v̄v̄ᵀ) exactly, random V in R^d, 5 (K, ε, η)",
        overshoot_abs, overshoot_rel,
        f"α(T1−1) < α* <= α(T1) for every k (one GD step); structure <= {EXACT_TOL:g}",
        bracket_ok and structure_err <= EXACT_TOL,
        lines + [f"max error of β and Q^(T1) against the formula at α(T1): {structure_err:.2g}",
                 "max_abs / max_rel above are the discrete overshoot α(T1) − α*"])


def check(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..checks import MAIN, Point, mean_se, monte_carlo_check, with_batch_sweep
    population = population_check(ctx, claimed)
    theory_main = ctx.theory(MAIN)
    target = claimed["population_alpha"](theory_main)
    points, spread = [], []
    for N in ctx.budget.Ns:
        dev = []
        for s in ctx.seeds():
            r = ctx.prompts(N, s)
            dev.append(r.pretrain.alpha - target)
            spread.append((N, float(np.ptp(np.diag(r.pretrain.z)))))
        points.append(Point(N, *mean_se(dev), len(dev)))
    largest = max(v for N, v in spread if N == ctx.budget.Ns[-1])
    prompts = monte_carlo_check(
        "mean α at T1 of simulator (b) minus the population GD value α(T1) "
        f"(= {target:.6g}; α* = {theory_main.pretrain.alpha_star:.6g}), "
        "K = 2, γ = (1, −0.9)", points,
        [f"α_k differ across k by up to {largest:.2g} at N = {ctx.budget.Ns[-1]}: finite "
         "prompts break the exact symmetry α_1 = α_2 of the population dynamics"])
    prompts = with_batch_sweep(prompts, ctx, lambda r: r.pretrain.alpha - target)
    return population, prompts, []
