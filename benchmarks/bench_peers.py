"""oodcalc's sweep against the strongest peers a skilled engineer would write, in one process.

    python benchmarks/bench_peers.py [--n 201] [--k8 10000] [--repeat 3]

Peers (each optional one is skipped with a message when its framework is missing):
batched NumPy with the (K, K, B) layout, as written plainly and with every buffer reused;
for K = 2, NumPy on scalar margins (each column of a K = 2 logit matrix is one margin
``d ← d + 2η σ(d)(1−σ(d))²``; every distinct start once, the margin trajectories kept
and read at each configuration's T2) and Numba on the distinct margins in one fused
lockstep pass (one thread); batched PyTorch with the analytic gradient on one thread; JAX
``jit(vmap(while_loop))`` in float64; a Numba loop fused per configuration, on 1 and 2
threads. Every peer pretrains once from Q = 0
with its own dynamics, then fine-tunes every configuration to the stopping rule and
reports T1, T2 and F_k; before any time is printed, T1 and T2 must be identical to
oodcalc's on every configuration and F_k agree to 1e-12. Workloads: the 201×201 K = 2
phase diagram, 10⁴ random γ at K = 8, and a θ × K sweep (θ ∈ [0, π/2], 46 angles,
K = 2..32). Times are the best of ``--repeat`` runs in this process; the load average is
read after each. Numba, when installed, is imported first (the Numba peers need it, and
oodcalc's sweep then uses its compiled paths: each table names oodcalc's engine). Each
table ends with oodcalc's sweep against its strongest peer and, where
every column is a margin, against the limit: the distinct margin-steps (each distinct
margin from step 0 to the last T2 that reads it) times the measured time of one
vectorised exp.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from _common import load, machine, table

from oodcalc.finetune.dynamics import descend_columns, ood_start, source_logits
from oodcalc.model import conditional_errors
from oodcalc.sweep import gamma_grid, sweep, theta_grid

EPS, ETA = 0.01, 0.1
AGREE = 1e-12


# --- the peers: pretraining once, fine-tuning every configuration -------------------------

def numpy_peer(M: np.ndarray):
    """Batched NumPy, (K, K, B) layout, frozen rows masked; Z1 then Mᵀ Z1 M."""
    K = M.shape[-1]

    def run(x, max_steps=10**7):
        steps = np.full(x.shape[-1], -1)
        for t in range(max_steps + 1):
            a = np.exp(x - x.max(axis=0))
            a /= a.sum(axis=0)
            r = a.copy()
            r[np.arange(K), np.arange(K)] -= 1.0
            e = 0.5 * (r * r).sum(axis=0)
            newly = (e <= EPS).all(axis=0) & (steps < 0)
            steps[newly] = t
            if (steps >= 0).all():
                return x, steps
            g = a * (r - (a * r).sum(axis=0)) * (ETA / K)
            g[..., steps >= 0] = 0.0
            x = x - g
        raise RuntimeError("no convergence")

    return _both_phases(run, M)


def _both_phases(run, M: np.ndarray):
    """A batched peer's pretraining from Q = 0 and fine-tuning of every configuration by
    its own ``run(x) -> (x, steps)`` on ``x[n, k, b]``: T1, T2 and F_k."""
    K = M.shape[-1]
    z1, T1 = run(np.zeros((K, K, 1)))
    z1 = z1[..., 0]
    z0 = np.einsum("bnk,nm,bml->klb", M, z1, M)
    z, T2 = run(z0.copy())
    src = z1[..., None] + np.einsum("bnk,klb,bml->nmb", M, z - z0, M)
    return int(T1[0]), T2, _loss(src.transpose(2, 0, 1)) - _loss(z1)


def buffered_peer(M: np.ndarray):
    """:func:`numpy_peer` with every temporary in a buffer allocated once per phase and
    frozen configurations stepped at rate 0 (no fresh arrays per step: on a machine where
    a page fault costs microseconds, about twice as fast)."""
    K = M.shape[-1]

    def run(x, max_steps=10**7):
        B = x.shape[-1]
        steps, rate = np.full(B, -1), np.full(B, ETA / K)
        a, r, g = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        col, e = np.empty((K, B)), np.empty((K, B))
        diagonal = r.reshape(K * K, B)[::K + 1]
        for t in range(max_steps + 1):
            np.max(x, axis=0, out=col)
            np.subtract(x, col, out=a)
            np.exp(a, out=a)
            np.sum(a, axis=0, out=col)
            a /= col
            np.copyto(r, a)
            diagonal -= 1.0
            np.multiply(r, r, out=g)
            np.sum(g, axis=0, out=e)
            e *= 0.5
            newly = (e <= EPS).all(axis=0) & (steps < 0)
            steps[newly], rate[newly] = t, 0.0
            if (steps >= 0).all():
                return x, steps
            np.multiply(a, r, out=g)
            np.sum(g, axis=0, out=col)
            np.subtract(r, col, out=g)
            g *= a
            g *= rate
            x -= g
        raise RuntimeError("no convergence")

    return _both_phases(run, M)


def _gap(d):
    """1 − σ(d) without cancellation: a K = 2 column's error is its square."""
    u = np.exp(-d)
    return u / (1.0 + u)


