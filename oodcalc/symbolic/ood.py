"""Claim 5: the OOD weights at T1, by putting the OOD features into Q^(T1)."""

from __future__ import annotations

import numpy as np
import sympy as sp

from .core import (eq, EXPLICIT, NUMERIC, SYMBOLIC, Recorder, cayley_orthonormal, conditional_error,
                   matrix_expr_is_zero, sym_K)

#: explicit K for the entry-wise derivation with symbolic M
OOD_K_RANGE = (2, 3, 4, 5)


def q_t1(V: sp.Matrix, alpha: sp.Expr) -> sp.Matrix:
    """Q^(T1) = V Z Vᵀ with the symmetric-point logits of claim 3 (α on the diagonal,
    β = −α/(K − 1) off it)."""
    K = V.shape[1]
    beta = -alpha / (K - 1)
    Z = sp.Matrix(K, K, lambda n, k: alpha if n == k else beta)
    return V * Z * V.T


def ood_logits_symbolic(K: int):
    """``(Z_ood, M, alpha)``: ``UᵀQ^(T1)U`` with ``V = [I; 0]``, ``U = [M; N]`` in
    R^{2K}, M and N full of symbols (U's part outside span(V) is N)."""
    alpha = sp.Symbol("alpha", positive=True)
    M = sp.Matrix(K, K, lambda n, k: sp.Symbol(f"M_{{{n + 1}{k + 1}}}", real=True))
    N = sp.Matrix(K, K, lambda n, k: sp.Symbol(f"N_{{{n + 1}{k + 1}}}", real=True))
    V = sp.Matrix.vstack(sp.eye(K), sp.zeros(K, K))
    U = sp.Matrix.vstack(M, N)
    return (U.T * q_t1(V, alpha) * U).applyfunc(sp.expand), M, alpha, V, U


