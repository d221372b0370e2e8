"""`str(report)` is a short plain-text summary (80 columns) and `repr(report)` one line.

The numbers below are read from the report itself, so the test holds on any machine; the
summary must show them, within 80 columns, and follow the report when a number changes.
"""

from __future__ import annotations

import dataclasses

import pytest

import oodcalc as oc
from oodcalc.simulate import simulate_population


@pytest.fixture(scope="module")
def report():
    return oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))


def fits(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_str_is_the_summary_with_the_key_numbers(report):
    text = str(report)
    assert text.startswith("oodcalc report (theory) · parallel shift, γ = (1, -0.9)")
    assert f"T1 = {report.pretrain.T1}" in text and f"T2 = {report.finetune.T2}" in text
    assert f"OOD loss L = Σ e_k/K = {report.ood.loss:.5g}" in text
    assert f"F = L_tr(after) − L_tr(before) = {report.F:+.5g} (net forgetting)" in text
    for f in report.forgetting:       # one row per feature: k, F_k, trend, verdict
        row = next(line for line in text.splitlines()
                   if line.startswith(" ") and line.split()[0] == str(f.k))
        assert row.split() == [str(f.k), f"{f.F_k:+.4g}", f.trend, f.regime]
    assert [f.regime for f in report.forgetting] == ["backward-transfer", "forgetting"]
    assert fits(text) and len(text.splitlines()) <= 12
    assert "array(" not in text and "Pretrain(" not in text      # not the dataclass dump


def test_str_and_repr_follow_the_report(report):
    moved = dataclasses.replace(report, pretrain=dataclasses.replace(report.pretrain, T1=12345))
    assert "T1 = 12345" in str(moved) and "T1=12345" in repr(moved)
    assert "T1 = 12345" not in str(report) and "T1=12345" not in repr(report)
    flipped = dataclasses.replace(report, forgetting=[
        dataclasses.replace(f, F_k=-f.F_k) for f in report.forgetting])
    assert f"{-report.F:+.5g} (net positive backward transfer)" in str(flipped)


def test_repr_is_one_short_line(report):
    text = repr(report)
    assert "\n" not in text and len(text) < 300
    assert text.startswith("<Report theory: parallel shift, γ = (1, -0.9);")
    for part in (f"T1={report.pretrain.T1}", f"T2={report.finetune.T2}", f"F={report.F:+.4g}"):
        assert part in text
    assert len(repr([report, report])) < 600     # a list of reports stays readable


def test_long_reports_stay_within_80_columns(report):
    """Many features show their first and last rows; long warnings wrap."""
    wide = oc.predict(oc.Setting(oc.parallel_shift([0.1 * k - 0.7 for k in range(15)]),
                                 oc.Protocol(eps=0.05)))
    text = str(wide)
    assert fits(text) and "(3 more)" in text
    assert f"F = L_tr(after) − L_tr(before) = {wide.F:+.5g}" in text
    assert len(repr(wide)) < 300 and "(15 values)" in repr(wide)
    warned = dataclasses.replace(report, warnings=["the step is too coarse " * 12])
    assert fits(str(warned)) and str(warned).count("too coarse") == 12


def test_simulator_and_overlap_reports(report):
    sim = simulate_population(oc.Setting(oc.parallel_shift([1, -0.9])))
    assert str(sim).startswith(f"oodcalc report ({sim.source})") and fits(str(sim))
    assert "threshold α*" not in str(sim)        # a simulator has no closed form
    assert len(repr(sim)) < 300
    lap = oc.predict(oc.Setting(oc.overlap(0.8, [1, 0.5])))
    # the paper's verdict for feature 2 is contradicted by the exact trajectory (F_2 > 0)
    assert "backward-transfer ✗ contradicted" in str(lap) and fits(str(lap))


def test_the_library_renders_without_the_cli():
    import subprocess
    import sys
    code = ("import sys, oodcalc as oc; "
            "str(oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))); "
            "print(sorted(m for m in sys.modules if m.startswith(('oodcalc.cli', 'rich'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
