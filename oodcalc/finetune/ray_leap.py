"""The symmetric ray without stepping: gradient descent's step count and end state from
the map's Abel function (its "step counter"), to within a stated bound.

On the ray a column has its own logit a and K − 1 others b, and a step conserves
a + (K−1)b, so the descent is a map of the gap x = a − b alone. With m = K − 1,
u = eˣ/m (the odds of the own weight p = u/(1 + u)) and the step
``rate = η/K`` of :func:`oodcalc.finetune.ray_loop.ray_step_loop`, one step is

    x ↦ x + F(x),   F = c · p(1 − p)²,   c = rate · K²/m²

(the loop's update of a minus that of b, simplified). A function τ with
τ(x + F(x)) = τ(x) + 1 counts steps: x_n = τ⁻¹(τ(x_0) + n). The inverse of the time-1 flow
of the *modified* field f̃ (backward error analysis of explicit Euler, h = 1) is one:

    f̃ = F − F F'/2 + F(F F'' + 4F'²)/12 − F F'(2F F'' + 3F'²)/12 + O(F⁵),

derivatives in x (the terms derived with sympy in tests/test_ray_leap.py). With
D = p(1 − p) d/dp, F' = F·a₁ and F'' = F·a₂ for the polynomials a₁ = 1 − 3p and
a₂ = (1 − 3p)² − 3p(1 − p), so f̃ = F·(1 + c g Q) with g = p(1 − p)² and

    Q = −a₁/2 + c g (a₂ + 4a₁²)/12 − c² g² a₁ (2a₂ + 3a₁²)/12,

and τ = ∫ dx/f̃ = Φ₀/c − ∫ Q/(1 + c g Q) dx with the closed form
Φ₀ = −1/u + 3 log u + 3u + u²/2 (∫ dx/F); the remaining integral is smooth and bounded
in x (Gauss–Legendre). The loop stops at the first n with e(x_n) <= ε, e = (1 − p)² K/(2m)
decreasing in x: at n = ⌈τ(x*) − τ(x_0)⌉ with e(x*) = ε in closed form.

Nothing is guessed: where the answer is too close to call (τ's difference within the
bound of an integer, or the source loss's largest step within a factor 2 of the loop's
1e-15 trend threshold) :func:`leap` returns None and the caller runs the loop. The bound
adds the first omitted term's size, the quadrature's change on halving its panels, and
the round-off of Φ₀'s difference; the loop itself carries round-off of about √T ulps, so
the two agree to ~1e-12 relative and in T (tests/test_ray_leap.py compares them).
This module imports nothing of oodcalc.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MAX_C", "leap", "ray_error", "step_counter", "takes"]

#: Gauss–Legendre nodes per panel, and the panels' largest width in x (the integrand
#: varies on the scale of the sigmoid, 1)
_NODES, _WIDTH = 24, 0.5
_GL_X, _GL_W = np.polynomial.legendre.leggauss(_NODES)
#: the largest c (the step's scale) the leap takes: the modified field's series is
#: asymptotic in c, and at c ~ 0.1 the omitted terms reached 1e-9 of the state
MAX_C = 0.01
#: the loop's trend threshold (a step's change of the source loss), and how far from it
#: the leap still decides
TREND_TOL, TREND_MARGIN = 1e-15, 2.0


def ray_error(K: int, gap):
    """e of a two-valued column whose own logit exceeds the K − 1 others by ``gap``:
    ½(1 − p)²·K/(K − 1), p the own weight (1 − p formed without cancellation)."""
    t = (K - 1) * np.exp(-np.asarray(gap, dtype=np.float64))
    rest = t / (1.0 + t)
    return 0.5 * rest * rest * K / (K - 1)


def takes(K: int, eta: float) -> bool:
    """Whether the leap takes rays of K and step size η (c = ηK/(K − 1)² <= MAX_C)."""
    return K >= 2 and eta * K / (K - 1) ** 2 <= MAX_C


class _Ray:
    """The map x ↦ x + F(x) of one ray: its constants and its step counter τ."""

    def __init__(self, K: int, eta: float):
        self.K, self.m = K, K - 1.0
        self.log_m = math.log(self.m)
        self.c = (eta / K) * K * K / (self.m * self.m)

    def p(self, x):
        """The own weight p = 1/(1 + m e^{−x}) (with 1 − p, each without cancellation)."""
        t = np.exp(self.log_m - np.asarray(x, dtype=np.float64))
        return 1.0 / (1.0 + t), t / (1.0 + t)

    def correction(self, x):
        """Q/(1 + c g Q): the integrand that turns ∫dx/F into ∫dx/f̃, and the size of the
        first omitted term relative to it (c g times the last kept)."""
        p, q = self.p(x)
        c, g = self.c, p * q * q
        a1 = q - 2.0 * p                               # 1 − 3p
        a2 = a1 * a1 - 3.0 * p * q
        last = c * c * g * g * a1 * (2.0 * a2 + 3.0 * a1 * a1) / 12.0
        Q = -a1 / 2.0 + c * g * (a2 + 4.0 * a1 * a1) / 12.0 - last
        return Q / (1.0 + c * g * Q), np.abs(c * g * last)

    def phi0(self, x):
        """c ∫ dx/F: −1/u + 3 log u + 3u + u²/2 with u = eˣ/m."""
        x = np.asarray(x, dtype=np.float64)
        u = np.exp(x - self.log_m)
        return -np.exp(self.log_m - x) + 3.0 * (x - self.log_m) + 3.0 * u + 0.5 * u * u

    def x_star(self, eps: float) -> float:
        """The gap where e = (1 − p)² K/(2m) equals ε (−inf when every x meets it)."""
        q = math.sqrt(2.0 * eps * self.m / self.K)
        if q >= 1.0:
            return -math.inf
        return math.log((1.0 - q) / q) + self.log_m


def _panels(a: float, b: float, width: float) -> np.ndarray:
    n = max(1, math.ceil(abs(b - a) / width))
    return np.linspace(a, b, n + 1)


def _integral(ray: _Ray, edges: np.ndarray) -> tuple[np.ndarray, float]:
    """Cumulative ∫ correction over the panels (from edges[0] to each edge), and the
    omitted term's integral over them."""
    mid, half = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    nodes = mid[:, None] + half[:, None] * _GL_X
    value, omitted = ray.correction(nodes)
    per_panel = (value * _GL_W).sum(axis=1) * half
    return np.concatenate(([0.0], np.cumsum(per_panel))), float(
        np.abs((omitted * _GL_W).sum(axis=1) * half).sum())


