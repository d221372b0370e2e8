import importlib.util
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_human(capsys):
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9")
    assert code == 0 and err == ""
    for fragment in ("Pretraining", "T1", "OOD", "Fine-tuning", "forgetting",
                     "backward-transfer", "F = L_tr(after)"):
        assert fragment in out


def test_predict_json_schema(capsys):
    code, out, _ = run(capsys, "predict", "--gamma", "1,-0.9", "--json")
    assert code == 0
    data = json.loads(out)
    p = data["parameters"]
    assert (p["K"], p["d"], p["eps"], p["eta"], p["eta_ft"]) == (2, 3, 0.01, 0.1, 0.1)
    assert p["geometry"]["kind"] == "parallel-shift" and p["geometry"]["gamma"] == [1, -0.9]
    assert {"T1", "alpha", "beta", "alpha_star"} <= data["pretrain"].keys()
    ood = data["ood"]
    assert len(ood["alpha"]) == 2 and len(ood["error"]) == 2
    assert ood["beta"][0][0] is None and ood["beta"][1][0] is not None
    assert {"T2", "step_size_bound"} <= data["finetune"].keys()
    per = data["forgetting"]["per_feature"]
    assert [f["k"] for f in per] == [1, 2]
    assert [f["regime"] for f in per] == ["backward-transfer", "forgetting"]
    # F is defined as Σ F_k (report.py), so comparing the two cannot fail; the
    # F_k are checked against full-Q gradient descent in test_dynamics.py
    assert isinstance(data["forgetting"]["F"], float)


@pytest.mark.parametrize("args, kind", [
    (["--theta", "pi/6", "--K", "4", "--d", "8"], "rotation"),
    (["--theta", "0.5236", "-K", "3"], "rotation"),
    (["--mean-query", "--K", "4"], "mean-query"),
    (["--orthogonal", "--K", "3"], "orthogonal"),
    (["--gamma", "-0.9,1"], "parallel-shift"),
    (["--gamma=0.5,-0.5,0.2", "--eps", "0.02", "--eta", "0.2", "--eta-ft", "0.05"],
     "parallel-shift"),
])
def test_predict_geometries(capsys, args, kind):
    code, out, _ = run(capsys, "predict", *args, "--json")
    assert code == 0
    assert json.loads(out)["parameters"]["geometry"]["kind"] == kind


def test_predict_from_files(capsys, tmp_path):
    V, U = np.eye(4, 2), np.eye(4, 4)[:, [1, 2]]
    np.save(tmp_path / "V.npy", V)
    np.savetxt(tmp_path / "U.csv", U, delimiter=",")
    code, out, _ = run(capsys, "predict", "--features", str(tmp_path / "V.npy"),
                       "--ood", str(tmp_path / "U.csv"), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["parameters"]["geometry"]["M"] == [[0, 0], [1, 0]]
    assert data["forgetting"]["per_feature"][0]["regime"] is None  # not a parallel shift


def bad_files(tmp_path):
    np.save(tmp_path / "V.npy", np.eye(3, 2))
    np.save(tmp_path / "wide.npy", np.eye(4, 2))
    np.save(tmp_path / "skew.npy", np.array([[1.0, 0.5], [0.0, 1.0], [0.0, 0.0]]))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "V.pkl").write_bytes(pickle.dumps(np.eye(3, 2)))
    return tmp_path


