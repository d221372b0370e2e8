"""Sweeps: many configurations at once, by the exact batched dynamics.

A sweep is a table of configurations (one geometry and one protocol per row). It is
computed in two batched passes, never a Python loop over configurations:

1. Pretraining depends only on ``(K, eps, eta)`` (from ``Q = 0`` the logits never see
   the geometry), so every distinct ``(eps, eta)`` of a given ``K`` is pretrained once,
   all of them together in one batched descent.
2. Fine-tuning runs for every row at once (each row stopping on its own), in chunks of
   rows. Chunks are pure functions of their rows and a seed
   (``np.random.SeedSequence(seed).spawn``), so they can go to any
   ``concurrent.futures.Executor``: a local process pool, or a dask.distributed cluster
   through ``Client.get_executor()``. The exact dynamics draw no random numbers; the
   seed is carried and recorded so that every task has the same shape as a stochastic
   one, and the results are identical whatever the split (the tests check this).

Per row the result holds T1, T2, the OOD loss at T1, forgetting F and every F_k, the
theorem's regime for each source feature and the derived first-step criterion D_k with
the initial direction it gives (parallel shifts and rotations), and whether both phases
met the stopping rule; a row that did not is marked, not fatal.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import estimates, limits, theory
from .finetune import engine, terms
from .finetune.dynamics import _errors_after, descend_columns, descend_ray, \
    first_step_change, ood_start, ray_logits, source_errors
from .errors import InputError, item_name, param, shorten
from .geometry import Geometry, check_K, check_sequence
from .io import open_input, write_atomic
from .model import attention_first, conditional_errors, errors_first, feature_sum, \
    features_first, features_last, is_diagonal, loss, matrices_first
from .report import directions
from .setting import DEFAULT_EPS, DEFAULT_ETA, DEFAULT_MAX_STEPS, INTERVENTIONS, NEVER, \
    Protocol, check_positive

__all__ = [
    "BLOCK", "Chunk", "EXECUTOR_CHUNKS", "FORMATS", "Grid", "REGIMES", "SERIAL_CHUNK",
    "SweepResult", "finetune_chunk", "gamma_grid", "gamma_rows", "geometry_grid",
    "output_format", "read_result", "regimes", "sweep", "theta_grid", "write_csv",
]


#: Rows per chunk when no executor is given (bounds memory; one chunk is one batch).
SERIAL_CHUNK = 1 << 17
#: Chunks per sweep when an executor is given and no chunk size is.
EXECUTOR_CHUNKS = 16
#: Elements of the ``(rows, K, K)`` logits measured (or estimated from) at once outside
#: the descent: a block's temporaries stay in cache and their memory is reused, not fresh
#: pages (at K = 2, blocks of 8,192 rows measure a phase diagram 1.5× faster than all
#: 40,401 rows at once).
BLOCK = 1 << 15

from .limits import MAX_ROWS  # noqa: E402  (largest grid accepted at once; caps live there)

FORMATS = ("csv", "npz")


# --- the configurations ---------------------------------------------------------------

@dataclass(frozen=True)
class Grid:
    """Configurations that share ``K``: one row each.

    ``M`` is ``VᵀU`` per row (all the exact dynamics need of a geometry), ``d`` the
    smallest dimension that holds each geometry (results do not depend on ``d``),
    ``gamma`` the ``γ_k`` per row where the geometry is a parallel shift (a rotation is one
    with every ``γ_k = cos θ``), and ``params`` the columns that name the geometry.
    ``axes`` lists the product axes, outermost first, when the grid is a full product.
    """

    K: int
    geometry: str
    M: np.ndarray
    d: np.ndarray
    eps: np.ndarray
    eta: np.ndarray
    eta_ft: np.ndarray
    params: dict[str, np.ndarray] = field(default_factory=dict)
    gamma: np.ndarray | None = None
    axes: tuple[tuple[str, np.ndarray], ...] = ()

    def __len__(self) -> int:
        return self.M.shape[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for _, values in self.axes)

    def take(self, rows: Any) -> "Grid":
        """The configurations at ``rows`` (indices or a mask), as a grid with no axes."""
        rows = np.asarray(rows)
        return Grid(K=self.K, geometry=self.geometry, M=self.M[rows], d=self.d[rows],
                    eps=self.eps[rows], eta=self.eta[rows], eta_ft=self.eta_ft[rows],
                    params={n: v[rows] for n, v in self.params.items()},
                    gamma=None if self.gamma is None else self.gamma[rows])


def _positive_axis(values: Any, name: str) -> np.ndarray:
    x = _float_axis(values, name, "expected finite numbers > 0")
    bad = ~(np.isfinite(x) & (x > 0))
    if x.size == 0:
        raise InputError(name, "nothing", "give at least one value")
    if bad.any():
        raise InputError(name, repr(float(x[bad][0])), "expected finite numbers > 0")
    return x


def _float_axis(values: Any, name: str, accepted: str) -> np.ndarray:
    """One axis of a grid: a number or a sequence of numbers, as a flat float64 array."""
    try:
        if values is None or isinstance(values, (str, bytes)):   # (None would become NaN)
            raise ValueError
        return np.atleast_1d(np.asarray(values, dtype=np.float64)).ravel()
    except (TypeError, ValueError):
        raise InputError(name, shorten(values), accepted) from None


def _protocol_axes(eps: Any, eta: Any, eta_ft: Any) -> list[tuple[str, np.ndarray]]:
    axes = [("eps", _positive_axis(eps, "eps")), ("eta", _positive_axis(eta, "eta"))]
    if eta_ft is not None:
        axes.append(("eta_ft", _positive_axis(eta_ft, "eta_ft")))
    return axes


def _product(axes: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Every combination, the first axis outermost (C order)."""
    # (not np.meshgrid: numpy arrays have at most 32 dimensions, a grid any number of axes)
    sizes = [len(values) for _, values in axes]
    out = {}
    for i, (name, values) in enumerate(axes):
        inner, outer = math.prod(sizes[i + 1:]), math.prod(sizes[:i])
        out[name] = np.tile(np.repeat(values, inner), outer)
    return out


def _build(K: int, geometry: str, geo_axes: list[tuple[str, np.ndarray]], eps, eta, eta_ft,
           make: Callable[[dict[str, np.ndarray]], tuple]) -> Grid:
    axes = _protocol_axes(eps, eta, eta_ft) + geo_axes
    rows = math.prod(len(values) for _, values in axes)
    if rows > MAX_ROWS:
        raise InputError("grid", f"{rows:,} configurations", f"at most {MAX_ROWS:,} in one "
                         "grid; split the sweep or coarsen an axis")
    limits.check_rows({K: rows})                     # its rows' memory, before any is built
    columns = _product(axes)
    M, d, gamma, params = make(columns)
    return Grid(K=K, geometry=geometry, M=M, d=d, eps=columns["eps"], eta=columns["eta"],
                eta_ft=columns.get("eta_ft", columns["eta"]), params=params, gamma=gamma,
                axes=tuple(axes))


