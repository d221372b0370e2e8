"""Sequences of shifts: the K×K engine on every domain's logits against gradient descent
on the full Q (stages done on Q itself), perturbed engines that must be caught, the
continual-learning metrics against mammoth's formulas, the geometry and the command."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.errors import InputError
from oodcalc.finetune import sequence as engine
from oodcalc.simulate.sequence import simulate_sequence

from cli_run import one_line, run


def _random_shifts(K: int, d: int, S: int, seed: int) -> engine.Shifts:
    """V and S shifts in general position: every Gram block full, none diagonal."""
    rng = np.random.default_rng(seed)
    V, *Us = (np.linalg.qr(rng.standard_normal((d, K)))[0] for _ in range(S + 1))
    return oc.shifts_from_arrays(V, Us)


CASES = {
    "K=2 (1,-0.9) → (1,0.5)": (oc.parallel_shifts([[1, -0.9], [1, 0.5]]), oc.Protocol()),
    "K=3 three shifts": (oc.parallel_shifts([[0.8, -0.5, 0.3], [0.9, 0.2, -0.6],
                                             [0.5, 0.5, 0.5]]), oc.Protocol()),
    "K=3 random arrays": (_random_shifts(3, 9, 2, seed=1), oc.Protocol()),
    "K=2 random, ft_steps": (_random_shifts(2, 7, 3, seed=2), oc.Protocol(ft_steps=60)),
}


def _gaps(result, simulated) -> dict:
    return {"T1": result.T1 - simulated["T1"],
            "steps": [a - b for a, b in zip(result.steps, simulated["steps"])],
            "reached": result.reached == simulated["reached"],
            "R": float(np.abs(result.R - simulated["R"]).max()),
            "joint steps": result.joint.steps - simulated["joint_steps"],
            "joint": float(np.abs(result.joint.losses - simulated["joint_losses"]).max())}


def _agree(shifts, protocol) -> bool:
    gaps = _gaps(oc.sequence(shifts, protocol), simulate_sequence(shifts, protocol))
    return (gaps["T1"] == 0 and not any(gaps["steps"]) and gaps["reached"]
            and gaps["R"] <= 1e-12 and gaps["joint steps"] == 0 and gaps["joint"] <= 1e-12)


@pytest.mark.parametrize("name", CASES)
def test_the_engine_is_full_q_gradient_descent_stage_by_stage(name):
    assert _agree(*CASES[name])


# --- perturbed engines: each must break the agreement with full-Q GD --------------------

def _dropped_left(gram, i, g):
    return g @ gram[i, :]                                   # G[j, i] dropped


def _transposed(gram, i, g):
    return np.swapaxes(gram[:, i], -1, -2) @ g @ np.swapaxes(gram[i, :], -1, -2)


def _own_domain_only(gram, i, g):
    out = np.zeros_like(gram[:, i])                         # no transfer to other domains
    out[i] = g
    return out


@pytest.mark.parametrize("wrong", [_dropped_left, _transposed, _own_domain_only],
                         ids=["dropped G[j,i]", "transposed blocks", "no cross-domain step"])
def test_a_perturbed_step_is_caught(monkeypatch, wrong):
    shifts, protocol = CASES["K=3 random arrays"]
    assert _agree(shifts, protocol)
    monkeypatch.setattr(engine, "_step", wrong)
    assert not _agree(shifts, protocol)


def test_a_wrong_gram_block_of_the_parallel_constructor_is_caught():
    """G[i, j] = diag(γ^(j)) (the product with γ^(i) dropped) for two shifts."""
    shifts, protocol = CASES["K=2 (1,-0.9) → (1,0.5)"]
    gram = shifts.gram.copy()
    gram[1, 2] = gram[2, 1] = gram[0, 2]
    assert not _agree(dataclasses.replace(shifts, gram=gram), protocol)


def test_the_parallel_gram_blocks_are_those_of_the_arrays():
    shifts = CASES["K=3 three shifts"][0]
    D = shifts.arrays()
    assert all(F.shape == (shifts.d, 3) for F in D) and shifts.d == 3 + 9   # nine |γ| < 1
    gram = np.array([[a.T @ b for b in D] for a in D])
    assert np.abs(gram - shifts.gram).max() <= 1e-15
    gam = np.array(shifts.params["gammas"])
    assert np.allclose(gram[1, 2], np.diag(gam[0] * gam[1]))     # U_1ᵀU_2 = diag(γγ')


def test_one_stage_is_predict_and_its_backward_transfer_is_minus_f():
    for gamma in ([1, -0.9], [1, -0.5], [0.8, -0.5, 0.3]):
        result = oc.sequence(oc.parallel_shifts([gamma]))
        report = oc.predict(oc.Setting(oc.parallel_shift(gamma)))
        assert result.steps == [report.finetune.T2] and result.T1 == report.pretrain.T1
        assert abs(result.metrics["bwt"].value + report.F) <= 1e-12
        assert abs(result.metrics["forgetting"].value - report.F) <= 1e-12


# --- the metrics: mammoth's formulas (utils/metrics.py) on accuracy = c − loss -----------

def _mammoth_bwt(results):
    n = len(results)
    return np.mean([results[-1][i] - results[i][i] for i in range(n - 1)])


def _mammoth_fwt(results, random_results):
    n = len(results)
    return np.mean([results[i - 1][i] - random_results[i] for i in range(1, n)])


def _mammoth_forgetting(results):
    """Rows hold the tasks seen so far (lower triangle), padded with 0 as mammoth does."""
    n = len(results)
    results = [list(row) for row in results]
    for i in range(n - 1):
        results[i] += [0.0] * (n - len(results[i]))
    best = np.max(np.array(results), axis=0)
    return np.mean([best[i] - results[-1][i] for i in range(n - 1)])


def _random_losses(S: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    R = rng.uniform(0.0, 0.5, (S + 1, S + 1))
    R[S, :S] += 0.3                   # the last row is nobody's best: mammoth's max agrees
    return R, rng.uniform(0.0, 0.5, S + 1)


@pytest.mark.parametrize("S", [1, 2, 4])
def test_the_metrics_are_mammoths_with_accuracy_read_as_minus_the_loss(S):
    R, b = _random_losses(S, seed=S)
    c = 1.0                                                  # accuracy = c − loss > 0
    acc = c - R
    got = engine.metrics(R, b)
    assert abs(got["bwt"].value - _mammoth_bwt(acc)) <= 1e-15
    assert abs(got["fwt"].value - _mammoth_fwt(acc, c - b)) <= 1e-15
    assert abs(got["forgetting"].value
               - _mammoth_forgetting([acc[i, :i + 1] for i in range(S + 1)])) <= 1e-15
    # the comparison can fail: the transposed matrix gives other numbers
    wrong = engine.metrics(R.T, b)
    assert abs(wrong["bwt"].value - _mammoth_bwt(acc)) > 1e-3
    assert abs(wrong["fwt"].value - _mammoth_fwt(acc, c - b)) > 1e-3


def test_forgetting_follows_chaudhry_where_mammoth_clips_at_zero():
    """The last stage leaves domain 0 better than ever: Chaudhry's max over l < S gives a
    negative forgetting, mammoth's max over every row 0."""
    R = np.array([[0.2, 0.9, 0.9], [0.3, 0.1, 0.8], [0.05, 0.2, 0.1]])
    got = engine.metrics(R, np.full(3, 0.5))
    assert got["forgetting"].terms == [pytest.approx(0.05 - 0.2), pytest.approx(0.2 - 0.1)]
    assert _mammoth_forgetting([1 - R[i, :i + 1] for i in range(3)]) == pytest.approx(0.05)


