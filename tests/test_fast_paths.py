"""Every structural fast path against the general K×K ``descend`` and the full-Q simulator:
T1 and T2 identical, logits and F_k to rounding; plus the step estimates, the
diagnostics they drive, and the memory-bounded trajectories."""

import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import compiled, estimates
import importlib
predict_module = importlib.import_module("oodcalc.predict")
from oodcalc.dynamics import (descend, descend_columns, descend_ray, ood_start, ray_logits,
                              ray_step_loop)
from oodcalc.simulate import simulate_population
from oodcalc.sweep import gamma_grid, sweep


@pytest.mark.parametrize("K", [3, 4, 6])
def test_columns_bit_identical_to_descend(K):
    rng = np.random.default_rng(K)
    z0 = rng.normal(scale=2.0, size=(30, K, K))
    z0[4], z0[9] = z0[2], z0[2]                                 # shared columns
    z0[11, :, 1] = z0[12, :, 1]
    eta = rng.choice([0.1, 0.4, 3.0], 30)                       # 3.0: coarse, oscillating
    eps = rng.choice([0.01, 0.05], 30)
    a, b = descend(z0, eta, eps, 5000), descend_columns(z0, eta, eps, 5000)
    assert np.array_equal(a.steps, b.steps) and np.array_equal(a.converged, b.converged)
    assert np.array_equal(a.z, b.z)                              # bit for bit


@pytest.mark.parametrize("K", [2, 3, 5])
def test_two_valued_margins_match_descend(K):
    rng = np.random.default_rng(10 + K)
    own, other = rng.normal(scale=2.0, size=(2, 40))
    z0 = ray_logits(K, own, other)
    eta = rng.choice([0.1, 0.5], 40)
    eps = rng.choice([0.01, 0.03], 40)
    if K == 2:                                                   # any K = 2 column
        z0 = rng.normal(scale=2.0, size=(40, 2, 2))
    a, b = descend(z0, eta, eps, 20000), descend_columns(z0, eta, eps, 20000)
    assert np.array_equal(a.steps, b.steps)
    np.testing.assert_allclose(b.z, a.z, rtol=0, atol=1e-12)
    # a column sum is conserved by both
    np.testing.assert_allclose(b.z.sum(axis=-2), z0.sum(axis=-2), rtol=0, atol=1e-12)


@pytest.mark.parametrize("K, eps, eta", [(2, 0.01, 0.1), (3, 0.02, 0.5), (5, 0.01, 0.1),
                                         (8, 0.05, 1.0), (16, 0.01, 0.3)])
