"""One quantity per column, the same everywhere: a level is the per-feature error e_k
(compared with ε), a change — the first fine-tuning step, F_k, F — is a change of the loss
L_{v_k} = e_k/K. This test takes one geometry and reads the same numbers from the CLI's
text, its JSON, the plot's data, the sweep's columns, the explorer's JavaScript and the
findings (docs/guide/simulate-verify.md), and checks each against the others (the README
said the step "raises e_1 by 2.85e-9" where predict printed +9.49e-10; `plot losses` drew
L_k against ε/K while the explorer drew e_k against ε)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.cli import main

ROOT = Path(__file__).resolve().parent.parent
#: K = 3, distinct γ: the K×K path; feature 1's first step rises while D_1 < 0.
GAMMA = [-0.3, 0.95, 0.018471]
K = len(GAMMA)


@pytest.fixture(scope="module")
def report():
    return oc.predict(oc.Setting(oc.parallel_shift(GAMMA)))


def cli(capsys, *args: str) -> str:
    assert main(["predict", f"--gamma={','.join(map(str, GAMMA))}", *args]) == 0
    return capsys.readouterr().out


def close(a, b, what):
    """Equal to rounding; a factor K apart (the bug) is far outside it."""
    assert np.allclose(a, b, rtol=1e-9, atol=1e-15), (what, a, b)


def test_cli_text_and_json_report_the_same_quantities(report, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    data = json.loads(cli(capsys, "--json"))
    text = cli(capsys)
    # levels: e_k on V at T1 (section 1) and on U (section 2), as in the JSON
    shown = float(re.search(r"^e_k on v_k .* ([\d.e-]+)$", text, re.M).group(1))
    assert shown == pytest.approx(max(data["pretrain"]["error"]), rel=1e-4)
    assert shown <= data["parameters"]["eps"]
    # changes: the columns name ΔL_{v_k}, and their cells are the JSON's numbers
    header = next(i for i, line in enumerate(text.splitlines()) if "paper's verdict" in line)
    lines = text.splitlines()
    assert "first step (exact)" in lines[header] and "F_k (exact)" in lines[header]
    assert lines[header + 1].count("ΔL_{v_k}") == 2
    first = data["forgetting"]["per_feature"][0]
    row = next(line for line in lines[header:] if line.split()[:2] == ["1", "-0.3"])
    assert f"{first['initial_direction']} {first['first_step']:+.3g}" in row
    assert f"{first['F_k']:+.4g}" in row
    close(first["first_step"], report.forgetting[0].first_step, "first step: JSON vs API")
    close(sum(f["F_k"] for f in data["forgetting"]["per_feature"]), data["forgetting"]["F"],
          "F = Σ F_k")


def test_plot_data_is_the_reports_errors_and_its_changes_add_up(report):
    from oodcalc.plots import error_curves
    curves = error_curves(report)
    T1 = curves["T1"]
    assert curves["eps"] == report.parameters["eps"]            # the line is ε, not ε/K
    close(curves["source"][T1], report.pretrain.error, "plot vs pretrain.error (e_k)")
    close(curves["ood"][T1], report.ood.error, "plot vs ood.error (e_k)")
    assert curves["source"][T1].max() <= curves["eps"]           # the level it is drawn against
    close((curves["source"][T1 + 1] - curves["source"][T1]) / K,
          [f.first_step for f in report.forgetting], "plot's first step / K vs first_step")
    close((curves["source"][-1] - curves["source"][T1]) / K,
          [f.F_k for f in report.forgetting], "plot's whole run / K vs F_k")


def test_the_sweep_columns_are_predicts(report):
    from oodcalc.sweep import gamma_grid, sweep
    result = sweep(gamma_grid([[g] for g in GAMMA]))
    for f in report.forgetting:
        close(result.grid(f"first_step_{f.k}").item(), f.first_step, f"first_step_{f.k}")
        close(result.grid(f"F_{f.k}").item(), f.F_k, f"F_{f.k}")


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node not found: the explorer's JavaScript port is "
                                         "checked in a browser by tests/test_explore.py")
def test_the_explorer_reports_the_same_quantities(report, tmp_path):
    """The page's dynamics (oodcalc/explore/dynamics.js) under node: its table's first
    step and F_k are ΔL_{v_k}, its error chart's curves e_k, drawn against ε."""
    script = tmp_path / "run.js"
    source = (ROOT / "oodcalc" / "explore" / "dynamics.js").read_text(encoding="utf-8")
    script.write_text(source + f"""
const r = OOD.run({json.dumps(GAMMA)}, 0.01, 0.1, 0.1);
const ft = r.paths.ft.items, pre = r.paths.pre.items;
console.log(JSON.stringify({{first_step: r.first_step, F_k: r.F_k, ood_error: r.ood_error,
  pretrain_error: r.pretrain_error, eps: r.eps,
  chart_source_T1: pre[pre.length - 1][2], chart_source_end: Array.from(ft[ft.length - 1][2])}}));
""", encoding="utf-8")
    done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    js = json.loads(done.stdout)
    close(js["first_step"], [f.first_step for f in report.forgetting], "explorer first step")
    close(js["F_k"], [f.F_k for f in report.forgetting], "explorer F_k")
    close(js["ood_error"], report.ood.error, "explorer OOD e_k")
    close(js["pretrain_error"], report.pretrain.error[0], "explorer source e_k at T1")
    close(js["chart_source_T1"], report.pretrain.error[0], "explorer chart at T1")
    from oodcalc.plots import error_curves
    close(js["chart_source_end"], error_curves(report)["source"][-1], "explorer chart at T2")
    header = (ROOT / "oodcalc" / "explore" / "explorer.js").read_text(encoding="utf-8")
    assert '"first step ΔL_{v_k} (exact)"' in header and '"F_k = ΔL_{v_k} (exact)"' in header
    assert 'ylabel: "e_k"' in header and 'label: "ε"' in header


def test_the_docs_quote_the_first_step_predict_prints(report):
    """The findings (docs/guide/simulate-verify.md) and docs/theory.md give feature 1's
    first step at this γ; it is predict's first_step (ΔL_{v_1}) to the digits they print."""
    value = report.forgetting[0].first_step
    readme = (ROOT / "docs" / "guide" / "simulate-verify.md").read_text(encoding="utf-8")
    said = re.search(r"the step raises `L_\{v_1\}` by ([\d.]+e-\d+)", readme)
    assert said and float(said.group(1)) == pytest.approx(value, rel=0.01)
    theory = (ROOT / "docs" / "theory.md").read_text(encoding="utf-8")
    said = re.search(r"raises `L_\{v_1\} = e_1/K` by `([\d.]+)·10⁻¹⁰`", theory)
    assert said and float(said.group(1)) * 1e-10 == pytest.approx(value, rel=0.01)
    assert value == pytest.approx(9.5e-10, rel=0.01) and 2.85e-9 != pytest.approx(value, rel=0.1)
