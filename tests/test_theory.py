"""Closed forms (oodcalc.theory) against the exact population dynamics."""

import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import paper, theory
from oodcalc.finetune.dynamics import ood_start
from oodcalc.model import conditional_errors
from oodcalc.prediction import pretrain_logits

from conftest import random_orthonormal


@pytest.mark.parametrize("K", [2, 3, 4, 8])
@pytest.mark.parametrize("eps", [0.1, 0.01, 1e-3])
def test_alpha_star_is_the_stopping_threshold(K, eps):
    a_star = theory.alpha_star(K, eps)
    # the closed form solves e_k = ε on the symmetric ray ...
    assert conditional_errors(theory.symmetric_logits(K, a_star)) == pytest.approx(eps, rel=1e-10)
    # ... and discrete GD crosses it between steps T1 − 1 and T1 (overshoot, not equality)
    run = pretrain_logits(K, eps, 0.1, 10**6, record=True)
    T1 = int(run.steps[0])
    alphas = np.diagonal(run.trajectory[:, 0], axis1=-2, axis2=-1)
    assert alphas[T1 - 1].max() < a_star <= alphas[T1].min()


def test_threshold_met_at_start_gives_T1_zero():
    K = 3
    eps = theory.uniform_error(K) * 1.01     # Q = 0 already has e_k below ε
    assert theory.alpha_star(K, eps) == 0.0
    assert pretrain_logits(K, eps, 0.1, 10).steps[0] == 0


@pytest.mark.parametrize("K", [2, 3, 5, 6])
def test_t1_logits_are_symmetric_with_beta_from_conservation(K):
    z1 = pretrain_logits(K, 0.01, 0.1, 10**6).z[0]
    alpha = z1[0, 0]
    np.testing.assert_allclose(z1, theory.symmetric_logits(K, alpha), atol=1e-12)
    assert theory.beta_from_alpha(K, alpha) == pytest.approx(z1[1, 0], abs=1e-12)


def test_q_at_t1_matches_the_full_q_simulator(rng):
    geometry = oc.from_arrays(random_orthonormal(rng, 6, 3), random_orthonormal(rng, 6, 3))
    from oodcalc.simulate.population import train
    Q1, T1 = train(np.zeros((6, 6)), geometry.V, 0.1, 0.01, 10**6, "pretraining")
    alpha = (geometry.V.T @ Q1 @ geometry.V)[0, 0]
    np.testing.assert_allclose(theory.q_at_t1(geometry.V, alpha), Q1, atol=1e-12)


@pytest.mark.parametrize("K, d", [(2, 3), (3, 7), (4, 8), (5, 12)])
def test_ood_weights_claim5_in_general_position(rng, K, d):
    V, U = random_orthonormal(rng, d, K), random_orthonormal(rng, d, K)
    M = V.T @ U
    z1 = pretrain_logits(K, 0.01, 0.1, 10**6).z[0]
    exact = ood_start(z1, M)          # U^T Q^(T1) U from the dynamics
    np.testing.assert_allclose(theory.ood_logits(M, z1[0, 0]), exact, atol=1e-12)
    # and directly from Q^(T1) with the explicit vectors
    np.testing.assert_allclose(U.T @ theory.q_at_t1(V, z1[0, 0]) @ U, exact, atol=1e-12)


@pytest.mark.parametrize("geometry, affected", [
    (oc.orthogonal(4), [0, 1, 2, 3]),
    (oc.mean_query(4), [0]),
    (oc.orthogonal(2, d=9), [0, 1]),
])
def test_corollary_cases_give_uniform_attention(geometry, affected):
    report = oc.predict(oc.Setting(geometry))
    K = geometry.K
    for k in range(K):
        assert (report.ood.corollary[k] is not None) == (k in affected)
    cols = report.ood.attention[:, affected]
    np.testing.assert_allclose(cols, 1.0 / K, atol=1e-15)
    np.testing.assert_allclose(report.ood.error[affected], theory.uniform_error(K), atol=1e-15)
    if K == 4:   # the paper prints these rows for K = 4, to 3 decimals (±5e-4)
        k = affected[0]
        for quantity, value in (("error", report.ood.error[k]),
                                ("attention", report.ood.attention[k, k])):
            printed = paper.figure(f"synthetic-k4-{geometry.kind}-{quantity}").value
            assert value == pytest.approx(printed, abs=5e-4)


def test_step_size_bound_is_min_over_pairs(rng):
    z = rng.normal(size=(4, 4))
    bounds = theory.step_size_bounds(z)
    for k in range(4):
        assert bounds[k] == pytest.approx(min(math.exp(-z[n, k]) for n in range(4) if n != k))


GAMMAS = [-1, -0.9, -0.5, -0.2, 0, 0.3, 0.5, 0.95, 1]