def _margin_starts(M: np.ndarray):
    """What both K = 2 margin peers start from: the pretraining margin d1 and T1 (one
    margin from 0), each OOD column's start ``(γ_k² + γ1γ2) d1/2`` (``scale · d1/2``; z1 =
    [[d1/2, −d1/2], [−d1/2, d1/2]]) and the distinct starts with each column's index."""
    g1, g2 = M[:, 0, 0], M[:, 1, 1]
    d1, T1 = 0.0, 0
    while _gap(d1) ** 2 > EPS:
        r = _gap(d1)
        d1, T1 = d1 + 2 * ETA * (1 - r) * r * r, T1 + 1
    scale = np.stack([g1 * g1 + g1 * g2, g2 * g2 + g1 * g2], axis=1)
    starts = scale * d1 / 2
    distinct, inverse = np.unique(starts, return_inverse=True)
    return d1, T1, scale, starts, distinct, inverse.reshape(starts.shape)


def _margin_forgetting(d1, scale, starts, final):
    """F_k from the OOD margins at T2: the source margins after (claim 7), their error
    change."""
    source = d1 + scale * (final - starts) / 2
    return 0.5 * _gap(source) ** 2 - 0.5 * _gap(d1) ** 2


def margin_peer(M: np.ndarray):
    """K = 2 as scalar margins: a column ``(own, other)`` is its margin ``d``, and GD moves
    it by ``2η σ(d)(1 − σ(d))²`` with error ``(1 − σ(d))²``; every distinct start once."""
    if M.shape[-1] != 2:
        raise NotImplementedError("K = 2 only")
    d1, T1, scale, starts, distinct, inverse = _margin_starts(M)
    x, T = distinct.copy(), np.full(distinct.size, -1)
    path, t = [x], 0
    while True:
        r = _gap(x)
        T[(r * r <= EPS) & (T < 0)] = t
        if (T >= 0).all():
            break
        x = x + 2 * ETA * (1 - r) * r * r
        path.append(x)
        t += 1
    T2 = T[inverse].max(axis=1)
    final = np.stack(path)[T2[:, None], inverse]     # each column's margin at its T2
    return T1, T2, _margin_forgetting(d1, scale, starts, final)


_FUSED = {}


def fused_margin_peer(M: np.ndarray):
    """K = 2 as margins in one fused Numba pass, one thread: the distinct OOD margins
    sorted ascending step in lockstep, and since a larger margin hits ε no later than a
    smaller one (margins only grow, the step map is increasing) the margins still above
    ε are a prefix: only its top is tested each step, and a configuration stops (T2) when
    its smaller margin hits, reading both of its margins then. ``math.exp`` (the C
    library's, one call a value: Numba has no vectorised exp without SVML)."""
    if M.shape[-1] != 2:
        raise NotImplementedError("K = 2 only")
    import numba
    if "pass" not in _FUSED:
        @numba.njit(cache=True)
        def fused(x, rate, eps, lo, first, order, i1, i2, final, T2):
            U, B = x.size, i1.size
            f, t, live = U, 0, B
            while True:
                while f > 0:                              # the prefix's top: hit now?
                    u = math.exp(-x[f - 1])
                    r = u / (1.0 + u)
                    if r * r > eps:
                        break
                    f -= 1
                    for e in range(first[f], first[f + 1]):   # configurations whose
                        b = order[e]                          # smaller margin is f
                        T2[b] = t
                        final[b, 0], final[b, 1] = x[i1[b]], x[i2[b]]
                        live -= 1
                if live == 0:
                    return
                for j in range(U):                        # one step of every margin
                    u = math.exp(-x[j])
                    r = u / (1.0 + u)
                    x[j] += rate * (1.0 - r) * r * r
                t += 1

        _FUSED["pass"] = fused
    fused = _FUSED["pass"]
    d1, T1, scale, starts, distinct, inverse = _margin_starts(M)
    lo = inverse.min(axis=1)
    order = np.argsort(lo, kind="stable")
    first = np.searchsorted(lo[order], np.arange(distinct.size + 1))
    final, T2 = np.empty(starts.shape), np.empty(len(M), dtype=np.int64)
    fused(distinct.copy(), 2 * ETA, EPS, lo, first, order, inverse[:, 0].copy(),
          inverse[:, 1].copy(), final, T2)
    return T1, T2, _margin_forgetting(d1, scale, starts, final)


