"""reproduce and plot, end to end (the numbers they print are checked in test_theory)."""

import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.cli import main
from oodcalc import paper
from oodcalc.experiments import READERS, TABLES, quantities, reproduce

pytest.importorskip("matplotlib")


def test_reproduce_tables_cover_the_papers_synthetic_figures():
    tables = reproduce()
    k4, k2 = tables.values()
    assert {r.quantity.experiment for r in k4} == {"θ = 0", "θ = π/6", "θ = π/3",
                                                   "mean query", "orthogonal"}
    assert len(k2) == len(quantities("synthetic-k2-forgetting-")) == 5
    for row in k4 + k2:
        # simulation (plain GD on the full Q) agrees with the theory on every row
        for value in row.simulations.values():
            assert value == pytest.approx(row.theory, abs=1e-12)
    corollary = [r for r in k4 if r.quantity.experiment in ("mean query", "orthogonal")]
    assert all(r.magnitude == "agrees" for r in corollary)
    # the paper's K = 2 forgetting magnitudes do not follow from the protocol, and we say so
    assert all(r.magnitude != "agrees" for r in k2)
    assert [r.sign for r in k2][:4] == ["same sign"] * 4


def test_reproduce_cli_formats(capsys, tmp_path):
    assert main(["reproduce"]) == 0
    assert "arXiv 2609.36448" in capsys.readouterr().out
    target = tmp_path / "tables.json"
    target.write_text("old")
    assert main(["reproduce", "synthetic", "-f", "json", "-o", str(target)]) == 0
    data = json.loads(target.read_text())
    assert data["parameters"]["eps"] == 0.01 and len(data["tables"]) == 2
    first = next(iter(data["tables"].values()))[0]["paper"]
    assert first == {"figure": "synthetic-k4-t1-loss", "value": 0.0024,
                     "printed": "L^(tr) = 0.0024",
                     "reported_in": paper.figure("synthetic-k4-t1-loss").source}
    assert main(["reproduce", "synthetic", "-f", "markdown"]) == 0
    assert "| experiment |" in capsys.readouterr().out
    # -o infers the format from the extension; the terminal table cannot go to a file
    assert main(["reproduce", "synthetic", "-o", str(target)]) == 0
    assert json.loads(target.read_text())["parameters"]["eps"] == 0.01
    assert main(["reproduce", "synthetic", "-f", "table", "-o", str(target)]) == 2
    assert main(["reproduce", "synthetic", "-o", str(tmp_path / "tables.png")]) == 2
    assert json.loads(target.read_text()) == data        # and the old file is intact


