"""Numba kernels for the K×K fine-tuning (imported only through :mod:`oodcalc.finetune.compiled`,
which checks that Numba is installed).

Every OOD column descends on its own (the loss is ``Σ_k e_k / K`` and ``e_k`` sees column
``k`` alone). Three kernels use it:

* :func:`finetune_diagonal` (``predict``, parallel shifts): each column, with its source
  column, advances through a block of steps while it sits in the L1 cache, one column per
  thread at a time, and reports per step whether it is above ε; the caller applies the
  stopping rule (every column below ε at the same step) to those flags. From K = 48 it
  takes each column's K − 1 other logits through a few nodes (:func:`finetune_diagonal_nodes`,
  K·(m + 1) work a step instead of K²; the section below says why that is exact to
  rounding), else every logit (:func:`finetune_diagonal_direct`);
* :func:`columns_advance` (sweeps, many short columns): one step of every distinct
  column per call, vectorised across columns;
* :func:`margin_pass` (sweeps whose columns are all margins: K = 2, rotations): the whole
  descent of every distinct margin in one call, vectorised across margins.

A column's arithmetic depends neither on the thread count nor on the other columns:
results are the same however the work is split. It is the NumPy path's
(``oodcalc.finetune.dynamics._Batch``) with two differences, both at the rounding level: ``exp``
is :func:`exp_neg` below, which LLVM vectorises (this Numba has no vectorised exp: its
llvmlite is not built with Intel's SVML, so ``pip install icc-rt`` changes nothing, and
``math.exp`` calls the C library once per value, several times slower); and the errors
use the accurate split ``1 − p_k = Σ_(n≠k) w_n / Σ w`` (no cancellation when the own
attention is near 1). The margin pass is ``dynamics._Margins``'s arithmetic, operation for
operation, but for ``exp``. The tests check T1/T2 identical to the NumPy path and F_k to
1e-12 on random cases.
"""

from __future__ import annotations

import math

import numpy as np
# numba first: without the [fast] extra the import fails naming numba (the optional
# dependency callers test for), not llvmlite, which numba brings
from numba import njit, prange, types
from numba.extending import intrinsic
from llvmlite import ir

# exp by Cody–Waite reduction x = k·ln2 + r, |r| <= ln2/2, and the Taylor polynomial of
# degree 13 (truncation < 1e-17 relative): within 1 ulp of the correctly rounded value.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01      # ln 2 split so that k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_C = [1.0 / math.factorial(i) for i in range(14)]
_C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13 = _C[2:]
#: Below this exp(x) is under 1e-307 of the column's largest weight: it counts as 0.
_EXP_FLOOR = -708.0

#: Reductions may be reordered (vectorised sums); the exp's own operations may not
#: (only fused multiply-adds are allowed there).
_SUMS = {"reassoc", "contract"}


@intrinsic
def _bits_to_float(typingctx, bits):
    """Reinterpret an int64 as a float64 (how 2^k is built from its exponent bits)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _float_to_bits(typingctx, x):
    """Reinterpret a float64 as an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


# k as an integer without a float → int64 conversion (AVX2 has none for packed doubles, so
# one would unvectorise the loop): for an integral k with |k| < 2^51 the low bits of
# k + 1.5·2^52 hold k, and adding _EXP_BIAS to them gives k + 1023, the exponent of 2^k.
_SHIFTER = 6755399441055744.0
_EXP_BIAS = 1023 - int(np.float64(_SHIFTER).view(np.int64))


@njit(fastmath={"contract"}, cache=True)
def exp_neg(x: float) -> float:
    """``exp(x)`` for ``x <= 0`` (softmax weights after subtracting the max)."""
    if x < _EXP_FLOOR:
        x = _EXP_FLOOR
    k = np.floor(x * _LOG2E + 0.5)           # a float (math.floor gives an int64)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _C13
    p = p * r + _C12
    p = p * r + _C11
    p = p * r + _C10
    p = p * r + _C9
    p = p * r + _C8
    p = p * r + _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + 1.0
    p = p * r + 1.0
    return p * _bits_to_float((_float_to_bits(k + _SHIFTER) + _EXP_BIAS) << 52)


