"""K = 3 maps of claim 8 for feature 1 (oodcalc.k3maps, `oodcalc plot phase-k3`)."""

from __future__ import annotations

import numpy as np
import pytest

from oodcalc import Protocol, Setting, k3maps, parallel_shift, predict, theory
from oodcalc.cli import main


@pytest.fixture(scope="module")
def maps():
    return {s.gamma1: s for s in k3maps.slices([1.0, 0.5, -0.5, 0.25], n=21)}


def test_each_point_is_what_predict_says(maps):
    s = maps[0.25]
    for i, j in [(0, 0), (3, 17), (10, 4), (20, 20), (6, 9)]:
        g = [0.25, s.axis[j], s.axis[i]]                 # rows: γ3, columns: γ2
        report = predict(Setting(parallel_shift(g)))
        f = report.forgetting[0]
        assert abs(s.F1[i, j] - f.F_k) <= 1e-12
        assert s.verdicts["paper"][i, j] == f.regime
        assert s.verdicts["D_sign"][i, j] == f.D_k_direction
        assert s.verdicts["first_step"][i, j] == f.initial_direction
        assert s.verdicts["corrected"][i, j] == theory.corrected_regimes(np.array(g))[0].regime
        assert s.T2[i, j] == report.finetune.T2


def test_fractions_partition_the_slice(maps):
    for s in maps.values():
        for rule, f in s.fractions().items():
            assert abs(sum(f.values()) - 1.0) < 1e-12, (s.gamma1, rule)


def test_gamma1_one_every_rule_agrees_where_it_decides(maps):
    """γ1 = 1: L_{v_1} falls everywhere (claim 8d); only (1, 1, 1) has no fine-tuning."""
    s = maps[1.0]
    assert (s.F_sign[s.scored] == -1).all()
    assert (~s.scored).sum() == 1 and not s.scored[-1, -1]
    for f in s.fractions().values():
        assert f["disagrees"] == 0.0


def test_the_paper_is_contradicted_where_claim_8b_is_refuted(maps):
    """γ1 = 0.5: the paper's forgetting box max(γ2, γ3) < −0.5 is wrong everywhere (L_{v_1}
    falls), the corrected condition never contradicts F_1, and the counterexample is
    marked."""
    s = maps[0.5]
    box = (s.axis[None, :] < -0.5) & (s.axis[:, None] < -0.5)
    assert (s.verdicts["paper"][box] == "forgetting").all()
    assert (s.disagrees("paper") == box).all()
    assert not s.disagrees("corrected").any()
    assert s.counterexamples == [(0.5, -0.9, -0.9)]
    assert maps[-0.5].counterexamples == [(-0.5, 0.9, 0.9)]     # its mirror image −γ
    codes, names = s.disagreement_classes()
    assert names == ["no rule contradicts the sign of F_1", "wrong: paper"]
    assert (codes == box).all()


def test_the_slice_at_minus_gamma1_is_turned_by_180_degrees(maps):
    a, b = maps[0.5], maps[-0.5]
    assert np.array_equal(a.T2, b.T2[::-1, ::-1])
    assert np.allclose(a.F1, b.F1[::-1, ::-1], rtol=0, atol=1e-12)


def test_plot_phase_k3_draws_and_prints_the_fractions(tmp_path, capsys):
    out = tmp_path / "k3.png"
    assert main(["plot", "phase-k3", "--gamma1", "1,0.5", "--grid", "11", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| 0.5 | paper's verdict (claim 8b) |" in printed and str(out) in printed


@pytest.mark.parametrize("args, option", [
    (["--gamma1", "1.2"], "--gamma1"), (["--gamma1", "nan"], "--gamma1"),
    (["--grid", "2"], "--grid"), (["--eta", "-1"], "--eta"), (["-o", "k3.csv"], "--output")])
def test_plot_phase_k3_bad_input(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["plot", "phase-k3", *args] + ([] if "-o" in args else ["-o", "k3.png"])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"oodcalc: error: {option}: got ")
    assert not list(tmp_path.iterdir())


def test_sweep_has_the_corrected_regime():
    from oodcalc.sweep import gamma_rows, sweep
    gamma = np.random.default_rng(4).uniform(-1, 1, (40, 3))
    result = sweep(gamma_rows(gamma))
    for b in range(len(gamma)):
        assert [result[f"corrected_regime_{k}"][b] for k in (1, 2, 3)] == \
            [r.regime for r in theory.corrected_regimes(gamma[b])]


def test_the_module_examples_run():
    import doctest
    failures, tried = doctest.testmod(k3maps, optionflags=doctest.ELLIPSIS)
    assert tried and not failures
