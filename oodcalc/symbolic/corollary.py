"""Claim 6: the two failure cases of the corollary, from the claim-5 weights."""

from __future__ import annotations

import sympy as sp

from .core import eq, EXPLICIT, K_RANGE, SYMBOLIC, Recorder, attention, conditional_error, sym_K
from .ood import q_t1


def householder_to_mean(K: int, k: int = 0) -> sp.Matrix:
    """An exact orthogonal K×K matrix whose column k is 1/√K (a Householder reflection)."""
    target = sp.ones(K, 1) / sp.sqrt(K)
    e = sp.zeros(K, 1)
    e[k] = 1
    w = e - target
    return (sp.eye(K) - 2 * w * w.T / (w.T * w)[0]).applyfunc(_exact)


def _exact(x: sp.Expr) -> sp.Expr:
    """Canonical form of an algebraic number in √K: rationalise, then expand."""
    return sp.expand(sp.radsimp(x))


def derive():
    r = Recorder()
    K = sym_K()
    n, m = sp.symbols("n m", integer=True, positive=True)

    # uniform attention and its error, symbolic K
    a_uniform = sp.exp(0) / sp.Sum(sp.exp(0), (m, 1, K)).doit()
    e_uniform = sp.simplify(sp.Rational(1, 2) * ((1 - a_uniform) ** 2
                                                + sp.Sum(a_uniform ** 2, (n, 1, K - 1)).doit()))
    r.step("If a column of OOD logits is all zero (α = β = 0), the softmax gives every "
           "feature 1/K and the error is that of uniform attention, i.e. of random guessing:",
           eq(sp.Symbol("Attn_n"), a_uniform), eq(sp.Symbol("e_k"), e_uniform))
    r.check("uniform attention 1/K has e_k = (K − 1)/(2K) (symbolic K)", SYMBOLIC,
            sp.simplify(e_uniform - (K - 1) / (2 * K)) == 0)

    # case 1: orthogonal subspaces
    Mk = sp.MatrixSymbol("M", K, K)
    one = sp.MatrixSymbol("1", K, 1)
    a = sp.Symbol("alpha")
    zero = sp.ZeroMatrix(K, K)
    b = Mk.T * one / sp.sqrt(K)
    weights = (a * K / (K - 1) * (Mk.T * Mk - b * b.T)).subs(Mk, zero).doit()
    r.step("Case 1, span(V) ⊥ span(U): M = VᵀU = 0, so b = Mᵀ1/√K = 0 and the claim-5 "
           "weights vanish for every query:", eq(sp.Symbol("U^T Q^{(T_1)} U"), weights))
    r.check("M = 0 makes every OOD weight 0 (symbolic K)", SYMBOLIC,
            weights == zero or sp.simplify(weights) == zero or weights == 0)

    # case 2: u_k = v̄ inside span(V)
    r.step("Case 2, u_k = v̄ and span(U) = span(V): U = VM with M orthogonal (MᵀM = I) "
           "and b_k = ⟨v̄, v̄⟩ = 1, b_k' = ⟨u_k', u_k⟩ = 0 for k' ≠ k. Column k of the "
           "claim-5 weights is then Kα/(K−1)(1 − 1) on the diagonal and "
           "Kα/(K−1)(0 − 0·1) off it: α_{u_k} = β_{u_k',u_k} = 0. The other columns are not "
           "uniform: α_{u_k'} = Kα/(K−1) there, so only the query u_k = v̄ fails.")
    ok = True
    for Kx in K_RANGE:
        R = householder_to_mean(Kx)
        ok &= (R.T * R).applyfunc(_exact) == sp.eye(Kx)
        V = sp.eye(Kx)
        U = V * R
        alpha = sp.Symbol("alpha", positive=True)
        Z = (U.T * q_t1(V, alpha) * U).applyfunc(_exact)
        ok &= all(Z[n_, 0] == 0 for n_ in range(Kx))
        ok &= all(_exact(Z[k_, k_] - alpha * Kx / (Kx - 1)) == 0 for k_ in range(1, Kx))
        col = attention(list(Z[:, 0]))
        ok &= all(sp.simplify(x - sp.Rational(1, Kx)) == 0 for x in col)
        ok &= sp.simplify(conditional_error(list(Z[:, 0]), 0)
                          - sp.Rational(Kx - 1, 2 * Kx)) == 0
    r.check("with an exact orthonormal U whose first feature is v̄, u_kᵀQ^(T1)U has column "
            "k = 0, attention 1/K and e_k = (K−1)/(2K); the other α_{u_k'} = Kα/(K−1)",
            EXPLICIT, ok, "K = 2..8 (Householder reflection, exact)")
    r.step("For K = 4 the failure error is 3/8 = 0.375 with attention 0.25, the seed's "
           "corollary rows.")
    return r.result(6, "Two failure cases", SYMBOLIC,
                    "Symbolic K from the claim-5 matrix form (M = 0; M orthogonal with "
                    "b_k = 1); checked exactly with explicit mean-query frames for K = 2..8.")
