"""What every figure shows: labels in mathtext, legends clear of the data, colour scales
that show both signs, and one line instead of an empty figure (issue 29)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.cli import main

pytest.importorskip("matplotlib")

ROOT = Path(__file__).parents[1]


def _trajectory(kind, gamma=(1, -0.9), **protocol):
    from oodcalc import plots
    return getattr(plots, kind)(oc.predict(oc.Setting(oc.parallel_shift(list(gamma)),
                                                      oc.Protocol(**protocol))))


def _real(kind):
    from oodcalc.real import plots as real_plots
    return getattr(real_plots, kind)(json.loads((ROOT / "docs" / "real.json").read_text()))


def _depth(kind):
    from oodcalc.depth import documents, record
    _, results = record.load(documents.RECORD)
    return documents.figures(results)[kind]


def _ladder_arms():
    """`plot ladder --arms` with every arm (the figure's legend holds ten), on synthetic
    runs: two rung-depths, two γ, three seeds, curves that fall to ε at each arm's pace."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from oodcalc.depth.arms import ARMS, parse
    from oodcalc.depth.arms_table import ArmsTable, matched_plot

    @dataclass(frozen=True)
    class Config:
        layers: int
        arm: str
        eps: float = 0.01

    arms = parse(",".join(a for a in ARMS if a != "plain"))
    groups = tuple((rung, {arm: Config(layers, arm.name) for arm in arms})
                   for rung, layers in (("depth", 2), ("layernorm-mlp", 3)))
    t = np.linspace(0, 1, 40)[:, None]
    records = {}
    for _, configs in groups:
        for i, config in enumerate(configs.values()):
            for seed in range(3):
                for gamma in (-0.75, 0.75):
                    target = 0.5 * np.exp(-(4 + i / 3) * t) * np.ones((1, 2))
                    source = 0.01 + (0.02 * (i - 4) + 0.005 * seed) * t * np.ones((1, 2))
                    records[config, seed, gamma] = {
                        "pretrain": {"converged": True},
                        "finetune": {"converged": True, "target_curve": target.tolist(),
                                     "source_curve": source.tolist()}}
    first = next(iter(groups[0][1].values()))
    table = ArmsTable(first, arms, (0, 1, 2), (-0.75, 0.75), (0.25, 0.5, 0.75), (),
                      SimpleNamespace(records=records), groups)
    return matched_plot(table)


def _real_arms():
    """`plot real-arms` with every arm (ten labels) and six conditions, on synthetic fits:
    each arm's new-task loss falls at its own pace while F rises."""
    from oodcalc.depth.arms import ARMS
    t = np.linspace(0, 1, 30)
    conditions = [{"condition": name, "rows": [
        {"label": arm, "fits": [{"curve": np.column_stack(
            [1.3 * np.exp(-(0.3 + 0.02 * i + 0.01 * fit) * 3 * t),
             (0.05 + 0.01 * i) * t]).tolist()} for fit in range(3)]}
        for i, arm in enumerate(ARMS)]}
        for name in ("rotation θ = π/2", "rotation θ = 3π/4", "rotation θ = π",
                     "domain: pain", "domain: mental health", "domain: other")]
    result = {"arms": {"conditions": conditions, "matched_levels": [0.25, 0.5, 0.75]},
              "parameters": {"folds": 3, "seeds": 1, "model": "all-MiniLM-L6-v2",
                             "layer": 5, "source": "contraception"}}
    from oodcalc.real import plots as real_plots
    return real_plots.arms(result)


#: Every figure oodcalc draws, small enough to draw in a test.
FIGURES = {
    "losses": lambda: _trajectory("loss_trajectories"),
    "weights": lambda: _trajectory("weight_trajectories"),
    "weights K = 3": lambda: _trajectory("weight_trajectories", (0.8, 0.5, -0.4)),
    "forgetting-curve": lambda: _trajectory("forgetting_curve", ft_steps=300),
    "ood-vs-theta": lambda: __import__("oodcalc.plots").plots.ood_error_vs_theta(
        3, simulators={}),
    "phase-diagram": lambda: __import__("oodcalc.plots").plots.phase_diagram_k2(11),
    "phase-k3": lambda: __import__("oodcalc.plots").plots.phase_k3_slices((0.25, 0.5), 15)[0],
    "overlap-map": lambda: __import__("oodcalc.plots").plots.overlap_map_figure(
        9, rho_max=0.5)[0],
    "real-rotation": lambda: _real("rotation"),
    "real-shift": lambda: _real("shift"),
    "advise": lambda: __import__("oodcalc.plots").plots.advice_figure(
        oc.advise(oc.Setting(oc.parallel_shift([1, -0.9])))),
    "ladder-arms": _ladder_arms,
    "real-arms": _real_arms,
}


@pytest.fixture(scope="module", params=list(FIGURES))
def figure(request):
    fig = FIGURES[request.param]()
    fig.canvas.draw()
    yield request.param, fig
    from matplotlib import pyplot
    pyplot.close(fig)


def texts(fig) -> list[str]:
    """Every string the figure prints: titles, labels, ticks, legends, annotations."""
    from matplotlib.text import Text
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


#: A subscript written as raw text (``β_{2,1}``, ``L_v1``, ``η_ft``): outside ``$…$`` it is
#: printed as it is typed.
RAW_SUBSCRIPT = re.compile(r"_[{\w]")


def raw_subscripts(strings) -> list[str]:
    return [s for s in strings if RAW_SUBSCRIPT.search(re.sub(r"\$[^$]*\$", "", s))]


def test_the_pattern_finds_raw_subscripts_and_passes_mathtext():
    assert raw_subscripts(["β_{2,1}", "L_v1(t)", "η_ft = 0.1", "Σ_n Λ_{1,n}"]) == \
        ["β_{2,1}", "L_v1(t)", "η_ft = 0.1", "Σ_n Λ_{1,n}"]
    assert raw_subscripts([r"$\beta_{2,1}$", r"$\eta_{\rm ft}$ = 0.1", "ε = 0.01"]) == []


def test_no_figure_prints_a_subscript_as_raw_text(figure):
    name, fig = figure
    assert raw_subscripts(texts(fig)) == [], name


def test_the_weights_name_their_symbols_in_mathtext():
    shown = texts(_trajectory("weight_trajectories"))
    for symbol in (r"$\alpha_{1}$", r"$\beta_{2,1}$", r"$\beta_{1,2}$", r"$\Delta\alpha_{2}$",
                   r"$\Sigma_n \Lambda_{1,n}$ (decrease of β)"):
        assert symbol in shown, (symbol, shown)
    assert any(r"$\eta_{\rm ft}$ = 0.1" in t for t in shown)
    curve = texts(_trajectory("forgetting_curve", ft_steps=50))
    assert r"forgetting  $F_k(t) = L_{v_k}(t) - L_{v_k}(T_1)$" in curve


def _display_points(ax, per_segment=40):
    """Points of everything drawn in ``ax`` in display coordinates: line vertices and
    points along joined segments, error bars, and the corners and inside of images."""
    out = []
    for line in ax.get_lines():
        xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if line.get_linestyle() not in ("None", "") and len(xy) > 1:
            t = np.linspace(0, 1, per_segment)[None, :, None]
            xy = (xy[:-1, None] + t * (xy[1:, None] - xy[:-1, None])).reshape(-1, 2)
        out.append(xy)
    for collection in ax.collections:
        for path in collection.get_paths():
            xy = collection.get_transform().transform(path.interpolated(per_segment).vertices)
            out.append(xy[np.isfinite(xy).all(axis=1)])
    for image in ax.get_images():
        x0, x1, y0, y1 = image.get_extent()
        grid = np.stack(np.meshgrid(np.linspace(x0, x1, 50), np.linspace(y0, y1, 50)), -1)
        out.append(ax.transData.transform(grid.reshape(-1, 2)))
    return np.concatenate(out) if out else np.empty((0, 2))


def covered(fig) -> list[str]:
    """Legends that lie over something drawn: an axes' legend over its own data, a figure's
    legend over any axes' data."""
    renderer = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            inside = legend.get_window_extent(renderer).count_contains(_display_points(ax))
            if inside:
                bad.append(f"{ax.get_title()!r}: {inside} points under its legend")
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            inside = box.count_contains(_display_points(ax))
            if inside:
                bad.append(f"figure legend over {inside} points of {ax.get_title()!r}")
    return bad


def test_the_overlap_check_sees_a_legend_over_a_curve():
    from oodcalc.plots import _pyplot
    plt = _pyplot()
    fig, ax = plt.subplots()
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.95), label="along the top")
    ax.plot(x, x, label="diagonal")
    ax.legend(loc="upper left")
    fig.canvas.draw()
    assert covered(fig)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.canvas.draw()
    assert covered(fig) == []
    plt.close(fig)