@njit(cache=True)
def _max(x: np.ndarray) -> float:
    """``max(x)`` with eight running maxima (LLVM does not vectorise a max reduction)."""
    K = x.shape[0]
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = x[0]
    n = 0
    while n + 8 <= K:
        m0 = x[n] if x[n] > m0 else m0
        m1 = x[n + 1] if x[n + 1] > m1 else m1
        m2 = x[n + 2] if x[n + 2] > m2 else m2
        m3 = x[n + 3] if x[n + 3] > m3 else m3
        m4 = x[n + 4] if x[n + 4] > m4 else m4
        m5 = x[n + 5] if x[n + 5] > m5 else m5
        m6 = x[n + 6] if x[n + 6] > m6 else m6
        m7 = x[n + 7] if x[n + 7] > m7 else m7
        n += 8
    while n < K:
        m0 = x[n] if x[n] > m0 else m0
        n += 1
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return m4 if m4 > m0 else m0


@njit(fastmath=_SUMS, cache=True)
def _weights(x: np.ndarray, own: int, w: np.ndarray) -> tuple:
    """``w = exp(x − max x)``; returns ``(w_own, Σ_(n≠own) w, Σ_(n≠own) w²)``."""
    K = x.shape[0]
    top = _max(x)
    rest = 0.0
    squares = 0.0
    for n in range(K):
        v = exp_neg(x[n] - top)
        w[n] = v
        other = v if n != own else 0.0
        rest += other
        squares += other * other
    return w[own], rest, squares


@njit(cache=True)
def _column_state(w_own: float, rest: float, squares: float) -> tuple:
    """From the weights' sums: own attention ``p``, ``1 − p``, ``e`` and ``S = Σ a r``."""
    total = w_own + rest
    p = w_own / total
    gap = rest / total                                       # 1 − p, without cancellation
    sq = squares / (total * total)                           # Σ_(n≠own) a_n²
    e = 0.5 * (gap * gap + sq)
    S = sq - p * gap                                         # Σ_n a_n (a_n − δ_n,own)
    return p, gap, e, S, total


@njit(cache=True)
def _record_trend(loss: float, t: int, c: int, loss_first: np.ndarray, loss_prev: np.ndarray,
                  rises: np.ndarray, falls: np.ndarray, tol: float) -> None:
    """Column ``c``'s source loss at step ``t``: the first kept, a move beyond ``tol`` marked
    as a rise or a fall (the trend of L_{v_c})."""
    if t == 0:
        loss_first[c] = loss
    else:
        change = loss - loss_prev[c]
        if change > tol:
            rises[c] = True
        elif change < -tol:
            falls[c] = True
    loss_prev[c] = loss


@njit(cache=True)
def _step(x: np.ndarray, own: int, w: np.ndarray, total: float, p: float, gap: float,
          S: float, rate: float) -> None:
    """``x ← x − η/K · a (r − S)``: others ``a_n (a_n − S)``, own ``−p (1 − p + S)``."""
    K = x.shape[0]
    own_value = x[own]
    inverse = 1.0 / total
    for n in range(K):
        a = w[n] * inverse
        x[n] -= ((a - S) * a) * rate
    x[own] = own_value + ((gap + S) * p) * rate


