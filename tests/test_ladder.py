"""The ladder (docs/depth.md, "The ladder"): the theory rung against the finite-prompt
simulator at the same draws, every rung's model, the table and the CLI. Tests that train
need torch (the nn extra) and skip without it."""

import numpy as np
import pytest

import oodcalc as oc


def needs_torch():
    return pytest.importorskip("torch", reason="the ladder trains torch models (nn extra)")


@pytest.mark.parametrize("gamma", [-0.75, 0.75])
def test_theory_rung_is_the_prompts_simulator_at_the_same_draws(gamma):
    """Same T1, T2, F, F_k and Q (float64) as ``simulate_prompts`` at the same seed: the
    torch model and training loop consume the simulator's own batches."""
    needs_torch()
    from oodcalc.depth.ladder import theory_on_simulator_draws
    from oodcalc.simulate import simulate_prompts

    setting = oc.Setting(oc.parallel_shift([1, gamma]), oc.Protocol(eps=0.05))
    ref = simulate_prompts(setting, N=16, batch=128, seed=3)
    ours = theory_on_simulator_draws(setting, N=16, batch=128, seed=3)
    V, U = setting.geometry.V, setting.geometry.U
    assert ours["converged"]
    assert (ours["T1"], ours["T2"]) == (ref.pretrain.T1, ref.finetune.T2)
    assert ours["F"] == pytest.approx(ref.F, abs=1e-12)
    np.testing.assert_allclose(ours["F_k"], [f.F_k for f in ref.forgetting], atol=1e-12)
    np.testing.assert_allclose(V.T @ ours["Q1"] @ V, ref.pretrain.z, atol=1e-10)
    np.testing.assert_allclose(U.T @ ours["Q2"] @ U, ref.finetune.z_ood, atol=1e-10)
    assert abs(ref.F) > 1e-4                           # not a comparison of two zeros
