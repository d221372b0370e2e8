"""`oodcalc explore`: the page is one self-contained file, and the numbers its JavaScript
port of the dynamics computes in a real browser (headless Chromium) are `predict`'s:
T1 and T2 identical, F_k within 1e-12, on random points of K = 2..4 and on the special
cases (every γ equal: the ray path; γ_k = 0; claim 8b's counterexamples)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from oodcalc import Protocol, Setting, parallel_shift, predict
from oodcalc.cli import main

#: Chromium from the system packages (Debian: chromium; .ci/run installs it).
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser",
                                                 "google-chrome", "chrome")
                 if shutil.which(name)), None)


def _chromium_problem() -> str | None:
    """Why headless Chromium cannot be had here (None: it runs)."""
    if CHROMIUM is None:
        return ("Chromium not found (apt-get install chromium; .ci/run installs it): the "
                "browser tests of the explorer page skip")
    try:
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                               "--dump-dom", "data:text/html,<p id=x>ok</p>"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"Chromium ({CHROMIUM}) does not start headless: {err}"
    if done.returncode != 0 or "ok" not in done.stdout:
        return (f"Chromium ({CHROMIUM}) does not run headless here (exit {done.returncode}: "
                f"{done.stderr.strip()[-200:]})")
    return None


PROBLEM = _chromium_problem()
needs_chromium = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """A small page (coarse maps: the point's dynamics do not depend on them)."""
    path = tmp_path_factory.mktemp("explore") / "explorer.html"
    code = main(["explore", "-o", str(path), "--grid", "41", "--k3-grid", "31",
                 "--gamma1", "1,0.5,-0.7", "--overlap-grid", "11"])
    assert code == 0
    return path


def browse(path: Path, fragment: str, tmp: Path, *, screenshot: Path | None = None,
           size: str = "1400,1000") -> str:
    """Load ``file://path#fragment`` in headless Chromium; the DOM after the page's
    scripts ran (or write a screenshot)."""
    url = path.resolve().as_uri() + "#" + urllib.parse.quote(fragment, safe="=&,.-+:")
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={tmp / 'profile'}",
            f"--window-size={size}", "--hide-scrollbars"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    done = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_page_is_one_self_contained_file(page):
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert len(text.encode()) < 1_000_000          # the coarse maps; defaults: ~1.5 MB
    assert not re.search(r"https?://|//cdn|<link\b|<[a-z]+[^>]*\ssrc\s*=", text, re.I)
    assert "/*DATA*/" not in text and "/*DYNAMICS*/" not in text and "__VERSION__" not in text
    data = re.search(r'<script type="application/json" id="oodcalc-data">(.*?)</script>',
                     text, re.S)
    payload = json.loads(data.group(1))
    assert payload["k2"]["n"] == 41 and [s["gamma1"] for s in payload["k3"]["slices"]] == \
        [1.0, 0.5, -0.7]
    # claim 8b's counterexamples are marked on the slices through them
    assert payload["k3"]["slices"][1]["counterexamples"] == [[0.5, -0.9, -0.9]]
    assert payload["k3"]["slices"][2]["counterexamples"] == [[-0.7, 0.9, 0.95]]
    # the overlap map: ρ in steps of 0.2 within ±0.8, γ2 over [−1, 1], both cases starred
    overlap = payload["overlap"]
    assert overlap["rho"] == [-0.8, -0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6, 0.8]
    assert len(overlap["gamma2"]) == 11 and overlap["counterexamples"] == [[0.8, 0.5], [-0.5, -0.2]]
    assert overlap["fractions"]["2"]["paper"] > overlap["fractions"]["2"]["C_sign"] > 0


@pytest.mark.parametrize("args, option", [
    (["--grid", "1"], "--grid"), (["--k3-grid", "x"], "--k3-grid"),
    (["--gamma1", "1.5"], "--gamma1"), (["--eps", "0"], "--eps"),
    (["-o", "page.txt"], "--output")])
def test_bad_input_is_one_line_and_exit_2(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["explore", *args] + ([] if "-o" in args else ["-o", "page.html"])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"oodcalc: error: {option}: got ")
    assert not list(tmp_path.iterdir())            # nothing written


def points() -> list[tuple[list[float], float, float, float]]:
    """60 random points, K = 2..4, random protocols near the defaults, and the special
    cases."""
    rng = np.random.default_rng(21)
    out = []
    for i in range(60):
        K = 2 + i % 3
        gamma = rng.uniform(-1, 1, K).round(rng.integers(2, 6)).tolist()
        eps = float(rng.choice([0.01, 0.02, 0.05, 0.005]))
        eta = float(rng.choice([0.1, 0.2, 0.5, 0.05]))
        eta_ft = float(rng.choice([eta, 0.1, 0.3]))
        out.append((gamma, eps, eta, eta_ft))
    out += [([1.0, -0.9], 0.01, 0.1, 0.1), ([0.5, -0.9, -0.9], 0.01, 0.1, 0.1),
            ([-0.7, 0.9, 0.95], 0.01, 0.1, 0.1), ([0.6, 0.6, 0.6], 0.01, 0.1, 0.1),
            ([-0.4, -0.4], 0.02, 0.2, 0.1), ([0.0, 0.8, -0.3], 0.01, 0.1, 0.1),
            ([1.0, 1.0, 1.0], 0.01, 0.1, 0.1), ([0.3, -0.3, 0.0, 0.9], 0.01, 0.1, 0.1)]
    return out


def expected(gamma, eps, eta, eta_ft):
    return predict(Setting(parallel_shift(gamma), Protocol(eps=eps, eta=eta, eta_ft=eta_ft)))


def compare_runs(js: dict, report, where: str) -> None:
    """What every run of the page shares with predict's: T1, T2 identical, F and F_k to
    1e-12, each feature's trend."""
    assert "error" not in js, (where, js.get("error"))
    assert js["T1"] == report.pretrain.T1, where
    assert js["T2"] == report.finetune.T2, (where, js["T2"], report.finetune.T2)
    F_k = [f.F_k for f in report.forgetting]
    assert np.allclose(js["F_k"], F_k, rtol=0, atol=1e-12), (where, js["F_k"], F_k)
    assert abs(js["F"] - report.F) <= 1e-12, where
    assert js["trend"] == [f.trend for f in report.forgetting], where


def compare(js: dict, report, where: str) -> None:
    compare_runs(js, report, where)
    assert js["regime"] == [f.regime for f in report.forgetting], where
    assert js["condition"] == [f.condition for f in report.forgetting], where
    assert js["theorem_holds"] == [f.theorem_holds for f in report.forgetting], where
    assert js["initial_direction"] == [f.initial_direction for f in report.forgetting], where
    assert js["D_k_direction"] == [f.D_k_direction for f in report.forgetting], where
    assert np.allclose(js["D_k"], [f.D_k for f in report.forgetting], rtol=1e-9, atol=1e-15)
    assert np.allclose(js["first_step"], [f.first_step for f in report.forgetting],
                       rtol=1e-6, atol=1e-15), where
    assert abs(js["ood_loss"] - report.ood.error.sum() / len(report.forgetting)) <= 1e-12, where


@needs_chromium
def test_the_page_computes_what_predict_computes(page, tmp_path):
    """Every point through the page's test hook (#test=[...]), one browser launch."""
    pts = points()
    assert len(pts) >= 50
    dom = browse(page, "test=" + json.dumps(pts, separators=(",", ":")), tmp_path)
    found = re.search(r'<pre id="test-output"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    results = json.loads(html.unescape(found.group(1)))
    assert len(results) == len(pts)
    for (gamma, eps, eta, eta_ft), js in zip(pts, results):
        compare(js, expected(gamma, eps, eta, eta_ft), f"γ = {gamma}, ε = {eps}, η = {eta}, "
                                                        f"η_ft = {eta_ft}")
    times = [r["ms"] for r in results]
    print(f"browser: {np.mean(times):.2f} ms per point (max {max(times):.1f} ms)")


def dom_values(dom: str) -> dict[str, str]:
    return {key: html.unescape(value) for key, value in
            re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', dom)}


@needs_chromium
def test_a_point_set_by_the_fragment_shows_predicts_numbers(page, tmp_path, capsys):
    """The page as a reader uses it: γ, ε, η, η_ft from the URL fragment, the numbers read
    from the tables it shows, and the command line it exports."""
    gamma, eps, eta, eta_ft = [-0.7, 0.9, 0.95], 0.02, 0.2, 0.3
    dom = browse(page, f"gamma={','.join(map(str, gamma))}&eps={eps}&eta={eta}"
                       f"&eta_ft={eta_ft}", tmp_path)
    values = dom_values(dom)
    report = expected(gamma, eps, eta, eta_ft)
    assert int(values["T1"]) == report.pretrain.T1
    assert int(values["T2"]) == report.finetune.T2
    for f in report.forgetting:
        assert abs(float(values[f"F_k.{f.k}"]) - f.F_k) <= 1e-12
        assert values[f"regime.{f.k}"] == f.regime
    assert abs(float(values["F"]) - report.F) <= 1e-12
    exported = html.unescape(re.search(r'<pre id="command-text"[^>]*>(.*?)</pre>', dom,
                                       re.S).group(1))
    assert exported == ("oodcalc predict --gamma=-0.7,0.9,0.95 --eps 0.02 --eta 0.2 "
                        "--eta-ft 0.3")
    assert main(exported.split()[1:]) == 0          # what the page exports runs as is
    assert f"T2 = {report.finetune.T2} steps" in capsys.readouterr().out
    assert 'id="map-plain" class="banner" hidden' in dom    # no interventions: no banner


@needs_chromium
def test_the_map_is_drawn(page, tmp_path):
    """A screenshot: the map's region holds the colours of F (not a blank canvas)."""
    from matplotlib.image import imread
    shot = tmp_path / "shot.png"
    browse(page, "gamma=1,-0.9", tmp_path, screenshot=shot, size="1300,900")
    image = imread(shot)[..., :3]
    assert image.shape[0] >= 800 and image.shape[1] >= 1200
    # the map sits in the left column: strongly blue or red pixels (RdBu) cover much of it
    left = image[150:700, 0:520]
    r, g, b = left[..., 0], left[..., 1], left[..., 2]
    coloured = ((b - r > 0.25) | (r - b > 0.25)).mean()
    assert coloured > 0.2, f"only {coloured:.1%} of the map region is coloured"
    assert len(np.unique((left * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


@needs_chromium
def test_a_point_of_K8_runs_well_under_a_second(page, tmp_path):
    gamma = np.random.default_rng(8).uniform(-1, 1, 8).round(3).tolist()
    started = time.perf_counter()
    dom = browse(page, "test=" + json.dumps([[gamma, 0.01, 0.1, 0.1]]), tmp_path)
    wall = time.perf_counter() - started
    result = json.loads(html.unescape(re.search(r'<pre id="test-output"[^>]*>(.*?)</pre>',
                                                dom, re.S).group(1)))[0]
    report = expected(gamma, 0.01, 0.1, 0.1)
    compare(result, report, f"γ = {gamma}")
    print(f"K = 8 in the browser: {result['ms']:.0f} ms (browser launch and all: {wall:.1f} s)")
    assert result["ms"] < 1000


@needs_chromium
def test_the_F_map_saturates_each_sign_at_its_own_extreme(page, tmp_path):
    """One scale at max |F| (as plot phase-diagram had) left F > 0, ten times smaller than
    F < 0, a faint pink: the legend names both extremes, and strong red covers the
    forgetting corners of the map."""
    import base64

    from matplotlib.image import imread
    text = page.read_text(encoding="utf-8")
    payload = json.loads(re.search(r'id="oodcalc-data">(.*?)</script>', text, re.S).group(1))
    F = np.frombuffer(base64.b64decode(payload["k2"]["F"]), dtype=np.float32)
    assert F.max() > 0 > F.min() and F.max() < -F.min() / 3
    dom = html.unescape(browse(page, "gamma=1,-0.9", tmp_path))
    shown = re.search(r"(-?[\d.e-]+) … 0 … \+([\d.e-]+) \(blue: backward transfer", dom)
    assert shown, "no two-sided colour legend on the F map"
    assert float(shown.group(1)) == pytest.approx(F.min(), rel=1e-2)
    assert float(shown.group(2)) == pytest.approx(F.max(), rel=1e-2)
    shot = tmp_path / "F.png"
    browse(page, "gamma=1,-0.9", tmp_path, screenshot=shot, size="1300,900")
    left = imread(shot)[150:700, 0:520, :3]
    red = (left[..., 0] - left[..., 2] > 0.4).mean()    # #d6604d .. #b2182b, not the pinks
    assert red > 0.01, f"strong red on {red:.2%} of the map region"   # 2.2 % (was 0)


# --- interventions: the page's terms engine against predict's -----------------------------

#: Each intervention the page offers, as its fields give it (text) and as predict takes it.
INTERVENTIONS = [({"replay": "0.5"}, {"replay": 0.5}), ({"l2": "0.1"}, {"l2": 0.1}),
                 ({"project": "key"}, {"project": "key"}),
                 ({"project": "both"}, {"project": "both"}),
                 ({"weights": "cosine"}, {"weights": "cosine"}),
                 ({"weights": "drop-negative"}, {"weights": "drop-negative"})]
#: γ = (1, −0.9) (u_1 = v_1: a projection on the query side freezes it) and a K = 3 point
#: (claim 8b's counterexample).
INTERVENTION_GAMMAS = [[1.0, -0.9], [0.5, -0.9, -0.9]]


def intervention_points():
    out = [(gamma, 0.01, 0.1, 0.1, page_iv, iv) for gamma in INTERVENTION_GAMMAS
           for page_iv, iv in INTERVENTIONS]
    out.append(([0.5, -0.9, -0.9], 0.01, 0.1, 0.1, {"weights": "1, 0.5,2"},
                {"weights": (1.0, 0.5, 2.0)}))
    return out


def predicted(gamma, eps, eta, eta_ft, iv):
    return predict(Setting(parallel_shift(gamma),
                           Protocol(eps=eps, eta=eta, eta_ft=eta_ft, **iv)))


@pytest.fixture(scope="module")
def intervention_reports():
    return [predicted(g, eps, eta, eta_ft, iv)
            for g, eps, eta, eta_ft, _, iv in intervention_points()]


def run_hook(path: Path, pts, tmp: Path) -> list[dict]:
    """The page's numbers for ``[gamma, eps, eta, eta_ft, interventions]`` points."""
    dom = browse(path, "test=" + json.dumps(pts, separators=(",", ":")), tmp)
    found = re.search(r'<pre id="test-output"[^>]*>(.+?)</pre>', dom, re.S)
    assert found, f"the page's scripts did not run: {dom[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def compare_interventions(js: dict, report, where: str) -> None:
    compare_runs(js, report, where)
    assert js["engine"] == "terms on (z_U, z_V) (JavaScript)", where
    assert js["reached"] == report.finetune.reached, where
    assert js["initial_direction"] == [f.initial_direction for f in report.forgetting], where
    assert np.allclose(js["first_step"], [f.first_step for f in report.forgetting],
                       rtol=1e-9, atol=1e-15), where
    # the closed forms of claims 8 and 9 are plain fine-tuning's: neither shows them
    assert js["regime"] == [f.regime for f in report.forgetting], where
    assert set(js["regime"]) == {None}, where
    assert js["D_k"] == [f.D_k for f in report.forgetting], where
    assert js["note"] == (report.warnings[0] if report.warnings else None), where


@needs_chromium
def test_the_page_runs_predicts_interventions(page, tmp_path, intervention_reports):
    """Each intervention at γ = (1, −0.9) and at a K = 3 point (13 runs, one browser
    launch): T1, T2, the reached flag and predict's note identical, F and F_k within 1e-12;
    under a projection (no replay) F = 0 exactly."""
    pts = intervention_points()
    results = run_hook(page, [p[:5] for p in pts], tmp_path)
    assert len(results) == len(pts)
    outcomes = set()
    for (gamma, *_, iv), js, report in zip(pts, results, intervention_reports):
        compare_interventions(js, report, f"γ = {gamma}, {iv}")
        if "project" in iv:
            assert js["F"] == 0 and all(f == 0 for f in js["F_k"])
        outcomes.add("reached" if js["reached"] else "blocked" if js["blocked"] else
                     "stalled" if js["stalled"] else "?")
    assert outcomes == {"reached", "blocked", "stalled"}    # every way a run ends here


#: Wrong ports the comparison must catch: (what, the line of dynamics.js, its mutation,
#: the intervention that sees it).
MUTATIONS = [
    ("replay factor", "const h = replay * gV[i];", "const h = 1.001 * replay * gV[i];",
     {"replay": 0.5}),
    ("key and query projections swapped",
     'const left = iv.project === "key" || iv.project === "both";',
     'const left = iv.project === "query" || iv.project === "both";', {"project": "key"}),
    ("pull 0.1 % too strong on the source logits", "dV[i] += l2 * (zV[i] - zV1[i]);",
     "dV[i] += 1.001 * l2 * (zV[i] - zV1[i]);", {"l2": 0.1}),
    ("cosine weights not scaled to mean 1", "kept[k] *= scale;", "kept[k] *= 1.0;",
     {"weights": "cosine"}),
    ("one step short of a stall", "if (big <= STALL_STEP) { steps = t;",
     "if (big <= 1e3 * STALL_STEP) { steps = t;", {"l2": 0.1}),
]


def mutated_page(page, line, mutant, tmp_path, monkeypatch):
    """The page rebuilt (its embedded maps reused) with ``line`` of dynamics.js, which must
    occur once, replaced by ``mutant``."""
    import oodcalc.explore as explore
    source = explore._asset("dynamics.js")
    assert source.count(line) == 1, line
    real = explore._asset
    monkeypatch.setattr(explore, "_asset", lambda name: source.replace(line, mutant)
                        if name == "dynamics.js" else real(name))
    text = page.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="oodcalc-data">(.*?)</script>', text, re.S).group(1))
    mutated = tmp_path / "mutated.html"
    mutated.write_text(explore.build_page(data), encoding="utf-8")
    return mutated


@needs_chromium
@pytest.mark.parametrize("what, line, mutant, iv", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_wrong_port_fails_the_comparison(what, line, mutant, iv, page, tmp_path,
                                           monkeypatch):
    """The page rebuilt (its embedded maps reused) with one line of dynamics.js mutated:
    the comparison with predict fails."""
    mutated = mutated_page(page, line, mutant, tmp_path, monkeypatch)
    gamma = [1.0, -0.9]
    js = run_hook(mutated, [[gamma, 0.01, 0.1, 0.1, iv]], tmp_path)[0]
    report = predicted(gamma, 0.01, 0.1, 0.1, iv)
    with pytest.raises(AssertionError):
        compare_interventions(js, report, what)


def shown_text(dom: str, id_: str) -> str:
    found = re.search(rf'id="{id_}"[^>]*>(.*?)</', dom, re.S)
    return html.unescape(found.group(1)) if found else ""


@needs_chromium
def test_bad_interventions_are_named_on_the_page(page, tmp_path):
    """A bad value names its field, the value and what the field takes, beside the
    fields; the page runs on (no exception: it finishes and marks itself ready), shows no
    numbers for the point and exports no flag for it. OOD.run says the same to the hook."""
    dom = browse(page, "gamma=1,-0.9&replay=1.5&project=key", tmp_path)
    assert 'data-ready="1"' in dom
    assert shown_text(dom, "intervention-error") == (
        "replay λ: got '1.5'; expected a share λ with 0 <= λ < 1 (λ = 1 would not "
        "fine-tune on U at all)")
    assert 'data-key="T2" data-value="undefined"' in dom      # no run
    assert "--replay" not in shown_text(dom, "command-text")
    bad = [({"replay": "x"}, "replay λ: got 'x'; expected a share λ with 0 <= λ < 1"),
           ({"l2": "-1"}, "L2 μ: got '-1'; expected a finite number >= 0"),
           ({"l2": "Infinity"}, "L2 μ: got 'Infinity'; expected a finite number >= 0"),
           ({"project": "sideways"},
            "projection: got 'sideways'; expected one of none, key, query, both"),
           ({"weights": "1,2,3"}, "weights: got 3 values; expected one weight per feature: "
                                  "K = 2"),
           ({"weights": "0,0"}, "weights: got '0,0'; expected numbers c_1,...,c_K (finite, "
                                ">= 0, not all 0) or a rule: cosine, drop-negative"),
           ({"weights": "1,-1"}, "weights: got '1,-1'; expected numbers"),
           ({"weights": []}, "weights: got ''; expected numbers")]
    pts = [[[1.0, -0.9], 0.01, 0.1, 0.1, iv] for iv, _ in bad]
    pts.append([[-0.5, -0.9], 0.01, 0.1, 0.1, {"weights": "cosine"}])
    results = run_hook(page, pts, tmp_path)
    for (iv, message), js in zip(bad, results):
        assert js["error"].startswith(message), (iv, js["error"])
        assert "T2" not in js
    assert results[-1]["error"] == (
        "weights: got 'cosine'; every OOD feature has a negative cosine to the pretraining "
        "centre (-0.354, -0.636): nothing would be fine-tuned; give explicit weights")
    with pytest.raises(Exception, match="every OOD feature has a negative cosine"):
        predicted([-0.5, -0.9], 0.01, 0.1, 0.1, {"weights": "cosine"})


@needs_chromium
def test_a_point_with_interventions_from_the_fragment(page, tmp_path, capsys):
    """The reader's path: interventions from the URL fragment, the numbers read from the
    tables, the banner over the maps, and the command line the page exports (it runs, and
    prints predict's T2)."""
    gamma = [0.5, -0.9, -0.9]
    dom = browse(page, "gamma=0.5,-0.9,-0.9&eps=0.01&eta=0.1&replay=0.2&l2=0.05"
                       "&project=query&weights=drop-negative", tmp_path)
    iv = {"replay": 0.2, "l2": 0.05, "project": "query", "weights": "drop-negative"}
    report = predicted(gamma, 0.01, 0.1, 0.1, iv)
    values = dom_values(dom)
    assert int(values["T2"]) == report.finetune.T2
    assert values["reached"] == str(report.finetune.reached).lower()
    for f in report.forgetting:
        assert abs(float(values[f"F_k.{f.k}"]) - f.F_k) <= 1e-12
        assert values[f"regime.{f.k}"] == "null"
    assert abs(float(values["F"]) - report.F) <= 1e-12
    assert shown_text(dom, "map-plain").startswith("The maps show plain fine-tuning")
    note = shown_text(dom, "run-note")             # stalled: the pull holds u_1 back
    assert not report.finetune.reached and note[0].lower() + note[1:] == report.warnings[0] + "."
    exported = html.unescape(re.search(r'<pre id="command-text"[^>]*>(.*?)</pre>', dom,
                                       re.S).group(1))
    assert exported == ("oodcalc predict --gamma 0.5,-0.9,-0.9 --eps 0.01 --eta 0.1 "
                        "--replay 0.2 --l2 0.05 --project query --weights drop-negative")
    assert main(exported.split()[1:]) == 0
    assert f"T2 = {report.finetune.T2} steps" in capsys.readouterr().out


@needs_chromium
def test_the_intervention_fields_run_the_point(page, tmp_path):
    """The fields as a reader sets them (change events; animation frames run at once, as
    headless Chromium draws none): the run, the fragment and the command follow them, and a
    bad value typed afterwards is named beside its field."""
    events = "".join(f'$$("{field}").value = "{value}"; $$("{field}").dispatchEvent('
                     'new Event("change"));' for field, value in
                     [("replay", "0.5"), ("weights", "list"), ("weights-list", "1,0.5"),
                      ("project", "key")])
    script = ('<script>window.requestAnimationFrame = (f) => f();'
              'const $$ = (id) => document.getElementById(id);' + events +
              '$$("test-output").textContent = JSON.stringify({hash: location.hash, '
              'T2: document.querySelector("[data-key=T2]").dataset.value});'
              '$$("l2").value = "-2"; $$("l2").dispatchEvent(new Event("change"));'
              '</script></body>')
    typed = tmp_path / "typed.html"
    typed.write_text(page.read_text(encoding="utf-8").replace("</body>", script),
                     encoding="utf-8")
    dom = browse(typed, "gamma=1,-0.9", tmp_path)
    seen = json.loads(html.unescape(re.search(r'<pre id="test-output"[^>]*>(.*?)</pre>',
                                              dom, re.S).group(1)))
    report = predicted([1.0, -0.9], 0.01, 0.1, 0.1,
                       {"replay": 0.5, "project": "key", "weights": (1.0, 0.5)})
    assert int(seen["T2"]) == report.finetune.T2
    assert urllib.parse.unquote(seen["hash"]).endswith("&replay=0.5&project=key&weights=1,0.5")
    assert shown_text(dom, "intervention-error") == ("L2 μ: got '-2'; expected a finite "
                                                     "number >= 0")
    assert 'data-ready="1"' in dom and 'data-key="T2" data-value="undefined"' in dom


# --- overlapping training features (K = 2, ⟨v1, v2⟩ = ρ): the page's Gram port ------------

def overlap_points() -> list[tuple[float, list[float], float, float, float]]:
    """The two cases of the overlap map (ρ = 0.8, γ2 = 0.5: forgotten against the paper's
    backward transfer; ρ = −0.5, γ2 = −0.2: the reverse), its edges (ρ = −0.9 at γ2 = −0.95:
    T2 = 20,656; γ2 = 1: T2 = 0), γ1 ≠ 1, and 12 random points near the defaults."""
    rng = np.random.default_rng(32)
    out = [(0.8, [1.0, 0.5], 0.01, 0.1, 0.1), (-0.5, [1.0, -0.2], 0.01, 0.1, 0.1),
           (-0.9, [1.0, -0.95], 0.01, 0.1, 0.1), (0.6, [1.0, 1.0], 0.01, 0.1, 0.1),
           (0.3, [0.7, -0.4], 0.02, 0.2, 0.1), (0.5, [-0.3, 0.9], 0.05, 0.5, 0.3)]
    for _ in range(12):
        rho = round(float(rng.uniform(-0.7, 0.7)), 3)
        gamma = rng.uniform(-1, 1, 2).round(rng.integers(2, 4)).tolist()
        out.append((rho, gamma, float(rng.choice([0.01, 0.02, 0.05])),
                    float(rng.choice([0.1, 0.2, 0.5])), float(rng.choice([0.1, 0.3]))))
    return out


def overlap_predicted(rho, gamma, eps, eta, eta_ft):
    from oodcalc import overlap
    return predict(Setting(overlap(rho, gamma), Protocol(eps=eps, eta=eta, eta_ft=eta_ft)))


@pytest.fixture(scope="module")
def overlap_reports():
    return [overlap_predicted(*p) for p in overlap_points()]


def compare_overlap(js: dict, report, where: str) -> None:
    """predict's Gram path: T1, T2 identical, F_k within 1e-12, the trends, the paper's
    verdict and C_k (its column D_k) with its direction."""
    compare_runs(js, report, where)
    assert js["rho"] == report.parameters["geometry"]["rho"], where
    assert js["engine"].startswith("Gram-matrix"), where
    assert js["regime"] == [f.regime for f in report.forgetting], where
    assert js["theorem_holds"] == [f.theorem_holds for f in report.forgetting], where
    assert np.allclose(js["D_k"], [f.D_k for f in report.forgetting], rtol=1e-9, atol=1e-15), \
        (where, js["D_k"], [f.D_k for f in report.forgetting])
    assert js["D_k_direction"] == [f.D_k_direction for f in report.forgetting], where
    assert np.allclose(js["first_step"], [f.first_step for f in report.forgetting],
                       rtol=1e-9, atol=1e-15), where
    assert abs(js["ood_loss"] - report.ood.error.sum() / 2) <= 1e-12, where


def overlap_hook(pts):
    """``[rho, gamma, eps, eta, eta_ft]`` as the hook takes it (ρ last)."""
    return [[gamma, eps, eta, eta_ft, None, rho] for rho, gamma, eps, eta, eta_ft in pts]


@needs_chromium
def test_the_page_runs_predicts_overlapping_features(page, tmp_path, overlap_reports):
    """18 points with ⟨v1, v2⟩ = ρ (one browser launch): T1 and T2 identical to predict's,
    F_k within 1e-12; both cases of the overlap map contradict the paper's rule on the page
    too. ρ = 0 is the orthonormal run; bad ρ is named."""
    pts = overlap_points()
    results = run_hook(page, overlap_hook(pts), tmp_path)
    assert len(results) == len(pts)
    for (rho, gamma, *_), js, report in zip(pts, results, overlap_reports):
        compare_overlap(js, report, f"ρ = {rho}, γ = {gamma}")
    assert results[0]["F_k"][1] > 0 and results[0]["regime"][1] == "backward-transfer"
    assert results[1]["F_k"][1] < 0 and results[1]["regime"][1] == "forgetting"
    assert results[2]["T2"] == 20656 and results[3]["T2"] == 0
    zero, bad = run_hook(page, [[[1.0, -0.9], 0.01, 0.1, 0.1, None, 0],
                                [[1.0, -0.9], 0.01, 0.1, 0.1, None, 1]], tmp_path), None
    compare(zero[0], expected([1.0, -0.9], 0.01, 0.1, 0.1), "ρ = 0")
    errors = run_hook(page, [[[1.0, -0.9], 0.01, 0.1, 0.1, None, 1],
                             [[1.0, -0.9, 0.5], 0.01, 0.1, 0.1, None, 0.5],
                             [[1.0, -0.9], 0.01, 0.1, 0.1, {"replay": 0.5}, 0.5]], tmp_path)
    assert errors[0]["error"].startswith("overlap ρ: got '1'; expected a number with −1 < ρ < 1")
    assert "for K = 2" in errors[1]["error"] and "plain fine-tuning only" in errors[2]["error"]
    assert all("T2" not in e for e in errors)


#: Wrong ports of the Gram dynamics the comparison must catch.
GRAM_MUTATIONS = [
    ("pretraining step without G_V", "const X = mm2(mm2(G_V, g), G_V);", "const X = g;"),
    ("OOD start without G_V⁻¹", "const W = tr2(solve2(G_V, tr2(solve2(G_V, zV))));",
     "const W = zV;"),
    ("source step with M untransposed", "dV = mm2(mm2(M, gU), tr2(M));",
     "dV = mm2(mm2(M, gU), M);"),
    ("errors without the Gram", "const s = mm2(G, r);", "const s = r;"),
]


@needs_chromium
@pytest.mark.parametrize("what, line, mutant", GRAM_MUTATIONS, ids=[m[0] for m in GRAM_MUTATIONS])
def test_a_wrong_gram_port_fails_the_comparison(what, line, mutant, page, tmp_path,
                                                monkeypatch, overlap_reports):
    mutated = mutated_page(page, line, mutant, tmp_path, monkeypatch)
    js = run_hook(mutated, overlap_hook(overlap_points()[:1]), tmp_path)[0]
    with pytest.raises(AssertionError):
        compare_overlap(js, overlap_reports[0], what)


@needs_chromium
def test_an_overlap_point_from_the_fragment_and_its_map(page, tmp_path, capsys):
    """ρ from the URL fragment: the numbers in the tables are predict's, the command the
    page exports runs as is; the overlap map is drawn (a screenshot: its classes' colours
    fill the map's region) with the point on it."""
    from matplotlib.image import imread
    dom = browse(page, "gamma=1,0.5&rho=0.8&map=overlap", tmp_path)
    values = dom_values(dom)
    report = overlap_predicted(0.8, [1.0, 0.5], 0.01, 0.1, 0.1)
    assert int(values["T1"]) == report.pretrain.T1 == 10869
    assert int(values["T2"]) == report.finetune.T2
    for f in report.forgetting:
        assert abs(float(values[f"F_k.{f.k}"]) - f.F_k) <= 1e-12
    assert float(values["F_k.2"]) > 0 and values["regime.2"] == "backward-transfer"
    exported = html.unescape(re.search(r'<pre id="command-text"[^>]*>(.*?)</pre>', dom,
                                       re.S).group(1))
    assert exported == "oodcalc predict --overlap 0.8 --gamma 1,0.5 --eps 0.01 --eta 0.1"
    assert main(exported.split()[1:]) == 0
    assert f"T2 = {report.finetune.T2} steps" in capsys.readouterr().out
    negative = browse(page, "gamma=1,-0.2&rho=-0.5", tmp_path)
    assert html.unescape(re.search(r'<pre id="command-text"[^>]*>(.*?)</pre>', negative,
                                   re.S).group(1)).startswith("oodcalc predict --overlap=-0.5 ")
    shot = tmp_path / "overlap.png"
    browse(page, "gamma=1,0.5&rho=0.8&map=overlap", tmp_path, screenshot=shot,
           size="1300,900")
    left = imread(shot)[150:700, 0:520, :3]
    r, g, b = left[..., 0], left[..., 1], left[..., 2]
    orange = ((r > 0.9) & (g > 0.4) & (g < 0.6) & (b < 0.15)).mean()    # #ff7f00: paper wrong
    purple = ((abs(r - 0.6) < 0.05) & (abs(g - 0.31) < 0.05) & (abs(b - 0.64) < 0.05)).mean()
    assert orange > 0.02 and purple > 0.01, (orange, purple)            # #984ea3: both wrong
