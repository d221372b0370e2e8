"""Hostile sizes and step sizes for the long-running commands (issue 29): each is refused
before any work starts, with predict's rules where they mean the same, and what does run
says how long it takes."""

import json
import time

import pytest

from oodcalc.cli import main
from oodcalc.errors import ComputationError, InputError


def one_line_error(capsys, argv, code):
    start = time.perf_counter()
    assert main(argv) == code
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("oodcalc: error:"), err
    return err, elapsed


# --- reproduce depth | ladder: options checked before any training ----------------------

@pytest.mark.parametrize("command", ["depth", "ladder"])
@pytest.mark.parametrize("args, code, fragment", [
    # the record keeps the source loss at every fine-tuning step: 1e12 steps never fit
    (["--ft-steps", "1e12"], 2, "--ft-steps: got 1e12; at most 1,000,000"),
    (["--max-steps", "1e12"], 2, "--max-steps: got 1e12; at most 1,000,000"),
    # float32 parameters: torch raised 'value cannot be converted to type float' after
    # the announcement of a 38-75 min run
    (["--lr", "1e300"], 2, "--lr: got 1e300; at most 3.4e+38"),
    # every run would hit its step cap
    (["--eps", "1e-300"], 1, "would need about 10^301 steps"),
    (["--lr", "1e-300"], 1, "would need about 10^302 steps"),
])
def test_reproduce_refuses_hostile_protocols_before_training(capsys, tmp_path, monkeypatch,
                                                             command, args, code, fragment):
    from oodcalc.depth import experiment

    def no_training(*a, **k):
        raise AssertionError("training started")
    monkeypatch.setattr(experiment, "run_task", no_training)
    err, elapsed = one_line_error(
        capsys, ["reproduce", command, "--cache-dir", str(tmp_path), *args], code)
    assert fragment in err and elapsed < 5
    assert "DepthConfig" not in err              # the options' own names


def test_eps_refusal_names_what_would_reach_the_rule(capsys, tmp_path):
    err, _ = one_line_error(capsys, ["reproduce", "depth", "--cache-dir", str(tmp_path),
                                     "--eps", "1e-4"], 1)
    assert "more than 4 × max_steps = 5,000" in err
    assert "raise --max-steps to about 31,253 or --eps to about 0.00056" in err


def test_depth_config_guards_itself():
    from oodcalc.depth.protocol import MAX_PHASE_STEPS, DepthConfig
    with pytest.raises(InputError, match=r"DepthConfig.ft_steps: got 1000001; at most"):
        DepthConfig(ft_steps=MAX_PHASE_STEPS + 1)
    with pytest.raises(InputError, match=r"DepthConfig.lr: got 1e\+300"):
        DepthConfig(lr=1e300)
    with pytest.raises(ComputationError, match="raise DepthConfig.max_steps"):
        DepthConfig(eps=1e-4)
    # what the record's protocols use passes (the rule leaves them room)
    for protocol in ({}, {"eps": 0.005}, {"eps": 0.05, "optimizer": "adam"},
                     {"ft_steps": 500}, {"eps": 1e-4, "max_steps": 40_000},
                     {"ft_steps": MAX_PHASE_STEPS}):
        DepthConfig(**protocol)


def test_the_longest_fine_tuning_fits_the_cache_record_cap():
    """MAX_PHASE_STEPS: a fine-tuning's source- and OOD-loss curves, at the longest JSON a
    row of two float64 takes, stay within the cache's record cap (cut the cap and it fails)."""
    from oodcalc.depth.cache import MAX_RECORD_BYTES
    from oodcalc.depth.protocol import MAX_PHASE_STEPS
    row = json.dumps([[-1.2345678901234567e-100, -1.2345678901234567e-100]],
                     separators=(",", ":"))
    per_step = len(row) - 1           # the row and its comma, without the outer brackets
    assert 2 * (MAX_PHASE_STEPS + 1) * per_step + 4096 < MAX_RECORD_BYTES


def test_the_announced_time_counts_fixed_fine_tuning_steps():
    from oodcalc.depth import DepthConfig
    from oodcalc.depth.experiment import RULE_FT_STEPS, Task
    rule = Task(DepthConfig(), 0, (-0.75, 0.0, 0.75))
    assert rule.cost == 2.5
    assert Task(DepthConfig(ft_steps=RULE_FT_STEPS), 0, rule.gammas).cost == rule.cost
    long = Task(DepthConfig(ft_steps=1_000_000), 0, rule.gammas)
    assert long.cost == 1 + 3 * 0.5 * 1_000_000 / RULE_FT_STEPS     # was 2.5 too


# --- durations as a person reads them -----------------------------------------------------

@pytest.mark.parametrize("seconds, text", [
    (95, "95 s"), (500, "8 min"), (1e5, "28 h"), (5e5, "5.8 days"), (3e6, "35 days"),
    (1e8, "3 years"), (1e12, "31,688 years"), (1e14, "3e+06 years"),
    (1e300, "3e+292 years (longer than the age of the universe)"), (float("inf"), "forever")])