def gamma_grid(gammas: Sequence[Any], eps: Any = DEFAULT_EPS, eta: Any = DEFAULT_ETA,
               eta_ft: Any = None, *, name: str = "gamma") -> Grid:
    """Parallel shifts over the product of one axis of ``γ`` values per feature.

    ``gamma_grid([np.linspace(-1, 1, 201)] * 2)`` is the K = 2 phase diagram; a plain
    number fixes that feature. ``eps``, ``eta``, ``eta_ft`` (default: ``eta``) are numbers
    or sequences, also in the product (outermost). Rows run in C order over
    ``(eps, eta[, eta_ft], gamma_1, …, gamma_K)``.
    """
    gammas = check_sequence(gammas, name, "one axis of γ values per feature")
    K = check_K(len(gammas), f"{name} (number of features)")
    geo_axes = []
    for k, values in enumerate(gammas):
        label = item_name(name, k)
        x = _float_axis(values, label, "expected real numbers in [-1, 1]")
        if x.size == 0:
            raise InputError(label, "nothing", "give at least one value")
        bad = ~(np.isfinite(x) & (np.abs(x) <= 1.0))
        if bad.any():
            raise InputError(label, repr(float(x[bad][0])), "each γ must be a finite number "
                             "in [-1, 1]")
        geo_axes.append((f"gamma_{k + 1}", x))

    def make(columns):
        gamma = np.stack([columns[f"gamma_{k + 1}"] for k in range(K)], axis=1)
        return *_shift(gamma), gamma, {}

    return _build(K, "parallel-shift", geo_axes, eps, eta, eta_ft, make)


