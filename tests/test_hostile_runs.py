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
    """MAX_PHASE_STEPS: a fine-tuning's source-loss curve, at the longest JSON a row of
    two float64 takes, stays within the cache's record cap (cut the cap and it fails)."""
    from oodcalc.depth.cache import MAX_RECORD_BYTES
    from oodcalc.depth.protocol import MAX_PHASE_STEPS
    row = json.dumps([[-1.2345678901234567e-100, -1.2345678901234567e-100]],
                     separators=(",", ":"))
    per_step = len(row) - 1           # the row and its comma, without the outer brackets
    assert (MAX_PHASE_STEPS + 1) * per_step + 4096 < MAX_RECORD_BYTES


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
    assert "years (longer than the age of the universe)" in err and len(err) < 300


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
        with pytest.raises(ComputationError, match="more than max_steps = 1,000,000"):
            simulate(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eta_ft=1e-300)))
    # a phase within twice its cap runs (the rule's bound, not a tighter one)
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(max_steps=200))
    with pytest.raises(ComputationError, match="did not meet the stopping rule"):
        simulate_population(setting)             # T1 = 357 > 200, refused only by running
