"""The ray's step counter (oodcalc.finetune.ray_leap) against the loop it replaces.

The leap's terms are derived here with sympy (the modified field of explicit Euler, time
step 1, by matching the Lie series of its flow with one step of the map); the leap is
compared with the plain-float loop (oodcalc.finetune.ray_loop) on random rays: the same T,
the same trend flags, the state, path and source losses to TOL relative; and mutants of
the leap (its last term dropped: 1e-11 off; a wrong constant) are caught by the same
comparison.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from oodcalc import estimates
from oodcalc.finetune import ray_leap
from oodcalc.finetune.dynamics import descend_ray
from oodcalc.finetune.ray_loop import ray_step_loop


#: the leap against the loop at K <= 64 (seeds 1-4: at most 2.9e-13; the loop's own
#: round-off is about √T ulps)
TOL = 2e-12


def modified_field_terms(order: int = 3):
    """f1..f_order of the modified field of x ↦ x + F(x), from sympy: the time-1 flow of
    F + f1 + f2 + ... (Lie series) must equal one step, order by order in a scale h."""
    x, h = sp.symbols("x h")
    F = sp.Function("F")(x)
    fs = [sp.Function(f"f{k}")(x) for k in range(1, order + 1)]
    field = F + sum(h ** (k + 1) * f for k, f in enumerate(fs))
    flow, term = x, x
    for j in range(1, order + 2):
        term = field * sp.diff(term, x)
        flow += h ** j / sp.factorial(j) * term
    residual = sp.expand(flow - (x + h * F))
    solved = {}
    for k in range(order):
        coefficient = residual.coeff(h, k + 2).subs(solved).doit()
        value = sp.solve(coefficient, fs[k])[0]
        solved[fs[k]] = value
        for j in (1, 2, 3):
            solved[sp.diff(fs[k], x, j)] = sp.diff(value, x, j)
    return x, F, [sp.simplify(solved[f]) for f in fs]


def test_the_leap_uses_the_derived_modified_field():
    """Q of the module equals (f1 + f2 + f3)/(F c g) with sympy's terms, F = c p(1 − p)²
    and d/dx = p(1 − p) d/dp, at random p and c (and a wrong factor is seen)."""
    x, F, terms = modified_field_terms()
    p, c = sp.symbols("p c", positive=True)
    g = p * (1 - p) ** 2

    def D(expr):                      # d/dx of a function of p
        return p * (1 - p) * sp.diff(expr, p)

    # the highest derivative first: F itself replaced first would zero its derivatives
    values = [(sp.Derivative(F, (x, 2)), c * D(D(g))), (sp.Derivative(F, x), c * D(g)),
              (F, c * g)]
    total = sum(t.subs(values) for t in terms)
    expected = sp.lambdify((p, c), sp.simplify(total / (c * g) ** 2))   # f̃ = F(1 + cgQ)
    rng = np.random.default_rng(0)
    for _ in range(50):
        pv, cv = float(rng.uniform(0.01, 0.99)), float(10 ** rng.uniform(-5, -2))
        ray = ray_leap._Ray(3, 1.0)
        ray.c = cv
        x_value = math.log(pv / (1 - pv)) + ray.log_m
        ours, _ = ray.correction(np.array([x_value]))
        gq = pv * (1 - pv) ** 2
        Q = ours[0] / (1 - cv * gq * ours[0])             # undo Q/(1 + cgQ)
        assert Q == pytest.approx(float(expected(pv, cv)), rel=1e-9, abs=1e-12)
        assert abs(2 * Q - float(expected(pv, cv))) > 1e-6     # the check can fail


def _rays(n: int, seed: int):
    """Random rays the leap takes: pretraining starts and fine-tuning starts with a
    moving source, strides, a cap that stops some early."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        K = int(rng.choice([16, 24, 32, 48, 64]))
        eta = float(rng.choice([0.05, 0.1, 0.2]))
        eps = float(rng.choice([0.01, 0.03]))
        own, other = float(rng.normal(0, 2)), float(rng.normal(0, 2) / K)
        scale = float(rng.choice([0.0, 0.25, 1.0, -0.5]))
        source = (float(rng.normal(0, 2)), float(rng.normal(0, 1) / K), scale)
        stride = int(rng.choice([0, 997, 5003]))
        cap = int(rng.choice([10**6, 3000]))
        yield (own, other, K, eta, eps, cap, stride), source


def _compare(leap, n: int = 24, seed: int = 1) -> tuple[int, float]:
    """(cases compared, worst relative difference) of ``leap`` against the loop; raises
    on a different T, convergence, record count or trend."""
    worst, compared = 0.0, 0
    for args, source in _rays(n, seed):
        path_loop, path_leap = np.empty((4000, 2)), np.empty((4000, 2))
        a = ray_step_loop(*args, path_loop, *source)
        b = leap(*args, path_leap, *source)
        if b is None:
            continue
        compared += 1
        assert (a[2], a[3], a[4], a[7], a[8]) == (b[2], b[3], b[4], b[7], b[8]), (args, a, b)
        n_rec = min(a[4], 4000)
        scale = max(1.0, float(np.abs(path_loop[:n_rec]).max()) if n_rec else 1.0)
        worst = max(worst, abs(a[0] - b[0]) / max(1, abs(a[0])),
                    abs(a[1] - b[1]) / max(1, abs(a[1])),
                    float(np.abs(path_loop[:n_rec] - path_leap[:n_rec]).max(initial=0)) / scale,
                    abs(a[5] - b[5]) / a[5], abs(a[6] - b[6]) / a[6])
    return compared, worst


