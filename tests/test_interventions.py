"""Fine-tuning interventions: the terms engine (K×K, both logits) against full-Q GD doing
each intervention on Q itself, the exact consequences of the (z_U, z_V) system, and
perturbed terms that must be caught."""

from __future__ import annotations

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.finetune import engine, terms
from oodcalc.finetune.dynamics import descend, ood_start
from oodcalc.errors import InputError
from oodcalc.prediction import pretrain_logits
from oodcalc.simulate import simulate_population

from cli_run import one_line, run


def _random_geometry(K: int, d: int, seed: int) -> oc.Geometry:
    """Orthonormal V and U in general position (M full, not diagonal)."""
    rng = np.random.default_rng(seed)
    V = np.linalg.qr(rng.standard_normal((d, K)))[0]
    U = np.linalg.qr(rng.standard_normal((d, K)))[0]
    return oc.from_arrays(V, U)


GEOMETRIES = {
    "shift K=2": oc.parallel_shift([1, -0.9]),
    "shift K=3": oc.parallel_shift([0.8, -0.5, 0.3]),
    "random K=3": _random_geometry(3, 7, seed=0),
}
RECIPES = [dict(replay=0.5), dict(project="key"), dict(project="query"),
           dict(project="both"), dict(l2=0.01), dict(weights="cosine"),
           dict(weights="drop-negative"), dict(replay=0.3, l2=0.01, project="key"),
           dict(project="both", ft_steps=40)]


def _both(geometry, **recipe):
    setting = oc.Setting(geometry, oc.Protocol(**recipe))
    return oc.predict(setting), simulate_population(setting)


@pytest.mark.parametrize("name", GEOMETRIES)
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
def test_the_engine_is_full_q_gradient_descent(name, recipe):
    assert _agree(*_both(GEOMETRIES[name], **recipe))


def _agree(theory, simulated) -> bool:
    """T1 and T2 identical, F and every F_k to 1e-12, the final logits to 1e-9."""
    return bool(theory.pretrain.T1 == simulated.pretrain.T1
            and theory.finetune.T2 == simulated.finetune.T2
            and abs(theory.F - simulated.F) <= 1e-12
            and all(abs(a.F_k - b.F_k) <= 1e-12
                    for a, b in zip(theory.forgetting, simulated.forgetting))
            and np.abs(theory.finetune.z_source - simulated.finetune.z_source).max() <= 1e-9
            and np.abs(theory.finetune.z_ood - simulated.finetune.z_ood).max() <= 1e-9)


@pytest.mark.parametrize("name", GEOMETRIES)
@pytest.mark.parametrize("side", ["key", "query", "both"])
def test_any_projection_leaves_the_source_exactly_where_it_was(name, side):
    report = oc.predict(oc.Setting(GEOMETRIES[name], oc.Protocol(project=side, ft_steps=200)))
    assert report.F == 0.0
    assert np.array_equal(report.finetune.z_source, report.pretrain.z)


@pytest.mark.parametrize("side, power", [("key", 1), ("query", 1), ("both", 2)])
def test_under_a_rotation_projection_is_plain_fine_tuning_with_a_smaller_step(side, power):
    """M = γI: A = (1 − γ²)I, so the projected step is the plain one times (1 − γ²)^p."""
    K, gamma, eta = 3, 0.6, 0.1
    geometry = oc.parallel_shift([gamma] * K)
    z1 = pretrain_logits(K, 0.01, 0.1, 10**6).z[0]
    M = geometry.M
    z_U = ood_start(z1, M)
    recipe = terms.recipe(oc.Protocol(project=side), M, z_U, z1)
    projected = engine.finetune(z_U[None], z1[None], recipe, eta, 0.01, 10**6)
    plain = descend(z_U[None], eta * (1 - gamma**2) ** power, 0.01, 10**6)
    assert projected.steps[0] == plain.steps[0]
    assert np.abs(projected.z_U - plain.z).max() <= 1e-10


def test_a_dropped_feature_keeps_its_column_and_its_source_loss():
    geometry = oc.parallel_shift([0.9, -0.4, 0.5])
    report = oc.predict(oc.Setting(geometry, oc.Protocol(weights=[1, 0, 1])))
    assert np.array_equal(report.finetune.z_ood[:, 1], report.ood.z[:, 1])
    assert np.array_equal(report.finetune.z_source[:, 1], report.pretrain.z[:, 1])
    assert report.forgetting[1].F_k == 0.0