@pytest.mark.parametrize("g1", GAMMAS)
@pytest.mark.parametrize("g2", [-0.9, -0.2, 0, 0.5, 0.95])
def test_k2_regime_is_the_sign_of_exact_forgetting(g1, g2):
    report = oc.predict(oc.Setting(oc.parallel_shift([g1, g2])))
    for f in report.forgetting:
        if f.regime == "forgetting":
            assert f.F_k > 0 and f.trend == "rising" and f.theorem_holds
        elif f.regime == "backward-transfer":
            assert f.F_k < 0 and f.trend == "falling"
        else:
            assert f.regime == "unaffected" and abs(f.F_k) < 1e-15, f


def test_k3_band_is_reported_as_undetermined():
    # feature 1: products γ1γ2 = -0.9·... pick one product below −γ1² and one above
    regimes = theory.forgetting_regimes(np.array([0.5, -0.9, 0.1]))
    assert regimes[0].regime == "undetermined"
    assert regimes[0].m0 == 3 and regimes[0].m1 == 2
    assert "<=" in regimes[0].condition


def test_claim7_source_weights_follow_gamma_products():
    gamma = np.array([0.8, -0.6, 0.3])
    report = oc.predict(oc.Setting(oc.parallel_shift(gamma)))
    from oodcalc.simulate import simulate_population
    sim = simulate_population(oc.Setting(oc.parallel_shift(gamma)))
    change_ood = report.finetune.z_ood - report.ood.z
    expected = report.pretrain.z + np.outer(gamma, gamma) * change_ood
    np.testing.assert_allclose(sim.finetune.z_source, expected, atol=1e-10)


def test_conservation_along_exact_trajectories():
    report = oc.predict(oc.Setting(oc.parallel_shift([0.9, -0.4, 0.2])))
    for name in ("pretrain", "finetune_ood"):
        z = report.trajectories[name]
        change = z - z[0]
        np.testing.assert_allclose(change.sum(axis=-2), 0.0, atol=1e-12)


def test_k3_counterexample_to_the_forgetting_condition_is_flagged():
    # Finding (docs/guide/simulate-verify.md): for K > 2 the condition −γ_kγ_m0 > γ_k² is not sufficient.
    # Here feature 1 meets it (0.63 > 0.49) yet its loss falls at every step, in the exact
    # dynamics and in plain GD on the full Q alike.
    setting = oc.Setting(oc.parallel_shift([-0.7, 0.9, 0.95]))
    report = oc.predict(setting)
    first = report.forgetting[0]
    assert first.regime == "forgetting" and first.trend == "falling" and first.F_k < 0
    assert first.theorem_holds is False
    assert report.to_dict()["forgetting"]["per_feature"][0]["theorem_holds"] is False
    from oodcalc.simulate import simulate_population
    assert simulate_population(setting).forgetting[0].trend == "falling"


# --- claim 8, derived: the first-step criterion D_k ---------------------------------------

def t1_ood_logits(gamma, eps=0.01):
    gamma = np.asarray(gamma, dtype=float)
    K = gamma.shape[-1]
    z1 = pretrain_logits(K, eps, 0.1, 10**6).z[0]
    return ood_start(np.broadcast_to(z1, gamma.shape + (K,)), gamma[..., :, None] * np.eye(K))


@pytest.mark.parametrize("gamma", [[1, -0.9], [0.3, 0.8], [-0.6, -0.2], [0.95, -0.1]])
def test_D_for_two_features_is_the_papers_theorem(gamma):
    # K = 2: D_k = −Δγ_k(γ_k + γ_m), whose sign is the paper's exact K = 2 condition
    z = t1_ood_logits(gamma)
    shares, growth = theory.ood_shares(z)
    g = np.array(gamma)
    np.testing.assert_allclose(theory.first_step_D(g, z), -growth * g * (g + g[::-1]),
                               rtol=1e-12)
    expected = ["rising" if r.regime == "forgetting" else "falling"
                for r in theory.forgetting_regimes(g)]
    assert theory.initial_directions(g, z) == expected


def test_ood_shares_conserve_and_equal_the_models_gradient():
    rng = np.random.default_rng(4)
    z = rng.normal(size=(5, 4, 4))
    shares, growth = theory.ood_shares(z)
    from oodcalc.model import loss_gradient_from_attention
    from oodcalc.model import attention as attn
    grad = 4 * loss_gradient_from_attention(attn(z))        # ∂e_k/∂z = K ∂L/∂z
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(shares[:, off], grad[:, off], atol=1e-15)
    np.testing.assert_allclose(-growth, np.diagonal(grad, axis1=1, axis2=2), atol=1e-15)
    errors = conditional_errors(z)
    np.testing.assert_allclose(growth, 2 * np.diagonal(attn(z), axis1=1, axis2=2) * errors,
                               atol=1e-15)


@pytest.mark.parametrize("gamma, regime", [((-0.7, 0.9, 0.95), "forgetting"),
                                           ((0.5, -0.9, -0.9), "forgetting")])