def test_ray_pretraining_matches_descend(K, eps, eta):
    ray = descend_ray(0.0, 0.0, K, eta, eps, 10**6, stride=1)
    full = descend(np.zeros((1, K, K)), eta, eps, 10**6, record=True)
    assert ray.steps == full.steps[0]
    np.testing.assert_allclose(ray.logits(K), full.z[0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(ray_logits(K, ray.path[:, 0], ray.path[:, 1]),
                               full.trajectory[:, 0], rtol=0, atol=1e-13)


@pytest.mark.parametrize("theta, K", [(0.3, 3), (math.pi / 6, 5), (2.5, 4), (math.pi / 2, 3)])
def test_ray_finetuning_matches_descend_and_full_q(theta, K):
    setting = oc.Setting(oc.rotation(theta, K))
    report = oc.predict(setting)
    z1 = report.pretrain.z
    full = descend(ood_start(z1, setting.geometry.M)[None], 0.1, 0.01, 10**6)
    assert report.finetune.T2 == full.steps[0]
    np.testing.assert_allclose(report.finetune.z_ood, full.z[0], rtol=0, atol=1e-13)
    sim = simulate_population(setting)
    assert (report.pretrain.T1, report.finetune.T2) == (sim.pretrain.T1, sim.finetune.T2)
    for a, b in zip(report.forgetting, sim.forgetting):
        assert abs(a.F_k - b.F_k) <= 1e-13 and a.trend == b.trend


def test_random_gamma_grid_equals_full_q_simulator():
    rng = np.random.default_rng(3)
    for K in (2, 3):
        gammas = rng.uniform(-1, 1, size=(3, K))
        for gamma in gammas:
            setting = oc.Setting(oc.parallel_shift(gamma.round(3)))
            row = sweep(gamma_grid([[g] for g in gamma.round(3)]))
            sim = simulate_population(setting)
            assert (row["T1"][0], row["T2"][0]) == (sim.pretrain.T1, sim.finetune.T2)
            for k, f in enumerate(sim.forgetting):
                assert abs(row[f"F_{k + 1}"][0] - f.F_k) <= 1e-13


@pytest.mark.skipif(not compiled.available(), reason="numba is not installed")
def test_compiled_ray_loop_gives_the_same_bits():
    loop = compiled.ray_step_loop()
    for K, eta, source in [(2, 0.1, (0.3, -0.2, 0.5)), (7, 0.4, (1.0, -0.1, 0.8))]:
        path_a, path_b = np.empty((5000, 2)), np.empty((5000, 2))
        args = (0.0, 0.0, K, eta, 0.01, 10**6, 1)
        a = ray_step_loop(*args, path_a, *source)
        b = loop(*args, path_b, *source)
        assert a == b and np.array_equal(path_a[:a[4]], path_b[:b[4]])


def test_strided_trajectories_keep_trend_and_results(monkeypatch):
    setting = oc.Setting(oc.parallel_shift([0.9, -0.5, 0.3]))
    full = oc.predict(setting)
    monkeypatch.setattr(predict_module, "TRAJECTORY_BYTES", 20_000)
    thin = oc.predict(setting)
    assert thin.to_dict() == full.to_dict()
    steps = thin.trajectories["finetune_steps"]
    assert steps[0] == 0 and steps[-1] == full.finetune.T2 and len(steps) < full.finetune.T2
    assert np.array_equal(thin.trajectories["finetune_source"],
                          full.trajectories["finetune_source"][steps])
    pre = thin.trajectories["pretrain_steps"]
    assert pre[-1] == full.pretrain.T1 and len(pre) < full.pretrain.T1
    assert len(full.trajectories["pretrain"]) == full.pretrain.T1 + 1


@pytest.mark.parametrize("K", [2, 4, 16, 64])
def test_pretrain_estimate_is_close(K):
    exact = descend_ray(0.0, 0.0, K, 0.1, 0.01, 10**6).steps
    assert abs(estimates.pretrain_steps(K, 0.01, 0.1) - exact) <= 0.01 * exact


def test_out_of_reach_runs_fail_before_running():
    # ε = 1e-12: T1 ≈ (K − 1)/(4ηε) = 1/(4 · 0.1 · 1e-12) = 2.5e12 (claim 4's flow time).
    # η = 1e6: one pretraining step takes the margin to η/4, α = η/8; OOD column 2 then
    # starts at margin α(γ2² + γ1γ2) = −0.09α = −11250 and needs ~e^11250/η ≈ 10^4880 steps.
    with pytest.raises(oc.ComputationError, match=r"about 2\.5e\+12 steps.*raise --eps"):
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=1e-12)))
    with pytest.raises(oc.ComputationError, match=r"10\^48\d\d steps.*overshot.*lower --eta"):
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eta=1e6)))


def test_overshoot_warning():
    coarse = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eta=50)))
    assert coarse.pretrain.T1 == 1 and len(coarse.warnings) == 1
    assert "--eta 50" in coarse.warnings[0] and "use --eta <=" in coarse.warnings[0]
    assert coarse.to_dict()["warnings"] == coarse.warnings
    fine = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    assert fine.warnings == []


def test_auto_step_cap_runs_past_the_default_and_explicit_cap_is_kept():
    # K = 512 needs T1 = 2.9e6 > 10^6: auto raises the cap, an explicit one refuses.
    estimate = estimates.pretrain_steps(512, 0.01, 0.1)
    assert estimate > 2 * oc.Protocol().max_steps
    assert predict_module.phase_cap(10**6, True, math.log(estimate), "p", "", "") \
        >= 2 * estimate
    with pytest.raises(oc.ComputationError, match="more than max_steps = 1,000,000"):
        predict_module.phase_cap(10**6, False, math.log(estimate), "pretraining", "K", "x")


def test_memory_error_is_one_line(monkeypatch):
    def boom(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(predict_module, "descend_ray", boom)
    with pytest.raises(oc.ComputationError, match="out of memory for K = 2.*lower K"):
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