def test_what_has_no_meaning_says_why():
    one = oc.sequence(oc.parallel_shifts([[1, -0.9]]))
    for key in ("bwt_shifts", "forgetting_shifts"):
        assert one.metrics[key].value is None
        assert one.metrics[key].undefined.startswith("undefined, because there is one shift")
    assert all(one.metrics[k].value is not None for k in ("bwt", "forgetting", "fwt"))
    none = engine.metrics(np.array([[0.1]]), np.array([0.25]))
    assert none["bwt"].value is None and "no stage" in none["bwt"].undefined
    K = 2
    assert one.untrained_loss.tolist() == [(K - 1) / (2 * K)] * 2     # Q = 0: uniform attention


# --- geometry and entry point: bad input is named -----------------------------------------

@pytest.mark.parametrize("call, match", [
    (lambda: oc.parallel_shifts([[1, -0.9], [1, 0.5, 0.2]]), r"gammas\[1\]: .*K = 2 values"),
    (lambda: oc.parallel_shifts([[1, -0.9], [1.5, 0.5]]), r"gammas\[1\]\[0\]: got 1.5.*\[-1, 1\]"),
    (lambda: oc.parallel_shifts([[1]]), r"gammas\[0\] \(number of values\)"),
    (lambda: oc.parallel_shifts([]), "at least one shift"),
    (lambda: oc.parallel_shifts("1,-0.9"), "gammas"),
    (lambda: oc.parallel_shifts([[1, float("nan")]]), r"gammas\[0\]\[1\]"),
    (lambda: oc.shifts_from_arrays(np.eye(3, 2), [np.eye(3, 2), np.ones((3, 2))]),
     r"Us\[1\]: .*unit norm"),
    (lambda: oc.shifts_from_arrays(np.eye(3, 2), [np.array([[1, 0.6], [0, 0.8], [0, 0]])]),
     r"Us\[0\]: .*orthonormal within 1e-06: sequences do not take overlapping"),
    (lambda: oc.shifts_from_arrays(np.eye(3, 2), []), "Us: got an empty list"),
    (lambda: oc.sequence(oc.parallel_shift([1, -0.9])), "shifts: .*parallel_shifts"),
    (lambda: oc.sequence(oc.parallel_shifts([[1, -0.9]]), stages=[{"replay": 0.5}] * 2),
     r"stages: got 2 entries; give one per shift: 1"),
    (lambda: oc.sequence(oc.parallel_shifts([[1, -0.9]]), stages=[{"replay": 1.5}]),
     r"stages\[0\]\['replay'\]: got 1.5; expected a share λ"),
    (lambda: oc.sequence(oc.parallel_shifts([[1, -0.9]]), stages=[{"eps": 0.1}]),
     r"stages\[0\]: .*keys among replay, l2, project, weights"),
    (lambda: oc.sequence(oc.parallel_shifts([[1, -0.9]]), stages={"replay": 0.1}),
     r"stages: .*expected a list"),
    (lambda: oc.sequence(oc.parallel_shifts([[1, -0.9]]), oc.Protocol(weights=(1, 1, 1))),
     r"weights: got 3 values; expected one weight per feature: K = 2"),
])
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(InputError, match=match):
        call()


