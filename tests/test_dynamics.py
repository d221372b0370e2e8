"""The exact K×K dynamics against plain GD on the full Q with explicit vectors."""

import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.finetune.dynamics import descend, require_converged
from oodcalc.model import attention, conditional_errors
from oodcalc.simulate import simulate_population

from conftest import random_orthonormal

AGREE = 1e-10  # both are float64 GD on the same loss; only rounding differs


def general_position(seed, d, K):
    rng = np.random.default_rng(seed)
    return oc.from_arrays(random_orthonormal(rng, d, K), random_orthonormal(rng, d, K))


@pytest.mark.parametrize("geometry, protocol", [
    (oc.parallel_shift([1, -0.9]), oc.Protocol()),
    (oc.parallel_shift([1, 0.5]), oc.Protocol(eta=0.3, eta_ft=0.05)),
    (oc.rotation(math.pi / 6, 4, d=8), oc.Protocol()),
    (oc.mean_query(4), oc.Protocol(eps=0.02)),
    (oc.orthogonal(3), oc.Protocol()),
    (oc.parallel_shift([0.3, -0.7, 0.9, 0.1]), oc.Protocol()),
    (general_position(1, 7, 3), oc.Protocol()),
    (general_position(2, 5, 2), oc.Protocol(eps=0.005, eta=0.5)),
])
def test_exact_dynamics_equal_full_q_gradient_descent(geometry, protocol):
    setting = oc.Setting(geometry, protocol)
    theory, sim = oc.predict(setting), simulate_population(setting)
    assert (theory.pretrain.T1, theory.finetune.T2) == (sim.pretrain.T1, sim.finetune.T2)
    for a, b in [(theory.pretrain.z, sim.pretrain.z), (theory.ood.z, sim.ood.z),
                 (theory.ood.error, sim.ood.error),
                 (theory.finetune.z_ood, sim.finetune.z_ood),
                 (theory.finetune.z_source, sim.finetune.z_source),
                 ([f.F_k for f in theory.forgetting], [f.F_k for f in sim.forgetting])]:
        np.testing.assert_allclose(a, b, rtol=0, atol=AGREE)
    np.testing.assert_allclose(theory.trajectories["finetune_source"].shape[0],
                               sim.trajectories["finetune_source_loss"].shape[0])


def test_batched_configurations_stop_on_their_own():
    rng = np.random.default_rng(7)
    z0 = rng.normal(scale=2.0, size=(6, 3, 3))
    eta = np.array([0.1, 0.2, 0.05, 0.1, 0.4, 0.1])
    eps = np.array([0.01, 0.02, 0.01, 0.005, 0.01, 0.3])
    batch = descend(z0, eta, eps, 10**6)
    assert len(set(batch.steps.tolist())) > 1
    for b in range(6):
        single = descend(z0[b:b + 1], eta[b], eps[b], 10**6)
        assert single.steps[0] == batch.steps[b]
        np.testing.assert_array_equal(single.z[0], batch.z[b])
        assert (conditional_errors(batch.z[b]) <= eps[b]).all()


def test_huge_logits_stay_finite():
    z0 = np.array([[[3000.0, -2500.0], [-4000.0, 1000.0]],     # already converged
                   [[-3000.0, 2000.0], [2500.0, -1500.0]]])    # saturated the wrong way
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        a = attention(z0)
        run = descend(z0, 0.1, 0.01, 50)
    assert np.isfinite(a).all() and np.isfinite(run.z).all()
    assert run.converged.tolist() == [True, False] and run.steps[0] == 0
    with pytest.raises(oc.ComputationError, match="max_steps = 50"):
        require_converged(run, "test", lambda b: f"configuration {b}")


def test_step_cap_names_the_parameters():
    setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(max_steps=10))
    with pytest.raises(oc.ComputationError) as err:
        oc.predict(setting)
    message = str(err.value)
    for fragment in ("pretraining", "max_steps = 10", "K = 2", "eps = 0.01", "eta = 0.1"):
        assert fragment in message


def test_same_inputs_same_outputs():
    setting = oc.Setting(oc.parallel_shift([1, -0.2]))
    assert oc.predict(setting).to_dict() == oc.predict(setting).to_dict()


@pytest.mark.parametrize("B", [1, 3])
def test_first_step_change_is_one_step_of_descend_and_leaves_its_inputs(B):
    """first_step_change takes descend's step (its arithmetic, to the bit) and carries it
    to the source; it must not move the OOD logits it was given (with one configuration
    the batch layout aliases them)."""
    from oodcalc.finetune.dynamics import first_step_change, ood_start, source_errors, source_logits
    rng = np.random.default_rng(B)
    z1 = rng.standard_normal((B, 3, 3))
    M = np.stack([np.diag(rng.uniform(-1, 1, 3)) for _ in range(B)])
    M[-1, 0, 1] = 0.4                                  # one non-diagonal M when B > 1
    z_ood0 = ood_start(z1, M)
    kept = z_ood0.copy()
    change = first_step_change(z1, M, 0.3, z_ood0=z_ood0)
    assert np.array_equal(z_ood0, kept)
    step = descend(z_ood0, 0.3, 0.0, 1).z
    expected = conditional_errors(source_logits(z1, M, z_ood0, step)) - conditional_errors(z1)
    assert np.array_equal(change, expected)
    assert np.array_equal(source_errors(z1, M, z_ood0, step),
                          conditional_errors(source_logits(z1, M, z_ood0, step)))
    assert np.any(change != 0.0)
    shared = np.broadcast_to(z1[0], z1.shape)          # one Z1 for every configuration
    start = ood_start(shared, M)
    assert np.array_equal(first_step_change(z1[0], M, 0.3, z_ood0=start),
                          first_step_change(shared, M, 0.3, z_ood0=start))
    assert np.array_equal(source_errors(z1[0], M, start, step),
                          conditional_errors(source_logits(z1[0], M, start, step)))
    # one start for every configuration (B = K = 3: a misaligned batch would still run)
    assert np.array_equal(source_errors(z1, M, z_ood0[0], step),
                          conditional_errors(source_logits(z1, M, z_ood0[0], step)))
    assert np.array_equal(first_step_change(z1, M, 0.3, z_ood0=z_ood0.astype(np.float32)),
                          first_step_change(z1, M, 0.3, z_ood0=z_ood0.astype(np.float32)
                                            .astype(np.float64)))
