"""Every cap oodcalc checks before it starts work, and the refusals: what is out of reach
is refused here, before anything is allocated, by the library's entry points themselves
(``predict``, ``sweep``, ``simulate_population``, ``simulate_prompts``, the figures) and
by the geometry constructors.

The costs come from :mod:`oodcalc.estimates` (the cost model: steps, memory and time of
each engine); this module compares them with the caps and raises. It sits below
``Setting`` and imports nothing above the cost model: its guards take numbers and the
protocol's fields. Messages name parameters through :func:`oodcalc.errors.param`, so the
API reads ``Protocol.max_steps`` or ``the geometry's K`` and the CLI its options.

An entry point estimates the memory its computation will hold and refuses, naming the
parameter whose change alone would fit, when the estimate is over the memory cap. The cap is derived from the machine:
``MEMORY_SHARE`` of the physical memory, or ``ADDRESS_SPACE_SHARE`` of the process's
address-space limit (``ulimit -v``) when that is smaller. Set the environment variable
``OODCALC_MAX_MEMORY`` (``16G``, ``512M``, ``2T`` or bytes) to raise or lower it.

The other caps are fixed, each a named constant: they bound what the arithmetic can
represent (integers, step counters), not what a machine can hold.

"""

from __future__ import annotations

import math
import os
import re

from . import estimates
from .finetune import compiled
from .console import duration
from .errors import ComputationError, InputError, param, shorten

__all__ = [
    "ADDRESS_SPACE_SHARE", "AUTO_STEP_LIMIT", "MAX_AXIS", "MAX_CURVES", "MAX_DIGITS",
    "MAX_FEATURE_FILE", "MAX_INT", "MAX_JSON_FEATURE_FILE", "MAX_K3_SLICES", "MAX_MEMORY",
    "MAX_ROWS", "MAX_STEPS", "MAX_THREADS", "MEMORY_SHARE", "MEMORY_VARIABLE", "WORK_LIMIT",
    "check_figure", "check_finetune_work", "check_k3_figure", "check_maps", "check_memory",
    "check_ood_vs_theta", "check_phase_diagram", "check_population", "check_precision",
    "check_predict", "check_prompts", "check_rows", "check_simulation", "check_sweep_steps",
    "check_terms_steps", "check_trajectory_plot", "memory_cap", "parse_size", "phase_cap",
    "pretrain_cap", "refuse_over_cap", "require_memory", "size", "steps_culprit",
]


#: Environment variable that sets the memory cap (a size: 16G, 512M, or bytes).
MEMORY_VARIABLE = "OODCALC_MAX_MEMORY"
#: Default cap: this share of the physical memory ...
MEMORY_SHARE = 0.5
#: ... or this share of the address-space limit, if one is set and smaller (numpy, the
#: interpreter and the libraries' mappings need the rest).
ADDRESS_SPACE_SHARE = 0.6

#: Largest integer any option accepts: far beyond every other cap, and within int64, so
#: no option value can overflow a counter or an array size before the caps are checked.
MAX_INT = 10**15
#: Largest --max-steps (steps per phase): a step counter of int64 is then never near
#: overflow, and the estimates below stay finite.
MAX_STEPS = 10**12
#: Largest number of configurations in one sweep (rows of the result).
MAX_ROWS = 20_000_000
#: Largest NUM of one range START:STOP:NUM (an axis is built before the product is known).
MAX_AXIS = MAX_ROWS
#: Most significant digits for --precision (mpmath's cost grows faster than the digits).
MAX_DIGITS = 10_000
#: Largest feature file read (bytes); a d × K matrix of K >= 2 features is far smaller.
MAX_FEATURE_FILE = 1 << 30
#: Largest JSON feature file (bytes). Python's parser holds ~40 bytes per byte and reads
#: ~10 MB/s here, so 32 MiB (a 1,000 × 1,000 matrix at full precision) parses in seconds
#: within 1.3 GB; a larger matrix belongs in a .npy, whose header gives its shape.
MAX_JSON_FEATURE_FILE = 32 << 20