def test_a_stage_out_of_steps_is_reported_and_the_next_starts_where_it_stopped(capsys):
    shifts, protocol = oc.parallel_shifts([[1, -0.9], [1, 0.5]]), \
        oc.Protocol(eta_ft=0.01, max_steps=2000)
    result = oc.sequence(shifts, protocol)
    assert result.steps == [2000, 2000] and result.reached == [False, False]
    assert not result.joint.reached
    # stage 2 starts where stage 1 stopped: its row 1 is the start of stage 2's descent
    again = engine.start_logits(shifts.gram, oc.predict(oc.Setting(
        oc.parallel_shift([1, -0.9]))).pretrain.z)
    engine.descend(again, shifts.gram, [1], 0.01, protocol.eps_ft, 2000)
    assert np.array_equal(engine.losses(again), result.R[1])
    code, out, err = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", "1,0.5",
                         "--eta-ft", "0.01", "--max-steps", "2000")
    assert code == 0 and "2000 (rule not met)" in out
    assert err.count("did not meet its rule") == 2 and "joint reference did not" in err


def test_a_sequence_too_large_for_memory_is_refused_before_any_array(capsys):
    with pytest.raises(InputError, match="the geometry's K: got 20000; the sequence's Gram"):
        oc.parallel_shifts([[0.5] * 20000] * 2)
    gamma = ",".join(["0.5"] * 20000)
    code, _, err = run(capsys, "sequence", "--gamma", gamma, "--then", gamma)
    assert code == 2 and one_line(err).startswith(
        "oodcalc: error: --gamma: got 20000 values; the sequence's Gram blocks")


