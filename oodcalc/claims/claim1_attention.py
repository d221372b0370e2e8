"""Claim 1, aggregated attention: the attention that the tokens of one feature receive
together, and the conditional error it implies.

Derivation (symbolic K and symbolic token counts): order a prompt's tokens by feature
(the softmax is a sum, so the order is immaterial); the score of every token of feature n
is z_n, so sympy sums the token softmax over each block and gets c_n e^{z_n}/Σ_m c_m e^{z_m};
balanced counts cancel. The error follows from E[wwᵀ] = I and FᵀF = I with matrix symbols.

Numeric check: the token softmax of real prompts at simulator (a)'s Q against the formula.
"""

from __future__ import annotations

import random

import numpy as np
import sympy as sp

from .. import model
from ..symbolic.core import (EXPLICIT, SYMBOLIC, K_RANGE, Recorder, as_scalar,
                             cayley_orthonormal, eq, sym_K)
from ..symbolic.model import Column, attention

__all__ = [
    "CLAIMED", "NUMERIC_CLAIMED", "check", "derive", "grouped_attention",
    "token_softmax_by_feature",
]


#: The claim as stated, as functions building sympy expressions (the mutation tests
#: perturb these and expect the derivation's checks to fail).
CLAIMED = {
    # the attention of feature n's tokens, from counts c and logits z (IndexedBase), index m
    "grouped": lambda c, z, n, m, K: c[n] * sp.exp(z[n]) / sp.Sum(c[m] * sp.exp(z[m]),
                                                                   (m, 1, K)),
    # balanced counts: the population form
    "population": lambda z, n, m, K: sp.exp(z[n]) / sp.Sum(sp.exp(z[m]), (m, 1, K)),
    # in α/β weights: own logit α, the others' exponentials summing to R
    "alpha-beta": lambda alpha, R: sp.exp(alpha) / (sp.exp(alpha) + R),
    # e_k from the attention on the query's feature A_k and the others' squares Q
    "error": lambda A_k, Q: sp.Rational(1, 2) * ((1 - A_k) ** 2 + Q),
}
#: the formula the ledger compares the token softmax with: the column softmax of FᵀQF
NUMERIC_CLAIMED = {"attention": model.attention}


def _sum_map(expr: sp.Expr, substitute) -> sp.Expr:
    """Apply ``substitute`` to the summand of every Sum in ``expr`` (and outside them)."""
    return substitute(expr).replace(lambda e: isinstance(e, sp.Sum),
                                    lambda e: sp.Sum(substitute(e.function), *e.limits))


def grouped_attention(claimed: dict = CLAIMED) -> dict:
    """The decisive steps of the grouping, symbolic K and counts: the token softmax summed
    over each feature's block of tokens (``block``, its value ``grouped``), compared with
    ``claimed["grouped"]`` (``grouping``), and with balanced counts N/K with
    ``claimed["population"]`` (``balanced``). Only the scores enter, and every token of
    feature n scores z_n = f_nᵀQf_k whatever the features' overlaps (claim 13a reuses it)."""
    K = sym_K()
    N = sp.Symbol("N", integer=True, positive=True)
    i, m, n = sp.symbols("i m n", integer=True, positive=True)
    z, C, c = sp.IndexedBase("z"), sp.IndexedBase("C"), sp.IndexedBase("c")
    block = sp.Sum(sp.exp(z[n]), (i, C[n - 1] + 1, C[n]))
    total = sp.Sum(sp.Sum(sp.exp(z[m]), (i, C[m - 1] + 1, C[m])).doit(), (m, 1, K))
    grouped = block.doit() / total
    counts = lambda e: e.subs({c[n]: C[n] - C[n - 1], c[m]: C[m] - C[m - 1]})
    claimed_grouped = _sum_map(claimed["grouped"](c, z, n, m, K), counts)
    balanced = sp.simplify(_sum_map(claimed["grouped"](c, z, n, m, K),
                                    lambda e: e.subs({c[n]: N / K, c[m]: N / K})))
    population = claimed["population"](z, n, m, K)
    return {"K": K, "N": N, "i": i, "m": m, "n": n, "z": z, "block": block,
            "grouped": grouped, "balanced": balanced,
            "grouping": sp.simplify(grouped - claimed_grouped) == 0,
            "balanced_ok": sp.simplify(balanced - population) == 0}


