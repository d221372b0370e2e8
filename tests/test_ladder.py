"""The ladder (docs/depth.md, "The ladder"): the theory rung against the finite-prompt
simulator at the same draws, every rung's model, the table and the CLI. Tests that train
need torch (the nn extra) and skip without it."""

import json

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


# --- without torch --------------------------------------------------------------------

def test_import_does_not_load_torch():
    import subprocess
    import sys
    code = ("import sys, oodcalc.cli, oodcalc.depth.ladder, oodcalc.cli.reproduce_ladder; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_rungs_in_order_one_change_each():
    from oodcalc.depth.ladder import LADDER, RUNGS, below, ladder_configs
    assert RUNGS == ("theory", "readout", "factorised", "depth", "layernorm-mlp")
    rows = [(r.name, c.arch, c.layers) for r, c in ladder_configs()]
    assert rows == [("theory", "theory", 1), ("readout", "readout", 1),
                    ("factorised", "attention", 1), ("depth", "attention", 2),
                    ("depth", "attention", 3), ("layernorm-mlp", "standard", 2),
                    ("layernorm-mlp", "standard", 3)]
    assert [below(r, n) for r in LADDER for n in r.layers] == [
        None, ("theory", 1), ("readout", 1), ("factorised", 1), ("depth", 2), ("depth", 2),
        ("depth", 3)]


def test_alpha_beta_of_a_logit_matrix():
    from oodcalc.depth.ladder import alpha_beta
    assert alpha_beta([[1.0, -2.0], [-4.0, 3.0]]) == (2.0, -3.0)


def test_ladder_cache_wants_the_logits(tmp_path):
    """A record without the per-layer logits (what depth's own runs wrote before the ladder)
    is recomputed, not read; with one K × K matrix per layer it is read."""
    from fuzz_cases import depth_record
    from oodcalc.depth import DepthConfig
    from oodcalc.depth.ladder import LadderCache

    cache = LadderCache(tmp_path)
    parameters = DepthConfig(arch="attention", layers=2).run_parameters(0, 0.0)
    record = depth_record(parameters)
    cache.store(record)
    assert cache.load(parameters) is None and cache.rejected == 1
    z = [[1.0, -1.0], [-1.0, 1.0]]
    record["pretrain"]["logits"] = record["finetune"]["logits"] = [z]     # one layer of two
    cache.store(record)
    assert cache.load(parameters) is None and cache.rejected == 2
    record["pretrain"]["logits"] = record["finetune"]["logits"] = [z, z]
    cache.store(record)
    assert cache.load(parameters) == record


@pytest.mark.parametrize("args, fragment", [
    (["--seeds", "0"], "--seeds: got '0'; expected an integer >= 1"),
    (["--gamma", "2"], "--gamma: got '2'; each γ must lie in [-1, 1]"),
    (["--eps", "-1"], "--eps: got '-1'; expected a finite number > 0"),
    (["--workers", "x"], "--workers: got 'x'"),
    (["--eval-prompts", "7"], "--eval-prompts: got '7'; expected an even integer"),
    (["-o", "out.csv"], "a name ending in .md or .json"),
    (["-f", "table", "-o", "out.md"], "write a file with --format markdown or json"),
])
def test_reproduce_ladder_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    from oodcalc.cli import main
    assert main(["reproduce", "ladder", "--cache-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("oodcalc: error:") and fragment in err


# --- with torch -----------------------------------------------------------------------

def test_every_rung_starts_as_described():
    """theory: Q = 0 and ŷ = Σ a_i y_i with uniform attention; readout: Q = 0 and the same
    value and output matrices as the factorised rung at the same seed."""
    torch = needs_torch()
    from oodcalc.depth.models import build, feature_logits

    theory, readout, factorised = (build(a, 1, 16, 7) for a in ("theory", "readout",
                                                                "attention"))
    assert torch.count_nonzero(theory.Q) == 0 and torch.count_nonzero(readout.Q) == 0
    assert torch.equal(readout.v.weight, factorised.blocks[0].v.weight)
    assert torch.equal(readout.o.weight, factorised.blocks[0].o.weight)
    context = torch.randn(5, 4, 16)
    query = torch.cat([torch.randn(5, 15), torch.zeros(5, 1)], 1)
    assert torch.allclose(theory(context, query), context[..., -1].mean(-1))
    F = torch.linalg.qr(torch.randn(15, 2))[0]
    assert feature_logits(theory, F) == [[[0.0, 0.0], [0.0, 0.0]]]
    for arch, layers in (("attention", 3), ("standard", 2)):
        z = feature_logits(build(arch, layers, 16, 0), F)
        assert len(z) == layers and all(np.shape(m) == (2, 2) for m in z)


def test_theory_rung_has_the_theorys_signs_on_the_quick_protocol():
    """The quick run's theory rung (the same configuration and seeds, the other rungs not
    trained): the sign of mean F at γ = −0.75, 0, +0.75 is the sign of ``oodcalc predict
    --gamma=1,γ`` at the same ε."""
    needs_torch()
    from oodcalc.cli.reproduce_ladder import QUICK
    from oodcalc.depth import Cache, collect
    from oodcalc.depth.ladder import ladder_configs
    from oodcalc.depth.table import make_cell

    protocol = {k: v for k, v in QUICK.items() if k != "seeds"}
    rung, config = ladder_configs(**protocol)[0]
    assert rung.name == "theory"
    seeds, gammas = range(QUICK["seeds"]), [-0.75, 0.0, 0.75]
    results = collect([config], seeds, gammas, Cache(enabled=False))
    for gamma in gammas:
        cell = make_cell(results, config, seeds, gamma)
        predicted = oc.predict(oc.Setting(oc.parallel_shift([1, gamma]),
                                          oc.Protocol(eps=QUICK["eps"]))).F
        assert cell.F.n == QUICK["seeds"]
        assert np.sign(cell.F.mean) == np.sign(predicted) != 0, (gamma, cell.F, predicted)


def test_reproduce_ladder_end_to_end(tmp_path, capsys):
    """Every rung on a loose protocol (one seed, one γ), through the CLI: the JSON lists
    the rungs with F, F_k and α, β per layer; a rerun reads the cache."""
    needs_torch()
    from oodcalc.cli import main

    args = ["reproduce", "ladder", "--seeds", "1", "--gamma", "0", "--eps", "0.1",
            "--eval-prompts", "256", "--cache-dir", str(tmp_path)]
    assert main([*args, "-f", "json", "-o", str(tmp_path / "ladder.json")]) == 0
    data = json.loads((tmp_path / "ladder.json").read_text())
    assert [r["rung"] for r in data["rungs"]] == ["theory", "readout", "factorised", "depth",
                                                  "layernorm-mlp"]
    rows = data["rows"]
    assert [(r["rung"], r["layers"]) for r in rows] == [
        ("theory", 1), ("readout", 1), ("factorised", 1), ("depth", 2), ("depth", 3),
        ("layernorm-mlp", 2), ("layernorm-mlp", 3)]
    for row in rows:
        assert row["F"]["n"] == 1 and len(row["F_k"]) == 2
        assert row["F"]["mean"] == pytest.approx(sum(s["mean"] for s in row["F_k"]))
        assert len(row["layers_alpha_beta"]) == row["layers"]
        for layer in row["layers_alpha_beta"]:
            assert set(layer) == {"T1", "after"}
            assert all(isinstance(layer[t][w]["mean"], float) for t in layer
                       for w in ("alpha", "beta"))
    theory = rows[0]
    assert theory["below"] is None and rows[1]["below"]["rung"] == "theory"
    ab = theory["layers_alpha_beta"][0]["T1"]        # the theory's symmetric ray, β = −α
    assert ab["beta"]["mean"] == pytest.approx(-ab["alpha"]["mean"], rel=1e-6)
    assert theory["theory"]["F"] == oc.predict(oc.Setting(oc.parallel_shift([1, 0.0]),
                                                          oc.Protocol(eps=0.1))).F
    capsys.readouterr()
    assert main([*args, "-f", "markdown"]) == 0
    out = capsys.readouterr()
    assert "| theory | 1 | +0.00 |" in out.out and "training" not in out.err   # all cached
    assert main(args) == 0                                   # the terminal table
    out = capsys.readouterr().out
    assert "oodcalc reproduce ladder" in out and "layernorm-mlp, 3 L" in out
    assert "one more layer" in out and "L3: α" in out

    pytest.importorskip("matplotlib", reason="the plot needs the plot extra")
    png = tmp_path / "ladder.png"
    assert main(["plot", *args[1:], "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
