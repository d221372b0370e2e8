"""The intervention arms (oodcalc.depth.arms, issue 31): each does what it claims on the
weights and the batches, the theory rung matches the finite-prompt simulator run with the
arm's theory counterpart at the same draws (whose expectation is the theory's step), plain
keeps its cache keys, the matched-loss endpoint, the design, and the CLI's one-line
refusals. Tests that train need torch (the nn extra) and skip without it."""

import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.depth import DepthConfig
from oodcalc.depth.arms import ARMS, Arm, parse
from oodcalc.errors import InputError


def needs_torch():
    return pytest.importorskip("torch", reason="the arms train torch models (nn extra)")


# --- without torch --------------------------------------------------------------------

def test_import_does_not_load_torch():
    import subprocess
    import sys
    code = ("import sys, oodcalc.depth.arms, oodcalc.depth.design, oodcalc.depth.arms_table, "
            "oodcalc.cli.reproduce_ladder; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plain_keeps_its_cache_keys_and_the_records():
    """No arm and the plain arm describe the same run as before the arms existed (no
    "arm" key), so today's cache entries and docs/depth.json's runs are read; any other
    arm is a new key."""
    from oodcalc.depth import documents, record
    plain = DepthConfig().run_parameters(3, -0.75)
    assert "arm" not in plain and DepthConfig(arm=Arm()).run_parameters(3, -0.75) == plain
    assert DepthConfig(arm=Arm("l2", 0.0)).run_parameters(3, -0.75)["arm"] == {
        "name": "l2", "mu": 0.0}
    _, runs = record.load(documents.RECORD)
    assert runs.records
    for (config, seed, gamma), run in runs.records.items():
        stored = run["parameters"]
        assert config.arm is None and set(config.run_parameters(seed, gamma)) == set(stored)
        assert {k: stored[k] for k in config.describe()} == config.describe()


def test_arm_names_and_values_are_checked():
    assert [a.name for a in parse("replay,l2:0.1,project-activations")] == [
        "plain", "replay", "l2", "project-activations"]
    assert parse("replay")[1].value == 0.25 and parse("replay:0.5")[1].value == 0.5
    assert set(ARMS) == {"plain", "replay", "l2", "reweight", "drop-negative", "project-input",
                         "project-activations", "project-qk", "project-value", "project-all"}
    for bad in ("bogus", "replay:1", "replay:0", "l2:-1", "l2:nan", "reweight:1",
                "project-activations:0", "drop-negative:1", "replay:x"):
        with pytest.raises(InputError):
            parse(bad)
    with pytest.raises(InputError, match="whole number"):
        DepthConfig(arm=Arm("replay", 0.3))               # 0.3 × 256 prompts


def test_each_arm_maps_to_its_theory_term():
    """The theory rung's counterpart of each arm (oodcalc.predict's Protocol fields)."""
    assert Arm().theory() == {} and Arm("project-value").theory() == {}
    assert Arm("replay", 0.5).theory() == {"replay": 0.5}
    assert Arm("l2", 0.2).theory() == {"l2": 0.2}
    assert Arm("reweight").theory() == {"weights": "cosine"}
    assert Arm("drop-negative").theory() == {"weights": "drop-negative"}
    assert Arm("drop-negative", 0.1).theory() is None         # no theory counterpart
    for name in ("project-input", "project-activations", "project-qk", "project-all"):
        assert Arm(name).theory() == {"project": "both"}


def test_matched_loss_reads_F_at_the_first_crossing():
    """F at level ℓ: the first step where L <= ℓ, linear in log L from the step before
    (hand-computed: between L = 0.4 and 0.1, ℓ = 0.2 lies half-way in log, so F is the
    mean of -0.02 and -0.04); never reached: None; the grid ℓ_s = L0^(1−s) ε^s."""
    from oodcalc.depth.arms_table import level, matched_F
    L = np.array([1.0, 0.4, 0.1, 0.3, 0.05])
    F = np.array([0.0, -0.02, -0.04, 0.5, 0.7])
    assert matched_F(L, F, 0.2) == pytest.approx(-0.03, abs=1e-15)
    assert matched_F(L, F, 0.4) == pytest.approx(-0.02, abs=1e-15)
    assert matched_F(L, F, 0.01) is None
    assert matched_F(L, F, 2.0) == 0.0
    assert level(1.0, 0.01, 0.5) == pytest.approx(0.1) and level(0.5, 0.01, 0.0) == 0.5


def test_design_is_fixed_and_the_test_works():
    from scipy import stats

    from oodcalc.depth.design import DESIGN, benjamini_hochberg, contrast_interval
    assert DESIGN.ladder_seeds == tuple(range(10)) and DESIGN.gammas == (-0.75, 0.0, 0.75)
    assert (DESIGN.real_seeds, DESIGN.real_folds) == (tuple(range(5)), 5)
    assert [a.name for a in DESIGN.arms] == list(ARMS)
    # 9 arms × 7 rung-depths × 3 γ × (1 + 3 matched levels) endpoints
    assert len(DESIGN.contrasts()) == 9 * 7 * 3 * 4
    x = [0.10, 0.20, 0.15, 0.12, 0.30]
    mean, low, high, p = contrast_interval(x)
    ref = stats.ttest_1samp(x, 0.0)
    assert p == pytest.approx(ref.pvalue, rel=1e-12)
    half = stats.t.ppf(0.975, 4) * np.std(x, ddof=1) / np.sqrt(5)
    assert (low, high) == pytest.approx((np.mean(x) - half, np.mean(x) + half), rel=1e-12)
    # BH at q = 0.05 over 4: 0.01 <= 0.0125 rejected; 0.03 > 0.025 and 0.04 > 0.0375 not
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.5]).tolist() == [True, False, False, False]
    assert benjamini_hochberg([0.01, 0.02, 0.03, 0.04]).all()           # step-up
    assert not benjamini_hochberg([np.nan, 0.5]).any()