def derive(claimed: dict = CLAIMED):
    r = Recorder()
    g = grouped_attention(claimed)
    K, N, i, m, n, z = g["K"], g["N"], g["i"], g["m"], g["n"], g["z"]
    s = sp.IndexedBase("s")
    r.step("A prompt has N tokens x_1..x_N, each one of the orthonormal features f_1..f_K, "
           "and a query f_k. Token i scores s_i = x_iᵀ Q f_k and gets the softmax weight "
           "e^{s_i}/Σ_j e^{s_j}. Reordering the tokens permutes the weights and leaves "
           "every sum unchanged, so order them by feature: with C_n = c_1 + … + c_n, tokens "
           "C_{n−1}+1..C_n are f_n and each scores z_n = f_nᵀ Q f_k.",
           eq(sp.Symbol("softmax_i"), sp.exp(s[i]) / sp.Sum(sp.exp(s[m]), (m, 1, N))))

    # Decisive: sympy sums each block (symbolic K, symbolic counts).
    block = g["block"]
    r.step("sympy evaluates the sum of the weights over block n (and over every block for "
           "the denominator):", eq(block, block.doit()),
           eq(sp.Symbol("Attn_n"), g["grouped"]))
    r.check("grouping", "summing the token softmax over the c_n = C_n − C_{n−1} tokens of "
            "each feature gives c_n e^{z_n}/Σ_m c_m e^{z_m} (symbolic K, symbolic counts)",
            SYMBOLIC, g["grouping"], decisive=True)

    r.step("In the population limit the counts are balanced, c_n/N → 1/K almost surely (law "
           "of large numbers; not a sympy step); with c_n = N/K the counts cancel:",
           eq(sp.Symbol("Attn_n"), g["balanced"]))
    r.check("balanced", "c_n = N/K cancels: Attn_n = e^{z_n}/Σ_m e^{z_m} (symbolic K, N)",
            SYMBOLIC, g["balanced_ok"], decisive=True)

    col = Column("k")
    alpha = sp.Symbol("alpha", real=True)
    R = col.R
    r.step("Write z_{k,k} = α_{v_k} = v_kᵀQv_k and z_{n,k} = β_{v_n,v_k} (n ≠ k), and "
           "R = Σ_{n≠k} e^{β_{v_n,v_k}}: the query's own feature gets",
           eq(sp.Symbol("Attn_v"), col.a["k"].subs(col.z["k"], alpha)))
    r.check("alpha-beta", "the column softmax at n = k with z_kk = α and Σ_{n≠k} e^{z_nk} = R "
            "is e^α/(e^α + R), the paper's form (symbolic K)", SYMBOLIC,
            sp.simplify(col.a["k"].subs(col.z["k"], alpha) - claimed["alpha-beta"](alpha, R))
            == 0)

    # The conditional error, symbolic K with matrix symbols.
    d = sp.Symbol("d", integer=True, positive=True)
    F = sp.MatrixSymbol("F", d, K)
    A = sp.MatrixSymbol("A", K, 1)
    e_k = sp.MatrixSymbol("e_k", K, 1)
    ww = sp.MatrixSymbol("Sigma_w", d, d)        # E[w wᵀ]
    resid = A - e_k
    squared = (resid.T * F.T * ww * F * resid).expand()      # E_w[(wᵀF(A − e_k))²]
    squared = squared.subs(ww, sp.Identity(d)).doit().subs(F.T * F, sp.Identity(K)).doit().expand()
    A_k, Q = sp.symbols("A_k Q", nonnegative=True)
    scalar = {A.T * A: A_k ** 2 + Q, A.T * e_k: A_k, e_k.T * A: A_k, e_k.T * e_k: 1}
    value = sp.expand(as_scalar(squared, scalar))
    r.step("The prediction is ŷ = Σ_n Attn_n wᵀf_n = wᵀFA (F = [f_1 … f_K], A the attention "
           "vector), the target wᵀf_k = wᵀFe_k. With E[wwᵀ] = I_d and FᵀF = I_K sympy "
           "reduces E_w[(ŷ − wᵀf_k)²] to", eq(sp.Symbol("E_w"), squared))
    r.step("and with AᵀA = A_k² + Σ_{n≠k} A_n², Aᵀe_k = A_k, e_kᵀe_k = 1 (Σ_{n≠k} A_n² = Q):",
           eq(sp.Symbol("e_k"), sp.factor(value / 2)))
    r.check("error", "½E_w(ŷ − wᵀf_k)² = ½[(1 − A_k)² + Σ_{n≠k} A_n²] (matrix symbols, "
            "symbolic K and d)", SYMBOLIC, sp.expand(value / 2 - claimed["error"](A_k, Q)) == 0,
            decisive=True)

    # Backstops with explicit K: shuffled prompts, and exact orthonormal features.
    ok = True
    rng = random.Random(1)
    for Kx in K_RANGE:
        cnt = [rng.randint(0, 3) for _ in range(Kx)]
        cnt[0] += 1
        zs = sp.symbols(f"z1:{Kx + 1}", real=True)
        tokens = [q for q in range(Kx) for _ in range(cnt[q])]
        rng.shuffle(tokens)
        weights = attention([zs[t] for t in tokens])
        cz, cc = sp.IndexedBase("zz"), sp.IndexedBase("cc")
        for q in range(Kx):
            token_sum = sp.Add(*[w for w, t in zip(weights, tokens) if t == q])
            stated = claimed["grouped"](cc, cz, q + 1, m, Kx).doit().subs(
                {cz[j + 1]: zs[j] for j in range(Kx)} | {cc[j + 1]: cnt[j] for j in range(Kx)})
            ok &= sp.simplify(token_sum - stated) == 0
    r.check("grouping-explicit", "the same on random shuffled prompts with random counts, "
            "token by token", EXPLICIT, ok, ks=K_RANGE)
    ok = True
    for Kx, dx in ((2, 3), (3, 4), (4, 5)):
        Fx = cayley_orthonormal(dx, Kx, seed=Kx)
        As = sp.symbols(f"A1:{Kx + 1}", real=True)
        w = sp.symbols(f"w1:{dx + 1}", real=True)
        y = [sum(w[j] * Fx[j, q] for j in range(dx)) for q in range(Kx)]
        residual = sp.expand((sp.Add(*[As[q] * y[q] for q in range(Kx)]) - y[0]) ** 2)
        poly = sp.Poly(residual, *w)
        expectation = sum(coef for mon, coef in poly.terms() if all(p in (0, 2) for p in mon))
        stated = 2 * claimed["error"](As[0], sp.Add(*[x ** 2 for x in As[1:]]))
        ok &= sp.expand(expectation - stated) == 0
    r.check("error-explicit", "the error with exact rational orthonormal features (Cayley "
            "transform, d = K + 1) and E[w_i w_j] = δ_ij, monomial by monomial", EXPLICIT, ok,
            ks=(2, 3, 4))
    return r.result("1", "Aggregated attention",
                    "Symbolic K and symbolic counts: the grouping of the token softmax, the "
                    "balanced limit and the conditional error; the limit c_n/N → 1/K is the "
                    "law of large numbers.")


