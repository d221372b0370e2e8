"""The cost model: how many steps, how much memory and how long a run needs, before
running it.

Plain functions of numbers (no Setting needed: this module sits below it and imports
only the closed forms), used by :mod:`oodcalc.limits`, which refuses what is out of
reach, and by the engines themselves (``predict`` sizes its trajectories from them):

* :func:`pretrain_steps` ``(K, eps, eta)``: the gradient-flow estimate of T1;
* :func:`column_steps` ``(z, eps, eta)``: of the steps until every column of the logits
  ``z`` meets the rule (fine-tuning: ``z`` = the OOD logits at T1);
* :func:`steps_from_margin` ``(K, eps, eta, margin)``: the same on the symmetric ray,
  from a given margin (natural log available through :func:`log_steps_from_margin`,
  for starts so bad that the count overflows a float);
* :func:`finetune_log_steps` ``(K, eps, eta_ft, ...)``: fine-tuning's steps from the
  pretrained logits at the threshold α*, for a diagonal ``M`` without any K × K array;
* :func:`dynamics_bytes` ``(K, columns)``, :func:`trajectory_bytes` ``(K, steps)``: memory;
* one ``*_bytes`` function per entry point (:func:`predict_bytes`, :func:`population_bytes`,
  :func:`prompts_bytes`, :func:`sweep_bytes`, the figures'...): the memory it will hold;
* :data:`SECONDS_PER_UPDATE`: what each fine-tuning engine costs per logit update.

The estimate integrates the margin's gradient flow ``ds/dt = η h(s)`` on the symmetric ray
(own logit against K−1 equal others; a general column enters through its effective margin,
the own logit minus the log-mean-exp of the others). For the default protocol it is within
1 % of the exact T1 (``tests/test_fast_paths.py`` checks K = 2..64); with large
steps it is a lower bound of the right order. Every function is cheap (microseconds to a
millisecond).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .finetune import compiled, ray_leap
from .model import features_last, matrices_first
from .theory import alpha_star, centred_gram_spectrum, stopping_margin

__all__ = [
    "BASE_BYTES", "COMPILED_FROM_WORK", "COMPILED_LOAD_SECONDS", "CURVE_BYTES",
    "DEPTH_LAYER_BYTES", "DEPTH_PROMPT_BYTES", "DEPTH_RECORD_BYTES", "ENGINES", "FLOAT",
    "K3_SLICE_BYTES", "Plan", "RAY_COMPILED_FROM_STEPS", "SECONDS_PER_CURVE",
    "SECONDS_PER_RAY_STEP", "SECONDS_PER_RECORDED_STEP", "SECONDS_PER_SNAPSHOT",
    "SECONDS_PER_STEP", "SECONDS_PER_UPDATE", "SEQUENCE_SECONDS_PER_PRODUCT",
    "SEQUENCE_SECONDS_PER_STEP", "SIMULATOR_SECONDS", "TERMS_PROBE_FROM_SECONDS",
    "TERMS_PROBE_SHARE", "TERMS_PROBE_STEPS", "TERMS_PROBE_WORK", "TERMS_SECONDS_PER_STEP",
    "TORCH_BYTES", "TRAJECTORY_BYTES", "WORKER_BYTES", "column_log_steps", "column_steps",
    "compiled_pays", "depth_bytes", "dynamics_bytes", "effective_margins", "eps_for_steps",
    "exp_steps", "figure_bytes", "finetune_log_steps", "finetune_plan", "finetune_seconds",
    "format_steps", "geometry_bytes", "gram_scale", "k3_figure_bytes",
    "log_steps_from_margin", "margin_rate", "ood_vs_theta_bytes", "phase_diagram_bytes",
    "population_bytes", "precision_bytes", "predict_bytes", "predict_seconds",
    "pretrain_steps", "prompts_bytes", "ray_compiled", "ray_leaps", "ray_seconds",
    "reproduce_bytes", "resolving_eta", "sequence_seconds", "simulation_log_steps",
    "simulation_seconds", "simulation_steps", "step_at_threshold", "steps_from_margin", "steps_held",
    "sweep_bytes", "sweep_row_bytes", "terms_log_steps", "terms_probe_steps",
    "terms_seconds", "trajectory_bytes", "trajectory_curves", "trajectory_plot_bytes",
]


#: Natural log of the largest step count we express as a float.
_LOG_MAX = math.log(1e300)


def margin_rate(s: np.ndarray | float, K: int) -> np.ndarray:
    """``h(s)``: the margin's change per step per unit η on the ray, at margin ``s``.

    With ``u = (K−1)e^{−s}``, ``p = 1/(1+u)`` (own attention), ``q = (1−p)/(K−1)``,
    ``S = Σ a r = (K−1)q² − p(1−p)``: ``h = [q(q − S) + p(1 − p + S)]/K``.
    """
    s = np.asarray(s, dtype=np.float64)
    m = K - 1.0
    u = m * np.exp(-np.maximum(s, -700.0))
    p = 1.0 / (1.0 + u)
    rest = u * p
    q = rest / m
    S = m * q * q - p * rest
    return (q * (q - S) + p * (rest + S)) / K


def _log_inverse_rate(s: np.ndarray, K: int) -> np.ndarray:
    """``log(1/h(s))``, with the saturated asymptote ``h ≈ p(1 + 1/m)/K`` far below."""
    m = K - 1.0
    far = s < -30.0
    out = np.empty_like(s)
    out[~far] = -np.log(margin_rate(s[~far], K))
    # p ≈ e^{s}/m: log(1/h) = −s + log m − log(1 + 1/m) + log K
    out[far] = -s[far] + math.log(m) - math.log1p(1.0 / m) + math.log(K)
    return out


def log_steps_from_margin(K: int, eps: float, eta: float, margin: float) -> float:
    """Natural log of the gradient-flow steps from ``margin`` to the stopping margin
    (``-inf`` when ``margin`` already meets the rule)."""
    target = stopping_margin(K, eps)
    if margin >= target:
        return -math.inf
    parts = []
    low = margin
    if low < -30.0:            # ∫ C e^{−s} ds from margin to −30, in closed form
        logC = math.log(K - 1.0) - math.log1p(1.0 / (K - 1.0)) + math.log(K)
        parts.append(logC - low + math.log(-math.expm1(low - min(target, -30.0))))
        low = -30.0
    if target > low:
        s = np.linspace(low, target, 2001)
        f = _log_inverse_rate(s, K)
        w = np.full(s.size, (target - low) / (s.size - 1))
        w[[0, -1]] /= 2
        top = f.max()
        parts.append(top + math.log(float(np.sum(w * np.exp(f - top)))))
    return float(np.logaddexp.reduce(parts)) - math.log(eta)


def steps_from_margin(K: int, eps: float, eta: float, margin: float) -> float:
    """Estimated steps from ``margin`` (``inf`` past 1e300, 0 if already below ε)."""
    log_t = log_steps_from_margin(K, eps, eta, margin)
    return 0.0 if log_t == -math.inf else (math.exp(log_t) if log_t < _LOG_MAX else math.inf)


def pretrain_steps(K: int, eps: float, eta: float) -> float:
    """Estimated T1 from Q = 0 (margin 0)."""
    return steps_from_margin(K, eps, eta, 0.0)


def effective_margins(z: np.ndarray) -> np.ndarray:
    """Per column k of ``z`` (K×K): ``z[k,k] − log(mean_{n≠k} e^{z[n,k]})``, the margin of
    the two-valued column with the same own attention."""
    x = matrices_first(z, copy=True)                  # x[n, k, ...]
    K = x.shape[0]
    diagonal = np.arange(K)
    own = x[diagonal, diagonal]
    x[diagonal, diagonal] = -np.inf                   # the others of each column
    top = x.max(axis=0)
    x -= top
    np.exp(x, out=x)
    lse = top + np.log(x.sum(axis=0))
    return features_last(own - lse + math.log(K - 1))


def column_log_steps(z: np.ndarray, eps: float, eta: float) -> np.ndarray:
    """Per column of ``z`` (K×K): natural log of the estimated steps to ``e <= ε``."""
    K = z.shape[-1]
    # once per distinct margin (a rotation's K columns share one: K = 1024, 0.3 s → 1 ms)
    margins, inverse = np.unique(effective_margins(z), return_inverse=True)
    return np.array([log_steps_from_margin(K, eps, eta, float(s)) for s in margins]
                    ).reshape(-1)[inverse.reshape(-1)]


def column_steps(z: np.ndarray, eps: float, eta: float) -> float:
    """Estimated steps until every column of ``z`` meets the rule (their maximum)."""
    log_t = float(column_log_steps(z, eps, eta).max())
    return 0.0 if log_t == -math.inf else (math.exp(log_t) if log_t < _LOG_MAX else math.inf)


def gram_scale(G: np.ndarray) -> float:
    """How much overlapping features slow the dynamics: the smallest eigenvalue ``c`` of
    the Gram matrix on the directions the errors live in
    (:func:`oodcalc.theory.centred_gram_spectrum`). The errors scale by ``c`` and the
    steps by ``c³`` where ``G`` acts there as ``c I`` (equal overlaps, every K = 2): the
    step estimates read ``ε/c`` and ``η c³``."""
    return float(centred_gram_spectrum(G)[0])


def step_at_threshold(K: int, eps: float, eta: float) -> float:
    """The change of α in one GD step at the threshold α* (on the ray α = (K−1)s/K)."""
    return eta * float(margin_rate(stopping_margin(K, eps), K)) * (K - 1) / K


def resolving_eta(K: int, eps: float, steps: int = 10) -> float:
    """The step size at which the fastest part of pretraining still takes ``steps``
    steps to reach the threshold margin: ``s*/(steps · max h)``."""
    target = stopping_margin(K, eps)
    if target <= 0:
        return math.inf
    s = np.linspace(0.0, target, 512)
    return target / (steps * float(margin_rate(s, K).max()))


def dynamics_bytes(K: int, columns: int | None = None) -> int:
    """Working memory of the K×K dynamics: about eight float64 arrays of the logits'
    size (state, attention, residual, gradient, the source view and temporaries)."""
    columns = K if columns is None else columns
    return 8 * 8 * K * columns


def trajectory_bytes(K: int, steps: int) -> int:
    """One K×K float64 matrix per recorded step."""
    return 8 * K * K * (int(steps) + 1)


def format_steps(log_steps: float) -> str:
    """``2.6e+12``, ``10^4886`` or ``10^(2e+152)`` for a natural-log step count."""
    if log_steps < _LOG_MAX:
        return f"{math.exp(log_steps):,.0f}" if log_steps < math.log(1e7) \
            else f"{math.exp(log_steps):.2g}"
    digits = log_steps / math.log(10)
    return f"10^{digits:.0f}" if digits < 1e6 else f"10^({digits:.2g})"


def eps_for_steps(K: int, eta: float, steps: float, margin: float = 0.0) -> float:
    """The smallest ε (to 1 %) whose estimated steps from ``margin`` fit in ``steps``."""
    lo, hi = math.log(1e-300), math.log(0.5)
    if steps_from_margin(K, math.exp(hi), eta, margin) > steps:
        return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if steps_from_margin(K, math.exp(mid), eta, margin) > steps:
            lo = mid
        else:
            hi = mid
    return math.exp(hi) * 1.01


# --- fine-tuning from the threshold, before pretraining ---------------------------------

#: Logits computed at once by :func:`finetune_log_steps` (a block of columns): bounds its
#: memory to a few MiB whatever K.
_BLOCK = 1 << 18


def _min_margin_diagonal(gamma: np.ndarray, alpha: float, beta: float) -> tuple[float, int]:
    """The smallest effective margin over the columns of ``Mᵀ Z M`` for ``M = diag(γ)`` and
    ``Z`` on the ray ``(α, β)``, and its column, a block of columns at a time: column k
    is ``γ_k² α`` on the diagonal and ``γ_n γ_k β`` elsewhere."""
    K = gamma.size
    worst, where = math.inf, 0
    step = max(1, _BLOCK // K)
    for start in range(0, K, step):
        ks = np.arange(start, min(K, start + step))
        others = (beta * gamma[ks])[:, None] * gamma[None, :]
        others[np.arange(ks.size), ks] = -np.inf
        top = others.max(axis=1)
        lse = top + np.log(np.exp(others - top[:, None]).sum(axis=1))
        margins = alpha * gamma[ks] ** 2 - lse + math.log(K - 1)
        i = int(np.argmin(margins))
        if margins[i] < worst:
            worst, where = float(margins[i]), int(ks[i])
    return worst, where


def finetune_log_steps(K: int, eps: float, eta_ft: float, *,
                       diagonal: np.ndarray | None = None,
                       M: np.ndarray | None = None,
                       eps_ft: float | None = None,
                       alpha: float | None = None) -> tuple[float, int, float]:
    """Natural log of the estimated fine-tuning steps from the pretrained logits at the
    threshold α* (``Z^(T1)`` is within one GD step of them), before pretraining has run:
    ``(log steps, the slowest OOD column, its effective margin)``. ``eps`` is
    pretraining's (it sets α*), ``eps_ft`` fine-tuning's (default ``eps``).

    Give ``diagonal`` (``diag M`` when ``M = VᵀU`` is diagonal: parallel shifts,
    rotations, orthogonal subspaces; no K × K array is formed) or ``M``; ``alpha``, the
    pretrained α where it is known (a coarse step passes α* by far), else α*."""
    a = alpha_star(K, eps) if alpha is None else alpha
    b = -a / (K - 1)
    if diagonal is not None:
        margin, worst = _min_margin_diagonal(np.asarray(diagonal, dtype=np.float64), a, b)
    else:
        M = np.asarray(M, dtype=np.float64)
        z = b * np.ones((K, K)) + (a - b) * np.eye(K)
        margins = effective_margins(M.T @ z @ M)
        worst = int(np.argmin(margins))
        margin = float(margins[worst])
    return (log_steps_from_margin(K, eps if eps_ft is None else eps_ft, eta_ft, margin),
            worst, margin)


# --- time: the fine-tuning engines --------------------------------------------------------

#: The K×K fine-tuning engines, and the seconds each takes per logit update on one core
#: (measured on a 2-core Xeon; ``benchmarks/bench_predict.py`` prints the estimates beside
#: its measured times), for messages only.
ENGINES = {"compiled": "per-column kernel (Numba)", "numpy": "K×K descent (NumPy)"}
SECONDS_PER_UPDATE = {"compiled": 3.5e-9, "numpy": 3e-8}
#: ... and the seconds each spends per step whatever K (NumPy's calls, predict's source
#: view): what a small K costs (K = 2, 242,591 steps: 80 s at load 3)
SECONDS_PER_STEP = {"compiled": 1e-7, "numpy": 2e-4}
#: From this K on the compiled kernel takes each column's other logits through a few
#: nodes (``oodcalc.finetune._kernels.NODES_FROM_K``; the tests check the two agree): a
#: column's step then costs about this many seconds of CPU whatever K (K = 256, 6-7 nodes:
#: 82-97 ns at load 10, 2026-12-05; the direct kernel's K logits: ~460 ns).
NODES_FROM_K = 48
SECONDS_PER_NODE_COLUMN = 1e-7
#: NumPy's step on a short run, whose source view is read off the recorded path at once
#: (K = 2, 10^5 steps: 4.0 s of CPU), and what the compiled kernel spends on each step it
#: keeps (K = 2, 10^5 steps, every one kept: 10.9 s; 10^6 steps: 47 s; 10^7: 58 s).
SECONDS_PER_RECORDED_STEP = 4e-5
SECONDS_PER_SNAPSHOT = 1e-4


#: Seconds per step of the symmetric ray's scalar recurrence (pretraining, and fine-tuning
#: when M = cI), plain and compiled: measured 0.51 and 0.025 µs on a quiet 2-core Xeon
#: (2026-12-02, K = 256 and 1024), doubled for a loaded machine; for messages only.
SECONDS_PER_RAY_STEP = {"python": 1e-6, "compiled": 5e-8}
#: Importing Numba and loading the compiled loop from its cache (measured 0.4 s).
COMPILED_LOAD_SECONDS = 1.0
#: The compiled ray loop pays for that load from this many steps on, or from a tenth of
#: it once Numba is imported anyway.
RAY_COMPILED_FROM_STEPS = 2_000_000
#: A ray of this many steps goes to the step counter (oodcalc.finetune.ray_leap) when its
#: step scale allows it: 1-2 ms whatever the steps, against 0.1 s of the plain loop here.
RAY_LEAP_FROM_STEPS = 100_000
RAY_LEAP_SECONDS = 0.005


def ray_compiled(steps: float, loaded: bool) -> bool:
    """Whether a ray run of about ``steps`` goes to the compiled loop (when Numba is
    there; ``loaded``: it is imported already) if it is not leapt: the one rule for the run
    and its estimate."""
    return steps >= RAY_COMPILED_FROM_STEPS / (10 if loaded else 1)


def ray_leaps(K: int, eta: float, steps: float) -> bool:
    """Whether a ray run of about ``steps`` at (K, η) goes to the step counter (which
    still hands a too-close-to-call case back to the loop)."""
    return steps >= RAY_LEAP_FROM_STEPS and ray_leap.takes(K, eta)


def ray_seconds(K: int, eta: float, steps: float, compiled_available: bool,
                loaded: bool = False) -> float:
    """Seconds a ray run of ``steps`` takes on the engine the run picks (the step counter,
    else :func:`ray_compiled`'s choice)."""
    if ray_leaps(K, eta, steps):
        return RAY_LEAP_SECONDS
    if compiled_available and ray_compiled(steps, loaded):
        return (0.0 if loaded else COMPILED_LOAD_SECONDS) + \
            steps * SECONDS_PER_RAY_STEP["compiled"]
    return steps * SECONDS_PER_RAY_STEP["python"]


#: The per-column kernel pays for loading Numba (about a second) from this many logit
#: updates (T2 × K²) whatever the steps: predict's NumPy path, which follows the source
#: view at every step, does about 1e7 a second.
COMPILED_FROM_WORK = 1e7


def compiled_pays(K: int, steps: float) -> bool:
    """Whether a diagonal fine-tuning of ``steps`` steps on K × K logits goes to the
    compiled kernel (when Numba is there): past ``COMPILED_FROM_WORK`` updates, or where
    the time it saves over NumPy repays loading it (at K = 2 NumPy's time is its calls, not
    its updates: 10^6 steps, 4e6 updates, took 117 s by NumPy, 10^7 steps 58 s compiled).
    The one rule for predict and for its estimates."""
    if steps * K * K >= COMPILED_FROM_WORK:
        return True
    log_steps = math.log(steps) if steps > 0 else -math.inf
    return finetune_seconds(K, log_steps, "numpy") > \
        COMPILED_LOAD_SECONDS + finetune_seconds(K, log_steps, "compiled")


class Plan(NamedTuple):
    """How ``predict`` will fine-tune (:func:`finetune_plan`)."""

    log_steps: float     # natural log of the estimated steps
    engine: str          # a key of ENGINES
    faster: bool         # the NumPy descent where Numba's kernel would run (it is missing)


def finetune_plan(K: int, protocol, *, diagonal: np.ndarray | None = None,
                  M: np.ndarray | None = None, compiled_available: bool = False,
                  alpha: float | None = None) -> Plan | None:
    """How ``predict`` will fine-tune, a :class:`Plan`, or ``None`` when it runs by the
    scalar recurrence (``M = cI``) or nothing is known of M. The compiled engine applies to a diagonal M with enough work
    (:func:`compiled_pays`), when Numba is there (``compiled_available``); ``alpha`` as for
    :func:`finetune_log_steps`."""
    if diagonal is None and M is not None:
        M = np.asarray(M)
        if not (M - np.diag(np.diag(M))).any():
            diagonal = np.diag(M)
    if diagonal is None and M is None:
        return None
    if diagonal is not None and np.all(np.asarray(diagonal) == diagonal[0]):
        return None
    if protocol.ft_steps is not None:
        log_t2 = math.log(protocol.ft_steps) if protocol.ft_steps else -math.inf
    else:
        log_t2 = finetune_log_steps(K, protocol.eps, protocol.eta_ft, diagonal=diagonal,
                                    M=M, eps_ft=protocol.eps_ft, alpha=alpha)[0]
    pays = diagonal is not None and compiled_pays(K, exp_steps(log_t2))
    fast = pays and compiled_available
    return Plan(log_t2, "compiled" if fast else "numpy", pays and not compiled_available)


def predict_seconds(K: int, protocol, plan: Plan | None,
                    compiled_available: bool = False) -> float:
    """Seconds ``predict`` will take, to the order of magnitude (for messages): pretraining
    on the ray plus the fine-tuning ``plan`` (:func:`finetune_plan`) on its engine."""
    steps = pretrain_steps(K, protocol.eps, protocol.eta)
    if not protocol.auto_steps:                # an auto cap is raised to fit the run
        steps = min(steps, float(protocol.max_steps))
    seconds = ray_seconds(K, protocol.eta, steps, compiled_available)
    if plan is None:   # fine-tuning on the ray too, at most as long (Numba loaded if used)
        loaded = compiled_available and not ray_leaps(K, protocol.eta, steps) and \
            ray_compiled(steps, loaded=False)
        return seconds + ray_seconds(K, protocol.eta_ft, steps, compiled_available, loaded)
    return seconds + finetune_seconds(K, plan.log_steps, plan.engine)


def finetune_seconds(K: int, log_steps: float, engine: str) -> float:
    """Seconds a K×K fine-tuning of ``e^log_steps`` steps takes on ``engine`` (a key of
    :data:`ENGINES`; the compiled kernel shares the columns out over its threads), with
    what its kept trajectory costs: NumPy's short runs take the whole recorded path at once
    (``SECONDS_PER_RECORDED_STEP``), the compiled kernel hands each kept step to Python
    (``SECONDS_PER_SNAPSHOT``, up to the trajectory budget)."""
    steps = exp_steps(log_steps)
    threads = compiled.expected_threads() if engine == "compiled" else 1
    per_step = SECONDS_PER_STEP[engine]
    extra = 0.0
    if engine == "numpy" and 4 * 8 * K * K * (steps + 1) <= TRAJECTORY_BYTES / 3:
        per_step = SECONDS_PER_RECORDED_STEP      # prediction._finetune_recorded
    if engine == "compiled":
        kept = TRAJECTORY_BYTES * 2 / 3 // (3 * 8 * K * K)   # prediction._snapshot_store
        extra = min(steps + 1, kept) * SECONDS_PER_SNAPSHOT
    per_column = K * SECONDS_PER_UPDATE[engine]
    if engine == "compiled" and K >= NODES_FROM_K:
        per_column = SECONDS_PER_NODE_COLUMN
    return steps * (per_step + K * per_column / threads) + extra


#: The terms engine (fine-tuning with interventions, :mod:`oodcalc.finetune.engine`) has
#: no closed-form step count: predict runs it this many steps first (a probe) and
#: extrapolates (:func:`terms_log_steps`); fewer for a large K (``TERMS_PROBE_WORK``
#: logit updates at most, 10 steps at least).
TERMS_PROBE_STEPS = 1000
TERMS_PROBE_WORK = 1e8
#: ... doubled while it extrapolates past twice the cap, up to this fraction of the cap
#: (a refused run costs at most about a fiftieth of running its cap out).
TERMS_PROBE_SHARE = 50
#: ... and not run at all when the whole cap would take at most this many seconds.
TERMS_PROBE_FROM_SECONDS = 2.0
#: Seconds per step of the terms engine in predict (its source view read every step):
#: K = 2, 20,000 steps of --project both --replay 0.2: 2.6 s on a loaded 2-core Xeon;
#: and per logit update, as the NumPy descent's.
TERMS_SECONDS_PER_STEP = 1.3e-4


def terms_probe_steps(K: int) -> int:
    return int(max(10, min(TERMS_PROBE_STEPS, TERMS_PROBE_WORK // (K * K))))


def terms_log_steps(t: int, e_half: float, e_end: float, eps: float) -> float:
    """Log of the steps at which the largest movable error meets ``eps``, extrapolated from
    a probe that did not stop: ``e(t) ≈ A t^−p`` fitted through ``e(t/2)`` and ``e(t)``,
    so ``T ≈ t (e(t)/eps)^(1/p)``, ``p = log₂(e(t/2)/e(t))``. An error that did not
    fall (``p <= 0``) gives ``inf``: the rule looks out of reach. Gradient descent on a
    softmax error slows down, never speeds up, as it converges, so this is an estimate,
    not a bound (a run settling on a floor above ``eps`` reads as a very large T)."""
    if not (e_end > eps and e_half > 0 and e_end > 0):
        return math.log(max(t, 1))
    p = math.log2(e_half / e_end)
    if p <= 0:
        return math.inf
    return math.log(t) + math.log(e_end / eps) / p


def terms_seconds(K: int, log_steps: float) -> float:
    return exp_steps(log_steps) * (TERMS_SECONDS_PER_STEP + K * K * SECONDS_PER_UPDATE["numpy"])


#: A step of a sequence's engine (:mod:`oodcalc.finetune.sequence`) on S + 1 domains:
#: NumPy's calls, and per multiply-add of its ``2 (S+1)`` K×K products (measured on a
#: loaded 2-core Xeon: K = 2, S = 2: 44 µs a step; K = 50: 0.25 ms; K = 200: 39 ms).
SEQUENCE_SECONDS_PER_STEP = 4e-5
SEQUENCE_SECONDS_PER_PRODUCT = 6e-10


def sequence_seconds(K: int, S: int, pretrain: float, stages: list[float],
                     joint: float, eta: float) -> float:
    """Seconds ``oodcalc.sequence`` takes for ``pretrain`` ray steps, the ``stages``' steps
    (each one domain's gradient) and the joint reference's ``joint`` steps (S + 1
    gradients a step)."""
    step = SEQUENCE_SECONDS_PER_STEP + 2 * (S + 1) * K ** 3 * SEQUENCE_SECONDS_PER_PRODUCT
    return ray_seconds(K, eta, pretrain, False) + step * (sum(stages) + (S + 1) * joint)


def exp_steps(log_steps: float) -> float:
    """Steps from their natural log (``0`` for ``-inf``, capped at ``e^700``)."""
    return math.exp(min(log_steps, 700.0)) if log_steps > -math.inf else 0.0


# --- time: the simulators -------------------------------------------------------------------

#: Seconds a simulator's step takes on one core (measured with one BLAS thread, d = 4-512,
#: K = 2-128, N·batch up to 5e5; for messages only): a fixed cost, a term per d²·K of the
#: population errors and gradient (twice while fine-tuning: the source is watched), and the
#: finite-prompt simulator's term per token coordinate (N · batch · d).
SIMULATOR_SECONDS = {"step": 2e-5, "update": 1.5e-9, "token": 3e-8}


def simulation_steps(K: int, protocol, *, diagonal=None, M=None,
                     grams=None) -> tuple[float, float]:
    """The steps a simulator will run per phase: the estimates (fine-tuning from the
    logits at α*), never more than the caps (``ft_steps`` exactly). ``grams``:
    ``(G_V, G_U)`` of overlapping features (:func:`simulation_log_steps`)."""
    log_t1, log_t2 = simulation_log_steps(K, protocol, diagonal=diagonal, M=M, grams=grams)
    t1 = min(float(protocol.max_steps), exp_steps(log_t1))
    if protocol.ft_steps is not None:
        return t1, float(protocol.ft_steps)
    return t1, min(float(protocol.max_steps), exp_steps(log_t2))


def simulation_log_steps(K: int, protocol, *, diagonal=None, M=None,
                         grams=None) -> tuple[float, float]:
    """Logs of the estimated steps of a simulator's two phases (fine-tuning ``nan`` with
    ``ft_steps``). For overlapping features (``grams = (G_V, G_U)``) the orthonormal
    estimates at ``ε/c``, ``η c³`` with ``c`` each set's :func:`gram_scale` (exact for
    pretraining on equal overlaps; predict's rule); fine-tuning from the logits at α* of
    ``ε/c_V``."""
    c_V, c_U = (1.0, 1.0) if grams is None else (gram_scale(grams[0]), gram_scale(grams[1]))
    log_t1 = log_steps_from_margin(K, protocol.eps / c_V, protocol.eta * c_V**3, 0.0)
    if protocol.ft_steps is not None:
        return log_t1, math.nan
    log_t2 = finetune_log_steps(K, protocol.eps / c_V, protocol.eta_ft * c_U**3,
                                diagonal=diagonal, M=M, eps_ft=protocol.eps_ft / c_U)[0]
    return log_t1, log_t2


def simulation_seconds(K: int, d: int, t1: float, t2: float, tokens: float = 0.0) -> float:
    """Seconds a simulator takes for ``t1`` + ``t2`` steps (``tokens``: N · batch of the
    finite-prompt simulator, 0 for the population one), reading the logits off every
    stored Q at the end included."""
    c = SIMULATOR_SECONDS
    population = c["update"] * d * d * K
    step = c["step"] + c["token"] * tokens * d
    return t1 * (step + population) + t2 * (step + 2 * population) \
        + (t1 + 2 * t2) * population


# --- memory: one estimate per entry point ----------------------------------------------------
#
# Each describes the current implementation: when an entry point changes how it stores a
# computation, its estimate here is the one place to update.

FLOAT = 8          # bytes per float64
#: What the interpreter, numpy and the command's own objects hold besides the arrays.
BASE_BYTES = 200 << 20
#: What one worker process costs beyond its share of the rows.
WORKER_BYTES = 150 << 20
#: Trajectories ``predict`` keeps in a report, all phases together (strided beyond).
TRAJECTORY_BYTES = 64 * 2**20


def steps_held(K: int, eps: float, eta: float, max_steps: int) -> float:
    """Steps a phase will run: the estimate, never more than the cap."""
    return min(float(max_steps), pretrain_steps(K, eps, eta)) + 1


def geometry_bytes(d: int, K: int) -> float:
    """V and U (d × K each) and their products."""
    return 2 * d * K * FLOAT * 2


def predict_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                  max_steps: int) -> float:
    """``predict``: the geometry, the K × K dynamics (a few copies of their working set:
    fine-tuning, the source view, the closed forms) and the kept trajectories. Steps cost
    time, not memory: trajectories are strided to their budget."""
    return BASE_BYTES + geometry_bytes(d, K) + 4 * dynamics_bytes(K) + TRAJECTORY_BYTES


def population_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                     max_steps: int, ft_steps: int | None = None) -> float:
    """``simulate_population``: every iterate ``Q`` (d × d) of both phases (fine-tuning
    for exactly ``ft_steps`` steps when given), and the three K × K logit trajectories read
    off them (``simulate.population.logit_path``)."""
    t1 = steps_held(K, eps, eta, max_steps)
    t2 = steps_held(K, eps, eta_ft, max_steps) if ft_steps is None else ft_steps + 1
    return BASE_BYTES + geometry_bytes(d, K) + FLOAT * (d * d * (t1 + t2 + 10)
                                                        + K * K * (t1 + 2 * t2))


def prompts_bytes(K: int, d: int, N: int, batch: int, holdout: int, eps: float, eta: float,
                  eta_ft: float, max_steps: int, heldout: bool,
                  ft_steps: int | None = None) -> float:
    """``simulate_prompts``: a batch of prompts (tokens d-dimensional, a few temporaries
    of it), the held-out samples, and every iterate ``Q`` of both phases."""
    prompts = 4.0 * batch * N * d * FLOAT
    held = 2 * 4.0 * holdout * N * d * FLOAT if heldout else 0.0
    return population_bytes(K, d, eps, eta, eta_ft, max_steps, ft_steps) + prompts + held


def sweep_row_bytes(K: int) -> float:
    """One configuration of a sweep: its M and logits while it runs, its result columns,
    and its share of the CSV text (measured: about 800 bytes per K = 2 row)."""
    return FLOAT * (8 * K * K + 6 * K + 40) + 40 * (20 + 3 * K)


def sweep_bytes(rows_by_K: dict[int, int], workers: int = 1) -> float:
    """``sweep``: every configuration's row (all of them held until written)."""
    rows = sum(n * sweep_row_bytes(K) for K, n in rows_by_K.items())
    return BASE_BYTES + rows + max(0, workers - 1) * WORKER_BYTES


#: What one K = 3 slice adds to its figure (six panels, 12.5 × 8.4 in at 150 dpi: its
#: raster alone is 9.5 MB, and Agg renders through buffers as large): measured, 10 slices
#: of a 5 × 5 grid saved as PNG peaked at 300 MB against 129 MB for 2.
K3_SLICE_BYTES = 24 << 20


def k3_figure_bytes(slices: int) -> float:
    """``plots.phase_k3``: the figure of ``slices`` slices, drawn and saved."""
    return BASE_BYTES + slices * K3_SLICE_BYTES


def phase_diagram_bytes(n: int) -> float:
    """``plots.phase_diagram``: the K = 2 sweep of n × n rows and three n × n images."""
    return sweep_bytes({2: n * n}) + 3 * n * n * FLOAT * 4


#: What matplotlib holds per curve besides its points (measured: a figure of 80,800
#: curves of about 200 points reached 1.15 GB), and the seconds it takes per curve.
CURVE_BYTES = 12 << 10
SECONDS_PER_CURVE = 1.2e-3


def trajectory_curves(figure: str, K: int) -> int:
    """The curves a trajectory figure draws for K features (``"loss_trajectories"``:
    source and OOD per feature; ``"weight_trajectories"``: every logit and the
    conservation pair per feature, in both phases; ``"forgetting_curve"``: F_k and F)."""
    if figure == "forgetting_curve":
        return K + 1
    return 2 * K if figure == "loss_trajectories" else 2 * (K * K + 2 * K)


def figure_bytes(curves: int, points: float) -> float:
    """A figure of ``curves`` curves of ``points`` points (a few copies of each)."""
    return curves * (CURVE_BYTES + points * FLOAT * 6)


def trajectory_plot_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                          max_steps: int, lines: int) -> float:
    """``plots.loss_trajectories`` / ``plots.weight_trajectories``: predict, then ``lines``
    curves through every kept step."""
    steps = steps_held(K, eps, eta, max_steps) + steps_held(K, eps, eta_ft, max_steps)
    kept = min(steps, TRAJECTORY_BYTES / (FLOAT * K * K))
    return predict_bytes(K, d, eps, eta, eta_ft, max_steps) + figure_bytes(lines, kept)


def ood_vs_theta_bytes(K: int, eps: float, eta: float, eta_ft: float, max_steps: int,
                       prompts: int | None) -> float:
    """``plots.ood_vs_theta``: 181 rotations evaluated at T1, and the simulators (d = 2K)."""
    memory = population_bytes(K, 2 * K, eps, eta, eta_ft, max_steps)
    if prompts is not None:
        memory += prompts_bytes(K, 2 * K, prompts, 1024, 0, eps, eta, eta_ft, max_steps,
                                False) - BASE_BYTES
    return memory + 181 * K * K * FLOAT * 4


def reproduce_bytes(eps: float, eta: float, eta_ft: float, prompts: int | None) -> float:
    """``reproduce synthetic``: K = 4, d = 8 settings and, with prompts N, batches of
    1024 prompts of N tokens."""
    memory = population_bytes(4, 8, eps, eta, eta_ft, 10**6)
    if prompts is not None:
        memory += prompts_bytes(4, 8, prompts, 1024, 0, eps, eta, eta_ft, 10**6,
                                False) - BASE_BYTES
    return memory


def precision_bytes(K: int, digits: int) -> float:
    """``predict --precision``: K × K numbers of ``digits`` digits, a few copies."""
    return BASE_BYTES + 20 * K * K * (digits / 2 + 64)


# --- the torch experiments (depth, real text) --------------------------------------------

#: What one process holds once torch is imported (the interpreter, torch's libraries).
TORCH_BYTES = 400 << 20
#: Depth experiment: bytes per evaluation prompt held by a run (source and target prompts,
#: (N + 1) tokens of width 16 in float32, the design and the watched subset: 4 copies).
DEPTH_PROMPT_BYTES = 4 * 17 * 16 * 4
#: Depth experiment: bytes per block while training (a batch of 256 prompts' activations,
#: attention maps and their gradients, the optimizer's state).
DEPTH_LAYER_BYTES = 2 << 20
#: Depth experiment: bytes per run's record kept until the table is built.
DEPTH_RECORD_BYTES = 32 << 10


def depth_bytes(runs: int, processes: int, eval_prompts: int, layers: int) -> float:
    """The depth experiment: ``processes`` holding torch (the main one and the workers),
    each training one run of ``layers`` blocks on ``eval_prompts`` evaluation prompts, and
    the records of ``runs`` runs."""
    per_process = TORCH_BYTES + eval_prompts * DEPTH_PROMPT_BYTES + layers * DEPTH_LAYER_BYTES
    return BASE_BYTES + processes * per_process + runs * DEPTH_RECORD_BYTES
