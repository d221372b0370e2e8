"""The simulators on overlapping (unit-norm, non-orthogonal) features: population GD on the
full Q equals predict's Gram engine with every intervention; balanced prompts have the
population errors; i.i.d. tokens carry the token-count bias ½tr(HΣ)/N; the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.errors import InputError
from oodcalc.finetune import gram
from oodcalc.model import errors_and_gradient
from oodcalc.simulate import population, simulate_population, simulate_prompts
from oodcalc.simulate import token_counts as tc
from oodcalc.simulate.prompts import (heldout_errors, sample_prompts, task_averaged_errors)

from cli_run import one_line, run


def unit_columns(seed, d, K):
    F = np.random.default_rng(seed).standard_normal((d, K))
    return F / np.linalg.norm(F, axis=0)


GEOMETRIES = {
    "overlap": lambda: oc.overlap(0.5, [1, 0.5]),
    "gram": lambda: oc.gram([[1, 0.3, 0], [0.3, 1, 0.2], [0, 0.2, 1]], [1, 0.6, -0.4]),
    "file": lambda: oc.from_arrays(unit_columns(5, 10, 3), unit_columns(6, 10, 3)),
}
PROTOCOLS = {
    "plain": {}, "replay": {"replay": 0.3}, "l2": {"l2": 0.01},
    "key": {"project": "key"}, "query": {"project": "query"}, "both": {"project": "both"},
    "cosine": {"weights": "cosine"}, "given": {"weights": "given"},
}


def setting_for(geometry_name, protocol_name):
    geometry = GEOMETRIES[geometry_name]()
    assert not geometry.orthonormal
    kw = dict(PROTOCOLS[protocol_name])
    if kw.get("weights") == "given":
        kw["weights"] = tuple([1.0, 0.5, 2.0][:geometry.K])
    return oc.Setting(geometry, oc.Protocol(eps=0.05, **kw))


def differences(setting):
    """Population GD on Q against predict: (T1, T2) of both, max |ΔF_k|, max |Δz_U(T2)|."""
    theory, simulated = oc.predict(setting), simulate_population(setting)
    steps = ((theory.pretrain.T1, theory.finetune.T2),
             (simulated.pretrain.T1, simulated.finetune.T2))
    dF = max(abs(a.F_k - b.F_k) for a, b in zip(theory.forgetting, simulated.forgetting))
    dz = np.abs(theory.finetune.z_ood - simulated.finetune.z_ood).max()
    return steps, dF, dz, theory


@pytest.mark.parametrize("protocol_name", list(PROTOCOLS))
@pytest.mark.parametrize("geometry_name", list(GEOMETRIES))
def test_population_gd_is_predict_on_overlapping_features(geometry_name, protocol_name):
    steps, dF, dz, _ = differences(setting_for(geometry_name, protocol_name))
    assert steps[0] == steps[1]
    assert dF <= 1e-12 and dz <= 1e-9


def test_the_orthonormal_projector_is_caught(monkeypatch):
    """``I − VVᵀ`` is no projector for overlapping V: with it the key-projected fine-tuning
    moves the source logits (F ≠ 0) and stops at another T2."""
    setting = setting_for("overlap", "key")
    monkeypatch.setattr(population, "off_span", lambda V: np.eye(V.shape[0]) - V @ V.T)
    steps, dF, _, theory = differences(setting)
    assert theory.F == 0 and dF > 1e-3 and steps[0] != steps[1]


def test_query_weights_read_off_the_vectors_are_the_recipe_s():
    """The cosine to v̄ from the vectors (‖Σv‖ = √(1ᵀG_V1)) and terms.query_weights agree.
    (Both named rules are blind to the normalisation, cosine being rescaled to mean 1 and
    drop-negative a sign; the cosines themselves are not: √K is wrong at ρ = 0.5.)"""
    from oodcalc.finetune import terms
    for name in GEOMETRIES:
        geometry = GEOMETRIES[name]()
        for rule in ("cosine", "drop-negative"):
            p = oc.Protocol(weights=rule)
            mine = population.query_weights(p, geometry.U, geometry.V)
            assert np.abs(mine - terms.query_weights(p, geometry.M, geometry.G_V)).max() < 1e-12
        cos = geometry.U.T @ geometry.V.sum(axis=1) / np.linalg.norm(geometry.V.sum(axis=1))
        assert np.abs(terms.centre_cosines(geometry.M, geometry.G_V) - cos).max() < 1e-12
    geometry = GEOMETRIES["overlap"]()
    assert np.abs(terms.centre_cosines(geometry.M) - terms.centre_cosines(
        geometry.M, geometry.G_V)).max() > 0.1


# --- balanced prompts --------------------------------------------------------------------

def pretrained_Q(geometry, eps=0.01):
    """A Q in R^{d×d} with the pretrained logits ``z_V`` (Q = V W Vᵀ, z_V = G_V W G_V)."""
    G, V = geometry.G_V, geometry.V
    z = gram.pretrain(G, 0.1, eps, 10**6).z[0]
    W = np.linalg.solve(G, np.linalg.solve(G, z).T).T
    return V @ W @ V.T, z


@pytest.mark.parametrize("name", ["overlap", "gram"])
def test_balanced_prompts_have_the_population_errors(name):
    geometry = GEOMETRIES[name]()
    Q, _ = pretrained_Q(geometry)
    K = geometry.K
    rng = np.random.default_rng(3)
    for F in (geometry.V, geometry.U):
        population_errors = population.errors_and_gradient(Q, F)[0]
        for N in (K, 2 * K, 7 * K):
            P = sample_prompts(F, N, 6 * K, rng, queries=np.arange(6 * K) % K, balanced=True)
            per_query = np.array([task_averaged_errors(Q, P)[P.q == k] for k in range(K)])
            assert np.abs(per_query - population_errors[:, None]).max() <= 1e-10
        iid = sample_prompts(F, 2 * K, 600, rng, queries=np.arange(600) % K)
        spread = task_averaged_errors(Q, iid)
        assert np.ptp(spread) > 1e-3          # i.i.d. counts: the errors scatter


def test_balanced_heldout_errors_average_the_task_only():
    """With balanced tokens the sampled held-out errors ½(ŷ − y)² scatter only with the
    task w: their mean is e_k within the sampling error (seed 4, 40,000 prompts)."""
    geometry = GEOMETRIES["overlap"]()
    Q, _ = pretrained_Q(geometry)
    F, n = geometry.V, 40_000
    P = sample_prompts(F, 4, n, np.random.default_rng(4), queries=np.arange(n) % 2,
                       balanced=True)
    e = population.errors_and_gradient(Q, F)[0]
    # ½r² with r ~ N(0, 2e_k): mean e_k, standard deviation √2 e_k
    assert np.abs(heldout_errors(Q, P, 2) - e).max() <= 4 * np.sqrt(2) * e.max() / np.sqrt(n / 2)


def test_balanced_needs_a_multiple_of_K():
    F = GEOMETRIES["gram"]().V
    with pytest.raises(InputError, match="multiple of 3"):
        sample_prompts(F, 4, 2, np.random.default_rng(0), balanced=True)
    with pytest.raises(InputError, match="multiple of 3"):
        simulate_prompts(oc.Setting(GEOMETRIES["gram"]()), N=4, balanced=True)


def test_simulate_prompts_balanced_on_overlap_runs_and_says_so():
    setting = setting_for("overlap", "plain")
    report = simulate_prompts(setting, N=4, batch=64, seed=1, balanced=True)
    assert "balanced" in report.source and report.parameters["simulator"]["balanced"]
    theory = oc.predict(setting)
    # the same stopping rule on population errors; stochastic steps move T1 by a few %
    assert abs(report.pretrain.T1 - theory.pretrain.T1) <= 0.1 * theory.pretrain.T1


# --- the token-count bias ----------------------------------------------------------------

def overlap_logits(rho=0.5, eps=0.01):
    G = oc.overlap(rho, [1.0, 0.5]).G_V
    return gram.pretrain(G, 0.1, eps, 10**6).z[0], G


def test_share_errors_and_hessian():
    for z, G in (overlap_logits(), (np.array([[0.7, -0.2, 0.1], [0.3, 0.9, -0.4],
                                              [-0.5, 0.2, 0.6]]),
                                    GEOMETRIES["gram"]().G_V)):
        K = len(z)
        p = np.full(K, 1 / K)
        assert np.abs(tc.share_errors(z, G, p) - errors_and_gradient(z, G)[0]).max() < 1e-15
        H, h = tc.share_hessian(z, G), 1e-4
        fd = np.empty_like(H)

        def e(s):
            return tc.share_errors(z, G, s)
        for i in range(K):
            for j in range(K):
                di, dj = np.eye(K)[i] * h, np.eye(K)[j] * h
                fd[:, i, j] = (e(p + di + dj) - e(p + di - dj) - e(p - di + dj)
                               + e(p - di - dj)) / (4 * h * h)
        assert np.abs(H - fd).max() < 1e-6


def test_enumeration_is_a_distribution():
    counts = tc.compositions(7, 3)
    assert len(counts) == 36 and (counts.sum(axis=1) == 7).all()
    assert len({tuple(c) for c in counts}) == 36
    assert tc.multinomial_probabilities(counts, 7).sum() == pytest.approx(1, abs=1e-13)


def test_n_times_the_exact_bias_tends_to_half_trace_h_sigma():
    """K = 2, ρ = 0.5 at the pretrained logits (ε = 0.01, η = 0.1): c = 0.05410
    (``python tools/token_count_bias.py``); N·bias − c shrinks as 1/N (the next order,
    N²(bias − c/N), settles), so c is the leading coefficient. c × 1.2 and c read
    without G (2c here: G acts as (1 − ρ) I on the error directions) fail."""
    z, G = overlap_logits()
    runs = {N: tc.token_count_bias(z, G, N) for N in (256, 1024, 4096)}
    c = runs[256].coefficient[0]
    assert c == pytest.approx(0.05410, abs=5e-6)
    assert np.ptp(runs[256].coefficient) < 1e-15            # symmetric features
    gaps = {N: N * (r.exact[0] - r.leading[0]) * N for N, r in runs.items()}
    assert gaps[4096] == pytest.approx(gaps[1024], rel=0.01)
    assert gaps[1024] == pytest.approx(gaps[256], rel=0.05)
    assert abs(4096 * runs[4096].exact[0] - c) < 1e-4
    for wrong in (1.2 * c, tc.bias_coefficient(z, None)[0]):
        assert abs(4096 * runs[4096].exact[0] - wrong) > 1e-2


def test_the_leading_term_for_three_overlapping_features():
    z = np.array([[0.7, -0.2, 0.1], [0.3, 0.9, -0.4], [-0.5, 0.2, 0.6]])
    G = GEOMETRIES["gram"]().G_V
    runs = [tc.token_count_bias(z, G, N) for N in (100, 200)]
    c = runs[0].coefficient
    for r in runs:
        assert np.abs(r.N * r.exact - c).max() < 3 / r.N     # within O(1/N)
    gaps = [r.N**2 * (r.exact - r.leading) for r in runs]
    assert np.abs(gaps[1] - gaps[0]).max() < 0.02 * np.abs(gaps[1]).max()
    assert np.abs(200 * runs[1].exact - tc.bias_coefficient(z, None)).max() > 0.01


def test_sampled_prompts_show_the_exact_bias():
    """The prompt simulator's sampler at N = 8 (K = 2, ρ = 0.5, seed 5, 100,000 prompts):
    the mean task-averaged error minus e_k is the enumerated bias within 4 standard
    errors; the bias read without G lies outside."""
    geometry = oc.overlap(0.5, [1.0, 0.5])
    Q, z = pretrained_Q(geometry)
    n, N = 100_000, 8
    P = sample_prompts(geometry.V, N, n, np.random.default_rng(5), queries=np.arange(n) % 2)
    x = task_averaged_errors(Q, P)
    measured = x.mean() - errors_and_gradient(z, geometry.G_V)[0].mean()
    se = x.std() / np.sqrt(n)
    exact = tc.token_count_bias(z, geometry.G_V, N).exact.mean()
    assert abs(measured - exact) < 4 * se
    assert abs(measured - tc.token_count_bias(z, None, N).exact.mean()) > 10 * se


def test_token_count_bias_refuses_bad_input():
    z, G = overlap_logits()
    for N in (0, 2.5, True):
        with pytest.raises(InputError, match="N: got"):
            tc.token_count_bias(z, G, N)
    with pytest.raises(InputError, match="count vectors"):
        tc.token_count_bias(np.zeros((6, 6)), None, 60)
    with pytest.raises(InputError, match="G: got"):
        tc.token_count_bias(z, np.eye(3), 4)


# --- the command line ---------------------------------------------------------------------

def test_cli_simulate_overlap_compares_with_the_gram_theory(capsys):
    code, out, err = run(capsys, "simulate", "--overlap", "0.5", "--gamma", "1,0.5", "--eps",
                         "0.05", "--project", "key", "--compare", "--json")
    assert code == 0, err
    data = json.loads(out)
    diffs = {d["field"]: d for d in data["differences"]}
    assert diffs["pretrain.T1"]["max_abs"] == 0 and diffs["finetune.T2"]["max_abs"] == 0
    assert diffs["forgetting.F"]["max_abs"] <= 1e-12
    assert data["parameters"]["geometry"]["kind"] == "overlap"


def test_cli_trajectory_table_reads_the_gram(capsys):
    """At Q = 0 the source loss is ½·½(1 − ρ) = 0.125 for ρ = 0.5 (orthonormal: 0.25),
    and at T1 the table's loss is the report's mean e_k."""
    code, out, err = run(capsys, "simulate", "--overlap", "0.5", "--gamma", "1,0.5",
                         "--eps", "0.05", "--rows", "2")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("pretrain")]
    assert rows[0][:2] == ["pretrain", "0"] and rows[0][-2:] == ["0.125", "0.125"]
    assert rows[-1][1] == "327" and rows[-1][-1] == "0.049967"


def test_cli_simulate_feature_files_with_overlap(capsys, tmp_path):
    V, U = unit_columns(1, 5, 2), unit_columns(2, 5, 2)
    np.save(tmp_path / "V.npy", V)
    np.save(tmp_path / "U.npy", U)
    code, out, err = run(capsys, "simulate", "--features", tmp_path / "V.npy", "--ood",
                         tmp_path / "U.npy", "--eps", "0.05", "--replay", "0.25",
                         "--compare", "--json")
    assert code == 0, err
    diffs = {d["field"]: d for d in json.loads(out)["differences"]}
    assert diffs["finetune.T2"]["max_abs"] == 0 and diffs["forgetting.F"]["max_abs"] <= 1e-12


def test_cli_prompts_balanced_on_overlap(capsys):
    code, out, err = run(capsys, "simulate", "--overlap", "0.5", "--gamma", "1,0.5", "-s",
                         "prompts", "--N", "4", "--batch", "64", "--balanced", "--eps",
                         "0.05", "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["simulator"]["balanced"] is True


@pytest.mark.parametrize("argv, message", [
    (["--overlap", "0.5", "--theta", "0.3", "--K", "2"], "--overlap goes with --gamma"),
    (["--overlap", "1", "--gamma", "1,0.5"], "--overlap: got 1.0"),
    (["--overlap", "0.5", "--gamma", "1,0.5", "--balanced"], "--balanced: got the flag"),
    (["--overlap", "0.5", "--gamma", "1,0.5", "-s", "prompts", "--N", "5", "--balanced"],
     "--N: got 5; balanced prompts"),
])
def test_cli_simulate_overlap_bad_input(capsys, argv, message):
    code, out, err = run(capsys, "simulate", *argv)
    assert code == 2 and message in one_line(err)


def test_cli_simulate_refuses_non_unit_columns(capsys, tmp_path):
    np.save(tmp_path / "V.npy", 2 * unit_columns(1, 5, 2))
    np.save(tmp_path / "U.npy", unit_columns(2, 5, 2))
    code, out, err = run(capsys, "simulate", "--features", tmp_path / "V.npy", "--ood",
                         tmp_path / "U.npy")
    assert code == 2 and "--features" in one_line(err)


def test_simulate_refuses_what_predict_refuses_on_overlap(capsys, monkeypatch):
    """ρ = 0.95 slows pretraining to T1 = 71,957 (Gram scale c = 0.05: the orthonormal
    steps at ε/c, ηc³): over --max-steps 10000 both refuse before any step (the
    orthonormal estimate, about 1,600 steps, let the simulator run into its cap)."""
    def no_steps(*a, **k):
        raise AssertionError("a simulator started")
    from oodcalc.simulate import prompts
    monkeypatch.setattr(population, "train", no_steps)
    monkeypatch.setattr(prompts, "train_on_prompts", no_steps)
    argv = ["--overlap", "0.95", "--gamma", "1,0.5", "--max-steps", "10000"]
    lines = []
    for command in (["predict"], ["simulate"], ["simulate", "-s", "prompts"]):
        code, out, err = run(capsys, *command, *argv)
        lines.append(one_line(err))
        assert code == 1 and "about 71,957 steps" in lines[-1]
    assert len(set(lines)) == 1