def _shift(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``M = diag(γ)`` and the smallest ``d`` per row of a stack of parallel shifts."""
    B, K = gamma.shape
    M = np.zeros((B, K, K))
    M[:, np.arange(K), np.arange(K)] = gamma
    d = K + (np.abs(gamma) < 1.0).sum(axis=1)   # as geometry.parallel_shift
    return M, d


def gamma_rows(gamma: Any, eps: float = DEFAULT_EPS, eta: float = DEFAULT_ETA,
               eta_ft: float | None = None) -> Grid:
    """Parallel shifts, one row per row of ``gamma`` ``(B, K)`` (no product: random or
    scattered γ), all under one protocol."""
    try:
        gamma = np.array(gamma, dtype=np.float64, ndmin=2)
    except (TypeError, ValueError):
        raise InputError("gamma", repr(gamma), "expected rows of real numbers in [-1, 1]") from None
    if gamma.ndim != 2 or gamma.size == 0:
        raise InputError("gamma", f"shape {gamma.shape}", "expected (rows, K) with rows >= 1")
    K = check_K(gamma.shape[1], "gamma (number of features)")
    if not (np.isfinite(gamma) & (np.abs(gamma) <= 1.0)).all():
        raise InputError("gamma", "a value outside [-1, 1]", "each γ must be a finite number "
                         "in [-1, 1]")
    B = len(gamma)
    eps, eta = check_positive(eps, "eps"), check_positive(eta, "eta")
    eta_ft = eta if eta_ft is None else check_positive(eta_ft, "eta_ft")
    M, d = _shift(gamma)
    return Grid(K=K, geometry="parallel-shift", M=M, d=d, eps=np.full(B, eps),
                eta=np.full(B, eta), eta_ft=np.full(B, eta_ft), gamma=gamma)


def theta_grid(theta: Any, K: int, eps: Any = DEFAULT_EPS, eta: Any = DEFAULT_ETA,
               eta_ft: Any = None) -> Grid:
    """Rotations by each ``θ`` (radians) of ``K`` features, as ``geometry.rotation``."""
    K = check_K(K)
    try:
        x = np.atleast_1d(np.asarray(theta, dtype=np.float64)).ravel()
    except (TypeError, ValueError):
        raise InputError("theta", repr(theta), "expected angles in radians") from None
    if x.size == 0 or not np.isfinite(x).all():
        raise InputError("theta", repr(theta), "expected finite angles in radians")

    def make(columns):
        th = columns["theta"]
        c, s = np.cos(th), np.sin(th)
        multiple_of_pi = np.abs(s) < 1e-12          # u_k = ±v_k exactly, as rotation()
        c = np.where(multiple_of_pi, np.round(c), c)
        gamma = np.repeat(c[:, None], K, axis=1)
        M = np.zeros((len(th), K, K))
        M[:, np.arange(K), np.arange(K)] = gamma
        d = np.where(multiple_of_pi, K, 2 * K)
        return M, d, gamma, {"theta": th}

    return _build(K, "rotation", [("theta", x)], eps, eta, eta_ft, make)


def geometry_grid(geometries: Sequence[Geometry], eps: Any = DEFAULT_EPS,
                  eta: Any = DEFAULT_ETA, eta_ft: Any = None) -> Grid:
    """Any geometries with the same ``K`` (row column ``geometry_index`` points into the
    list), each under every protocol of the product."""
    geometries = list(geometries)
    if not geometries:
        raise InputError("geometries", "nothing", "give at least one geometry")
    K = geometries[0].K
    if any(g.K != K for g in geometries):
        raise InputError("geometries", "different K", "all geometries of a grid share K")
    Ms = np.stack([g.M for g in geometries])
    ds = np.array([g.d for g in geometries])
    gammas = [g.gamma for g in geometries]
    kinds = {g.kind for g in geometries}

    def make(columns):
        i = columns["geometry_index"].astype(np.int64)
        gamma = np.stack(gammas)[i] if all(g is not None for g in gammas) else None
        return Ms[i], ds[i], gamma, {"geometry_index": i}

    kind = kinds.pop() if len(kinds) == 1 else "mixed"
    return _build(K, kind, [("geometry_index", np.arange(len(geometries)))], eps, eta,
                  eta_ft, make)


# --- the theorem's regimes, vectorised --------------------------------------------------

REGIMES = theory.REGIMES


def regimes(gamma: np.ndarray) -> np.ndarray:
    """``theory.forgetting_regimes`` for a stack ``γ`` of shape ``(B, K)``: one regime name
    per row and source feature, shape ``(B, K)`` (the same rule, tie for tie)."""
    return theory.regime_names(gamma)


# --- one chunk: fine-tuning a block of rows ------------------------------------------

@dataclass(frozen=True)
class Chunk:
    """A task: rows ``start:stop`` of a grid, everything fine-tuning needs, and a seed."""

    start: int
    stop: int
    M: np.ndarray          # (B, K, K)
    z1: np.ndarray         # (B, K, K) pretrained logits of each row
    eps: np.ndarray        # fine-tuning's stopping level per row (NEVER: fixed steps)
    eta_ft: np.ndarray
    max_steps: int         # fine-tuning's cap (with NEVER: exactly this many steps)
    seed: np.random.SeedSequence
    gamma: np.ndarray | None = None   # (B, K) for parallel shifts: adds D_k and its sign
    compiled: bool = False            # general columns by the Numba kernel (whole sweep)
    compiled_margins: bool = False    # all-margin chunks by the compiled pass (whole sweep)
    interventions: Protocol | None = None   # fine-tuning's terms (oodcalc.finetune)


def finetune_chunk(chunk: Chunk, progress: Callable[[int], None] | None = None
                   ) -> tuple[int, int, dict[str, np.ndarray]]:
    """Fine-tune every row of ``chunk`` at once; return ``(start, stop, columns)``.

    A pure function of the chunk: the exact dynamics are deterministic, so
    ``chunk.seed`` is not drawn from (a stochastic task would seed its generator here).
    """
    K = chunk.M.shape[-1]
    z_ood0 = ood_start(chunk.z1, chunk.M)
    if chunk.interventions is not None:
        return chunk.start, chunk.stop, _finetune_terms(chunk, z_ood0)
    ft = descend_columns(z_ood0, chunk.eta_ft, chunk.eps, chunk.max_steps, progress=progress,
                         compiled=chunk.compiled, compiled_margins=chunk.compiled_margins,
                         logits=K != 2)           # K = 2: the margins, F_k read from them
    errors = _errors_of_rows(chunk.z1)
    fixed = chunk.eps < 0                      # NEVER: ran its fixed number of steps
    columns = {"T2": ft.steps, "converged_finetune": ft.converged | fixed}
    B, rows_per_block = len(z_ood0), max(1, BLOCK // (K * K))
    for start in range(0, B, rows_per_block):
        rows = slice(start, start + rows_per_block)
        block = _measures(chunk, rows, z_ood0[rows], ft.steps[rows], errors[rows],
                          ft.z[rows] if ft.z is not None else None,
                          ft.margins[rows] if ft.z is None else None)
        for name, values in block.items():
            if name not in columns:
                columns[name] = np.empty((B,) + values.shape[1:], dtype=values.dtype)
            columns[name][rows] = values
    return chunk.start, chunk.stop, columns


def _finetune_terms(chunk: Chunk, z_ood0: np.ndarray) -> dict[str, np.ndarray]:
    """A chunk with interventions: the terms engine on both logits (the source errors read
    off z_V), its first step by the same engine. Claim 8c's D_k is for plain fine-tuning:
    not computed."""
    K = z_ood0.shape[-1]
    recipe = terms.recipe(chunk.interventions, chunk.M, z_ood0, chunk.z1)
    fixed = bool((chunk.eps < 0).all())              # every row runs its fixed steps
    run = engine.finetune(z_ood0, chunk.z1, recipe, chunk.eta_ft, chunk.eps,
                            chunk.max_steps, fixed=fixed)
    one = engine.finetune(z_ood0, chunk.z1, recipe, chunk.eta_ft, chunk.eps, 1, fixed=True)
    before = terms.column_errors(chunk.z1) / K
    first = np.where(run.steps[:, None] > 0,
                     terms.column_errors(one.z_V) / K - before, 0.0)
    return {"T2": run.steps, "converged_finetune": run.reached | fixed,
            "ood_loss": loss(z_ood0), "F_k": terms.column_errors(run.z_V) / K - before,
            "first_step_k": first, "initial_direction_k": directions(first)}


def _measures(chunk: Chunk, rows: slice, z_ood0: np.ndarray, steps: np.ndarray,
              errors: np.ndarray, z_ood: np.ndarray | None,
              margins: np.ndarray | None) -> dict[str, np.ndarray]:
    """The columns of ``rows`` of a fine-tuned chunk: OOD loss at T1, F_k, the exact first
    step and its direction, and for parallel shifts claim 8c's D_k and its sign. F_k from
    the final OOD logits ``z_ood``, or at K = 2 with M diagonal from the final OOD
    ``margins``."""
    K = z_ood0.shape[-1]
    z1, M = chunk.z1[rows], chunk.M[rows]
    if K == 2:
        after = _errors_after_k2(z1, M, z_ood0, z_ood, margins)
    else:
        after = source_errors(z1, M, z_ood0, z_ood)
    F = after / K - errors / K                                 # − L_{v_k}(Q^(T1))
    # One softmax of the OOD logits at T1 for the OOD loss, the first step and D_k
    # (each computed it before: the same bits); at K = 2 entry by entry.
    # The exact first step (none where the rule held at T1: T2 = 0, nothing moved).
    if K == 2:
        a, moves, ood_loss = _start_k2(z_ood0, chunk.eta_ft[rows])
        change = _errors_after_k2(z1, M, z_ood0, moves=moves) - errors
    else:
        a = attention_first(matrices_first(z_ood0))
        change = first_step_change(z1, M, chunk.eta_ft[rows], z_ood0=z_ood0,
                                   errors=errors, attention=a)
    first = np.where(steps[:, None] > 0, change / K, 0.0)
    if chunk.gamma is not None:   # claim 8c: the first-order criterion and its sign
        D, scale = _first_step_terms_k2(chunk.gamma[rows], a) if K == 2 else \
            theory.first_step_terms(chunk.gamma[rows], z_ood0, attention=a)
    if K != 2:
        ood_loss = feature_sum(features_last(errors_first(a))) / K   # loss(z_ood0)
    out = {"ood_loss": ood_loss, "F_k": F, "first_step_k": first,
           "initial_direction_k": directions(first)}
    if chunk.gamma is not None:
        out |= {"D_k": D, "D_direction_k": theory.directions_from_D(D, scale)}
    return out


def _start_k2(z_ood0: np.ndarray, eta_ft: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At K = 2, entry by entry, with their bits: the attention of the OOD logits at T1
    (``attention_first(matrices_first(z_ood0))``), how the first step moves them
    (:func:`~oodcalc.finetune.dynamics.first_step_moves`) and the OOD loss
    (``loss(z_ood0)``); the first two as ``[n, k]`` stacks of ``(B,)`` rows."""
    B = z_ood0.shape[0]
    a, moves = np.empty((2, 2, B)), np.empty((2, 2, B))
    rate = np.array(eta_ft) / 2
    e = []
    for k in (0, 1):
        x0, x1 = z_ood0[:, 0, k], z_ood0[:, 1, k]
        top = np.maximum(x0, x1)                                  # softmax down column k
        a0, a1 = np.exp(x0 - top), np.exp(x1 - top)
        total = a0 + a1
        a0 /= total
        a1 /= total
        a[0, k], a[1, k] = a0, a1
        r0, r1 = (a0 - 1.0, a1) if k == 0 else (a0, a1 - 1.0)     # r = Attn − I
        col = a0 * r0 + a1 * r1                                   # Σ_n a r
        moves[0, k] = (x0 - ((r0 - col) * a0) * rate) - x0        # x − a (r − Σ a r) η/K
        moves[1, k] = (x1 - ((r1 - col) * a1) * rate) - x1
        e.append(0.5 * (r0 * r0 + r1 * r1))
    return a, moves, (e[0] + e[1]) / 2


def _errors_after_k2(z1: np.ndarray, M: np.ndarray, z_ood0: np.ndarray,
                     z_ood: np.ndarray | None = None, margins: np.ndarray | None = None,
                     moves: np.ndarray | None = None) -> np.ndarray:
    """``source_errors(z1, M, z_ood0, z_ood)`` at K = 2, the same bits, entry by entry
    where M is diagonal instead of on ``(K, K, B)`` stacks. The OOD logits come as
    ``z_ood``, as their change ``moves`` (matrices-first), or as the final OOD ``margins``,
    the logits then built as ``descend_columns`` builds them (the column sum is conserved:
    own + Δ/2, other − Δ/2, Δ the margin's change)."""
    B = z_ood0.shape[0]
    z0 = [[z_ood0[:, n, k].copy() for k in (0, 1)] for n in (0, 1)]  # z0[n][k], (B,)
    if moves is not None:
        W = [[moves[n, k] for k in (0, 1)] for n in (0, 1)]
    else:
        if z_ood is None:
            z_ood = np.empty_like(z_ood0)
            for k in (0, 1):
                o = 1 - k
                change = margins[:, k] - (z0[k][k] - z0[o][k])
                z_ood[:, o, k] = z0[o][k] - change / 2
                z_ood[:, k, k] = z0[k][k] + change * (2 - 1) / 2
        W = [[z_ood[:, n, k] - z0[n][k] for k in (0, 1)] for n in (0, 1)]
    diagonal = (M[:, 0, 1] == 0) & (M[:, 1, 0] == 0)
    out = np.empty((B, 2))
    general = ~diagonal
    if general.any():
        out[general] = _errors_after(z1[general], M[general], moves[..., general]) \
            if moves is not None else \
            source_errors(z1[general], M[general], z_ood0[general], z_ood[general])
    if not diagonal.any():
        return out
    d = slice(None) if diagonal.all() else diagonal
    l = [M[d, 0, 0], M[d, 1, 1]]
    for k in (0, 1):         # source column k: z1[n, k] + (W[n, k] l_n) l_k, n = 0, 1
        x0 = z1[d, 0, k] + (W[0][k][d] * l[0]) * l[k]
        x1 = z1[d, 1, k] + (W[1][k][d] * l[1]) * l[k]
        top = np.maximum(x0, x1)                                  # attention_first
        a0, a1 = np.exp(x0 - top), np.exp(x1 - top)
        total = a0 + a1
        a0 /= total
        a1 /= total
        (a0 if k == 0 else a1)[...] -= 1.0                       # errors_first
        a0 *= a0
        a1 *= a1
        a0 += a1
        out[d, k] = 0.5 * a0
    return out


def _first_step_terms_k2(gamma: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``theory.first_step_terms(gamma, z_ood, attention=a)`` at K = 2, the same bits,
    entry by entry (``a[n, k]``: the attention of the OOD logits at T1, matrices-first).
    Its sums over n hold a zero diagonal term: kept as ``+ 0.0`` (−0 becomes +0 there)."""
    B = gamma.shape[0]
    D, scale = np.empty((B, 2)), np.empty((B, 2))
    g = [gamma[:, 0], gamma[:, 1]]
    for k in (0, 1):
        o = 1 - k
        own, other = a[k, k], a[o, k]
        sum_sq = a[0, k] * a[0, k] + a[1, k] * a[1, k]
        share = other * ((other + own) - sum_sq)                  # Λ[o, k]
        size = other * ((other + own) + sum_sq)
        cross = g[o] * g[k]
        square = g[k] * g[k]
        D[:, k] = -(cross * share + 0.0) - square * (share + 0.0)
        scale[:, k] = (np.abs(cross) * size + 0.0) + square * (size + 0.0)
    return D, scale


def _errors_of_rows(z: np.ndarray) -> np.ndarray:
    """``conditional_errors`` of a stack, computed once when every matrix is the same (the
    pretrained logits of a chunk with one ``(eps, eta)``, the usual grid)."""
    if len(z) and (z.strides[0] == 0 or (z == z[0]).all()):
        return np.broadcast_to(conditional_errors(z[:1]), z.shape[:-1])
    return conditional_errors(z)


# --- the result -------------------------------------------------------------------------

@dataclass
class SweepResult:
    """One row per configuration; ``columns`` maps each column name to an array.

    Columns: ``geometry, K, d``, the geometry's parameters (``gamma_1..gamma_K``,
    ``theta``, ``geometry_index``), ``eps, eta, eta_ft, max_steps, seed``, then ``T1, T2,
    converged, converged_pretrain, converged_finetune, ood_loss, F, F_1..F_K,
    first_step_1..first_step_K, initial_direction_1..initial_direction_K`` (the exact
    change of ``L_{v_k}`` over the first fine-tuning step and its direction, 0 and
    ``flat`` where ``T2 = 0``), then for parallel shifts and rotations ``regime_1..regime_K,
    corrected_regime_1..corrected_regime_K, D_1..D_K, D_direction_1..D_direction_K`` (the
    paper's verdict, the corrected sufficient condition ``theory.corrected_regimes``, and
    claim 8c's first-order criterion ``theory.first_step_D`` with its sign). Rows of smaller K
    hold NaN (or "") in the columns of features they lack. ``shape`` is the product
    grid's shape when the sweep is one grid.

    Example
    -------
    >>> from oodcalc.sweep import gamma_grid, sweep
    >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))       # 2 × 2 values of γ
    >>> result
    <SweepResult: 4 rows × 32 columns; grid eps × eta × gamma_1 × gamma_2 = 1 × 1 × 2 × 2>
    >>> result["T2"].tolist()
    [357, 367, 312, 0]
    >>> result["regime_1"].tolist()
    ['unaffected', 'forgetting', 'backward-transfer', 'backward-transfer']
    """

    columns: dict[str, np.ndarray]
    meta: dict[str, Any]

    def __repr__(self) -> str:
        # one line, not every column's array (the dataclass's repr)
        text = f"<SweepResult: {len(self)} rows × {len(self.columns)} columns"
        axes = self.meta.get("axes")
        if self.shape is not None and axes and len(axes) == len(self.shape):
            text += (f"; grid {' × '.join(axes)} = "
                     f"{' × '.join(str(n) for n in self.shape)}")
        return text + ">"

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    @property
    def shape(self) -> tuple[int, ...] | None:
        shape = self.meta.get("shape")
        return tuple(shape) if shape else None

    def grid(self, name: str) -> np.ndarray:
        """A column reshaped to the product grid, e.g. ``F`` over ``(eps, eta, γ1, γ2)``.

        Example
        -------
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))       # 2 × 2 values of γ
        >>> result.grid("T2").shape, result.grid("T2")[0, 0].tolist()
        ((1, 1, 2, 2), [[357, 367], [312, 0]])
        """
        if self.shape is None:
            raise ValueError("this sweep is not a single product grid")
        return self.columns[name].reshape(self.shape)

    def rows(self) -> Iterable[dict[str, Any]]:
        """One dict per configuration, column name to plain Python value.

        Example
        -------
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))       # 2 × 2 values of γ
        >>> row = next(iter(result.rows()))
        >>> row["gamma_1"], row["gamma_2"], row["T2"], row["regime_2"]
        (-0.5, 0.5, 357, 'unaffected')
        """
        names = list(self.columns)
        for values in zip(*(self.columns[n].tolist() for n in names)):
            yield dict(zip(names, values))

    def to_csv(self) -> str:
        """The CSV that ``oodcalc sweep`` writes: a header, then one line per row.

        Example
        -------
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))       # 2 × 2 values of γ
        >>> lines = result.to_csv().splitlines()
        >>> len(lines), lines[0].split(",")[:5]
        (5, ['geometry', 'K', 'd', 'gamma_1', 'gamma_2'])
        """
        buffer = io.StringIO()
        write_csv(self, buffer)
        return buffer.getvalue()

    def to_pandas(self):
        """The sweep as a pandas DataFrame: one row per configuration, the columns of
        :meth:`to_csv` in the same order.

        Parameters
        ----------
        None.

        Returns
        -------
        pandas.DataFrame
            Indexed by configuration (``config``, 0 to ``len(self) - 1``, the rows' order);
            text columns (``geometry``, ``regime_k``, ...) as Python strings, absent values
            NaN or "" as in the result.

        Raises
        ------
        ImportError
            When pandas is not installed (``pip install "oodcalc[frames]"``).

        Example
        -------
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))
        >>> df = result.to_pandas()
        >>> df.shape == (len(result), len(result.columns))
        True
        >>> list(df.columns) == list(result.columns)          # to_csv's header
        True
        >>> row = df.loc[1]                                    # γ = (-0.5, 1)
        >>> float(row.gamma_1), float(row.gamma_2), int(row.T1), row.regime_1, row.regime_2
        (-0.5, 1.0, 357, 'forgetting', 'backward-transfer')
        >>> int(df["T2"].max()) == int(result["T2"].max())
        True
        """
        try:
            import pandas as pd
        except ImportError:
            raise _missing("pandas", "to_pandas") from None
        frame = pd.DataFrame({n: c for n, c in self.columns.items()})
        frame.index.name = "config"
        return frame

    def to_xarray(self):
        """The sweep as an xarray Dataset on the grid's axes.

        For one product grid (``shape`` is set) the dimensions are the grid's axes,
        outermost first (``eps, eta[, eta_ft]`` then ``gamma_1 … gamma_K``, ``theta`` or
        ``geometry_index``), with their values as coordinates; every other column is a
        data variable of that shape (``result.grid(name)``). Otherwise (several grids, or
        rows without a product) there is one dimension, ``config``, and every column is a
        data variable along it. Axes of one value (``eps``, ``eta`` by default) stay as
        dimensions of size 1, as in :meth:`grid`; ``ds.squeeze()`` drops them.

        Parameters
        ----------
        None.

        Returns
        -------
        xarray.Dataset
            Data variables: the columns of :meth:`to_csv` that are not axes (text columns
            as strings). Attributes: the sweep's scalar settings (``seed``, ``max_steps``,
            ``engine``, ...).

        Raises
        ------
        ImportError
            When xarray is not installed (``pip install "oodcalc[frames]"``).

        Example
        -------
        >>> import numpy as np
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([np.linspace(-1, 1, 5), np.linspace(-1, 1, 5)]))
        >>> ds = result.to_xarray()
        >>> dict(ds.sizes)
        {'eps': 1, 'eta': 1, 'gamma_1': 5, 'gamma_2': 5}
        >>> ds["gamma_2"].values.tolist()
        [-1.0, -0.5, 0.0, 0.5, 1.0]
        >>> bool((ds["F"].values == result.grid("F")).all())
        True
        >>> str(ds["regime_2"].sel(gamma_1=1.0, gamma_2=-0.5).item())
        'forgetting'
        """
        try:
            import xarray as xr
        except ImportError:
            raise _missing("xarray", "to_xarray") from None
        columns = {n: (c.astype(str) if c.dtype == object else c)
                   for n, c in self.columns.items()}
        axes = self.meta.get("axes")
        attrs = {k: v for k, v in self.meta.items()
                 if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        if self.shape is None or not axes or len(axes) != len(self.shape):
            n = len(self)
            return xr.Dataset({name: ("config", c) for name, c in columns.items()},
                              coords={"config": np.arange(n)}, attrs=attrs)
        shape = self.shape
        coords = {}
        for i, name in enumerate(axes):   # an axis's values along its own dimension
            index = tuple(slice(None) if j == i else 0 for j in range(len(shape)))
            coords[name] = columns[name].reshape(shape)[index]
        data = {name: (tuple(axes), c.reshape(shape)) for name, c in columns.items()
                if name not in coords}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def write(self, path: str | Path, format: str | None = None, *,
              option: str = "output") -> Path:
        """Write atomically (temp file beside ``path``, then rename): CSV or NPZ (from the
        suffix unless ``format`` says); :func:`read_result` reads an NPZ back.

        Example
        -------
        >>> from oodcalc.sweep import gamma_grid, sweep
        >>> result = sweep(gamma_grid([[-0.5, 1.0], [0.5, 1.0]]))       # 2 × 2 values of γ
        >>> import tempfile
        >>> from pathlib import Path
        >>> from oodcalc.sweep import read_result
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     again = read_result(result.write(Path(folder) / "grid.npz"))
        >>> again["T2"].tolist() == result["T2"].tolist(), again.shape
        (True, (1, 1, 2, 2))
        """
        fmt = format or output_format(path)
        if fmt == "csv":
            def write(tmp: Path) -> None:
                with open(tmp, "w", newline="", encoding="utf-8") as f:
                    write_csv(self, f)
        elif fmt == "npz":
            def write(tmp: Path) -> None:
                arrays = {n: (c.astype(str) if c.dtype == object else c)
                          for n, c in self.columns.items()}
                with open(tmp, "wb") as f:
                    np.savez_compressed(f, **arrays,
                                        __meta__=np.array(json.dumps(self.meta)))
        else:
            raise InputError("format", fmt, f"choose one of {', '.join(FORMATS)}")
        return write_atomic(path, write, option=option)


def _missing(module: str, method: str) -> ImportError:
    """The error for an absent optional frame library: which extra provides it."""
    return ImportError(f"SweepResult.{method}() needs {module}, which is not installed; "
                       f'pip install "oodcalc[frames]" (or pip install {module})')


def output_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    return suffix if suffix in FORMATS else "csv"


def _cell(x: Any) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else repr(x)
    if isinstance(x, bool):
        return "true" if x else "false"
    return str(x)


def _text_column(c: np.ndarray) -> list[str]:
    """One column as CSV cells, converted column-wise (what ``_cell`` does per value)."""
    if c.dtype.kind == "f":
        cells = [repr(x) for x in c.tolist()]
        if np.isnan(c).any():
            cells = ["" if x != x else cell for x, cell in zip(c.tolist(), cells)]
        return cells
    if c.dtype.kind == "b":
        return np.where(c, "true", "false").tolist()
    if c.dtype.kind in "iu":
        return [str(x) for x in c.tolist()]
    out = []
    for x in c.tolist():
        out.append(_cell(x))
    return out


def write_csv(result: SweepResult, f) -> None:
    """Header then one row per configuration; floats round-trip exactly; absent → empty.

    Cells are made column by column (one conversion per column, not per cell and type
    test), then joined row by row; text cells that need quoting go through ``csv``."""
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(result.columns)
    columns = [_text_column(c) for c in result.columns.values()]
    quoted = [c.dtype == object for c in result.columns.values()]
    if any(q and any(("," in x or '"' in x or "\n" in x) for x in col)
           for q, col in zip(quoted, columns)):
        writer.writerows(zip(*columns))
        return
    f.write("\n".join(",".join(row) for row in zip(*columns)))
    if columns and columns[0]:
        f.write("\n")


def read_result(path: str | Path) -> SweepResult:
    """Read back an ``.npz`` written by :meth:`SweepResult.write`; anything else (not a
    regular file, not such an ``.npz``) is refused with :class:`InputError`."""
    import zipfile
    expected = "; expected an .npz written by SweepResult.write"
    with open_input(path, "path", expected=expected) as f:   # never a FIFO or a device
        if f.read(4) != b"PK\x03\x04":   # else numpy guesses a pickle and says so
            raise InputError("path", str(path), "not an .npz file (not a zip archive)"
                             + expected)
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as data:
                meta = json.loads(str(data["__meta__"]))
                columns = {n: data[n] for n in data.files if n != "__meta__"}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            reason = shorten(str(err).splitlines()[0] if str(err) else type(err).__name__)
            raise InputError("path", str(path), f"could not read a sweep's result "
                             f"({reason}){expected}") from None
    if not isinstance(meta, dict):
        raise InputError("path", str(path), "its __meta__ is not a JSON object" + expected)
    for n, c in columns.items():
        if c.dtype.kind == "U":
            columns[n] = c.astype(object)
    return SweepResult(columns, meta)


# --- running a sweep --------------------------------------------------------------------

def _pretrain(grid: Grid, max_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The symmetric ray's recurrence once per distinct ``(eps, eta)`` of the grid; per
    row ``z1`` (read-only: a broadcast view when every row shares one pair), ``T1`` and
    whether pretraining converged."""
    from .estimates import pretrain_steps
    unique, row_group = _distinct_pairs(grid.eps, grid.eta)
    rays = [descend_ray(0.0, 0.0, grid.K, eta, eps, max_steps,
                        expected_steps=pretrain_steps(grid.K, eps, eta)) for eps, eta in unique]
    z1 = ray_logits(grid.K, [r.own for r in rays], [r.other for r in rays])
    steps = np.array([r.steps for r in rays], dtype=np.int64)
    ok = np.array([r.converged for r in rays])
    rows = np.broadcast_to(z1[0], (len(row_group),) + z1.shape[1:]) if len(rays) == 1 \
        else z1[row_group]
    return rows, steps[row_group], ok[row_group]