# --- the command ---------------------------------------------------------------------------

@pytest.mark.parametrize("columns", ["80", None])
def test_the_command_prints_r_the_metrics_and_the_joint_reference(capsys, monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", "1,0.5")
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("after"))
    assert header.split()[:4] == ["after", "source", "V", "U1"] and "U2" in header
    rows = {line.split()[0] for line in lines[lines.index(header):] if line.strip()}
    assert {"pretraining", "stage", "joint"} <= rows
    for name in ("backward transfer:", "forgetting:", "forward transfer:",
                 "R[j][j] − R[S][j]", "Chaudhry"):
        assert name in out
    assert all(line == line.rstrip() for line in lines)
    if columns == "80":
        assert max(len(line) for line in lines) <= 80


def test_the_command_json_is_the_library_result(capsys):
    code, out, _ = run(capsys, "sequence", "--gamma", "1,-0.5", "--then", "1,-0.5",
                       "--eps", "0.02", "--json")
    assert code == 0
    data = json.loads(out)
    expected = oc.sequence(oc.parallel_shifts([[1, -0.5], [1, -0.5]]), oc.Protocol(eps=0.02))
    assert np.array_equal(np.array(data["R"]), expected.R)
    assert data["steps"] == expected.steps and data["joint"]["steps"] == expected.joint.steps
    assert data["metrics"]["bwt"]["value"] == expected.metrics["bwt"].value
    code, out, _ = run(capsys, "sequence", "--gamma", "1,-0.5", "--json")
    one = json.loads(out)["metrics"]["bwt_shifts"]
    assert one["value"] is None and one["undefined"].startswith("undefined, because")


@pytest.mark.parametrize("argv, expected", [
    (["--gamma", "1,-0.9", "--then", "1,0.5,0.2"],
     "oodcalc: error: --then: got 1,0.5,0.2; give K = 2 values, as many as --gamma has"),
    (["--gamma", "1,-0.9", "--then", "1,1.5"],
     "oodcalc: error: --then value 2: got 1.5; each γ must lie in [-1, 1]"),
    (["--gamma", "1,-0.9", "--then", "1,0.5", "--then", "2,0"],
     "oodcalc: error: --then 2 value 1: got 2.0; each γ must lie in [-1, 1]"),
    (["--gamma", "1.2,-0.9"], "oodcalc: error: --gamma value 1: got 1.2; each γ must lie "
     "in [-1, 1]"),
    (["--then", "1,0.5"], "oodcalc: error: --gamma: got nothing; give the first shift, e.g. "
     "--gamma 1,-0.9 (and each later one with --then)"),
    (["--gamma", "1,x"], None),
])
def test_bad_command_input_is_one_line_and_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, "sequence", *argv)
    assert code == 2 and out == ""
    line = one_line(err)
    assert expected is None or line == expected


# --- interventions inside a sequence: the K×K engine against each done to Q itself --------

INTERVENED = {
    "replay 0.3 (earlier domains equally)": (oc.parallel_shifts([[1, -0.9], [1, 0.5]]),
                                             oc.Protocol(replay=0.3), None),
    "project key (off every earlier span)": (oc.parallel_shifts([[1, -0.9], [1, 0.5]]),
                                             oc.Protocol(project="key"), None),
    "l2 0.05 (pull to the stage's start)": (oc.parallel_shifts([[1, -0.9], [1, 0.5]]),
                                            oc.Protocol(l2=0.05), None),
    "random arrays, replay + project both": (_random_shifts(2, 9, 3, seed=3),
                                             oc.Protocol(replay=0.2, project="both",
                                                         ft_steps=80), None),
    "per-stage dicts": (_random_shifts(3, 9, 2, seed=4), oc.Protocol(),
                        [{"replay": 0.4, "weights": "cosine"},
                         {"project": "query", "l2": 0.01}]),
}