def test_D_explains_the_counterexamples(gamma, regime):
    # the paper says v1 forgets; D_1 < 0 (its loss falls), and the corrected threshold
    # (K − 1)γ_1² is not met, so the corrected verdict does not claim a rise
    report = oc.predict(oc.Setting(oc.parallel_shift(gamma)))
    first = report.forgetting[0]
    assert first.regime == regime and first.D_k < 0 and first.initial_direction == "falling"
    assert first.trend == "falling"
    assert theory.corrected_regimes(np.array(gamma))[0].regime == "undetermined"


@pytest.mark.parametrize("g1, direction", [(0.4, "rising"), (0.45, "flat"), (0.5, "falling")])
def test_equal_other_gammas_threshold_is_K_minus_1(g1, direction):
    # γ = (g1, −0.9, −0.9): all Λ_n equal, D_1 ∝ −γ_1γ − (K−1)γ_1²; zero at g1 = 0.45
    gamma = np.array([g1, -0.9, -0.9])
    D, scale = theory.first_step_terms(gamma, t1_ood_logits(gamma))
    if direction == "flat":
        assert abs(D[0]) <= 1e-13 * scale[0]
    else:
        assert theory.initial_directions(gamma, t1_ood_logits(gamma))[0] == direction
        report = oc.predict(oc.Setting(oc.parallel_shift(gamma)))
        assert report.forgetting[0].trend == direction   # exact and monotone in this family


def test_flat_only_where_D_vanishes_relative_tolerance():
    z = t1_ood_logits([0.0, 0.7, -0.3])
    assert theory.initial_directions(np.array([0.0, 0.7, -0.3]), z)[0] == "flat"
    for gamma in ([0.5, -0.5], [1.0, -1.0], [-0.25, 0.25]):     # the K = 2 boundary
        assert theory.initial_directions(np.array(gamma), t1_ood_logits(gamma)) == ["flat"] * 2
    # tiny but nonzero: a relative rule still sees the sign (an absolute one would not)
    for gamma in ([1e-9, 0.7, -0.3], [0.5, -0.5 + 1e-9]):
        D, scale = theory.first_step_terms(np.array(gamma), t1_ood_logits(gamma))
        assert 0 < abs(D[0]) < 1e-9
        assert theory.initial_directions(np.array(gamma), t1_ood_logits(gamma))[0] != "flat"
    # and the rule really is relative: a D at the edge of the tolerance flips to flat
    D, scale = np.array([1.0, 1.0]), np.array([1.0, 1.0 / theory.FLAT_RTOL])
    assert theory.directions_from_D(D, scale).tolist() == ["rising", "flat"]


def test_initial_directions_batch_and_single_agree():
    rng = np.random.default_rng(6)
    gamma = rng.uniform(-1, 1, (20, 4))
    z = t1_ood_logits(gamma)
    batch = theory.initial_directions(gamma, z)
    assert batch.shape == (20, 4) and batch.dtype == object
    D = theory.first_step_D(gamma, z)
    for b in range(20):
        assert theory.initial_directions(gamma[b], z[b]) == batch[b].tolist()
        np.testing.assert_allclose(theory.first_step_D(gamma[b], z[b]), D[b], rtol=1e-14)


def test_corrected_regimes():
    # K = 2: K − 1 = 1, the same verdicts and conditions as the paper
    for gamma in ([1, -0.9], [-0.9, 1], [0.5, -0.5], [0, 0.3]):
        assert theory.corrected_regimes(gamma) == theory.forgetting_regimes(gamma)
    r = theory.corrected_regimes([0.4, -0.9, -0.9])[0]
    assert r.regime == "forgetting" and r.condition == "−γ1·γ2 = +0.36 > 2·γ1² = 0.32"
    r = theory.corrected_regimes([0.5, -0.9, -0.9])[0]
    assert r.regime == "undetermined" and "2·γ1² = 0.5" in r.condition
    assert theory.forgetting_regimes([0.5, -0.9, -0.9])[0].regime == "forgetting"


def test_corrected_forgetting_implies_an_initial_rise_under_H():
    rng = np.random.default_rng(8)
    for K in (3, 4, 6):
        gamma = rng.uniform(-1, 1, (3000, K))
        z = t1_ood_logits(gamma)
        rise = theory.regime_names(gamma, corrected=True) == "forgetting"
        H = theory.hypothesis_H(z)
        assert rise.any() and H.all()
        assert (theory.first_step_D(gamma, z)[rise] > 0).all()


def test_hypothesis_H_fails_where_another_feature_dominates_the_column():
    z = np.zeros((3, 3))
    z[2, 0] = 5.0                         # query u_1: tokens of u_3 take the attention
    shares, _ = theory.ood_shares(z)
    assert shares[1, 0] < 0 and not theory.hypothesis_H(z)[0] and theory.hypothesis_H(z)[1:].all()