def derive():
    r = Recorder()
    K = sym_K()
    r.step("Claim 3 gives Q^(T1) = V Z Vᵀ with Z = αI + β(11ᵀ − I), β = −α/(K − 1), "
           "α = α*. The OOD weights are u_kᵀ Q^(T1) u_k and u_k'ᵀ Q^(T1) u_k, i.e. the "
           "matrix UᵀQ^(T1)U.")

    # symbolic K, matrix algebra
    V, U = sp.MatrixSymbol("V", K, K), sp.MatrixSymbol("U", K, K)
    one = sp.MatrixSymbol("1", K, 1)
    a = sp.Symbol("alpha")
    vbar = V * one / sp.sqrt(K)
    Qt1 = a * K / (K - 1) * (V * V.T - vbar * vbar.T)
    Msym = V.T * U
    b = U.T * vbar
    ok = matrix_expr_is_zero((U.T * Qt1 * U).expand()
                             - (a * K / (K - 1) * (Msym.T * Msym - b * b.T)).expand())
    ok &= matrix_expr_is_zero((b - Msym.T * one / sp.sqrt(K)).expand())
    r.step("With M = VᵀU and the vector of projections b_k = ⟨u_k, v̄⟩, i.e. b = Uᵀv̄ = "
           "Mᵀ1/√K, matrix algebra gives",
           eq(sp.Symbol("U^T Q^{(T_1)} U"), a * K / (K - 1) * (sp.Symbol("M^T M")
                 - sp.Symbol("b b^T"))))
    r.check("UᵀQ^(T1)U = αK/(K−1)(MᵀM − bbᵀ) and b = Mᵀ1/√K (matrix symbols, symbolic K)",
            SYMBOLIC, ok)

    # explicit K with symbolic entries of M
    ok, shown = True, None
    for Kx in OOD_K_RANGE:
        Z, M, alpha, Vx, Ux = ood_logits_symbolic(Kx)
        vb = Vx * sp.ones(Kx, 1) / sp.sqrt(Kx)
        bx = [(Ux[:, k].T * vb)[0] for k in range(Kx)]          # ⟨u_k, v̄⟩ from vectors
        MtM = M.T * M
        for k in range(Kx):
            for kp in range(Kx):
                paper = alpha * Kx / (Kx - 1) * (MtM[kp, k] - bx[k] * bx[kp])
                ok &= sp.expand(Z[kp, k] - paper) == 0
        if Kx == 2:
            shown = (Z, M, alpha)
    Z2, M2, alpha2 = shown
    r.step("Entry by entry, with V = [I; 0] and U = [M; N] in R^{2K} (any orthonormal V can "
           "be rotated there; a rotation of R^d preserves every inner product) and every "
           "entry of M and N a free symbol, sympy expands u_k'ᵀQ^(T1)u_k. For K = 2:",
           eq(sp.Symbol("alpha_{u_1}"), sp.factor(Z2[0, 0])),
           eq(sp.Symbol("beta_{u_2,u_1}"), sp.factor(Z2[1, 0])))
    r.check("α_{u_k} = Kα/(K−1)([MᵀM]_kk − ⟨u_k,v̄⟩²) and β_{u_k',u_k} = Kα/(K−1)"
            "([MᵀM]_k'k − ⟨u_k,v̄⟩⟨u_k',v̄⟩), ⟨u_k,v̄⟩ computed from the vectors; the part N "
            "of U outside span(V) drops out", EXPLICIT, ok, "K = 2..5, symbolic M and N")

    # a general orthonormal V, exactly
    Kx, d = 3, 5
    F = cayley_orthonormal(d, d, seed=7)
    Vx, Vperp = F[:, :Kx], F[:, Kx:]
    M = sp.Matrix(Kx, Kx, lambda n, k: sp.Symbol(f"m{n}{k}", real=True))
    Nn = sp.Matrix(d - Kx, Kx, lambda n, k: sp.Symbol(f"n{n}{k}", real=True))
    Ux = Vx * M + Vperp * Nn
    alpha = sp.Symbol("alpha", positive=True)
    Z = (Ux.T * q_t1(Vx, alpha) * Ux).applyfunc(sp.expand)
    bvec = M.T * sp.ones(Kx, 1) / sp.sqrt(Kx)
    paper = (alpha * Kx / (Kx - 1) * (M.T * M - bvec * bvec.T)).applyfunc(sp.expand)
    r.check("the same with a random exact rational orthonormal V in R^5 and U = VM + V⊥N",
            EXPLICIT, (Z - paper).applyfunc(sp.expand) == sp.zeros(Kx, Kx), "K = 3, d = 5")

    # the OOD error
    s = sp.Symbol("s_1", real=True)
    e1 = conditional_error([s, 0], 0)
    r.step("The OOD error is the model's e_k evaluated on these logits, L_{u_k} = e_k/K. "
           "For K = 2 it depends only on the margin s_1 = α_{u_1} − β_{u_2,u_1}:",
           eq(sp.Symbol("e_1"), sp.factor(sp.simplify(e1))),
           eq(sp.Symbol("s_1"), sp.factor(Z2[0, 0] - Z2[1, 0])))
    r.check("for K = 2, e_1 = 1/(1 + e^{s_1})² (from the definition of e_k)", SYMBOLIC,
            sp.simplify(e1 - 1 / (1 + sp.exp(s)) ** 2) == 0)

    from .. import theory
    from ..model import conditional_errors
    rng = np.random.default_rng(5)
    worst = 0.0
    for Kx in (2, 3, 4, 6):
        d = Kx + 3
        Vn = np.linalg.qr(rng.standard_normal((d, Kx)))[0]
        Un = np.linalg.qr(rng.standard_normal((d, Kx)))[0]
        a_star = theory.alpha_star(Kx, 0.01)
        direct = Un.T @ theory.q_at_t1(Vn, a_star) @ Un
        worst = max(worst, float(np.abs(direct - theory.ood_logits(Vn.T @ Un, a_star)).max()),
                    float(np.abs(conditional_errors(direct)
                                 - theory.ood_errors(Vn.T @ Un, a_star)).max()))
    r.check("oodcalc.theory.ood_logits / ood_errors equal UᵀQ^(T1)U and its errors "
            "(random orthonormal V, U)", NUMERIC, worst < 1e-12,
            "K = 2, 3, 4, 6, d = K + 3, max |difference| < 1e-12")
    return r.result(5, "OOD weights at T1", SYMBOLIC,
                    "Symbolic K by matrix algebra (UᵀQ^(T1)U = Kα/(K−1)(MᵀM − bbᵀ)); entry by "
                    "entry with symbolic M and N for K = 2..5; the K = 2 error in closed form.")