def _distinct_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``(a, b)`` and each row's index into them (no row sort when
    every row is the same, the usual grid: a sort of the rows costs more than a sweep's
    dynamics)."""
    if len(a) and (a == a[0]).all() and (b == b[0]).all():
        return np.array([[a[0], b[0]]]), np.zeros(len(a), dtype=np.int64)
    unique, inverse = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
    return unique, inverse.ravel()


def _local_workers(executor) -> int:
    """Processes of a local pool (each holds its share of rows and an interpreter); 1 for
    any other executor (threads share this process, a cluster's memory is not ours)."""
    pool = sys.modules.get("concurrent.futures.process")   # loaded if such a pool exists
    if pool is not None and isinstance(executor, pool.ProcessPoolExecutor):
        return int(getattr(executor, "_max_workers", 1))
    return 1


def _check_pretraining(grid: Grid, max_steps: int) -> None:
    """Refuse a grid whose slowest pretraining would run more than ``AUTO_STEP_LIMIT``
    steps (to the rule or to ``max_steps``), as ``predict`` refuses it."""
    pairs = _distinct_pairs(grid.eps, grid.eta)[0]
    worst = max((estimates.log_steps_from_margin(grid.K, eps, eta, 0.0), eps, eta)
                for eps, eta in pairs)
    limits.check_sweep_steps(grid.K, worst[0], max_steps, "pretraining",
                             f"eps = {worst[1]:g}, eta = {worst[2]:g}")


def _check_finetuning(grid: Grid, z1: np.ndarray, max_steps: int, eps_ft: float | None,
                      ft_steps: int | None) -> None:
    """The same for fine-tuning, from each row's OOD logits at T1 (its slowest column),
    a block of rows at a time (with ``ft_steps``: those steps)."""
    if ft_steps is not None:
        limits.check_sweep_steps(grid.K, math.log(ft_steps), ft_steps, "fine-tuning",
                                 f"ft_steps = {ft_steps}")
        return
    eps_of_row = grid.eps if eps_ft is None else np.full(len(grid), float(eps_ft))
    pairs, pair_of_row = _distinct_pairs(eps_of_row, grid.eta_ft)
    lowest = np.full(len(pairs), np.inf)               # each pair's lowest column margin
    rows_per_block = max(1, BLOCK // grid.K**2)
    shift = grid.K == 2 and is_diagonal(grid.M)
    for start in range(0, len(grid), rows_per_block):
        rows = slice(start, start + rows_per_block)
        if shift:   # own − other of each OOD column: effective_margins' bits at K = 2
            g, z = np.diagonal(grid.M[rows], axis1=1, axis2=2), z1[rows]
            margins = np.stack([(z[:, k, k] * g[:, k]) * g[:, k]
                                - (z[:, 1 - k, k] * g[:, 1 - k]) * g[:, k] for k in (0, 1)])
        else:
            margins = features_first(estimates.effective_margins(ood_start(z1[rows],
                                                                            grid.M[rows])))
        if len(pairs) == 1:
            lowest[0] = min(lowest[0], margins.min())
        else:
            np.minimum.at(lowest, pair_of_row[rows], margins.min(axis=0))
    worst = max((estimates.log_steps_from_margin(grid.K, eps, eta_ft, float(margin)), eps,
                 eta_ft) for (eps, eta_ft), margin in zip(pairs, lowest))
    limits.check_sweep_steps(grid.K, worst[0], max_steps, "fine-tuning",
                             f"eps = {worst[1]:g}, eta_ft = {worst[2]:g}")


def _compiled_pays(grids: list[Grid], pretrained) -> bool:
    """Whether the whole sweep runs its general (not two-valued) columns through the
    compiled kernel: Numba is installed and the K×K work, estimated as rows × K² × T1,
    pays for loading it. Decided once per sweep, so that every chunk computes a
    configuration the same way (results do not depend on the split)."""
    from .finetune import compiled
    work = sum(len(g) * g.K**2 * float(np.mean(T1)) for g, (T1, _) in zip(grids, pretrained)
               if g.K > 2 and g.geometry != "rotation")
    return work >= compiled.PAYS_FROM_WORK and compiled.column_kernels() is not None


def _compiled_margins_pay(grids: list[Grid], pretrained) -> bool:
    """Whether the sweep's all-margin descents (K = 2, rotations) run as one compiled pass
    (``oodcalc.finetune._kernels.margin_pass``): Numba is installed and either already
    loaded in this process or the margin work, estimated as rows × K × T1, pays for
    loading it. Decided once per sweep, as :func:`_compiled_pays`; the sweep's ``engine``
    says which ran (the two agree on T2 and to rounding on F_k, as the tests check)."""
    from .finetune import compiled
    two_valued = [(g, T1) for g, (T1, _) in zip(grids, pretrained)
                  if g.K == 2 or g.geometry == "rotation"]      # every column a margin
    if not two_valued or not compiled.available():
        return False
    work = sum(len(g) * g.K * float(np.mean(T1)) for g, T1 in two_valued)
    return (compiled.loaded() or work >= compiled.PAYS_FROM_MARGIN_STEPS) \
        and compiled.margin_pass() is not None


def _finetune_eps(eps: np.ndarray, eps_ft: float | None, ft_steps: int | None
                  ) -> np.ndarray:
    """Fine-tuning's stopping level per row: NEVER (fixed steps), ``eps_ft``, or ``eps``."""
    if ft_steps is not None:
        return np.full(len(eps), NEVER)
    return eps if eps_ft is None else np.full(len(eps), float(eps_ft))


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def sweep(grids: Grid | Sequence[Grid], *, max_steps: int = DEFAULT_MAX_STEPS,
          executor: cf.Executor | None = None, chunk_size: int | None = None,
          seed: int = 0, progress: Callable[[int, int], None] | None = None,
          eps_ft: float | None = None, ft_steps: int | None = None,
          interventions: dict[str, Any] | None = None) -> SweepResult:
    """Run every configuration of ``grids`` to the stopping rule, batched and exact.

    Each row is what :func:`oodcalc.predict` computes for one configuration (T1, T2, OOD
    loss, F and every F_k, the theorem's regime per feature), by the same exact dynamics,
    for all rows at once.

    Parameters
    ----------
    grids : Grid or sequence of Grid
        From :func:`gamma_grid`, :func:`theta_grid` or :func:`geometry_grid`; several
        grids are appended (``shape`` is then ``None``).
    max_steps : int, keyword-only, default 1,000,000
        Cap per phase; a row that reaches it is marked ``converged = False``, not fatal.
    executor : concurrent.futures.Executor, keyword-only, optional
        Where the fine-tuning chunks run (``ProcessPoolExecutor``, or
        ``dask.distributed.Client(...).get_executor()``); without one they run here, in
        order. Results are identical whatever the split.
    chunk_size : int, keyword-only, optional
        Rows per task (default: one chunk of up to ``SERIAL_CHUNK`` rows serially, about
        ``EXECUTOR_CHUNKS`` chunks with an executor).
    seed : int, keyword-only, default 0
        Root of the per-chunk ``SeedSequence.spawn``; recorded in every row.
    progress : callable, keyword-only, optional
        ``progress(done, total)``, called as configurations finish fine-tuning.
    eps_ft : float, keyword-only, optional
        Fine-tuning's own ε for every row (default: each row's ``eps``).
    ft_steps : int, keyword-only, optional
        Fine-tune every row exactly this many steps, with no stopping rule (not with
        ``eps_ft``); ``max_steps`` then caps pretraining only.
    interventions : dict, keyword-only, optional
        Fine-tuning interventions for every row, as :class:`~oodcalc.setting.Protocol`'s
        fields: ``{"replay": 0.1}``, ``{"project": "key", "l2": 0.01}``... They run on the
        terms engine (:mod:`oodcalc.finetune`), as in :func:`oodcalc.predict`; each row
        records them, and ``converged_finetune`` says whether its rule on U was reached.
        The paper's regimes and claim 8c's ``D_k`` describe plain fine-tuning: those
        columns are left out.

    Raises
    ------
    InputError
        Before any work, if the rows would not fit the memory cap.
    ComputationError
        Before a phase starts, if its slowest configuration would run more than
        ``limits.AUTO_STEP_LIMIT`` steps (to the stopping rule or to ``max_steps``).

    Returns
    -------
    SweepResult
        One row per configuration (``result["F"]``, ``result.rows()``,
        ``result.grid("F")`` on the product grid, ``result.write("out.csv")``).

    Example
    -------
    >>> import numpy as np
    >>> from oodcalc.sweep import gamma_grid, sweep
    >>> result = sweep(gamma_grid([1.0, np.linspace(-1, 1, 5)]))
    >>> result.grid("F").shape                 # (eps, eta, γ1, γ2)
    (1, 1, 1, 5)
    >>> result["regime_2"].tolist()            # γ1 = 1, γ2 = −1, −0.5, 0, 0.5, 1
    ['unaffected', 'forgetting', 'unaffected', 'backward-transfer', 'backward-transfer']
    """
    grids = [grids] if isinstance(grids, Grid) else list(grids)
    if not grids:
        raise InputError("grids", "nothing", "give at least one grid")
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) \
            or max_steps < 1:
        raise InputError("max_steps", max_steps, "expected an integer >= 1")
    if chunk_size is not None and (isinstance(chunk_size, bool) or chunk_size < 1):
        raise InputError("chunk_size", chunk_size, "expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError("seed", seed, "expected an integer >= 0")
    max_steps, seed = int(max_steps), int(seed)
    rule = Protocol(eps_ft=eps_ft, ft_steps=ft_steps,    # validates the pair, and
                    **_intervention_fields(interventions))   # the interventions
    intervened = rule if rule.interventions else None
    if isinstance(rule.weights, tuple):
        for g in grids:
            if len(rule.weights) != g.K:
                raise InputError(param("weights"), shorten(rule.weights),
                                 f"expected {g.K} weights, one per feature of the K = {g.K} "
                                 "grid")
    ft_cap = rule.finetune_cap if ft_steps is not None else max_steps
    total = sum(len(g) for g in grids)
    by_K: dict[int, int] = {}
    for g in grids:
        by_K[g.K] = by_K.get(g.K, 0) + len(g)
    # Refuse what is out of reach before any work: the rows' memory (a local process pool
    # holds a copy per worker), then pretraining's steps (from K, eps, eta alone).
    limits.check_rows(by_K, _local_workers(executor))
    for g in grids:
        _check_pretraining(g, max_steps)
    if chunk_size is None:
        chunk_size = SERIAL_CHUNK if executor is None else max(1, -(-total // EXECUTOR_CHUNKS))

    # Pretraining (shared per (K, eps, eta)) and the fine-tuning tasks of every grid.
    pretrained, tasks = [], []
    for gi, grid in enumerate(grids):
        z1, T1, ok = _pretrain(grid, max_steps)
        _check_finetuning(grid, z1, max_steps, eps_ft, ft_steps)  # before any row moves
        pretrained.append((T1, ok))
        for start, stop in _chunks(len(grid), chunk_size):
            tasks.append((gi, start, stop, z1))
    seeds = np.random.SeedSequence(seed).spawn(len(tasks))
    fast = _compiled_pays(grids, pretrained)
    fast_margins = intervened is None and _compiled_margins_pay(grids, pretrained)
    chunks = [Chunk(start, stop, grids[gi].M[start:stop], z1[start:stop],
                    _finetune_eps(grids[gi].eps[start:stop], eps_ft, ft_steps),
                    grids[gi].eta_ft[start:stop], ft_cap, s,
                    None if grids[gi].gamma is None or intervened else grids[gi].gamma[start:stop],
                    fast, fast_margins, intervened)
              for (gi, start, stop, z1), s in zip(tasks, seeds)]
    owner = [gi for gi, *_ in tasks]

    parts: list[dict[str, np.ndarray]] = [dict() for _ in grids]
    done = 0

    def collect(index: int, out) -> None:
        start, stop, columns = out
        gi = owner[index]
        if start == 0 and stop == len(grids[gi]):      # the whole grid: its own arrays
            parts[gi] = dict(columns)
            return
        for name, values in columns.items():
            if name not in parts[gi]:
                shape = (len(grids[gi]),) + values.shape[1:]
                parts[gi][name] = np.empty(shape, dtype=values.dtype)
            parts[gi][name][start:stop] = values

    if executor is None:
        def tick(n: int) -> None:
            nonlocal done
            done += n
            progress(done, total)

        for i, chunk in enumerate(chunks):
            collect(i, finetune_chunk(chunk, tick if progress else None))
            if progress:   # rows that did not converge count as done here
                done = sum(len(g) for g in grids[:owner[i]]) + chunk.stop
                progress(done, total)
    else:
        futures = {executor.submit(finetune_chunk, chunk): i for i, chunk in enumerate(chunks)}
        try:
            for future in cf.as_completed(futures):
                i = futures[future]
                collect(i, future.result())
                done += chunks[i].stop - chunks[i].start
                if progress:
                    progress(done, total)
        finally:
            for future in futures:
                future.cancel()

    tables = [_table(grid, T1, ok, part, max_steps, seed, rule.ft_steps,
                     None if eps_ft is None else rule.eps_ft, rule.interventions)
              for grid, (T1, ok), part in zip(grids, pretrained, parts)]
    meta = {"seed": seed, "max_steps": max_steps, "eps_ft": eps_ft, "ft_steps": ft_steps,
            "interventions": rule.interventions,
            "chunks": len(chunks),
            "engine": engine.ENGINE if intervened else
            "; ".join(part for part, used in (
                ("compiled per-column kernel (Numba) for general columns", fast),
                ("compiled margin pass (Numba) for two-valued columns", fast_margins))
                if used) or "NumPy",
            "chunk_size": chunk_size, "rows": total,
            "shape": list(grids[0].shape) if len(grids) == 1 else None,
            "axes": [name for name, _ in grids[0].axes] if len(grids) == 1 else None,
            "grids": [{"K": g.K, "geometry": g.geometry, "rows": len(g),
                       "axes": {n: v.tolist() for n, v in g.axes
                                if n != "geometry_index"}} for g in grids]}
    return SweepResult(_concat(tables), meta)


def _intervention_fields(interventions: Any) -> dict[str, Any]:
    if interventions is None:
        return {}
    if not isinstance(interventions, dict) or not set(interventions) <= set(INTERVENTIONS):
        raise InputError("interventions", shorten(interventions), "expected a dict of "
                         f"Protocol fields among {', '.join(INTERVENTIONS)}")
    return dict(interventions)


def _table(grid: Grid, T1, pre_ok, part, max_steps: int, seed: int,
           ft_steps: int | None, eps_ft: float | None,
           interventions: dict[str, Any]) -> dict[str, np.ndarray]:
    B, K = len(grid), grid.K
    cols: dict[str, np.ndarray] = {
        "geometry": np.full(B, None, dtype=object),   # filled below: one str for all
        "K": np.full(B, K, dtype=np.int64),
        "d": grid.d.astype(np.int64),
    }
    cols["geometry"].fill(grid.geometry)
    if grid.gamma is not None:
        cols |= {f"gamma_{k + 1}": grid.gamma[:, k] for k in range(K)}
    cols |= dict(grid.params)
    cols |= {"eps": grid.eps, "eta": grid.eta, "eta_ft": grid.eta_ft,
             "max_steps": np.full(B, max_steps, dtype=np.int64)}
    if ft_steps is not None:
        cols["ft_steps"] = np.full(B, ft_steps, dtype=np.int64)
    else:   # fine-tuning's ε: each row's eps unless eps_ft was given
        cols["eps_ft"] = grid.eps if eps_ft is None else np.full(B, eps_ft)
    for name, value in interventions.items():     # each row names its fine-tuning
        text = value if isinstance(value, str) else \
            ",".join(f"{c:g}" for c in value) if isinstance(value, list) else None
        cols[name] = np.full(B, text, dtype=object) if text is not None else np.full(B, value)
    cols |= {
             "seed": np.full(B, seed, dtype=np.int64),
             "T1": T1, "T2": part["T2"],
             "converged": pre_ok & part["converged_finetune"],
             "converged_pretrain": pre_ok,
             "converged_finetune": part["converged_finetune"],
             "ood_loss": part["ood_loss"],
             "F": feature_sum(part["F_k"])}
    cols |= {f"F_{k + 1}": part["F_k"][:, k] for k in range(K)}
    cols |= {f"first_step_{k + 1}": part["first_step_k"][:, k] for k in range(K)}
    cols |= {f"initial_direction_{k + 1}": part["initial_direction_k"][:, k]
             for k in range(K)}
    if grid.gamma is not None and not interventions:
        r = regimes(grid.gamma)
        cols |= {f"regime_{k + 1}": r[:, k] for k in range(K)}
        if K > 2:   # (at K = 2 the corrected threshold (K − 1)·γ_k² is the paper's)
            r = theory.regime_names(grid.gamma, corrected=True)
        cols |= {f"corrected_regime_{k + 1}": r[:, k] for k in range(K)}
        cols |= {f"D_{k + 1}": part["D_k"][:, k] for k in range(K)}
        cols |= {f"D_direction_{k + 1}": part["D_direction_k"][:, k] for k in range(K)}
    return cols


_ORDER = ("geometry", "K", "d", "gamma_", "theta", "geometry_index", "eps", "eta",
          "eta_ft", "max_steps", "eps_ft", "ft_steps", "replay", "l2", "project", "weights",
          "seed", "T1", "T2", "converged", "converged_pretrain",
          "converged_finetune", "ood_loss", "F", "F_", "first_step_", "initial_direction_",
          "regime_", "corrected_regime_", "D_", "D_direction_")


def _rank(name: str) -> tuple[int, int]:
    for i, key in enumerate(_ORDER):
        if key.endswith("_") and name.startswith(key) and name[len(key):].isdigit():
            return i, int(name[len(key):])
        if name == key:
            return i, 0
    return len(_ORDER), 0


def _concat(tables: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack tables row-wise; columns a table lacks are NaN (numbers) or "" (text)."""
    names = sorted({n for t in tables for n in t}, key=_rank)
    out = {}
    for name in names:
        pieces = []
        kind = next(t[name] for t in tables if name in t)
        for t in tables:
            n = len(t["K"])
            if name in t:
                pieces.append(t[name])
            elif kind.dtype == object:
                pieces.append(np.full(n, "", dtype=object))
            else:
                pieces.append(np.full(n, np.nan))
        out[name] = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
    return out
