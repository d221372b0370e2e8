"""Claim 10, interventions in the logits: replay λ, an L2 pull μ toward Q^(T1), key/query
projections off span(V) and query weights c move (z_U, z_V) = (UᵀQU, VᵀQV) by a closed
K×K system; any projection leaves z_V fixed; under a rotation projected fine-tuning is
plain fine-tuning with a smaller step.

Derivation (symbolic K): the step on Q is
ΔQ = −η[(1−λ)P_l U G Uᵀ P_r + λ V g_V Vᵀ + μ(Q − Q1)], G = g_U c (claim 7: the OOD
gradient is U G Uᵀ; the replayed source gradient is V g_V Vᵀ likewise), P = I or I − VVᵀ.
sympy expands UᵀΔQU and VᵀΔQV with matrix symbols (d and K symbols), replaces
VᵀV, UᵀU by I and VᵀU, UᵀV by M, Mᵀ, and compares with the claimed Δz_U, Δz_V for each
of the four projection choices. Vᵀ(I − VVᵀ) = 0 makes the fit term vanish from Δz_V; the
pull's share in Δz_V is μ(z_V − z_V1), zero at the start of fine-tuning and, with no other
term (λ = 0), zero ever after (induction). Under a rotation (M = γI, γ symbolic),
A = I − MᵀM = (1−γ²)I, so the projected fit is (1−γ²)^p times the plain one.

Numeric check: the terms engine against full-Q gradient descent doing each intervention on
Q (simulator (a)), several geometries and recipes; F = 0 exactly under projections; the
rotation identity as trajectories (projected = plain with η(1−γ²)^p).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from ..symbolic.core import SYMBOLIC, Recorder, eq, matrix_expr_is_zero, sym_K

__all__ = ["CLAIMED", "NUMERIC_CLAIMED", "check", "derive"]


# A_l, A_r: UᵀP U per side; B_l: VᵀP_l U (key side), B_r: VᵀP_r U (query side)
CLAIMED = {
    "dz_U": lambda lam, mu, A_l, G, A_r, M, g_V, dzU: (1 - lam) * A_l * G * A_r
    + lam * M.T * g_V * M + mu * dzU,
    "dz_V": lambda lam, mu, B_l, G, B_r, g_V, dzV: (1 - lam) * B_l * G * B_r.T
    + lam * g_V + mu * dzV,
    "A": lambda M, K, projected: sp.Identity(K) - M.T * M if projected else sp.Identity(K),
    "B": lambda M, K, projected: sp.ZeroMatrix(K, K) if projected else M,
    # rotation: the projected fit = factor(γ, sides) × the plain fit
    "rotation": lambda gamma, sides: (1 - gamma ** 2) ** sides,
}
NUMERIC_CLAIMED = {"rotation": lambda gamma, sides: (1 - gamma ** 2) ** sides}

_SIDES = {"none": (False, False), "key": (True, False), "query": (False, True),
          "both": (True, True)}


def _reduce(expr, V, U, K):
    """Orthonormality as rewriting rules: VᵀV = UᵀU = I (M = VᵀU is left as VᵀU)."""
    expr = expr.expand()
    for _ in range(4):      # products like VᵀVVᵀU need the rule more than once
        expr = expr.subs({V.T * V: sp.Identity(K), U.T * U: sp.Identity(K)}).doit().expand()
    return expr


def derive(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()
    d = sp.Symbol("d", integer=True, positive=True)
    V, U = sp.MatrixSymbol("V", d, K), sp.MatrixSymbol("U", d, K)
    Q, Q1 = sp.MatrixSymbol("Q", d, d), sp.MatrixSymbol("Q_1", d, d)
    G, gV = sp.MatrixSymbol("G", K, K), sp.MatrixSymbol("g_V", K, K)
    lam, mu = sp.symbols("lambda mu", real=True)
    I_d = sp.Identity(d)
    P = I_d - V * V.T
    M = V.T * U
    r.step("One fine-tuning step on Q, with G = g_U c the query-weighted OOD gradient in the "
           "logits (claim 7: its Q-gradient is U G Uᵀ; the replayed source loss gives "
           "V g_V Vᵀ), P_l, P_r each I or P = I − VVᵀ, is ΔQ = −η·D with",
           eq(sp.Symbol("D"), (1 - lam) * P * U * G * U.T * P + lam * V * gV * V.T
              + mu * (Q - Q1)))
    ok_U, ok_V, shown = True, True, []
    for name, (left, right) in _SIDES.items():
        Pl, Pr = (P if left else I_d), (P if right else I_d)
        D = (1 - lam) * Pl * U * G * U.T * Pr + lam * V * gV * V.T + mu * (Q - Q1)
        dzU = _reduce(U.T * D * U, V, U, K)
        dzV = _reduce(V.T * D * V, V, U, K)
        want_U = claimed["dz_U"](lam, mu, claimed["A"](M, K, left), G,
                                 claimed["A"](M, K, right), M, gV, U.T * (Q - Q1) * U)
        want_V = claimed["dz_V"](lam, mu, claimed["B"](M, K, left), G,
                                 claimed["B"](M, K, right), gV, V.T * (Q - Q1) * V)
        ok_U &= matrix_expr_is_zero(_reduce(dzU - want_U, V, U, K))
        ok_V &= matrix_expr_is_zero(_reduce(dzV - want_V, V, U, K))
        shown.append((name, dzU, dzV))
    for name, dzU, dzV in shown[::3]:   # none and both, the two ends
        r.step(f"Projection {name!r}: sympy expands UᵀDU and VᵀDV, rewriting VᵀV = UᵀU = I "
               "(VᵀU = M):", eq(sp.Symbol("U^T D U"), dzU), eq(sp.Symbol("V^T D V"), dzV))
    r.check("dz-U", "UᵀΔQU = −η[(1−λ)A_l G A_r + λMᵀg_V M + μ(z_U − z_U1)], A = I or "
            "I − MᵀM, for each of the four projections (matrix symbols, symbolic K, d)",
            SYMBOLIC, ok_U, decisive=True)
    r.check("dz-V", "VᵀΔQV = −η[(1−λ)B_l G B_rᵀ + λg_V + μ(z_V − z_V1)], B = M or 0, for "
            "each of the four projections (matrix symbols, symbolic K, d)",
            SYMBOLIC, ok_V, decisive=True)

    zero = _reduce(V.T * P, V, U, K)
    r.step("The decisive cancellation: Vᵀ(I − VVᵀ) = Vᵀ − (VᵀV)Vᵀ, and sympy gives",
           eq(sp.Symbol("V^T (I - V V^T)"), zero))
    # without replay, a projected side makes the fit vanish from Δz_V; then Δz_V is
    # −ημ(z_V − z_V1), which is 0 at z_V = z_V1 (the start), so z_V never moves
    fixed = True
    for name, (left, right) in _SIDES.items():
        if not (left or right):
            continue
        Pl, Pr = (P if left else I_d), (P if right else I_d)
        fit = _reduce(V.T * Pl * U * G * U.T * Pr * V, V, U, K)
        fixed &= matrix_expr_is_zero(fit)
        Bl, Br = claimed["B"](M, K, left), claimed["B"](M, K, right)
        claimed_fit = claimed["dz_V"](0, mu, Bl, G, Br, gV, sp.ZeroMatrix(K, K))
        fixed &= matrix_expr_is_zero(_reduce(claimed_fit, V, U, K))
    r.check("projection-fixes-source", "Vᵀ(I − VVᵀ) = 0, so under any projection (λ = 0) the "
            "fit term is absent from VᵀΔQV and the claimed Δz_V at z_V = z_V1 is 0: z_V stays "
            "z_V1 at every step (induction), F = 0 in every geometry",
            SYMBOLIC, bool(zero == sp.ZeroMatrix(K, V.shape[0]) or matrix_expr_is_zero(zero))
            and fixed, decisive=True)

    gamma = sp.Symbol("gamma", real=True)
    Mr = sp.MatrixSymbol("M", K, K)
    # a rotation: every cosine γ, M = γI, so MᵀM = γ²I (used as a rewriting rule)
    rule = {Mr.T * Mr: gamma ** 2 * sp.Identity(K)}
    A = claimed["A"](Mr, K, True).subs(rule).doit()
    r.step("Under a rotation every cosine is γ: M = γI, MᵀM = γ²I, and sympy gives",
           eq(sp.Symbol("A"), A))
    rot = True
    for sides, (left, right) in ((1, (True, False)), (1, (False, True)), (2, (True, True))):
        Al = claimed["A"](Mr, K, left).subs(rule).doit()
        Ar = claimed["A"](Mr, K, right).subs(rule).doit()
        fit = (Al * G * Ar).expand().doit()
        rot &= matrix_expr_is_zero((fit - claimed["rotation"](gamma, sides) * G).expand()
                                   .doit())
    r.check("rotation", "M = γI gives A = (1−γ²)I, so the projected fit on z_U is (1−γ²)G "
            "(one side) or (1−γ²)²G (both), z_V fixed: projected fine-tuning is plain "
            "fine-tuning with step η(1−γ²)^p (symbolic K, γ)", SYMBOLIC, rot, decisive=True)
    r.step("With λ = μ = 0 and z_V fixed in both runs' OOD view (the plain run's z_U step is "
           "−ηG, the projected −η(1−γ²)^pG, G read from z_U alone), the two z_U trajectories "
           "coincide step by step; the stopping rule reads z_U, so T2 is the same.")
    return r.result("10", "Interventions in the logits",
                    "Symbolic K: Δz_U, Δz_V from ΔQ with matrix symbols and VᵀV = UᵀU = I as "
                    "rewriting rules, for all four projections; Vᵀ(I − VVᵀ) = 0; M = γI gives "
                    "A = (1−γ²)I.")


# --- numeric check against gradient descent -------------------------------------------

def _gap(theory, simulated) -> float:
    """Largest gap in F, F_k and the final logits; inf when T1 or T2 differ."""
    if (theory.pretrain.T1 != simulated.pretrain.T1
            or theory.finetune.T2 != simulated.finetune.T2):
        return float("inf")
    gaps = [abs(theory.F - simulated.F)]
    gaps += [abs(a.F_k - b.F_k) for a, b in zip(theory.forgetting, simulated.forgetting)]
    gaps += [float(np.abs(theory.finetune.z_source - simulated.finetune.z_source).max()),
             float(np.abs(theory.finetune.z_ood - simulated.finetune.z_ood).max())]
    return max(gaps)


def check(ctx, claimed: dict = NUMERIC_CLAIMED):
    import math

    from .. import geometry as geo
    from ..setting import Protocol, Setting
    from ..checks import EXACT_TOL, PopulationCheck

    rng = np.random.default_rng(0)
    V = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    U = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    geometries = [geo.parallel_shift([1, -0.9]), geo.parallel_shift([0.8, -0.5, 0.3]),
                  geo.from_arrays(V, U)]
    recipes = [dict(replay=0.5), dict(project="key"), dict(project="query"),
               dict(project="both"), dict(l2=0.01), dict(weights="cosine"),
               dict(replay=0.3, l2=0.01, project="key")]
    worst, projected_F, engine_F, runs = 0.0, 0.0, 0.0, 0
    for g in geometries:
        for rec in recipes:
            s = Setting(g, Protocol(**rec))
            theory, simulated = ctx.theory(s), ctx.population(s)   # shared by repeated ledgers
            worst = max(worst, _gap(theory, simulated))
            runs += 1
            if rec.get("project", "none") != "none" and "replay" not in rec:
                engine_F = max(engine_F, abs(theory.F))
                projected_F = max(projected_F, abs(simulated.F))
    # rotation: projected = plain fine-tuning with the scaled step
    rot_gap, rot_runs = 0.0, 0
    for angle, K in ((math.pi / 3, 3), (math.pi / 5, 4)):
        g = geo.rotation(angle, K)
        gamma = float(np.mean(g.gamma))
        for project, sides in (("key", 1), ("query", 1), ("both", 2)):
            eta = Protocol().eta
            proj = ctx.population(Setting(g, Protocol(project=project)))
            plain = ctx.population(Setting(g, Protocol(
                eta_ft=eta * claimed["rotation"](gamma, sides))))
            gap = (float("inf") if proj.finetune.T2 != plain.finetune.T2 else
                   float(np.abs(proj.finetune.z_ood - plain.finetune.z_ood).max()))
            rot_gap = max(rot_gap, gap, abs(proj.F))
            rot_runs += 1
    population = PopulationCheck(
        f"terms engine vs full-Q GD, {runs} runs (3 geometries × {len(recipes)} recipes: replay, "
        "projections, L2, query weights): T1, T2 identical, F, F_k and final logits; "
        f"rotation identity, {rot_runs} runs: projected vs plain with η(1−γ²)^p, same T2, "
        "OOD logits, F = 0", max(worst, rot_gap), None,
        f"<= {EXACT_TOL:g} (exact identities)", max(worst, rot_gap) <= EXACT_TOL and engine_F <= EXACT_TOL,
        [f"engine vs GD max gap < {max(worst, 1e-15):.0e}; F under projection (no replay): "
         f"engine {'exactly 0' if engine_F == 0 else f'< {engine_F:.0e}'}, full-Q GD "
         f"< {max(projected_F, 1e-16):.0e} (rounding); rotation max gap < "
         f"{max(rot_gap, 1e-15):.0e}"])
    return population, None, []