def _loss(z):
    a = np.exp(z - z.max(axis=-2, keepdims=True))
    a /= a.sum(axis=-2, keepdims=True)
    r = a - np.eye(z.shape[-1])
    return 0.5 * (r * r).sum(axis=-2) / z.shape[-1]


def torch_peer(M: np.ndarray):
    import torch
    torch.set_num_threads(1)
    K = M.shape[-1]
    eye = torch.eye(K, dtype=torch.float64)

    def run(x):
        steps = torch.full((x.shape[0],), -1, dtype=torch.int64)
        t = 0
        while True:
            a = torch.softmax(x, dim=1)
            r = a - eye
            e = 0.5 * (r * r).sum(dim=1)
            newly = (e <= EPS).all(dim=1) & (steps < 0)
            steps[newly] = t
            if bool((steps >= 0).all()):
                return x, steps
            g = a * (r - (a * r).sum(dim=1, keepdim=True)) * (ETA / K)
            g[steps >= 0] = 0.0
            x = x - g
            t += 1

    with torch.no_grad():
        z1, T1 = run(torch.zeros((1, K, K), dtype=torch.float64))
        Mt = torch.from_numpy(M)
        z0 = Mt.transpose(1, 2) @ z1 @ Mt
        z, T2 = run(z0.clone())
        src = z1 + Mt @ (z - z0) @ Mt.transpose(1, 2)
    return int(T1[0]), T2.numpy(), _loss(src.numpy()) - _loss(z1[0].numpy())


def jax_peer(M: np.ndarray):
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    K = M.shape[-1]
    eye = jnp.eye(K)

    def one(z):
        def errors(z):
            a = jax.nn.softmax(z, axis=0)
            r = a - eye
            return a, r, 0.5 * (r * r).sum(axis=0)

        def cond(state):
            return ~(errors(state[0])[2] <= EPS).all()

        def body(state):
            z, t = state
            a, r, _ = errors(z)
            return z - a * (r - (a * r).sum(axis=0)) * (ETA / K), t + 1

        return jax.lax.while_loop(cond, body, (z, 0))

    batched = jax.jit(jax.vmap(one))
    z1, T1 = jax.jit(one)(jnp.zeros((K, K)))
    Mj = jnp.asarray(M)
    z0 = jnp.swapaxes(Mj, 1, 2) @ z1 @ Mj
    z, T2 = batched(z0)
    src = z1 + Mj @ (z - z0) @ jnp.swapaxes(Mj, 1, 2)
    return int(T1), np.asarray(T2), _loss(np.asarray(src)) - _loss(np.asarray(z1))


_NUMBA = {}


def numba_peer(M: np.ndarray, threads: int):
    import numba
    if "kernel" not in _NUMBA:
        @numba.njit(cache=True)
        def descend_one(z, eta, eps, max_steps):
            K = z.shape[0]
            a = np.empty((K, K))
            for t in range(max_steps + 1):
                done = True
                for k in range(K):
                    top = z[0, k]
                    for n in range(1, K):
                        top = max(top, z[n, k])
                    s = 0.0
                    for n in range(K):
                        a[n, k] = math.exp(z[n, k] - top)
                        s += a[n, k]
                    e = 0.0
                    for n in range(K):
                        a[n, k] /= s
                        r = a[n, k] - (1.0 if n == k else 0.0)
                        e += r * r
                    if 0.5 * e > eps:
                        done = False
                if done:
                    return t
                for k in range(K):
                    S = 0.0
                    for n in range(K):
                        S += a[n, k] * (a[n, k] - (1.0 if n == k else 0.0))
                    for n in range(K):
                        r = a[n, k] - (1.0 if n == k else 0.0)
                        z[n, k] -= (r - S) * a[n, k] * (eta / K)
            return -1

        @numba.njit(parallel=True, cache=True)
        def finetune(z0, eta, eps, max_steps):
            B = z0.shape[0]
            T = np.empty(B, dtype=np.int64)
            for b in numba.prange(B):
                T[b] = descend_one(z0[b], eta, eps, max_steps)
            return T

        _NUMBA["kernel"] = (descend_one, finetune)
    descend_one, finetune = _NUMBA["kernel"]
    numba.set_num_threads(threads)
    K = M.shape[-1]
    z1 = np.zeros((K, K))
    T1 = descend_one(z1, ETA, EPS, 10**7)
    z0 = np.swapaxes(M, 1, 2) @ z1 @ M
    z = z0.copy()
    T2 = finetune(z, ETA, EPS, 10**7)
    src = z1 + M @ (z - z0) @ np.swapaxes(M, 1, 2)
    return int(T1), T2, _loss(src) - _loss(z1)


