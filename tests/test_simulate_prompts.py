"""Simulator (b): finite prompts, the actual softmax over N tokens, sampled squared error."""

import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.errors import ComputationError, InputError
from oodcalc.simulate import simulate_population, simulate_prompts
from oodcalc.simulate.prompts import (attention_weights, sample_prompts,
                                      sampled_loss_and_gradient)

from conftest import random_orthonormal

EXACT = 1e-10      # identities exact in real arithmetic, float64 rounding only
K_SIGMA = 3.0      # Monte Carlo: standard errors


def test_gradient_matches_finite_differences(rng):
    F = random_orthonormal(rng, 5, 3)
    P = sample_prompts(F, 6, 40, rng)
    Q = rng.normal(scale=0.7, size=(5, 5))
    _, grad, _ = sampled_loss_and_gradient(Q, P)
    h = 1e-6
    numeric = np.zeros_like(Q)
    for i in range(5):
        for j in range(5):
            E = np.zeros_like(Q)
            E[i, j] = h
            numeric[i, j] = (sampled_loss_and_gradient(Q + E, P)[0]
                             - sampled_loss_and_gradient(Q - E, P)[0]) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=0, atol=1e-8)


def test_softmax_is_over_tokens_and_order_free(rng):
    F = random_orthonormal(rng, 4, 2)
    P = sample_prompts(F, 7, 5, rng)
    Q = rng.normal(size=(4, 4))
    a = attention_weights(Q, P)
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-15)
    perm = rng.permutation(7)
    shuffled = oc.simulate.prompts.Prompts(P.X[:, perm], P.xq, P.y[:, perm], P.yq, P.q,
                                           P.tokens[:, perm])
    np.testing.assert_allclose(attention_weights(Q, shuffled), a[:, perm], atol=1e-15)
    # grouped by feature, the token softmax is the count-weighted softmax of z[:, q]
    z = F.T @ Q @ F
    for b in range(5):
        counts = np.bincount(P.tokens[b], minlength=2)
        w = counts * np.exp(z[:, P.q[b]])
        np.testing.assert_allclose(np.bincount(P.tokens[b], weights=a[b], minlength=2),
                                   w / w.sum(), atol=1e-14)


def test_sampled_loss_is_unbiased_over_w():
    """E_w[½(ŷ − wᵀx_q)²] = ½‖Σ a_i x_i − x_q‖² for fixed tokens: the seed mean of the
    sampled loss must sit within K_SIGMA standard errors of that exact value."""
    F = np.eye(3)
    rng = np.random.default_rng(5)
    Q = rng.normal(size=(3, 3))
    tokens_rng = np.random.default_rng(6)
    base = sample_prompts(F, 8, 500, tokens_rng)
    a = attention_weights(Q, base)
    exact = 0.5 * np.mean(np.sum((np.einsum("bn,bnd->bd", a, base.X) - base.xq) ** 2, axis=1))
    losses = []
    for seed in range(30):
        w = np.random.default_rng(seed).standard_normal((500, 3))
        P = oc.simulate.prompts.Prompts(base.X, base.xq, np.einsum("bnd,bd->bn", base.X, w),
                                        np.einsum("bd,bd->b", base.xq, w), base.q, base.tokens)
        losses.append(sampled_loss_and_gradient(Q, P)[0])
    se = np.std(losses, ddof=1) / math.sqrt(len(losses))
    assert abs(np.mean(losses) - exact) <= K_SIGMA * se


@pytest.mark.parametrize("resample", [True, False])
def test_conservation_and_projection_are_exact_at_finite_N(resample):
    setting = oc.Setting(oc.parallel_shift([1, -0.9]))
    r = simulate_prompts(setting, N=8, batch=128, resample=resample, seed=2)
    for name in ("pretrain", "finetune_ood"):
        col_sums = np.diff(r.trajectories[name], axis=0).sum(axis=-2)
        assert np.abs(col_sums).max() <= EXACT          # claim 2, every step
    gamma = setting.geometry.gamma
    z_ood, z_src = r.trajectories["finetune_ood"], r.trajectories["finetune_source"]
    predicted = z_src[0] + np.outer(gamma, gamma) * (z_ood - z_ood[0])
    assert np.abs(predicted - z_src).max() <= EXACT     # claim 7, every step