@njit(parallel=True, nogil=True, cache=True)
def finetune_diagonal_direct(X: np.ndarray, X0: np.ndarray, Z1: np.ndarray, gamma: np.ndarray,
                      rate: float, eps: float, t0: int, n_steps: int, update_last: bool,
                      above: np.ndarray, loss_first: np.ndarray, loss_prev: np.ndarray,
                      rises: np.ndarray, falls: np.ndarray, tol: float,
                      snap: np.ndarray, snap_first: int, snap_stride: int) -> None:
    """Steps ``t0 .. t0 + n_steps − 1`` of fine-tuning for every OOD column, parallel shift
    ``M = diag(γ)``.

    ``X[c]``: OOD column ``c`` (its own logit at index ``c``), updated in place;
    ``X0``, ``Z1``: the OOD and source columns at T1. Step ``t`` evaluates column ``c``
    (``above[t − t0, c] = e_c > ε``), follows its source loss ``L_(v_c)`` (source column
    ``Z1[c] + γ_n (x − X0[c]) γ_c``, claim 7): ``loss_first`` at t = 0, then rises/falls by
    more than ``tol`` against ``loss_prev``; copies the column into
    ``snap[(t − snap_first) / snap_stride, c]`` at those steps; then updates the column
    unless it is the block's last step and ``update_last`` is false.
    """
    C, K = X.shape
    for c in prange(C):
        x, x0, z1 = X[c], X0[c], Z1[c]
        gk = gamma[c]
        w = np.empty(K)
        y = np.empty(K)
        ws = np.empty(K)
        for i in range(n_steps):
            t = t0 + i
            if t >= snap_first and (t - snap_first) % snap_stride == 0:
                snap[(t - snap_first) // snap_stride, c, :] = x
            p, gap, e, S, total = _column_state(*_weights(x, c, w))
            above[i, c] = e > eps
            for n in range(K):                               # the source column (claim 7)
                y[n] = z1[n] + (gamma[n] * (x[n] - x0[n])) * gk
            loss = _column_state(*_weights(y, c, ws))[2] / K
            _record_trend(loss, t, c, loss_first, loss_prev, rises, falls, tol)
            if i < n_steps - 1 or update_last:
                _step(x, c, w, total, p, gap, S, rate)


# --- parallel shifts at large K: each column's K − 1 other logits through a few nodes ----
#
# The gradient of logit n ≠ c of column c is a_n (a_n − S): it depends on x_n and on the
# column's sums alone. So every other logit follows one scalar map of its start,
# x_n(t) = f_t(x_n(0)), and at the start (the pretrained ray, M = diag(γ)) x_n(0) =
# γ_c b γ_n and z1_n = b: each other logit and source logit is a function of γ_n, smooth
# (f_t is entire) and on an interval of width O(α/K). The column needs of its others only
# Σ_n exp(x_n), Σ_n exp(x_n)² and the same of the source logits: sums of smooth functions of
# γ_n, which the interpolating quadrature Σ_j W_j h(s_j) gives within the bound below
# (W_j = Σ_n ℓ_j(γ_n), ℓ_j the Lagrange basis on the nodes s_j). The nodes are actual
# other features of the column (distinct γ values nearest to Chebyshev points, both ends
# included, so the max is a node): their logits follow the per-logit arithmetic, and the
# column's state between calls is X at its nodes and own row; the other entries are
# interpolated from them when written (block ends, snapshots). Work per step: (m + 1)·K
# instead of K².

#: Nodes per column (Chebyshev points of the second kind, snapped to the column's γ
#: values): the fewest from ``MIN_NODES`` whose interpolation error bound for the column's
#: weights, ``2 (ρ/2)^m / m!`` relative (ρ: the half-range of the other logits' starts
#: plus the others' scale |z1 off-diagonal|, the room they move in), is below ``NODE_BOUND``;
#: the measured error is about 1 % of the bound (K = 64, 256: m = 4 gives X within 2e-8 and
#: 8e-11 of the direct kernel, m = 6, 8 within rounding). At most ``MAX_NODES``, else direct.
MIN_NODES, MAX_NODES, NODE_BOUND = 6, 16, 1e-13
#: Below this K the direct kernel runs (the nodes would save little).
NODES_FROM_K = 48


def node_count(X0: np.ndarray, Z1: np.ndarray) -> int:
    """How many nodes the columns need (:data:`NODE_BOUND`); ``MAX_NODES + 1`` when more
    than ``MAX_NODES``."""
    K = X0.shape[0]
    others = ~np.eye(K, dtype=bool)
    start = np.where(others, X0, np.nan)
    rho = (0.5 * (np.nanmax(start, axis=1) - np.nanmin(start, axis=1))
           + np.nanmax(np.where(others, np.abs(Z1), np.nan), axis=1)).max()
    m = MIN_NODES
    while m <= MAX_NODES and 2 * (rho / 2) ** m / math.factorial(m) > NODE_BOUND:
        m += 1
    return m


def node_plan(gamma: np.ndarray, nodes: int) -> tuple:
    """For each column ``c``: its node indices ``(C, m)`` (other features, distinct γ),
    the quadrature weights ``(C, m)`` and the interpolation matrix ``(C, K, m)`` (row n:
    the Lagrange basis at γ_n; a unit row where γ_n is a node's γ, zero on row c). A column
    with at most ``nodes`` distinct other γ values takes them all (the weights are then
    their counts: the sum is exact)."""
    gamma = np.asarray(gamma, dtype=np.float64)
    K = gamma.size
    m = min(nodes, K - 1)
    index = np.zeros((K, m), dtype=np.int64)
    weights = np.zeros((K, m))
    interp = np.zeros((K, K, m))
    for c in range(K):
        others = np.delete(np.arange(K), c)
        values, first = np.unique(gamma[others], return_index=True)
        if values.size <= m:
            pick = np.arange(values.size)
        else:
            lo, hi = values[0], values[-1]
            cheb = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * np.arange(m) / (m - 1))
            right = np.clip(np.searchsorted(values, cheb), 1, values.size - 1)
            left = right - 1
            pick = np.unique(np.where(cheb - values[left] <= values[right] - cheb, left, right))
        s = values[pick]
        n_nodes = s.size
        index[c, :n_nodes] = others[first[pick]]
        index[c, n_nodes:] = index[c, 0]                      # padding: weight 0
        # Barycentric weights on the nodes scaled to [−1, 1] (no under/overflow).
        half = 0.5 * (s[-1] - s[0]) if n_nodes > 1 else 1.0
        u = (s - 0.5 * (s[-1] + s[0])) / half
        diff = u[:, None] - u[None, :]
        np.fill_diagonal(diff, 1.0)
        lam = 1.0 / diff.prod(axis=1)
        d = (gamma[others, None] - 0.5 * (s[-1] + s[0])) / half - u[None, :]
        hit = gamma[others, None] == s[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = lam / d
            rows = t / t.sum(axis=1, keepdims=True)
        exact = hit.any(axis=1)
        rows[exact] = hit[exact]
        interp[c, others, :n_nodes] = rows
        weights[c, :n_nodes] = rows.sum(axis=0)
    return index, weights, interp


#: Columns per tile of the node kernel: a column per SIMD lane, the loops over a tile's
#: lanes vectorise (a column's arithmetic is the same in any lane, whatever its neighbours).
LANES = 32


@njit(cache=True)
def _tile_weights(x: np.ndarray, own: np.ndarray, W: np.ndarray, w: np.ndarray,
                  top: np.ndarray, rest: np.ndarray, squares: np.ndarray,
                  w_own: np.ndarray) -> None:
    """Per lane l: nodes' ``w = exp(x − top)``, ``top`` the largest of ``own`` and the
    nodes (the largest other logit is a node: the ends of the γ range are nodes); the
    column's sums over its other logits ``Σ_j W_j w_j``, ``Σ_j W_j w_j²``, and ``w_own``."""
    m, L = x.shape
    for l in range(L):
        top[l] = own[l]
        rest[l] = 0.0
        squares[l] = 0.0
    for j in range(m):
        for l in range(L):
            v = x[j, l]
            top[l] = v if v > top[l] else top[l]
    for j in range(m):
        for l in range(L):
            v = exp_neg(x[j, l] - top[l])
            w[j, l] = v
            rest[l] += W[j, l] * v
            squares[l] += W[j, l] * (v * v)
    for l in range(L):
        w_own[l] = exp_neg(own[l] - top[l])


@njit(cache=True)
def _lane_state(w_own: float, rest: float, squares: float) -> tuple:
    """:func:`_column_state` with one division: ``(p, 1 − p, e, S, 1 / Σ w)``."""
    inverse = 1.0 / (w_own + rest)
    p = w_own * inverse
    gap = rest * inverse                                     # 1 − p, without cancellation
    sq = squares * (inverse * inverse)
    return p, gap, 0.5 * (gap * gap + sq), sq - p * gap, inverse


@njit(cache=True)
def _expand(x: np.ndarray, l: int, own: float, c: int, L: np.ndarray, out: np.ndarray) -> None:
    """``out[n] = Σ_j L[n, j] x[j, l]`` (n ≠ c: exactly a node's value where γ_n is its γ),
    ``out[c] = own``."""
    K, m = L.shape
    for n in range(K):
        v = 0.0
        for j in range(m):
            v += L[n, j] * x[j, l]
        out[n] = v
    out[c] = own


@njit(parallel=True, nogil=True, cache=True)
def finetune_diagonal_nodes(X: np.ndarray, X0: np.ndarray, Z1: np.ndarray, gamma: np.ndarray,
                            index: np.ndarray, weights: np.ndarray, interp: np.ndarray,
                            rate: float, eps: float, t0: int, n_steps: int,
                            update_last: bool, above: np.ndarray, loss_first: np.ndarray,
                            loss_prev: np.ndarray, rises: np.ndarray, falls: np.ndarray,
                            tol: float, snap: np.ndarray, snap_first: int,
                            snap_stride: int) -> None:
    """:func:`finetune_diagonal_direct` through each column's nodes (:func:`node_plan`):
    the same steps, flags, trend and snapshots; reads X at the nodes and own rows, writes
    every entry. Columns go in tiles of ``LANES`` (the last tile's spare lanes repeat its
    last column and write nothing)."""
    C, K = X.shape
    m = index.shape[1]
    L = LANES
    for tile in prange((C + L - 1) // L):
        cols = np.empty(L, dtype=np.int64)
        for l in range(L):
            cols[l] = min(tile * L + l, C - 1)
        x, x0, z1 = np.empty((m, L)), np.empty((m, L)), np.empty((m, L))
        g, W = np.empty((m, L)), np.empty((m, L))
        own, own0, z1own, gk = np.empty(L), np.empty(L), np.empty(L), np.empty(L)
        for l in range(L):
            c = cols[l]
            for j in range(m):
                n = index[c, j]
                x[j, l], x0[j, l], z1[j, l] = X[c, n], X0[c, n], Z1[c, n]
                g[j, l], W[j, l] = gamma[n], weights[c, j]
            own[l], own0[l], z1own[l], gk[l] = X[c, c], X0[c, c], Z1[c, c], gamma[c]
        w, y, ws = np.empty((m, L)), np.empty((m, L)), np.empty((m, L))
        sums = np.empty((8, L))                 # top, rest, squares, w_own: OOD, source
        y_own, p, gap, S, inverse = np.empty(L), np.empty(L), np.empty(L), np.empty(L), \
            np.empty(L)
        for i in range(n_steps):
            t = t0 + i
            if t >= snap_first and (t - snap_first) % snap_stride == 0:
                for l in range(L):
                    if tile * L + l < C:
                        _expand(x, l, own[l], cols[l], interp[cols[l]],
                                snap[(t - snap_first) // snap_stride, cols[l], :])
            _tile_weights(x, own, W, w, sums[0], sums[1], sums[2], sums[3])
            for j in range(m):                           # the source column (claim 7)
                for l in range(L):
                    y[j, l] = z1[j, l] + (g[j, l] * (x[j, l] - x0[j, l])) * gk[l]
            for l in range(L):
                y_own[l] = z1own[l] + (gk[l] * (own[l] - own0[l])) * gk[l]
            _tile_weights(y, y_own, W, ws, sums[4], sums[5], sums[6], sums[7])
            for l in range(L):
                p_l, gap_l, e, S_l, inverse_l = _lane_state(sums[3, l], sums[1, l],
                                                            sums[2, l])
                p[l], gap[l], S[l], inverse[l] = p_l, gap_l, S_l, inverse_l
                if tile * L + l >= C:
                    continue
                c = cols[l]
                above[i, c] = e > eps
                loss = _lane_state(sums[7, l], sums[5, l], sums[6, l])[2] / K
                _record_trend(loss, t, c, loss_first, loss_prev, rises, falls, tol)
            if i < n_steps - 1 or update_last:
                for j in range(m):
                    for l in range(L):
                        a = w[j, l] * inverse[l]
                        x[j, l] -= ((a - S[l]) * a) * rate
                for l in range(L):
                    own[l] = own[l] + ((gap[l] + S[l]) * p[l]) * rate
        for l in range(L):
            if tile * L + l < C:
                _expand(x, l, own[l], cols[l], interp[cols[l]], X[cols[l]])


_plans: dict = {}


def _plan(X0: np.ndarray, Z1: np.ndarray, gamma: np.ndarray):
    """:func:`node_plan` for this run (kept for the run's next calls), or None where the
    nodes do not apply: small K, or other logits that are not a function of γ_n at the
    start (interpolating X0 and Z1 from the nodes must give them back to rounding)."""
    K = gamma.size
    if K < NODES_FROM_K:
        return None
    key = (gamma.tobytes(), X0.tobytes(), Z1.tobytes())
    if key not in _plans:
        _plans.clear()
        m = node_count(X0, Z1)
        plan = node_plan(gamma, m) if m <= MAX_NODES else None
        for start in (X0, Z1) if plan is not None else ():
            index, _, interp = plan
            values = np.take_along_axis(start, index, axis=1)       # (C, m) at the nodes
            back = np.einsum("cnj,cj->cn", interp, values)
            back[np.arange(K), np.arange(K)] = np.diag(start)
            scale = 1.0 + np.abs(start).max()
            if not np.abs(back - start).max() <= 1e-13 * scale:
                plan = None
                break
        _plans[key] = plan
    return _plans[key]


def finetune_diagonal(X, X0, Z1, gamma, rate, eps, t0, n_steps, update_last, above,
                      loss_first, loss_prev, rises, falls, tol, snap, snap_first,
                      snap_stride) -> None:
    """Steps ``t0 .. t0 + n_steps − 1`` of fine-tuning for every OOD column, parallel shift
    ``M = diag(γ)`` (arguments and effects: :func:`finetune_diagonal_direct`): through
    each column's nodes from K = ``NODES_FROM_K`` on, else directly."""
    plan = _plan(X0, Z1, gamma)
    if plan is None:
        finetune_diagonal_direct(X, X0, Z1, gamma, rate, eps, t0, n_steps, update_last,
                                 above, loss_first, loss_prev, rises, falls, tol, snap,
                                 snap_first, snap_stride)
    else:
        finetune_diagonal_nodes(X, X0, Z1, gamma, *plan, rate, eps, t0, n_steps,
                                update_last, above, loss_first, loss_prev, rises, falls,
                                tol, snap, snap_first, snap_stride)


# --- distinct columns of a sweep (no source view): one step and the evaluation after it
# per call, behind the engine interface of oodcalc.finetune.dynamics._Columns. Sweeps have many
# short columns (K = 8: eight logits), so these loops run across columns, in tiles of
# ``L`` columns held as C-contiguous ``(K, L)`` blocks (``X[tile, n, j]``: logit n of
# column tile·L + j), which LLVM vectorises and which stay in cache; each column's
# arithmetic is the same in a SIMD lane as alone, whatever else is in the batch. ---------

@njit(nogil=True, cache=True)
def _columns_tile(X, own, rate, eps, W, state, below, step_first, top, rest,
                  squares) -> None:
    K, L = X.shape
    if step_first:                                     # x ← x − η/K · a (r − S)
        for n in range(K):
            for j in range(L):
                a = W[n, j] / state[3, j]
                X[n, j] -= ((a - state[2, j]) * a) * rate[j]
        for j in range(L):                             # own: −p (1 − p + S)
            X[own[j], j] = state[4, j] + ((state[1, j] + state[2, j]) * state[0, j]) * rate[j]
    for j in range(L):
        top[j] = X[0, j]
        rest[j] = 0.0
        squares[j] = 0.0
    for n in range(1, K):
        for j in range(L):
            v = X[n, j]
            top[j] = v if v > top[j] else top[j]
    for n in range(K):
        for j in range(L):
            v = exp_neg(X[n, j] - top[j])
            W[n, j] = v
            other = v if n != own[j] else 0.0
            rest[j] += other
            squares[j] += other * other
    for j in range(L):
        k = own[j]
        p, gap, e, S, total = _column_state(W[k, j], rest[j], squares[j])
        state[0, j], state[1, j], state[2, j], state[3, j] = p, gap, S, total
        state[4, j] = X[k, j]
        below[j] = e <= eps[j]


def _columns_advance(X: np.ndarray, own: np.ndarray, rate: np.ndarray, eps: np.ndarray,
                     W: np.ndarray, state: np.ndarray, below: np.ndarray,
                     step_first: bool) -> None:
    """For each column (own logit at row ``own``): first, if ``step_first``, one GD step
    from the weights ``W`` and ``state`` left by the last call; then its weights into
    ``W``, ``state = (p, 1 − p, S, Σ w, own logit)`` and whether ``e <= eps``. Tiled:
    ``X``, ``W`` ``(T, K, L)``; ``own``, ``rate``, ``eps``, ``below`` ``(T, L)``; ``state``
    ``(T, 5, L)``."""
    T, L = own.shape
    for t in prange(T):
        scratch = np.empty((3, L))
        _columns_tile(X[t], own[t], rate[t], eps[t], W[t], state[t], below[t], step_first,
                      scratch[0], scratch[1], scratch[2])


#: One thread (a call is a single step: synchronising threads every step costs more than
#: it saves unless the step is large) and all threads; the same arithmetic per column.
columns_advance = njit(nogil=True, cache=True)(_columns_advance)
columns_advance_parallel = njit(parallel=True, nogil=True, cache=True)(_columns_advance)


# --- two-valued columns of a sweep as margins, the whole descent in one call ------------
#
# Distinct margins sorted ascending step in lockstep (one vectorised loop per step, exp
# by exp_neg). Margins only grow and the step map is increasing, so a larger margin hits
# ε no later than a smaller one: the margins still above ε are a prefix of the sorted
# order and those that hit at a step are the top of that prefix, found by scanning down
# from its end. The loop counts every margin of the prefix that is below ε and every
# margin past it that is above. If the scan's count differs (rounding broke the order:
# two margins an ulp apart can cross) the prefix is partitioned, its order kept, so the
# order is a speed-up, never an assumption; if a margin went back above ε (a margin that
# stands still at ε), the pass stops and says so, and the caller runs the NumPy engine,
# which follows every change either way.

@njit(nogil=True, cache=True, error_model="numpy")   # (no zero-division branch: SIMD)
def _margins_step(wa, wb, below, n, f, rate, eps, half, m):
    """Evaluate positions ``0..n−1`` at this step (``below``) and write the next step's
    ``w`` into ``wb``; returns (below ε among ``0..f−1``, above ε among ``f..n−1``).
    The arithmetic of ``oodcalc.finetune.dynamics._Margins`` (``exp`` by exp_neg)."""
    hits = 0
    for i in range(f):
        w = wa[i]
        u = exp_neg(min(w, 600.0)) * m
        p = 1.0 / (u + 1.0)
        r = u * p
        r2 = r * r
        b = r2 * half <= eps
        below[i] = b
        hits += b
        wb[i] = w - (p * r2) * rate
    back = 0
    for i in range(f, n):
        w = wa[i]
        u = exp_neg(min(w, 600.0)) * m
        p = 1.0 / (u + 1.0)
        r = u * p
        r2 = r * r
        back += r2 * half > eps
        wb[i] = w - (p * r2) * rate
    return hits, back


@njit(nogil=True, cache=True)
def margin_pass(w0, rate, eps, half, m, slots, by_col, pair_cfg, max_steps,
                steps, converged, final):
    """Every configuration's descent on its margins, to the stopping rule or ``max_steps``.

    ``w0``: the distinct negated margins, margins ascending (``−w0`` sorted); ``slots[b]``:
    configuration ``b``'s distinct margins (one per column); ``pair_cfg[by_col[c]:
    by_col[c+1]]``: the configurations that use margin ``c`` (with multiplicity). Writes
    ``steps``, ``converged`` and ``final[b, k]`` (the margin of column ``k`` at ``b``'s
    stop). ``w0`` need not be sorted: out of order only costs time. Returns the steps
    taken, or −1 − t if a margin went back above ε at step ``t`` (then nothing written
    is to be used).
    """
    U = w0.size
    B, K = slots.shape
    wa = w0.copy()
    wb = np.empty(U)
    below = np.empty(U, dtype=np.bool_)
    ha, hb, hc = np.empty(U), np.empty(U), np.empty(U, dtype=np.int64)
    act = np.arange(U)                # position → distinct margin
    pos = np.arange(U)                # distinct margin → position (−1: retired)
    uses = np.zeros(U, dtype=np.int64)
    for b in range(B):
        for k in range(K):
            uses[slots[b, k]] += 1
    remaining = np.full(B, K, dtype=np.int64)
    live, n, f, retired = B, U, U, 0
    t = 0
    while True:
        hits, back = _margins_step(wa, wb, below, n, f, rate, eps, half, m)
        if back:
            return -1 - t
        j = f
        while j > 0 and below[j - 1]:
            j -= 1
        if f - j != hits:                              # out of order: partition the
            j = 0                                      # prefix, keeping its order
            held = 0
            for i in range(f):
                if below[i]:
                    ha[held], hb[held], hc[held] = wa[i], wb[i], act[i]
                    held += 1
                else:
                    wa[j], wb[j], act[j] = wa[i], wb[i], act[i]
                    pos[act[j]] = j
                    j += 1
            for i in range(held):
                wa[j + i], wb[j + i], act[j + i] = ha[i], hb[i], hc[i]
                pos[hc[i]] = j + i
        for i in range(j, f):                          # the margins that hit at step t
            c = act[i]
            for e in range(by_col[c], by_col[c + 1]):
                b = pair_cfg[e]
                remaining[b] -= 1
                if remaining[b] == 0:                  # its last column: b stops at t
                    steps[b] = t
                    converged[b] = True
                    live -= 1
                    for k in range(K):
                        c2 = slots[b, k]
                        final[b, k] = -wa[pos[c2]]
                        uses[c2] -= 1
                        if uses[c2] == 0:
                            retired += 1
        f = j
        if live == 0:
            return t
        if t == max_steps:
            for b in range(B):
                if remaining[b] > 0:
                    steps[b] = t
                    converged[b] = False
                    for k in range(K):
                        final[b, k] = -wa[pos[slots[b, k]]]
            return t
        wa, wb = wb, wa
        t += 1
        if 32 * retired >= n:                            # compact: drop retired margins
            keep = f                                   # (all hit: past the prefix)
            for i in range(f, n):
                c = act[i]
                if uses[c] > 0:
                    wa[keep] = wa[i]
                    act[keep] = c
                    pos[c] = keep
                    keep += 1
                else:
                    pos[c] = -1
            n, retired = keep, 0