def test_no_legend_covers_the_data(figure):
    name, fig = figure
    assert covered(fig) == [], name


def test_the_depth_figures_label_in_mathtext_and_keep_legends_off_the_data():
    for kind in ("depth", "ladder"):
        try:
            fig = _depth(kind)
        except (ImportError, KeyError) as err:       # no record of the runs, or no torch
            pytest.skip(f"the depth figures cannot be drawn here: {err!r}")
        fig.canvas.draw()
        assert raw_subscripts(texts(fig)) == [], kind
        assert covered(fig) == [], kind


def test_real_shift_names_every_domain_once_clear_of_the_others():
    fig = _real("shift")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    domains = [r["domain"] for r in json.loads((ROOT / "docs" / "real.json").read_text())
               ["shift"]["rows"]]
    for ax in fig.axes:
        names = [t for t in ax.texts if t.get_text() in domains]
        assert sorted(t.get_text() for t in names) == sorted(domains)
        boxes = [t.get_window_extent(renderer) for t in names]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
        points = _display_points(ax)
        assert all(box.count_contains(points) == 0 for box in boxes)


def test_the_phase_diagram_saturates_forgetting_and_transfer_each_at_its_extreme():
    """The colour scale was symmetric about 0 at max |F|: F > 0 (ten times smaller than
    F < 0 at the defaults) never got past a faint pink."""
    from oodcalc import plots
    fig = plots.phase_diagram_k2(21)
    image = fig.axes[0].get_images()[0]
    F = image.get_array()
    assert F.max() > 0 > F.min() and F.max() < -F.min() / 3      # the asymmetric case
    assert image.norm(F.max()) == pytest.approx(1.0) and image.norm(F.min()) == pytest.approx(0)
    assert image.norm(0.0) == pytest.approx(0.5)                  # white is F = 0


