"""Hostile input, output paths and resource caps: every reproduction of the robustness
report ends in one clean line (exit 2), before any work; plus the CLI conventions
(--version, -h, the start text, help defaults, piped and 80-column output)."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import subprocess
import sys

import numpy as np
import pytest

from oodcalc import estimates, io, limits
from cli_run import one_line, run
from oodcalc.sweep import sweep as REAL_SWEEP

#: The memory cap the refusals below are checked against (independent of this machine).
CAP = "4G"




@pytest.fixture
def no_engines(monkeypatch):
    """Any refusal must come before the engines run: calling one fails the test."""
    import importlib
    dynamics, predict, population, prompts, sweep = (
        importlib.import_module(f"oodcalc.{name}") for name in
        ("finetune.dynamics", "prediction", "simulate.population", "simulate.prompts", "sweep"))

    def engine(*args, **kwargs):
        raise AssertionError("an engine ran before the input was refused")
    targets = [(m, n) for m in (dynamics, predict, sweep) for n in dir(m)
               if n.startswith("descend")]           # every descent, wherever it is bound
    targets += [(population, "train"), (prompts, "train_on_prompts"), (sweep, "sweep")]
    assert len(targets) > 4
    for module, name in targets:
        monkeypatch.setattr(module, name, engine)
    monkeypatch.setenv(limits.MEMORY_VARIABLE, CAP)


BIG = "99999999999999999999"

# (arguments, the option the one line must name): the reproductions, in the report's order.
REPRODUCTIONS = [
    (["predict", "--theta", "pi/0", "--K", "2"], "--theta"),
    (["sweep", "--theta", "pi/0", "--K", "2", "-o", "a.csv"], "--theta"),
    (["simulate", "--theta", "pi/0", "--K", "2"], "--theta"),
    (["predict", "--gamma", "1,-0.9", "--max-steps", BIG], "--max-steps"),
    (["predict", "--gamma", "1,-0.9", "--d", BIG], "--d"),
    (["predict", "--theta", "0.5", "--K", BIG], "--K"),
    (["plot", "ood-vs-theta", "--K", BIG, "-o", "a.png"], "--K"),
    (["sweep", "--gamma", "1,-0.9", "--seed", BIG, "-o", "a.csv"], "--seed"),
    (["sweep", "--theta", "0.5", "--K", BIG, "-o", "a.csv"], "--K"),
    (["sweep", f"--gamma=0:1:{BIG},0.5", "-o", "a.csv"], "--gamma"),
    (["plot", "phase-diagram", "--grid", BIG, "-o", "a.png"], "--grid"),
    # memory, against the cap CAP
    (["predict", "--theta", "pi/6", "--K", "100000"], "--K"),
    (["predict", "--gamma", "1,-0.9", "--d", "1000000000"], "--d"),
    (["sweep", "--gamma=0:1:1000000000,0.5", "-o", "a.csv"], "--gamma"),
    (["sweep", "--theta", "0:1:200000", "--K", "100", "-o", "a.csv"], "--theta/--K"),
    (["simulate", "--gamma", "1,-0.9", "-s", "prompts", "--N", "100000", "--batch",
      "1000000"], "--N"),
    (["reproduce", "synthetic", "--prompts", "100000"], "--prompts"),
    (["reproduce", "--prompts", "100000"], "--prompts"),   # options go to the default one
    (["predict", "--theta", "pi/6", "--K", "5000"], "--K"),
    (["plot", "phase-diagram", "--grid", "3000", "-o", "a.png"], "--grid"),
    (["plot", "weights", "--mean-query", "--K", "100000", "-o", "a.png"], "--K"),
    # accepted silently before
    (["sweep", "--gamma", "1,-0.9", "-o", "x.png"], "--output"),
    (["plot"], "plot"),
]


@pytest.mark.parametrize("args, option", REPRODUCTIONS, ids=lambda a: " ".join(a)[:60]
                         if isinstance(a, list) else a)
def test_reproduction_is_one_line_before_any_work(args, option, capsys, tmp_path,
                                                   monkeypatch, no_engines):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    line = one_line(err)
    assert line.startswith(f"oodcalc: error: {option}: got "), line
    assert list(tmp_path.iterdir()) == []


def test_memory_refusal_names_the_cap_and_how_to_raise_it(capsys, no_engines):
    code, _, err = run(capsys, "predict", "--theta", "pi/6", "--K", "100000")
    line = one_line(err)
    assert "over the memory cap of 4 GiB (OODCALC_MAX_MEMORY=4G)" in line
    assert "lower --K, or raise the cap: OODCALC_MAX_MEMORY=" in line


def test_memory_refusal_never_blames_the_steps_when_they_cost_no_memory(capsys, monkeypatch,
                                                                          no_engines):
    """predict's memory does not grow with the steps (its trajectories are strided), so
    when even K = 2 would not fit the refusal names --K, not --max-steps or --eps."""
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "1K")
    code, _, err = run(capsys, "predict", "--theta", "0.5", "--K", "1024")
    line = one_line(err)
    assert code == 2 and line.startswith("oodcalc: error: --K: got 1024"), line


def test_the_cap_is_the_only_thing_between_a_run_and_its_estimate(monkeypatch):
    """Perturbation: the same estimate passes under a larger cap and fails under a smaller."""
    estimate = estimates.predict_bytes(64, 128, 0.01, 0.1, 0.1, 10**6)
    monkeypatch.setenv(limits.MEMORY_VARIABLE, str(int(estimate * 1.01)))
    limits.require_memory(estimate, "--K", "64", "predict", "lower --K")
    monkeypatch.setenv(limits.MEMORY_VARIABLE, str(int(estimate * 0.99)))
    with pytest.raises(limits.InputError, match="over the memory cap"):
        limits.require_memory(estimate, "--K", "64", "predict", "lower --K")


def test_default_cap_follows_the_address_space_limit():
    code = ("import resource, os; os.environ.pop('OODCALC_MAX_MEMORY', None);"
            "resource.setrlimit(resource.RLIMIT_AS, (6 * 10**9, resource.RLIM_INFINITY));"
            "from oodcalc.limits import memory_cap; print(memory_cap()[0])")
    env = {k: v for k, v in os.environ.items() if k != limits.MEMORY_VARIABLE}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert int(out.stdout) <= 0.6 * 6e9


@pytest.mark.parametrize("text, value", [("16G", 16 << 30), ("512M", 512 << 20),
                                         ("2e9", 2 * 10**9), ("1.5T", int(1.5 * (1 << 40)))])
def test_memory_variable_sizes(text, value):
    assert limits.parse_size(text) == value


def test_workers_never_outnumber_the_tasks(capsys, tmp_path, monkeypatch):
    import concurrent.futures

    def no_pool(*args, **kwargs):
        raise AssertionError("a process pool for one configuration")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "--workers", "24",
                       "-o", tmp_path / "a.csv")
    assert code == 0, err
    assert (tmp_path / "a.csv").read_text().count("\n") == 2


# --- feature files ------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path):
    V = np.eye(3, 2)
    np.save(tmp_path / "V.npy", V)
    (tmp_path / "object.json").write_text('{"a": [1, 0]}')
    (tmp_path / "bigint.json").write_text("[[" + "9" * 400 + ", 0], [0, 1], [0, 0]]")
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "bool.json").write_text("[[true, false], [false, true], [false, false]]")
    np.save(tmp_path / "complex.npy", V + 0j)
    np.save(tmp_path / "strings.npy", V.astype(str))
    (tmp_path / "empty.csv").write_text("")
    return tmp_path


@pytest.mark.parametrize("name, fragment", [
    ("object.json", "list of rows"), ("bigint.json", "too large"), ("deep.json", "nested"),
    ("bool.json", "found true"), ("complex.npy", "complex"), ("strings.npy", "text"),
    ("empty.csv", "empty"),
])
def test_feature_files_only_real_numbers(files, name, fragment, capsys):
    with _no_warnings():
        code, _, err = run(capsys, "predict", "--features", files / name, "--ood",
                           files / "V.npy")
    assert code == 2
    line = one_line(err)
    assert line.startswith("oodcalc: error: --features: got ") and fragment in line


class _no_warnings:
    def __enter__(self):
        import warnings
        self.catcher = warnings.catch_warnings()
        self.catcher.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)


# --- output paths ------------------------------------------------------------------------

OUTPUTS = {   # command → how it names its output
    "sweep": (["sweep", "--gamma", "1,-0.9", "-o"], ".csv"),
    "plot": (["plot", "losses", "--gamma", "1,-0.9", "-o"], ".png"),
    "reproduce": (["reproduce", "synthetic", "-f", "json", "-o"], ".json"),
}


@pytest.fixture
def places(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("a file")
    os.mkfifo(tmp_path / "fifo")
    ro = tmp_path / "readonly"
    ro.mkdir()
    ro.chmod(0o555)
    yield tmp_path
    ro.chmod(0o755)


@pytest.mark.parametrize("command", OUTPUTS)
@pytest.mark.parametrize("where, fragment", [
    ("", "an empty path"),
    ("adir", "a directory"),
    ("adir/", "a directory"),
    ("a" * 300 + "{suffix}", "bytes long"),
    ("/proc/version", "a system path"),
    ("/dev/stdout", "a system path"),
    ("afile/out{suffix}", "afile is a file, not a directory"),
    ("missing/out{suffix}", "does not exist"),
    ("fifo", "FIFO"),
])
def test_bad_output_paths(command, where, fragment, places, capsys, monkeypatch, no_engines):
    monkeypatch.chdir(places)
    args, suffix = OUTPUTS[command]
    before = sorted(p.name for p in places.iterdir())
    code, _, err = run(capsys, *args, where.format(suffix=suffix))
    assert code == 2
    assert fragment in one_line(err)
    assert sorted(p.name for p in places.iterdir()) == before


def test_unwritable_directory_refused_before_work(places, capsys, monkeypatch, no_engines):
    """Root writes anywhere, so the permission check is simulated: access() says no."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if "readonly" in str(p)
                        and mode & os.W_OK else real(p, mode))
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o", places / "readonly/a.csv")
    assert code == 2 and "the directory is read-only" in one_line(err)


