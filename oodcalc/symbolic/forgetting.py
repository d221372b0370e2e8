"""Claim 8: the forgetting threshold — exact for K = 2, corrected and bounded for K > 2."""

from __future__ import annotations

import random

import numpy as np
import sympy as sp

from .core import (EXPLICIT, NUMERIC, SYMBOLIC, Recorder, attention, column_symbols,
                   conditional_error, eq, sym_K)
from .conservation import gradient_closed_form


def source_trend(gamma, eps: float = 0.01, eta: float = 0.1) -> list[str]:
    """Trend of each L_{v_k} through fine-tuning in the exact dynamics (via predict)."""
    from ..geometry import parallel_shift
    from ..predict import predict
    from ..setting import Protocol, Setting
    report = predict(Setting(parallel_shift(list(gamma)), Protocol(eps=eps, eta=eta)))
    return [f.trend for f in report.forgetting]


def derive():
    r = Recorder()
    K = sym_K()
    gk, gm = sp.symbols("gamma_k gamma_m", real=True)
    Delta, Lam = sp.symbols("Delta Lambda", positive=True)
    r.step("Per fine-tuning step (claims 2 and 7), column k of the source logits changes by "
           "γ_k² Δ on the diagonal and by −γ_nγ_k Λ_n in row n, where Δ = (2η/K) a_k e_k > 0 "
           "is the growth of α_{u_k} and Λ_n the decrease of β_{u_n,u_k}, with Σ_n Λ_n = Δ "
           "(conservation). L_{v_k} = e_k/K depends on that column only.")

    # K = 2, exact
    Lam2 = sp.solve(eq(Delta, Lam), Lam)[0]                      # conservation, one n ≠ k
    ds = sp.factor(gk ** 2 * Delta - (-gk * gm * Lam2))          # δα − δβ
    s = sp.Symbol("s", real=True)
    e_src = sp.simplify(conditional_error([s, 0], 0))
    de = sp.simplify(sp.diff(e_src, s))
    r.step("K = 2. Conservation leaves one β per column, so Λ = Δ, and the source margin "
           "s = α_{v_k} − β_{v_m,v_k} changes at every step by", eq(sp.Symbol("delta s"), ds))
    r.step("and the source error falls with the margin:", eq(sp.Symbol("e_k"), e_src),
           eq(sp.Derivative(sp.Symbol("e_k"), s), de))
    r.check("for K = 2, δs = γ_k(γ_k + γ_m)Δ and de_k/ds < 0 (symbolic γ)", SYMBOLIC,
            sp.expand(ds - gk * (gk + gm) * Delta) == 0
            and bool(sp.simplify(de * sp.exp(-s) * (1 + sp.exp(s)) ** 3).is_negative))
    r.step("Δ > 0 at every step, so the sign of δs is that of γ_k² + γ_kγ_m, the same at "
           "every step: L_{v_k} rises monotonically iff −γ_kγ_m > γ_k² (forgetting), falls "
           "monotonically iff −γ_kγ_m < γ_k² (backward transfer), and stays put on the "
           "boundary. With one other feature m0 = m1 = m: the paper's two conditions are "
           "exact and complementary for K = 2.")
    rng = random.Random(8)
    ok, n = True, 0
    for _ in range(12):
        g = [rng.choice([-1, 1]) * rng.uniform(0.2, 1.0), rng.uniform(-1, 1)]
        trends = source_trend(g)
        for k, m in ((0, 1), (1, 0)):
            margin = g[k] ** 2 + g[k] * g[m]
            if abs(margin) < 1e-3:
                continue
            n += 1
            ok &= trends[k] == ("rising" if margin < 0 else "falling")
    r.check("K = 2 exact dynamics: L_{v_k} rising iff −γ_kγ_m > γ_k², falling otherwise",
            NUMERIC, ok, f"{n} features of 12 random γ (ε = 0.01, η = 0.1)")

    # K > 2: the first step from the symmetric source column
    ok = True
    for Kx in (3, 4, 5):
        zs = column_symbols(Kx)
        a_s = sp.Symbol("alpha_s", real=True)
        col = [a_s] + [-a_s / (Kx - 1)] * (Kx - 1)            # claim 3, query k = 1
        grads = [g.subs(dict(zip(zs, col))) for g in gradient_closed_form(zs, 0)]
        a = attention(col)
        e = conditional_error(col, 0)
        ok &= all(sp.simplify(gn - 2 * a[0] * e / (Kx - 1)) == 0 for gn in grads[1:])
    r.step("K > 2, first step. At T1 the source column is symmetric (claim 3), so every "
           "wrong feature has the same ∂e_k/∂z_{n,k} = g, and conservation makes "
           "g = 2a_k e_k/(K − 1). The first-order change of e_k is then",
           eq(sp.Symbol("delta e_k"), -sp.Symbol("g") * ((K - 1) * gk ** 2 * Delta
              + sp.Sum(gk * sp.Indexed("gamma", sp.Symbol("n")) * sp.Indexed(
                  "Lambda", sp.Symbol("n")), (sp.Symbol("n"), 1, K - 1)))))
    r.check("∂e_k/∂z_{n,k} = 2a_k e_k/(K−1) for every n ≠ k on the symmetric column "
            "(from the differentiated closed form)", EXPLICIT, ok, "K = 3..5")
    r.step("So L_{v_k} rises at the first step iff Σ_n (−γ_kγ_n) Λ_n > (K − 1) γ_k² Δ. With "
           "Λ_n ≥ 0 the left side is an average of the −γ_kγ_n weighted by Λ_n/Δ: "
           "−γ_kγ_{m0} > (K − 1)γ_k² is sufficient for an initial rise and "
           "−γ_kγ_{m1} > (K − 1)γ_k² is necessary. The factor K − 1, absent from the "
           "paper's condition, is the number of wrong features that share the growth Δ.")

    # symmetric family, all K, exact
    g = sp.Symbol("gamma", real=True)
    n = sp.Symbol("n", integer=True, positive=True)
    share = sp.solve(eq(sp.Sum(Lam, (n, 1, K - 1)).doit(), Delta), Lam)[0]
    dmargin = sp.factor(gk ** 2 * Delta + gk * g * share)
    r.step("Symmetric family, any K: if γ_n = γ for every n ≠ k, column k of the OOD "
           "logits starts symmetric in n (claim 5 with M = diag(γ)) and stays so, so "
           "conservation gives every Λ_n = Δ/(K − 1); the source column stays symmetric and "
           "each of its margins changes by", eq(sp.Symbol("delta s"), dmargin))
    r.check("equal shares Λ_n = Δ/(K−1) and δs = γ_k²Δ + γ_kγΔ/(K−1) (symbolic K)",
            SYMBOLIC, sp.simplify(share - Delta / (K - 1)) == 0
            and sp.simplify(dmargin - (gk ** 2 + gk * g / (K - 1)) * Delta) == 0)
    r.step("e_k falls with the margin on the symmetric ray (claim 3), so in this family "
           "L_{v_k} rises monotonically iff −γ_kγ > (K − 1)γ_k² and falls iff "
           "−γ_kγ < (K − 1)γ_k²: exact, for every K.")

    half = sp.Symbol("a_k", positive=True)
    ineq = sp.solve_univariate_inequality(half ** 2 + (1 - half) ** 2 <= half, half,
                                          relational=False)
    r.step("K > 2, backward transfer. If −γ_kγ_{m1} ≤ γ_k² then for every n "
           "γ_k²Δ + γ_kγ_nΛ_n ≥ γ_k²(Δ − Λ_n) ≥ 0 as long as every Λ_n ≥ 0 (hypothesis H: "
           "no OOD β of column k rises during fine-tuning), so every source margin grows. "
           "Then a_k only grows from 1 − δ ≥ 1/2, and for a_k ≥ 1/2, Σ_m a_m² ≤ a_k² + "
           "(1 − a_k)² ≤ a_k (sympy: the set A of a_k > 0 where a_k² + (1 − a_k)² ≤ a_k is "
           "given below), which makes every ∂e_k/∂z_{n,k} = a_n(a_n + a_k − Σ a_m²) ≥ 0: "
           "L_{v_k} falls monotonically. The paper's backward-transfer condition holds under "
           "H. H itself holds whenever the OOD attention a_k of column k is ≥ 1/2 (same "
           "inequality); it can fail when another feature dominates the OOD column.",
           eq(sp.Symbol("A"), ineq))
    r.check("a_k² + (1 − a_k)² ≤ a_k exactly on [1/2, 1]", SYMBOLIC,
            ineq == sp.Interval(sp.Rational(1, 2), 1))

    # counterexample to the paper's forgetting condition, and numbers
    trends = source_trend([0.5, -0.9, -0.9])
    trends2 = source_trend([0.4, -0.9, -0.9])
    r.step("Counterexample to the paper's forgetting condition for K > 2: γ = (0.5, −0.9, "
           "−0.9), feature 1. −γ_1γ_{m0} = 0.45 > γ_1² = 0.25, so the paper predicts "
           "forgetting; but this is the symmetric family with −γ_1γ = 0.45 < (K − 1)γ_1² = "
           "0.5, so L_{v_1} falls at every step. The exact dynamics agree: L_{v_1} is "
           f"{trends[0]}. With γ_1 = 0.4 instead (0.36 > 0.32) it is {trends2[0]}.")
    r.check("γ = (0.5, −0.9, −0.9): L_{v_1} falls (backward transfer), against the paper's "
            "forgetting condition; γ = (0.4, −0.9, −0.9): L_{v_1} rises", NUMERIC,
            trends[0] == "falling" and trends2[0] == "rising", "exact dynamics, ε = 0.01")
    r.finding("For K > 2 the paper's forgetting condition −γ_kγ_{m0} > γ_k² is not "
              "sufficient: with γ = (0.5, −0.9, −0.9) it predicts forgetting of v_1 but "
              "L_{v_1} falls (exactly, and in the dynamics). The derived threshold carries "
              "a factor K − 1: −γ_kγ_{m0} > (K − 1)γ_k² (initial rise; exact and monotone "
              "when the other γ are equal). The backward-transfer condition holds under "
              "the hypothesis that no OOD β of column k rises.")

    rng = np.random.default_rng(9)
    checked, ok_bt, ok_fg = 0, True, True
    for _ in range(12):
        Kx = int(rng.integers(3, 5))
        gam = rng.uniform(-1, 1, Kx)
        trends = source_trend(gam)
        for k in range(Kx):
            prods = [gam[k] * gam[m] for m in range(Kx) if m != k]
            if -min(prods) < gam[k] ** 2 - 1e-3:
                checked += 1
                ok_bt &= trends[k] == "falling"
            if -max(prods) > (Kx - 1) * gam[k] ** 2 + 1e-3:
                checked += 1
                ok_fg &= trends[k] in ("rising", "non-monotone")
    r.check("random γ, K = 3, 4: −γ_kγ_{m1} < γ_k² ⇒ L_{v_k} falling; −γ_kγ_{m0} > "
            "(K−1)γ_k² ⇒ L_{v_k} rises (at least initially)", NUMERIC, ok_bt and ok_fg,
            f"{checked} features in 12 random settings")
    r.step("The band for K > 2, as derived: backward transfer when −γ_kγ_{m1} ≤ γ_k² (under "
           "H); an initial rise when −γ_kγ_{m0} > (K − 1)γ_k²; in between, and for the "
           "whole trajectory outside the symmetric family, the exact dynamics decide "
           "(oodcalc predict).")
    return r.result(8, "Forgetting threshold", SYMBOLIC,
                    "Symbolic: K = 2 exact (sign of the source-margin change, symbolic γ); "
                    "K > 2 exact for the symmetric family, first step in general, backward "
                    "transfer under hypothesis H. The paper's K > 2 forgetting condition is "
                    "refuted; corrected threshold (K − 1)γ_k².")
