"""Exact population gradient descent, batched, in the K×K logit coordinates.

Why this is exact: the gradient of the population loss with respect to ``Q`` is
``Σ_{n,k} ∂L/∂z[n,k] · f_n f_kᵀ``, so from ``Q = 0`` every iterate stays
``Q = F Z Fᵀ`` and GD on ``Q`` with step ``η`` is GD on ``Z`` with step ``η``
(orthonormal features). Fine-tuning on ``U`` from ``Q^(T1) = V Z1 Vᵀ`` adds
``U W Uᵀ``, so the OOD logits are ``MᵀZ1M + W`` and the source logits
``Z1 + M W Mᵀ`` (``M = VᵀU``): any orthonormal V and U, any d.

Arrays are stacks ``(B, K, K)``; each configuration stops on its own at the first step
where every ``e_k <= ε`` (the stopping rule, docs/theory.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import ComputationError


@dataclass(frozen=True)
class Descent:
    """Where a batch of descents ended.

    ``z``: final logits ``(B, K, K)``; ``steps``: the stopping step of each configuration
    (``max_steps`` where it did not converge); ``converged``: ``(B,)`` booleans;
    ``trajectory``: ``(T+1, B, K, K)`` when recorded, configurations that stopped earlier
    hold their final value.
    """

    z: np.ndarray
    steps: np.ndarray
    converged: np.ndarray
    trajectory: np.ndarray | None = None


def descend(z0: np.ndarray, eta: np.ndarray | float, eps: np.ndarray | float,
            max_steps: int, *, record: bool = False,
            progress: Callable[[int], None] | None = None,
            observe: Callable[[int, np.ndarray], None] | None = None) -> Descent:
    """Full-batch GD ``z ← z − η ∇_z L`` from ``z0`` until every ``e_k <= ε``.

    ``progress``, if given, is called with the number of configurations that have just
    stopped (met the rule), whenever some have; it never changes the result.
    ``observe(t, z)``, if given, sees the logits ``(B, K, K)`` (a read-only view, every
    configuration still descending or just stopped) at every step ``t`` before the
    stopping rule is applied; with one configuration this is its whole trajectory
    without storing it.

    Implementation: the batch is held as ``x[n, k, b]`` (batch axis last, contiguous), so
    every operation runs over long contiguous runs and every reduction over ``n`` adds
    whole slabs in a fixed order: each configuration's arithmetic is the same whatever
    else is in the batch. Buffers are reused between steps; configurations that stop are
    frozen in place (step 0) and dropped from the batch once they are a quarter of it.
    """
    z = np.array(z0, dtype=np.float64, copy=True)
    B = z.shape[0]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))
    steps = np.full(B, max_steps, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    history = [z.copy()] if record else None
    batch = _Batch(z, eta, eps)
    t = 0
    while True:
        done = batch.evaluate()
        if observe is not None:
            observe(t, batch.logits())
        if done.any():
            finished = batch.index[done]
            z[finished], steps[finished], converged[finished] = batch.logits(done), t, True
            batch.freeze(done)
            if progress is not None:
                progress(int(finished.size))
        if batch.alive == 0 or t >= max_steps:
            break
        batch.step()
        t += 1
        if record:
            z[batch.index] = batch.logits()
            history.append(z.copy())
    live = batch.live()
    z[batch.index[live]] = batch.logits(live)
    trajectory = np.stack(history) if record else None
    return Descent(z, steps, converged, trajectory)


class _Batch:
    """The configurations still descending, as ``x[n, k, b]`` with reusable buffers."""

    def __init__(self, z: np.ndarray, eta: np.ndarray, eps: np.ndarray) -> None:
        self.K = z.shape[-1]
        self.index = np.arange(z.shape[0])
        self._load(np.ascontiguousarray(z.transpose(1, 2, 0)), np.array(eta), np.array(eps))

    def _load(self, x: np.ndarray, eta: np.ndarray, eps: np.ndarray) -> None:
        K, B = self.K, x.shape[-1]
        self.x, self.eta, self.eps = x, eta, eps
        self.rate = eta / K                  # ∇L = a (r − Σ_n a r) / K; 1/K rides on η
        self.is_live = np.ones(B, dtype=bool)
        self.alive = B
        self.a, self.r, self.g = np.empty((K, K, B)), np.empty((K, K, B)), np.empty((K, K, B))
        self.col, self.e = np.empty((K, B)), np.empty((K, B))
        self.diagonal = self.r.reshape(K * K, B)[::K + 1]   # view of r[k, k, :]

    def evaluate(self) -> np.ndarray:
        """Attention, residual and errors at the current logits; which live
        configurations meet the stopping rule."""
        x, a, r, g, col, e = self.x, self.a, self.r, self.g, self.col, self.e
        np.max(x, axis=0, out=col)
        np.subtract(x, col, out=a)           # softmax down each column, max subtracted
        np.exp(a, out=a)
        np.sum(a, axis=0, out=col)
        np.divide(a, col, out=a)
        np.copyto(r, a)                      # r = Attn − I
        self.diagonal -= 1.0
        np.multiply(r, r, out=g)
        np.sum(g, axis=0, out=e)
        e *= 0.5                             # e_k = ½ Σ_n r[n, k]²
        done = (e <= self.eps).all(axis=0)
        done &= self.is_live
        return done

    def step(self) -> None:
        """``x ← x − η/K · a (r − Σ_n a r)`` in place, from ``evaluate``'s a and r."""
        a, r, g, col = self.a, self.r, self.g, self.col
        np.multiply(a, r, out=g)
        np.sum(g, axis=0, out=col)           # Σ_n a[n, k] r[n, k]
        np.subtract(r, col, out=g)
        g *= a
        g *= self.rate                       # frozen configurations: rate 0, x unchanged
        self.x -= g

    def logits(self, which: np.ndarray | None = None) -> np.ndarray:
        x = self.x if which is None else self.x[..., which]
        return x.transpose(2, 0, 1)

    def freeze(self, done: np.ndarray) -> None:
        """Stop the ``done`` configurations; compact once a quarter of the batch is frozen."""
        self.is_live &= ~done
        self.rate[done] = 0.0
        self.alive = int(self.is_live.sum())
        if self.alive and 4 * self.alive <= 3 * self.is_live.size:
            keep = self.is_live
            self.index = self.index[keep]
            a, r = self.a[..., keep], self.r[..., keep]   # step() still needs them
            self._load(np.ascontiguousarray(self.x[..., keep]), self.eta[keep], self.eps[keep])
            self.a[...], self.r[...] = a, r

    def live(self) -> np.ndarray:
        return self.is_live