def step_counter(K: int, eta: float, x0: float, x1: float) -> tuple[float, float]:
    """τ(x1) − τ(x0): the (real) number of the loop's steps from gap x0 to gap x1, and a
    bound on its error (the omitted term, the quadrature, Φ₀'s round-off)."""
    ray = _Ray(K, eta)
    return _count(ray, x0, x1)


def _count(ray: _Ray, x0: float, x1: float) -> tuple[float, float]:
    cumulative, omitted = _integral(ray, _panels(x0, x1, _WIDTH))
    coarse, _ = _integral(ray, _panels(x0, x1, 2 * _WIDTH))
    quad = abs(cumulative[-1] - coarse[-1])
    ends = ray.phi0(np.array([x0, x1]))
    roundoff = 8 * np.finfo(float).eps * (abs(ends[0]) + abs(ends[1])) / ray.c
    count = float((ends[1] - ends[0]) / ray.c - cumulative[-1])
    return count, float(omitted + quad + roundoff + 4 * np.finfo(float).eps * abs(count))


def _invert(ray: _Ray, x0: float, edges: np.ndarray, cumulative: np.ndarray,
            targets: np.ndarray) -> np.ndarray:
    """Gaps x with τ(x) − τ(x0) = targets (Newton from the panels' table)."""
    table = ray.phi0(edges) / ray.c - ray.phi0(x0) / ray.c - cumulative
    x = np.interp(targets, table, edges)
    for _ in range(40):
        left = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
        a = edges[left]
        half = (x - a) / 2
        nodes = (a + half)[:, None] + half[:, None] * _GL_X
        partial = (ray.correction(nodes)[0] * _GL_W).sum(axis=1) * half
        tau = (ray.phi0(x) - ray.phi0(x0)) / ray.c - cumulative[left] - partial
        p, q = ray.p(x)
        value, _ = ray.correction(x)
        slope = 1.0 / (ray.c * p * q * q) - value          # dτ/dx
        step = (tau - targets) / slope
        x = x - step
        if np.all(np.abs(step) <= 4 * np.finfo(float).eps * (1 + np.abs(x))):
            break
    return x