def test_device_is_refused_and_stays_a_device(tmp_path, capsys, no_engines):
    device = tmp_path / "null.csv"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        pytest.skip("cannot create a device node here")
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o", device)
    assert code == 2 and "a device" in one_line(err)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_symlink_is_followed_and_kept(tmp_path, capsys):
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to("real.csv")
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o", link)
    assert code == 0, err
    assert link.is_symlink() and target.read_text().startswith("geometry,")


def test_dangling_symlink_into_a_missing_directory(tmp_path, capsys, no_engines):
    (tmp_path / "link.csv").symlink_to("missing/x.csv")
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o", tmp_path / "link.csv")
    assert code == 2 and "does not exist" in one_line(err)
    assert (tmp_path / "link.csv").is_symlink()


def test_stale_temporary_of_a_killed_run_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = tmp_path / f".out.csv.{pid}{io.PARTIAL}"
    stale.write_text("half")
    other = tmp_path / f".other.csv.{pid}{io.PARTIAL}"
    other.write_text("not ours to judge")
    live = tmp_path / f".out.csv.{os.getpid()}{io.PARTIAL}x"   # not our pattern
    live.write_text("kept")
    io.write_text_atomic(tmp_path / "out.csv", "new")
    assert not stale.exists() and other.exists() and live.exists()
    assert (tmp_path / "out.csv").read_text() == "new"