#: Auto step caps never go past this many steps per phase.
AUTO_STEP_LIMIT = 10**9
#: Work (logit updates) past which a K×K fine-tuning is refused before it starts.
WORK_LIMIT = 2e12
#: Most curves in one figure: matplotlib draws about a thousand a second and holds about
#: ``estimates.CURVE_BYTES`` for each (a figure of K × K weights at K = 1000 is a
#: million curves: hours, and gigabytes).
MAX_CURVES = 50_000
#: Most K = 3 slices in one figure (``plot phase-k3``): Agg draws at most 2^16 pixels a
#: side, and a slice is 8.4 in high at 150 dpi.
MAX_K3_SLICES = 50
#: Most torch threads (--threads): far more than any machine's cores; torch itself
#: crashes on some larger counts (100,000 threads: a segmentation fault at exit).
MAX_THREADS = 1024


# --- the memory cap -------------------------------------------------------------------

# ASCII digits only (no other scripts' digits), an exponent of at most three digits.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d{1,3}))?\s*([kmgtpezy]?)i?b?\s*$",
                   re.IGNORECASE | re.ASCII)
#: Largest memory cap accepted (bytes): more than any machine, and within int64.
MAX_MEMORY = 1 << 62


def parse_size(text: str) -> int:
    """``16G``, ``512M``, ``1.5T``, ``2e9`` or plain bytes → bytes (powers of 1024)."""
    match = _SIZE.match(text) if len(text) <= 64 else None
    if not match:
        raise InputError(MEMORY_VARIABLE, repr(text[:64] + ("…" if len(text) > 64 else "")),
                         "expected a size such as 16G, 512M or a number of bytes")
    number, exponent, unit = match.groups()
    value = float(f"{number}e{exponent or 0}") * 1024.0 ** " kmgtpezy".index(unit.lower() or " ")
    if not value <= MAX_MEMORY:           # inf from 1e400 or 1e308Y included
        raise InputError(MEMORY_VARIABLE, repr(text), f"at most {size(MAX_MEMORY)} "
                         "(more than any machine holds)")
    if value < 1:      # a cap of 0 bytes would refuse every run, blaming its parameters
        raise InputError(MEMORY_VARIABLE, repr(text), "a cap under 1 byte refuses every run; "
                         "expected a positive size such as 16G, 512M or a number of bytes "
                         f"(unset it for the default, {MEMORY_SHARE:.0%} of this machine's "
                         "memory)")
    return int(value)


def memory_cap() -> tuple[int, str]:
    """``(bytes, where it comes from)``."""
    text = os.environ.get(MEMORY_VARIABLE)
    if text:
        return parse_size(text), f"{MEMORY_VARIABLE}={text}"
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):   # not a POSIX system
        physical = 8 << 30
    cap, source = int(physical * MEMORY_SHARE), f"{MEMORY_SHARE:.0%} of this machine's memory"
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft * ADDRESS_SPACE_SHARE < cap:
            cap = int(soft * ADDRESS_SPACE_SHARE)
            source = f"{ADDRESS_SPACE_SHARE:.0%} of this process's address-space limit"
    except (ImportError, ValueError, OSError):
        pass
    return cap, source


def size(n: float) -> str:
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    for unit in units:
        if n < 1024 or unit == units[-1]:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def require_memory(estimate: float, option: str, value: object, what: str,
                   change: str) -> None:
    """Refuse (InputError on ``option``) when ``estimate`` bytes exceed the memory cap.

    ``what`` says what needs the memory, ``change`` what the user can lower (None: nothing,
    the parameter is already at its smallest).
    """
    cap, source = memory_cap()
    if estimate <= cap:
        return
    suggestion = size(1.25 * estimate).replace(" ", "").replace("iB", "").replace("bytes", "")
    advice = f"{change}, or raise the cap" if change else "raise the cap"
    raise InputError(option, value, f"{what}: about {size(estimate)} needed, over the memory "
                     f"cap of {size(cap)} ({source}); {advice}: "
                     f"{MEMORY_VARIABLE}={suggestion}")


