"""Claim 1: the aggregated attention, from the token-level softmax of one prompt."""

from __future__ import annotations

import random

import sympy as sp

from .core import (eq, EXPLICIT, K_RANGE, SYMBOLIC, Recorder, attention, cayley_orthonormal,
                   k_range_text, sym_K)


def derive():
    r = Recorder()
    K = sym_K()
    i, m, n, k = sp.symbols("i m n k", integer=True, positive=True)
    N = sp.Symbol("N", integer=True, positive=True)
    s, z, c = sp.IndexedBase("s"), sp.IndexedBase("z"), sp.IndexedBase("c")
    softmax_i = sp.exp(s[i]) / sp.Sum(sp.exp(s[m]), (m, 1, N))
    r.step("A prompt has N tokens x_1..x_N, each one of the orthonormal features f_1..f_K, "
           "and a query f_k. Token i gets the score s_i = x_iᵀ Q f_k and the softmax weight",
           eq(sp.Symbol("softmax_i"), softmax_i))

    # Grouping: the tokens of feature f_n all score z_{n,k}; checked on explicit prompts.
    ok = True
    rng = random.Random(1)
    for Kx in K_RANGE:
        counts = [rng.randint(0, 3) for _ in range(Kx)]
        counts[0] += 1
        zs = sp.symbols(f"z1:{Kx + 1}", real=True)
        tokens = [nn for nn in range(Kx) for _ in range(counts[nn])]
        rng.shuffle(tokens)
        scores = [zs[t] for t in tokens]
        weights = attention(scores)
        grouped_total = sp.Add(*[counts[q] * sp.exp(zs[q]) for q in range(Kx)])
        for q in range(Kx):
            token_sum = sp.Add(*[w for w, t in zip(weights, tokens) if t == q])
            ok &= sp.simplify(token_sum - counts[q] * sp.exp(zs[q]) / grouped_total) == 0
    attn_c = c[n] * sp.exp(z[n]) / sp.Sum(c[m] * sp.exp(z[m]), (m, 1, K))
    r.step("If c_n tokens are f_n (Σ c_n = N), they all score z_{n,k} = f_nᵀ Q f_k, so the "
           "attention they receive together is", eq(sp.Symbol("Attn_n"), attn_c))
    r.check("summing the token softmax over the tokens of each feature gives "
            "c_n e^{z_n} / Σ_m c_m e^{z_m} (random shuffled prompts, random counts)",
            EXPLICIT, ok, k_range_text(K_RANGE))

    # Only the proportions matter: degree-0 homogeneity in the counts, symbolic K.
    lam = sp.Symbol("lambda", positive=True)
    scaled = attn_c.subs(c[n], lam * c[n]).replace(
        lambda e: isinstance(e, sp.Sum),
        lambda e: sp.Sum(e.function.subs(c[m], lam * c[m]), *e.limits))
    homogeneous = sp.simplify(scaled - attn_c) == 0
    r.step("Attn_n is unchanged when every count is multiplied by the same λ > 0, so it "
           "depends on the counts only through the proportions c_n/N. Drawing tokens i.i.d. "
           "uniformly, c_n/N → 1/K almost surely as N → ∞ (law of large numbers; this "
           "probabilistic step is not a sympy computation).")
    r.check("Attn_n(λc) = Attn_n(c) for symbolic K", SYMBOLIC, homogeneous)

    cc = sp.Symbol("c", positive=True)
    balanced = attn_c.subs(c[n], cc).replace(
        lambda e: isinstance(e, sp.Sum),
        lambda e: sp.Sum(e.function.subs(c[m], cc), *e.limits))
    balanced_s = sp.simplify(balanced)
    target = sp.exp(z[n]) / sp.Sum(sp.exp(z[m]), (m, 1, K))
    balanced_ok = sp.simplify(balanced_s - target) == 0
    r.step("With balanced counts c_n = c (the population limit) the counts cancel:",
           eq(sp.Symbol("Attn_n"), balanced_s))
    r.check("balanced counts cancel, Attn_n = e^{z_n}/Σ_m e^{z_m}, symbolic K", SYMBOLIC,
            balanced_ok)

    # In α/β weights, explicit K against the paper's stated form.
    ok = True
    for Kx in K_RANGE:
        alpha = sp.Symbol("alpha", real=True)
        betas = sp.symbols(f"beta1:{Kx}", real=True)
        column = [alpha, *betas]            # query f_1: z_11 = α, z_n1 = β_{n,1}
        derived = attention(column)[0]
        paper = sp.exp(alpha) / (sp.exp(alpha) + sp.Add(*[sp.exp(b) for b in betas]))
        ok &= sp.simplify(derived - paper) == 0
    alpha, beta = sp.Symbol("alpha_v"), sp.IndexedBase("beta")
    r.step("Write z_{k,k} = α_{v_k} = v_kᵀQv_k and z_{n,k} = β_{v_n,v_k} = v_nᵀQv_k (n ≠ k); "
           "the column softmax at n = k is the paper's form",
           eq(sp.Symbol("Attn_v"), sp.exp(alpha) / (sp.exp(alpha) + sp.Sum(
               sp.exp(beta[n]), (n, 1, K - 1)))))
    r.check("the column softmax with z_kk = α, z_nk = β_n equals the paper's expression",
            EXPLICIT, ok, k_range_text(K_RANGE))

    # The conditional error: E_w over w ~ N(0, I_d) of (ŷ − wᵀf_k)², exactly.
    ok = True
    for Kx, d in ((2, 3), (3, 4), (4, 5)):
        F = cayley_orthonormal(d, Kx, seed=Kx)
        A = sp.symbols(f"A1:{Kx + 1}", real=True)
        w = sp.symbols(f"w1:{d + 1}", real=True)
        wv = sp.Matrix(w)
        y = [(wv.T * F[:, q])[0] for q in range(Kx)]
        residual = sp.expand((sp.Add(*[A[q] * y[q] for q in range(Kx)]) - y[0]) ** 2)
        poly = sp.Poly(residual, *w)
        expectation = sum(coef for mon, coef in poly.terms()
                          if all(p in (0, 2) for p in mon))   # E[w_i w_j] = δ_ij
        expected = (1 - A[0]) ** 2 + sp.Add(*[A[q] ** 2 for q in range(1, Kx)])
        ok &= sp.expand(expectation - expected) == 0
    r.step("The prediction is ŷ = Σ_n Attn_n wᵀf_n. Over w ~ N(0, I_d), E[(aᵀw)²] = ‖a‖², "
           "so with orthonormal features the conditional error is",
           eq(sp.Symbol("e_k"), sp.Rational(1, 2) * ((1 - sp.Symbol("Attn_k")) ** 2
                 + sp.Sum(sp.Indexed("Attn", n) ** 2, (n, 1, K - 1)))))
    r.check("E_w(ŷ − wᵀf_k)² = (1 − A_k)² + Σ_{n≠k} A_n² with exact rational orthonormal "
            "features (Cayley transform) and E[w_i w_j] = δ_ij", EXPLICIT, ok,
            "K = 2..4, d = K + 1")
    return r.result(1, "Aggregated attention", SYMBOLIC,
                    "Symbolic K: the counts cancel for balanced prompts and Attn depends only "
                    "on proportions; grouping the token softmax and the α/β form checked for "
                    "K = 2..8; the limit c_n/N → 1/K is the law of large numbers.")