def test_interrupt_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.csv"
    target.write_text("precious")

    def interrupted(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        io.write_atomic(target, interrupted)
    assert target.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir()] == ["data.csv"]


@pytest.mark.parametrize("where", ["existing", "existing/sub", "/proc", "", "fifo"])
def test_derive_write_destination_checked_before_deriving(where, places, capsys, monkeypatch):
    import oodcalc.symbolic.documents as documents
    monkeypatch.setattr(documents, "write", lambda *a: pytest.fail("derived first"))
    monkeypatch.chdir(places)
    (places / "existing").write_text("a file")
    code, _, err = run(capsys, "derive", "--write", where)
    assert code == 2 and one_line(err).startswith("oodcalc: error: --write: got ")


# --- the CLI conventions ------------------------------------------------------------------

def test_version_and_bare_start_text(capsys):
    import oodcalc
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"oodcalc {oodcalc.__version__}"
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    assert "Start with: oodcalc predict --gamma 1,-0.9" in out
    for command in ("predict", "simulate", "sweep", "plot", "reproduce", "derive", "verify"):
        assert f"\n  {command} " in out
    assert max(map(len, out.splitlines())) <= 80


@pytest.mark.parametrize("words", [[], ["predict"], ["simulate"], ["sweep"], ["plot"],
                                   ["plot", "losses"], ["plot", "phase-diagram"],
                                   ["reproduce"], ["reproduce", "synthetic"], ["derive"],
                                   ["verify"]])
def test_short_and_long_help_everywhere(words, capsys):
    code_short, short, _ = run(capsys, *words, "-h")
    code_long, long, _ = run(capsys, *words, "--help")
    assert code_short == code_long == 0 and short == long and "Usage:" in short


def test_help_shows_defaults_without_stray_spaces(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = run(capsys, "sweep", "--help")
    for fragment in ("(0.01)", "(0.1)", "(1000000)", "each row's --eta",
                     "from the file's extension", "on a terminal", 'oodcalc[dask]'):
        assert fragment in out, fragment
    assert not re.search(r"\w \.(\s|$)", out, re.MULTILINE)   # "Output format ." was one
    _, out, _ = run(capsys, "derive", "--help")
    assert "$$…$$" in out


def test_install_hint_works_for_a_wheel(monkeypatch):
    import builtins

    from oodcalc import plots
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(plots.InputError, match=r'pip install "oodcalc\[plot\]"'):
        plots._pyplot()


def _run_cli(*args, columns=None):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "oodcalc", *args], capture_output=True,
                          text=True, env=env)


def test_piped_output_never_wraps_inside_a_line():
    out = _run_cli("predict", "--gamma", "1,-0.9").stdout
    assert "; exact population dynamics from Q = 0\n" in out
    assert "\nstep-size bound min_(n≠k) exp(−β_(u_n,u_k)) = 0.37177; η_ft = 0.1 is within" in out
    assert not any(line.strip() in ("0", "Q =") for line in out.splitlines())


def test_reproduce_at_80_columns_keeps_every_cell(monkeypatch, capsys):
    out = _run_cli("reproduce", columns=80).stdout
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in out
    for cell in ("experiment", "magnitude", "note", "orthogonal", "Attn_1(u_1)", "0.002499",
                 "[12]"):
        assert cell in out, cell


def test_predict_at_80_columns_keeps_formulas_whole():
    out = _run_cli("predict", "--gamma", "1,-0.9", columns=80).stdout
    assert max(map(len, out.splitlines())) <= 80 and "…" not in out
    for formula in ("Q = 0", "−γ2·γ1 = +0.9", "γ2² = 0.81", "L = Σ e_k/K = 0.24931"):
        assert formula in out, formula


def test_json_output_has_no_nonfinite_numbers(capsys):
    code, out, _ = run(capsys, "predict", "--orthogonal", "--K", "3", "--json")
    assert code == 0
    json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


# --- the library refuses what the CLI refuses (one guard, issue 23) ----------------------

@pytest.fixture
def api_cap(monkeypatch, no_engines):
    """A cap of 1 GiB and no engine: each entry point must refuse before one runs."""
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "1G")
    return monkeypatch


def _far_setting():
    import oodcalc as oc
    # K = 1700: the geometry (d = 3400, 92 MB) fits 1 GiB, predict's K × K dynamics do not
    return oc.Setting(oc.rotation(0.5, K=1700))


@pytest.mark.parametrize("entry", ["predict", "simulate_population", "simulate_prompts",
                                   "sweep", "loss_trajectories", "weight_trajectories",
                                   "ood_error_vs_theta", "phase_diagram_k2"])