def leap(own: float, other: float, K: int, eta: float, eps: float, max_steps: int,
         stride: int, path: np.ndarray, src_own: float, src_other: float,
         scale: float, *, guard: float = 1e-6):
    """The loop's result (:func:`oodcalc.finetune.ray_loop.ray_step_loop`, same arguments
    and return value) without its steps, or None when the leap cannot decide it (then run
    the loop): the step count's bound above ``guard`` (a long ray's integer T must not
    hang on it), τ's difference within the bound of an integer, or the source trend too
    close to the loop's threshold."""
    if not takes(K, eta):
        return None
    ray = _Ray(K, eta)
    m = ray.m
    x0, xs = own - other, ray.x_star(eps)
    if not x0 < xs:
        return None                                        # no step: the loop is instant
    count, bound = _count(ray, x0, xs)
    if bound > guard:
        return None
    T = math.ceil(count)
    if T - count < bound or count - (T - 1) < bound:
        return None                                        # too close to call
    converged = T <= max_steps
    T = min(T, max_steps)
    n = np.arange(0, T + 1, stride, dtype=np.float64) if stride > 0 else np.zeros(0)
    if stride > 0 and T % stride:
        n = np.append(n, float(T))
    targets = np.append(n, float(T))
    edges = _panels(x0, xs, _WIDTH)          # x_T passes x* by less than a step, if at all
    cumulative, _ = _integral(ray, edges)
    xs_at = _invert(ray, x0, edges, cumulative, targets)
    xs_at[targets == 0] = x0
    x_end = float(xs_at[-1])
    own_at = own + (m / K) * (xs_at - x0)
    other_at = other - (xs_at - x0) / K
    recorded = len(n)
    if stride > 0:
        k = min(recorded, path.shape[0])
        path[:k, 0] = own_at[:k]
        path[:k, 1] = other_at[:k]
    # the source column src + scale·Δlogits: its gap moves by scale·(x − x0); its loss
    # e_s/K is monotone in the gap, so it only falls (scale > 0) or rises (scale < 0)
    gap0 = src_own - src_other

    def source_loss(x):
        return ray_error(K, gap0 + scale * (np.asarray(x) - x0)) / K

    first = float(source_loss(x0))
    last = float(source_loss(x_end)) if scale != 0.0 else first
    rises = falls = False
    if scale != 0.0 and T > 0:
        grid = np.linspace(x0, x_end, 513)
        change = np.abs(np.diff(source_loss(grid))) / np.maximum(np.diff(grid), 1e-300)
        p, q = ray.p(grid[:-1])
        largest = float(np.max(change * ray.c * p * q * q))      # per step ≈ |L'|·F
        if TREND_TOL / TREND_MARGIN < largest < TREND_TOL * TREND_MARGIN:
            return None
        if largest >= TREND_TOL * TREND_MARGIN:
            rises, falls = scale < 0, scale > 0
    return (float(own_at[-1]), float(other_at[-1]), int(T), converged, recorded, first, last,
            rises, falls)
