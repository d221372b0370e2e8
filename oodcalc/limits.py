"""Every cap oodcalc checks before it starts work, and the cost estimates behind them.

A command estimates the memory its computation will hold (``*_bytes`` below, one function
per command) and refuses, with one line naming the option to change, when the estimate is
over the memory cap; nothing is allocated first. The cap is derived from the machine:
``MEMORY_SHARE`` of the physical memory, or ``ADDRESS_SPACE_SHARE`` of the process's
address-space limit (``ulimit -v``) when that is smaller. Set the environment variable
``OODCALC_MAX_MEMORY`` (``16G``, ``512M``, ``2T`` or bytes) to raise or lower it.

The other caps are fixed, each a named constant: they bound what the arithmetic can
represent (integers, step counters), not what a machine can hold.

The estimates describe the current implementation and take their step counts and the
dynamics' working memory from :mod:`oodcalc.estimates`; when a command changes how it stores
a computation, its estimate here is the one place to update.
"""

from __future__ import annotations

import os
import re

from .errors import InputError

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

FLOAT = 8          # bytes per float64
#: What the interpreter, numpy and the command's own objects hold besides the arrays.
BASE_BYTES = 200 << 20
#: What one worker process costs beyond its share of the rows.
WORKER_BYTES = 150 << 20


# --- the memory cap -------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([kmgtpezy]?)i?b?\s*$",
                   re.IGNORECASE)


def parse_size(text: str) -> int:
    """``16G``, ``512M``, ``1.5T``, ``2e9`` or plain bytes → bytes (powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(MEMORY_VARIABLE, repr(text), "expected a size such as 16G, 512M "
                         "or a number of bytes")
    number, exponent, unit = match.groups()
    value = float(number) * 10 ** int(exponent or 0)
    return int(value * 1024 ** " kmgtpezy".index(unit.lower() or " "))


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

    ``what`` says what needs the memory, ``change`` what the user can lower.
    """
    cap, source = memory_cap()
    if estimate <= cap:
        return
    suggestion = size(1.25 * estimate).replace(" ", "").replace("iB", "").replace("bytes", "")
    raise InputError(option, value, f"{what}: about {size(estimate)} needed, over the memory "
                     f"cap of {size(cap)} ({source}); {change}, or raise the cap: "
                     f"{MEMORY_VARIABLE}={suggestion}")


# --- step counts (the dynamics' own estimates) -----------------------------------------

def pretrain_steps(K: int, eps: float, eta: float) -> float:
    """Estimated steps of a phase from ``Q = 0`` (gradient flow on the symmetric ray, see
    :mod:`oodcalc.estimates`); fine-tuning is counted the same."""
    from . import estimates
    return estimates.pretrain_steps(K, eps, eta)


def steps_held(K: int, eps: float, eta: float, max_steps: int) -> float:
    """Steps a phase will run: the estimate, never more than the cap."""
    return min(float(max_steps), pretrain_steps(K, eps, eta)) + 1


# --- one estimate per command -----------------------------------------------------------

def geometry_bytes(d: int, K: int) -> float:
    """V and U (d × K each) and their products."""
    return 2 * d * K * FLOAT * 2


def trajectory_budget() -> float:
    """What ``predict`` keeps of its trajectories, all phases together (strided beyond)."""
    from .predict import TRAJECTORY_BYTES
    return TRAJECTORY_BYTES


def predict_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                  max_steps: int) -> float:
    """``predict``: the geometry, the K × K dynamics (a few copies of their working set:
    fine-tuning, the source view, the closed forms) and the kept trajectories. Steps cost
    time, not memory: trajectories are strided to their budget."""
    from . import estimates
    return (BASE_BYTES + geometry_bytes(d, K) + 4 * estimates.dynamics_bytes(K)
            + trajectory_budget())


def population_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                     max_steps: int) -> float:
    """``simulate`` (population): every iterate ``Q`` (d × d) of both phases."""
    steps = steps_held(K, eps, eta, max_steps) + steps_held(K, eps, eta_ft, max_steps)
    return BASE_BYTES + geometry_bytes(d, K) + d * d * FLOAT * (steps + 10)


def prompts_bytes(K: int, d: int, N: int, batch: int, holdout: int, eps: float, eta: float,
                  eta_ft: float, max_steps: int, heldout: bool) -> float:
    """``simulate -s prompts``: a batch of prompts (tokens d-dimensional, a few temporaries
    of it), the held-out samples, and every iterate ``Q`` of both phases."""
    prompts = 4.0 * batch * N * d * FLOAT
    held = 2 * 4.0 * holdout * N * d * FLOAT if heldout else 0.0
    return population_bytes(K, d, eps, eta, eta_ft, max_steps) + prompts + held