def test_every_entry_point_refuses_out_of_reach_in_api_words(entry, api_cap):
    import oodcalc as oc
    from oodcalc import plots, simulate, sweep as sweep_module
    calls = {
        "predict": lambda: oc.predict(_far_setting()),
        "simulate_population": lambda: simulate.simulate_population(_far_setting()),
        "simulate_prompts": lambda: simulate.simulate_prompts(_far_setting(), N=64),
        # five rows of K = 1700 fit the cap, twice five do not
        "sweep": lambda: REAL_SWEEP([sweep_module.theta_grid(np.linspace(0, 1, 5), K=1700)] * 2),
        "loss_trajectories": lambda: plots.loss_trajectories(_huge_report(30000)),
        "weight_trajectories": lambda: plots.weight_trajectories(_huge_report(600)),
        "ood_error_vs_theta": lambda: plots.ood_error_vs_theta(20000),
        "phase_diagram_k2": lambda: plots.phase_diagram_k2(3000),
    }
    with pytest.raises(oc.OodcalcError) as caught:
        calls[entry]()
    message = str(caught.value)
    assert "--" not in message.split(";")[0], message       # API words, not options
    assert ("the geometry's K" in message or "over the memory cap" in message
            or "curves" in message), message


def _huge_report(K):
    """A report's shape as the figures read it (K features, a few steps), no dynamics."""
    from types import SimpleNamespace
    steps = np.zeros((3, 1, 1))
    return SimpleNamespace(parameters={"K": K}, trajectories={"pretrain": steps,
                                                              "finetune_ood": steps})


def test_five_thousand_random_gammas_refused_fast_by_api_and_cli(capsys):
    """Issue 23: oc.predict of 5000 random γ was refused after 21 s (at 3 GB), in CLI
    words; now in API words, before any K × K array, in about a second; the CLI says the
    same with its options, before the geometry exists."""
    import resource
    import time

    import oodcalc as oc
    gamma = np.random.default_rng(0).uniform(-1, 1, 5000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    setting = oc.Setting(oc.parallel_shift(gamma))
    with pytest.raises(oc.ComputationError) as caught:
        oc.predict(setting)
    assert time.perf_counter() - start < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 << 10  # KiB
    assert "_features" not in vars(setting.geometry)     # V and U (800 MB) never built
    message = str(caught.value)
    assert "lower the geometry's K or raise Protocol.eps" in message and "--" not in message
    code, _, err = run(capsys, "predict", "--gamma", ",".join(f"{g:.6f}" for g in gamma))
    assert code == 1
    assert "give fewer --gamma values or raise --eps or raise --eta-ft" in one_line(err)


def test_the_cli_maps_the_library_names_to_its_options():
    from oodcalc.errors import ComputationError, InputError, naming, param
    err = InputError(param("K"), 5000, f"{param('K', 'lower')} or {param('eps', 'raise')}")
    assert str(err) == "the geometry's K: got 5000; lower the geometry's K or raise Protocol.eps"
    with pytest.raises(InputError) as caught:
        with naming({"K": ("--gamma", "5000 values"), "lower K": "give fewer --gamma values",
                     "eps": "--eps"}):
            raise err
    assert str(caught.value) == ("--gamma: got 5000 values; give fewer --gamma values or "
                                 "raise --eps")
    assert str(ComputationError(f"raise {param('max_steps')}")) == "raise Protocol.max_steps"


# --- part 2 of issue 23: hostile inputs that were accepted or mis-reported -----------------

@pytest.mark.parametrize("value", ["1e400", "1e308Y", "9" * 5000, "١٠G", "inf", "nan"])
def test_memory_variable_out_of_range_is_one_line_naming_it(value, capsys, monkeypatch):
    monkeypatch.setenv(limits.MEMORY_VARIABLE, value)
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9")
    assert code == 2
    assert one_line(err).startswith(f"oodcalc: error: {limits.MEMORY_VARIABLE}: got ")


def test_sweep_refuses_what_predict_refuses_before_running(capsys, tmp_path, monkeypatch):
    """--eta 1e6 --max-steps 1e12 ran for ~10⁷ s (predict refused it in 0.3 s)."""
    import time
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "--eta", "1e6", "--max-steps",
                       "1e12", "-o", "x.csv")
    assert code == 1 and time.perf_counter() - start < 10
    assert "lower --max-steps" in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_weights_figure_of_a_million_curves_is_refused_before_work(capsys, tmp_path,
                                                                    monkeypatch, no_engines):
    """plot weights --mean-query --K 1000 was at 3.8 GB after 5 min: a curve per logit."""
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, "plot", "weights", "--mean-query", "--K", "1000", "--eps",
                       "100", "-o", "w.pdf")
    assert code == 2
    line = one_line(err)
    assert line.startswith("oodcalc: error: --K: got 1000; the figure would draw") and \
        "curves" in line


def test_gamma_that_underflows_is_refused(capsys, no_engines):
    """--gamma 1e-400,0.5 silently became γ = (0, 0.5)."""
    code, _, err = run(capsys, "predict", "--gamma", "1e-400,0.5")
    assert code == 2 and "too small for a float64" in one_line(err)
    from oodcalc.cli import options
    assert options.numbers("--gamma", "1e-300,-0,1e-320") == [1e-300, 0.0, 1e-320]


def test_sweep_of_more_axes_than_numpy_has_dimensions(capsys, tmp_path):
    """--gamma with 31 or more entries: numpy's 32-dimension limit in np.meshgrid."""
    code, _, err = run(capsys, "sweep", "--gamma=" + ",".join(["0.5"] * 40), "-o",
                       tmp_path / "x.csv")
    assert code == 0, err
    assert (tmp_path / "x.csv").read_text().count("\n") == 2