def _agree_stages(shifts, protocol, stages) -> bool:
    result = oc.sequence(shifts, protocol, stages=stages)
    simulated = simulate_sequence(shifts, protocol, stages=stages)
    gaps = _gaps(result, simulated)
    return (gaps["T1"] == 0 and not any(gaps["steps"]) and gaps["reached"]
            and gaps["R"] <= 1e-12)


@pytest.mark.parametrize("name", INTERVENED)
def test_interventions_in_a_sequence_are_full_q_gradient_descent(name):
    assert _agree_stages(*INTERVENED[name])


def test_one_stage_with_interventions_is_predict():
    for protocol in (oc.Protocol(replay=0.3), oc.Protocol(project="key"),
                     oc.Protocol(l2=0.05, weights="cosine")):
        result = oc.sequence(oc.parallel_shifts([[1, -0.9]]), protocol)
        report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), protocol))
        assert result.steps == [report.finetune.T2]
        assert abs(result.metrics["bwt"].value + report.F) <= 1e-12


def _v_only(i):
    out = np.zeros(i)
    out[0] = 1.0
    return out


@pytest.mark.parametrize("wrong", [
    lambda i: np.full(i, 1.0),                         # λ on every earlier domain, not λ/i
    _v_only,                                           # replay the source alone
    lambda i: np.eye(i)[-1],                           # replay the last domain alone
], ids=["share not split", "source only", "last domain only"])
def test_a_wrong_replay_share_is_caught(monkeypatch, wrong):
    case = INTERVENED["random arrays, replay + project both"]
    shifts = case[0]
    protocol = oc.Protocol(replay=0.3, ft_steps=80)
    assert _agree_stages(shifts, protocol, None)
    monkeypatch.setattr(engine, "replay_shares", wrong)
    assert not _agree_stages(shifts, protocol, None)


def test_a_projection_off_the_source_alone_is_caught(monkeypatch):
    shifts = INTERVENED["random arrays, replay + project both"][0]
    protocol = oc.Protocol(project="key", ft_steps=80)
    assert _agree_stages(shifts, protocol, None)
    monkeypatch.setattr(engine, "earlier_span_blocks",
                        lambda gram, i: gram[:, i] - gram[:, 0] @ gram[0, i])
    assert not _agree_stages(shifts, protocol, None)


def test_a_pull_toward_the_pretrained_weights_instead_is_caught(monkeypatch):
    shifts = INTERVENED["random arrays, replay + project both"][0]
    protocol = oc.Protocol(l2=0.05, ft_steps=80)
    assert _agree_stages(shifts, protocol, None)
    real = engine.descend_stage
    first = {}

    def anchored_at_t1(z, gram, stage, *args, **kw):    # every stage pulled to Q^(T1)
        first.setdefault("z", z.copy())
        return real(z, gram, stage, *args, anchor=first["z"], **kw)
    monkeypatch.setattr(engine, "descend_stage", anchored_at_t1)
    assert not _agree_stages(shifts, protocol, None)


def test_the_command_applies_interventions_to_every_stage_or_to_one(capsys):
    shifts = oc.parallel_shifts([[1, -0.9], [1, 0.5]])
    code, out, _ = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", "1,0.5",
                       "--replay", "0.2", "--json")
    expected = oc.sequence(shifts, oc.Protocol(replay=0.2))
    assert code == 0 and json.loads(out)["steps"] == expected.steps
    assert expected.steps != oc.sequence(shifts).steps           # the option did something
    code, out, _ = run(capsys, "sequence", "--gamma", "1,-0.9", "--then",
                       "1,0.5 replay=0.3 project=key", "--l2", "0.01", "--json")
    data = json.loads(out)
    expected = oc.sequence(shifts, oc.Protocol(l2=0.01),
                           stages=[None, {"replay": 0.3, "project": "key"}])
    assert code == 0 and data["steps"] == expected.steps
    assert np.array_equal(np.array(data["R"]), expected.R)
    assert data["parameters"]["stage_interventions"] == [{"l2": 0.01},
                                            {"replay": 0.3, "l2": 0.01, "project": "key"}]


