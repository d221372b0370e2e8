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

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ComputationError
from ..estimates import ray_compiled, ray_leaps
from ..model import attention_first, conditional_errors, errors_first, features_first, \
    features_last, is_diagonal, matrices_first, matrices_last
from . import ray_leap
from .ray_loop import ray_step_loop


__all__ = [
    "Descent", "MARGIN_ROUND", "Ray", "descend", "descend_columns", "descend_ray",
    "first_step_change", "first_step_moves", "ood_start", "ray_errors", "ray_logits",
    "require_converged",
    "source_errors", "source_logits",
]


@dataclass(frozen=True)
class Descent:
    """Where a batch of descents ended.

    ``z``: final logits ``(B, K, K)``; ``steps``: the stopping step of each configuration
    (``max_steps`` where it did not converge); ``converged``: ``(B,)`` booleans;
    ``trajectory``: ``(T+1, B, K, K)`` when recorded, configurations that stopped earlier
    hold their final value; ``margins``: ``(B, K)``, each column's final margin, when the
    compiled margin pass was asked for them instead of ``z`` (then None).
    """

    z: np.ndarray | None
    steps: np.ndarray
    converged: np.ndarray
    trajectory: np.ndarray | None = None
    margins: np.ndarray | None = None


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
            view = batch.logits()
            view.flags.writeable = False
            observe(t, view)
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
    if live.all():
        z[batch.index] = batch.logits()
    else:
        z[batch.index[live]] = batch.logits(live)
    trajectory = np.stack(history) if record else None
    return Descent(z, steps, converged, trajectory)


class _Batch:
    """The configurations still descending, as ``x[n, k, b]`` with reusable buffers."""

    def __init__(self, z: np.ndarray, eta: np.ndarray, eps: np.ndarray) -> None:
        self.K = z.shape[-1]
        self.index = np.arange(z.shape[0])
        self._load(z.transpose(1, 2, 0).copy(), np.array(eta), np.array(eps))   # never z itself

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