def test_large_json_and_npy_feature_files_are_refused_by_size_before_reading(
        tmp_path, capsys, monkeypatch, no_engines):
    """A 1 GB JSON was read whole (100 MB: 66 s, 3.2 GB); an 11000 × 11000 .npy was
    refused only after 41 s and 3.8 GB although its shape is in its header."""
    big = tmp_path / "V.json"
    with open(big, "w") as f:                     # 200 MB of text, sparse: nothing written
        f.truncate(200 << 20)
    code, _, err = run(capsys, "predict", "--features", big, "--ood", big)
    assert code == 2 and "JSON feature files are at most 32 MiB" in one_line(err)
    with open(big, "w") as f:                     # under the size cap, over a memory cap
        f.truncate(20 << 20)
    monkeypatch.setenv("OODCALC_MAX_MEMORY", "256M")
    code, _, err = run(capsys, "predict", "--features", big, "--ood", big)
    assert code == 2 and "over the memory cap" in one_line(err)
    monkeypatch.delenv("OODCALC_MAX_MEMORY")
    npy = tmp_path / "V.npy"
    with open(npy, "wb") as f:                    # the header of 11000 × 11000 float64
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (11000, 11000)})
        f.truncate(f.tell() + 11000 * 11000 * 8)
    code, _, err = run(capsys, "predict", "--features", npy, "--ood", npy)
    assert code == 2
    assert one_line(err).startswith("oodcalc: error: --features: got 11000 features; ")


def _read_only(monkeypatch, directory):
    """``directory`` made read-only (mode 555); root writes anyway, so access() says no."""
    directory.chmod(0o555)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if
                        os.path.abspath(p) == str(directory) and mode & os.W_OK
                        else real(p, mode))


@pytest.mark.parametrize("command", OUTPUTS)
def test_read_only_working_directory_is_called_read_only(command, tmp_path, capsys,
                                                         monkeypatch, no_engines):
    """It was reported as "permission denied"."""
    work = tmp_path / "work"
    work.mkdir()
    _read_only(monkeypatch, work)
    monkeypatch.chdir(work)
    args, suffix = OUTPUTS[command]
    try:
        code, _, err = run(capsys, *args, "out" + suffix)
    finally:
        work.chmod(0o755)
    line = one_line(err)
    assert code == 2 and line.startswith("oodcalc: error: --output: got 'out")
    assert line.endswith(f"cannot create a file in the working directory {work}: the "
                         "directory is read-only (no write permission)"), line
    assert "permission denied" not in line and list(work.iterdir()) == []


def test_read_only_file_system_and_unenterable_directory_are_told_apart(tmp_path,
                                                                       monkeypatch):
    class ReadOnly:
        f_flag = os.ST_RDONLY
    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly())
    with pytest.raises(io.InputError, match="read-only file system"):
        io.check_output(tmp_path / "a.csv")
    monkeypatch.undo()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(tmp_path)
                        else real(p, mode))
    with pytest.raises(io.InputError, match="permission denied"):
        io.check_output(tmp_path / "a.csv")


@pytest.mark.parametrize("where", ["XDG_CACHE_HOME is a file", "HOME is read-only"])
def test_plot_prints_no_matplotlib_cache_warning(where, tmp_path):
    """matplotlib printed two lines ("mkdir -p failed ...", "Matplotlib created a temporary
    cache directory ...") when its default directories could not be used."""
    pytest.importorskip("matplotlib")
    blocker = tmp_path / "afile"
    blocker.write_text("a file")
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env["TMPDIR"] = str(tmp_path)
    if where.startswith("XDG"):
        env["XDG_CACHE_HOME"] = str(blocker)
    else:     # root writes into a mode-555 HOME: a HOME under a file cannot be used either
        env["HOME"] = str(blocker / "home")
    # The fresh directory has no font cache: matplotlib announces its building on a 5-s
    # timer (FontManager.__init__), so a loaded machine may print that one line, once.
    building = "Matplotlib is building the font cache; this may take a moment.\n"
    for run in range(2):      # the second run reuses oodcalc's directory and its font cache
        done = subprocess.run([sys.executable, "-m", "oodcalc", "plot", "losses", "--gamma",
                               "1,-0.9", "-o", tmp_path / "l.png"], capture_output=True,
                              text=True, env=env, cwd=tmp_path)
        allowed = ("", building) if run == 0 else ("",)
        assert done.returncode == 0 and done.stderr in allowed, done.stderr
    assert (tmp_path / "l.png").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["afile", "l.png", f"oodcalc-matplotlib-{os.getuid()}"]


