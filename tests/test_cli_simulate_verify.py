import json

import pytest

from oodcalc import verify
from oodcalc.cli import main
from oodcalc.predict import pretrain_logits


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_population_human(capsys):
    code, out, err = run(capsys, "simulate", "--gamma", "1,-0.9", "--rows", "3")
    assert code == 0 and err == ""
    # full-Q GD must stop where the exact K×K dynamics stop (357 steps for ε = 0.01, η = 0.1)
    T1 = int(pretrain_logits(2, 0.01, 0.1, 10**6).steps[0])
    for fragment in ("population GD", f"T1 = {T1}", "Trajectories", "fine-tune", "F_k"):
        assert fragment in out


def test_simulate_prompts_json_with_trajectories(capsys):
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "-s", "prompts", "--N", "8",
                       "--batch", "64", "--seed", "2", "--json", "--trajectories")
    assert code == 0
    data = json.loads(out)
    assert data["parameters"]["simulator"]["N"] == 8
    assert data["parameters"]["simulator"]["resample"] is True
    assert {"pretrain", "finetune_ood", "finetune_source_loss"} <= data["trajectories"].keys()
    assert len(data["trajectories"]["pretrain"]) == data["pretrain"]["T1"] + 1


def test_simulate_compare(capsys):
    code, out, _ = run(capsys, "simulate", "--theta", "pi/6", "--K", "3", "--compare", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"theory", "simulation", "differences"} <= data.keys()
    diffs = {d["field"]: d for d in data["differences"]}
    assert diffs["pretrain.T1"]["max_abs"] == 0
    assert diffs["ood.beta"]["max_abs"] < 1e-10 and diffs["finetune.z_ood"]["max_abs"] < 1e-10
    assert diffs["pretrain.alpha_star"]["simulation"] is None   # theory-only field
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "--compare", "-s", "prompts",
                       "--N", "8", "--batch", "64", "--fixed-sample")
    assert code == 0 and "field by field" in out and "F[k=2].trend" in out


@pytest.mark.parametrize("args, fragment", [
    (["--gamma", "1,-0.9", "--N", "8"], "--N: got '8'; only --simulator prompts"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--N", "0"], "--N: got '0'"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--batch", "x"], "--batch: got 'x'"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--holdout", "100"], "--stop heldout"),
    (["--gamma", "1,-0.9", "-s", "nope"], "--simulator"),
    (["--gamma", "1,2"], "[-1, 1]"),
    ([], "choose exactly one"),
])
def test_simulate_bad_input(capsys, args, fragment):
    code, out, err = run(capsys, "simulate", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("oodcalc: error: ") and fragment in err


def test_simulate_stuck_run_is_exit_1(capsys):
    code, _, err = run(capsys, "simulate", "--gamma", "1,-0.9", "--max-steps", "5")
    assert code == 1 and err.count("\n") == 1 and "max_steps" in err


def test_verify_one_claim(capsys):
    code, out, err = run(capsys, "verify", "--quick", "--claim", "1")
    assert code == 0 and err == ""
    assert "Aggregated attention" in out and "PASS" in out and "Tolerances" in out
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "aggregated-attention", "--json")
    data = json.loads(out)
    assert code == 0 and data["passed"] and data["rows"][0]["verdict"] == "PASS"
    assert data["rows"][0]["population"]["max_abs"] <= verify.EXACT_TOL


def test_verify_fail_exits_1(capsys, monkeypatch):
    from oodcalc.claims import claim1_attention

    def failing(ctx):
        return (verify.PopulationCheck("forced", 1.0, 1.0, "<= 0", False), None, ["forced"])
    monkeypatch.setattr(claim1_attention, "check", failing)
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "1")
    assert code == 1 and "FAIL" in out


def test_verify_refuted_exits_0_and_a_lost_counterexample_fails(capsys, monkeypatch):
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "8b", "--json")
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["verdict"] == "REFUTED" and row["claim"] == "8b"
    assert any("(0.5, -0.9, -0.9)" in d and "reproduced" in d
               for d in row["population"]["details"])
    from oodcalc.claims import claim8_forgetting
    monkeypatch.setattr(claim8_forgetting, "COUNTEREXAMPLES", ((1.0, -0.9, 0.5),))
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "8b", "--json")
    assert code == 1 and json.loads(out)["rows"][0]["verdict"] == "FAIL"


@pytest.mark.parametrize("args, fragment", [
    (["--claim", "12"], "--claim: got '12'"),
    (["--claim", "nonsense"], "--claim: got 'nonsense'"),
    (["--fast"], "No such option"),
])
def test_verify_bad_input(capsys, args, fragment):
    code, out, err = run(capsys, "verify", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err
