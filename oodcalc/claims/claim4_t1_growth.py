"""Claim 4, T1 = poly(1/ε, K, 1/η): the time pretraining takes to meet the stopping rule.

Derivation (symbolic K): on the symmetric ray (claim 3) one GD step raises the margin
s = α − β by h(s) = ηK a(1 − a)²/(K − 1)², a = 1/(1 + (K − 1)e^{−s}), a scalar recurrence
derived from the ray gradient. The gradient-flow time T_flow = ∫ ds/h to the stopping
margin (claim 3) is integrated in closed form; sympy finds ε·T_flow → (K−1)/(4η) as ε → 0,
T_flow/K² → 1/η as K → ∞, and η·T_flow independent of η. The discrete T1 is bracketed by
comparing each step with the flow: |(log h)'| = |1 − 3a| < 2 and h ≤ 4ηK/(27(K−1)²)
(both derived) give T_flow/ρ₊ ≤ T1 < T_flow/ρ₋ + 1.

Numeric check: T1 of simulator (a) and of the exact dynamics inside the bracket on grids
in ε, K and η; finite prompts in simulator (b).
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from .. import theory
from ..symbolic.core import NUMERIC, SYMBOLIC, Recorder, eq, is_zero, sym_K
from .claim3_convergence import _solve_alpha_star, ray_gradient

__all__ = ["CLAIMED", "NUMERIC_CLAIMED", "check", "derive"]


CLAIMED = {
    # the margin's increase per step on the ray, from the attention a on the own feature
    "step": lambda a, K, eta: eta * K * a * (1 - a) ** 2 / (K - 1) ** 2,
    # leading orders of the flow time
    "order-eps": lambda K, eta: (K - 1) / (4 * eta),      # lim ε→0 of ε·T_flow
    "order-K": lambda eta: 1 / eta,                       # lim K→∞ of T_flow/K²
    "eta-power": -1,                                      # T_flow ∝ η^power
    # the bracket's constants: sup |(log h)'| and max_a a(1 − a)²
    "log-slope": 2,
    "peak": sp.Rational(4, 27),
}
NUMERIC_CLAIMED = {"t1_bracket": theory.t1_bracket, "flow_time": theory.flow_time,
                   # what finite prompts approach: the population T1
                   "population_T1": lambda report: report.pretrain.T1}


@functools.lru_cache(maxsize=None)
def margin_step():
    """``(h, s, η)``: the margin's increase per step on the symmetric ray, from claim 3's
    ray gradient (β = −α/(K − 1), s = α − β = αK/(K − 1))."""
    K = sym_K()
    eta = sp.Symbol("eta", positive=True)
    s = sp.Symbol("s", positive=True)
    alpha, beta, own, other = ray_gradient()
    ray = {alpha: s * (K - 1) / K, beta: -s / K}
    return sp.factor(sp.together((-(eta / K) * (own - other)).xreplace(ray))), s, eta


@functools.lru_cache(maxsize=None)
def flow_time_expression():
    """``(T_flow, (K, η, ε, δ), u*)``: the flow time of the derived recurrence in closed
    form, with δ = √(2ε(K−1)/K) and u = e^{−s}."""
    K = sym_K()
    h, s, eta = margin_step()
    u = sp.Symbol("u", positive=True)
    _, _, eps, delta, _, alpha_star = _solve_alpha_star()
    h_u = sp.simplify(h.subs(s, -sp.log(u)))
    u_star = sp.simplify(sp.exp(-alpha_star * K / (K - 1)))     # s* = α*K/(K − 1)
    T = sp.simplify(sp.integrate(sp.simplify(1 / (h_u * u)), (u, u_star, 1)))
    return T, (K, eta, eps, delta), u_star


def derive(claimed: dict = CLAIMED):
    r = Recorder()
    K = sym_K()
    h, s, eta = margin_step()
    a = 1 / (1 + (K - 1) * sp.exp(-s))
    r.step("On the ray (claim 3) one step changes α by −(η/K)∂e_k/∂z_kk and β by "
           "−(η/K)∂e_k/∂z_nk, so the margin s = α − β = αK/(K − 1) follows a scalar "
           "recurrence s ← s + h(s). sympy evaluates h from the ray gradient and compares "
           "with the closed form in a = 1/(1 + (K − 1)e^{−s}):",
           eq(sp.Symbol("h(s)"), claimed["step"](sp.Symbol("a"), K, eta)))
    r.check("recurrence", "h(s) = ηK a(1 − a)²/(K − 1)² from the ray gradient (symbolic K)",
            SYMBOLIC, is_zero(h - claimed["step"](a, K, eta)), decisive=True)

    # 2. The flow time in closed form and its orders.
    T, (_, eta_T, eps, delta), u_star = flow_time_expression()
    r.step("In continuous time (gradient flow) the time to reach the stopping margin "
           "s* = α*K/(K − 1) (claim 3) is ∫_0^{s*} ds/h(s); with u = e^{−s} sympy integrates "
           "from u* = e^{−s*} to 1:", eq(sp.Symbol("u^*"), u_star), eq(sp.Symbol("T_flow"), T))
    m = sp.Symbol("m", positive=True)
    T_eps = T.subs(delta, sp.sqrt(2 * eps * (K - 1) / K))
    lead_eps = sp.simplify(sp.limit((T_eps * eps).subs(K, m + 1), eps, 0)).subs(m, K - 1)
    lead_K = sp.simplify(sp.limit(T_eps / K ** 2, K, sp.oo))
    r.step("Its orders: as ε → 0 and as K → ∞ (ε fixed), and η enters only as 1/η:",
           eq(sp.Limit(sp.Symbol("epsilon") * sp.Symbol("T_flow"), sp.Symbol("epsilon"), 0),
              lead_eps),
           eq(sp.Limit(sp.Symbol("T_flow") / K ** 2, K, sp.oo), lead_K))
    r.check("order-eps", "ε·T_flow → (K − 1)/(4η) as ε → 0 (symbolic K)", SYMBOLIC,
            is_zero(lead_eps - claimed["order-eps"](K, eta)), decisive=True)
    r.check("order-K", "T_flow/K² → 1/η as K → ∞ at fixed ε", SYMBOLIC,
            is_zero(lead_K - claimed["order-K"](eta)), decisive=True)
    r.check("order-eta", "η·T_flow does not depend on η", SYMBOLIC,
            sp.diff(sp.simplify(T * eta_T ** -claimed["eta-power"]), eta_T) == 0, decisive=True)

    # 3. The bracket on the discrete T1.
    x = sp.Symbol("a", positive=True)
    h_a = claimed["step"](x, K, eta)
    dlog = sp.simplify(sp.simplify(sp.diff(sp.log(h), s)).subs(s, sp.log((K - 1) * x / (1 - x))))
    peaks = sp.solve(sp.diff(x * (1 - x) ** 2, x), x)
    peak = max((x * (1 - x) ** 2).subs(x, p) for p in peaks)
    sup_slope = sp.Max(*[sp.Abs(dlog.subs(x, v)) for v in (0, 1)])
    r.step("Discrete steps against the flow. The flow clock G(s) = ∫_0^s du/h advances over "
           "one step by ∫_{s_t}^{s_t + h(s_t)} du/h(u); if |(log h)'| ≤ c and h ≤ H, that is "
           "between ρ₋ = (1 − e^{−cH})/(cH) and ρ₊ = (e^{cH} − 1)/(cH). T1 is the first t "
           "with s_t ≥ s*, i.e. G(s_t) ≥ T_flow, hence T_flow/ρ₊ ≤ T1 < T_flow/ρ₋ + 1. "
           "sympy supplies c and H: (log h)' is affine in a ∈ (0, 1), and a(1 − a)² peaks at "
           "a = 1/3:", eq(sp.Symbol("(log h)'"), dlog),
           eq(sp.Symbol("max_a a(1-a)^2"), peak),
           eq(sp.Symbol("H"), sp.factor(h_a.subs(x, sp.Rational(1, 3)))))
    r.check("bracket-constants", "(log h)' = 1 − 3a, so |(log h)'| < 2 on (0, 1), and "
            "max a(1 − a)² = 4/27", SYMBOLIC,
            is_zero(dlog - (1 - 3 * x)) and sup_slope == claimed["log-slope"]
            and peak == claimed["peak"], decisive=True)

    # 4. Numbers: the exact discrete T1 inside the bracket.
    from ..finetune.dynamics import descend
    f = sp.lambdify((K, eta_T, eps), T_eps, "math")
    grid = [(Kx, et, ex) for Kx in (2, 3, 8) for et in (0.1, 0.4) for ex in (1e-2, 1e-3)]
    inside, ratios = True, []
    for Kx, et, ex in grid:
        T1 = int(descend(np.zeros((1, Kx, Kx)), et, ex, 10_000_000).steps[0])
        lo, hi = theory.t1_bracket(Kx, ex, et)
        inside &= lo <= T1 < hi
        ratios.append(T1 / f(Kx, et, ex))
    agree = max(abs(f(Kx, et, ex) - theory.flow_time(Kx, ex, et)) / theory.flow_time(Kx, ex, et)
                for Kx, et, ex in ((2, 0.1, 0.01), (5, 0.3, 1e-4), (64, 0.1, 0.01)))
    r.step(f"Measured with the exact discrete dynamics on {len(grid)} settings (K ∈ {{2, 3, "
           f"8}}, η ∈ {{0.1, 0.4}}, ε ∈ {{1e-2, 1e-3}}): T1/T_flow ∈ [{min(ratios):.4f}, "
           f"{max(ratios):.4f}]. For K = 1024 (ε = 0.01, η = 0.1) the closed form gives "
           f"T_flow = {f(1024, 0.1, 0.01):,.0f} steps.")
    r.check("bracket", "the exact discrete T1 lies in [T_flow/ρ₊, T_flow/ρ₋ + 1] "
            "(oodcalc.theory.t1_bracket)", NUMERIC, inside, f"{len(grid)} settings")
    r.check("matches-theory", "sympy's T_flow equals oodcalc.theory.flow_time", NUMERIC,
            agree < 1e-9, "3 settings up to K = 64, relative difference < 1e-9")
    return r.result("4", "T1 is polynomial",
                    "Symbolic K: the margin recurrence on the ray, the flow time in closed "
                    "form with its orders (K−1)/(4ηε) as ε → 0 and K²/η as K → ∞, and the "
                    "constants of a bracket on the discrete T1 (the comparison argument is "
                    "stated, and checked on the exact dynamics).")


# --- numeric check against gradient descent -------------------------------------------

def check(ctx, claimed: dict = NUMERIC_CLAIMED):
    from ..prediction import pretrain_logits
    from ..setting import Protocol
    from ..checks import MAIN, Point, PopulationCheck, mean_se, monte_carlo_check, rel
    b = ctx.budget
    keys = sorted({(2, e, 0.1) for e in b.eps_grid} | {(K, 0.01, 0.1) for K in b.K_grid}
                  | {(2, 0.01, h) for h in b.eta_grid})
    ok, worst_gap, lines = True, 0, []
    for K, eps, eta in keys:
        proto = Protocol(eps=eps, eta=eta)
        T_sim = ctx.population_path(np.eye(K), proto)[1]
        T_exact = int(pretrain_logits(K, eps, eta, proto.max_steps).steps[0])
        lo, hi = claimed["t1_bracket"](K, eps, eta)
        inside = lo <= T_sim < hi
        ok &= inside and T_sim == T_exact
        worst_gap = max(worst_gap, abs(T_sim - T_exact))
        lines.append(f"K={K}, ε={eps:g}, η={eta:g}: T1 = {T_sim} (exact dynamics {T_exact}), "
                     f"T_flow = {claimed['flow_time'](K, eps, eta):.1f}, bracket "
                     f"[{lo:.1f}, {hi:.1f}) {'✓' if inside else '✗'}")
    population = PopulationCheck(
        "T1 of simulator (a) and of the exact dynamics against the closed-form bracket "
        "T_flow/ρ₊ <= T1 < T_flow/ρ₋ + 1, on grids in ε, K and η",
        float(worst_gap), rel(worst_gap, 1.0), "inside the bracket; (a) = exact dynamics",
        ok, lines)
    T_th = claimed["population_T1"](ctx.theory(MAIN))
    points = []
    for N in b.Ns:
        dev = [(ctx.prompts(N, s).pretrain.T1 - T_th) / T_th for s in ctx.seeds()]
        points.append(Point(N, *mean_se(dev), len(dev)))
    prompts = monte_carlo_check(
        f"(T1 of simulator (b) − population T1 = {T_th}) / T1, K = 2, γ = (1, −0.9)", points)
    sign = "shorter" if points[-1].mean < 0 else "longer"
    findings = [f"finite prompts reach the stopping rule {sign} than the population (by "
                f"{abs(points[0].mean):.1%} at N = {points[0].N}, {abs(points[-1].mean):.1%} "
                f"at N = {points[-1].N})"]
    return population, prompts, findings