def sweep_row_bytes(K: int) -> float:
    """One configuration of a sweep: its M and logits while it runs, its result columns,
    and its share of the CSV text (measured: about 800 bytes per K = 2 row)."""
    return FLOAT * (8 * K * K + 6 * K + 40) + 40 * (20 + 3 * K)


def sweep_bytes(rows_by_K: dict[int, int], workers: int = 1) -> float:
    """``sweep``: every configuration's row (all of them held until written)."""
    rows = sum(n * sweep_row_bytes(K) for K, n in rows_by_K.items())
    return BASE_BYTES + rows + max(0, workers - 1) * WORKER_BYTES


def phase_diagram_bytes(n: int) -> float:
    """``plot phase-diagram``: the K = 2 sweep of n × n rows and three n × n images."""
    return sweep_bytes({2: n * n}) + 3 * n * n * FLOAT * 4


def trajectory_plot_bytes(K: int, d: int, eps: float, eta: float, eta_ft: float,
                          max_steps: int, lines: int) -> float:
    """``plot losses`` / ``plot weights``: predict, then ``lines`` curves through every
    kept step (matplotlib holds a few copies of each curve's points)."""
    steps = steps_held(K, eps, eta, max_steps) + steps_held(K, eps, eta_ft, max_steps)
    kept = min(steps, trajectory_budget() / (FLOAT * K * K))
    return predict_bytes(K, d, eps, eta, eta_ft, max_steps) + lines * kept * FLOAT * 6


def ood_vs_theta_bytes(K: int, eps: float, eta: float, eta_ft: float, max_steps: int,
                       prompts: int | None) -> float:
    """``plot ood-vs-theta``: 181 rotations evaluated at T1, and the simulators (d = 2K)."""
    memory = population_bytes(K, 2 * K, eps, eta, eta_ft, max_steps)
    if prompts is not None:
        memory += prompts_bytes(K, 2 * K, prompts, 1024, 0, eps, eta, eta_ft, max_steps,
                                False) - BASE_BYTES
    return memory + 181 * K * K * FLOAT * 4


def reproduce_bytes(eps: float, eta: float, eta_ft: float, prompts: int | None) -> float:
    """``reproduce synthetic``: K = 4, d = 8 settings and, with --prompts N, batches of
    1024 prompts of N tokens."""
    memory = population_bytes(4, 8, eps, eta, eta_ft, 10**6)
    if prompts is not None:
        memory += prompts_bytes(4, 8, prompts, 1024, 0, eps, eta, eta_ft, 10**6,
                                False) - BASE_BYTES
    return memory


def precision_bytes(K: int, digits: int) -> float:
    """``predict --precision``: K × K numbers of ``digits`` digits, a few copies."""
    return BASE_BYTES + 20 * K * K * (digits / 2 + 64)


def refuse_over_cap(estimate: float, what: str,
                    culprits: list[tuple[str, object, float, str]]) -> None:
    """Refuse when ``estimate`` bytes exceed the cap, naming the first culprit whose
    change alone would fit: ``(option, value, estimate with it at its smallest, what to
    do)``; the last culprit is named when none would fit alone."""
    cap, _ = memory_cap()
    if estimate <= cap or not culprits:
        return
    chosen = next((c for c in culprits if c[2] <= cap), culprits[-1])
    option, value, _, change = chosen
    require_memory(estimate, option, value, what, change)


def steps_culprit(K: int, protocol) -> tuple[str, object, float, str]:
    """Which option sets the steps a phase runs: the cap, or the stopping rule."""
    eta = min(protocol.eta, protocol.eta_ft)
    if pretrain_steps(K, protocol.eps, eta) > protocol.max_steps:
        return "--max-steps", str(protocol.max_steps), 0.0, "lower --max-steps"
    return "--eps", f"{protocol.eps:g}", 0.0, "raise --eps or --eta (fewer steps)"


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
#: Most torch threads (--threads): far more than any machine's cores; torch itself
#: crashes on some larger counts (100,000 threads: a segmentation fault at exit).
MAX_THREADS = 1024


def depth_bytes(runs: int, processes: int, eval_prompts: int, layers: int) -> float:
    """The depth experiment: ``processes`` holding torch (the main one and the workers),
    each training one run of ``layers`` blocks on ``eval_prompts`` evaluation prompts, and
    the records of ``runs`` runs."""
    per_process = TORCH_BYTES + eval_prompts * DEPTH_PROMPT_BYTES + layers * DEPTH_LAYER_BYTES
    return BASE_BYTES + processes * per_process + runs * DEPTH_RECORD_BYTES