def _congruence(L: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``L W Lᵀ`` batched over leading axes."""
    batch = np.broadcast_shapes(L.shape[:-2], W.shape[:-2])
    K = W.shape[-1]
    return matrices_last(_congruence_first(L, matrices_first(
        np.broadcast_to(W, batch + (K, K)), copy=True)))


def _congruence_first(L: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``L W Lᵀ`` for ``W`` given as ``x[n, k, ...]`` (:func:`~oodcalc.model.matrices_first`,
    overwritten), in that layout: elementwise when L is diagonal (``l_n l_k W[n, k]``),
    BLAS matrix products otherwise (O(K³), never O(K⁴))."""
    if not is_diagonal(L):
        W = matrices_last(x)
        return matrices_first(np.matmul(np.matmul(L, W), np.swapaxes(L, -1, -2)))
    K = x.shape[0]
    l = features_first(np.broadcast_to(np.diagonal(L, axis1=-2, axis2=-1),
                                       x.shape[2:] + (K,)))
    x *= l[:, None]
    x *= l[None, :]
    return x


def ood_start(z1: np.ndarray, M: np.ndarray) -> np.ndarray:
    """OOD logits of ``Q = V Z1 Vᵀ``: ``Mᵀ Z1 M``, batched over leading axes."""
    return _congruence(np.swapaxes(M, -1, -2), z1)


def source_logits(z1: np.ndarray, M: np.ndarray, z_ood0: np.ndarray,
                  z_ood: np.ndarray) -> np.ndarray:
    """Source logits after fine-tuning: ``Z1 + M (z_ood − z_ood0) Mᵀ`` (claim 7 for any M).

    ``z_ood`` may carry extra leading axes (a trajectory) in front of the batch axis.
    """
    return z1 + _congruence(M, z_ood - z_ood0)


def source_errors(z1: np.ndarray, M: np.ndarray, z_ood0: np.ndarray,
                  z_ood: np.ndarray) -> np.ndarray:
    """``conditional_errors(source_logits(z1, M, z_ood0, z_ood))``, the same to the bit,
    without leaving the matrices-first layout (arguments broadcast as there)."""
    return _errors_after(z1, M, matrices_first(np.subtract(z_ood, z_ood0)))


def _errors_after(z1: np.ndarray, M: np.ndarray, change: np.ndarray) -> np.ndarray:
    """The source errors once the OOD logits moved by ``change`` (matrices-first,
    overwritten): ``e(Z1 + M change Mᵀ)``, ``(..., K)``."""
    x = _congruence_first(M, change)
    K = x.shape[0]
    x += matrices_first(np.broadcast_to(z1, x.shape[2:] + (K, K)))   # z1 may lack batch axes
    return features_last(errors_first(attention_first(x)))


def first_step_change(z1: np.ndarray, M: np.ndarray, eta_ft: np.ndarray | float, *,
                      z_ood0: np.ndarray | None = None, errors: np.ndarray | None = None,
                      attention: np.ndarray | None = None) -> np.ndarray:
    """The exact change of ``e_k`` on every source feature ``v_k`` over one fine-tuning
    step of size ``eta_ft`` from ``Q = V Z1 Vᵀ`` (one step of :func:`descend` on the OOD
    logits, its arithmetic, carried to the source by claim 7): ``(B, K)`` for stacks
    ``z1``, ``M`` ``(B, K, K)``. The step is taken whatever ε says; a caller whose run
    stopped at ``T2 = 0`` has no first step. A caller that has them passes
    ``ood_start(z1, M)`` as ``z_ood0`` and ``conditional_errors(z1)`` as ``errors``, and
    may pass the attention of ``z_ood0`` (``attention_first`` of its ``matrices_first``)
    as ``attention``: the same bits, one softmax fewer."""
    z_ood0 = ood_start(z1, M) if z_ood0 is None else z_ood0
    errors = conditional_errors(z1) if errors is None else errors
    z_ood0 = np.asarray(z_ood0, dtype=np.float64)
    B = z_ood0.shape[0]
    eta = np.broadcast_to(np.asarray(eta_ft, dtype=np.float64), (B,))
    if attention is None:
        batch = _Batch(z_ood0, eta, np.zeros(B))
        start = batch.x.copy()                   # x[n, k, b]: the matrices-first layout
        batch.evaluate()
        batch.step()
        np.subtract(batch.x, start, out=start)   # z_ood − z_ood0, as source_logits takes it
        return _errors_after(z1, M, start) - errors
    return _errors_after(z1, M, first_step_moves(z_ood0, eta, attention)) - errors


def first_step_moves(z_ood0: np.ndarray, eta_ft: np.ndarray, attention: np.ndarray
                     ) -> np.ndarray:
    """How one fine-tuning step moves the OOD logits ``z_ood0`` ``(B, K, K)``, given their
    attention (``attention_first`` of ``matrices_first(z_ood0)``), matrices-first: the
    step of :func:`descend` (its ``_Batch``), operation for operation, so the same bits
    as ``z_ood − z_ood0`` after its first step."""
    B, K = z_ood0.shape[0], z_ood0.shape[-1]
    a = attention
    r = a.copy()
    r.reshape(K * K, B)[::K + 1] -= 1.0          # r = Attn − I
    g = a * r
    col = g.sum(axis=0)                          # Σ_n a[n, k] r[n, k]
    np.subtract(r, col, out=g)
    g *= a
    g *= np.array(eta_ft) / K
    x = matrices_first(z_ood0)
    moved = x - g
    np.subtract(moved, x, out=moved)
    return moved


# --- columns: every OOD column descends on its own -------------------------------------
#
# The loss is Σ_k e_k / K and e_k depends on column k of the logits alone, so GD moves
# each column independently; only the stopping rule (every e_k <= ε at the same step)
# couples the columns of a configuration. Identical columns (same values, same own row,
# same η and ε) therefore follow bit-identical trajectories, whichever configuration they
# belong to: a grid computes each distinct column once.

def descend_columns(z0: np.ndarray, eta: np.ndarray | float, eps: np.ndarray | float,
                    max_steps: int, *,
                    progress: Callable[[int], None] | None = None,
                    compiled: bool = False, compiled_margins: bool = False,
                    logits: bool = True) -> Descent:
    """``descend`` for a batch of configurations, computing each distinct column once.

    Each column takes one of two paths, chosen by its own values (so a configuration's
    result never depends on what else is in the batch):

    * a two-valued column (its own logit and K−1 equal others: always for K = 2, and for
      rotations and equal-γ shifts from the pretrained logits) is its margin
      ``d = own − other`` (softmax sees nothing else), one number per distinct
      ``(d, K, η, ε)``; its own and other logits follow from the conserved column sum.
      Agrees with :func:`descend` to rounding (T identical in the tests).
    * any other column, one per distinct ``(values, own row, η, ε)``, descends with exactly
      ``descend``'s arithmetic: bit-identical results; or, with ``compiled`` (and Numba
      installed), by the compiled per-column kernel: the same to rounding (T identical,
      F_k to 1e-12 in the tests), several times faster. Choose ``compiled`` for a whole
      sweep, not per batch, so that results do not depend on how it is split.

    With ``compiled_margins`` (and Numba installed), a batch whose columns are all margins
    descends in one compiled pass per ``(η, ε)`` (:func:`_margin_pass`): T identical, the
    logits to rounding (``exp`` differs by at most an ulp). With ``logits=False``, a batch
    whose columns are all margins returns their final margins (``Descent.margins``), not
    ``z``, whichever engine ran.

    Configuration ``b`` stops at the first step where all of its columns meet ``e <= ε``:
    the count of each configuration's columns above ε is kept up to date from the
    columns that cross the threshold (either way). When every column is two-valued the
    margins of the last :data:`MARGIN_ROUND` steps are kept and the count is brought up
    to date once per round (:func:`_stops`), each configuration reading its margins at
    its own stopping step: the rule is applied exactly, step by step, either way.
    """
    z0 = np.asarray(z0, dtype=np.float64)
    B, K = z0.shape[0], z0.shape[-1]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))
    # Each column's own logit and the largest and smallest of its others (equal: the
    # column is two-valued), reduced over rows n with the batch innermost (fast).
    if K == 2:     # each column's one other is its max and min: the same, read directly
        own_values = np.stack([z0[:, 0, 0], z0[:, 1, 1]], axis=1)
        hi = np.stack([z0[:, 1, 0], z0[:, 0, 1]], axis=1)
        two_valued = (hi == hi).ravel()                       # (min == max: not NaN)
        margins = own_values - hi
    else:
        x = z0.transpose(1, 2, 0).copy()                      # x[n, k, b]
        own_diag = x.reshape(K * K, B)[::K + 1]               # view of x[k, k, :]
        own_values = own_diag.T.copy()                        # (B, K)
    if K > 2:
        own_diag[...] = -np.inf
        hi = x.max(axis=0).T
        own_diag[...] = np.inf
        two_valued = (x.min(axis=0).T == hi).ravel()          # row b*K + k: column k of b
        margins = own_values - hi
    elif K == 1:
        two_valued, margins = np.ones(B, dtype=bool), np.zeros((B, 1))
    if compiled_margins and B > 1 and two_valued.all() and \
            not ((eta == eta[0]).all() and (eps == eps[0]).all()):
        # The compiled pass takes one (η, ε): one call per rule (each configuration's
        # result depends on its own columns alone, so it is the same either way).
        rules, rule = np.unique(np.stack([eta, eps], axis=1), axis=0, return_inverse=True)
        rule = rule.ravel()
        steps, converged = np.empty(B, dtype=np.int64), np.empty(B, dtype=bool)
        out = np.empty((B, K)) if not logits else np.empty((B, K, K))
        for r in range(len(rules)):
            rows = np.flatnonzero(rule == r)
            part = descend_columns(z0[rows], eta[rows], eps[rows], max_steps,
                                   progress=progress, compiled=compiled,
                                   compiled_margins=True, logits=logits)
            steps[rows], converged[rows] = part.steps, part.converged
            out[rows] = part.z if logits else part.margins
        return Descent(out if logits else None, steps, converged,
                       margins=None if logits else out)
    row_eta, row_eps = np.repeat(eta, K), np.repeat(eps, K)

    # Distinct columns: margins first (indices 0..Um−1), then full columns.
    inverse = np.empty(B * K, dtype=np.int64)
    parts, grouped = [], None
    tv = slice(None) if two_valued.all() else np.flatnonzero(two_valued)
    if two_valued.any():
        values, etas, epss = margins.ravel()[tv], row_eta[tv], row_eps[tv]
        if (etas == etas[0]).all() and (epss == epss[0]).all():   # one rule
            first, inverse[tv], order = _distinct_values(values)
        else:
            (first, inverse[tv]), order = _distinct(np.stack([values, etas, epss], 1)), None
        parts.append(_Margins(values[first], K, etas[first], epss[first]))
        grouped = order if isinstance(tv, slice) else None    # rows, by distinct column
    Um = parts[0].slot.size if parts else 0
    if not isinstance(tv, slice):
        full = np.flatnonzero(~two_valued)
        columns = z0.transpose(0, 2, 1).reshape(B * K, K)    # row b*K + k: column k of b
        own = np.tile(np.arange(K), B)
        keys = np.concatenate([columns[full], own[full, None].astype(np.float64),
                               row_eta[full, None], row_eps[full, None]], axis=1)
        first, index = _distinct(keys)
        inverse[full] = Um + index
        from . import compiled as kernels
        use = kernels.column_kernels() if compiled else None
        x, own_rows = columns[full[first]].T.copy(), own[full[first]]
        parts.append(_CompiledColumns(x, own_rows, keys[first, -2], keys[first, -1], use)
                     if use is not None else _Columns(x, own_rows, keys[first, -2],
                                                      keys[first, -1]))
    engine = parts[0] if len(parts) == 1 else _Composite(*parts)
    if isinstance(engine, _Columns) and first.size == B * K:
        # Nothing shared and nothing two-valued: the batched descent does the same
        # arithmetic (bit for bit) without the bookkeeping.
        return descend(z0, eta, eps, max_steps, progress=progress)
    slots = inverse.reshape(B, K)
    z = np.empty((B, K, K))

    def blocks(done, final: np.ndarray | None = None) -> np.ndarray:
        """The final logits of configurations ``done`` (indices or a slice): their
        columns' current values, or, for all-margin batches, their ``final`` margins."""
        distinct = slots[done]
        is_margin = distinct < Um
        if final is None:
            final = margins[done].copy()                      # full columns: no change
            if is_margin.any():
                final[is_margin] = engine.margins(distinct[is_margin])
        # Column sums are conserved: every other logit loses 1/K of the margin's
        # change, own gains (K−1)/K of it.
        change = final - margins[done]
        x = matrices_first(z0[done], copy=True)               # x[n, k, b]
        x -= features_first(change / K)
        diagonal = np.arange(K)
        x[diagonal, diagonal] = np.where(is_margin.T, features_first(
            own_values[done] + change * (K - 1) / K), x[diagonal, diagonal])
        block = matrices_last(x)
        if not is_margin.all():
            b, k = np.nonzero(~is_margin)
            block[b, :, k] = engine.columns(distinct[b, k] - Um).T
        return block

    # Who uses which column, counted with multiplicity (a configuration whose columns
    # share a distinct column counts it twice, in its count above ε as in the users):
    # configuration b uses slots[b]; CSR by column (order within a column: any).
    U = int(inverse.max()) + 1
    fan = np.bincount(inverse, minlength=U)
    by_col = np.concatenate([[0], np.cumsum(fan)])
    pair_cfg = (np.argsort(inverse) if grouped is None else grouped) // K   # column → configurations
    users = fan.copy()                                       # live uses of each column

    if compiled_margins and grouped is not None and len(parts) == 1:
        done = _margin_pass(engine, slots, by_col, pair_cfg, max_steps)
        if done is not None:                 # (None: no Numba, or a margin went back)
            if progress is not None and done[1].any():
                progress(int(np.count_nonzero(done[1])))
            if not logits:
                return Descent(None, done[0], done[1], margins=done[2])
            return Descent(blocks(slice(None), done[2]), done[0], done[1])

    steps = np.full(B, max_steps, dtype=np.int64)
    converged = np.zeros(B, dtype=bool)
    live = np.ones(B, dtype=bool)
    # Every column a margin: the engine keeps its states over a round of steps, the
    # stopping rule is applied to the whole round at once, each configuration's margins
    # are taken at its stop and the logits built once at the end. Otherwise a round is
    # one step (a K×K state is not worth keeping).
    final = np.empty((B, K)) if isinstance(engine, _Margins) else None
    rounds = engine.keep_rounds(MARGIN_ROUND) if final is not None else 1
    below = np.empty((rounds, U), dtype=bool)
    flips = np.empty((rounds, U), dtype=bool)

    def finish(done: np.ndarray, t, ok: bool, at: np.ndarray | None = None) -> None:
        """Stop configurations ``done`` at steps ``t``, their state kept at round step
        ``at`` (None: the current state)."""
        used = slots[done]
        if final is None:
            z[done] = blocks(done)
        else:
            final[done] = engine.margins(used, None if at is None else at[:, None])
        steps[done], converged[done], live[done] = t, ok, False
        used = used.ravel()
        np.subtract.at(users, used, 1)
        engine.retire(used[users[used] == 0])
        if progress is not None and ok:
            progress(int(done.size))

    above = ~engine.evaluate()                               # (U,) e > ε at step 0
    remaining = above[slots.T].sum(axis=0)                   # columns above ε, per configuration
    done = np.flatnonzero(remaining == 0)
    if done.size:
        finish(done, 0, True)
    t = 0
    while live.any() and t < max_steps:
        n = min(rounds, max_steps - t)
        for s in range(n):
            engine.step()                                    # margins: kept in row s
            below[s] = engine.evaluate()
        # Where a column changed sides of ε in the round (retired columns are frozen, or
        # read as below, as they were when retired: they never change sides).
        np.equal(below[0], above, out=flips[0])
        np.not_equal(below[1:n], below[:n - 1], out=flips[1:n])
        np.logical_not(below[n - 1], out=above)
        at, col = np.divmod(np.flatnonzero(flips[:n]), U)    # by step, then column
        if col.size:
            done, at = _stops(remaining, live, at, col, below[at, col], by_col, pair_cfg)
            if done.size:
                finish(done, t + 1 + at, True, at)
        t += n
    rest = np.flatnonzero(live)
    if rest.size:
        finish(rest, max_steps, False)
    if final is not None:
        if not logits:
            return Descent(None, steps, converged, margins=final)
        z = blocks(slice(None), final)
    return Descent(z, steps, converged)