def refuse_over_cap(estimate: float, what: str,
                    culprits: list[tuple[str, object, float, str]]) -> None:
    """Refuse when ``estimate`` bytes exceed the cap, naming the first culprit whose
    change alone would fit: ``(parameter, value, estimate with it at its smallest, what to
    do)``; the last culprit is named when none would fit alone."""
    cap, _ = memory_cap()
    if estimate <= cap or not culprits:
        return
    chosen = next((c for c in culprits if c[2] <= cap), culprits[-1])
    option, value, smallest, change = chosen
    # at its smallest already (K = 2): changing it saves nothing, so it is not advised
    require_memory(estimate, option, value, what, change if smallest < estimate else None)


# --- the guards of the entry points ------------------------------------------------------
#
# Each ``check_*`` guard takes ``(K, d, protocol, *, its own sizes, diagonal=None)``
# (``d`` None: the smallest that holds the geometry; ``protocol``: anything with ``eps,
# eta, eta_ft, max_steps``; ``diagonal``: diag M when known), so that a caller can run
# the guard of the entry point it is about to call before the geometry's arrays exist.
# ``cost(K, d, protocol) -> bytes`` is an entry point's memory estimate.

def steps_culprit(K: int, protocol) -> tuple[str, object, float, str]:
    """Which parameter sets the steps a phase runs: the cap, or the stopping rule."""
    eta = min(protocol.eta, protocol.eta_ft)
    if protocol.ft_steps is not None and \
            protocol.ft_steps >= estimates.pretrain_steps(K, protocol.eps, protocol.eta):
        return (param("ft_steps"), str(protocol.ft_steps), 0.0,
                param("ft_steps", "lower"))
    if estimates.pretrain_steps(K, protocol.eps, eta) > protocol.max_steps:
        return param("max_steps"), str(protocol.max_steps), 0.0, param("max_steps", "lower")
    return (param("eps"), f"{protocol.eps:g}", 0.0,
            f"raise {param('eps')} or {param('eta')} (fewer steps)")


class _OneStep:
    def __init__(self, protocol) -> None:
        self.eps, self.eta, self.eta_ft, self.max_steps = (protocol.eps, protocol.eta,
                                                           protocol.eta_ft, 1)
        self.ft_steps = None if protocol.ft_steps is None else 1


def check_memory(cost, what: str, K: int, d: int | None, protocol,
                 more=()) -> None:
    """Refuse before any allocation when ``cost(K, d, protocol)`` is over the memory cap,
    naming the parameter whose change alone would fit: ``d``, then ``K``, then ``more``
    (the entry point's own sizes: ``(parameter, value, cost with it at its smallest,
    what to do)``), then the steps (``max_steps`` or ``eps``) when the cost depends on
    them; when none would fit alone, the last is named."""
    culprits = []
    if d is not None:
        culprits.append((param("d"), d, cost(K, None, protocol),
                         f"{param('d', 'lower')} (it changes no number; leave it out)"))
    culprits.append((param("K"), K, cost(2, None, protocol), param("K", "lower")))
    culprits += list(more)
    estimate = cost(K, d, protocol)
    if cost(K, d, _OneStep(protocol)) < estimate:      # only then can fewer steps help
        culprits.append(steps_culprit(K, protocol))
    refuse_over_cap(estimate, what, culprits)


def _d(d: int | None, K: int) -> int:
    return d or 2 * K


def check_predict(K: int, d: int | None, protocol, *, diagonal=None, M=None) -> None:
    """Everything ``predict`` refuses before it starts, in its order: the memory, then
    pretraining's steps, then (given ``diagonal``, diag M when M is diagonal, or ``M``)
    the K×K fine-tuning's work, estimated from the logits at the threshold α*; a setting
    on the symmetric ray (``M = cI``) fine-tunes by the scalar recurrence and has no
    such limit. Costs microseconds to a fraction of a second: no K × K array is formed
    for a diagonal M."""
    check_memory(lambda k, dim, p: estimates.predict_bytes(
        k, _d(dim, k), p.eps, p.eta, p.eta_ft, p.max_steps),
        f"{param('predict')} (the K × K dynamics and their kept trajectories)", K, d,
        protocol)
    pretrain_cap(K, protocol)
    plan = estimates.finetune_plan(K, protocol, diagonal=diagonal, M=M,
                                   compiled_available=compiled.available())
    if plan is not None:
        check_finetune_work(K, protocol, plan.log_steps, plan.engine, faster=plan.faster)