def test_the_leap_matches_the_loop_on_random_rays():
    compared, worst = _compare(ray_leap.leap)
    assert compared >= 18 and worst < TOL, (compared, worst)


def test_a_leap_without_its_last_term_or_with_a_wrong_constant_is_caught(monkeypatch):
    original = ray_leap._Ray.correction

    def no_last_term(self, x):                 # f3 dropped (keeps the bound's estimate)
        value, omitted = original(self, x)
        p, q = self.p(x)
        c, g = self.c, p * q * q
        a1 = q - 2.0 * p
        a2 = a1 * a1 - 3.0 * p * q
        Q = -a1 / 2.0 + c * g * (a2 + 4.0 * a1 * a1) / 12.0
        return Q / (1.0 + c * g * Q), omitted

    def wrong_half(self, x):                  # −a1/2 → −a1/2.001
        p, q = self.p(x)
        value, omitted = original(self, x)
        return value + (q - 2 * p) * (1 / 2 - 1 / 2.001), omitted

    for mutant in (no_last_term, wrong_half):
        monkeypatch.setattr(ray_leap._Ray, "correction", mutant)
        with pytest.raises(AssertionError):
            compared, worst = _compare(ray_leap.leap, n=40, seed=2)
            assert worst < TOL
        monkeypatch.setattr(ray_leap._Ray, "correction", original)


def test_the_step_count_of_pretraining_matches_the_loop_at_large_K():
    """K = 256 pretrains 796,641 steps (the loop, plain floats, ~0.5 s)."""
    path = np.empty((1, 2))
    args = (0.0, 0.0, 256, 0.1, 0.01, 10**7, 0, path, 0.0, 0.0, 0.0)
    a, b = ray_step_loop(*args), ray_leap.leap(*args)
    assert a[2] == b[2] == 796_641
    assert b[0] == pytest.approx(a[0], rel=1e-12) and b[1] == pytest.approx(a[1], rel=1e-12)
    count, bound = ray_leap.step_counter(256, 0.1, 0.0, ray_leap._Ray(256, 0.1).x_star(0.01))
    assert math.ceil(count) == 796_641 and bound < 1e-6


def test_the_leap_hands_back_what_it_cannot_call():
    path = np.empty((1, 2))
    args = (0.0, 0.0, 64, 0.1, 0.01, 10**7, 0, path, 0.0, 0.0, 0.0)
    assert ray_leap.leap(*args) is not None
    assert ray_leap.leap(*args, guard=1e-30) is None              # the bound exceeds it
    assert ray_leap.leap(0.0, 0.0, 2, 0.1, 0.01, 10**7, 0, path, 0.0, 0.0, 0.0) is None
    assert not ray_leap.takes(2, 0.1) and ray_leap.takes(1024, 0.1)
    # a source whose largest step changes its loss by ~1e-15: the trend threshold's edge
    own, other = 0.5, -0.5 / 63

    def largest(scale):
        grid = np.linspace(own - other, ray_leap._Ray(64, 0.1).x_star(0.01), 4001)
        ray = ray_leap._Ray(64, 0.1)
        t = np.exp(ray.log_m - (1.0 + scale * (grid - grid[0])))
        loss = 0.5 * (t / (1 + t)) ** 2 / ray.m
        p, q = ray.p(grid[:-1])
        return float(np.max(np.abs(np.diff(loss)) / np.diff(grid) * ray.c * p * q * q))

    scale = 1e-15 / (largest(1e-6) / 1e-6)            # linear in the scale, for small ones
    out = ray_leap.leap(own, other, 64, 0.1, 0.01, 10**7, 0, path, 1.0, 0.0, scale)
    assert out is None
    ray = descend_ray(own, other, 64, 0.1, 0.01, 10**7, source=(1.0, 0.0, scale),
                      expected_steps=10**6)
    assert "step counter" not in ray.engine                       # the loop decided it


def test_descend_ray_leaps_long_runs_only():
    long = descend_ray(0.0, 0.0, 256, 0.1, 0.01, 10**7,
                       expected_steps=estimates.pretrain_steps(256, 0.01, 0.1))
    short = descend_ray(0.0, 0.0, 16, 0.1, 0.01, 10**7,
                        expected_steps=estimates.pretrain_steps(16, 0.01, 0.1))
    assert long.engine == "symmetric-ray recurrence (step counter)" and long.steps == 796_641
    assert short.engine == "symmetric-ray recurrence (Python)"
    assert estimates.ray_leaps(256, 0.1, 8e5) and not estimates.ray_leaps(16, 0.1, 1e4)
