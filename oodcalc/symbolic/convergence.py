"""Claim 3: the weights at T1 — symmetry, conservation and the stopping rule."""

from __future__ import annotations

import itertools
import random

import numpy as np
import sympy as sp

from .core import (eq, EXPLICIT, K_RANGE, NUMERIC, SYMBOLIC, Recorder, k_range_text, logits, loss,
                   matrix_expr_is_zero, sym_K)


def symmetric_ray():
    """The column of a symmetric point (α on the diagonal, β elsewhere), symbolic K:
    returns ``(a_k, a_n, e_k)`` built from Sums over the K − 1 other features."""
    K = sym_K()
    n = sp.Symbol("n", integer=True, positive=True)
    alpha, beta = sp.symbols("alpha beta", real=True)
    total = sp.exp(alpha) + sp.Sum(sp.exp(beta), (n, 1, K - 1)).doit()
    a_k, a_n = sp.exp(alpha) / total, sp.exp(beta) / total
    e_k = sp.Rational(1, 2) * ((1 - a_k) ** 2 + sp.Sum(a_n ** 2, (n, 1, K - 1)).doit())
    return alpha, beta, a_k, a_n, e_k


def alpha_star_expression():
    """``(α*, ε, δ)``: α* solved by sympy from ``e_k = ε`` on the conserved symmetric ray,
    written with ``δ = √(2ε(K−1)/K)``; see :func:`derive` for the steps."""
    return _solve()[:3]


def _solve():
    K = sym_K()
    alpha, beta, a_k, a_n, e_k = symmetric_ray()
    eps = sp.Symbol("epsilon", positive=True)
    beta_of_alpha = sp.solve(eq(alpha + (K - 1) * beta, 0), beta)[0]
    t = sp.Symbol("t", positive=True)                 # t = e^{α − β}, the margin's exp
    e_t = sp.factor(sp.simplify(e_k.subs(alpha, beta + sp.log(t))))
    roots = sp.solve(eq(e_t, eps), t)
    # keep the root that is > 0 on the domain 0 < ε < (K−1)/(2K) (checked at a sample)
    sample = {K: 4, eps: sp.Rational(1, 100)}
    roots = [x for x in roots if sp.N(x.subs(sample)) > 0]
    assert len(roots) == 1, roots
    t_star = roots[0]
    # write t* with δ = √(2ε(K−1)/K); simplify with K − 1 = m > 0 so √((K−1)²) = K − 1
    delta = sp.Symbol("delta", positive=True)
    delta_value = sp.sqrt(2 * eps * (K - 1) / K)
    m = sp.Symbol("m", positive=True)
    t_star_delta = sp.factor(sp.simplify(
        t_star.subs(eps, delta ** 2 * K / (2 * (K - 1))).subs(K, m + 1))).subs(m, K - 1)
    alpha_star_delta = (K - 1) / K * sp.log(t_star_delta)   # α − β = αK/(K−1) = ln t
    return alpha_star_delta, eps, delta, delta_value, beta_of_alpha, e_t, t, t_star, e_k


def _is_alpha_beta(Z: sp.Matrix) -> bool:
    K = Z.shape[0]
    diag = {Z[i, i] for i in range(K)}
    off = {Z[i, j] for i in range(K) for j in range(K) if i != j}
    return len(diag) == 1 and len(off) == 1


