"""Fine-tuning's own protocol: ``--ft-steps`` (exactly N steps, no stopping rule) and
``--eps-ft`` (its own ε), in predict, sweep, both simulators and the CLI, and the
forgetting curve."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import sweep as sw
from oodcalc.cli import main
from oodcalc.finetune.dynamics import descend, ood_start, source_logits
from oodcalc.errors import InputError
from oodcalc.model import conditional_errors
from oodcalc.prediction import pretrain_logits
from oodcalc.simulate import simulate_population


def plain_gd_source_losses(gamma, steps, eps=0.01, eta=0.1, eta_ft=0.1):
    """L_{v_k} after every one of ``steps`` fine-tuning steps: plain GD on the K×K OOD
    logits from the T1 logits, with no stopping rule, carried to the source (claim 7)."""
    K = len(gamma)
    z1 = pretrain_logits(K, eps, eta, 10**6).z[0]
    M = np.diag(gamma)
    z0 = ood_start(z1[None], M[None])
    run = descend(z0, eta_ft, -1.0, steps, record=True)
    source = source_logits(z1[None], M[None], z0, run.trajectory)
    return conditional_errors(source)[:, 0] / K


def test_predict_ft_steps_is_plain_gd_for_exactly_that_many_steps(capsys):
    assert main(["predict", "--gamma", "1,-0.9", "--ft-steps", "2000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finetune"]["T2"] == 2000 and out["parameters"]["ft_steps"] == 2000
    losses = plain_gd_source_losses([1.0, -0.9], 2000)
    F = float((losses[-1] - losses[0]).sum())
    assert abs(out["forgetting"]["F"] - F) < 1e-12
    curve = out["forgetting"]["curve"]
    assert curve["steps"][0] == 0 and curve["steps"][-1] == 2000
    assert len(curve["steps"]) <= 1000 and curve["F"][-1] == out["forgetting"]["F"]
    expected = (losses - losses[0]).sum(axis=1)[curve["steps"]]
    np.testing.assert_allclose(curve["F"], expected, rtol=0, atol=1e-12)
    # longer fine-tuning forgets more here (a source margin with γ_k(γ_k + γ_m) < 0 falls)
    assert out["forgetting"]["F"] > oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]))).F


@pytest.mark.parametrize("geometry", [oc.parallel_shift([0.3, -0.8, 0.9]), oc.rotation(0.5, 3),
                                      oc.mean_query(3)], ids=["shift", "rotation", "mean"])
def test_every_engine_and_the_full_Q_simulator_agree_on_fixed_steps(geometry):
    setting = oc.Setting(geometry, oc.Protocol(ft_steps=300))
    theory, simulated = oc.predict(setting), simulate_population(setting)
    assert theory.finetune.T2 == simulated.finetune.T2 == 300
    assert abs(theory.F - simulated.F) < 1e-12
    curve = theory.forgetting_curve()
    np.testing.assert_allclose(curve["F"][-1], theory.F, atol=1e-15)


def test_eps_ft_stops_fine_tuning_at_its_own_level():
    base = oc.Setting(oc.parallel_shift([1, -0.9]))
    finer = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps_ft=0.001))
    a, b = oc.predict(base), oc.predict(finer)
    assert a.pretrain.T1 == b.pretrain.T1 and b.finetune.T2 > a.finetune.T2
    assert b.finetune.error_ood.max() <= 0.001 < a.finetune.error_ood.max()
    assert abs(simulate_population(finer).F - b.F) < 1e-12


def test_sweep_rows_equal_predict_under_either_rule():
    gamma = [[1, -0.9], [1, -0.75], [0.3, 0.2]]
    for options in ({"ft_steps": 1500}, {"eps_ft": 0.002}):
        result = sw.sweep(sw.gamma_rows(gamma), **options)
        for i, g in enumerate(gamma):
            report = oc.predict(oc.Setting(oc.parallel_shift(g), oc.Protocol(**options)))
            assert result["T2"][i] == report.finetune.T2 and result["converged"][i]
            assert abs(result["F"][i] - report.F) < 1e-12
    assert (result["eps_ft"] == 0.002).all()


@pytest.mark.parametrize("kwargs, name", [({"ft_steps": 0}, "ft_steps"),
                                          ({"ft_steps": 2.5}, "ft_steps"),
                                          ({"ft_steps": 10, "eps_ft": 0.1}, "eps_ft"),
                                          ({"eps_ft": -1}, "eps_ft")])
def test_bad_fine_tuning_protocols_name_the_parameter(kwargs, name):
    with pytest.raises(InputError) as err:
        oc.Protocol(**kwargs)
    assert err.value.what == name


def test_cli_refuses_both_rules_in_one_line(capsys):
    assert main(["predict", "--gamma", "1,-0.9", "--ft-steps", "10", "--eps-ft", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oodcalc: error: --eps-ft") and len(err.strip().splitlines()) == 1
    assert main(["sweep", "--gamma", "1,-0.9", "--ft-steps", "0", "-o", "-"]) == 2
    assert "--ft-steps" in capsys.readouterr().err