# --- numeric check against gradient descent -------------------------------------------

def token_softmax_by_feature(Q: np.ndarray, F: np.ndarray, tokens: np.ndarray,
                             k: int) -> np.ndarray:
    """The actual softmax over the token vectors ``F[:, tokens]`` for query f_k, summed
    over the tokens of each feature."""
    X = F[:, tokens].T
    scores = X @ Q @ F[:, k]
    a = np.exp(scores - scores.max())
    a /= a.sum()
    return np.bincount(tokens, weights=a, minlength=F.shape[1])


def check(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..setting import Setting
    from ..simulate.prompts import attention_weights, sample_prompts
    from ..checks import (EXACT_TOL, MAIN, OOD_SETTING, Point, PopulationCheck,
                          general_position, mean_se, monte_carlo_check)
    rng = np.random.default_rng(1)
    cases = []
    for setting in (MAIN, OOD_SETTING, Setting(general_position(3, 7, 3))):
        V = setting.geometry.V
        _, T1, path = ctx.population_path(V, setting.protocol)
        picks = sorted({0, 1, T1 // 3, 2 * T1 // 3, T1})
        cases += [(path[t], V) for t in picks]
        cases += [(rng.normal(scale=3.0, size=path[0].shape), V)]   # any Q, not only GD's
    worst = 0.0
    for Q, F in cases:
        K = F.shape[1]
        formula = claimed["attention"](F.T @ Q @ F)    # column k: the claim for query f_k
        for copies in (1, 3):
            tokens = rng.permutation(np.repeat(np.arange(K), copies))   # balanced, shuffled
            for k in range(K):
                diff = token_softmax_by_feature(Q, F, tokens, k) - formula[:, k]
                worst = max(worst, float(np.abs(diff).max()))
    population = PopulationCheck(
        "actual softmax over a balanced prompt (1 and 3 copies of each feature, shuffled), "
        "summed per feature, vs e^α/(e^α + Σe^β) from α, β read off Q; Q along simulator "
        f"(a)'s pretraining ({len(cases)} matrices incl. random ones), every query",
        worst, worst, f"<= {EXACT_TOL:g} (exact identity)", worst <= EXACT_TOL)

    V = OOD_SETTING.geometry.V
    Q1 = ctx.population_path(V, OOD_SETTING.protocol)[0]
    K = V.shape[1]
    own = np.diag(claimed["attention"](V.T @ Q1 @ V))
    points = []
    for N in ctx.budget.attention_Ns:
        gaps = []
        for seed in ctx.seeds():
            P = sample_prompts(V, N, ctx.budget.attention_prompts,
                               np.random.default_rng([1, N, seed]))
            a = attention_weights(Q1, P)
            on_query = np.where(P.tokens == P.q[:, None], a, 0.0).sum(axis=1)
            gaps.append((on_query - own[P.q]).mean())
        points.append(Point(N, *mean_se(gaps), len(gaps)))
    prompts = monte_carlo_check(
        "mean of Attn_N(query feature) − formula over random N-token prompts at simulator "
        f"(a)'s Q^(T1) (K = {K}; no training, so N reaches {ctx.budget.attention_Ns[-1]}): "
        "per-prompt token counts fluctuate, the formula is the balanced limit", points)
    return population, prompts, []