@pytest.mark.parametrize("args, option", [
    (["--gamma", "2,0"], "--gamma value 1"),
    (["--gamma", "1,abc"], "--gamma"),
    (["--gamma", "0.5"], "--gamma"),
    (["--gamma", "nan,0"], "--gamma"),
    (["--gamma", "1,inf"], "--gamma"),
    (["--gamma", "1,,0"], "--gamma"),
    (["--gamma", "1,-0.9", "--eps", "0"], "--eps"),
    (["--gamma", "1,-0.9", "--eps", "-1"], "--eps"),
    (["--gamma", "1,-0.9", "--eta", "0"], "--eta"),
    (["--gamma", "1,-0.9", "--eta", "fast"], "--eta"),
    (["--gamma", "1,-0.9", "--eta-ft", "nan"], "--eta-ft"),
    (["--gamma", "1,-0.9", "--d", "2"], "--d"),
    (["--gamma", "1,-0.9", "--K", "3"], "--K"),
    (["--gamma", "1,-0.9", "--max-steps", "0"], "--max-steps"),
    (["--theta", "0.3"], "--K"),
    (["--theta", "abc", "--K", "2"], "--theta"),
    (["--orthogonal", "--K", "1"], "--K"),
    ([], "geometry"),
    (["--gamma", "1,0", "--orthogonal"], "geometry"),
    (["--features", "{d}/missing.npy", "--ood", "{d}/V.npy"], "--features"),
    (["--features", "{d}/V.npy"], "--ood"),
    (["--features", "{d}/V.pkl", "--ood", "{d}/V.npy"], "--features"),
    (["--features", "{d}/obj.npy", "--ood", "{d}/V.npy"], "--features"),
    (["--features", "{d}/V.npy", "--ood", "{d}/wide.npy"], "--features and --ood"),
    (["--features", "{d}/V.npy", "--ood", "{d}/skew.npy"], "--ood"),
    (["--gamma", "1,-0.9", "--bogus"], "--bogus"),
])
def test_bad_input_is_one_line_exit_2(capsys, tmp_path, args, option):
    d = bad_files(tmp_path)
    code, out, err = run(capsys, "predict", *[a.format(d=d) for a in args])
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oodcalc: error: ")
    assert option in lines[0]
    assert "Traceback" not in err


def test_failed_computation_exit_1(capsys):
    # Far out of reach: refused before running, with the estimate (T1 is 357).
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--max-steps", "5")
    assert code == 1 and out == ""
    assert err.startswith("oodcalc: error: pretraining would need about 357 steps")
    assert "raise --max-steps to about" in err and len(err.strip().splitlines()) == 1
    # Within twice the cap: run, and stopped by the cap.
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--max-steps", "300")
    assert code == 1 and out == ""
    assert err.startswith("oodcalc: error: pretraining did not meet the stopping rule")
    assert len(err.strip().splitlines()) == 1