def derive():
    r = Recorder()
    K = sym_K()

    # 1. Symmetry from Z = 0.
    ok_inv, ok_fixed = True, True
    for Kx in K_RANGE:
        Z = logits(Kx)
        L = loss(Z)
        for i, j in itertools.combinations(range(Kx), 2):
            perm = list(range(Kx))
            perm[i], perm[j] = j, i
            swap = {Z[p, q]: Z[perm[p], perm[q]] for p in range(Kx) for q in range(Kx)}
            ok_inv &= L.xreplace(swap) == L
        fixed = []
        for i, j in itertools.combinations(range(Kx), 2):
            P = sp.eye(Kx).permute([[i, j]], orientation="rows")
            fixed.extend(P * Z * P.T - Z)
        A, _ = sp.linear_eq_to_matrix(fixed, list(Z))
        null = A.nullspace()
        ok_fixed &= len(null) == 2 and all(_is_alpha_beta(sp.Matrix(Kx, Kx, list(v))) for v in null)
    r.step("Symmetry. L is unchanged when the features are relabelled (Z → PZPᵀ for every "
           "permutation P), so one GD step commutes with relabelling. Z^(0) = 0 is fixed by "
           "every relabelling, hence so is every iterate: the matrices with Z = PZPᵀ for "
           "all transpositions have one common diagonal value α and one common off-diagonal "
           "value β.")
    r.check("L(PZPᵀ) is identical to L(Z) for every transposition P", EXPLICIT, ok_inv,
            k_range_text(K_RANGE))
    r.check("the solutions of Z = PZPᵀ (all transpositions) form a 2-parameter family "
            "(α on the diagonal, β off it)", EXPLICIT, ok_fixed, k_range_text(K_RANGE))

    # 2. β from conservation.
    alpha_star, eps, delta, delta_value, beta_of_alpha, e_t, t, t_star, e_k = _solve()
    alpha, beta = sp.symbols("alpha beta", real=True)
    r.step("Conservation (claim 2): every column of Z sums to its initial value 0 at every "
           "step, so α + (K − 1)β = 0 and sympy solves", eq(beta, beta_of_alpha))
    r.check("β = −α/(K−1) solved from α + (K−1)β = 0", SYMBOLIC,
            sp.simplify(beta_of_alpha + alpha / (K - 1)) == 0)

    # 3. The stopping rule on the ray.
    a_k_sym = sp.Symbol("a_k")
    ray_a = sp.exp(alpha) / (sp.exp(alpha) + (K - 1) * sp.exp(beta))
    ek_in_ak = sp.simplify(e_k.subs(sp.exp(alpha), sp.exp(beta) * a_k_sym * (K - 1)
                                    / (1 - a_k_sym)))
    r.step("On the ray every wrong feature gets a_n = (1 − a_k)/(K − 1); sympy builds e_k "
           "from the definitions with symbolic K and finds",
           eq(sp.Symbol("a_k"), ray_a), eq(sp.Symbol("e_k"), sp.factor(ek_in_ak)))
    r.check("e_k = K(1 − a_k)²/(2(K − 1)) on the symmetric ray", SYMBOLIC,
            sp.simplify(ek_in_ak - K * (1 - a_k_sym) ** 2 / (2 * (K - 1))) == 0)
    decreasing = sp.simplify(sp.diff(e_t, t)).subs(K, sp.Symbol("j", nonnegative=True) + 2)
    r.step("With t = e^{α − β} (the exponentiated margin), e_k depends on t alone and falls "
           "as t grows:", eq(sp.Symbol("e_k"), e_t),
           eq(sp.Derivative(sp.Symbol("e_k"), t), sp.factor(sp.diff(e_t, t))))
    r.check("de_k/dt < 0 for every K ≥ 2, t > 0", SYMBOLIC, bool(decreasing.is_negative))
    r.step("Since α only grows (claim 2), the stopping rule e_k ≤ ε is first met at the "
           "margin where e_k = ε. sympy solves e_k(t) = ε for t > 0 and, with "
           "α − β = αK/(K − 1), α = (K − 1)/K · ln t:",
           eq(t, t_star), eq(sp.Symbol("alpha^*_{K,epsilon}"), alpha_star),
           eq(delta, delta_value))
    paper = (K - 1) / K * sp.log((K - 1) * (1 - delta) / delta)
    r.check("the solved α* equals (K−1)/K · ln((K−1)(1−δ)/δ), δ = √(2ε(K−1)/K)", SYMBOLIC,
            sp.simplify(sp.exp(alpha_star * K / (K - 1)) - sp.exp(paper * K / (K - 1))) == 0)

    from .. import theory
    f = sp.lambdify((K, eps), alpha_star.subs(delta, delta_value), "mpmath")
    rng = random.Random(3)
    worst = 0.0
    for _ in range(30):
        Kx = rng.randint(2, 50)
        ex = 10 ** rng.uniform(-12, np.log10((Kx - 1) / (2 * Kx)) - 0.01)
        worst = max(worst, abs(float(f(Kx, ex)) - theory.alpha_star(Kx, ex))
                    / abs(theory.alpha_star(Kx, ex)))
    r.check("sympy's α* agrees with oodcalc.theory.alpha_star (the closed form predict uses)",
            NUMERIC, worst < 1e-12, "30 random (K ≤ 50, ε), relative difference < 1e-12")
    r.step("Domain: α* > 0 iff δ < (K − 1)/K, i.e. ε < (K − 1)/(2K); for larger ε the rule "
           "holds at Q = 0 already (uniform attention has e_k = (K − 1)/(2K)) and T1 = 0.")

    # 4. Q at T1.
    Ks = K
    V = sp.MatrixSymbol("V", Ks, Ks)
    one = sp.MatrixSymbol("1", Ks, 1)
    I = sp.Identity(Ks)
    a = sp.Symbol("alpha")
    b = beta_of_alpha.subs(alpha, a)
    Zsym = a * I + b * (one * one.T - I)
    vbar = V * one / sp.sqrt(Ks)
    lhs = (V * Zsym * V.T).expand()
    rhs = (a * Ks / (Ks - 1) * (V * V.T - vbar * vbar.T)).expand()
    ok_q = matrix_expr_is_zero(lhs - rhs)
    r.step("Every iterate is Q = V Z Vᵀ (the gradient lies in span{v_n v_kᵀ}), so at T1, "
           "with v̄ = (1/√K) Σ_i v_i = V1/√K,",
           eq(sp.Symbol("Q^{(T_1)}"), a * Ks / (Ks - 1) * (sp.Symbol("V V^T")
                 - sp.Symbol("vbar vbar^T"))))
    r.check("V(αI + β(11ᵀ − I))Vᵀ with β = −α/(K−1) equals αK/(K−1)(VVᵀ − v̄v̄ᵀ) "
            "(matrix algebra with symbolic K)", SYMBOLIC, ok_q)

    # 5. The discrete value.
    from ..dynamics import descend
    rows, ok = [], True
    for Kx in (2, 3, 4, 5):
        run = descend(np.zeros((1, Kx, Kx)), 0.1, 0.01, 100_000, record=True)
        T1 = int(run.steps[0])
        a1 = run.z[0][0, 0]
        a0 = run.trajectory[T1 - 1][0][0, 0]
        target = theory.alpha_star(Kx, 0.01)
        ok &= a0 < target <= a1
        rows.append(f"K = {Kx}: T1 = {T1}, α^(T1) − α* = {a1 - target:.3g}")
    r.step("Closed form versus discrete GD: the threshold α* is where e_k = ε exactly; GD "
           "stops at the first step past it, so α^(T1) ≥ α* and α^(T1) − α* is less than "
           "the last increment (2η/K) a_k e_k. With ε = 0.01, η = 0.1: " + "; ".join(rows)
           + ".")
    r.check("α^(T1−1) < α* ≤ α^(T1) in the exact dynamics (ε = 0.01, η = 0.1)", NUMERIC, ok,
            "K = 2..5")
    return r.result(3, "Convergence at T1", SYMBOLIC,
                    "Symbolic K for β = −α/(K−1), the closed form of α* and Q^(T1); the "
                    "symmetry of the iterates from Z = 0 explicitly for K = 2..8; the "
                    "overshoot of discrete GD past α* measured numerically.")