def check_simulation(K: int, protocol, *, diagonal=None, M=None, grams=None) -> None:
    """predict's refusals of the steps, for a simulator (``simulate_population``,
    ``simulate_prompts``): each phase estimated (gradient flow, fine-tuning from the logits
    at α*) past twice its cap is refused before the first step. A simulator runs each phase
    under ``max_steps`` itself (never raised as predict's "auto" is), so that is the cap.
    ``grams``: ``(G_V, G_U)`` of overlapping features, whose steps grow as their Gram
    scales shrink (:func:`oodcalc.estimates.simulation_log_steps`)."""
    c_V = 1.0 if grams is None else estimates.gram_scale(grams[0])
    pretrain_cap(K, protocol, auto=False, overlap=c_V)
    if protocol.ft_steps is not None:      # a fixed length: its memory is checked instead
        return
    log_t2 = estimates.simulation_log_steps(K, protocol, diagonal=diagonal, M=M,
                                            grams=grams)[1]
    eps_name = "eps" if protocol.eps_ft == protocol.eps else "eps_ft"
    phase_cap(protocol.max_steps, False, log_t2, "fine-tuning",
              f"K = {K}, {eps_name} = {protocol.eps_ft:g}, eta_ft = {protocol.eta_ft:g}, "
              "from the logits at α*" + ("" if grams is None else " on overlapping features"),
              f"raise {param(eps_name)} or {param('eta_ft')}")


def check_population(K: int, d: int | None, protocol, *, diagonal=None) -> None:
    """``simulate_population``'s memory: every iterate Q (d × d) of both phases."""
    check_memory(lambda k, dim, p: estimates.population_bytes(
        k, _d(dim, k), p.eps, p.eta, p.eta_ft, p.max_steps, p.ft_steps),
        f"{param('simulate_population')} (every iterate Q, d × d)", K, d, protocol)


def check_prompts(K: int, d: int | None, protocol, *, N: int, batch: int, holdout: int,
                  heldout: bool, diagonal=None) -> None:
    """``simulate_prompts``' memory: batches of N tokens in d dimensions, every iterate Q."""
    def cost(k, dim, p, tokens=N, prompts=batch, held=holdout):
        return estimates.prompts_bytes(k, _d(dim, k), tokens, prompts, held, p.eps, p.eta,
                                       p.eta_ft, p.max_steps, heldout, p.ft_steps)
    more = [(param("N"), N, cost(K, d, protocol, tokens=1), param("N", "lower")),
            (param("batch"), batch, cost(K, d, protocol, prompts=1), param("batch", "lower"))]
    if heldout:
        more.append((param("holdout"), holdout, cost(K, d, protocol, held=1),
                     param("holdout", "lower")))
    check_memory(cost, f"{param('simulate_prompts')} (batches of N tokens in d dimensions)",
                 K, d, protocol, more)


def check_precision(K: int, d: int | None, protocol, *, digits: int, diagonal=None) -> None:
    """The closed forms at ``digits`` digits (mpmath): K × K numbers, a few copies."""
    check_memory(lambda k, dim, p: estimates.precision_bytes(k, digits)
                 + estimates.geometry_bytes(_d(dim, k), k),
                 f"the closed forms at {digits} digits", K, d, protocol)


def check_trajectory_plot(K: int, d: int | None, protocol, *, figure: str,
                          diagonal=None) -> None:
    """``predict`` and a trajectory figure (``"loss_trajectories"``,
    ``"weight_trajectories"`` or ``"forgetting_curve"``) through every kept step (the memory; ``predict`` adds its
    own guard, :func:`check_predict`)."""
    lines = estimates.trajectory_curves(figure, K)
    if lines > MAX_CURVES:
        raise InputError(param("K"), K, f"the figure would draw {lines:,} curves, more than "
                         f"{MAX_CURVES:,} (about {lines * estimates.SECONDS_PER_CURVE:,.0f} s "
                         f"to draw); {param('K', 'lower')}")
    check_memory(lambda k, dim, p: estimates.trajectory_plot_bytes(
        k, _d(dim, k), p.eps, p.eta, p.eta_ft, p.max_steps, lines),
        "the figure (a curve per feature, every step)", K, d, protocol)


