"""Inference over seeds (issue 31, items 4 and 5): the Student-t interval, the
Benjamini–Hochberg count, runs counted, and the torch experiments on a dask cluster."""

from __future__ import annotations

import numpy as np
import pytest

from oodcalc.depth.statistics import t_interval

# t_{9, 0.975} = 2.262157162798205: python -c "from scipy import stats; print(stats.t.ppf(0.975, 9))"
# values 1..10: mean 5.5, sd = sqrt(55/6), so half = 2.262157162798205 * sqrt(55/6) / sqrt(10)
TEN = np.arange(1.0, 11.0)
HALF_TEN = 2.262157162798205 * np.sqrt(55 / 6) / np.sqrt(10)


def _agrees_with_student_t(interval) -> bool:
    """The hand example and scipy's own t interval (loc/scale path) on skewed data."""
    from scipy import stats
    lo, hi = interval(TEN)
    if not (abs(lo - (5.5 - HALF_TEN)) < 1e-12 and abs(hi - (5.5 + HALF_TEN)) < 1e-12):
        return False
    x = np.random.default_rng(7).exponential(size=10) ** 2
    ref = stats.t.interval(0.9, x.size - 1, loc=x.mean(), scale=stats.sem(x))
    return bool(np.allclose(interval(x, 0.9), ref, rtol=0, atol=1e-12))


def test_t_interval_is_the_student_t_interval():
    assert _agrees_with_student_t(t_interval)


def test_a_normal_quantile_at_ten_seeds_is_caught():
    from scipy import stats

    def z_interval(values, level=0.95):
        x = np.asarray(values, float)
        half = stats.norm.ppf(0.5 + level / 2) * x.std(ddof=1) / np.sqrt(x.size)
        return x.mean() - half, x.mean() + half

    def plug_in_sd(values, level=0.95):
        x = np.asarray(values, float)
        half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=0) / np.sqrt(x.size)
        return x.mean() - half, x.mean() + half

    assert not _agrees_with_student_t(z_interval)
    assert not _agrees_with_student_t(plug_in_sd)


def test_t_interval_edges():
    assert all(np.isnan(t_interval([1.0])))
    assert all(np.isnan(t_interval([1.0, np.inf, 2.0])))
    assert t_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    with pytest.raises(ValueError, match="level"):
        t_interval(TEN, 1.0)


# --- the torch experiments on a dask cluster (item 5) ----------------------------------

def _without_timing(records: dict) -> dict:
    """Records without their wall-clock fields (the only part that may differ)."""
    import json
    out = {}
    for key, r in records.items():
        r = json.loads(json.dumps(r))
        r["pretrain"].pop("seconds")
        r.get("finetune", {}).pop("seconds", None)
        out[key] = r
    return out


def test_depth_runs_on_a_local_cluster_give_the_serial_numbers(tmp_path, capsys):
    pytest.importorskip("torch")
    distributed = pytest.importorskip("dask.distributed")
    import json

    from oodcalc.cli import main
    from oodcalc.depth import Cache, collect, configs

    # tiny: ε = 0.1 on 64 prompts, 1 layer, SGD, 2 seeds (about half a second per run)
    chosen = configs(["attention"], ["sgd"], [1], eps=0.1, eval_prompts=64, curve_prompts=64)
    serial = collect(chosen, [0, 1], [0.75], Cache(enabled=False))
    cli = ["reproduce", "depth", "--arch", "attention", "--optimizer", "sgd", "--layers", "1",
           "--seeds", "2", "--gamma", "-0.75", "--eps", "0.1", "--eval-prompts", "64",
           "-f", "json"]
    assert main([*cli, "--cache-dir", str(tmp_path / "serial")]) == 0
    table = json.loads(capsys.readouterr().out)
    # threads in this process (2 workers, 1 thread each): worker processes would each
    # import torch (~15 s on a loaded machine); the numbers are the same either way
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  host="127.0.0.1", protocol="tcp",
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        cached = Cache(tmp_path / "cluster")
        remote = collect(chosen, [0, 1], [0.75], cached, executor=client.get_executor())
        assert remote.computed == 2
        assert _without_timing(remote.records) == _without_timing(serial.records)
        assert main([*cli, "--cache-dir", str(tmp_path / "cluster"),
                     "--scheduler", cluster.scheduler_address]) == 0
        assert json.loads(capsys.readouterr().out) == table
    # the results came back to this side's cache: nothing left to train
    assert collect(chosen, [0, 1], [0.75], cached).computed == 0


