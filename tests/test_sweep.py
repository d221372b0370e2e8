"""Sweeps: batched results equal predict() row by row, whatever the split or executor;
files are written atomically; the CLI fails in one line."""

import concurrent.futures as cf
import csv
import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import sweep as sw
from oodcalc.cli import main
from oodcalc import theory
from oodcalc.theory import forgetting_regimes

AGREE = 1e-12  # the same float64 GD on the same logits; only summation order may differ


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_same(a: sw.SweepResult, b: sw.SweepResult):
    assert list(a.columns) == list(b.columns)
    for name in a.columns:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def assert_row_matches_predict(result, i, setting):
    report = oc.predict(setting)
    row = {name: values[i] for name, values in result.columns.items()}
    K = setting.K
    assert row["K"] == K and row["d"] == setting.geometry.d
    assert (row["T1"], row["T2"]) == (report.pretrain.T1, report.finetune.T2)
    assert row["converged"] and row["converged_pretrain"] and row["converged_finetune"]
    assert math.isclose(row["ood_loss"], report.ood.to_dict()["loss"], rel_tol=0, abs_tol=AGREE)
    assert math.isclose(row["F"], report.F, rel_tol=0, abs_tol=AGREE)
    for f in report.forgetting:
        assert math.isclose(row[f"F_{f.k}"], f.F_k, rel_tol=0, abs_tol=AGREE)
        assert row[f"regime_{f.k}"] == f.regime
        assert math.isclose(row[f"D_{f.k}"], f.D_k, rel_tol=1e-12, abs_tol=1e-15)
        assert row[f"D_direction_{f.k}"] == f.D_k_direction
        assert math.isclose(row[f"first_step_{f.k}"], f.first_step, rel_tol=1e-9,
                            abs_tol=1e-18)
        assert row[f"initial_direction_{f.k}"] == f.initial_direction
    p = setting.protocol
    assert (row["eps"], row["eta"], row["eta_ft"]) == (p.eps, p.eta, p.eta_ft)


def test_gamma_grid_rows_equal_predict():
    g1, g2 = [-1.0, -0.3, 0.0, 0.55, 1.0], [1.0, -0.9, 0.2]
    result = sw.sweep(sw.gamma_grid([g1, g2], eps=[0.01, 0.03], eta=0.1, eta_ft=[0.1, 0.25]))
    assert len(result) == 2 * 2 * 5 * 3 and result.shape == (2, 1, 2, 5, 3)
    F = result.grid("F")
    for i in [0, 7, 16, 23, 29, 31, 44, 59]:
        row = {name: values[i] for name, values in result.columns.items()}
        setting = oc.Setting(oc.parallel_shift([row["gamma_1"], row["gamma_2"]]),
                             oc.Protocol(eps=row["eps"], eta=row["eta"], eta_ft=row["eta_ft"]))
        assert_row_matches_predict(result, i, setting)
        e, a, f, j, k = np.unravel_index(i, result.shape)
        assert F[e, a, f, j, k] == row["F"] and row["gamma_1"] == g1[j]


def test_three_features_and_pretraining_groups_equal_predict():
    grid = sw.gamma_grid([[0.3, -0.8], 0.9, [-0.7, 0.1]], eps=[0.01, 0.02], eta=[0.1, 0.3])
    result = sw.sweep(grid)
    assert len(result) == 16 and set(result["T1"].tolist()) == {
        oc.predict(oc.Setting(oc.parallel_shift([1, 1, 1]), oc.Protocol(eps=e, eta=a))).pretrain.T1
        for e in (0.01, 0.02) for a in (0.1, 0.3)}
    for i in [0, 5, 10, 15]:
        row = {name: values[i] for name, values in result.columns.items()}
        gamma = [row[f"gamma_{k}"] for k in (1, 2, 3)]
        assert_row_matches_predict(result, i, oc.Setting(
            oc.parallel_shift(gamma), oc.Protocol(eps=row["eps"], eta=row["eta"])))


def test_theta_grids_of_several_K_equal_predict():
    thetas = [0.0, math.pi / 6, math.pi / 2, 2.5]
    result = sw.sweep([sw.theta_grid(thetas, 2), sw.theta_grid(thetas, 4, eta_ft=0.05)])
    assert result["K"].tolist() == [2] * 4 + [4] * 4
    assert np.isnan(result["F_3"][:4]).all() and (result["regime_4"][:4] == "").all()
    for i, (K, th) in enumerate([(K, th) for K in (2, 4) for th in thetas]):
        assert result["theta"][i] == th
        protocol = oc.Protocol(eta_ft=0.05) if K == 4 else oc.Protocol()
        assert_row_matches_predict(result, i, oc.Setting(oc.rotation(th, K), protocol))