def test_durations_stay_short(seconds, text):
    from oodcalc.console import duration
    assert duration(seconds) == text


def test_the_fine_tuning_refusal_prints_a_readable_duration(capsys):
    err, _ = one_line_error(capsys, ["predict", "--gamma", "1,-0.9", "--eta-ft", "1e-300"], 1)
    assert "years (longer than the age of the universe)" in err and len(err) < 340
    assert err.rstrip().endswith("raise --eps or raise --eta-ft")    # K = 2: no fewer --gamma


# --- the simulators refuse what predict refuses, before their first step ------------------

@pytest.mark.parametrize("simulator", ["population", "prompts"])
@pytest.mark.parametrize("args, fragment", [
    (["--eta-ft", "1e-300"], "fine-tuning would need about 10^302 steps"),
    (["--eta", "1e-300"], "pretraining would need about 10^302 steps"),
    (["--eps", "1e-300"], "pretraining would need about 10^301 steps"),
    (["--eps-ft", "1e-300"], "fine-tuning would need about 10^301 steps"),
])
def test_simulate_refuses_what_predict_refuses(capsys, monkeypatch, simulator, args, fragment):
    """They ran 1 M steps (27-49 s, 260-430 MB) before failing; predict refused in 0.3 s."""
    from oodcalc.simulate import population, prompts

    def no_steps(*a, **k):
        raise AssertionError("a simulator started")
    monkeypatch.setattr(population, "train", no_steps)
    monkeypatch.setattr(prompts, "train_on_prompts", no_steps)
    predicted, _ = one_line_error(capsys, ["predict", "--gamma", "1,-0.9", *args], 1)
    err, elapsed = one_line_error(
        capsys, ["simulate", "-s", simulator, "--gamma", "1,-0.9", *args], 1)
    assert fragment in err and elapsed < 5
    assert ("pretraining" in err) == ("pretraining" in predicted)


def test_simulators_check_their_setting():
    import oodcalc as oc
    from oodcalc.simulate import simulate_population, simulate_prompts
    for simulate in (simulate_population, simulate_prompts):
        with pytest.raises(InputError, match="wrap the geometry"):
            simulate(oc.parallel_shift([1, -0.9]))
        with pytest.raises(ComputationError, match="more than Protocol.max_steps = 1,000,000"):
            simulate(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eta_ft=1e-300)))
    # a phase within twice its cap runs (the rule's bound, not a tighter one)
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(max_steps=200))
    with pytest.raises(ComputationError, match="did not meet the stopping rule"):
        simulate_population(setting)             # T1 = 357 > 200, refused only by running


# --- simulate: the stored path read off by matrix products, the run announced --------------

def test_logit_path_is_the_projection_of_every_iterate():
    import numpy as np

    from oodcalc.simulate.population import PATH_BLOCK, logit_path
    rng = np.random.default_rng(0)
    F = rng.standard_normal((6, 3))
    path = [rng.standard_normal((6, 6)) for _ in range(PATH_BLOCK + 7)]   # two blocks
    z = logit_path(F, path)
    assert z.shape == (len(path), 3, 3)
    for t in (0, PATH_BLOCK - 1, PATH_BLOCK, len(path) - 1):
        assert np.abs(z[t] - F.T @ path[t] @ F).max() < 1e-12
    assert np.abs(logit_path(F, np.array(path)) - z).max() < 1e-12


def test_simulators_do_not_contract_paths_with_einsum(monkeypatch):
    """np.einsum("dn,tde,ek->tnk") without optimize looped over t·d²·K² terms in one C
    call: 110× slower than the products at d = 128, K = 64, and deaf to Ctrl-C."""
    import numpy as np

    import oodcalc as oc
    from oodcalc import checks
    from oodcalc.simulate import population, prompts, simulate_population, simulate_prompts
    real = np.einsum

    def guarded(subscripts, *operands, **kwargs):
        assert "tde" not in subscripts, "a stored path contracted by einsum"
        return real(subscripts, *operands, **kwargs)
    monkeypatch.setattr(np, "einsum", guarded)
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=0.05))
    simulate_population(setting)
    simulate_prompts(setting, N=4, batch=16)
    checks.z_path(np.eye(2), [np.eye(2)] * 3)


def test_a_long_simulation_says_so_before_it_starts(capsys, monkeypatch):
    """simulate --orthogonal --K 64 --eta 1 ran for many minutes with no word."""
    import re

    from oodcalc import simulate

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(simulate, "simulate_population", interrupted)
    assert main(["simulate", "--orthogonal", "--K", "64", "--eta", "1", "--json"]) == 130
    first = capsys.readouterr().err.splitlines()[0]
    assert re.fullmatch(r"oodcalc: simulate: this run will take about \d+ (s|min) \(≈ 7,306 "
                        r"\+ 7,306 steps of GD on the 128×128 Q, about [\d.]+ GiB of memory\)",
                        first), first
    assert main(["simulate", "--gamma", "1,-0.9", "--json"]) == 130     # short: no word
    assert "this run will take" not in capsys.readouterr().err