def test_the_default_k3_slice_shows_every_answer(tmp_path, capsys):
    """plot phase-k3 without --gamma1 drew γ1 = 1, six panels of one colour; the default
    slice now has F_1 of both signs and rules that disagree with it."""
    from oodcalc import k3maps
    s = k3maps.slices(n=21)[0]
    assert (s.F_sign > 0).any() and (s.F_sign < 0).any()
    assert any(s.fractions()[rule]["disagrees"] > 0 for rule in k3maps.RULES)
    assert main(["plot", "phase-k3", "--grid", "5", "-o", str(tmp_path / "k3.png")]) == 0
    assert f"| {k3maps.DEFAULT_GAMMA1[0]:g} | paper's verdict" in capsys.readouterr().out


NOTHING = [
    (["forgetting-curve", "--gamma", "1,1"], "T2 = 0", "--ft-steps"),
    (["forgetting-curve", "--gamma", "1,-0.9", "--eps", "0.5"], "T2 = 0", "--ft-steps"),
    (["forgetting-curve", "--gamma", "1,-0.9", "--eps", "1"], "T2 = 0", "--ft-steps"),
    (["forgetting-curve", "--gamma", "-1,-1"], "T2 = 0", "--ft-steps"),
    (["forgetting-curve", "--mean-query", "--K", "3", "--eps", "1"], "T2 = 0", "--ft-steps"),
    (["losses", "--gamma", "1,-0.9", "--eps", "1"], "T1 = T2 = 0", "lower --eps"),
    (["weights", "--mean-query", "--K", "3", "--eps", "1"], "T1 = T2 = 0", "lower --eps"),
    (["phase-diagram", "--grid", "3", "--eps", "1"], "no point of the grid fine-tunes",
     "lower --eps"),
    (["phase-k3", "--grid", "3", "--eps", "1"], "no point fine-tunes", "lower --eps"),
    (["overlap-map", "--grid", "3", "--eps", "1"], "T2 = 0 everywhere", "lower --eps"),
]


@pytest.mark.parametrize("args, why, advice", NOTHING)
def test_a_figure_with_nothing_to_draw_says_so_in_one_line(args, why, advice, tmp_path,
                                                           capsys):
    """Fine-tuning in 0 steps ended in 'internal error (ValueError: Data cannot be
    log-scaled ...)'; losses and weights drew empty axes."""
    out = tmp_path / "f.png"
    assert main(["plot", *args, "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing to draw" in err, err
    assert why in err and advice in err and "internal error" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["losses", "--gamma", "1,1"],                   # T2 = 0: pretraining alone is drawn
    ["forgetting-curve", "--gamma", "1,-0.9", "--eps", "0.5", "--eps-ft", "0.1"],  # T1 = 0
    ["forgetting-curve", "--gamma", "1,1", "--ft-steps", "10"],   # constant-free U = V run
    ["forgetting-curve", "--gamma", "1,-0.9", "--ft-steps", "1"],  # one point
])
def test_degenerate_but_drawable_inputs_draw(args, tmp_path, capsys):
    out = tmp_path / "f.png"
    assert main(["plot", *args, "-o", str(out)]) == 0, capsys.readouterr().err
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_curve_of_one_point_is_drawn_with_a_marker():
    fig = _trajectory("forgetting_curve", ft_steps=1)
    lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) == 1
             and line.get_label().startswith("$F")]
    assert lines and all(line.get_marker() == "o" for line in lines)
    weights = _trajectory("weight_trajectories", eps=0.5, eps_ft=0.1)     # T1 = 0 < T2
    assert any("pretraining takes no step" in t for t in texts(weights))