@pytest.mark.parametrize("args, fragment", [
    (["--arms", "bogus"], "--arms: got 'bogus'; unknown arm 'bogus'"),
    (["--arms", "replay:2"], "--arms: got 'replay:2'; replay: expected a share λ"),
    (["--arms", "reweight:1"], "reweight takes no parameter"),
    (["--arms", "replay:0.3"], "--arms: got replay (share 0.3); replay: expected a share"),
])
@pytest.mark.parametrize("command", ["ladder", "depth"])
def test_reproduce_arms_bad_input_is_one_line(capsys, tmp_path, command, args, fragment):
    from oodcalc.cli import main
    assert main(["reproduce", command, "--cache-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("oodcalc: error:") and fragment in err


# --- with torch -----------------------------------------------------------------------

def _prompts(features, n=64, seed=0):
    import torch

    from oodcalc.depth.training import Design, Prompts
    gen = torch.Generator().manual_seed(seed)
    return Prompts.build(features, Design.draw(gen, n, 8, features.shape[1],
                                               features.shape[0]))


def _finetune(arm, model, V, U, steps=5, mutate=None):
    """A few SGD steps of the arm on U prompts (``mutate``: replaces Projection.apply)."""
    import torch

    from oodcalc.depth.arms import Intervention, weighted_loss
    from oodcalc.depth.training import reproducible_torch
    with reproducible_torch():              # one thread: the machine's cores are shared
        return _steps(arm, model, V, U, steps, mutate, Intervention, weighted_loss)


def _steps(arm, model, V, U, steps, mutate, Intervention, weighted_loss):
    import torch
    source = _prompts(V, seed=1)
    step = Intervention(arm, model, V, U, lambda: model(source.context, source.query))
    if mutate is not None:
        for projection in step.projections:
            projection.apply = mutate.__get__(projection)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for i in range(steps):
        batch = _prompts(U, seed=10 + i)
        loss = weighted_loss(model(batch.context, batch.query), batch.target,
                             step.sample_weights(batch.query[:, :-1]))
        opt.zero_grad()
        loss.backward()
        step.after_backward()
        opt.step()
    return step


def _features(gamma=-0.75, seed=0):
    import torch

    from oodcalc.depth.training import feature_sets, random_basis
    return feature_sets(random_basis(torch.Generator().manual_seed(seed), 15), gamma)


def test_project_input_leaves_the_weights_action_on_the_source_unchanged():
    """project-input: every projected weight W has (W − W₀)[v_k; 0] = 0 (< 1e-6) after
    fine-tuning, while the weights do move; projecting the wrong side (the output side:
    grad ← P grad) is caught."""
    torch = needs_torch()
    from oodcalc.depth.models import build
    V, U = _features()
    stream = torch.cat([V, torch.zeros(1, 2)])

    def moved(mutate=None):
        model = build("attention", 2, 16, 0)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        step = _finetune(Arm("project-input"), model, V, U, mutate=mutate)
        weights = {id(p.parameter) for p in step.projections}
        assert len(weights) == 8                          # q, k, v, o of both layers
        named = [(n, p) for n, p in model.named_parameters() if id(p) in weights]
        on_source = max(float(((p.detach() - before[n]) @ stream).abs().max())
                        for n, p in named)
        total = max(float((p.detach() - before[n]).abs().max()) for n, p in named)
        return on_source, total

    on_source, total = moved()
    assert on_source < 1e-6 and total > 1e-3

    def left(self):                                       # the output side instead
        g = self.parameter.grad
        g.copy_((self.right.to(g.dtype) @ g) if g.shape[0] == self.right.shape[0] else g)
    assert moved(left)[0] > 1e-3


def test_project_qk_and_value_touch_only_their_weights():
    torch = needs_torch()
    from oodcalc.depth.models import build
    V, U = _features()
    for name, roles in (("project-qk", {"q", "k"}), ("project-value", {"v", "o"})):
        model = build("attention", 1, 16, 0)
        step = _finetune(Arm(name), model, V, U, steps=1)
        names = {n.rsplit(".", 2)[-2] for n, p in model.named_parameters()
                 if any(p is q.parameter for q in step.projections)}
        assert names == roles, (name, names)
    theory = build("theory", 1, 16, 0)
    assert _finetune(Arm("project-value"), theory, V, U, steps=1).projections == []
    assert torch.count_nonzero(theory.Q) > 0             # trained, as plain


def test_project_activations_keeps_the_source_inputs_span():
    """Layer 1 of attention reads [x; y] with x in span V: its source inputs span exactly
    [v1; 0], [v2; 0] and the label slot [0; 1], the directions the projection removes."""
    torch = needs_torch()
    from oodcalc.depth.models import build
    V, U = _features()
    model = build("attention", 1, 16, 0)
    step = _finetune(Arm("project-activations", 0.999999), model, V, U, steps=1)
    k = next(p for p in step.projections if p.parameter is model.blocks[0].k.weight)
    basis = torch.cat([torch.cat([V, torch.zeros(1, 2)]), torch.eye(16)[:, -1:]], 1).double()
    expected = torch.eye(16, dtype=torch.float64) - basis @ basis.T
    assert torch.allclose(k.right, expected, atol=1e-6)


def test_replay_batch_and_sample_weights():
    """replay: the last round(λ·batch) prompts of plain's draw are built on V (tokens,
    queries and tasks as drawn); reweight and drop-negative give each target feature the
    theory's weight (oodcalc.finetune.query_weights)."""
    torch = needs_torch()
    from oodcalc.depth.arms import Intervention, replay_count
    from oodcalc.depth.training import Design, Prompts, mixed
    from oodcalc.finetune.terms import query_weights
    V, U = _features()
    m = replay_count(Arm("replay", 0.25), 256)
    assert m == 64
    design = Design.draw(torch.Generator().manual_seed(0), 256, 8, 2, 15)
    batch = mixed(U, V, design, m)
    plain = Prompts.build(U, design)
    on_v = Prompts.build(V, design)
    assert torch.equal(batch.context[:-m], plain.context[:-m])
    assert torch.equal(batch.context[-m:], on_v.context[-m:])
    assert torch.equal(batch.query[-m:], on_v.query[-m:])
    M = (V.T @ U).double().numpy()
    for name, rule in (("reweight", "cosine"), ("drop-negative", "drop-negative")):
        step = Intervention(Arm(name), torch.nn.Linear(1, 1), V, U)
        ours = step.sample_weights(U.T).numpy()
        theirs = query_weights(oc.Protocol(weights=rule), M)
        np.testing.assert_allclose(ours, theirs, atol=1e-6)
        assert step.covered().tolist() == (theirs > 0).tolist()
    assert theirs.tolist() == [1.0, 0.0]                  # γ = −0.75: u2 is dropped
    V0, U0 = _features(0.0)            # u2 ⟂ v̄: cos 0 up to float32 round-off
    for name, expected in (("reweight", [2.0, 0.0]), ("drop-negative", [1.0, 1.0])):
        step = Intervention(Arm(name), torch.nn.Linear(1, 1), V0, U0)
        assert step.sample_weights(U0.T).tolist() == expected, name


@pytest.mark.parametrize("arm, gamma", [
    (Arm("replay", 0.25), -0.75), (Arm("l2", 0.01), -0.75), (Arm("reweight"), 0.75),
    (Arm("drop-negative"), -0.75), (Arm("project-input"), 0.75), (Arm("project-value"), 0.75)])
def test_theory_rung_arm_is_the_simulator_with_the_theory_term(arm, gamma):
    """The torch arm on the theory rung, on the finite-prompt simulator's own draws, is
    the simulator run with the arm's theory counterpart: the same T1, T2, F and logits
    (float64); that simulator's step is the theory's in expectation (its own tests)."""
    needs_torch()
    from oodcalc.depth.ladder import theory_on_simulator_draws
    from oodcalc.simulate import simulate_prompts
    setting = oc.Setting(oc.parallel_shift([1, gamma]), oc.Protocol(eps=0.05, **arm.theory()))
    ref = simulate_prompts(setting, N=16, batch=128, seed=3)
    ours = theory_on_simulator_draws(setting, N=16, batch=128, seed=3, arm=arm)
    U = setting.geometry.U
    assert ours["converged"] and (ours["T1"], ours["T2"]) == (ref.pretrain.T1, ref.finetune.T2)
    assert ours["F"] == pytest.approx(ref.F, abs=1e-12)
    np.testing.assert_allclose(U.T @ ours["Q2"] @ U, ref.finetune.z_ood, atol=1e-10)
    plain = simulate_prompts(oc.Setting(setting.geometry, oc.Protocol(eps=0.05)), N=16,
                             batch=128, seed=3)
    if arm.name != "project-value":                       # the arm changed the run
        assert ref.finetune.T2 != plain.finetune.T2 or abs(ref.F - plain.F) > 1e-6


def test_l2_of_zero_is_plain_bit_for_bit_and_records_the_ood_curve():
    """l2 with μ = 0 adds μ(θ − θ₀) = 0 to every gradient: plain's numbers exactly; μ > 0
    changes them (30 fine-tuning steps: a strong pull may settle short of the rule).
    Every run records the OOD curve beside the source curve."""
    needs_torch()
    from oodcalc.depth.training import run_seed
    tiny = dict(arch="attention", eps=0.1, eval_prompts=128, curve_prompts=32, ft_steps=30)
    plain, zero, pull = (run_seed(DepthConfig(**tiny, arm=a), 0, [0.0])[0]
                         for a in (None, Arm("l2", 0.0), Arm("l2", 0.5)))
    for key in ("F", "F_k", "source_after"):
        assert plain[key] == zero[key]
    assert plain["finetune"]["source_curve"] == zero["finetune"]["source_curve"]
    assert plain["F"] != pull["F"]
    ft = plain["finetune"]
    assert len(ft["target_curve"]) == len(ft["source_curve"]) == ft["T2"] + 1
    # the arms reused plain's pretraining; trained afresh it gives the same record
    from oodcalc.depth import training
    training.PRETRAINED.clear()
    fresh = run_seed(DepthConfig(**tiny, arm=Arm("l2", 0.0)), 0, [0.0])[0]
    for record in (fresh, zero):
        for phase in ("pretrain", "finetune"):
            record[phase].pop("seconds")
    assert fresh == zero


def test_reproduce_depth_arms_end_to_end(tmp_path, capsys):
    """One seed, one γ, plain and replay through the CLI: the JSON has each arm beside its
    theory F and the paired contrast; a rerun reads the cache; the matched-loss figure."""
    needs_torch()
    from oodcalc.cli import main
    from oodcalc.depth.arms_table import arm_theory
    args = ["reproduce", "depth", "--arms", "replay", "--arch", "attention", "--optimizer",
            "sgd", "--layers", "1", "--seeds", "1", "--gamma", "0", "--eps", "0.1",
            "--eval-prompts", "256", "--cache-dir", str(tmp_path)]
    assert main([*args, "-f", "json", "-o", str(tmp_path / "arms.json")]) == 0
    rows = json.loads((tmp_path / "arms.json").read_text())["rows"]
    assert [r["arm"]["name"] for r in rows] == ["plain", "replay"]
    assert rows[1]["theory"] == {"F": arm_theory(Arm("replay", 0.25), 0.0, 0.1),
                                 "as": "replay=0.25"}
    assert rows[1]["versus_plain"]["mean"] == pytest.approx(rows[1]["F"]["mean"]
                                                           - rows[0]["F"]["mean"])
    assert len(rows[0]["matched"]) == 3
    # the per-seed values every interval is recomputed from
    for row in rows:
        per_seed = row["per_seed"]
        assert per_seed["seeds"] == [0] and len(per_seed["T2"]) == 1
        assert per_seed["F"][0] == pytest.approx(row["F"]["mean"])
        assert set(per_seed["matched"]) == {"0.25", "0.5", "0.75"}
    assert rows[1]["per_seed"]["F"][0] - rows[0]["per_seed"]["F"][0] == pytest.approx(
        rows[1]["versus_plain"]["mean"])
    # the closing table read back from the record: plain's F, replay's ΔF (one seed: no
    # interval, no mark), at the rule and at a matched level
    from oodcalc.depth.arms_table import contrast_grid
    record = json.loads((tmp_path / "arms.json").read_text())
    grid = contrast_grid(record, 0.0).splitlines()
    assert grid[0].startswith("| γ = +0.00, the stopping rule | ")
    assert grid[2].startswith("| plain | F ") and grid[3].startswith(
        f"| replay | {rows[1]['versus_plain']['mean']:+.3f} |")
    assert "*" not in grid[3] and "[" not in grid[3]
    assert "matched OOD loss s = 0.5" in contrast_grid(record, 0.0, matched=0.5)
    from oodcalc.depth.arms_table import arms_summary
    summary = arms_summary(record)
    assert summary.startswith("Design version 2 ") and "0 of 0 at the rule" in summary
    assert summary.count("| replay |") == 2          # at the rule and at matched loss
    capsys.readouterr()
    assert main([*args, "-f", "markdown"]) == 0
    out = capsys.readouterr()
    assert "| replay (share 0.25) | replay=0.25 |" in out.out and "training" not in out.err
