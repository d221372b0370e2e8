"""Every structural fast path against the general K×K ``descend`` and the full-Q simulator:
T1 and T2 identical, logits and F_k to rounding; plus the step estimates, the
diagnostics they drive, and the memory-bounded trajectories."""

import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import estimates, limits
from oodcalc.finetune import compiled, dynamics
import importlib
predict_module = importlib.import_module("oodcalc.prediction")
from oodcalc.finetune.dynamics import (descend, descend_columns, descend_ray, ood_start, ray_logits,
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


@pytest.mark.parametrize("K", [2, 3, 5])
def test_margin_rounds_equal_the_step_by_step_rule(K, monkeypatch):
    """Applying the stopping rule once per round of kept margin states gives exactly
    what applying it after every step gives, capped or not."""
    rng = np.random.default_rng(20 + K)
    own, other = rng.normal(scale=2.0, size=(2, 60))
    z0 = ray_logits(K, own, other)
    z0[7], z0[8, :, 1] = z0[3], z0[3, :, 1]                     # shared columns
    eta, eps = rng.choice([0.1, 0.5], 60), rng.choice([0.01, 0.03], 60)
    for cap in (20000, 40, 33):                                 # 40, 33: some do not converge
        rounds = descend_columns(z0, eta, eps, cap)
        monkeypatch.setattr(dynamics, "MARGIN_ROUND", 1)
        stepwise = descend_columns(z0, eta, eps, cap)
        monkeypatch.undo()
        assert np.array_equal(rounds.steps, stepwise.steps)
        assert np.array_equal(rounds.converged, stepwise.converged)
        assert np.array_equal(rounds.z, stepwise.z)
    assert not rounds.converged.all() and rounds.converged.any()


def test_round_stops_follow_the_rule_when_columns_go_back_above():
    """``_stops`` against the rule applied step by step, with columns that cross ε both
    ways within a round and configurations that use a column twice."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        U, B, K, n = 12, 30, 3, 8
        slots = rng.integers(0, U, size=(B, K))
        above0 = rng.random(U) < 0.7
        below = rng.random((n, U)) < 0.5                          # after each round step
        inverse = slots.ravel()
        fan = np.bincount(inverse, minlength=U)
        by_col = np.concatenate([[0], np.cumsum(fan)])
        pair_cfg = np.argsort(inverse) // K
        live = rng.random(B) < 0.8
        remaining = above0[slots].sum(axis=1)
        live &= remaining > 0
        flips = np.vstack([below[:1] == above0, below[1:] != below[:-1]])
        at, col = np.divmod(np.flatnonzero(flips), U)
        done, when = dynamics._stops(remaining.copy(), live, at, col, below[at, col],
                                     by_col, pair_cfg)
        expected = {}
        for b in np.flatnonzero(live):
            hits = np.flatnonzero(below[:, slots[b]].all(axis=1))
            if hits.size:
                expected[b] = hits[0]
        assert dict(zip(done.tolist(), when.tolist())) == expected


def test_columns_do_not_depend_on_the_rest_of_the_batch():
    """Two-valued and general columns in one batch: each configuration's result is the
    one it gets alone, bit for bit (a sweep is the same whatever its chunks)."""
    rng = np.random.default_rng(8)
    z1 = ray_logits(3, 1.5, -0.75)
    gammas = np.array([[0.5, 0.5, 0.5], [0.9, -0.2, 0.4], [0.3, 0.3, 0.3], [0.0, 0.7, -0.1]])
    z0 = np.stack([ood_start(z1, np.diag(g)) for g in gammas])
    together = descend_columns(z0, 0.1, 0.01, 10**5)
    for b in range(len(gammas)):
        alone = descend_columns(z0[b:b + 1], 0.1, 0.01, 10**5)
        assert alone.steps[0] == together.steps[b] and np.array_equal(alone.z[0], together.z[b])
    full = descend(z0, 0.1, 0.01, 10**5)
    assert np.array_equal(full.steps, together.steps)
    np.testing.assert_allclose(together.z, full.z, rtol=0, atol=1e-12)


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
    thin_json, full_json = thin.to_dict(), full.to_dict()
    # The forgetting curve is sampled at the kept steps, so only it may differ: at the
    # steps both keep, its values are the same.
    thin_curve, full_curve = (d["forgetting"].pop("curve") for d in (thin_json, full_json))
    assert thin_json == full_json
    full_at = dict(zip(full_curve["steps"], full_curve["F"]))
    common = [(s, F) for s, F in zip(thin_curve["steps"], thin_curve["F"]) if s in full_at]
    assert len(common) >= 2 and all(full_at[s] == F for s, F in common)
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
    with pytest.raises(oc.ComputationError, match=r"about 2\.5e\+12 steps.*raise Protocol\.eps"):
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=1e-12)))
    with pytest.raises(oc.ComputationError, match=r"10\^48\d\d steps.*overshot.*lower Protocol\.eta"):
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
    with pytest.raises(oc.ComputationError, match=r"more than Protocol.max_steps = 1,000,000;"):
        predict_module.phase_cap(10**6, False, math.log(estimate), "pretraining", "K", "x")


def test_an_auto_cap_is_named_as_auto_not_as_a_cap_the_user_set():
    """`predict --gamma 1,-0.9 --eps 1e-9` said "more than max_steps = 1,000,000,000", a
    value the user never gave; it names the automatic cap, its default and its ceiling,
    and the explicit cap that would run it."""
    with pytest.raises(oc.ComputationError) as refused:
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=1e-9)))
    text = str(refused.value)
    assert "max_steps = 1,000,000,000" not in text
    assert (f"automatic step cap (Protocol.max_steps auto: {oc.Protocol().max_steps:,}, "
            f"raised to twice the estimate but not past {limits.AUTO_STEP_LIMIT:,})") in text
    assert f"raise Protocol.max_steps to about 3," in text and f"{limits.MAX_STEPS:,}" in text


def test_memory_error_is_one_line(monkeypatch):
    def boom(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(predict_module, "descend_ray", boom)
    with pytest.raises(oc.ComputationError, match="out of memory for K = 2.*lower K"):
        oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))


# --- the compiled per-column fine-tuning (parallel shifts) ------------------------------

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _predict_with(setting, path, monkeypatch):
    """``predict`` forced onto the compiled kernel (``"compiled"``) or the NumPy K×K
    descent (``"numpy"``)."""
    monkeypatch.setattr(estimates, "compiled_pays", lambda K, steps: path == "compiled")
    report = oc.predict(setting)
    expected = "per-column kernel" if path == "compiled" else "K×K descent (NumPy)"
    assert report.run["engine"]["finetune"].startswith(expected)
    return report


def _same_report(a, b, tol=1e-12):
    assert a.finetune.T2 == b.finetune.T2
    for fa, fb in zip(a.forgetting, b.forgetting):
        assert fa.trend == fb.trend
        assert abs(fa.F_k - fb.F_k) <= tol
    np.testing.assert_allclose(a.finetune.z_ood, b.finetune.z_ood, rtol=0, atol=1e-12)
    ta, tb = a.trajectories, b.trajectories
    assert np.array_equal(ta["finetune_steps"], tb["finetune_steps"])
    for key in ("finetune_ood", "finetune_source", "finetune_source_loss"):
        np.testing.assert_allclose(ta[key], tb[key], rtol=0, atol=1e-12)


@needs_numba
@pytest.mark.parametrize("seed", range(6))
def test_compiled_columns_match_the_numpy_descent(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    K = int(rng.choice([3, 5, 8, 13, 24]))
    gamma = rng.uniform(-1, 1, K).round(3)
    if seed == 0:
        gamma[1] = 0.0                                        # an unaffected feature
    protocol = oc.Protocol(eps=float(rng.choice([0.01, 0.03])),
                           eta=float(rng.choice([0.1, 0.5, 2.0])))
    setting = oc.Setting(oc.parallel_shift(gamma), protocol)
    _same_report(_predict_with(setting, "compiled", monkeypatch),
                 _predict_with(setting, "numpy", monkeypatch))


@needs_numba
def test_compiled_columns_match_the_full_q_simulator(monkeypatch):
    setting = oc.Setting(oc.parallel_shift([0.9, -0.5, 0.3, -0.95]))
    report = _predict_with(setting, "compiled", monkeypatch)
    sim = simulate_population(setting)
    assert (report.pretrain.T1, report.finetune.T2) == (sim.pretrain.T1, sim.finetune.T2)
    for a, b in zip(report.forgetting, sim.forgetting):
        assert abs(a.F_k - b.F_k) <= 1e-12 and a.trend == b.trend


@needs_numba
@pytest.mark.parametrize("low, high", [(1, 1), (7, 7), (1, 10**9)])
def test_compiled_blocks_do_not_change_the_result(low, high, monkeypatch):
    """Blocks of one step, of 7 steps (the rule met inside a block) and of the whole run."""
    setting = oc.Setting(oc.parallel_shift([0.8, -0.6, 0.1]))
    reference = _predict_with(setting, "compiled", monkeypatch)
    monkeypatch.setattr(predict_module, "KERNEL_MIN_WORK", low * 9)
    monkeypatch.setattr(predict_module, "KERNEL_MAX_WORK", high * 9)
    again = _predict_with(setting, "compiled", monkeypatch)
    assert again.to_dict() == reference.to_dict()
    _same_report(again, reference, tol=0.0)


@needs_numba
def test_compiled_columns_stop_at_the_cap(monkeypatch):
    setting = oc.Setting(oc.parallel_shift([0.8, -0.6, 0.1]))
    monkeypatch.setattr(predict_module, "phase_cap",
                        lambda cap, auto, log, phase, *rest: 50 if phase == "fine-tuning" else cap)
    with pytest.raises(oc.ComputationError, match="fine-tuning did not meet.*max_steps = 50"):
        _predict_with(setting, "compiled", monkeypatch)


@needs_numba
def test_vectorised_exp_is_within_one_ulp():
    from oodcalc.finetune import _kernels
    x = -np.concatenate([np.linspace(0, 745, 200_001), np.random.default_rng(0).
                         uniform(0, 40, 100_000), [0.0, 1e-300, 708.0]])
    ours = np.array([_kernels.exp_neg(v) for v in x[::37]])
    exact = np.array([math.exp(v) for v in x[::37]])
    normal = exact > 1e-307
    ulps = np.abs(ours - exact)[normal] / np.spacing(exact[normal])
    assert ulps.max() <= 1.0
    assert (ours[~normal] < 1e-300).all()                      # the floor: "counts as 0"
    # the check can fail: 2 ulps off is caught
    assert (np.abs(ours * (1 + 4.5e-16) - exact)[normal] / np.spacing(exact[normal])).max() > 1.0


@needs_numba
def test_the_margin_step_has_no_scalar_conversion():
    """exp_neg's 2^k once went float → int64 → float (math.floor gives an int64 in Numba):
    AVX2 has no packed instruction for it, so LLVM split the margin step's vector lanes
    into scalar conversions and the exp cost 2.5 ns instead of 1.2. The compiled step must
    hold none (a structural check, not a timing)."""
    import numba

    from oodcalc.finetune import _kernels
    step = numba.njit(error_model="numpy")(_kernels._margins_step.py_func)   # not cached:
    step(np.zeros(64), np.empty(64), np.empty(64, dtype=np.bool_), 64, 64, 0.2, 0.01, 1.0,
         1.0)                                                        # its code can be read
    asm = "\n".join(step.inspect_asm().values())
    assert "vfmadd" in asm and "ymm" in asm                  # vectorised, fused
    assert "cvttsd2si" not in asm and "cvtsi2sd" not in asm


def test_observe_sees_every_step_without_changing_the_result():
    rng = np.random.default_rng(5)
    for z0 in rng.normal(size=(3, 1, 4, 4)):
        seen = []
        plain = descend(z0, 0.3, 0.02, 10**5, record=True)
        watched = descend(z0, 0.3, 0.02, 10**5,
                          observe=lambda t, z: seen.append((t, z.copy())))
        assert np.array_equal(plain.z, watched.z) and plain.steps == watched.steps
        assert [t for t, _ in seen] == list(range(int(plain.steps[0]) + 1))
        assert np.array_equal(np.stack([z for _, z in seen]), plain.trajectory)


def test_observe_cannot_change_the_descent():
    def meddle(t, z):
        z[...] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        descend(np.ones((1, 3, 3)), 0.1, 0.01, 10, observe=meddle)


def test_max_steps_auto_is_recorded_and_rerunnable():
    report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    data = report.to_dict()
    assert data["parameters"]["max_steps"] == "auto"
    assert data["run"]["max_steps"] == {"pretrain": 10**6, "finetune": 10**6}
    assert set(data["run"]["engine"]) == {"pretrain", "finetune"}
    again = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]),
                                  oc.Protocol(max_steps=data["parameters"]["max_steps"])))
    assert again.to_dict() == data
    explicit = oc.Protocol(max_steps=5000)
    assert explicit.describe()["max_steps"] == 5000 and not explicit.auto_steps
    with pytest.raises(oc.InputError, match='"auto"'):
        oc.Protocol(max_steps="often")


def test_auto_caps_follow_the_estimate():
    report = oc.predict(oc.Setting(oc.rotation(0.5, 512)))
    caps = report.run["max_steps"]
    assert caps["pretrain"] >= 2 * estimates.pretrain_steps(512, 0.01, 0.1) > 10**6
    assert report.pretrain.T1 <= caps["pretrain"] and report.finetune.T2 <= caps["finetune"]


def test_out_of_reach_finetuning_is_refused_before_pretraining(monkeypatch):
    """A fine-tuning past WORK_LIMIT logit updates fails before any step is taken (at
    K = 5000, pretraining alone took 4 minutes before the refusal came)."""
    setting = oc.Setting(oc.parallel_shift([0.9, -0.5, 0.3, -0.8]))
    report = oc.predict(setting)
    work = report.finetune.T2 * 16
    monkeypatch.setattr(limits, "WORK_LIMIT", work / 4)      # the refusal's own cap

    def no_descent(*args, **kwargs):
        raise AssertionError("pretraining ran before the refusal")
    monkeypatch.setattr(predict_module, "descend_ray", no_descent)
    with pytest.raises(oc.ComputationError, match="fine-tuning would need about .* logit "
                                                  "updates, more than"):
        oc.predict(setting)
    # Within the limit, the early check lets the run through (and refuses nothing).
    monkeypatch.undo()
    monkeypatch.setattr(limits, "WORK_LIMIT", work * 4)
    assert oc.predict(setting).to_dict() == report.to_dict()


def test_progress_is_told_each_phase_and_changes_nothing():
    calls = []
    setting = oc.Setting(oc.parallel_shift([0.9, -0.5, 0.3]))
    report = oc.predict(setting, progress=lambda *args: calls.append(args))
    assert report.to_dict() == oc.predict(setting).to_dict()
    phases = [c[0] for c in calls]
    assert phases[0] == "pretraining" and phases[-1] == "fine-tuning"
    assert calls[-1][1] == calls[-1][2] == report.finetune.T2
    assert ("pretraining", report.pretrain.T1, report.pretrain.T1) in calls


@needs_numba
@pytest.mark.parametrize("K", [3, 8])
def test_compiled_sweep_columns_match_the_numpy_engine(K):
    rng = np.random.default_rng(30 + K)
    z1 = ray_logits(K, 2.0, -2.0 / (K - 1))
    gammas = rng.uniform(-1, 1, size=(90, K)).round(2)
    gammas[:3] = 0.4                                           # two-valued columns too
    z0 = np.stack([ood_start(z1, np.diag(g)) for g in gammas])
    eta, eps = rng.choice([0.1, 0.7], 90), rng.choice([0.01, 0.04], 90)
    numpy_run = descend_columns(z0, eta, eps, 10**5)
    fast = descend_columns(z0, eta, eps, 10**5, compiled=True)
    assert np.array_equal(fast.steps, numpy_run.steps)
    np.testing.assert_allclose(fast.z, numpy_run.z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast.z, descend(z0, eta, eps, 10**5).z, rtol=0, atol=1e-12)
    # a configuration's bits do not depend on the batch (SIMD lane, tile, compaction)
    for b in (0, 5, 77):
        alone = descend_columns(z0[b:b + 1], eta[b:b + 1], eps[b:b + 1], 10**5, compiled=True)
        assert alone.steps[0] == fast.steps[b] and np.array_equal(alone.z[0], fast.z[b])


@needs_numba
def test_compiled_sweep_tiles_and_splits(monkeypatch):
    """More columns than a tile, and any chunking: the same bits; the same T2 and F_k
    (to rounding) as the NumPy sweep."""
    from oodcalc import sweep as sweep_module
    from oodcalc.finetune.dynamics import _CompiledColumns
    monkeypatch.setattr(_CompiledColumns, "TILE", 64)
    grid = sweep_module.gamma_rows(np.random.default_rng(4).uniform(-1, 1, (40, 5)))
    monkeypatch.setattr(compiled, "PAYS_FROM_WORK", 0.0)
    whole = sweep(grid)
    assert "compiled" in whole.meta["engine"]
    split = sweep(grid, chunk_size=7)
    for name in whole.columns:
        assert np.array_equal(whole[name], split[name]) or name == "seed", name
    monkeypatch.setattr(compiled, "PAYS_FROM_WORK", math.inf)
    reference = sweep(grid)
    assert reference.meta["engine"] == "NumPy"
    assert np.array_equal(reference["T2"], whole["T2"])
    for k in range(1, 6):
        np.testing.assert_allclose(whole[f"F_{k}"], reference[f"F_{k}"], rtol=0, atol=1e-12)


# --- the batch-innermost layout (model.matrices_first) gives the plain formulas' bits ---

def _plain_attention(z):
    shifted = z - z.max(axis=-2, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-2, keepdims=True)


def _plain_errors(z):
    residual = _plain_attention(z) - np.eye(z.shape[-1])
    return 0.5 * np.einsum("...nk,...nk->...k", residual, residual)


def _plain_first_step_terms(gamma, z):
    a = _plain_attention(z)
    K = a.shape[-1]
    a_k = np.diagonal(a, axis1=-2, axis2=-1)[..., None, :]
    sum_sq = np.einsum("...nk,...nk->...k", a, a)[..., None, :]
    shares, size = a * (a + a_k - sum_sq), a * (a + a_k + sum_sq)
    shares[..., np.arange(K), np.arange(K)] = 0.0
    size[..., np.arange(K), np.arange(K)] = 0.0
    cross = gamma[..., :, None] * gamma[..., None, :]
    square = gamma ** 2
    D = -np.einsum("...nk,...nk->...k", cross, shares) - (K - 1) * square * shares.sum(axis=-2)
    scale = (np.einsum("...nk,...nk->...k", np.abs(cross), size)
             + (K - 1) * square * size.sum(axis=-2))
    return D, scale


def _same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


@pytest.mark.parametrize("K", [2, 3, 5, 7, 8, 9])
@pytest.mark.parametrize("batch", [(), (1,), (6,), (3, 4)])
def test_small_k_layout_gives_the_plain_formulas_bits(K, batch):
    """Stacks of small K are computed batch-innermost; the results must be the plain
    (..., K, K) formulas' to the bit (every reduction adds the same terms in the same
    order), from logits of every scale and with signed zeros."""
    from oodcalc import model, theory
    rng = np.random.default_rng(K * 10 + len(batch))
    z = rng.normal(size=batch + (K, K)) * rng.choice([0.1, 3.0, 40.0], size=batch + (K, K))
    z.flat[::5] = -0.0
    gamma = rng.uniform(-1, 1, batch + (K,))
    kept = z.copy()
    assert _same_bits(model.attention(z), _plain_attention(z))
    assert _same_bits(model.conditional_errors(z), _plain_errors(z))
    assert _same_bits(model.errors_from_attention(_plain_attention(z)), _plain_errors(z))
    assert _same_bits(model.loss(z), _plain_errors(z).sum(axis=-1) / K)
    for got, want in zip(theory.first_step_terms(gamma, z), _plain_first_step_terms(gamma, z)):
        assert _same_bits(got, want)
    e = _plain_errors(z)
    assert _same_bits(model.feature_sum(e), e.sum(axis=-1))
    assert np.array_equal(model.features_last(model.features_first(e)), e)
    assert model.features_first(e).flags.c_contiguous and model.features_last(
        model.features_first(e)).flags.c_contiguous
    assert np.array_equal(z, kept, equal_nan=True)               # inputs untouched