def check_ood_vs_theta(K: int, protocol, prompts: int | None) -> None:
    """``plots.ood_error_vs_theta``: 181 rotations at T1 and the simulators (d = 2K)."""
    def cost(k: int, tokens: int | None) -> float:
        return estimates.ood_vs_theta_bytes(k, protocol.eps, protocol.eta, protocol.eta_ft,
                                            protocol.max_steps, tokens)
    culprits = [(param("K"), K, cost(2, prompts), param("K", "lower"))]
    if prompts is not None:
        culprits.append((param("prompts"), prompts, cost(K, 1), param("prompts", "lower")))
    culprits.append(steps_culprit(K, protocol))
    refuse_over_cap(cost(K, prompts), "the figure's simulations (d = 2K)", culprits)


def check_figure(curves: int, points: int) -> None:
    """A figure of ``curves`` curves of ``points`` points each: at most ``MAX_CURVES``,
    and within the memory cap."""
    if curves > MAX_CURVES:
        raise InputError(param("K"), f"{curves:,} curves",
                         f"the figure would draw {curves:,} curves, more than {MAX_CURVES:,} "
                         f"(about {curves * estimates.SECONDS_PER_CURVE:,.0f} s to draw); "
                         f"{param('K', 'lower')}")
    refuse_over_cap(estimates.figure_bytes(curves, points), "the figure (its curves)",
                    [(param("K"), f"{curves:,} curves", 0.0, param("K", "lower"))])


def check_phase_diagram(n: int) -> None:
    """``plots.phase_diagram_k2``: the K = 2 sweep of n × n rows and its images."""
    if n * n > MAX_ROWS:
        raise InputError(param("n"), n, f"at most {math.isqrt(MAX_ROWS):,} (N × N points: "
                         f"a sweep holds at most {MAX_ROWS:,})")
    refuse_over_cap(estimates.phase_diagram_bytes(n), "the phase diagram (N × N rows and "
                    "images)", [(param("n"), n, 0.0, param("n", "lower"))])


def check_k3_figure(slices: int) -> None:
    """``plots.phase_k3``: at most ``MAX_K3_SLICES`` slices, their figure within the memory
    cap (its slices, not only the sweep's rows: 1,000 slices of a 5 × 5 grid passed the
    rows' estimate and ran out of memory at 2.9 GB after 132 s)."""
    if slices > MAX_K3_SLICES:
        raise InputError(param("gamma1"), f"{slices:,} values", f"at most {MAX_K3_SLICES} "
                         "slices in one figure (a PNG holds at most 2^16 pixels a side: "
                         f"{MAX_K3_SLICES} slices of 8.4 in at 150 dpi; each takes seconds to "
                         "draw); give fewer values or draw several figures")
    refuse_over_cap(estimates.k3_figure_bytes(slices), "the K = 3 figure (its slices)",
                    [(param("gamma1"), f"{slices:,} values", 0.0, "give fewer values")])


def check_maps(rows_by_K: dict[int, int], floats_per_row: int, what: str) -> None:
    """Maps drawn from sweeps (the K = 3 slices, the explorer's page): the sweeps' rows
    and the maps' own ``floats_per_row``, within the memory cap (named: ``grid``)."""
    rows = sum(rows_by_K.values())
    refuse_over_cap(estimates.sweep_bytes(rows_by_K) + floats_per_row * rows * estimates.FLOAT,
                    what, [(param("grid"), f"{rows:,} points", 0.0, param("grid", "lower"))])


def check_rows(rows_by_K: dict[int, int], workers: int = 1) -> None:
    """A sweep's size: at most MAX_ROWS configurations, their rows within the memory cap
    (``workers`` local processes cost more). Called before any grid is built."""
    rows = sum(rows_by_K.values())
    if rows > MAX_ROWS:
        raise InputError(param("rows"), f"{rows:,} configurations", f"at most {MAX_ROWS:,} "
                         "in one sweep; split it or coarsen an axis")
    if not rows_by_K:
        return
    culprits = [(param("workers"), str(workers), estimates.sweep_bytes(rows_by_K),
                 param("workers", "use fewer"))] if workers > 1 else []
    culprits.append((param("rows"), f"{rows:,} configurations of K up to {max(rows_by_K)}",
                     0.0, "coarsen an axis or split the sweep"))
    refuse_over_cap(estimates.sweep_bytes(rows_by_K, workers),
                    "the sweep (every configuration's row until written)", culprits)