@pytest.mark.parametrize("then, expected", [
    ("1,0.5 replay=2", "oodcalc: error: --then: got '1,0.5 replay=2'; replay=2: expected a "
     "share λ with 0 <= λ < 1 (λ = 1 would not fine-tune on U at all)"),
    ("1,0.5 eps=0.1", "oodcalc: error: --then: got '1,0.5 eps=0.1'; after the values, give "
     "key=value with keys replay, l2, project, weights, each once, e.g. \"1,0.5 replay=0.2\""),
    ("1,0.5 project=sideways", "oodcalc: error: --then: got '1,0.5 project=sideways'; "
     "project=sideways: expected one of none, key, query, both"),
])
def test_a_bad_stage_intervention_is_named_by_its_option(capsys, then, expected):
    code, out, err = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", then)
    assert code == 2 and out == "" and one_line(err) == expected


# --- progress and the time estimate (stderr only) -------------------------------------------

def test_the_library_reports_every_phase_against_its_estimate():
    log = []
    result = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]),
                         progress=lambda *report: log.append(report))
    phases = [phase for phase, _, _ in log]
    assert phases[0] == "pretraining" and phases[-1] == "joint"
    assert list(dict.fromkeys(phases)) == ["pretraining", "stage 1", "stage 2", "joint"]
    ends = {phase: done for phase, done, _ in log}            # the last report of each
    assert ends == {"pretraining": result.T1, "stage 1": result.steps[0],
                    "stage 2": result.steps[1], "joint": result.joint.steps}
    # the estimates: stage 1 from the logits at α* (T2 = 360: ≈ 361)
    first = next(expected for phase, _, expected in log if phase == "stage 1")
    assert abs(first - 360) < 10


def test_piped_output_has_no_control_characters(capsys):
    code, out, err = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", "1,0.5",
                         "--json")
    assert code == 0 and json.loads(out)["steps"] == [360, 331] and err == ""
    code, out, err = run(capsys, "sequence", "--gamma", "1,-0.9", "--then", "1,0.5")
    assert code == 0 and err == ""
    assert not any(ch in out for ch in "\x1b\r\b")


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_long_sequence_says_how_long_before_it_starts(capsys, monkeypatch, json_flag):
    import re

    from oodcalc import continual
    from oodcalc.errors import ComputationError

    def refuse(*args, **kwargs):
        raise ComputationError("stub: the run itself is not the test")
    monkeypatch.setattr(continual, "sequence", refuse)
    # K = 60, three stages to eps_ft = 1e-3: about 6.6e5 steps on 4 domains, tens of minutes
    gammas = np.random.default_rng(0).uniform(-1, 1, (3, 60)).round(2)
    texts = [",".join(map(str, g)) for g in gammas]
    code, _, err = run(capsys, "sequence", f"--gamma={texts[0]}", f"--then={texts[1]}",
                       f"--then={texts[2]}", "--eps-ft", "1e-3", *json_flag)
    lines = err.splitlines()
    assert code == 1 and lines[-1] == "oodcalc: error: stub: the run itself is not the test"
    assert re.match(r"oodcalc: sequence: this run will take about \d+ (min|h) \(3 stages "
                    r"≈ [\d,]+ steps and the joint reference ≈ [\d,]+ steps on 4 domains "
                    r"of 60×60 logits\)$", lines[0]), lines[0]
    code, _, err = run(capsys, "sequence", "--gamma", "1,-0.9", *json_flag)   # a short one
    assert err.splitlines() == ["oodcalc: error: stub: the run itself is not the test"]


def test_the_time_estimate_is_the_order_of_the_run():
    """K = 2, two stages and the joint reference: 1,895 steps of the engine in about
    0.1 s; the estimate (674 + 361·3 steps) is of that order (within 30×: load)."""
    import time

    from oodcalc.continual import sequence_estimate
    shifts = oc.parallel_shifts([[1, -0.9], [1, 0.5]])
    seconds, _ = sequence_estimate(shifts)
    started = time.monotonic()
    oc.sequence(shifts)
    took = time.monotonic() - started
    assert took / 30 < seconds < 30 * took, (seconds, took)   # a loaded machine: 30×