def test_matplotlib_directory_the_user_set_is_kept(tmp_path, monkeypatch):
    from oodcalc import plots
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("")
    plots._usable_matplotlib_dirs()
    assert os.environ["MPLCONFIGDIR"] == str(tmp_path / "mine")
    monkeypatch.delenv("MPLCONFIGDIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    plots._usable_matplotlib_dirs()
    assert os.environ["MPLCONFIGDIR"] == str(tmp_path / f"oodcalc-matplotlib-{os.getuid()}")
    assert not plots._can_hold(str(tmp_path / "afile" / "matplotlib"))
    assert plots._can_hold(str(tmp_path / "new" / "deeper"))


def test_reproduce_with_a_coarse_step_warns_as_predict_does(capsys):
    """reproduce --eta 1000 gave no coarse-η warning (predict gives one), and its note said
    "0.0024 is consistent with 0.0000000 truncated to 4 decimals"."""
    code, out, err = run(capsys, "reproduce", "--eta", "100", "-f", "json")
    lines = err.strip().splitlines()
    assert code == 0 and [line[:30] for line in lines] == [
        "oodcalc: warning: K = 4: --eta", "oodcalc: warning: K = 2: --eta"], err
    rows = {r["experiment"]: r for t in json.loads(out)["tables"].values() for r in t}
    note = rows["θ = 0"]["note"]
    assert "consistent with" not in note and "0.0000" not in note
    assert "ours is 5.53e-06, which the paper's 0.0024 is not" in note and "overshot" in note
    assert rows["θ = 0"]["warnings"] == [lines[0].removeprefix("oodcalc: warning: ")]
    assert "so fine-tuning runs no step: F = 0" in rows["γ2 = +0.95"]["note"]
    assert "> ε" not in rows["γ2 = +0.95"]["note"]
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--eta", "100")
    assert code == 0 and err.strip() == "oodcalc: warning: " + lines[1].split(": ", 3)[3]
    code, out, err = run(capsys, "reproduce", "-f", "json")   # the default step: no warning
    assert code == 0 and err == "" and '"warnings"' not in out
    assert "consistent with 0.0024992 truncated to 4 decimals" in out


# --- a long run says so before it starts (issue: K ≈ 1000 ran ~3 h silently with --json) ----

def _stub_predict(monkeypatch):
    """predict's engine replaced by a refusal: what the CLI said before it is what counts."""
    import importlib

    from oodcalc.errors import ComputationError
    predict_module = importlib.import_module("oodcalc.prediction")

    def refuse(*args, **kwargs):
        raise ComputationError("stub: the run itself is not the test")
    monkeypatch.setattr(predict_module, "predict", refuse)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_long_predict_says_how_long_before_it_starts(capsys, monkeypatch, json_flag):
    _stub_predict(monkeypatch)
    # K = 600: ~2 min by the cost model with the compiled node kernel (the fast extra; K = 300
    # fell to ~17 s, under the announcement's minute), hours without it
    gamma = ",".join(map(str, np.random.default_rng(0).uniform(-1, 1, 600).round(3)))
    code, _, err = run(capsys, "predict", f"--gamma={gamma}", *json_flag)
    first, last = err.splitlines()[0], err.splitlines()[-1]
    assert code == 1 and last.startswith("oodcalc: error: stub")
    assert re.match(r"oodcalc: predict: this run will take about \d+ (s|min|h) \(fine-tuning "
                    r"≈ [\d,]+ steps on 600×600 logits by the ", first), first
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", *json_flag)   # a short one
    assert err.splitlines() == ["oodcalc: error: stub: the run itself is not the test"]


@pytest.mark.parametrize("args", [["predict", "--mean-query", "--K", "1024"],
                                  ["predict", "--gamma", "1,-0.9", "--eta", "1e6"],
                                  ["reproduce", "--eta", "1e6"], ["reproduce", "--eta", "1e300"]])
def test_a_refused_run_is_not_announced(capsys, args):
    """The fuzz campaign found the time estimate printed before predict's own refusal (two
    lines): a run out of reach gets its one refusal line only."""
    code, _, err = run(capsys, *args)
    assert code == 1 and one_line(err).startswith("oodcalc: error: fine-tuning would need")


def test_the_time_estimate_starts_from_the_logits_a_coarse_step_reaches():
    """At η = 1000 one step passes α* by 124: fine-tuning from α* would take ~0 steps, from
    where pretraining lands it takes 242,591 (``oodcalc predict --gamma=1,-0.2 --eta 1000``,
    its report's T2; about a minute)."""
    import oodcalc as oc
    from oodcalc.prediction import expected_seconds
    _, words = expected_seconds(oc.Setting(oc.parallel_shift([1, -0.2]), oc.Protocol(eta=1000)))
    steps = int(re.search(r"≈ ([\d,]+) steps", words).group(1).replace(",", ""))
    assert abs(steps - 242_591) < 0.001 * 242_591, words
    seconds, words = expected_seconds(oc.Setting(oc.parallel_shift([1, -0.2])))
    assert seconds < 1 and "≈ 364 steps" in words    # T2 = 363 at the defaults


def test_the_ray_estimate_follows_the_engine_the_run_takes(monkeypatch):
    """A rotation at K = 1024 pretrains 11,095,966 steps on the ray: a few ms by the step
    counter, about 1.5 s with the compiled loop, 6-11 s plain (bench_predict.py). The
    estimate once said 67 s whatever the engine and the CLI announced "this run will take
    about 67 s" before a 1.5 s run."""
    import oodcalc as oc
    from oodcalc import estimates
    from oodcalc.finetune import compiled
    from oodcalc.cli.progress import LONG_RUN_SECONDS
    from oodcalc.prediction import expected_seconds
    setting = oc.Setting(oc.rotation(0.5, 1024))
    steps = estimates.pretrain_steps(1024, 0.01, 0.1)
    assert expected_seconds(setting)[0] == 2 * estimates.RAY_LEAP_SECONDS
    # the loops' estimates, with the step counter off
    monkeypatch.setattr(estimates, "RAY_LEAP_FROM_STEPS", math.inf)
    assert estimates.ray_compiled(steps, loaded=False)
    monkeypatch.setattr(compiled, "available", lambda: True)
    fast = expected_seconds(setting)[0]
    assert fast == pytest.approx(estimates.COMPILED_LOAD_SECONDS + 2 * steps
                                 * estimates.SECONDS_PER_RAY_STEP["compiled"])
    assert fast < 3 < LONG_RUN_SECONDS
    # K = 256 pretrains 796,641 steps: plain, and so is fine-tuning (Numba never loaded)
    short = estimates.pretrain_steps(256, 0.01, 0.1)
    assert expected_seconds(oc.Setting(oc.rotation(0.5, 256)))[0] == pytest.approx(
        2 * short * estimates.SECONDS_PER_RAY_STEP["python"])
    monkeypatch.setattr(compiled, "available", lambda: False)
    plain = expected_seconds(setting)[0]
    assert plain == pytest.approx(2 * steps * estimates.SECONDS_PER_RAY_STEP["python"])
    assert 10 < plain < LONG_RUN_SECONDS


def test_the_kernel_estimate_counts_its_threads(monkeypatch):
    """The per-column kernel runs the columns on every core: random γ at K = 256 (through
    the nodes) took 19.6 s CPU on 2 threads at load 14 (bench_predict.py's γ, 2026-12-05;
    the direct kernel: 145 s CPU, 74 s wall); the estimate says 11 s of wall time."""
    from oodcalc import estimates
    one, two = [], []
    for threads, out in (("1", one), ("2", two)):
        monkeypatch.setenv("NUMBA_NUM_THREADS", threads)
        out.append(estimates.finetune_seconds(256, math.log(796_399), "compiled"))
        out.append(estimates.finetune_seconds(256, math.log(796_399), "numpy"))
    assert two[0] == pytest.approx(one[0] / 2, rel=0.01) and two[1] == one[1]
    assert 5 < two[0] < 40


@pytest.mark.parametrize("numba", [False, True])
def test_reproduce_says_how_long_before_it_starts(capsys, monkeypatch, numba):
    """At eta = 1000 the estimate is about 97 s with the NumPy engine and 49 s with the
    compiled one (which the fast extra installs): only the first passes LONG_RUN_SECONDS.
    The engine is pinned, so the test says the same with and without the extra."""
    from oodcalc import experiments
    from oodcalc.finetune import compiled

    def refuse(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(experiments, "reproduce", refuse)
    monkeypatch.setattr(compiled, "available", lambda: numba)
    code, _, err = run(capsys, "reproduce", "--eta", "1000")
    assert code == 130
    announced = re.match(r"oodcalc: reproduce: this run will take about \d+ (s|min) "
                         r"\(eps = 0.01, eta = 1000, eta_ft = 1000\)$", err.splitlines()[0])
    assert bool(announced) is not numba, err


def test_depth_says_what_it_will_train_and_how_long():
    from oodcalc.console import duration
    from oodcalc.depth import configs
    from oodcalc.depth.experiment import SECONDS_PER_COST, Task, announcement
    config = next(iter(configs(["attention"], ["sgd"], [1])))
    tasks = [Task(config, seed, (-0.75, 0.0, 0.75)) for seed in range(10)]
    one = 10 * 2.5 * SECONDS_PER_COST             # cost 2.5 each: 1 layer, 1 + 3 × 0.5
    assert announcement(tasks, 6, 1) == \
        f"30 runs to train in 10 trainings (6 cached), about {duration(one)} with 1 worker"
    assert announcement(tasks, 0, 2).endswith(f"about {duration(one / 2)} with 2 workers")


def test_long_runs_print_progress_when_piped_with_an_eta(capsys):
    """reproduce depth and the real-text experiment printed nothing for hours when piped."""
    from io import StringIO

    from rich.console import Console

    from oodcalc.cli.progress import count_progress
    from oodcalc.cli.reproduce_real import Bar
    piped = Console(file=StringIO())
    with count_progress("training", lines=True, eta=True, console=piped) as progress:
        progress(0, 3, "6 runs to train in 3 trainings (0 cached), about 8 s with 1 worker")
        for done in (1, 2, 3):
            progress(done, 3, f"seed {done - 1}")
    lines = piped.file.getvalue().splitlines()
    assert lines[0] == "training: 6 runs to train in 3 trainings (0 cached), about 8 s with 1 worker"
    assert re.fullmatch(r"training: 1/3 seed 0 \(ETA \d+ s\)", lines[1]), lines
    assert lines[3] == "training: 3/3 seed 2" and len(lines) == 4     # no ETA when done
    with Bar() as bar:                       # stderr is captured: not a terminal
        bar.stage("fine-tuning and evaluating", 100)
        for _ in range(100):
            bar.advance()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "oodcalc: real: fine-tuning and evaluating: 0/100"
    assert len(err) == 10 and re.fullmatch(
        r"oodcalc: real: fine-tuning and evaluating: 90/100 \(ETA \d+ s\)", err[-1]), err


def test_a_short_option_with_an_equals_sign_is_not_a_file_name(tmp_path, capsys,
                                                              monkeypatch):
    """The fuzz campaign: ``-o=out.svg`` wrote a file named '=out.svg' (click keeps the '='
    of a short option's attached value, as getopt does)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o=x.csv")
    assert code == 2 and one_line(err) == (
        "oodcalc: error: --output: got '=x.csv'; a file name starting with '=' (-o=FILE "
        "names the file '=FILE': write -o FILE); write --output FILE or --output=FILE, or "
        "./=x.csv for such a file")
    assert not list(tmp_path.iterdir())
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "-o", "./=x.csv")
    assert code == 0 and (tmp_path / "=x.csv").exists()


def test_the_estimate_picks_predicts_engine():
    """With Numba present, predict runs a short diagonal fine-tuning by NumPy (loading the
    kernel does not pay); the estimate once said 'compiled' and promised 0.02 s for the 80 s
    of `reproduce --eta 1000` (CI with the fast extra caught it). That run's 242,585 steps
    at K = 2 now go to the kernel, estimated at what its kept steps cost (10^6 steps took
    47 s compiled, well over 117 s by NumPy)."""
    from oodcalc.setting import Protocol
    small = estimates.finetune_plan(2, Protocol(ft_steps=1000), diagonal=np.array([1.0, -0.2]),
                                    compiled_available=True)
    assert small[1] == "numpy" and not estimates.compiled_pays(2, 1000)
    eta = estimates.finetune_plan(2, Protocol(eta=1000), diagonal=np.array([1.0, -0.2]),
                                  compiled_available=True, alpha=125.0)
    assert eta[1] == "compiled" and estimates.finetune_seconds(2, eta[0], "compiled") > 10
    big = estimates.finetune_plan(300, Protocol(), diagonal=np.linspace(-1, 1, 300),
                                  compiled_available=True)
    assert big[1] == "compiled"
    assert estimates.finetune_plan(300, Protocol(), diagonal=np.linspace(-1, 1, 300),
                                   compiled_available=False)[1] == "numpy"


# --- the terms engine (interventions) has its steps estimated before it runs ---------------

def test_an_intervention_run_out_of_reach_is_refused_before_it_runs(capsys):
    """``--project both --replay 0.2``: u1 lies in span(V), the projected fit leaves it to
    replay, and e_1 stays near 0.22; the run went to the 10^6-step cap (about 2 min) and
    then exited 1. The probe, doubled to 16,000 steps, still extrapolates past 10^50 steps."""
    import time
    started = time.monotonic()
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--project", "both",
                         "--replay", "0.2")
    line = one_line(err)
    assert code == 1 and out == "" and time.monotonic() - started < 20
    assert line.startswith("oodcalc: error: fine-tuning with replay = 0.2, project = both "
                           "would run to its step cap (--max-steps = 1,000,000) without "
                           "meeting the stopping rule"), line
    assert "16,000-step probe" in line and "give --ft-steps (e.g. 10,000)" in line


def test_the_unreachable_run_with_a_budget_reports_not_reached(capsys):
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--project", "both",
                         "--replay", "0.2", "--ft-steps", "2000", "--json")
    report = json.loads(out)
    assert code == 0 and report["finetune"]["reached"] is False
    assert report["finetune"]["T2"] == 2000
    assert "not reached (e_1 = 0.2" in err and "after the fixed 2000 fine-tuning steps" in err


def test_the_terms_estimate_extrapolates_the_probe():
    """Power law through e(t/2), e(t): e = 0.1 → 0.05 over 500 → 1000 steps is p = 1, so
    eps = 0.01 is met at 1000 · 5 = 5,000 steps; an error that does not fall: inf."""
    from oodcalc import estimates
    assert math.exp(estimates.terms_log_steps(1000, 0.1, 0.05, 0.01)) == pytest.approx(5000)
    assert math.exp(estimates.terms_log_steps(1000, 0.1, 0.025, 0.01)) == \
        pytest.approx(1000 * 2.5 ** 0.5)                              # p = 2
    assert estimates.terms_log_steps(1000, 0.05, 0.05, 0.01) == math.inf
    # against a run: --project key fine-tunes 3,802 steps; the estimate is within 2×
    import oodcalc as oc
    from oodcalc.prediction import expected_seconds
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(project="key"))
    _, words = expected_seconds(setting)
    steps = int(re.search(r"≈ ([\d,]+) steps", words).group(1).replace(",", ""))
    assert oc.predict(setting).finetune.T2 == 3802 and 3802 / 2 < steps < 2 * 3802, words


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_long_intervention_run_says_so_before_it_starts(capsys, monkeypatch, json_flag):
    _stub_predict(monkeypatch)
    # --project key to eps_ft = 3e-5: about 1.6e6 steps of the terms engine, minutes
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--project", "key",
                       "--eps-ft", "3e-5", *json_flag)
    first = err.splitlines()[0]
    assert code == 1 and err.splitlines()[-1].startswith("oodcalc: error: stub")
    assert re.match(r"oodcalc: predict: this run will take about \d+ (s|min) \(fine-tuning "
                    r"with interventions ≈ [\d,]+ steps on 2×2 logits by the terms engine",
                    first), first
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--project", "key", *json_flag)
    assert err.splitlines() == ["oodcalc: error: stub: the run itself is not the test"]


def test_a_cheap_cap_runs_without_a_probe(monkeypatch):
    """advise's arms have caps of a few thousand steps: probing them cost more than it
    could save (advise at K = 2: 4.6 s → 5.7 s). A long cap is still probed."""
    import oodcalc as oc
    from oodcalc.finetune import engine
    calls = []
    real = engine.probe
    monkeypatch.setattr(engine, "probe", lambda *a, **k: calls.append(1) or real(*a, **k))
    geometry = oc.parallel_shift([1, -0.9])
    short = oc.predict(oc.Setting(geometry, oc.Protocol(replay=0.5, max_steps=5000)))
    assert calls == [] and short.finetune.reached
    long = oc.predict(oc.Setting(geometry, oc.Protocol(replay=0.5)))
    assert calls and long.finetune.T2 == short.finetune.T2
