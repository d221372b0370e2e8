"""Fuzz the command line in-process: every command of ``fuzz_cases.ENTRIES``, valid and
hostile values, input files and output paths (hypothesis; 2,000+ examples, each in its own
directory with a time limit).

Every example must end with exit code 0, 1 or 2; no traceback and no "internal error";
on failure exactly one line ``oodcalc: error: ...`` on stderr; no NaN or inf printed; and
nothing created or changed but the requested output (a symlink's target), with no
temporary file left behind and no special file (FIFO, device, symlink) replaced.

This checks the command-line layer, so the engines that take seconds are replaced by fast
stand-ins that return real reports (the theory's): the full-Q and finite-prompt
simulators, the figures' drawing (the output file is still written through
``oodcalc.io``), the reproduction tables (computed once), the depth experiment's training
(one real tiny run, given each requested run's parameters; the cache, the table and the
statistics are the real ones) and the real-text experiment (its saved result,
docs/real.json). ``tools/fuzz_cli.py`` runs the
same table against the real engines, one process per case, with memory and time caps.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import re
import signal
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import fuzz_cases as fc  # noqa: E402
from oodcalc.cli import main  # noqa: E402
from oodcalc.cli.progress import PROGRESS_LINE  # noqa: E402

#: Examples in CI, over all commands (each command gets its share by weight, at least 60).
EXAMPLES = 2100
#: Seconds one example may take before the test fails (the slow engines are stubbed).
TIME_LIMIT = 20
NONFINITE = re.compile(r"(?<![\w.])(nan|inf|infinity)(?![\w])", re.IGNORECASE)


class Hang(BaseException):
    """Raised by the timer; a BaseException, so that main() cannot turn it into a line."""


def diverging(option: str, value: str) -> bool:
    """A step size at which gradient descent overflows or runs to --max-steps: until that is
    diagnosed before the run, it takes minutes or prints "overflow", so CI leaves it out
    (the campaign in tools/ keeps it)."""
    if option not in ("--eta", "--eta-ft"):
        return False
    try:
        return float(value) > 2
    except ValueError:
        return False


def spawns(option: str, value: str) -> bool:
    """--workers above 1 for the depth experiment: its runs would train in spawned
    processes, out of the stand-ins' reach (the campaign in tools/ covers them)."""
    if option != "--workers":
        return False
    try:
        return int(value.strip()) > 1
    except ValueError:
        return False


def examples_for(entry: fc.Entry) -> int:
    total = sum(e.weight for e in fc.ENTRIES)
    return max(60, round(EXAMPLES * entry.weight / total))


@st.composite
def invocation(draw, entry: fc.Entry) -> tuple[list[str], list[str]]:
    argv = list(entry.words) + list(entry.prefix)
    if entry.geometry:
        seed = draw(st.integers(0, 2**32 - 1))
        import random
        argv += fc.geometry_options(False, random.Random(seed))
    present = {o: draw(st.booleans()) if o != entry.output else draw(st.integers(0, 9)) > 0
               for o in entry.options}
    if entry.must and not any(present[o] for o in entry.must):
        present[draw(st.sampled_from(entry.must))] = True
    written = []
    for option, pool in entry.options.items():
        if not present[option]:
            continue
        if pool is None:
            argv.append(option)
            continue
        if option in entry.must:   # the options that keep a slow command fast: refused ones
            refused = tuple(v for v in pool.hostile if v not in fc.ACCEPTED_ANYWAY)
            value = draw(st.sampled_from(refused + (("--list",) if option == "ARG" else ())))
        else:
            value = draw(st.one_of(st.sampled_from(pool.valid + pool.hostile),
                                   st.text(max_size=6)).filter(
                lambda v, option=option: not diverging(option, v)
                and not (entry.prefix and spawns(option, v))))
        if option == "ARG":
            argv.append(value)
        else:
            argv += [option, value]
        if option == entry.output or option in entry.writes:
            written.append(value)
    return argv, written


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return fc.make_inputs(tmp_path_factory.mktemp("fuzz-inputs"))


@functools.lru_cache(maxsize=1)
def depth_template() -> dict:
    """One real record of the depth experiment: a tiny run (64 evaluation prompts, ε = 0.3),
    trained once; the stand-in gives it each requested run's parameters."""
    from oodcalc.depth.protocol import DepthConfig
    from oodcalc.depth.training import run_seed
    tiny = DepthConfig(eval_prompts=64, curve_prompts=64, eps=0.3, max_steps=200)
    return run_seed(tiny, 0, [0.5])[0]