# --- steps: what a phase would need, against its cap -------------------------------------

def check_sweep_steps(K: int, log_steps: float, max_steps: int, phase: str,
                      where: str) -> None:
    """A sweep marks a row that reaches ``max_steps`` (not fatal), but refuses before the
    phase starts when its slowest row would run more than ``AUTO_STEP_LIMIT`` steps, to
    the stopping rule or to the cap (``predict``'s limit on its own caps)."""
    run = min(float(max_steps), estimates.exp_steps(log_steps))
    if run <= AUTO_STEP_LIMIT:
        return
    raise ComputationError(
        f"{phase} of the slowest configuration (K = {K}, {where}) would run about "
        f"{run:.2g} steps (gradient-flow estimate {estimates.format_steps(log_steps)}, "
        f"capped by max_steps = {max_steps:,}), more than {AUTO_STEP_LIMIT:,}; "
        f"{param('sweep_max_steps', 'lower')}, or raise eps or lower the step size of "
        "those rows")


def phase_cap(max_steps: int, auto: bool, log_estimate: float, phase: str,
              describe: str, change: str) -> int:
    """The step cap of one phase; raises before running when the estimate is out of reach.

    ``log_estimate``: natural log of the estimated steps. With ``auto`` the cap becomes
    ``max(max_steps, 2 × estimate)`` up to ``AUTO_STEP_LIMIT``; an explicit cap is kept.
    Either way, a phase estimated at more than twice its cap fails here, naming the
    estimate and what to change, instead of running the cap out.
    """
    estimate = estimates.exp_steps(log_estimate)
    cap = max_steps
    if auto:
        cap = int(min(max(max_steps, math.ceil(2 * estimate) + 1000), AUTO_STEP_LIMIT))
    if estimate > 2 * cap:
        steps = estimates.format_steps(log_estimate)
        # the cap as the user set it, or the automatic one and how far auto goes
        capped = (f"more than the automatic step cap ({param('max_steps')} auto: "
                  f"{max_steps:,}, raised to twice the estimate but not past "
                  f"{AUTO_STEP_LIMIT:,})" if auto
                  else f"more than {param('max_steps')} = {cap:,}")
        how = (f"raise {param('max_steps')} to about {math.ceil(1.2 * estimate):,} (it "
               f"takes up to {MAX_STEPS:,}), or " if 1.2 * estimate <= MAX_STEPS else "")
        raise ComputationError(
            f"{phase} would need about {steps} steps to meet the stopping rule "
            f"(gradient-flow estimate for {describe}), {capped}; {how}{change}")
    return cap


def pretrain_cap(K: int, protocol, auto: bool | None = None, overlap: float = 1.0) -> int:
    """Pretraining's step cap (:func:`phase_cap`), from the estimate of T1 (``auto``:
    whether the cap may be raised, default the protocol's ``auto_steps``). ``overlap``:
    for overlapping features, the smallest eigenvalue ``c`` of ``VᵀV`` on the error
    directions (:func:`oodcalc.estimates.gram_scale`); the estimate is the orthonormal
    one at ``ε/c`` and ``η c³`` (exact for equal overlaps), so T1 grows as ``c`` shrinks."""
    auto = protocol.auto_steps if auto is None else auto
    c = overlap
    eps, eta = protocol.eps / c, protocol.eta * c**3
    log_t1 = estimates.log_steps_from_margin(K, eps, eta, 0.0)
    reach = protocol.max_steps if not auto else AUTO_STEP_LIMIT
    fit_eps = estimates.eps_for_steps(K, eta, reach) * c
    fit_eta = protocol.eta * estimates.exp_steps(log_t1) / reach
    where = (f"K = {K}, eps = {protocol.eps:g}, eta = {protocol.eta:g}"
             + ("" if c == 1.0 else f", overlapping features whose VᵀV has smallest "
                f"eigenvalue {c:.3g} on the error directions: the orthonormal steps at "
                f"eps/{c:.3g} and eta·{c:.3g}³"))
    return phase_cap(protocol.max_steps, auto, log_t1, "pretraining", where,
                     f"raise {param('eps')} to about {fit_eps:.2g}"
                     + (f" or {param('eta')} to about {fit_eta:.2g}"
                        if fit_eta * c**3 <= estimates.resolving_eta(K, eps) else ""))