def test_any_geometry_grid_equals_predict():
    geometries = [oc.mean_query(3), oc.orthogonal(3), oc.parallel_shift([0.2, -0.4, 1])]
    result = sw.sweep(sw.geometry_grid(geometries, eta=[0.1, 0.2]))
    assert "regime_1" not in result.columns  # not every geometry is a parallel shift
    assert "D_1" not in result.columns and "D_direction_1" not in result.columns
    for i in range(6):
        row = {name: values[i] for name, values in result.columns.items()}
        geometry = geometries[row["geometry_index"]]
        report = oc.predict(oc.Setting(geometry, oc.Protocol(eta=row["eta"])))
        assert (row["T1"], row["T2"]) == (report.pretrain.T1, report.finetune.T2)
        assert math.isclose(row["F"], report.F, abs_tol=AGREE)
        for f in report.forgetting:      # the exact first step exists for any geometry
            assert row[f"initial_direction_{f.k}"] == f.initial_direction
            assert math.isclose(row[f"first_step_{f.k}"], f.first_step, rel_tol=1e-9,
                                abs_tol=1e-18)


def test_gamma_rows_equal_the_product_grid_row_for_row():
    g = [[-1.0, 0.5, 0.9], [0.5, -0.5]]
    grid = sw.gamma_grid(g)
    rows = sw.gamma_rows(grid.gamma)
    assert rows.axes == () and len(rows) == len(grid)
    a, b = sw.sweep(grid), sw.sweep(rows)
    for name in b.columns:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # D's sign is flat on the K = 2 boundary γ_1 = −γ_2 = 0.5 and the sign of D elsewhere;
    # the exact first step's direction is the sign of first_step
    for i in range(len(b)):
        for k in (1, 2):
            D, direction = b[f"D_{k}"][i], b[f"D_direction_{k}"][i]
            assert direction == ("flat" if D == 0 else "rising" if D > 0 else "falling")
            step, exact = b[f"first_step_{k}"][i], b[f"initial_direction_{k}"][i]
            assert exact == ("flat" if abs(step) <= 1e-15 else
                             "rising" if step > 0 else "falling")
    assert b["D_direction_1"][3] == "flat" and b["D_1"][3] == 0.0   # γ = (0.5, −0.5)
    # K = 2: the source margin moves by δW·γ_k(γ_k + γ_m) at every order (claim 8a)
    assert b["initial_direction_1"][3] == "flat"


@pytest.mark.parametrize("bad, fragment", [
    ([[0.1, 1.5]], "outside"), ([[0.1]], "number of features"), ([], "rows"),
    ([["a", 0.1]], "gamma"), ([[0.1, float("nan")]], "outside"),
])
def test_gamma_rows_bad_input(bad, fragment):
    with pytest.raises(oc.InputError, match=fragment):
        sw.gamma_rows(bad)
    with pytest.raises(oc.InputError, match="eta_ft"):
        sw.gamma_rows([[0.1, 0.2]], eta_ft=0)


def test_vectorised_regimes_equal_the_theorem():
    rng = np.random.default_rng(3)
    edges = [0.0, 1.0, -1.0, 0.5, -0.5, 0.3]
    for K in (2, 3, 5):
        gamma = np.concatenate([rng.uniform(-1, 1, (200, K)),
                                rng.choice(edges, (200, K)),
                                np.repeat(np.array(edges)[:, None], K, axis=1)])
        fast = sw.regimes(gamma)
        corrected = theory.regime_names(gamma, corrected=True)
        for b in range(len(gamma)):
            assert fast[b].tolist() == [r.regime for r in forgetting_regimes(gamma[b])]
            assert corrected[b].tolist() == [r.regime for r in theory.corrected_regimes(gamma[b])]


@pytest.fixture(scope="module")
def phase_grid():
    g = np.linspace(-1, 1, 13)
    return sw.gamma_grid([g, g], eta_ft=[0.1, 0.4])


@pytest.fixture(scope="module")
def serial(phase_grid):
    return sw.sweep(phase_grid)


@pytest.mark.parametrize("chunk_size", [1, 7, 50, 338])
def test_results_do_not_depend_on_the_split(phase_grid, serial, chunk_size):
    split = sw.sweep(phase_grid, chunk_size=chunk_size, seed=0)
    assert split.meta["chunks"] == math.ceil(len(phase_grid) / chunk_size)
    assert_same(serial, split)


