"""The overlap phase diagram: K = 2 with overlapping training features, over (ρ, γ2).

Training features ``v_1, v_2`` of unit norm with ``⟨v_1, v_2⟩ = ρ``, OOD features
``u_k = γ_k v_k + √(1 − γ_k²) w_k`` with ``γ_1 = 1`` (:func:`oodcalc.geometry.overlap`).
On every point of a ρ × γ2 grid three answers to "does plain fine-tuning on U make
``L_{v_k}`` rise or fall?" are set side by side, per feature k:

- ``F_sign``: the exact sign of ``F_k`` over the whole fine-tuning run, by the Gram engine
  ``predict`` uses for overlapping features (``|F_k| <= TREND_TOL`` counts as 0);
- ``paper``: the paper's K = 2 rule (forgetting iff ``−γ_kγ_m > γ_k²``, backward transfer
  iff ``<``, unaffected on the boundary; ``theory.regime_names``), which reads γ only
  and so draws the same vertical lines at every ρ;
- ``C_sign``: the sign of the overlap-aware first-order criterion
  ``C_k = −⟨∇_{z_V} e_k, M g_U Mᵀ⟩`` (:func:`oodcalc.theory.overlap_first_order`), the
  first step's change of ``e_k`` to first order in ``η_ft``.

A rule *disagrees* at a point when it promises a sign of ``F_k`` and the exact one is
another; points where fine-tuning takes no step (``T2 = 0``, at ``γ2 = 1``) or a phase did
not converge are not scored. Pretraining depends on ρ only and runs once per row (a stack
of Grams); fine-tuning runs all points in batches of similar length, by the same engine
and operations as ``predict``, so every point equals ``oc.predict(oc.Setting(
oc.overlap(ρ, [1, γ2])))``: T1 and T2 identical, ``F_k`` to round-off (tests/test_overlap.py).
At ρ = 0 the features are orthonormal and the row is the orthonormal K = 2 result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import estimates, limits, theory
from .errors import InputError, param
from .finetune import engine, gram, terms
from .geometry import overlap
from .report import TREND_TOL, directions
from .setting import Protocol, require_plain

__all__ = [
    "BATCH", "COUNTEREXAMPLES", "DEFAULT_GRID", "MAP_FLOATS", "MAX_GRID", "OverlapMap",
    "RHO_MAX", "RULES", "SPREAD", "axes", "check_grid", "compute",
]


#: Rules scored against the exact sign of F_k.
RULES = ("paper", "C_sign")
#: The cases of issue 32 the figure stars: (ρ, γ2) and what they show (arXiv 2609.36448's
#: K = 2 rule is wrong for feature 2 at both; ``oodcalc predict --overlap 0.8 --gamma 1,0.5``).
COUNTEREXAMPLES = ((0.8, 0.5), (-0.5, -0.2))

#: Default grid: N points of γ2 over [−1, 1]; ρ takes those within [−RHO_MAX, RHO_MAX].
DEFAULT_GRID = 41
RHO_MAX = 0.9
#: Fine-tuning batches: a batch runs until its slowest point stops, so points are sorted by
#: their estimated steps and a batch takes at most BATCH points whose estimates lie within
#: a factor SPREAD of its first (longest) one. A K = 2 step costs ~60 µs plus ~3 µs per
#: point here: a long point alone pays little, a thousand short ones together little more.
BATCH = 256
SPREAD = 1.5
#: Floats the map holds per point (logits, Grams, the recipe's matrices, results).
MAP_FLOATS = 64
#: Largest N. Measured (CPU, 2-core machine under load): N = 41 at ρ ≤ 0.9, 12 s, set by
#: the longest runs (T1 = 40,878 at ρ = 0.9, T2 = 40,878 at ρ = −0.9, γ2 = −1); at ρ ≤ 0.8,
#: 4.2 s. The rest grows as N² × mean T2 (~570 steps) × ~3 µs, plus one Python geometry
#: per point: about a minute at N = 201 and several at 401 (estimates).
MAX_GRID = 401


@dataclass(frozen=True)
class OverlapMap:
    """The map: ``rho`` (rows), ``gamma2`` (columns); per point ``T2``, ``F`` (``F_k``,
    ``(n_ρ, n_γ, 2)``), ``C`` (``C_k``), the verdict names per rule (``(n_ρ, n_γ, 2)``
    object arrays) and ``converged``; ``T1`` per row."""

    rho: np.ndarray
    gamma2: np.ndarray
    protocol: dict[str, Any]
    T1: np.ndarray
    T2: np.ndarray
    F: np.ndarray
    C: np.ndarray
    verdicts: dict[str, np.ndarray]
    converged: np.ndarray
    counterexamples: list[tuple[float, float]] = field(
        default_factory=lambda: list(COUNTEREXAMPLES))

    @property
    def F_sign(self) -> np.ndarray:
        return np.where(self.F > TREND_TOL, 1, np.where(self.F < -TREND_TOL, -1, 0))

    @property
    def scored(self) -> np.ndarray:
        """Points that are scored: both phases converged and fine-tuning took a step."""
        return self.converged & (self.T2 >= 1)

    def promise(self, rule: str) -> np.ndarray:
        """The sign ``rule`` promises per point and feature; NaN where it promises none."""
        return theory.promised_signs(self.verdicts[rule])

    def disagrees(self, rule: str) -> np.ndarray:
        """Where ``rule`` promises a sign of F_k and the exact F_k has another (scored
        points only), ``(n_ρ, n_γ, 2)``."""
        p = self.promise(rule)
        return self.scored[..., None] & ~np.isnan(p) & (p != self.F_sign)

    def fractions(self, k: int) -> dict[str, float]:
        """Per rule, the fraction of grid points where it contradicts the sign of
        ``F_k`` (``k`` = 1 or 2)."""
        return {rule: float(self.disagrees(rule)[..., k - 1].mean()) for rule in RULES}


def check_grid(n: Any, rho_max: float = RHO_MAX) -> tuple[int, float]:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 3:
        raise InputError(param("n"), n, "expected an integer >= 3")
    rho_max = float(rho_max)
    if not (np.isfinite(rho_max) and 0.0 <= rho_max < 1.0):
        raise InputError(param("rho_max"), rho_max, "a number in [0, 1): at ρ = ±1 the two "
                         "features coincide")
    if n > MAX_GRID:
        raise InputError(param("n"), n, f"at most {MAX_GRID} (N × N points of exact Gram "
                         f"dynamics: N = {MAX_GRID} takes minutes)")
    limits.check_maps({2: int(n) ** 2}, MAP_FLOATS, "the overlap map (N × N points)")
    return int(n), rho_max


def axes(n: int, rho_max: float = RHO_MAX) -> tuple[np.ndarray, np.ndarray]:
    """``(ρ, γ2)``: ``n`` points of γ2 over [−1, 1] (rounded to 12 decimals, so 0.5 is
    0.5 and the middle point 0), ρ the ones within ``[−rho_max, rho_max]`` (the same step)."""
    gamma2 = np.round(np.linspace(-1.0, 1.0, n), 12) + 0.0
    rho = gamma2[np.abs(gamma2) <= rho_max + 1e-12]
    return rho, gamma2


def compute(n: int = DEFAULT_GRID, protocol: Protocol | None = None, *,
            rho_max: float = RHO_MAX,
            progress: Callable[[int, int], None] | None = None) -> OverlapMap:
    """The map over ``n`` values of γ2 in [−1, 1] and the same step of ρ in
    ``[−rho_max, rho_max]``. ``progress(done, total)`` is called as points finish.

    >>> m = compute(11)               # ρ within ±0.9 and γ2 in steps of 0.2 (10 s)
    >>> i, j = list(m.rho).index(0.8), list(m.gamma2).index(0.6)
    >>> int(m.F_sign[i, j, 1]), m.verdicts["paper"][i, j, 1], m.verdicts["C_sign"][i, j, 1]
    (1, 'backward-transfer', 'falling')
    >>> bool(m.disagrees("paper")[i, j, 1] and m.disagrees("C_sign")[i, j, 1])   # both wrong
    True
    """
    protocol = protocol or Protocol()
    require_plain(protocol, "the overlap map")
    n, rho_max = check_grid(n, rho_max)
    rho, gamma2 = axes(n, rho_max)
    K = 2
    # each point's matrices from its own geometry: predict's numbers to the bit
    G_V, M, G_U = [], [], []
    for r in rho:
        for j, g in enumerate(gamma2):
            geo = overlap(r, [1.0, g])
            if j == 0:
                G_V.append(geo.G_V)                  # the same for every γ2 of the row
            M.append(geo.M)
            G_U.append(geo.G_U)
    G_V, M, G_U = np.stack(G_V), np.stack(M), np.stack(G_U)         # (n_ρ, ...), (B, ...)
    # predict's caps, the largest over the rows (each would be refused as predict does)
    cap1 = max(limits.pretrain_cap(K, protocol, overlap=estimates.gram_scale(G))
               for G in G_V)
    pre = gram.pretrain(G_V, protocol.eta, protocol.eps, cap1)
    shape = (len(rho), len(gamma2))
    z1 = np.broadcast_to(pre.z[:, None], shape + (K, K)).reshape(-1, K, K)
    GV = np.broadcast_to(G_V[:, None], shape + (K, K)).reshape(-1, K, K)
    z_ood0 = gram.ood_start(z1, GV, M)
    log_t2 = np.array([float(estimates.column_log_steps(
        z, protocol.eps_ft / estimates.gram_scale(G), protocol.eta_ft
        * estimates.gram_scale(G) ** 3).max()) for z, G in zip(z_ood0, G_U)])
    caps = np.array([limits.phase_cap(protocol.max_steps, protocol.auto_steps, t,
                                      "fine-tuning", f"K = 2, eps_ft = {protocol.eps_ft:g}, "
                                      f"eta_ft = {protocol.eta_ft:g} on overlapping features",
                                      f"raise {param('eps_ft')} or {param('eta_ft')}")
                     for t in log_t2])
    B = len(M)
    if progress is not None:
        progress(0, B)
    z_V_end = np.empty_like(z1)
    T2 = np.zeros(B, dtype=np.int64)
    reached = np.zeros(B, dtype=bool)
    done = 0
    for batch in _batches(log_t2):
        recipe = terms.recipe(protocol, M[batch], z_ood0[batch], z1[batch], GV[batch],
                              G_U[batch])
        run = engine.finetune(z_ood0[batch], z1[batch], recipe, protocol.eta_ft,
                              protocol.eps_ft, int(caps[batch].max()))
        z_V_end[batch], T2[batch] = run.z_V, run.steps
        reached[batch] = run.reached & (run.steps <= caps[batch])
        done += len(batch)
        if progress is not None:
            progress(done, B)
    # F_k as predict reads it: the source losses e_k(z_V; G_V)/K after minus before
    F = terms.column_errors(z_V_end, GV) / K - terms.column_errors(z1, GV) / K
    C = theory.overlap_first_order(z1, GV, z_ood0, G_U, M)
    gammas = np.stack([np.ones(B), np.tile(gamma2, len(rho))], axis=-1)
    paper = np.asarray(theory.regime_names(gammas), dtype=object)
    converged = (reached & np.repeat(pre.converged, len(gamma2))).reshape(shape)
    return OverlapMap(rho, gamma2, protocol.describe(), pre.steps.copy(),
                      T2.reshape(shape), F.reshape(shape + (K,)), C.reshape(shape + (K,)),
                      {"paper": paper.reshape(shape + (K,)),
                       "C_sign": directions(C).reshape(shape + (K,))},
                      converged)


def _batches(log_steps: np.ndarray) -> list[np.ndarray]:
    """Indices of the points, longest estimate first, in batches of similar length."""
    order = np.argsort(-log_steps, kind="stable")
    out, start = [], 0
    while start < len(order):
        head = log_steps[order[start]]
        stop = start + 1
        while (stop < len(order) and stop - start < BATCH
               and log_steps[order[stop]] >= head - np.log(SPREAD)):
            stop += 1
        out.append(order[start:stop])
        start = stop
    return out