def test_reproduce_prompts_reports_each_setting_on_stderr(capsys, monkeypatch):
    """--prompts is the slow column (about 25 s): piped, a line per finished setting on
    stderr, stdout the JSON alone (a terminal gets a bar: test_cli_simulate_verify); without
    it, nothing on stderr. The finite-prompt simulator is stubbed to keep this fast."""
    import oodcalc.simulate.prompts as prompts
    from oodcalc.simulate import simulate_population
    monkeypatch.setattr(prompts, "simulate_prompts",
                        lambda setting, N, seed: simulate_population(setting))
    assert main(["reproduce", "synthetic", "--prompts", "8", "-f", "json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["tables"]) == 2
    settings = [r.quantity.experiment for rows in reproduce(simulators={}).values()
                for r in rows]
    settings = list(dict.fromkeys(settings))
    lines = err.splitlines()
    assert len(lines) == len(settings) == 10
    for i, (line, setting) in enumerate(zip(lines, settings), 1):
        assert line.startswith(f"reproduce: {i}/10 {setting}, ") and line.endswith(" s")
    assert main(["reproduce"]) == 0 and capsys.readouterr().err == ""


def test_reproduce_tells_progress_per_setting():
    calls = []
    reproduce(simulators={}, progress=lambda *args: calls.append(args))
    assert calls[0] == (0, 10, "") and [c[:2] for c in calls[1:]] == [(i, 10) for i in range(1, 11)]
    assert calls[1][2].startswith("θ = 0, ") and calls[-1][2].startswith("γ2 = +0.95, ")


def test_every_synthetic_figure_is_compared_and_every_reader_has_figures():
    compared = {q.figure.id for prefix in TABLES for q in quantities(prefix)}
    synthetic = {i for i in paper.figures() if i.startswith("synthetic-")}
    assert compared == synthetic
    for key in READERS:
        assert any(i.startswith(key) for i in paper.figures()), key


def test_the_rows_follow_the_figures_settings(monkeypatch):
    """The experiments are built from the data file: change a setting, the row changes."""
    fig = paper.figure("synthetic-k4-rotation-pi6")
    moved = paper.Figure(**{**fig.__dict__, "setting": {**fig.setting, "theta": "pi/4"}})
    monkeypatch.setitem(paper.figures(), fig.id, moved)
    row = next(r for r in reproduce(simulators={})[TABLES["synthetic-k4-"]]
               if r.quantity.figure.id == fig.id)
    assert row.quantity.experiment == "θ = π/4"
    assert row.theory > 0.04   # between π/6 (0.0356) and π/3 (0.226)


@pytest.mark.parametrize("args", [
    ["losses", "--gamma", "1,-0.9"],
    ["weights", "--theta", "pi/4", "--K", "3"],
    ["ood-vs-theta", "--K", "3"],
    ["forgetting-curve", "--gamma", "1,-0.9", "--ft-steps", "500"],
])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_the_named_format(tmp_path, capsys, args, suffix):
    target = tmp_path / f"figure{suffix}"
    assert main(["plot", *args, "-o", str(target)]) == 0
    head = target.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in head or b"<?xml" in head


@pytest.mark.parametrize("args, fragment", [
    (["losses", "--gamma", "1,-0.9", "-o", "{tmp}/f.txt"], "--output"),
    (["losses", "--gamma", "1,-0.9", "-o", "{tmp}/missing/f.png"], "does not exist"),
    (["losses", "-o", "{tmp}/f.png"], "geometry"),
    (["ood-vs-theta", "--K", "1", "-o", "{tmp}/f.png"], "--K"),
    (["forgetting-curve", "--gamma", "1,-0.9", "--ft-steps", "-3", "-o", "{tmp}/f.png"],
     "--ft-steps"),
    (["forgetting-curve", "--gamma", "1,-0.9", "--ft-steps", "9", "--eps-ft", "0.1",
      "-o", "{tmp}/f.png"], "--eps-ft"),
])
def test_plot_bad_input(tmp_path, capsys, args, fragment):
    assert main(["plot", *[a.format(tmp=tmp_path) for a in args]]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("figure", ["loss_trajectories", "weight_trajectories",
                                    "forgetting_curve"])
def test_many_features_get_one_legend_entry_per_kind_and_a_short_title(figure):
    """K = 64 drew legends of 4,000 entries over the axes, a title of 64 γ past the figure's
    edge and two matplotlib warnings on stderr (looked at): above 6 features one entry per
    kind of curve, the title shows the first and last γ."""
    import warnings

    from oodcalc import plots
    gamma = np.round(np.random.default_rng(0).uniform(-1, 1, 12), 3)
    report = oc.predict(oc.Setting(oc.parallel_shift(gamma)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no "legend 'best' is slow", no layout
        fig = getattr(plots, figure)(report)
        fig.canvas.draw()
    entries = [len(ax.get_legend().get_texts()) for ax in fig.axes if ax.get_legend()]
    assert entries and max(entries) <= 3, entries
    titles = [fig._suptitle.get_text()] if fig._suptitle else [ax.get_title() for ax in fig.axes]
    assert any("(12 values)" in t and "…" in t for t in titles), titles
    small = getattr(plots, figure)(oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]))))
    legend = [t.get_text() for ax in small.axes if ax.get_legend()
              for t in ax.get_legend().get_texts()]
    assert len(legend) >= 2 and not any("k = 1.." in t for t in legend)   # K = 2: each named


def test_real_rotation_draws_measured_and_theory_on_their_own_axes():
    """Issue: one panel with a twin axis put a cross-entropy against a squared error; now
    two panels, each with its own y-axis, intervals on every measured curve and the paper's
    scenario-1 points drawn (from the committed docs/real.json)."""
    from pathlib import Path

    from oodcalc import paper
    from oodcalc.real.plots import rotation
    result = json.loads((Path(__file__).parents[1] / "docs" / "real.json").read_text())
    fig = rotation(result)
    measured, theory = [ax for ax in fig.axes if ax.get_ylabel()]
    # the theory's squared error as a share of uniform attention's (raw and orthonormalised
    # class means have errors of different scales; the share puts them on one axis)
    assert "cross-entropy" in measured.get_ylabel()
    assert "OOD error e / e at uniform attention" in theory.get_ylabel()
    assert len(measured.collections) == len(result["rotation"]["families"])   # the bands
    crosses = [line for line in measured.get_lines() if line.get_marker() == "x"]
    assert [list(line.get_ydata()) for line in crosses] == [
        [paper.figure("bert-rotation-scenario1-start").value,
         paper.figure("bert-rotation-scenario1-end").value]]
    assert [ax for ax in fig.axes if ax.lines] == [measured, theory]   # no twin axis