# --- progress on long work: on a terminal's stderr only ------------------------------

def _terminal():
    from io import StringIO

    from rich.console import Console
    return Console(file=StringIO(), force_terminal=True, width=100)


def test_rows_progress_draws_a_bar_with_the_time_left_on_a_terminal_and_nothing_otherwise():
    from io import StringIO

    from rich.console import Console

    from oodcalc.cli.progress import rows_progress
    terminal = _terminal()
    with rows_progress("K = 3 slices", console=terminal) as progress:
        for done in (0, 50, 100):
            progress(done, 100)
    drawn = terminal.file.getvalue()
    assert "K = 3 slices" in drawn and "100/100" in drawn and "ETA" in drawn
    assert "\x1b[" in drawn                               # a live bar, not lines
    piped = Console(file=StringIO())
    with rows_progress("K = 3 slices", console=piped) as progress:
        assert progress is None                           # the sweep runs without one
    assert piped.file.getvalue() == ""


@pytest.mark.parametrize("args, title", [
    (["plot", "phase-k3", "--grid", "9", "-o", "{tmp}/k3.png"], "K = 3 slices"),
    (["plot", "phase-diagram", "--grid", "9", "-o", "{tmp}/k2.png"], "K = 2 grid"),
    (["plot", "overlap-map", "--grid", "5", "--rho-max", "0.5", "-o", "{tmp}/o.png"],
     "overlap map"),
    (["explore", "--grid", "5", "--k3-grid", "5", "--gamma1", "0.5", "--overlap-grid", "5",
      "-o", "{tmp}/e.html"],
     "computing the maps"),
])
def test_long_map_commands_show_progress_on_a_terminal_never_in_piped_output(
        args, title, tmp_path, capsys, monkeypatch):
    from oodcalc.cli import progress
    argv = [a.format(tmp=tmp_path) for a in args]
    assert main(argv) == 0                                # piped (capsys): nothing extra
    out, err = capsys.readouterr()
    assert err == "" and "\x1b[" not in out and "ETA" not in out
    terminal = _terminal()
    monkeypatch.setattr(progress, "stderr_console", lambda: terminal)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    drawn = terminal.file.getvalue()
    assert title in drawn and "ETA" in drawn                # the bar, on the terminal
    assert "\x1b[" not in out and "ETA" not in out and err == ""


def test_predicts_bar_shows_the_time_left():
    """It showed the time spent (TimeElapsedColumn), not what someone waiting asks."""
    import time

    from rich.progress import TimeElapsedColumn, TimeRemainingColumn

    from oodcalc.cli.progress import StepProgress
    with StepProgress(after=0) as shown:
        deadline = time.monotonic() + 5
        while shown._bar is None and time.monotonic() < deadline:
            time.sleep(0.01)
        columns = shown._bar.columns
    assert any(isinstance(c, TimeRemainingColumn) for c in columns)
    assert not any(isinstance(c, TimeElapsedColumn) for c in columns)


def test_ood_vs_theta_without_pretraining_says_why_its_line_is_flat():
    from oodcalc import plots
    flat = plots.ood_error_vs_theta(2, oc.Protocol(eps=1.0), simulators={})
    assert any("pretraining takes no step" in t for t in texts(flat))
    trained = plots.ood_error_vs_theta(2, simulators={})
    assert not any("pretraining takes no step" in t for t in texts(trained))


def test_the_advice_figure_names_every_arm_and_the_thresholds(figure):
    name, fig = figure
    if name != "advise":
        pytest.skip("the advice figure only")
    shown = texts(fig)
    for arm in ("plain", "weights cosine", "project key", "project query (rule on U not met)",
                "replay λ*"):
        assert arm in shown, (arm, shown)
    # λ* to 4 digits: the bracket (1e-6 wide) may end elsewhere on another machine
    assert any(t.startswith("λ* = 0.01241") for t in shown)
    assert "no μ meets the rule with F ≤ 0" in shown