def test_the_memory_estimate_counts_the_logit_trajectories():
    from oodcalc import estimates
    stored = estimates.population_bytes(64, 128, 0.01, 1.0, 1.0, 10**6)
    t = estimates.steps_held(64, 0.01, 1.0, 10**6)
    iterates = estimates.FLOAT * 128 * 128 * (2 * t + 10)
    assert stored - estimates.BASE_BYTES - estimates.geometry_bytes(128, 64) == \
        iterates + estimates.FLOAT * 64 * 64 * 3 * t


# --- plot phase-k3 and explore -------------------------------------------------------------

def test_phase_k3_counts_its_slices_before_the_sweep(capsys, monkeypatch, tmp_path):
    """1,000 slices of a 5 × 5 grid: 132 s of silence, then out of memory at 2.9 GB (the
    estimate counted 25,000 rows, not 1,000 figure panels)."""
    from oodcalc import sweep

    def no_sweep(*a, **k):
        raise AssertionError("the sweep started")
    monkeypatch.setattr(sweep, "sweep", no_sweep)
    many = ",".join(["0.5"] * 1000)
    err, elapsed = one_line_error(capsys, ["plot", "phase-k3", "-o", str(tmp_path / "k3.png"),
                                           "--grid", "5", "--gamma1", many], 2)
    assert "--gamma1: got 1,000 values; at most 50 slices" in err and len(err) < 300
    monkeypatch.setenv("OODCALC_MAX_MEMORY", "300M")      # 5 slices: 200 MiB + 5 × 24 MiB
    err, _ = one_line_error(capsys, ["plot", "phase-k3", "-o", str(tmp_path / "k3.png"),
                                     "--grid", "5", "--gamma1", "1,0.5,0,-0.5,-1"], 2)
    assert "--gamma1: got 5 values; the K = 3 figure (its slices): about 320 MiB" in err


def test_explore_shortens_the_slices_it_refuses(capsys, tmp_path):
    many = ",".join(["0.5"] * 1000)                  # a 4,049-character line before
    err, _ = one_line_error(capsys, ["explore", "-o", str(tmp_path / "x.html"),
                                     "--gamma1", many], 2)
    assert "--gamma1: got 1,000 values (0.5,0.5," in err and "at most 16 slices" in err
    assert len(err) < 200


@pytest.mark.parametrize("command", [["plot", "phase-k3", "-o", "k3.png"],
                                     ["explore", "-o", "x.html"]])
@pytest.mark.parametrize("args, fragment", [(["--eta", "1e-300"], "10^302 steps"),
                                            (["--eps", "1e-300"], "10^301 steps")])
def test_maps_refuse_what_predict_refuses(capsys, monkeypatch, tmp_path, command, args,
                                          fragment):
    """They ran to exit 0 (every row at its cap) where predict refuses."""
    from oodcalc import sweep

    def no_sweep(*a, **k):
        raise AssertionError("the sweep started")
    monkeypatch.setattr(sweep, "sweep", no_sweep)
    monkeypatch.chdir(tmp_path)
    err, elapsed = one_line_error(capsys, [*command, "--grid", "5", *args], 1)
    assert f"pretraining would need about {fragment}" in err and elapsed < 5
    assert "--eps" in err and not (tmp_path / command[-1]).exists()


# --- predict's fine-tuning engine at small K -------------------------------------------------

def test_a_long_small_fine_tuning_goes_to_the_compiled_kernel():
    """predict --gamma 1,-0.9 --ft-steps 1000000 ran by NumPy (117 s) and advised installing
    the fast extra with Numba installed; 10^7 steps compiled took 58 s. At K = 2 NumPy's time
    is its calls, not its 4e6 updates. Runs without Numba: the plan is told what is there."""
    import numpy as np

    from oodcalc import estimates
    from oodcalc.setting import Protocol
    diagonal = np.array([1.0, -0.9])

    def plan(steps, numba):
        return estimates.finetune_plan(2, Protocol(ft_steps=steps), diagonal=diagonal,
                                       compiled_available=numba)
    assert plan(10**6, True)[1:] == ("compiled", False)
    assert plan(10**6, False)[1:] == ("numpy", True)          # the hint, only without Numba
    assert plan(100, True)[1:] == ("numpy", False) == plan(100, False)[1:]  # load not repaid
    assert estimates.compiled_pays(300, 10**3)                 # large K: by its updates


def test_the_fast_extra_is_advised_only_without_numba(monkeypatch):
    import oodcalc as oc
    from oodcalc.finetune import compiled
    from oodcalc.prediction import expected_seconds
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(ft_steps=10**6))
    monkeypatch.setattr(compiled, "available", lambda: True)
    seconds, words = expected_seconds(setting)
    assert "per-column kernel (Numba)" in words and "pip install" not in words
    monkeypatch.setattr(compiled, "available", lambda: False)
    assert 'pip install "oodcalc[fast]"' in expected_seconds(setting)[1]