def test_a_rule_no_step_can_meet_is_reported_not_reached():
    """γ_1 = 1: u_1 ∈ span(V), the query-side projection never updates its column."""
    report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(project="both")))
    assert report.finetune.reached is False and report.F == 0.0
    assert any("u1 no update" in w for w in report.warnings)
    pulled = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(l2=0.1)))
    assert pulled.finetune.reached is False
    assert any("settled" in w for w in pulled.warnings)


# --- perturbed terms: each must break the agreement with full-Q GD ---------------------

class _NoTranspose(terms.Replay):
    def add(self, z_U, z_V, g_U, g_V, dU, dV):            # M g M instead of Mᵀ g M
        g = self.share * g_V
        dU += self.M @ g @ self.M
        dV += g


class _FlippedPull(terms.Pull):
    def add(self, z_U, z_V, g_U, g_V, dU, dV):
        dU -= self.strength * (z_U - self.z_U1)
        dV += self.strength * (z_V - self.z_V1)


def _perturbed_recipe(original):
    def build(protocol, M, z_U1, z_V1):
        made = original(protocol, M, z_U1, z_V1)
        swapped = []
        for term in made.terms:
            if isinstance(term, terms.Replay):
                term = _NoTranspose(term.share, term.M)
            elif isinstance(term, terms.Pull):
                term = _FlippedPull(term.strength, term.z_U1, term.z_V1)
            elif isinstance(term, terms.Fit) and term.A_left is not None:
                wrong = np.eye(M.shape[0]) - M @ M.T       # M Mᵀ for Mᵀ M
                term = terms.Fit(term.scale, term.weights, wrong, term.A_right,
                                    term.B_left, term.B_right)
            elif isinstance(term, terms.Fit):
                term = terms.Fit(1.0, term.weights, term.A_left, term.A_right,
                                    term.B_left, term.B_right)   # (1 − λ) dropped
            swapped.append(term)
        return terms.Recipe(tuple(swapped), made.covered, made.weights, made.frozen)
    return build


@pytest.mark.parametrize("recipe", [dict(replay=0.5), dict(l2=0.01),
                                    dict(project="key", ft_steps=300)],
                         ids=["replay: M g M", "pull: sign", "key projection: M Mᵀ"])
def test_a_perturbed_term_is_caught(monkeypatch, recipe):
    geometry = GEOMETRIES["random K=3"]
    monkeypatch.setattr(terms, "recipe", _perturbed_recipe(terms.recipe))
    assert _agree(*_both(geometry, **recipe)) is False


def test_interventions_are_checked_and_named():
    for kwargs, name in [(dict(replay=1.0), "Protocol.replay"), (dict(l2=-1), "Protocol.l2"),
                         (dict(project="side"), "Protocol.project"),
                         (dict(weights=[1, -1]), "Protocol.weights"),
                         (dict(weights="closest"), "Protocol.weights")]:
        with pytest.raises(InputError, match=name):
            oc.Protocol(**kwargs)
    with pytest.raises(InputError, match="one weight per feature"):
        oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(weights=[1, 1, 1]))
    with pytest.raises(InputError, match="negative cosine"):
        oc.predict(oc.Setting(oc.parallel_shift([-1, -0.9]),
                              oc.Protocol(weights="drop-negative")))


def test_plain_protocols_describe_themselves_as_before():
    assert "replay" not in oc.Protocol().describe()
    assert oc.Protocol(replay=0.25, weights="cosine").interventions == \
        {"replay": 0.25, "weights": "cosine"}


def test_predict_takes_the_interventions_on_the_command_line(capsys):
    import json
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--replay", "0.5", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["parameters"]["replay"] == 0.5 and report["finetune"]["reached"] is True
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--project", "both")
    assert code == 0 and "not reached" in out and "u1 no update" in err
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--replay", "1")
    assert code == 2 and err.startswith("oodcalc: error: --replay: ")
    code, _, err = run(capsys, "predict", "--gamma", "1,-0.9", "--weights", "1,2,3")
    assert code == 2 and "--weights" in err


