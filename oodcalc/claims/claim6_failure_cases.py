"""Claim 6, the corollary's two failure cases: orthogonal subspaces, and a query at the
mean feature inside span(V), make the OOD query's attention uniform (random guessing).

Derivation (symbolic K): in claim 5's derived form Kα/(K−1)(MᵀM − bbᵀ), b = Mᵀ1/√K,
(1) M = 0 zeroes every weight; (2) U = VR with RᵀR = I and u_k = v̄ (so 1 = √K R e_k)
gives b = RᵀRe_k = e_k and column k of MᵀM − bbᵀ is e_k − e_k(e_kᵀe_k) = 0. A zero column
gives every feature attention 1/K and e_k = (K−1)/(2K), from the definitions.

Numeric check: simulator (a) at T1 for both cases and K = 2, 3, 4, 8; finite prompts.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from .. import theory
from ..symbolic.core import (EXPLICIT, K_RANGE, SYMBOLIC, Recorder, eq, is_zero,
                             matrix_expr_is_zero, sym_K)
from ..symbolic.model import Column, attention, conditional_error
from .claim5_ood_weights import ood_logits_at_t1

__all__ = ["CLAIMED", "NUMERIC_CLAIMED", "check", "derive", "householder_to_mean"]


CLAIMED = {
    "uniform-attention": lambda K: 1 / K,
    "uniform-error": lambda K: (K - 1) / (2 * K),
    # the weights of the affected column: zero
    "orthogonal-weights": lambda K: sp.ZeroMatrix(K, K),
    "mean-query-column": lambda K: sp.ZeroMatrix(K, 1),
}
NUMERIC_CLAIMED = {"uniform_error": theory.uniform_error, "corollary_cases": theory.corollary_cases}


def _exact(x: sp.Expr) -> sp.Expr:
    """Canonical form of an algebraic number in √K: rationalise, then expand."""
    return sp.expand(sp.radsimp(x))


def householder_to_mean(K: int, k: int = 0) -> sp.Matrix:
    """An exact orthogonal K×K matrix whose column k is 1/√K (a Householder reflection)."""
    target = sp.ones(K, 1) / sp.sqrt(K)
    e = sp.zeros(K, 1)
    e[k] = 1
    w = e - target
    return (sp.eye(K) - 2 * w * w.T / (w.T * w)[0]).applyfunc(_exact)


def derive(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()
    alpha, M, b, Z_ood = ood_logits_at_t1()
    one = sp.MatrixSymbol("1", K, 1)
    general = Z_ood.subs(b, M.T * one / sp.sqrt(K)).doit()
    r.step("Claim 5 derives the OOD logits at T1 as Kα/(K − 1)(MᵀM − bbᵀ) with b = Mᵀ1/√K:",
           eq(sp.Symbol("U^T Q^{(T_1)} U"), general))

    # Case 1.
    zero = general.subs(M, sp.ZeroMatrix(K, K)).doit()
    r.step("Case 1, span(V) ⊥ span(U): M = VᵀU = 0, and sympy gives",
           eq(sp.Symbol("U^T Q^{(T_1)} U"), zero))
    r.check("orthogonal", "M = 0 makes every OOD weight 0 (matrix symbols, symbolic K)",
            SYMBOLIC, matrix_expr_is_zero((zero - claimed["orthogonal-weights"](K)).doit()),
            decisive=True)

    # Case 2.
    R, e = sp.MatrixSymbol("R", K, K), sp.MatrixSymbol("e_k", K, 1)
    column = (general * e).subs(M, R).doit().expand()
    column = column.subs(one, sp.sqrt(K) * R * e).doit().expand()       # u_k = v̄
    column = column.subs(R.T * R, sp.Identity(K)).doit().expand()       # RᵀR = I
    column = column.subs(e.T * e, sp.Identity(1)).doit().expand()       # e_kᵀe_k = 1
    r.step("Case 2, span(U) = span(V) and u_k = v̄: U = VR with R orthogonal, so M = R, and "
           "u_k = Ue_k = v̄ = V1/√K means 1 = √K R e_k. Column k of the weights, with "
           "RᵀR = I and e_kᵀe_k = 1:", eq(sp.Symbol("U^T Q^{(T_1)} u_k"), column))
    r.check("mean-query", "u_k = v̄ inside span(V) makes column k of the OOD weights 0 "
            "(matrix symbols, symbolic K)", SYMBOLIC,
            matrix_expr_is_zero((column - claimed["mean-query-column"](K)).doit()),
            decisive=True)

    # A zero column is uniform attention and random guessing.
    col = Column("k")
    uniform = col.on_ray(0, 0)
    a_k = sp.simplify(col.a["k"].xreplace(uniform))
    error = sp.simplify(col.error.xreplace(uniform))
    r.step("A zero column of logits (α = β = 0): every feature gets the same weight, and the "
           "error is that of uniform attention, i.e. of random guessing:",
           eq(sp.Symbol("Attn_n"), a_k), eq(sp.Symbol("e_k"), error))
    r.check("uniform", "a zero column gives attention 1/K and e_k = (K − 1)/(2K) "
            "(symbolic K)", SYMBOLIC,
            is_zero(a_k - claimed["uniform-attention"](K))
            and is_zero(error - claimed["uniform-error"](K)), decisive=True)
    r.step("The other columns are not uniform: column k' ≠ k of MᵀM − bbᵀ is "
           "e_k' − e_k(e_kᵀe_k') = e_k', so α_{u_k'} = Kα/(K − 1): only the query u_k = v̄ "
           "fails. For K = 4 the failure error is 3/8 = 0.375 with attention 0.25, the "
           "paper's corollary rows.")

    ok = True
    for Kx in K_RANGE:
        Rx = householder_to_mean(Kx)
        ok &= (Rx.T * Rx).applyfunc(_exact) == sp.eye(Kx)
        a = sp.Symbol("alpha", positive=True)
        Zx = sp.Matrix(Kx, Kx, lambda i, j: a if i == j else -a / (Kx - 1))
        Zo = (Rx.T * Zx * Rx).applyfunc(_exact)          # V = I, U = R
        ok &= all(Zo[n, 0] == 0 for n in range(Kx))
        ok &= all(_exact(Zo[k, k] - a * Kx / (Kx - 1)) == 0 for k in range(1, Kx))
        colx = attention(list(Zo[:, 0]))
        ok &= all(sp.simplify(x - claimed["uniform-attention"](sp.Integer(Kx))) == 0
                  for x in colx)
        ok &= sp.simplify(conditional_error(list(Zo[:, 0]), 0)
                          - claimed["uniform-error"](sp.Integer(Kx))) == 0
    r.check("mean-query-explicit", "with an exact orthonormal U whose first feature is v̄ "
            "(Householder reflection), u_1ᵀQ^(T1)U is zero, attention 1/K, e_1 = (K−1)/(2K); "
            "the other α_{u_k'} = Kα/(K−1)", EXPLICIT, ok, ks=K_RANGE)
    return r.result("6", "Two failure cases",
                    "Symbolic K from claim 5's derived form: M = 0, and (UᵀU = I, span(U) = "
                    "span(V), u_k = v̄) zero the affected column; a zero column is uniform "
                    "attention with the error of random guessing. Exact frames for K = 2..6.")


# --- numeric check against gradient descent -------------------------------------------

def check(ctx, claimed: dict = NUMERIC_CLAIMED):
    from .. import geometry as geo
    from ..setting import Protocol, Setting
    from ..simulate.population import errors_and_gradient
    from ..checks import (EXACT_TOL, K_SIGMA, OOD_GEOMETRIES, OOD_SETTING, Point,
                          PopulationCheck, mean_se, monte_carlo_check, rel)
    worst, lines, flagged = 0.0, [], True
    for K in (2, 3, 4, 8):
        for geometry in (geo.orthogonal(K), geo.mean_query(K)):
            rep = ctx.population(Setting(geometry, Protocol(eta=0.4)))
            cases = claimed["corollary_cases"](geometry.M)
            hit = [k for k, c in enumerate(cases) if c]
            expected = [0] if geometry.kind == "mean-query" else list(range(K))
            flagged &= hit == expected
            # the corollary's queries (from the geometry), whatever the detector flagged
            err = max(float(np.abs(rep.ood.z[:, expected]).max()),
                      float(np.abs(rep.ood.attention[:, expected] - 1.0 / K).max()),
                      float(np.abs(rep.ood.error[expected] - claimed["uniform_error"](K)).max()))
            worst = max(worst, err)
            lines.append(f"{geometry.kind} K={K}: queries {[k + 1 for k in expected]} uniform "
                         f"(flagged {[k + 1 for k in hit]}); "
                         f"e = {rep.ood.error[expected].max():.6g} vs (K−1)/(2K) = "
                         f"{claimed['uniform_error'](K):.6g}; max error {err:.2g}")
    population = PopulationCheck(
        "simulator (a) at T1: α = β = 0, attention 1/K and e_k = (K−1)/(2K) (random "
        "guessing) for the affected queries; orthogonal and mean-query, K = 2, 3, 4, 8",
        worst, rel(worst, 0.5), f"<= {EXACT_TOL:g} (exact)", worst <= EXACT_TOL and flagged,
        lines)

    K = OOD_SETTING.K
    Umq, Uorth = OOD_GEOMETRIES["mean-query"].U, OOD_GEOMETRIES["orthogonal"].U
    points, orth = [], 0.0
    for N in ctx.budget.Ns:
        dev = []
        for s in ctx.seeds():
            Q1 = ctx.prompt_q1(N, s)
            dev.append(errors_and_gradient(Q1, Umq)[0][0] - claimed["uniform_error"](K))
            orth = max(orth, float(np.abs(Uorth.T @ Q1 @ Uorth).max()))
        points.append(Point(N, *mean_se(dev), len(dev)))
    check_b = monte_carlo_check(
        "mean-query: e(u_1 = v̄) at T1 of simulator (b) minus (K−1)/(2K), K = 4; "
        "orthogonal: max |α|, |β| on U (exact)", points,
        [f"orthogonal subspaces stay exact at finite N: max |u_nᵀ Q^(T1) u_k| = {orth:.2g} "
         "(Q only ever moves inside span(V))"])
    check_b.passed = check_b.passed and orth <= EXACT_TOL
    findings = []
    if points[-1].mean < 0 and abs(points[-1].mean) > K_SIGMA * points[-1].se:
        findings.append("finite prompts: the mean-query error sits below random guessing "
                        "by a small, significant amount")
    return population, check_b, findings