@pytest.mark.parametrize("command, args, fragment", [
    (command, args, fragment) for command in ("depth", "ladder") for args, fragment in [
        (["--scheduler", "localhost"], "expected a scheduler address PROTOCOL://HOST:PORT"),
        (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "not both")]
] + [("depth", ["--scheduler", "tcp://127.0.0.1:1"], "could not connect to a dask scheduler")])
def test_bad_scheduler_is_one_line(capsys, tmp_path, command, args, fragment):
    from oodcalc.cli import main
    if "could not" in fragment:
        pytest.importorskip("dask.distributed")
    code = main(["reproduce", command, "--seeds", "1", "--cache-dir", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("oodcalc: error: ")
    assert fragment in err


# --- tests beside the interval, and multiplicity ---------------------------------------

def test_t_pvalue_inverts_the_t_interval_and_sign_rank_is_exact():
    from oodcalc.depth.statistics import sign_rank_pvalue, t_pvalue
    x = np.array([0.3, -0.1, 0.5, 0.8, 0.2, 0.4, -0.2, 0.6, 0.1, 0.7])
    for shift in np.linspace(-0.2, 0.8, 21):
        lo, hi = t_interval(x)
        assert (t_pvalue(x, shift) < 0.05) == (not lo <= shift <= hi)
    # exact sign-rank: ten positive values give p = 2 / 2^10 (the one all-positive sign
    # pattern of 1024, both tails)
    assert sign_rank_pvalue(np.arange(1.0, 11.0)) == pytest.approx(2 / 1024, abs=1e-15)


def test_sign_rank_is_scipy_s_exact_test_in_integers_and_ignores_the_last_bits(monkeypatch):
    """Without ties the p-value is counted in integers: equal to scipy's exact method on 600
    random samples (n = 3..12, numpy default_rng(1)), the same under tools/other_machine.py's
    nudge (scipy's exact path sums floats: a nudged run moved the depth page's sign-rank
    counts from 99/98 to 98/97), and a tail one rank short is caught."""
    from scipy import stats

    from oodcalc.depth import statistics
    from test_docs import load_tool
    rng = np.random.default_rng(1)
    samples = [rng.normal(0.3, 1, n) for n in (3, 5, 6, 8, 10, 12) for _ in range(100)]
    exact = [stats.wilcoxon(x, alternative="two-sided", method="exact").pvalue for x in samples]
    ours = [statistics.sign_rank_pvalue(x) for x in samples]
    assert ours == exact
    with load_tool("other_machine").other_machine(ulps=4):
        assert [statistics.sign_rank_pvalue(x) for x in samples] == ours

    real_sum = sum
    monkeypatch.setattr(statistics, "sum", lambda counts: real_sum(counts[:-1]),
                        raising=False)                  # the tail one rank short
    assert [statistics.sign_rank_pvalue(x) for x in samples] != exact


def _bh_hand(p, q):
    """Benjamini–Hochberg written out: the largest rank k with p_(k) <= k q / m."""
    ranked = sorted(p)
    return max([k for k in range(1, len(p) + 1) if ranked[k - 1] <= k * q / len(p)], default=0)


def test_benjamini_hochberg_counts_a_hand_example():
    from oodcalc.depth.statistics import benjamini_hochberg
    # m = 6, q = 0.05: thresholds .0083 .0167 .025 .0333 .0417 .05; p_(4) = .03 <= .0333 is
    # the largest rank under its line (p_(5) = .045 > .0417), so 4 are rejected, p_(3) =
    # .028 > .025 included (step-up, not step-down)
    p = [0.045, 0.001, 0.03, 0.2, 0.012, 0.028]
    assert benjamini_hochberg(p, 0.05) == 4 == _bh_hand(p, 0.05)
    assert benjamini_hochberg([0.2, 0.5], 0.05) == 0
    assert benjamini_hochberg([0.04, float("nan")], 0.05) == 0       # nan counts in m
    # perturbations: Bonferroni (q/m at every rank) rejects 1, step-down stops at 2
    assert sum(x <= 0.05 / 6 for x in p) == 1
    step_down = next(k for k in range(7) if k == 6 or sorted(p)[k] > (k + 1) * 0.05 / 6)
    assert step_down == 2 != benjamini_hochberg(p, 0.05)


# --- real text: runs counted (item 4) ----------------------------------------------------

def test_forgetting_intervals_count_the_runs_and_keep_per_seed_values():
    """runs_counted covers the true F across repeated experiments where the interval over
    reviews alone (each fold's model shared by a fifth of the reviews) does not; its
    per-seed means recompute its standard error; one seed gives none."""
    from test_real import draw_contrasts

    from oodcalc.real.experiment import Z95, runs_counted
    rng = np.random.default_rng(11)
    mu, covered, naive = 0.02, [], []
    for _ in range(300):
        d = draw_contrasts(rng, 5, 180, mu, 0.1, 0.1, 0.05)
        r = runs_counted(d)
        covered.append(r["lo"] <= mu <= r["hi"])
        x = d.mean(axis=0)                    # reviews only, seed-averaged (the old interval)
        half = Z95 * x.std(ddof=1) / np.sqrt(x.size)
        naive.append(abs(x.mean() - mu) <= half)
    # 300 experiments: the runs-counted coverage near 95 % (normal, 4 df for τ²: a little
    # under); the review-only interval far below
    assert np.mean(covered) > 0.85 and np.mean(naive) < 0.75
    r = runs_counted(d)
    se = np.sqrt(r["review_var"] / r["reviews"] + np.var(r["per_seed"], ddof=1) / 5)
    assert abs(se - r["se"]) < 1e-12 and len(r["per_seed"]) == 5
    assert runs_counted(d[:1]) is None


def test_one_seed_prints_no_runs_counted_nor_power():
    from oodcalc.real.experiment import double_peak, power
    from oodcalc.real.render import power_rows
    rng = np.random.default_rng(0)
    one = rng.normal(size=(1, 5, 40))
    dp = double_peak(one)
    result = {"rotation": {"families": {"all": {"shape": {
        "change_0_to_pi": {"power": power(one[:, 4] - one[:, 0])}, "double_peak": dp}}}}}
    _, rows = power_rows(result)
    text = " ".join(" ".join(r) for r in rows)
    assert "%" not in text and "runs not counted" in text and "no verdict from 1 seed" in text


# --- docs/depth.md's inference block ------------------------------------------------------

def test_the_inference_block_counts_verdict_changes_and_sees_a_nudged_run():
    """The count in docs/depth.md is recounted here from the record's runs with the tables'
    own Summary (t) against the percentile bootstrap; nudging every seed of one changed
    cell by the same amount moves both intervals off 0 and the count drops by one."""
    import copy
    import re

    from oodcalc.depth import documents, record
    from oodcalc.depth.statistics import Summary, percentile_interval
    from oodcalc.depth.table import usable
    _, results = record.load(documents.RECORD)
    text = documents.generate(results, "docs/depth.md", "depth-inference")
    m, changed = map(int, re.search(r"^(\d+) distinct F intervals.*differs in (\d+) of them",
                                    text, re.S).groups())

    def sign(lo, hi):
        return (lo > 0) - (hi < 0)

    keys = {}
    for part in (documents.TABLE, documents.PROTOCOL_TABLE, documents.LADDER_RUNS):
        for config, seed, gamma in part.runs():
            # a run shared by two tables (ε = 0.01 in both) counts once
            keys.setdefault((config, gamma), {})[seed] = results.records[(config, seed, gamma)]
    F = {k: [r["F"] for r in runs.values() if usable(r)] for k, runs in keys.items()}
    moved = [k for k, x in F.items()
             if sign(*percentile_interval(x)) != Summary.of(x).sign]
    assert (m, changed) == (len(F), len(moved)) == (114, 13)

    nudged = copy.copy(results)
    nudged.records = dict(results.records)
    config, gamma = moved[0]
    for (c, s, g), r in results.records.items():
        if (c, g) == (config, gamma):
            nudged.records[(c, s, g)] = {**r, "F": r["F"] + 1.0}
    again = documents.generate(nudged, "docs/depth.md", "depth-inference")
    assert f"differs in {changed - 1} of them" in again