def test_what_runs_plain_fine_tuning_only_refuses_interventions():
    from oodcalc.forgetting_rules import agreement
    with pytest.raises(InputError, match="plain fine-tuning only"):
        agreement(3, 2, 0, oc.Protocol(project="key"))


def test_simulate_does_the_interventions_on_q_on_the_command_line(capsys):
    import json
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "--replay", "0.5",
                       "--project", "key", "--json")
    assert code == 0
    simulated = json.loads(out)
    theory = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]),
                                   oc.Protocol(replay=0.5, project="key")))
    assert simulated["parameters"]["replay"] == 0.5
    assert simulated["finetune"]["T2"] == theory.finetune.T2
    assert abs(simulated["forgetting"]["F"] - theory.F) <= 1e-12
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "--l2", "0.01")
    assert code == 0 and "fine-tuning with" in out and "done on Q" in out
    # the finite-prompt simulator takes a whole number of each batch's prompts from V
    code, _, err = run(capsys, "simulate", "--gamma", "1,-0.9", "-s", "prompts",
                       "--batch", "100", "--replay", "0.333")
    assert code == 2 and one_line(err) == (
        "oodcalc: error: --replay: got 0.333; expected a share λ with λ × batch a whole "
        "number of prompts (batch = 100: λ = k/100)")


def test_finite_prompts_do_the_interventions_on_their_sampled_gradients():
    """Replay takes λ·batch prompts from V, the weights scale each U prompt's gradient by
    its query's c_k, projections act on the sampled gradient: over 5 seeds the forgetting
    agrees with the exact engine within 4 standard errors (finite N = 64's O(1/N) bias
    stays below them here), and any projection forgets nothing, sample by sample."""
    from oodcalc.simulate import simulate_prompts
    for recipe in (dict(replay=0.5), dict(weights="cosine")):
        setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(**recipe))
        F = np.array([simulate_prompts(setting, N=64, batch=512, seed=s).F for s in range(5)])
        theory = oc.predict(setting).F
        assert abs(F.mean() - theory) <= 4 * F.std(ddof=1) / np.sqrt(5), (recipe, F)
        plain = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]))).F
        assert abs(F.mean() - plain) > 10 * F.std(ddof=1) / np.sqrt(5)   # it did something
    for side in ("key", "query"):
        setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(project=side))
        assert abs(simulate_prompts(setting, N=16, batch=128, seed=0).F) <= 1e-15


@pytest.mark.parametrize("recipe", [dict(replay=0.3), dict(project="key", l2=0.01),
                                    dict(weights="drop-negative"), dict(project="query")],
                         ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
def test_sweep_runs_the_interventions_row_by_row_as_predict_does(recipe, tmp_path):
    from oodcalc.sweep import gamma_grid, read_result, sweep
    gammas = [-0.9, -0.2, 0.6]
    result = sweep(gamma_grid([1.0, np.array(gammas)]), interventions=recipe)
    for i, g2 in enumerate(gammas):
        report = oc.predict(oc.Setting(oc.parallel_shift([1, g2]), oc.Protocol(**recipe)))
        assert result["T2"][i] == report.finetune.T2
        assert abs(result["F"][i] - report.F) <= 1e-12
        assert bool(result["converged_finetune"][i]) == (report.finetune.reached is not False)
    assert all(k in result.columns for k in recipe) and "regime_1" not in result.columns
    assert result.meta["interventions"] == recipe
    path = tmp_path / "rows.npz"
    result.write(path)
    again = read_result(path)
    assert all(str(again[k][0]) == str(result[k][0]) for k in recipe)
    assert again.meta["interventions"] == recipe


def test_sweep_refuses_interventions_it_cannot_run():
    from oodcalc.sweep import gamma_grid, sweep
    grid = gamma_grid([1.0, np.array([-0.9])])
    with pytest.raises(InputError, match="expected 2 weights"):
        sweep(grid, interventions={"weights": (1, 2, 3)})
    with pytest.raises(InputError, match="Protocol fields among replay, l2, project"):
        sweep(grid, interventions={"ewc": 1})
    with pytest.raises(InputError, match="Protocol.replay"):
        sweep(grid, interventions={"replay": 1.5})