def check_finetune_work(K: int, protocol, log_t2: float, engine: str,
                        faster: bool = False) -> None:
    """Refuse a K×K fine-tuning of more than ``WORK_LIMIT`` logit updates (``log_t2``: the
    log of its estimated steps; ``engine``: a key of ``estimates.ENGINES``; ``faster``:
    the compiled engine would apply but Numba is missing)."""
    work = estimates.exp_steps(log_t2) * K * K
    if work <= WORK_LIMIT:
        return
    seconds = estimates.finetune_seconds(K, log_t2, engine)
    hint = '; pip install "oodcalc[fast]" runs it about 10× faster' if faster else ""
    raise ComputationError(
        f"fine-tuning would need about {estimates.format_steps(log_t2)} steps on "
        f"{K}×{K} logits (K = {K}, {_finetune_words(protocol)}), "
        f"{work:.2g} logit updates, more than {WORK_LIMIT:.0e}: about {duration(seconds)} "
        f"with the {estimates.ENGINES[engine]}{hint}; " + " or ".join(_finetune_changes(K, protocol)))


def _finetune_changes(K: int, protocol) -> list[str]:
    """What would shorten a fine-tuning: fewer features (none below two), fewer steps, a
    looser stopping level or a larger step."""
    changes = [param("K", "lower")] if K > 2 else []
    if protocol.ft_steps is not None:
        return changes + [param("ft_steps", "lower")]
    eps = "eps_ft" if protocol.eps_ft != protocol.eps else "eps"
    return changes + [param(eps, "raise"), param("eta_ft", "raise")]


def _finetune_words(protocol) -> str:
    """Fine-tuning's protocol as the messages name it."""
    if protocol.ft_steps is not None:
        return f"{protocol.ft_steps} steps, eta_ft = {protocol.eta_ft:g}"
    eps = (f"eps = {protocol.eps:g}" if protocol.eps_ft == protocol.eps
           else f"eps_ft = {protocol.eps_ft:g}")
    return f"{eps}, eta_ft = {protocol.eta_ft:g}"


def check_terms_steps(K: int, protocol, cap: int, log_steps: float, probe: str) -> None:
    """Refuse, before it runs, a fine-tuning with interventions (the terms engine) whose
    probe extrapolates past twice its cap (``log_steps``: the log of that estimate, inf
    when the error did not fall; ``probe``: what the probe saw, in words), naming what
    gives a run that ends: a fixed budget (``ft_steps``, which reports the rule "not
    reached" and the errors at its end), a looser rule or a larger cap."""
    steps = estimates.exp_steps(log_steps)
    if steps <= 2 * cap:
        return
    eps = "eps_ft" if protocol.eps_ft != protocol.eps else "eps"
    need = ("the rule looks out of reach" if log_steps == math.inf else
            f"about {estimates.format_steps(log_steps)} steps to meet the rule, "
            f"about {duration(estimates.terms_seconds(K, log_steps))}")
    raise ComputationError(
        f"fine-tuning with {_interventions_words(protocol)} would run to its step cap "
        f"({param('max_steps')} = {cap:,}) without meeting the stopping rule ({eps} = {protocol.eps_ft:g}, "
        f"eta_ft = {protocol.eta_ft:g}): {need} ({probe}); give {param('ft_steps')} "
        f"(e.g. {min(cap, 10_000):,}) to run a fixed budget and report the errors it "
        f"ends at, or {param(eps, 'raise')}")


def _interventions_words(protocol) -> str:
    return ", ".join(f"{k} = {v if isinstance(v, str) else shorten(v)}"
                     for k, v in protocol.interventions.items())