def test_console_script_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "oodcalc", "predict", "--gamma", "1,-0.9",
                         "--json"], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["pretrain"]["T1"] > 0
    bad = subprocess.run([sys.executable, "-m", "oodcalc", "predict", "--gamma", "3,0"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("oodcalc: error: --gamma value 1")


@pytest.mark.parametrize("columns", ["100", "80"])
def test_predict_shows_the_first_step_criterion(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run(capsys, "predict", "--gamma=-0.7,0.9,0.95")
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= int(columns) and "…" not in out
    header = next(i for i, line in enumerate(lines) if "paper's verdict" in line)
    assert "first step (exact)" in lines[header] and "ΔL_{v_k}; D_k" in lines[header + 1]
    assert "F_k (exact)" in lines[header] and lines[header + 1].count("ΔL_{v_k}") == 2
    row = next(i for i, line in enumerate(lines) if line.lstrip().split()[:2] == ["1", "-0.7"])
    assert "forgetting" in lines[row] and "falling -" in lines[row] and "✗" in lines[row]
    assert "−γ1·γ2 = +0.63" in lines[row + 1]
    assert "D_k = -0.0715 ✓" in lines[row + 1]
    assert any(line.startswith("✗ the exact trajectory contradicts") for line in lines)


def test_first_step_is_the_exact_step_not_its_first_order_sign(capsys, monkeypatch):
    # Near D_k = 0 the O(η²) term decides: feature 1 has D_1 = −8.0e-6 < 0, yet the exact
    # first fine-tuning step raises its error (by 2.85e-9, i.e. L_{v_1} by 9.5e-10).
    code, out, _ = run(capsys, "predict", "--gamma=-0.3,0.95,0.018471", "--json")
    first = json.loads(out)["forgetting"]["per_feature"][0]
    assert first["initial_direction"] == "rising" and first["first_step"] > 0
    assert first["D_k"] < 0 and first["D_k_direction"] == "falling"
    assert first["D_k_agrees"] is False
    assert first["first_step"] == pytest.approx(9.4859e-10, rel=1e-3)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "predict", "--gamma=-0.3,0.95,0.018471")
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out
    row = next(i for i, line in enumerate(lines) if line.split()[:2] == ["1", "-0.3"])
    assert "rising +9.49e-10" in lines[row] and "D_k = -8.036e-06 ✗" in lines[row + 1]


def test_predict_json_first_step_fields(capsys, tmp_path):
    code, out, _ = run(capsys, "predict", "--gamma", "0.5,-0.9,-0.9", "--json")
    per = json.loads(out)["forgetting"]["per_feature"]
    assert per[0]["initial_direction"] == "falling" and per[0]["D_k"] < 0
    assert per[0]["D_k_direction"] == "falling" and per[0]["D_k_agrees"] is True
    assert per[0]["regime"] == "forgetting" and per[0]["theorem_holds"] is False
    code, out, _ = run(capsys, "predict", "--theta", "0.5", "--K", "3", "--json")
    per = json.loads(out)["forgetting"]["per_feature"]   # a rotation is a parallel shift
    assert all(f["initial_direction"] == "falling" and f["D_k"] < 0 for f in per)
    code, out, _ = run(capsys, "predict", "--mean-query", "--K", "3", "--json")
    per = json.loads(out)["forgetting"]["per_feature"]   # the exact step is there, D_k not
    assert all(f["D_k"] is None and f["D_k_direction"] is None and f["D_k_agrees"] is None
               for f in per)
    assert all(f["initial_direction"] in ("rising", "falling", "flat") for f in per)
    code, out, _ = run(capsys, "predict", "--gamma", "1,1", "--json")
    per = json.loads(out)["forgetting"]["per_feature"]   # T2 = 0: no step, nothing moved
    assert all(f["first_step"] == 0 and f["initial_direction"] == "flat" for f in per)


def test_identical_features_print_as_one_row(capsys):
    code, out, err = run(capsys, "predict", "--theta", "0.5", "--K", "6")
    assert code == 0 and err == ""                     # no progress bar off a terminal
    rows = [line.split() for line in out.splitlines()]
    assert sum(1 for r in rows if r[:1] == ["all"]) == 2      # the OOD and forgetting tables
    assert "−γk·γm" in out and "γ1" not in out.split("3 · Fine-tuning")[1]
    assert "Dynamics: pretraining by the symmetric-ray recurrence" in " ".join(out.split())
    code, out, _ = run(capsys, "predict", "--gamma", "0.5,0.5,0.5,-0.2")
    firsts = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert firsts.count("1–3") == 2 and firsts.count("4") == 2


def test_generic_indices_name_the_other_features_in_order():
    from oodcalc.cli.render import generic_indices
    assert generic_indices("−γ3·γ1 = +0.5 <= γ3² <= −γ3·γ4 (v3)", 3) == \
        "−γk·γm = +0.5 <= γk² <= −γk·γm′ (vk)"


def test_progress_bar_appears_only_for_long_runs_and_only_on_stderr():
    from io import StringIO
    from oodcalc.cli.progress import StepProgress
    with StepProgress(after=60) as quick:
        quick("pretraining", 10, 10)
    assert quick._bar is None                           # never shown: the run was short
    with StepProgress(after=0) as slow:
        import time
        deadline = time.monotonic() + 5
        while slow._bar is None and time.monotonic() < deadline:
            time.sleep(0.01)
        slow("fine-tuning", 5, 10)
        assert slow._bar is not None and slow._bar.console.stderr
        assert slow._bar.tasks[0].completed == 5 and slow._bar.tasks[0].total == 10


def test_parameters_block_reruns_as_given(capsys):
    # The JSON records max_steps "auto" when --max-steps is not given; the command line
    # built from the parameters block (as written) must run and give the same report.
    code, out, _ = run(capsys, "predict", "--gamma", "1,-0.9,0.4", "--json")
    assert code == 0
    first = json.loads(out)
    p = first["parameters"]
    assert p["max_steps"] == "auto"
    code, out, err = run(capsys, "predict", "--gamma=" + ",".join(map(str, p["geometry"]["gamma"])),
                         "--eps", str(p["eps"]), "--eta", str(p["eta"]), "--eta-ft",
                         str(p["eta_ft"]), "--d", str(p["d"]), "--max-steps",
                         str(p["max_steps"]), "--json")
    assert code == 0, err
    assert json.loads(out) == first
    # An integer cap is recorded as given, and a bad value says what is accepted.
    code, out, _ = run(capsys, "predict", "--gamma", "1,-0.9", "--max-steps", "400", "--json")
    assert code == 0 and json.loads(out)["parameters"]["max_steps"] == 400
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--max-steps", "automatic")
    assert code == 2 and err.strip() == ("oodcalc: error: --max-steps: got 'automatic'; "
                                         'expected an integer >= 1 or "auto"')


def test_json_summarises_large_matrices_and_arrays_holds_them(capsys, tmp_path):
    """Above K = 16 the JSON keeps every scalar and per-feature field and summarises each
    K × K matrix; --arrays writes them (and the trajectories) in full, equal to the API's."""
    from oodcalc.report import FULL_MATRIX_K
    assert FULL_MATRIX_K == 16
    npz = tmp_path / "full.npz"
    code, out, _ = run(capsys, "predict", "--theta", "0.5", "--K", "17", "--json",
                       "--arrays", str(npz))
    assert code == 0
    d = json.loads(out)
    assert d["matrices"]["full"] is False and "pretrain.z" in d["matrices"]["summarised"]
    assert d["pretrain"]["z"]["shape"] == [17, 17] and "min" in d["pretrain"]["z"]["diagonal"]
    assert d["ood"]["beta"]["diagonal"] is None                      # NaN there: left out
    assert len(d["ood"]["alpha"]) == 17 and len(d["forgetting"]["per_feature"]) == 17
    report = oc.predict(oc.Setting(oc.rotation(0.5, 17)))
    with np.load(npz, allow_pickle=False) as saved:
        assert sorted(saved.files) == sorted(report.arrays())
        assert set(d["matrices"]["summarised"]) <= set(saved.files)
        np.testing.assert_array_equal(saved["pretrain.z"], report.pretrain.z)
        np.testing.assert_array_equal(saved["finetune.z_source"], report.finetune.z_source)
        np.testing.assert_array_equal(saved["trajectories.finetune_source"],
                                      report.trajectories["finetune_source"])
    assert d["pretrain"]["z"]["off_diagonal"]["max"] == report.pretrain.z[0, 1]
    # K <= 16: every matrix in full, no "matrices" block
    code, out, _ = run(capsys, "predict", "--theta", "0.5", "--K", "16", "--json")
    d = json.loads(out)
    assert "matrices" not in d and np.array(d["pretrain"]["z"]).shape == (16, 16)


def test_json_stays_small_at_large_K(capsys):
    # about 0.75 KB per feature (K = 1024 prints 0.76 MB; in full it was 212 MB)
    code, out, _ = run(capsys, "predict", "--theta", "0.5", "--K", "256", "--json")
    assert code == 0 and len(out.encode()) < 256 * 1000


def test_arrays_option_is_checked_before_the_run(capsys, tmp_path):
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--arrays",
                         str(tmp_path / "a.txt"))
    assert code == 2 and out == "" and err.startswith("oodcalc: error: --arrays")
    assert "ending in .npz" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")
def test_a_small_predict_does_not_import_numba():
    """Importing Numba takes about as long as a whole small predict: the fast extra must
    not slow `oodcalc predict --gamma 1,-0.9` down (it did: 0.23 → 0.55 s), only runs whose
    compiled kernels pay for it import it."""
    code = ("import sys; from oodcalc.cli import main; main(['predict', '--gamma', '1,-0.9']);"
            " print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines()[-1] == "False"


def test_a_command_loads_only_its_own_module():
    """A run imports its command's module alone (all thirteen and their click tree cost
    about a fifth of `oodcalc predict --gamma 1,-0.9`); a run of one command, then the
    full listing, still lists the commands in the usual order."""
    code = ("import sys; from oodcalc import cli; cli.main(['predict', '--gamma', '1,-0.9']);"
            " loaded = sorted(m for m in cli.COMMAND_MODULES if 'oodcalc.cli.' + m in sys.modules);"
            " cli.main(['explore', '-h']); print(loaded); print(list(cli.root_command().commands))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-2] == "['predict']"
    from oodcalc import cli
    assert out[-1] == str(list(cli.LISTED))
    assert out[-1].startswith("['predict', 'advise', 'sequence', 'sweep'") and \
        "'plot']" in out[-1]


def test_every_command_module_loads():
    """COMMAND_MODULES names modules by string (the layer test reads import statements and
    cannot see them): each must import and register what `oodcalc -h` lists."""
    from oodcalc import cli
    cli.load_commands()
    assert all(f"oodcalc.cli.{m}" in sys.modules for m in cli.COMMAND_MODULES)
    assert set(cli.root_command().commands) == set(cli.LISTED)


def test_the_step_size_verdict_reads_right_both_ways(capsys):
    """'η_ft = 50 is exceeds it.' was printed for a step over the bound."""
    for eta, phrase in (("0.1", "η_ft = 0.1 is within it."), ("50", "η_ft = 50 exceeds it.")):
        assert main(["predict", "--gamma", "0.5,0.5,-1", "--eta", eta]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert phrase in out, out