def test_orthogonal_ood_stays_exactly_zero():
    setting = oc.Setting(oc.orthogonal(3), oc.Protocol(eta=0.4))
    r = simulate_prompts(setting, N=6, batch=128, seed=1)
    assert np.abs(r.ood.z).max() <= EXACT
    np.testing.assert_allclose(r.ood.error, (3 - 1) / 6, atol=EXACT)


def test_seeded_and_same_schema_as_theory():
    setting = oc.Setting(oc.parallel_shift([1, 0.5]))
    a = simulate_prompts(setting, N=8, batch=64, seed=3)
    b = simulate_prompts(setting, N=8, batch=64, seed=3)
    c = simulate_prompts(setting, N=8, batch=64, seed=4)
    np.testing.assert_array_equal(a.finetune.z_ood, b.finetune.z_ood)
    assert not np.array_equal(a.finetune.z_ood, c.finetune.z_ood)
    sim, th = a.to_dict(), oc.predict(setting).to_dict()
    for phase in ("pretrain", "ood", "finetune", "forgetting"):
        assert set(sim[phase]) <= set(th[phase])
    assert sim["parameters"]["simulator"] == {"kind": "prompts", "N": 8, "batch": 64,
                                              "resample": True, "seed": 3,
                                              "stop": "population"}
    # the stopping rule holds on the population errors at T1 and T2
    assert (a.pretrain.error <= setting.protocol.eps).all()
    assert (a.finetune.error_ood <= setting.protocol.eps).all()


def test_heldout_stopping_rule():
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=0.02))
    r = simulate_prompts(setting, N=32, batch=256, seed=0, stop="heldout", holdout=2000)
    assert r.parameters["simulator"]["holdout"] == 2000
    # the held-out floor: a prompt without the query's feature costs >= ½ in expectation;
    # with K = 4 and N = 1 that is ½(3/4) > ε, so the rule cannot be met
    hopeless = oc.Setting(oc.orthogonal(4), oc.Protocol(eps=0.01, max_steps=700))
    with pytest.raises(ComputationError, match="held-out"):
        simulate_prompts(hopeless, N=1, batch=16, stop="heldout", holdout=400)


@pytest.mark.parametrize("kwargs", [{"N": 0}, {"batch": -1}, {"stop": "never"},
                                    {"N": 2.5}, {"holdout": 1}])
def test_bad_inputs(kwargs):
    with pytest.raises(InputError):
        simulate_prompts(oc.Setting(oc.parallel_shift([1, 0])), **kwargs)


def test_finite_prompts_approach_the_population_T1():
    """T1 of finite-prompt SGD differs from the population T1 by a bias that shrinks with
    N: |mean deviation| at N = 32 is below that at N = 8 by more than K_SIGMA combined SE."""
    setting = oc.Setting(oc.parallel_shift([1, -0.9]))
    T = simulate_population(setting).pretrain.T1
    dev = {N: [simulate_prompts(setting, N=N, batch=256, seed=s).pretrain.T1 - T
               for s in range(4)] for N in (8, 32)}
    m = {N: np.mean(v) for N, v in dev.items()}
    se = {N: np.std(v, ddof=1) / 2 for N, v in dev.items()}
    assert abs(m[8]) - abs(m[32]) > K_SIGMA * math.hypot(se[8], se[32])


def test_the_training_layout_is_the_prompts_own():
    """Sampled prompts hold their tokens in the training layout (X is a view: no copy);
    prompts built otherwise are read as they are now, also after a change in place."""
    F = oc.Setting(oc.parallel_shift([1, -0.9])).geometry.V
    P = sample_prompts(F, 8, 16, np.random.default_rng(0))
    assert np.shares_memory(P.X_last, P.X) and P.X_last.flags.c_contiguous
    Q = 0.3 * np.eye(F.shape[0])
    own = oc.simulate.prompts.Prompts(P.X.copy(), P.xq, P.y.copy(), P.yq, P.q, P.tokens)
    before = sampled_loss_and_gradient(Q, own)[0]
    own.y[:] = 0.0
    assert sampled_loss_and_gradient(Q, own)[0] == pytest.approx(0.5 * np.mean(P.yq ** 2))
    assert before != pytest.approx(0.5 * np.mean(P.yq ** 2))
