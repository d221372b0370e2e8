"""docs/theory.md's answer to "is the total F of plain fine-tuning ever positive for K >= 3?"
(parallel shifts, the stopping rule): the record's numbers are runs of oodcalc.predict, the
K = 3 counterexample forgets and its mutations do not, the one-sign theorem's conclusion
holds where its condition does (and fails where it does not), and the small-γ expansion
matches the exact dynamics (and its mutations do not)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.model import attention

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "total_forgetting.json"


def _scan():
    spec = importlib.util.spec_from_file_location(
        "scan_total_forgetting", ROOT / "tools" / "scan_total_forgetting.py")
    scan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scan)
    return scan


SCAN = _scan()


def _report(gamma, eps, eta):
    return oc.predict(oc.Setting(oc.parallel_shift(list(gamma)), oc.Protocol(eps=eps, eta=eta)))


def test_the_record_is_runs_of_predict():
    data = json.loads(RECORD.read_text(encoding="utf-8"))
    r = data["random"]
    assert r["positive"] == 0 and r["runs"] >= 10000
    for row in (r["largest_F"], r["largest_rho"]):
        assert _report(row["gamma"], row["eps"], row["eta"]).F == pytest.approx(row["F"],
                                                                               abs=1e-12)
        assert row["F"] < 0
    for row in data["ascent"]:
        assert _report(row["gamma"], row["eps"], row["eta"]).F < 0 and row["rho"] < 0
    c = data["counterexample"]
    assert _report(c["gamma"], c["eps"], c["eta"]).F == pytest.approx(c["F"], rel=1e-9)


def test_the_batched_search_is_predict():
    """The scan's batched descent gives predict's F, F_k and T2 (same arithmetic)."""
    rng = np.random.default_rng(3)
    for K, eps, eta in ((3, 0.01, 0.1), (4, 0.05, 1.0), (3, 0.01, 50.0)):
        G = rng.uniform(-1, 1, (3, K))
        F, Fk, T2, reached = SCAN.Pair(K, eps, eta).run(G)
        for g, f, fk, t in zip(G, F, Fk, T2):
            report = _report(g, eps, eta)
            assert f == pytest.approx(report.F, abs=1e-15)
            assert fk == pytest.approx([x.F_k for x in report.forgetting], abs=1e-15)
            assert t == report.finetune.T2
        assert reached.all()


def test_a_total_forgetting_at_K_3_where_the_step_is_coarse():
    """K = 3, γ = (0.5, 0.5, −1), ε = 0.01, η = 50: F ≈ +2.6e-5, one step each phase."""
    report = _report((0.5, 0.5, -1), 0.01, 50)
    assert report.F > 1e-5
    assert report.pretrain.T1 == 1 and report.finetune.T2 == 1
    assert any("too coarse" in w for w in report.warnings)
    assert [x.F_k > 0 for x in report.forgetting] == [True, True, False]
    # mutations: one sign (the theorem below), a finer step, K = 2's pair alone
    assert _report((0.5, 0.5, 1), 0.01, 50).F < 0
    assert _report((0.5, 0.5, -1), 0.01, 30).F < 0
    assert _report((0.5, -1), 0.01, 50).F > 0          # K = 2 forgets here too
    # one step without the warning: ε = 0.3 (α* small, one step at α* long)
    report = _report((-0.534, -0.37, 1), 0.3, 48)
    assert report.F > 1e-5 and report.pretrain.T1 == report.finetune.T2 == 1
    assert not any("too coarse" in w for w in report.warnings)


def test_beyond_parallel_shifts_K_3_forgets_at_the_default_protocol():
    """u_1, u_3 = (v̄ ± w)/√2, u_2 = (v_1 − v_2)/√2: F ≈ +0.0040 at ε = 0.01, η = 0.1."""
    report = oc.predict(oc.Setting(oc.from_arrays(*SCAN.shared_centre("mean")), oc.Protocol()))
    assert report.F > 2e-3 and not report.warnings
    assert report.F == pytest.approx(
        json.loads(RECORD.read_text(encoding="utf-8"))["general"]["mean"]["F"], rel=1e-9)
    # mutation: the shared direction v_3 instead of v̄ gives backward transfer
    assert oc.predict(oc.Setting(oc.from_arrays(*SCAN.shared_centre("v3")),
                                 oc.Protocol())).F < -1e-3


def _one_sign_holds(G):
    """Which (row, k) meet the theorem's condition γ_k(γ_k + γ_m) >= 0 for every m."""
    cond = G[:, :, None] * (G[:, :, None] + G[:, None, :]) >= 0          # [b, k, m]
    return cond.all(axis=2)


@pytest.mark.parametrize("K,eps,eta", [(3, 0.01, 1.0), (4, 0.05, 0.5), (5, 0.1, 2.0),
                                       (3, 0.01, 50.0)])
def test_a_feature_no_opposite_feature_outweighs_never_forgets(K, eps, eta):
    rng = np.random.default_rng(K)
    G = rng.uniform(-1, 1, (3000, K))
    G[:1000] = np.abs(G[:1000]) * rng.choice([-1, 1], (1000, 1))         # one sign
    F, Fk, _, reached = SCAN.Pair(K, eps, eta).run(G)
    assert reached.all()
    holds = _one_sign_holds(G)
    assert Fk[holds].max() <= 1e-15                   # the theorem: F_k <= 0
    assert F[:1000].max() <= 1e-15                    # one sign: F <= 0
    assert Fk[~holds].max() > 1e-6                    # the condition is needed: mutation


@pytest.mark.parametrize("K,eps,eta", [(3, 0.01, 0.1), (4, 0.05, 1.0), (2, 0.01, 0.1)])
def test_small_gamma_expansion(K, eps, eta):
    """F = −κ [K(K−2)‖γ‖² + (Σγ)²] + O(‖γ‖⁴), κ = c p (1−p)² / (K (K−1)²)."""
    pair = SCAN.Pair(K, eps, eta)
    c = pair.z1[0, 0] - pair.z1[1, 0]
    p = attention(pair.z1)[0, 0]
    kappa = c * p * (1 - p) ** 2 / (K * (K - 1) ** 2)
    g = 0.01 * np.random.default_rng(K).uniform(-1, 1, K)
    F = pair.run(g)[0][0]

    def matches(a, b, sign=-1):
        return F / (sign * kappa * (a * (g ** 2).sum() + b * g.sum() ** 2)) == \
            pytest.approx(1, abs=1e-3)

    assert matches(K * (K - 2), 1)
    assert not matches(K * (K - 2), 1, sign=1)         # mutations: the sign, either term
    if K > 2:
        assert not matches(0, 1) and not matches(K * (K - 2), 0)