def _margin_pass(engine: "_Margins", slots: np.ndarray, by_col: np.ndarray,
                 pair_cfg: np.ndarray, max_steps: int):
    """The all-margin descent of one rule (one η, one ε) in one compiled call
    (:func:`oodcalc.finetune._kernels.margin_pass`): ``(steps, converged, final margins)``,
    or None without Numba or where rounding broke the margins' order (then the caller's
    NumPy engine runs, which needs no order)."""
    from . import compiled as kernels
    kernel = kernels.margin_pass()
    if kernel is None:
        return None
    B, K = slots.shape
    steps, converged = np.empty(B, dtype=np.int64), np.empty(B, dtype=bool)
    final = np.empty((B, K))
    eps = float(engine.eps) if np.ndim(engine.eps) == 0 else float(engine.eps[0])
    t = kernel(engine.w, float(engine.rate[0]), eps, engine.half, engine.m, slots,
               by_col, pair_cfg, int(max_steps), steps, converged, final)
    return (steps, converged, final) if t >= 0 else None


#: Steps per round of an all-margin descent (its states are kept for a round; the
#: stopping rule's bookkeeping runs once a round, not once a step). 8: the kept states of
#: 23,022 margins (the 201×201 phase diagram) stay in the L2 cache; 4 and 16 are slower.
MARGIN_ROUND = 8