def require_converged(run: Descent, phase: str, describe) -> None:
    """Raise a ComputationError naming the parameters of the first stuck configuration."""
    if run.converged.all():
        return
    b = int(np.flatnonzero(~run.converged)[0])
    raise ComputationError(
        f"{phase} did not meet the stopping rule (every e_k <= eps) within "
        f"max_steps = {int(run.steps[b])} for {describe(b)}; raise --max-steps, "
        f"raise --eps or change the step size")


def _is_diagonal(M: np.ndarray) -> bool:
    K = M.shape[-1]
    return not np.any(M * ~np.eye(K, dtype=bool))


def _sandwich(A: np.ndarray, W: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A W B`` batched over leading axes; elementwise when A and B are diagonal
    (``a_n b_k W[n, k]``), BLAS matrix products otherwise (O(K³), never O(K⁴))."""
    if _is_diagonal(A) and _is_diagonal(B):
        a = np.diagonal(A, axis1=-2, axis2=-1)
        b = np.diagonal(B, axis1=-2, axis2=-1)
        return a[..., :, None] * W * b[..., None, :]
    return np.matmul(np.matmul(A, W), B)


def ood_start(z1: np.ndarray, M: np.ndarray) -> np.ndarray:
    """OOD logits of ``Q = V Z1 Vᵀ``: ``Mᵀ Z1 M``, batched over leading axes."""
    return _sandwich(np.swapaxes(M, -1, -2), z1, M)


def source_logits(z1: np.ndarray, M: np.ndarray, z_ood0: np.ndarray,
                  z_ood: np.ndarray) -> np.ndarray:
    """Source logits after fine-tuning: ``Z1 + M (z_ood − z_ood0) Mᵀ`` (claim 7 for any M).

    ``z_ood`` may carry extra leading axes (a trajectory) in front of the batch axis.
    """
    return z1 + _sandwich(M, z_ood - z_ood0, np.swapaxes(M, -1, -2))


# --- columns: every OOD column descends on its own -------------------------------------
#
# The loss is Σ_k e_k / K and e_k depends on column k of the logits alone, so GD moves
# each column independently; only the stopping rule (every e_k <= ε at the same step)
# couples the columns of a configuration. Identical columns (same values, same own row,
# same η and ε) therefore follow bit-identical trajectories, whichever configuration they
# belong to: a grid computes each distinct column once.

def descend_columns(z0: np.ndarray, eta: np.ndarray | float, eps: np.ndarray | float,
                    max_steps: int, *,
                    progress: Callable[[int], None] | None = None) -> Descent:
    """``descend`` for a batch of configurations, computing each distinct column once.

    Two paths, chosen by the input alone (never by what else is in the batch):

    * every column two-valued (its own logit and K−1 equal others: always for K = 2, and
      for rotations and equal-γ shifts from the pretrained logits): the column is its
      margin ``d = own − other`` (softmax sees nothing else), one number per distinct
      ``(d, K, η, ε)``; its own and other logits follow from the conserved column sum.
      Agrees with :func:`descend` to rounding (T identical in the tests).
    * otherwise each distinct column ``(values, own row, η, ε)`` descends with exactly
      ``descend``'s arithmetic: bit-identical results.

    Configuration ``b`` stops at the first step where all of its columns meet ``e <= ε``:
    the count of its columns above ε is kept up to date as columns cross the threshold
    (either way), so the rule is applied exactly, monotone errors or not.
    """
    z0 = np.asarray(z0, dtype=np.float64)
    B, K = z0.shape[0], z0.shape[-1]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))
    columns = z0.transpose(0, 2, 1).reshape(B * K, K)        # row b*K + k: column k of b
    own = np.tile(np.arange(K), B)
    own_value = columns[np.arange(B * K), own]
    others = np.where(np.eye(K, dtype=bool)[own], np.nan, columns)
    other_value = np.nanmax(others, axis=1) if K > 1 else own_value
    two_valued = bool(np.all(np.isnan(others) | (others == other_value[:, None])))
    if two_valued:
        margin = own_value - other_value
        keys = np.stack([margin, np.repeat(eta, K), np.repeat(eps, K)], axis=1)
    else:
        keys = np.concatenate([columns, own[:, None].astype(np.float64),
                               np.repeat(eta, K)[:, None], np.repeat(eps, K)[:, None]], axis=1)
    keys = np.ascontiguousarray(keys)
    if two_valued and (keys[:, 1:] == keys[0, 1:]).all():   # one (η, ε): sort the margins
        _, first, inverse = np.unique(keys[:, 0], return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel(),
                                      return_index=True, return_inverse=True)
    inverse = inverse.ravel()                                # (B*K,) distinct column index
    U = first.size
    if two_valued:
        engine = _Margins(keys[first, 0], K, keys[first, 1], keys[first, 2])
    else:
        engine = _Columns(columns[first].T.copy(), own[first], keys[first, -2],
                          keys[first, -1])

    # Who uses which column: distinct (column, configuration) pairs, grouped both ways.
    config = np.repeat(np.arange(B), K)
    pairs = np.unique(inverse * B + config)
    pair_col, pair_cfg = pairs // B, pairs % B
    by_col = np.searchsorted(pair_col, np.arange(U + 1))     # CSR: column → configurations
    order = np.argsort(pair_cfg, kind="stable")
    cfg_cols = pair_col[order]
    by_cfg = np.searchsorted(pair_cfg[order], np.arange(B + 1))
    users = np.diff(by_col).astype(np.int64)                 # live configurations per column

    z = np.empty((B, K, K))
    steps = np.full(B, max_steps, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    live = np.ones(B, dtype=bool)
    slots = inverse.reshape(B, K)

    def finish(done: np.ndarray, t: int, ok: bool) -> None:
        if two_valued:
            # Column sums are conserved: own gains (K−1)/K of the margin's change,
            # every other logit loses 1/K of it.
            rows = (done[:, None] * K + np.arange(K)).ravel()
            change = engine.values(slots[done].ravel()) - keys[rows, 0]
            block = columns[rows] - (change / K)[:, None]
            block[np.arange(rows.size), own[rows]] = own_value[rows] + change * (K - 1) / K
            block = block.reshape(done.size, K, K)
        else:
            block = engine.values(slots[done].ravel()).T.reshape(done.size, K, K)
        z[done] = block.transpose(0, 2, 1)                    # block[b, k, n] → z[b, n, k]
        steps[done], converged[done], live[done] = t, ok, False
        np.subtract.at(users, _expand(by_cfg, done, cfg_cols), 1)
        engine.retire(users == 0)
        if progress is not None and ok:
            progress(int(done.size))

    flag = np.zeros(B, dtype=bool)
    above = ~engine.evaluate()                               # (U,) e > ε at step 0
    remaining = np.zeros(B, dtype=np.int64)
    np.add.at(remaining, pair_cfg, above[pair_col])
    t = 0
    done = np.flatnonzero(remaining == 0)
    while True:
        if done.size:
            finish(done, t, True)
        if not live.any() or t >= max_steps:
            break
        engine.step()
        t += 1
        now_above = ~engine.evaluate()
        changed = np.flatnonzero((now_above != above) & engine.running)
        if changed.size == 0:
            done = changed
            continue
        above[changed] = now_above[changed]
        touched = _expand(by_col, changed, pair_cfg)
        sign = np.where(now_above[changed], 1, -1)
        np.add.at(remaining, touched, np.repeat(sign, np.diff(by_col)[changed]))
        ready = touched[live[touched] & (remaining[touched] == 0)]
        flag[ready] = True                                   # distinct, in order, no sort
        done = np.flatnonzero(flag) if ready.size else ready
        flag[done] = False
    rest = np.flatnonzero(live)
    if rest.size:
        finish(rest, max_steps, False)
    return Descent(z, steps, converged)


def _expand(indptr: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values[indptr[r]:indptr[r+1]]`` for every r in ``rows``, concatenated."""
    start, stop = indptr[rows], indptr[rows + 1]
    lengths = stop - start
    if lengths.sum() == 0:
        return values[:0]
    offsets = np.repeat(start - np.cumsum(lengths) + lengths, lengths)
    return values[offsets + np.arange(lengths.sum())]


class _Engine:
    """Distinct columns descending together; ``slot`` maps a distinct column to its
    position in the (compacted) state, -1 once it is retired."""

    def __init__(self, U: int) -> None:
        self.slot = np.arange(U)
        self.index = np.arange(U)           # position in the state → distinct column
        self.running = np.ones(U, dtype=bool)
        self._below_all = np.ones(U, dtype=bool)

    def _below(self, e: np.ndarray) -> np.ndarray:
        below = self._below_all             # retired columns read as below; never used
        below[self.index] = e <= self.eps
        return below

    def retire(self, unused: np.ndarray) -> None:
        """Stop the columns no live configuration needs; compact once a quarter is idle."""
        gone = unused & self.running
        if not gone.any():
            return
        self.running &= ~gone
        self.rate[self.slot[gone]] = 0.0
        kept = np.flatnonzero(self.running)
        if 4 * kept.size <= 3 * self.rate.size:
            self._compact(self.slot[kept])
            self.slot = np.full(self.slot.size, -1)
            self.slot[kept] = np.arange(kept.size)
            self.index = kept
            self._below_all[:] = True


class _Margins(_Engine):
    """Two-valued columns as their margins ``d = own − other`` (K−1 equal others).

    With ``u = (K−1) e^{−d}``: own attention ``p = 1/(1+u)``, ``1 − p = u/(1+u)``, each
    other ``q = (1 − p)/(K−1)``; ``e = ½[(1−p)² + (K−1) q²]``, and the GD step moves the
    margin by ``η/K · (g_other − g_own)`` with ``g = a (r − Σ a r)`` as in ``_Batch``.
    """

    def __init__(self, d: np.ndarray, K: int, eta: np.ndarray, eps: np.ndarray) -> None:
        super().__init__(d.size)
        self.K, self.m = K, float(K - 1)
        self.d, self.rate, self.eps = d.copy(), eta / K, eps.copy()

    def evaluate(self) -> np.ndarray:
        # Below d = −600 the own attention is < 1e−260 and a step cannot move d (its
        # change rounds away); the floor only keeps u finite so that u·p stays exact.
        m = self.m
        u = np.maximum(self.d, -600.0)
        np.negative(u, out=u)
        np.exp(u, out=u)
        u *= m
        self.p = p = 1.0 / (1.0 + u)
        self.rest = rest = u * p                                   # 1 − p, accurately
        self.q = q = rest / m
        e = rest * rest
        e += m * q * q
        e *= 0.5
        return self._below(e)

    def step(self) -> None:
        p, rest, q, m = self.p, self.rest, self.q, self.m
        S = m * q * q - p * rest                                  # Σ_n a_n r_n
        self.d += self.rate * (q * (q - S) + p * (rest + S))      # g_other − g_own

    def values(self, distinct: np.ndarray) -> np.ndarray:
        return self.d[self.slot[distinct]]

    def _compact(self, pos: np.ndarray) -> None:
        self.d, self.rate, self.eps = self.d[pos], self.rate[pos], self.eps[pos]
        self.p, self.rest, self.q = self.p[pos], self.rest[pos], self.q[pos]


class _Columns(_Engine):
    """Distinct columns ``x[n, c]`` descending together; the arithmetic of ``_Batch``,
    column by column, with each column's own row given by ``own[c]``."""

    def __init__(self, x: np.ndarray, own: np.ndarray, eta: np.ndarray,
                 eps: np.ndarray) -> None:
        super().__init__(x.shape[1])
        self.K = x.shape[0]
        self._load(x, own, eta / self.K, eps)

    def _load(self, x, own, rate, eps) -> None:
        K, C = x.shape
        self.x, self.own, self.rate, self.eps = x, own, rate, eps
        self.a, self.r, self.g = np.empty((K, C)), np.empty((K, C)), np.empty((K, C))
        self.col, self.e = np.empty(C), np.empty(C)
        self.cols = np.arange(C)

    def evaluate(self) -> np.ndarray:
        """Whether each distinct column meets ``e <= ε`` now, shape (U,)."""
        x, a, r, g, col, e = self.x, self.a, self.r, self.g, self.col, self.e
        np.max(x, axis=0, out=col)
        np.subtract(x, col, out=a)
        np.exp(a, out=a)
        np.sum(a, axis=0, out=col)
        np.divide(a, col, out=a)
        np.copyto(r, a)
        r[self.own, self.cols] -= 1.0
        np.multiply(r, r, out=g)
        np.sum(g, axis=0, out=e)
        e *= 0.5
        return self._below(e)

    def step(self) -> None:
        a, r, g, col = self.a, self.r, self.g, self.col
        np.multiply(a, r, out=g)
        np.sum(g, axis=0, out=col)
        np.subtract(r, col, out=g)
        g *= a
        g *= self.rate
        self.x -= g

    def values(self, distinct: np.ndarray) -> np.ndarray:
        return self.x[:, self.slot[distinct]]

    def _compact(self, pos: np.ndarray) -> None:
        a, r = self.a[:, pos], self.r[:, pos]                 # step() still needs them
        self._load(np.ascontiguousarray(self.x[:, pos]), self.own[pos], self.rate[pos],
                   self.eps[pos])
        self.a[...], self.r[...] = a, r


# --- the symmetric ray: pretraining from Q = 0, and rotations -----------------------------
#
# From Q = 0 the logits stay on Z = aI + b(11ᵀ − I): every column is two-valued (its own
# logit a, K−1 others b), so a whole K×K descent is one scalar recurrence. The same holds
# for fine-tuning when M = cI (rotations, equal γ): the OOD logits c²Z1 are on the ray.

def ray_step_loop(own: float, other: float, K: int, eta: float, eps: float,
                  max_steps: int, stride: int, path: np.ndarray,
                  src_own: float, src_other: float, scale: float) -> tuple:
    """GD on a two-valued column to the stopping rule (plain floats; Numba compiles the
    same source when it is installed).

    Returns ``(own, other, steps, converged, recorded, loss_first, loss_last, rises,
    falls)``. Every ``stride``-th step (``stride > 0``) and the last write ``(own, other)`` into
    ``path`` (``recorded`` counts them, also past its end: then call again, larger). ``src_*``/``scale``: the source column that moves with it
    (``src + scale · (logits − start)``, claim 7 with M = cI); its per-feature loss
    ``e/K`` is followed at every step: first and last value, and whether it ever rose or
    fell by more than ``TREND_TOL``.
    """
    m = K - 1.0
    rate = eta / K
    own0, other0 = own, other
    recorded = 0
    prev = 0.0
    first = 0.0
    rises = False
    falls = False
    t = 0
    while True:
        if stride > 0 and t % stride == 0:
            if recorded < path.shape[0]:
                path[recorded, 0] = own
                path[recorded, 1] = other
            recorded += 1
        # the column's attention, error and gradient (softmax with max subtracted)
        top = own if own >= other else other
        wo = math.exp(own - top)
        wb = math.exp(other - top)
        total = wo + m * wb
        p = wo / total
        q = wb / total
        r = p - 1.0
        e = 0.5 * (r * r + m * q * q)
        # the source column's loss, for the trend
        so = src_own + scale * (own - own0)
        sb = src_other + scale * (other - other0)
        stop = so if so >= sb else sb
        sw = math.exp(so - stop)
        sv = math.exp(sb - stop)
        stotal = sw + m * sv
        sr = sw / stotal - 1.0
        sq = sv / stotal
        loss = 0.5 * (sr * sr + m * sq * sq) / K
        if t == 0:
            first = loss
        elif loss - prev > 1e-15:
            rises = True
        elif prev - loss > 1e-15:
            falls = True
        prev = loss
        if e <= eps or t >= max_steps:
            break
        S = p * r + m * q * q
        own -= (r - S) * p * rate
        other -= (q - S) * q * rate
        t += 1
    if stride > 0 and (t % stride) != 0:
        if recorded < path.shape[0]:
            path[recorded, 0] = own
            path[recorded, 1] = other
        recorded += 1
    return own, other, t, e <= eps, recorded, first, prev, rises, falls


@dataclass(frozen=True)
class Ray:
    """Where a two-valued column's descent ended: own and other logits, steps, whether
    it met the rule; ``path`` ``(n, 2)`` at ``path_steps``; the source loss's first and
    last value and ``trend`` (as :func:`oodcalc.report.trend` names it)."""

    own: float
    other: float
    steps: int
    converged: bool
    path: np.ndarray
    path_steps: np.ndarray
    loss_first: float
    loss_last: float
    trend: str

    def logits(self, K: int) -> np.ndarray:
        return ray_logits(K, self.own, self.other)


def ray_logits(K: int, own, other) -> np.ndarray:
    """``own`` on the diagonal, ``other`` elsewhere; broadcast over leading axes."""
    own, other = np.asarray(own, dtype=np.float64), np.asarray(other, dtype=np.float64)
    z = np.broadcast_to(other[..., None, None], own.shape + (K, K)).copy()
    idx = np.arange(K)
    z[..., idx, idx] = own[..., None]
    return z


#: Fused loops pay their compile/import cost (about a second) from this many steps on.
COMPILED_FROM_STEPS = 2_000_000


def descend_ray(own: float, other: float, K: int, eta: float, eps: float, max_steps: int,
                *, stride: int = 0, source: tuple[float, float, float] | None = None,
                expected_steps: float = 0.0) -> Ray:
    """GD on the symmetric ray from ``(own, other)`` until ``e <= ε`` (or ``max_steps``).

    ``stride > 0`` records every ``stride``-th step (and the last). ``source = (own,
    other, scale)`` follows the source column ``src + scale · Δlogits`` for the trend.
    Runs the plain-float loop, or the same loop compiled by Numba when it is installed
    and ``expected_steps`` is large enough to pay for it (both call the C library's exp
    in the same order: identical results).
    """
    src_own, src_other, scale = source if source is not None else (own, other, 0.0)
    loop = ray_step_loop
    if expected_steps >= COMPILED_FROM_STEPS:
        from . import compiled
        loop = compiled.ray_step_loop() or ray_step_loop
    size = (min(max_steps, int(expected_steps * 4) + 16) // stride + 2) if stride else 1
    while True:
        path = np.empty((size, 2))
        out = loop(float(own), float(other), int(K), float(eta), float(eps), int(max_steps),
                   int(stride), path, float(src_own), float(src_other), float(scale))
        if out[4] <= size:
            break
        size = out[2] // stride + 2                      # the estimate was short: again
    o, b, t, ok, n, first, last, rises, falls = out
    steps = np.arange(n, dtype=np.int64) * stride if stride else np.zeros(0, dtype=np.int64)
    if stride and n and t % stride:
        steps[-1] = t
    trend = ("non-monotone" if rises and falls else "rising" if rises
             else "falling" if falls else "flat")
    return Ray(float(o), float(b), int(t), bool(ok), path[:n], steps, float(first),
               float(last), trend)
