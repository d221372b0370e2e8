"""Overlapping features (Gram matrices not the identity): the exact engine against full-Q
gradient descent on the same vectors, the equal-overlap reduction, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import theory
from oodcalc.finetune import gram
from oodcalc.simulate import population

from cli_run import run


def full_q(geometry, protocol=None):
    """T1, T2 and the per-feature forgetting of full-Q GD on the geometry's own vectors
    (the population simulator's ``train`` and ``finetune``: no K × K reduction)."""
    p = protocol or oc.Protocol()
    V, U = geometry.V, geometry.U
    d = V.shape[0]
    Q1, T1 = population.train(np.zeros((d, d)), V, p.eta, p.eps, 10**6, "pretraining")
    _, T2, watched, _ = population.finetune(Q1, U, V, p)
    K = V.shape[1]
    return T1, T2, (watched[-1] - watched[0]) / K


def compare(geometry, protocol=None):
    setting = oc.Setting(geometry, protocol or oc.Protocol())
    report = oc.predict(setting)
    T1, T2, F = full_q(geometry, protocol)
    assert (report.pretrain.T1, report.finetune.T2) == (T1, T2)
    return max(abs(f.F_k - F[f.k - 1]) for f in report.forgetting), report


def random_unit_columns(rng, d, K):
    F = rng.standard_normal((d, K))
    return F / np.linalg.norm(F, axis=0)


@pytest.mark.parametrize("rho, g2", [(0.8, 0.5), (-0.5, -0.2), (0.5, -0.5)])
def test_predict_is_full_q_descent_on_overlapping_features(rho, g2):
    """The issue's cases: at ρ = 0.8, γ2 = +0.5 feature 2 is forgotten against the paper's
    verdict; at ρ = −0.5, γ2 = −0.2 it is not, though the rule says forgetting."""
    residual, report = compare(oc.overlap(rho, [1, g2]))
    assert residual <= 1e-12
    f2 = report.forgetting[1]
    if (rho, g2) != (0.5, -0.5):
        assert f2.theorem_holds is False and f2.D_k_agrees


def test_predict_is_full_q_descent_for_a_random_file_geometry_with_interventions():
    rng = np.random.default_rng(7)
    V, U = random_unit_columns(rng, 5, 3), random_unit_columns(rng, 5, 3)
    geometry = oc.from_arrays(V, U)
    assert not geometry.orthonormal
    for protocol in (oc.Protocol(eps=0.05), oc.Protocol(eps=0.05, replay=0.3),
                     oc.Protocol(eps=0.05, l2=0.01)):
        assert compare(geometry, protocol)[0] <= 1e-12


def test_a_mutated_ood_start_is_caught(monkeypatch):
    """Dropping G_V⁻¹ from the OOD logits at T1 (Q = V W Vᵀ, z_V = G_V W G_V) moves F."""
    geometry = oc.overlap(0.5, [1, 0.5])
    monkeypatch.setattr(gram, "ood_start", lambda z, G, M: M.T @ z @ M)
    with pytest.raises(AssertionError):
        assert compare(geometry)[0] <= 1e-9


def test_equal_overlaps_reduce_to_the_orthonormal_dynamics():
    """G = (1−ρ)I + ρ11ᵀ acts on the error directions as (1−ρ)I: pretraining is the
    orthonormal one at ε/(1−ρ), η(1−ρ)³ for every K (T1 identical, logits to round-off);
    the cube is needed (a square gives another T1)."""
    for K, rho in ((2, 0.8), (3, 0.5), (4, -0.2)):
        G = oc.overlap(rho, [1.0] * K).G_V
        c = 1 - rho
        assert theory.uniform_overlap(G) == pytest.approx(c, abs=1e-12)
        mine = gram.pretrain(G, 0.1, 0.01, 10**6)
        flat = gram.pretrain(np.eye(K), 0.1 * c**3, 0.01 / c, 10**6)
        assert mine.steps[0] == flat.steps[0]
        assert np.abs(mine.z - flat.z).max() <= 1e-9
        assert gram.pretrain(np.eye(K), 0.1 * c**2, 0.01 / c, 10**6).steps[0] != mine.steps[0]
        alpha = theory.gram_alpha_star(G, 0.01)
        assert alpha <= mine.z[0, 0, 0] <= alpha + 0.1      # past the threshold by < 1 step
    assert theory.uniform_overlap(oc.gram([[1, 0.3, 0], [0.3, 1, 0.2], [0, 0.2, 1]],
                                          [1, 1, 1]).G_V) is None


def test_orthonormal_files_take_the_orthonormal_path():
    """Orthonormal columns within the tolerance run today's engines (bit for bit today's
    numbers); the Gram path given G = I agrees to round-off."""
    shift = oc.parallel_shift([1, -0.9])
    geometry = oc.from_arrays(shift.V, shift.U)
    assert geometry.orthonormal and geometry.gamma.tolist() == [1.0, -0.9]
    today = oc.predict(oc.Setting(geometry))
    assert "Gram" not in today.run["engine"]["pretrain"]
    forced = oc.Geometry.of(shift.V, shift.U, "file", {}, orthonormal=False)
    gram_path = oc.predict(oc.Setting(forced))
    assert "Gram" in gram_path.run["engine"]["pretrain"]
    assert (gram_path.pretrain.T1, gram_path.finetune.T2) == (today.pretrain.T1,
                                                              today.finetune.T2)
    assert abs(gram_path.F - today.F) <= 1e-12


def test_cli_overlap_marks_the_paper_rule_wrong(capsys):
    code, out, err = run(capsys, "predict", "--overlap", "0.8", "--gamma", "1,0.5")
    assert code == 0 and err == ""
    assert "T1" in out and "10869" in out and "rising ✗" in out
    assert "with overlap it is wrong here" in out


def test_cli_overlap_takes_a_gram_matrix(capsys, tmp_path):
    """--overlap given the Gram matrix (inline rows or a file) is oc.gram: the same numbers
    as the Python API; equal overlaps given as a matrix are the --overlap ρ run."""
    G = [[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]]
    np.save(tmp_path / "G.npy", np.array(G, dtype=float))
    inline = run(capsys, "predict", "--json", "--overlap", "1,0.5,0;0.5,1,0;0,0,1",
                 "--gamma", "1,0.5,-0.5")
    from_file = run(capsys, "predict", "--json", "--overlap", tmp_path / "G.npy",
                    "--gamma", "1,0.5,-0.5")
    assert inline[0] == from_file[0] == 0
    shown = json.loads(inline[1])
    assert json.loads(from_file[1])["forgetting"] == shown["forgetting"]
    report = oc.predict(oc.Setting(oc.gram(G, [1, 0.5, -0.5])))
    assert shown["finetune"]["T2"] == report.finetune.T2
    assert [f["F_k"] for f in shown["forgetting"]["per_feature"]] == \
        [f.F_k for f in report.forgetting]
    as_matrix = json.loads(run(capsys, "predict", "--json", "--overlap", "1,0.8;0.8,1",
                               "--gamma", "1,0.5")[1])
    as_rho = json.loads(run(capsys, "predict", "--json", "--overlap", "0.8",
                            "--gamma", "1,0.5")[1])
    assert as_matrix["finetune"]["T2"] == as_rho["finetune"]["T2"]
    assert as_matrix["forgetting"]["F"] == pytest.approx(as_rho["forgetting"]["F"], abs=1e-15)


def test_random_guessing_reads_the_ood_gram(capsys):
    """Uniform attention on overlapping OOD features errs less: ½[1 − 2(G1)_k/K + 1ᵀG1/K²],
    (1 − ⟨u_1, u_2⟩)/4 at K = 2 (0.15 at ρ = 0.8, γ = (1, 0.5): ⟨u_1, u_2⟩ = 0.4)."""
    out = run(capsys, "predict", "--overlap", "0.8", "--gamma", "1,0.5")[1]
    assert "Random guessing (uniform attention 1/K) has e_k = 0.15;" in out
    G = oc.gram([[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]], [1, 0.5, -0.5]).G_U
    exact = population.errors_and_gradient(np.zeros((5, 5)), oc.gram(
        [[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]], [1, 0.5, -0.5]).U)[0]
    assert np.abs(theory.uniform_errors(G) - exact).max() <= 1e-15
    assert np.abs(theory.uniform_errors(np.eye(3)) - theory.uniform_error(3)).max() <= 1e-15


@pytest.mark.parametrize("argv, message", [
    (["--overlap", "0.8", "--theta", "0.3", "--K", "2"], "--overlap goes with --gamma"),
    (["--overlap", "1,0.5;0.5", "--gamma", "1,0.5"], "each with K numbers"),
    (["--overlap", "1,2;2,1", "--gamma", "1,0.5"], "positive definite"),
    (["--overlap", "1,0.5;0.5,1", "--gamma", "1,0.5,0"], "--overlap is 2 × 2"),
    (["--overlap", "missing.npy", "--gamma", "1,0.5"], "--overlap: got missing.npy"),
    (["--overlap", "1", "--gamma", "1,0.5"], "--overlap: got 1.0"),
    (["--overlap", "0.5", "--gamma", "1,2"], "--gamma value 2: got 2.0"),
    (["--overlap", "x", "--gamma", "1,0.5"], "--overlap"),
])
def test_cli_overlap_bad_input(capsys, argv, message):
    code, out, err = run(capsys, "predict", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_advise_on_overlapping_features(capsys):
    """advise runs every arm on the Gram engine: its plain arm is predict's run, and the
    per-feature replay threshold it finds keeps every F_k <= 0 (re-run through predict)."""
    code, out, err = run(capsys, "advise", "--overlap", "0.5", "--gamma", "1,-0.5",
                         "--eps", "0.05", "-f", "json")
    assert code == 0, err
    advice = json.loads(out)
    setting = oc.Setting(oc.overlap(0.5, [1, -0.5]), oc.Protocol(eps=0.05))
    report = oc.predict(setting)
    plain = next(a for a in advice["arms"] if a["name"] == "plain")
    assert plain["steps"] == report.finetune.T2 and plain["F"] == report.F
    lam = advice["thresholds"]["replay_each"]["value"]
    assert 0 < lam < 1
    replayed = oc.predict(oc.Setting(setting.geometry, oc.Protocol(eps=0.05, replay=lam)))
    assert max(f.F_k for f in replayed.forgetting) <= 1e-9


def _file_geometry_with_u1_in_span_of_V():
    rng = np.random.default_rng(3)
    V = random_unit_columns(rng, 6, 3)
    U = random_unit_columns(rng, 6, 3)
    U[:, 0] = V @ np.array([0.6, 0.3, -0.2])
    U[:, 0] /= np.linalg.norm(U[:, 0])
    return oc.from_arrays(V, U)


def test_a_feature_in_span_of_V_is_frozen_under_the_query_projection(monkeypatch):
    """u_1 ∈ span(V) from a file: UᵀPU's column 1 comes out ~1e-16, not 0; it is read as
    frozen (‖Pu_1‖² <= 1e-12), so the run reports the rule not reached because of u_1,
    instead of refusing a run that would never end."""
    from oodcalc.errors import ComputationError
    from oodcalc.finetune import terms
    geometry = _file_geometry_with_u1_in_span_of_V()
    A = geometry.G_U - geometry.M.T @ np.linalg.solve(geometry.G_V, geometry.M)
    assert 0 < np.abs(A[:, 0]).max() <= 1e-15          # round-off, not an exact zero
    setting = oc.Setting(geometry, oc.Protocol(eps=0.05, project="query"))
    report = oc.predict(setting)
    assert report.finetune.reached is False
    assert "leaves u1 no update (in span(V))" in report.warnings[0]
    assert report.F == 0.0
    monkeypatch.setattr(terms, "in_span_exactly", lambda A: A)     # the round-off kept
    with pytest.raises(ComputationError):
        oc.predict(setting)

# --- the overlap phase diagram over (ρ, γ2) (oodcalc/overlap_map.py) -----------------------

@pytest.fixture(scope="module")
def overlap_grid():
    """ρ ∈ [−0.8, 0.8] × γ2 ∈ [−1, 1] in steps of 0.1 (17 × 21 points; T1 up to 10,869)."""
    from oodcalc import overlap_map
    return overlap_map.compute(21, rho_max=0.8)


def _cell(m, rho, g2):
    return list(m.rho).index(rho), list(m.gamma2).index(g2)


@pytest.mark.parametrize("rho, g2", [(0.8, 0.5), (-0.5, -0.2), (-0.8, -1.0), (0.3, 0.9),
                                     (-0.1, 0.0), (0.8, 1.0)])
def test_every_map_point_is_predict_on_its_geometry(overlap_grid, rho, g2):
    """Batched pretraining (one per ρ) and fine-tuning (all points, sorted into batches):
    T1 and T2 identical to predict's, F_k within 1e-12 (to the bit here)."""
    m = overlap_grid
    i, j = _cell(m, rho, g2)
    report = oc.predict(oc.Setting(oc.overlap(rho, [1, g2])))
    assert (m.T1[i], m.T2[i, j]) == (report.pretrain.T1, report.finetune.T2)
    assert max(abs(m.F[i, j, k] - report.forgetting[k].F_k) for k in range(2)) <= 1e-12
    assert [m.C[i, j, k] for k in range(2)] == pytest.approx(
        [f.D_k for f in report.forgetting], rel=1e-12, abs=1e-18)
    assert m.converged[i, j]


def test_the_zero_overlap_row_is_the_orthonormal_k2_result(overlap_grid):
    """ρ = 0: every point equals predict on the parallel shift (the orthonormal engines):
    T2, F_k within 1e-12, the paper's verdict and the direction of D_k."""
    m = overlap_grid
    i = list(m.rho).index(0.0)
    for j, g2 in enumerate(m.gamma2):
        report = oc.predict(oc.Setting(oc.parallel_shift([1.0, g2])))
        assert m.T1[i] == report.pretrain.T1 and m.T2[i, j] == report.finetune.T2
        for k, f in enumerate(report.forgetting):
            assert abs(m.F[i, j, k] - f.F_k) <= 1e-12
            assert m.verdicts["paper"][i, j, k] == f.regime
            assert m.verdicts["C_sign"][i, j, k] == f.D_k_direction
    assert not m.disagrees("paper")[i].any()        # the theorem holds without overlap


def test_the_map_shows_both_counterexamples_and_only_feature_2_is_wrong(overlap_grid):
    m = overlap_grid
    i, j = _cell(m, 0.8, 0.5)        # forgotten against the paper's backward transfer
    assert m.F[i, j, 1] == pytest.approx(8.19e-4, abs=5e-7)   # predict --overlap 0.8 --gamma 1,0.5
    assert m.verdicts["paper"][i, j, 1] == "backward-transfer" and m.disagrees("paper")[i, j, 1]
    assert not m.disagrees("C_sign")[i, j, 1]
    i, j = _cell(m, -0.5, -0.2)      # the rule says forgetting; F_2 < 0
    assert m.F[i, j, 1] < 0 and m.verdicts["paper"][i, j, 1] == "forgetting"
    assert m.disagrees("paper")[i, j, 1] and not m.disagrees("C_sign")[i, j, 1]
    f2, f1 = m.fractions(2), m.fractions(1)
    assert f2["paper"] > f2["C_sign"] > 0               # first order: wrong near its boundary
    assert f1 == {"paper": 0.0, "C_sign": 0.0}
    assert not m.scored[:, -1].any() and m.scored[:, :-1].all()    # γ2 = 1: T2 = 0


def test_a_criterion_blind_to_the_overlap_changes_the_map(monkeypatch):
    """C_k with ρ dropped (G_V = G_U = I, M = diag(γ): the orthonormal first-order D_k)
    draws the paper's boundary again and gets more points wrong."""
    from oodcalc import overlap_map
    real = overlap_map.compute(11, rho_max=0.6)
    blind = theory.overlap_first_order

    def without_rho(z_V, G_V, z_U, G_U, M):
        I = np.broadcast_to(np.eye(2), G_V.shape)
        return blind(z_V, I, z_U, I, np.diagonal(M, axis1=-2, axis2=-1)[..., None, :] * I)
    monkeypatch.setattr(overlap_map.theory, "overlap_first_order", without_rho)
    mutated = overlap_map.compute(11, rho_max=0.6)
    assert (mutated.verdicts["C_sign"] != real.verdicts["C_sign"]).any()
    assert mutated.fractions(2)["C_sign"] > real.fractions(2)["C_sign"]
    assert np.array_equal(mutated.F, real.F)


def test_a_map_whose_fine_tuning_drops_g_u_is_no_longer_predict(monkeypatch):
    """Fine-tuning as if the OOD features were orthonormal (G_U = I) moves F_k."""
    from oodcalc import overlap_map
    report = oc.predict(oc.Setting(oc.overlap(0.6, [1, 0.6])))      # before the mutation
    recipe = overlap_map.terms.recipe
    monkeypatch.setattr(overlap_map.terms, "recipe", lambda p, M, zU, zV, GV, GU: recipe(
        p, M, zU, zV, GV, np.broadcast_to(np.eye(2), GU.shape)))
    m = overlap_map.compute(11, rho_max=0.6)
    i, j = _cell(m, 0.6, 0.6)
    assert abs(m.F[i, j, 1] - report.forgetting[1].F_k) > 1e-9


def test_cli_overlap_map_draws_and_prints_the_fractions(capsys, tmp_path):
    out = tmp_path / "overlap.png"
    code, stdout, err = run(capsys, "plot", "overlap-map", "--grid", "5", "--rho-max", "0.5",
                            "-o", str(out))
    assert code == 0 and err == ""
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "feature 2: the paper's rule contradicts the sign of F_2" in stdout


@pytest.mark.parametrize("argv, message", [
    (["--grid", "2"], "--grid: got '2'; expected an integer >= 3"),
    (["--grid", "402"], "--grid: got '402'; at most 401"),
    (["--rho-max", "1"], "--rho-max: got 1"),
    (["--rho-max", "-0.1"], "--rho-max: got -0.1"),
    (["--grid", "5", "--eps", "1"], "nothing to draw"),
])
def test_cli_overlap_map_bad_input(capsys, tmp_path, argv, message):
    out = tmp_path / "x.png"
    code, _, err = run(capsys, "plot", "overlap-map", *argv, "-o", str(out))
    assert code in (1, 2) and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_an_orthonormal_feature_in_span_of_V_is_frozen_too(monkeypatch):
    """The same round-off on the orthonormal path: u_1 = V r from a file gives
    (I − MᵀM)_11 ~ 7e-16; the query projection reports u_1 frozen instead of refusing."""
    from oodcalc.errors import ComputationError
    from oodcalc.finetune import terms
    rng = np.random.default_rng(4)
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    V = Q[:, :3]
    geometry = oc.from_arrays(V, np.column_stack([V @ R[:, 0], Q[:, 3], Q[:, 4]]))
    assert geometry.orthonormal
    assert 0 < abs(1 - geometry.M[:, 0] @ geometry.M[:, 0]) <= 1e-15
    setting = oc.Setting(geometry, oc.Protocol(eps=0.01, project="query"))
    report = oc.predict(setting)
    assert report.finetune.reached is False and report.F == 0.0
    assert "leaves u1 no update (in span(V))" in report.warnings[0]
    monkeypatch.setattr(terms, "in_span_exactly", lambda A: A)     # the round-off kept
    with pytest.raises(ComputationError):
        oc.predict(setting)