def _stops(remaining: np.ndarray, live: np.ndarray, at: np.ndarray, col: np.ndarray,
           below: np.ndarray, by_col: np.ndarray, pair_cfg: np.ndarray):
    """The configurations that stop in a round, and the round step they stop at.

    Column ``col[i]`` changed sides of ε at round step ``at[i]`` (to ``below[i]``; events
    in step order); ``remaining`` counts each live configuration's columns above ε at
    the start of the round and is brought to its end. A configuration stops at the first
    step at which its count, after all of that step's changes, is 0.
    """
    fan = by_col[col + 1] - by_col[col]
    cfg = _expand(by_col, col, pair_cfg)
    if below.all():
        return _stops_falling(remaining, live, np.repeat(at, fan), cfg)
    at, sign = np.repeat(at, fan), np.repeat(np.where(below, -1, 1), fan)
    mine = live[cfg]
    order = np.argsort(cfg[mine], kind="stable")             # by configuration, then step
    cfg, at, sign = cfg[mine][order], at[mine][order], sign[mine][order]
    if not cfg.size:
        return cfg, at
    first = np.flatnonzero(_run_starts(cfg, at))
    cfg, at, net = cfg[first], at[first], np.add.reduceat(sign, first)  # one per step
    total = np.cumsum(net)
    new = _run_starts(cfg)                                   # a configuration's first step
    level = remaining[cfg] + total - (total - net)[new][np.cumsum(new) - 1]
    last = np.empty_like(new)
    last[:-1], last[-1] = new[1:], True
    remaining[cfg[last]] = level[last]
    hit = np.flatnonzero(level == 0)
    cfg, at = cfg[hit], at[hit]
    firsts = _run_starts(cfg)
    return cfg[firsts], at[firsts]