def depth_stand_in(task) -> list[dict]:
    """The template under each run's parameters, with one layer's logits per layer."""
    template = depth_template()
    layers = task.config.layers

    def phase(name):
        return {**template[name], "logits": template[name]["logits"][:1] * layers}
    return [{**template, "pretrain": phase("pretrain"), "finetune": phase("finetune"),
             "parameters": task.config.run_parameters(task.seed, gamma)}
            for gamma in task.gammas]


@pytest.fixture(scope="module")
def fast_engines(tmp_path_factory):
    """Stand-ins for the engines that take seconds (see the module docstring)."""
    mp = pytest.MonkeyPatch()
    # default caches (depth results, hidden states) in a directory of the test's own
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    import oodcalc.experiments as experiments
    import oodcalc.plots as plots
    import oodcalc.simulate as simulate
    import oodcalc.simulate.prompts as prompts
    from oodcalc.io import write_atomic
    from oodcalc.prediction import predict

    def as_simulation(setting, *args, **kwargs):
        return predict(setting)

    for module in (simulate, prompts):
        for name in ("simulate_population", "simulate_prompts"):
            if hasattr(module, name):
                mp.setattr(module, name, as_simulation)
    tables = functools.lru_cache(maxsize=1)(
        lambda: experiments.reproduce(simulators={"GD on Q": predict}))
    mp.setattr(experiments, "reproduce", lambda *args, **kwargs: tables())
    for name in ("loss_trajectories", "weight_trajectories", "ood_error_vs_theta",
                 "phase_diagram_k2"):
        mp.setattr(plots, name, lambda *args, **kwargs: "figure")
    if importlib.util.find_spec("torch") is not None:
        import oodcalc.depth.experiment as depth_experiment
        import oodcalc.depth.plot as depth_plot
        mp.setattr(depth_experiment, "run_task", depth_stand_in)
        mp.setattr(depth_plot, "gamma_curves", lambda *args, **kwargs: "figure")
        mp.setattr(depth_plot, "ladder_plot", lambda *args, **kwargs: "figure")
        import oodcalc.real as real
        import oodcalc.real.plots as real_plots
        saved = json.loads(fc.REAL_JSON.read_text(encoding="utf-8"))
        mp.setattr(real, "run_installed", lambda *args, **kwargs: copy.deepcopy(saved))
        for name in ("rotation", "shift"):
            mp.setattr(real_plots, name, lambda *args, **kwargs: "figure")
    mp.setattr(plots, "save", lambda fig, path, option="--output": write_atomic(
        plots.check_output(path, option), lambda tmp: tmp.write_bytes(b"figure"),
        option=option))
    yield
    mp.undo()


def run_one(argv: list[str], output: list[str], inputs: Path, capsys) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="case-", dir=inputs.parent))
    fc.make_outputs(workdir)
    before, inputs_before = fc.snapshot(workdir), fc.snapshot(inputs)
    argv = fc.resolve(argv, inputs)
    here = os.getcwd()

    def hang(*_):
        raise Hang(f"over {TIME_LIMIT} s: oodcalc {argv}")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        os.chdir(workdir)
        code = main(argv)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(here)
    out, err = capsys.readouterr()
    shown = f"oodcalc {' '.join(map(repr, argv))}\nstdout: {out[-500:]}\nstderr: {err}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in err and "internal error" not in err, shown
    if code != 0:   # one error line (after the progress lines of a piped run, if any)
        lines = [line for line in err.strip().splitlines() if not PROGRESS_LINE.match(line)]
        assert len(lines) == 1 and lines[0].startswith("oodcalc: error: "), shown
    assert not NONFINITE.search(out) and "overflow" not in out, shown
    changes = fc.unexpected_changes(before, fc.snapshot(workdir), output, workdir)
    assert not changes, f"{shown}\nchanged: {changes}"
    assert fc.snapshot(inputs) == inputs_before, shown
    for path in workdir.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


@pytest.mark.parametrize("entry", fc.ENTRIES, ids=lambda e: " ".join(e.words) or "oodcalc")
def test_fuzz_command(entry, inputs, fast_engines, capsys):
    @settings(max_examples=examples_for(entry), deadline=None, database=None,
              derandomize=True, suppress_health_check=list(HealthCheck))
    @given(invocation(entry))
    def check(case):
        run_one(*case, inputs, capsys)
    check()