def test_thread_and_process_executors_give_the_serial_result(phase_grid, serial):
    with cf.ThreadPoolExecutor(2) as pool:
        assert_same(serial, sw.sweep(phase_grid, executor=pool, chunk_size=29))
    with cf.ProcessPoolExecutor(2) as pool:
        assert_same(serial, sw.sweep(phase_grid, executor=pool))


def test_seed_is_recorded_and_spawned_per_chunk(phase_grid, serial):
    seen = []
    original = sw.finetune_chunk

    class Recording(cf.Executor):
        def submit(self, fn, chunk):
            seen.append(chunk.seed)
            future = cf.Future()
            future.set_result(original(chunk))
            return future

    other = sw.sweep(phase_grid, executor=Recording(), chunk_size=100, seed=42)
    assert (other["seed"] == 42).all() and other.meta["seed"] == 42
    expected = np.random.SeedSequence(42).spawn(len(seen))
    assert [s.spawn_key for s in seen] == [s.spawn_key for s in expected]
    assert {s.entropy for s in seen} == {42}
    for name in serial.columns:
        if name != "seed":
            np.testing.assert_array_equal(serial[name], other[name])


def test_progress_reaches_the_total(phase_grid):
    calls = []
    sw.sweep(phase_grid, progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (len(phase_grid), len(phase_grid))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_non_converged_rows_are_marked_not_fatal():
    result = sw.sweep(sw.gamma_grid([[1.0, -0.5, 0.9], 1.0], eps=[0.01, 0.5]), max_steps=50)
    tight = result["eps"] == 0.01
    assert not result["converged_pretrain"][tight].any()
    assert not result["converged"][tight].any()
    assert (result["T1"][tight] == 50).all()
    assert result["converged"][~tight].all() and np.isfinite(result["F"]).all()


def test_bad_api_input_names_the_problem():
    with pytest.raises(oc.InputError, match=r"gamma\[1\]: got 1.5"):
        sw.gamma_grid([[0.1], [1.5]])
    with pytest.raises(oc.InputError, match="eps"):
        sw.gamma_grid([[0.1], [0.5]], eps=[0.01, -1])
    with pytest.raises(oc.InputError, match="at most"):
        sw.gamma_grid([np.zeros(10_000)] * 3)
    with pytest.raises(oc.InputError, match="max_steps"):
        sw.sweep(sw.theta_grid([0.1], 2), max_steps=0)


# --- files ------------------------------------------------------------------------------

def test_csv_and_npz_round_trip(tmp_path, serial):
    path = serial.write(tmp_path / "phase.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(serial) and list(rows[0]) == list(serial.columns)
    for i in (0, 100, len(rows) - 1):
        assert float(rows[i]["F"]) == serial["F"][i]          # repr round-trips exactly
        assert int(rows[i]["T2"]) == serial["T2"][i]
        assert rows[i]["converged"] == "true" and rows[i]["regime_1"] == serial["regime_1"][i]
        assert float(rows[i]["D_2"]) == serial["D_2"][i]
        assert rows[i]["initial_direction_2"] == serial["initial_direction_2"][i]
        assert rows[i]["D_direction_2"] == serial["D_direction_2"][i]
    assert list(rows[0])[-4:] == ["D_1", "D_2", "D_direction_1", "D_direction_2"]
    back = sw.read_result(serial.write(tmp_path / "phase.npz"))
    assert_same(serial, back)
    assert back.meta == serial.meta and back.grid("F").shape == serial.shape


def test_failed_write_leaves_the_old_file_intact(tmp_path, serial, monkeypatch):
    path = tmp_path / "phase.csv"
    path.write_text("previous results\n")

    def half_then_fail(result, f):
        f.write("geometry,K\nparallel-shift,2\n")
        raise OSError("disk full")

    monkeypatch.setattr(sw, "write_csv", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        serial.write(path)
    assert path.read_text() == "previous results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phase.csv"]


# --- the command ------------------------------------------------------------------------

def test_cli_phase_diagram(capsys, tmp_path):
    out_file = tmp_path / "phase.csv"
    code, out, err = run(capsys, "sweep", "--gamma=-1:1:5,-1:1:3", "--eta-ft", "0.1,0.2",
                         "-o", str(out_file))
    assert code == 0 and out == ""
    assert "30 configurations" in err and str(out_file) in err
    with open(out_file, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30
    assert [r["gamma_1"] for r in rows[:3]] == ["-1.0", "-1.0", "-1.0"]
    assert [r["gamma_2"] for r in rows[:3]] == ["-1.0", "0.0", "1.0"]
    assert {r["eta_ft"] for r in rows} == {"0.1", "0.2"}
    expected = sw.sweep(sw.gamma_grid([np.linspace(-1, 1, 5), np.linspace(-1, 1, 3)],
                                      eta_ft=[0.1, 0.2]))
    assert [float(r["F"]) for r in rows] == expected["F"].tolist()


def test_cli_theta_log_eps_stdout_and_npz(capsys, tmp_path):
    code, out, _ = run(capsys, "sweep", "--theta", "0:pi/2:3", "--K", "2,3",
                       "--eps", "1e-2:4e-2:3:log", "-o", "-")
    assert code == 0
    rows = list(csv.DictReader(out.splitlines()))
    assert len(rows) == 2 * 3 * 3
    assert sorted({float(r["eps"]) for r in rows}) == pytest.approx([0.01, 0.02, 0.04])
    assert {r["K"] for r in rows} == {"2", "3"} and {r["geometry"] for r in rows} == {"rotation"}
    code, _, _ = run(capsys, "sweep", "--gamma", "1,-0.9", "--gamma", "0.5,0.5,-0.2",
                     "-o", str(tmp_path / "r.npz"), "--workers", "1", "--chunk-size", "1")
    result = sw.read_result(tmp_path / "r.npz")
    assert code == 0 and result["K"].tolist() == [2, 3]
    assert result["regime_2"][0] == "forgetting"


def test_cli_marks_non_converged_rows(capsys, tmp_path):
    code, _, err = run(capsys, "sweep", "--gamma", "1,-0.9", "--max-steps", "20",
                       "-o", str(tmp_path / "x.csv"))
    assert code == 0 and "1 configuration(s) did not meet the stopping rule" in err
    rows = list(csv.DictReader(open(tmp_path / "x.csv")))
    assert rows[0]["converged"] == "false"


@pytest.mark.parametrize("args, fragment", [
    (["--gamma=-1:1:abc,0"], "--gamma"),
    (["--gamma", "1.5,0"], "--gamma value 1"),
    (["--gamma", "0.5"], "at least 2"),
    (["--gamma", "1,,0"], "empty entry"),
    (["--gamma", "1:2,0"], "START:STOP:NUM"),
    (["--gamma", "1,0", "--theta", "0.1"], "choose exactly one"),
    ([], "choose exactly one"),
    (["--theta", "0:1:3"], "--K"),
    (["--theta", "0.1", "--K", "1"], "--K"),
    (["--gamma", "1,0", "--K", "2"], "omit --K"),
    (["--gamma", "1,0", "--eps", "0"], "--eps"),
    (["--gamma", "1,0", "--eps", "nan"], "--eps"),
    (["--gamma", "1,0", "--eta", "-1:1:3:log"], "--eta"),
    (["--gamma", "1,0", "--max-steps", "0"], "--max-steps"),
    (["--gamma", "1,0", "--workers", "0"], "--workers"),
    (["--gamma", "1,0", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "not both"),
    (["--gamma", "1,0", "--chunk-size", "x"], "--chunk-size"),
    (["--gamma", "1,0", "--format", "npz"], "stdout"),
    (["--gamma=-1:1:10000,-1:1:10000"], "at most"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, args, fragment):
    code, out, err = run(capsys, "sweep", *args, "-o", "-")
    assert code == 2 and out == ""
    assert err.startswith("oodcalc: error:") and err.count("\n") == 1, err
    assert fragment in err


def test_cli_missing_directory_and_missing_output(capsys, tmp_path):
    code, _, err = run(capsys, "sweep", "--gamma", "1,0", "-o", str(tmp_path / "no" / "x.csv"))
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    code, _, err = run(capsys, "sweep", "--gamma", "1,0")
    assert code == 2 and "--output" in err and err.count("\n") == 1


# --- dask ---------------------------------------------------------------------------------

def test_dask_local_cluster_gives_the_serial_result(phase_grid, serial, capsys, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  host="127.0.0.1", protocol="tcp",
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        result = sw.sweep(phase_grid, executor=client.get_executor(), chunk_size=40)
        assert result.meta["chunks"] == math.ceil(len(phase_grid) / 40)
        assert_same(serial, result)
        code, _, err = run(capsys, "sweep", "--gamma=-1:1:13,-1:1:13", "--eta-ft", "0.1,0.4",
                           "--scheduler", cluster.scheduler_address, "-o",
                           str(tmp_path / "d.npz"))
        assert code == 0, err
    assert_same(serial, sw.read_result(tmp_path / "d.npz"))