def _stops_falling(remaining: np.ndarray, live: np.ndarray, at: np.ndarray,
                   cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_stops` when every change of the round is a fall below ε (the usual case:
    margins only grow). Counts then only fall, so a configuration stops in the round
    iff its count reaches 0, at its last event's step (events come in step order)."""
    mine = live[cfg]
    cfg, at = cfg[mine], at[mine]
    np.subtract.at(remaining, cfg, 1)
    hit = remaining[cfg] == 0
    cfg, at = cfg[hit], at[hit]
    # Each stopping configuration's last event, without a sort: its count is 0 now and
    # unread until it is marked done, so it can hold the largest index of its events
    # (then it is 0 again).
    events = np.arange(1, cfg.size + 1)
    np.maximum.at(remaining, cfg, events)
    last = remaining[cfg] == events
    remaining[cfg] = 0
    return cfg[last], at[last]


def _run_starts(*keys: np.ndarray) -> np.ndarray:
    """Where a run of equal entries (of every key at once) starts."""
    new = np.zeros(keys[0].size, dtype=bool)
    new[:1] = True
    for key in keys:
        new[1:] |= key[1:] != key[:-1]
    return new


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A row of each distinct row of ``keys`` and every row's distinct index (distinct
    rows in sorted order)."""
    keys = np.ascontiguousarray(keys)
    _, first, inverse = np.unique(keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel(),
                                  return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _distinct_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_distinct` for one key per row, and also the rows grouped by distinct index,
    from the one sort this takes (``np.unique`` takes two)."""
    order = np.argsort(values)
    new = _run_starts(values[order])
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse, order


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
        if self.index.size == below.size:   # not compacted: position = distinct column
            np.less_equal(e, self.eps, out=below)
        else:
            below[self.index] = e <= self.eps
        return below

    def retire(self, unused: np.ndarray) -> None:
        """Stop the distinct columns ``unused`` (indices, repeats allowed) that no live
        configuration needs; compact once a quarter of the state is idle."""
        gone = unused[self.running[unused]]
        if not gone.size:
            return
        self.running[gone] = False
        self._freeze(self.slot[gone])
        if 4 * np.count_nonzero(self.running) <= 3 * self._positions():
            kept = np.flatnonzero(self.running)
            self._compact(self.slot[kept])
            self.slot = np.full(self.slot.size, -1)
            self.slot[kept] = np.arange(kept.size)
            self.index = kept
            self._below_all[:] = True

    def _freeze(self, pos: np.ndarray) -> None:
        """Rate 0 at state positions ``pos``: those columns stay where they are."""
        self.rate[pos] = 0.0

    def _positions(self) -> int:
        return self.rate.size


class _Margins(_Engine):
    """Two-valued columns as their margins ``d = own − other`` (K−1 equal others).

    With ``m = K−1``, ``u = m e^{−d}``: own attention ``p = 1/(1+u)``, ``r = 1 − p =
    u/(1+u)`` (accurately, no cancellation), each other ``r/m``. Then
    ``e = ½(1 + 1/m) r²`` and the GD step of ``_Batch`` (``η/K · (g_other − g_own)``,
    ``g = a (r − Σ a r)``) moves the margin by ``η/K (1 + 1/m)² p r²``, never down.

    A step costs one exp and a few multiplies per margin, so the loop keeps nothing but
    that: the negated margin ``w = −d`` is held (exp takes it as it is), every
    intermediate has its own buffer (a fresh array per step costs page faults that
    outweigh the arithmetic), and ``e`` is ``r²`` itself when ``½(1 + 1/m) = 1`` (K = 2).
    """

    def __init__(self, d: np.ndarray, K: int, eta: np.ndarray, eps: np.ndarray) -> None:
        super().__init__(d.size)
        self.K, self.m = K, float(K - 1)
        self.half = 0.5 * (1.0 + 1.0 / self.m)
        self.floor, self.kept = True, None
        self._load(-d, eta / K * (1.0 + 1.0 / self.m) ** 2, eps.copy())
        if eps.size and (eps == eps[0]).all():
            self.eps = eps[0]               # one ε: compared as a number, not an array

    def _load(self, w: np.ndarray, rate: np.ndarray, eps: np.ndarray) -> None:
        self.w, self.rate, self.eps = w, rate, eps
        self.u, self.p, self.r2 = np.empty_like(w), np.empty_like(w), np.empty_like(w)

    def evaluate(self) -> np.ndarray:
        # Below d = −600 the own attention is < 1e−260 and a step cannot move d (its
        # change rounds away); the floor only keeps u finite so that u·p stays exact.
        # Margins never fall, so once above it they need no floor.
        u, p, r2 = self.u, self.p, self.r2
        if self.floor:
            np.minimum(self.w, 600.0, out=u)
            self.floor = bool((self.w > 600.0).any())
            np.exp(u, out=u)
        else:
            np.exp(self.w, out=u)
        if self.m != 1.0:
            u *= self.m
        np.add(u, 1.0, out=p)
        np.divide(1.0, p, out=p)          # 1/(1+u) (np.reciprocal: same bits, half the speed)
        u *= p                                                    # r = 1 − p, accurately
        np.multiply(u, u, out=r2)
        return self._below(r2 if self.half == 1.0 else np.multiply(r2, self.half, out=u))

    def step(self) -> None:
        change = np.multiply(self.p, self.r2, out=self.u)         # u is free until evaluate
        change *= self.rate
        if self.kept is None:
            self.w -= change                                      # d += change, exactly
            return
        out = self.kept[self.row, :self.w.size]                   # the new state, kept
        self.w = np.subtract(self.w, change, out=out)
        self.row = (self.row + 1) % len(self.kept)

    def keep_rounds(self, rounds: int) -> int:
        """From now on keep the states of the last ``rounds`` steps (at most 32 MiB of
        them): step ``i`` (from 1) writes row ``(i − 1) % rounds``."""
        rounds = max(1, min(rounds, 2**22 // max(1, self.w.size)))
        self.kept, self.row = np.empty((rounds, self.w.size)), 0
        return rounds

    def margins(self, distinct: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
        """The margins now, or at the kept round steps ``at`` (broadcast with distinct)."""
        pos = self.slot[distinct]
        if at is None:
            return -self.w[pos]
        return -self.kept.ravel()[at * self.kept.shape[1] + pos]   # kept[at, pos], flat

    def _compact(self, pos: np.ndarray) -> None:
        p, r2 = self.p[pos], self.r2[pos]                         # step() still needs them
        self._load(self.w[pos], self.rate[pos], self.eps if np.ndim(self.eps) == 0
                   else self.eps[pos])
        self.p, self.r2 = p, r2


class _Composite:
    """Margins (distinct indices ``0..Um−1``) and full columns (``Um..``) stepping
    together, each part with its own arithmetic."""

    def __init__(self, margins: "_Margins", columns: "_Columns") -> None:
        self.parts = (margins, columns)
        self.split = margins.slot.size

    def evaluate(self) -> np.ndarray:
        return np.concatenate([part.evaluate() for part in self.parts])

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def retire(self, unused: np.ndarray) -> None:
        margin = unused < self.split
        self.parts[0].retire(unused[margin])
        self.parts[1].retire(unused[~margin] - self.split)

    def margins(self, distinct: np.ndarray) -> np.ndarray:
        return self.parts[0].margins(distinct)

    def columns(self, distinct: np.ndarray) -> np.ndarray:
        return self.parts[1].columns(distinct)


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

    def columns(self, distinct: np.ndarray) -> np.ndarray:
        return self.x[:, self.slot[distinct]]

    def _compact(self, pos: np.ndarray) -> None:
        a, r = self.a[:, pos], self.r[:, pos]                 # step() still needs them
        self._load(np.ascontiguousarray(self.x[:, pos]), self.own[pos], self.rate[pos],
                   self.eps[pos])
        self.a[...], self.r[...] = a, r


class _CompiledColumns(_Engine):
    """:class:`_Columns` compiled by Numba (:func:`oodcalc.finetune._kernels.columns_advance`: the
    arithmetic of ``_Batch`` up to rounding, a vectorised exp). Columns are held in tiles
    of ``L``: position ``i`` is ``x[i // L, :, i % L]`` (the last tile padded with copies
    of column 0, never read). ``step()`` only marks the step; the next ``evaluate()``
    makes it and evaluates in one pass (the main loop evaluates right after stepping)."""

    #: Columns per tile; logits per call from which the tiles are split over threads.
    TILE = 512
    PARALLEL_FROM = 2**20

    def __init__(self, x: np.ndarray, own: np.ndarray, eta: np.ndarray,
                 eps: np.ndarray, kernels) -> None:
        super().__init__(x.shape[1])
        self.K = x.shape[0]
        self.kernels = kernels
        self.pending = False
        self._load(x.T, own, eta / self.K, eps)

    def _tiles(self, a: np.ndarray) -> np.ndarray:
        """``(C, ...)`` → ``(T, ..., L)``, padded with copies of the first row."""
        C, L = a.shape[0], self.L
        padded = np.concatenate([a, np.repeat(a[:1], -C % L, axis=0)])
        return np.ascontiguousarray(np.moveaxis(padded.reshape(-1, L, *a.shape[1:]), 1, -1))

    def _load(self, columns, own, rate, eps, w=None, state=None) -> None:
        """``columns`` ``(C, K)``; ``w`` ``(C, K)`` and ``state`` ``(C, 5)`` if a step is
        pending."""
        self.C = C = columns.shape[0]
        self.L = max(1, min(self.TILE, C))
        self.x = self._tiles(columns)
        self.own = self._tiles(np.asarray(own, dtype=np.int64))
        self.rate, self.eps = self._tiles(rate), self._tiles(eps)
        self.w = self._tiles(w) if w is not None else np.empty_like(self.x)
        self.state = self._tiles(state) if state is not None else \
            np.empty((self.x.shape[0], 5, self.L))
        self.below_now = np.empty(self.own.shape, dtype=bool)

    def _flat(self, a: np.ndarray) -> np.ndarray:
        """``(T, ..., L)`` → ``(C, ...)``."""
        return np.moveaxis(a, -1, 1).reshape(-1, *a.shape[1:-1])[:self.C]

    def evaluate(self) -> np.ndarray:
        kernel = self.kernels[self.x.size >= self.PARALLEL_FROM]
        kernel(self.x, self.own, self.rate, self.eps, self.w, self.state, self.below_now,
               self.pending)
        self.pending = False
        below = self._below_all             # retired columns read as below; never used
        now = self.below_now.ravel()[:self.C]
        if self.index.size == below.size:
            below[:] = now
        else:
            below[self.index] = now
        return below

    def step(self) -> None:
        self.pending = True

    def _freeze(self, pos: np.ndarray) -> None:
        self.rate[pos // self.L, pos % self.L] = 0.0

    def _positions(self) -> int:
        return self.C

    def columns(self, distinct: np.ndarray) -> np.ndarray:
        pos = self.slot[distinct]
        return self.x[pos // self.L, :, pos % self.L].T

    def _compact(self, pos: np.ndarray) -> None:
        flat = [self._flat(a)[pos] for a in (self.x, self.w, self.state)]
        self._load(flat[0], self._flat(self.own)[pos], self._flat(self.rate)[pos],
                   self._flat(self.eps)[pos], flat[1], flat[2])


# --- the symmetric ray: pretraining from Q = 0, and rotations -----------------------------
#
# From Q = 0 the logits stay on Z = aI + b(11ᵀ − I): every column is two-valued (its own
# logit a, K−1 others b), so a whole K×K descent is one scalar recurrence. The same holds
# for fine-tuning when M = cI (rotations, equal γ): the OOD logits c²Z1 are on the ray.
# The recurrence itself is :func:`oodcalc.finetune.ray_loop.ray_step_loop` (below this module, so
# that :mod:`oodcalc.finetune.compiled` compiles it without importing the dynamics back).

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
    engine: str = "symmetric-ray recurrence (Python)"

    def logits(self, K: int) -> np.ndarray:
        return ray_logits(K, self.own, self.other)


def ray_logits(K: int, own, other) -> np.ndarray:
    """``own`` on the diagonal, ``other`` elsewhere; broadcast over leading axes."""
    own, other = np.asarray(own, dtype=np.float64), np.asarray(other, dtype=np.float64)
    z = np.broadcast_to(other[..., None, None], own.shape + (K, K)).copy()
    idx = np.arange(K)
    z[..., idx, idx] = own[..., None]
    return z


def ray_errors(K: int, own, other) -> np.ndarray:
    """Every column's e on the ray (all equal): ½(1 − p)²·K/(K − 1), p the own weight
    (:func:`oodcalc.model.conditional_errors` of :func:`ray_logits`, to rounding)."""
    return ray_leap.ray_error(K, np.asarray(own, dtype=np.float64)
                              - np.asarray(other, dtype=np.float64))


def descend_ray(own: float, other: float, K: int, eta: float, eps: float, max_steps: int,
                *, stride: int = 0, source: tuple[float, float, float] | None = None,
                expected_steps: float = 0.0) -> Ray:
    """GD on the symmetric ray from ``(own, other)`` until ``e <= ε`` (or ``max_steps``).

    ``stride > 0`` records every ``stride``-th step (and the last). ``source = (own,
    other, scale)`` follows the source column ``src + scale · Δlogits`` for the trend.
    A long run (``expected_steps``, :func:`oodcalc.estimates.ray_leaps`) goes to the step
    counter (:mod:`oodcalc.finetune.ray_leap`: the same T, the state to ~1e-12); the
    others, and a case it cannot call, to the plain-float loop, or the same loop compiled
    by Numba when it is installed and the run is long enough to pay for it (both call the
    C library's exp in the same order: identical results).
    """
    src_own, src_other, scale = source if source is not None else (own, other, 0.0)
    from . import compiled
    leaps = ray_leaps(K, eta, expected_steps)
    size = (min(max_steps, int(expected_steps * 4) + 16) // stride + 2) if stride else 1
    while True:
        path = np.empty((size, 2))
        args = (float(own), float(other), int(K), float(eta), float(eps), int(max_steps),
                int(stride), path, float(src_own), float(src_other), float(scale))
        out, engine = (ray_leap.leap(*args), "step counter") if leaps else (None, "")
        if out is None:                    # not leapt, or too close to call: the loop
            loop = ray_step_loop
            if ray_compiled(expected_steps, compiled.loaded()):
                loop = compiled.ray_step_loop() or ray_step_loop
            engine = "Python" if loop is ray_step_loop else "compiled, Numba"
            out = loop(*args)
        if out[4] <= size:
            break
        size = out[2] // stride + 2                      # the estimate was short: again
    o, b, t, ok, n, first, last, rises, falls = out
    steps = np.arange(n, dtype=np.int64) * stride if stride else np.zeros(0, dtype=np.int64)
    if stride and n and t % stride:
        steps[-1] = t
    trend = ("non-monotone" if rises and falls else "rising" if rises
             else "falling" if falls else "flat")
    engine = f"symmetric-ray recurrence ({engine})"
    return Ray(float(o), float(b), int(t), bool(ok), path[:n], steps, float(first),
               float(last), trend, engine)