# --- the comparison -------------------------------------------------------------------

def peers():
    out = [("batched NumPy, (K, K, B) layout", numpy_peer),
           ("batched NumPy, buffers reused", buffered_peer),
           ("NumPy on K = 2 scalar margins, distinct starts", margin_peer)]
    try:
        import torch  # noqa: F401
        out.append(("batched PyTorch, analytic gradient, 1 thread", torch_peer))
    except ImportError:
        print("skipped: PyTorch peer (pip install torch==2.13.0)")
    try:
        import jax  # noqa: F401
        out.append(("JAX jit(vmap(while_loop)), x64", jax_peer))
    except ImportError:
        print("skipped: JAX peer (pip install jax jaxlib)")
    try:
        import numba  # noqa: F401
        out.append(("Numba, K = 2 margins, one fused lockstep pass, 1 thread",
                    fused_margin_peer))
        out.append(("Numba, fused loop per configuration, 1 thread",
                    lambda M: numba_peer(M, 1)))
        if (os.cpu_count() or 1) >= 2:
            out.append(("Numba, fused loop per configuration, 2 threads",
                        lambda M: numba_peer(M, 2)))
    except ImportError:
        print("skipped: Numba peer (pip install numba)")
    return out


def best(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def oodcalc_dynamics(grid):
    """What the peers compute (T1, T2, F_k), through oodcalc's own dynamics: the sweep
    without its other columns (OOD loss, regimes, D_k, directions) and table."""
    from oodcalc.sweep import _compiled_margins_pay, _compiled_pays, _pretrain
    z1, T1, _ = _pretrain(grid, 10**7)
    z0 = ood_start(z1, grid.M)
    ft = descend_columns(z0, grid.eta_ft, grid.eps, 10**7,
                         compiled=_compiled_pays([grid], [(T1, None)]),
                         compiled_margins=_compiled_margins_pay([grid], [(T1, None)]))
    before = conditional_errors(z1[:1]) / grid.K
    return T1, ft.steps, conditional_errors(source_logits(z1, grid.M, z0, ft.z)) / grid.K \
        - before


def margin_steps(grids, T2) -> int | None:
    """The work of the margin engines: each distinct margin of a grid whose columns are all
    margins (own logit, K−1 equal others) is evaluated at steps 0 to the last stop (T2)
    among the configurations that use it; None when some column is not a margin."""
    from oodcalc.sweep import _pretrain
    total, start = 0, 0
    for g in grids:
        z0 = ood_start(_pretrain(g, 10**7)[0], g.M)
        K = g.K
        x = z0.transpose(0, 2, 1)                            # x[b, k, n]: column k
        own = x[:, np.arange(K), np.arange(K)]
        others = np.where(np.eye(K, dtype=bool), np.nan, x)
        if not (np.nanmax(others, axis=2) == np.nanmin(others, axis=2)).all():
            return None
        margins = own - np.nanmax(others, axis=2)
        _, inverse = np.unique(margins, return_inverse=True)
        need = np.zeros(inverse.max() + 1, dtype=np.int64)
        np.maximum.at(need, inverse.ravel(), np.repeat(np.asarray(T2[start:start + len(g)]), K))
        total, start = total + int((need + 1).sum()), start + len(g)
    return total


def exp_ns() -> tuple[float, str]:
    """Nanoseconds per exp, vectorised, on 2¹⁵ values in cache: the faster of NumPy's
    ``np.exp`` and (with Numba) a loop of oodcalc's ``exp_neg``, best of 200."""
    x = -np.random.default_rng(0).uniform(0.0, 8.0, 1 << 15)
    out = np.empty_like(x)
    found = [(best(lambda: np.exp(x, out=out), 200)[0] / x.size * 1e9, "np.exp")]
    try:
        import numba
        from oodcalc.finetune._kernels import exp_neg

        @numba.njit(cache=True)
        def loop(x, out):
            for i in range(x.size):
                out[i] = exp_neg(x[i])
        loop(x, out)
        found.append((best(lambda: loop(x, out), 200)[0] / x.size * 1e9,
                      "a Numba loop of exp_neg"))
    except ImportError:
        pass
    return min(found)


def compare(title, grids, repeat):
    grids = grids if isinstance(grids, list) else [grids]
    sweep(grids)                                             # warm up
    t_ood, ours = best(lambda: sweep(grids), repeat)
    rows = [["oodcalc sweep (every column of the table)", f"{t_ood:.3f} s", "1", load()]]
    t_dyn, results = best(lambda: [oodcalc_dynamics(g) for g in grids], repeat)
    check(ours, grids, results, "oodcalc dynamics")
    rows.append(["oodcalc, the peers' outputs only (T1, T2, F_k)", f"{t_dyn:.3f} s",
                 f"{t_dyn / t_ood:.2f}", load()])
    timed = {}
    for name, peer in peers():
        def run_all():
            return [peer(g.M) for g in grids]
        try:
            run_all()                                        # compile / warm up
        except NotImplementedError as why:
            rows.append([name, "n/a", str(why), ""])
            continue
        t, results = best(run_all, repeat)
        check(ours, grids, results, name)
        timed[name] = t
        rows.append([name, f"{t:.3f} s", f"{t / t_ood:.2f}", load()])
    work = margin_steps(grids, ours["T2"])
    if work is not None:
        ns, how = exp_ns()
        limit = work * ns * 1e-9
        rows.append([f"limit: {work:,} distinct margin-steps × {ns:.2f} ns (one vectorised "
                     f"exp each, {how})", f"{limit:.3f} s", f"{limit / t_ood:.2f}", load()])
    print(f"\n### {title}\n\n{len(ours):,} configurations; every peer agrees (T1, T2 "
          f"identical, |ΔF_k| <= {AGREE:g}); best of {repeat}; oodcalc's engine: "
          f"{ours.meta['engine']}\n")
    print(table(["implementation", "best time", "time / oodcalc", "load"], rows))
    strongest = min(timed, key=timed.get)
    print(f"\noodcalc sweep against the strongest peer ({strongest}): "
          f"{t_ood / timed[strongest]:.2f}×"
          + (f"; against the limit: {t_ood / limit:.1f}×" if work is not None else
             "; limit: n/a (not every column is a margin)"))


def check(ours, grids, results, name) -> None:
    """T1 and T2 identical to the sweep's on every configuration, F_k within AGREE."""
    start = 0
    for g, (T1, T2, F) in zip(grids, results):
        stop = start + len(g)
        assert (ours["T1"][start:stop] == T1).all(), name
        assert np.array_equal(ours["T2"][start:stop], np.asarray(T2)), name
        Fk = np.stack([ours[f"F_{k + 1}"][start:stop] for k in range(g.K)], axis=1)
        assert np.abs(Fk - F).max() <= AGREE, (name, np.abs(Fk - F).max())
        start = stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=201)
    parser.add_argument("--k8", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    try:   # loaded, as the Numba peers load it: oodcalc's compiled paths are then in play
        import numba  # noqa: F401
    except ImportError:
        pass
    g = np.linspace(-1, 1, args.n)
    compare(f"{args.n}×{args.n} K = 2 phase diagram", gamma_grid([g, g]), args.repeat)
    rng = np.random.default_rng(0)
    gammas = rng.uniform(-1, 1, size=(args.k8, 8))
    geos = [__import__("oodcalc").parallel_shift(row) for row in gammas]
    from oodcalc.sweep import geometry_grid
    compare(f"K = 8, {args.k8:,} random γ", geometry_grid(geos), max(1, args.repeat - 2))
    thetas = np.linspace(0, math.pi / 2, 46)
    compare("θ × K sweep (46 angles, K = 2, 4, 8, 16, 32)",
            [theta_grid(thetas, K) for K in (2, 4, 8, 16, 32)], 1)


if __name__ == "__main__":
    main()
