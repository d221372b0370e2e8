"""The record behind docs/theory.md's open question (is the total F ever positive for
K >= 3?): its numbers are runs of oodcalc.predict, recomputed here, and the search would
see a positive F (it does at K = 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oodcalc as oc

RECORD = Path(__file__).resolve().parents[1] / "docs" / "total_forgetting.json"


def _F(gamma, eps, eta):
    return oc.predict(oc.Setting(oc.parallel_shift(list(gamma)),
                                 oc.Protocol(eps=eps, eta=eta))).F


def test_the_record_is_runs_of_predict():
    data = json.loads(RECORD.read_text(encoding="utf-8"))
    assert data["random"]["positive"] == 0 and data["random"]["runs"] >= 1000
    for row in data["random"]["largest"]:
        assert _F(row["gamma"], row["eps"], row["eta"]) == pytest.approx(row["F"], abs=1e-12)
        assert row["F"] < 0
    for row in data["ascent"]:          # the best point is rounded to 4 decimals: F nearby
        assert _F(row["gamma"], row["eps"], row["eta"]) < 0


def test_the_search_sees_a_positive_total_forgetting_where_one_exists():
    import importlib.util
    path = RECORD.parents[1] / "tools" / "scan_total_forgetting.py"
    spec = importlib.util.spec_from_file_location("scan_total_forgetting", path)
    scan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scan)
    F, T2 = scan.total_forgetting((1, -0.9), 0.01, 0.1)       # K = 2: forgets
    assert F > 0 and T2 == 360
