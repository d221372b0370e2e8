"""The depth experiment (TinyTransformer): protocol, statistics, cache and CLI without torch;
with torch (the nn extra), a tiny configuration end to end, the theory's signs for a
one-layer attention model trained by SGD, and reproducibility. The full table is
``tools/depth_full_run.py``, not a test."""

import json
import subprocess
import sys

import numpy as np
import pytest

import oodcalc as oc
from oodcalc import paper
from oodcalc.cli import main
from oodcalc.depth import Cache, DepthConfig, configs
from oodcalc.depth.protocol import canonical_gamma
from oodcalc.depth.statistics import Ratio, Summary, forgetting_patterns
from oodcalc.errors import InputError

# Tiny protocols: a loose stopping rule on 256 evaluation prompts (about a second per run).
# ε = 0.05 for the sign test (the theory's F_k at this ε are at least 0.005 away from 0);
# ε = 0.1 where only the pipeline is checked.
TINY = dict(eps=0.05, eval_prompts=256, curve_prompts=64)
PIPELINE = dict(TINY, eps=0.1)
PIPELINE_CLI = ["--eps", "0.1", "--eval-prompts", "256"]


def needs_torch():
    return pytest.importorskip("torch")


# --- without torch --------------------------------------------------------------------

def test_import_and_predict_do_not_load_torch():
    code = ("import sys, oodcalc, oodcalc.cli, oodcalc.depth, oodcalc.cli.reproduce_depth; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("field, value", [("arch", "mlp"), ("optimizer", "rmsprop"),
                                          ("layers", 0), ("eps", -1.0), ("lr", float("nan")),
                                          ("eval_prompts", 7), ("K", 3)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(InputError):
        DepthConfig(**{field: value})


def test_a_fixed_fine_tuning_length_keys_its_own_runs_and_the_theory():
    """--ft-steps N: its own cache key (the stopping rule's keys, written before the
    option existed, unchanged), N checked, and the theory column under the same protocol."""
    from oodcalc.depth.table import theory
    assert "ft_steps" not in DepthConfig().describe()      # earlier caches still hit
    assert DepthConfig(ft_steps=500).describe()["ft_steps"] == 500
    assert DepthConfig(ft_steps=500).run_parameters(0, 0.5) != \
        DepthConfig().run_parameters(0, 0.5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError):
            DepthConfig(ft_steps=bad)
    fixed = oc.predict(oc.Setting(oc.parallel_shift([1, -0.75]),
                                  oc.Protocol(eps=0.05, ft_steps=500)))
    assert fixed.finetune.T2 == 500
    assert theory(-0.75, 0.05, 500).F == fixed.F != theory(-0.75, 0.05).F


def test_default_learning_rates_and_gamma_keys():
    assert DepthConfig(optimizer="sgd").lr == 0.1 and DepthConfig(optimizer="adam").lr == 1e-3
    assert canonical_gamma(-0.0) == 0.0 and str(canonical_gamma(-0.0)) == "0.0"
    assert canonical_gamma(np.linspace(-1, 1, 17)[2]) == -0.75
    with pytest.raises(InputError):
        canonical_gamma(1.5)


def test_summary_interval_and_sign():
    s = Summary.of([1.0, 2.0, 3.0, 4.0])
    assert s.mean == 2.5 and s.low < 2.5 < s.high and s.sign == 1
    assert Summary.of([1.0, 2.0, 3.0, 4.0]) == s               # a function of the values
    assert Summary.of([-1.0, 1.0, -2.0, 2.0]).sign == 0       # an interval spanning 0
    assert Summary.of([-1.0, -2.0, -3.0, -2.5]).sign == -1
    # t with 2 degrees of freedom: 3 seeds of -1, -2, -3 do not exclude 0 (the percentile
    # bootstrap did: its resampled means never exceed -1)
    assert Summary.of([-1.0, -2.0, -3.0]).sign == 0


def test_no_verdict_mark_from_fewer_than_five_seeds():
    from oodcalc.depth.table import verdict
    five, four = Summary.of([1.0, 1.1, 0.9, 1.2, 1.0]), Summary.of([1.0, 1.1, 0.9, 1.2])
    assert verdict(five, 2.0).startswith("✓") and verdict(five, -2.0).startswith("✗")
    assert verdict(four, 2.0) == verdict(four, -2.0) == "n = 4: no mark"


def test_paired_ratio():
    shallow = [1.0, 2.0, 3.0, 4.0, 5.0]
    r = Ratio.of(shallow, [1.5 * x for x in shallow])
    assert r.increase == pytest.approx(0.5)
    assert r.low == pytest.approx(0.5) and r.high == pytest.approx(0.5)   # exact pairs
    noisy = Ratio.of(shallow, [1.5 * x + e for x, e in zip(shallow, [1, -1, 0.5, -0.5, 0])])
    assert noisy.low < 0.5 < noisy.high
    assert Ratio.of([-1.0, 0.5], [1.0, 1.0]).increase is None     # no ratio to a mean <= 0
    # a shallow mean whose interval reaches 0 leaves the interval unbounded above
    assert Ratio.of([-1.0, 0.2, 1.5], [1.0, 1.0, 1.0]).high == float("inf")


def test_forgetting_patterns():
    F_k = [[-1, 2], [3, -1], [1, 1], [-1, -1], [-2, 5]]
    assert forgetting_patterns(F_k) == {"only 1": 1, "only 2": 2, "both": 1, "neither": 1,
                                        "F_1 > F_2": 1}


def full_record(parameters):
    """A record of the shape training.run_seed writes (numbers made up)."""
    from fuzz_cases import depth_record
    return depth_record(parameters)


def test_cache_round_trip_and_mismatch(tmp_path):
    cache = Cache(tmp_path)
    parameters = DepthConfig().run_parameters(3, -0.75)
    record = full_record(parameters)
    cache.store(record)
    assert cache.load(parameters) == record
    other = DepthConfig(lr=0.05).run_parameters(3, -0.75)
    assert cache.load(other) is None                    # another protocol: another file
    cache.path(other).write_text(json.dumps(record))    # a file whose parameters differ
    assert cache.load(other) is None
    cache.path(parameters).write_text("{truncated")     # a broken file is recomputed
    assert cache.load(parameters) is None
    assert Cache(tmp_path, enabled=False).load(parameters) is None


@pytest.mark.parametrize("damage", [
    lambda r: json.dumps(r)[:200],                                   # truncated
    lambda r: "[1, 2, 3]", lambda r: "", lambda r: "NaN",
    lambda r: json.dumps({**r, "F": "abc"}),
    lambda r: json.dumps({**r, "F": float("nan")}),                  # NaN in the file
    lambda r: json.dumps({**r, "F_k": [0.1]}),
    lambda r: json.dumps({**r, "finetune": {"T2": 5}}),
    lambda r: json.dumps({**r, "pretrain": {**r["pretrain"], "T1": True}}),
    lambda r: json.dumps(r).replace(f'"T1": {r["pretrain"]["T1"]}', '"T1": ' + "9" * 5000),
    lambda r: b"\x80\x04\x95pickle", lambda r: b"\xff\xfe\x00",
])
def test_damaged_cache_entries_are_recomputed(tmp_path, damage):
    """A cache file that is not what a run writes is never trusted (None: retrained and
    replaced), whatever it holds; the intact record loads (so the check can fail)."""
    cache = Cache(tmp_path)
    parameters = DepthConfig().run_parameters(0, 0.0)
    record = full_record(parameters)
    cache.store(record)
    assert cache.load(parameters) == record
    content = damage(record)
    path = cache.path(parameters)
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    assert cache.load(parameters) is None and cache.rejected == 1
    cache.store(record)                                  # the retrained run replaces it
    assert cache.load(parameters) == record


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_cache_entry_that_is_no_file_is_refused_at_once(tmp_path, kind):
    """A FIFO (would block), /dev/zero (endless) or a directory at an entry's name: one
    line naming --cache-dir, before any training."""
    import os
    cache = Cache(tmp_path)
    parameters = DepthConfig().run_parameters(0, 0.0)
    path = cache.path(parameters)
    {"fifo": lambda: os.mkfifo(path), "zero": lambda: path.symlink_to("/dev/zero"),
     "dir": path.mkdir}[kind]()
    with pytest.raises(InputError, match="--cache-dir: .*not a regular file; remove it"):
        cache.load(parameters)


@pytest.mark.parametrize("where, fragment", [
    ("afile", "a file, not a directory"), ("", "an empty path"),
    ("/proc/sys", "a system directory"), ("afile/sub", "afile is a file")])
def test_bad_cache_dir_is_refused_before_training(tmp_path, capsys, monkeypatch, where,
                                                  fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    assert main(["reproduce", "depth", "--quick", "--cache-dir", where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--cache-dir: got '{where}'" in err and fragment in err


@pytest.mark.parametrize("args, option", [
    (["--eval-prompts", "1000000000000000"], "--eval-prompts"),   # torch: 1e17-byte tensor
    (["--layers", "1000000"], "--layers"), (["--seeds", "1000000000000000"], "--seeds"),
    (["--workers", "100000", "--seeds", "1000"], "--workers"),
    (["--gamma", "-1:1:20000000"], "--gamma")])
@pytest.mark.parametrize("command", [["reproduce", "depth"], ["plot", "depth", "-o", "f.png"]])
def test_requests_over_the_memory_cap_are_refused_first(tmp_path, capsys, monkeypatch, args,
                                                       option, command):
    monkeypatch.setenv("OODCALC_MAX_MEMORY", "8G")
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--cache-dir", "c", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option}: got" in err and "memory cap" in err, err
    assert not (tmp_path / "c").exists()                 # refused before anything


def test_missing_cache_directories_are_created_with_their_parents(tmp_path, monkeypatch):
    """A fresh machine: neither $XDG_CACHE_HOME/oodcalc nor --cache-dir a/b/c exists yet."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert Cache().directory.is_dir()
    assert Cache(str(tmp_path / "a" / "b" / "c")).directory.is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        Cache(str(tmp_path / "f" / "b" / "c"))


def test_json_table_is_valid_json_with_one_seed():
    """One seed has no sd and no usable run has no mean: null in the JSON, never NaN."""
    from oodcalc.depth.table import build_table
    one = DepthConfig(layers=1)
    table = build_table(fake_results({(one, 0, 0.0): (0.1, 0.2), (one, 0, 0.75): None}),
                        [one], [0], [0.0, 0.75])
    data = table.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert data["cells"][0]["F"]["sd"] is None and data["cells"][1]["F"]["mean"] is None
    assert json.loads(text) == data


def fake_results(configs_and_F):
    """Results whose records carry only what the table reads: {(config, seed, γ): F_k}."""
    from oodcalc.depth import Results
    results = Results()
    for (config, seed, gamma), F_k in configs_and_F.items():
        ok = F_k is not None
        record = {"parameters": config.run_parameters(seed, gamma),
                  "pretrain": {"T1": 100, "converged": ok, "diverged": False}}
        if ok:
            record.update(finetune={"T2": 50, "converged": True, "diverged": False},
                          F=sum(F_k), F_k=list(F_k))
        results.records[(config, seed, canonical_gamma(gamma))] = record
    return results


def test_cells_leave_out_failed_runs_and_pair_depths():
    from oodcalc.depth.table import build_table, markdown, summary_markdown
    one, three = DepthConfig(layers=1), DepthConfig(layers=3)
    runs = {(one, 0, -0.75): (0.1, 0.2), (one, 1, -0.75): (0.0, 0.2),
            (one, 2, -0.75): None,                              # pretraining hit the cap
            (three, 0, -0.75): (0.2, 0.25), (three, 1, -0.75): (0.1, 0.2),
            (three, 2, -0.75): (5.0, 5.0)}                      # unpaired: left out of the ratio
    table = build_table(fake_results(runs), [one, three], [0, 1, 2], [-0.75])
    shallow, deep = table.cells
    assert shallow.F.n == 2 and shallow.F.mean == pytest.approx(0.25)
    assert shallow.failed == {"pretraining hit the step cap": 1}
    assert shallow.patterns == {"only 1": 0, "only 2": 1, "both": 1, "neither": 0,
                                "F_1 > F_2": 0}
    assert deep.F.n == 3
    (amp,) = table.amplifications
    assert (amp.shallow, amp.deep, amp.ratio.n) == (1, 3, 2)
    assert amp.ratio.increase == pytest.approx((0.45 + 0.3) / (0.3 + 0.2) - 1)
    assert shallow.paper is paper.figure("tiny-transformer-layers=1-gamma=-0.75")
    assert "1 × pretraining hit the step cap" in markdown(table)
    assert "| 1 | -0.75 |" in summary_markdown(table)


def test_terminal_table_never_cuts_a_number(capsys):
    """Piped, the grid is wide and whole; on a narrow terminal its cells fold. Either way
    every depth is labelled and no number ends in an ellipsis (it used to, piped: rich's
    default 80 columns dropped the layers column and cut every interval)."""
    import io

    from rich.console import Console

    from oodcalc.depth.table import build_table, interval, show
    one, two, three = (DepthConfig(layers=n) for n in (1, 2, 3))
    gammas = [-0.75, 0.0, 0.75]
    runs = {(config, seed, g): (0.0123 * (seed + 1), -0.0456 * g)
            for config in (one, two, three) for seed in range(3) for g in gammas}
    table = build_table(fake_results(runs), [one, two, three], [0, 1, 2], gammas)
    show(table)                                          # stdout is not a terminal here
    piped = capsys.readouterr().out
    assert "…" not in piped and "layers" in piped
    for cell in table.cells:
        assert interval(cell.F) in piped
    narrow = io.StringIO()
    show(table, Console(file=narrow, width=80, highlight=False))
    text = narrow.getvalue()
    assert "…" not in text and "layers" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    grid = [line.split()[0] for line in text.splitlines() if line[:8].strip().isdigit()]
    assert grid == ["1", "2", "3"]


def test_paper_amplification_is_its_own_table_ratio():
    """The paper's +46.4 % is F(3 layers)/F(1 layer) − 1 at γ = −0.75 of its own table."""
    f1 = paper.figure("tiny-transformer-layers=1-gamma=-0.75").value
    f3 = paper.figure("tiny-transformer-layers=3-gamma=-0.75").value
    assert paper.figure("tiny-transformer-depth-amplification").value == pytest.approx(
        f3 / f1 - 1, abs=5e-4)


@pytest.mark.parametrize("args, fragment", [
    (["--arch", "mlp"], "--arch: got 'mlp'"),
    (["--optimizer", "sgd,lbfgs"], "--optimizer"),
    (["--layers", "1,x"], "--layers: got 'x'"),
    (["--gamma", "-2"], "each γ must lie in [-1, 1]"),
    (["--seeds", "0"], "--seeds"),
    (["--eval-prompts", "101"], "even"),
    (["--eps", "nan"], "--eps"),
    (["--ft-steps", "0"], "--ft-steps: got '0'"),
    (["--ft-steps", "1.5"], "--ft-steps"),
    (["-f", "table", "-o", "out.md"], "write a file with --format markdown or json"),
    (["-o", "out.csv"], "a name ending in .md or .json"),
    (["-o", "missing/out.md"], "the directory missing does not exist"),   # before training
])
def test_reproduce_depth_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    assert main(["reproduce", "depth", "--cache-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("oodcalc: error:") and fragment in err


def test_missing_torch_names_the_extra(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch now raises ImportError
    code = main(["reproduce", "depth", "--arch", "attention", "--optimizer", "sgd",
                 "--layers", "1", "--seeds", "1", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert 'pip install "oodcalc[nn]"' in err


# --- with torch -----------------------------------------------------------------------

def strip_timing(records):
    """Records without their wall-clock fields (the only part that may differ)."""
    out = []
    for r in records:
        r = json.loads(json.dumps(r))
        r["pretrain"].pop("seconds")
        r.get("finetune", {}).pop("seconds", None)
        out.append(r)
    return out


def test_tiny_configuration_end_to_end(tmp_path, capsys):
    needs_torch()
    from oodcalc.depth import reproduce
    from oodcalc.depth.table import markdown

    chosen = (configs(["attention"], ["sgd"], [1, 2], **PIPELINE)
              + configs(["standard"], ["adam"], [1], **PIPELINE))
    cache = Cache(tmp_path)
    table = reproduce(chosen, seeds=range(2), cache=cache)
    assert len(table.cells) == len(chosen) * 3
    for cell in table.cells:
        assert cell.F.n == 2 and not cell.failed
        assert cell.paper is not None
        assert cell.theory.F == oc.predict(oc.Setting(oc.parallel_shift([1, cell.gamma]),
                                                      oc.Protocol(eps=0.1))).F
        for run in cell.per_seed:
            assert run["F"] == pytest.approx(sum(run["F_k"]))
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    before, after = np.array(record["source_before"]), np.array(record["source_after"])
    assert record["F_k"] == pytest.approx(((after - before) / 2).tolist())
    assert max(record["pretrain"]["error"]) <= 0.1 and max(record["finetune"]["error"]) <= 0.1
    curve = np.array(record["finetune"]["source_curve"])
    assert curve.shape == (record["finetune"]["T2"] + 1, 2)
    assert [(a.arch, a.shallow, a.deep) for a in table.amplifications] == [("attention", 1, 2)]
    assert "| layers | γ | paper |" in markdown(table)

    # a rerun reads the cache (nothing trained) and prints the same numbers
    from oodcalc.depth import collect
    again = collect(chosen, [0, 1], [-0.75, 0.0, 0.75], cache, workers=1)
    assert again.computed == 0
    assert reproduce(chosen, seeds=range(2), cache=cache).to_dict() == table.to_dict()

    # the CLI reads the same cache; the plot too
    assert main(["reproduce", "depth", "--arch", "attention", "--optimizer", "sgd",
                 "--layers", "1,2", "--seeds", "2", "--cache-dir", str(tmp_path),
                 *PIPELINE_CLI, "-f", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["cells"] == json.loads(json.dumps(table.to_dict()["cells"][:6]))
    assert main(["reproduce", "depth", "--arch", "attention", "--optimizer", "sgd",
                 "--layers", "1,2", "--seeds", "2", "--cache-dir", str(tmp_path),
                 *PIPELINE_CLI]) == 0
    assert "+46.4%" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    target = tmp_path / "depth.png"
    assert main(["plot", "depth", "-o", str(target), "--arch", "attention", "--optimizer",
                 "sgd", "--layers", "1,2", "--seeds", "2", "--gamma", "-0.75,0,0.75",
                 "--cache-dir", str(tmp_path), *PIPELINE_CLI]) == 0
    assert target.read_bytes().startswith(b"\x89PNG")


def test_fixed_length_fine_tuning_runs_exactly_that_many_steps(tmp_path):
    needs_torch()
    from oodcalc.depth import reproduce
    chosen = configs(["attention"], ["sgd"], [1], **PIPELINE, ft_steps=7)
    table = reproduce(chosen, seeds=range(1), gammas=[0.0], cache=Cache(tmp_path))
    cell, = table.cells
    assert cell.T2 == 7 and not cell.failed
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert record["parameters"]["ft_steps"] == 7 and record["finetune"]["T2"] == 7
    assert len(record["finetune"]["source_curve"]) == 8          # steps 0..7
    assert cell.theory.F == oc.predict(oc.Setting(oc.parallel_shift([1, 0.0]),
                                                  oc.Protocol(eps=0.1, ft_steps=7))).F


def test_worker_processes_give_the_same_numbers(tmp_path):
    needs_torch()
    from oodcalc.depth import collect

    config = DepthConfig(arch="attention", optimizer="adam", layers=2, **PIPELINE)
    alone = collect([config], [0, 1], [0.5], Cache(enabled=False), workers=1)
    pooled = collect([config], [0, 1], [0.5], Cache(tmp_path), workers=2)
    assert pooled.computed == 2
    for key, record in alone.records.items():
        assert strip_timing([pooled.records[key]]) == strip_timing([record])


def test_one_layer_attention_sgd_has_the_theorys_signs():
    """Per feature and seed, the sign of F_k is the theory's wherever the theory's F_k is
    not zero (γ = 0 leaves feature 2 untouched in the theory)."""
    needs_torch()
    from oodcalc.depth.table import theory
    from oodcalc.depth.training import run_seed

    config = DepthConfig(arch="attention", optimizer="sgd", layers=1, **TINY)
    gammas = [-0.75, 0.0, 0.75]
    for seed in range(2):
        for gamma, record in zip(gammas, run_seed(config, seed, gammas)):
            expected = theory(gamma, config.eps)
            for ours, predicted in zip(record["F_k"], expected.F_k):
                if abs(predicted) > 1e-9:
                    assert np.sign(ours) == np.sign(predicted), (seed, gamma, record["F_k"])
            if gamma >= 0:
                assert np.sign(record["F"]) == np.sign(expected.F) == -1


def test_same_seed_same_numbers():
    needs_torch()
    from oodcalc.depth.training import run_seed

    config = DepthConfig(arch="standard", optimizer="adam", layers=1, **PIPELINE)
    first = strip_timing(run_seed(config, 5, [-0.75, 0.5]))
    assert strip_timing(run_seed(config, 5, [-0.75, 0.5])) == first
    # the same numbers for a γ whatever else is computed with it
    assert strip_timing(run_seed(config, 5, [0.5]))[0] == first[1]
    # and another seed gives other numbers (the comparisons above can fail)
    assert strip_timing(run_seed(config, 6, [-0.75, 0.5]))[0]["F"] != first[0]["F"]
    # γ = 1 is U = V: the pretrained model already meets the rule, nothing is fine-tuned
    (same,) = run_seed(config, 5, [1.0])
    assert same["finetune"]["T2"] == 0 and same["F"] == 0.0


def test_the_stopping_check_decides_as_the_full_evaluation():
    """``within`` stops evaluating once a feature's partial sum proves e_k > eps; its
    decision is always the full evaluation's, and far above eps it reads one chunk."""
    needs_torch()
    from oodcalc.depth.models import build
    from oodcalc.depth.training import (Design, Evaluation, Prompts, feature_sets, generator,
                                        random_basis)

    gen = generator(0, "data")
    V, _ = feature_sets(random_basis(gen, 15), 0.0)
    evaluation = Evaluation(Prompts.build(V, Design.draw(gen, 4096, 16, 2, 15, balanced=True)), 2)
    model = build("attention", 1, 16, seed=0)
    calls = []
    counted = lambda context, query: calls.append(1) or model(context, query)   # noqa: E731
    error = evaluation.errors(model)
    top = error.max()
    assert np.array_equal(evaluation.within(model, top), error)      # holds at the boundary
    assert evaluation.within(model, top * (1 - 1e-9)) is None        # fails just below it
    calls.clear()
    assert evaluation.within(counted, top / 50) is None
    assert len(calls) == 1                                           # one chunk of 512 sufficed
    calls.clear()
    evaluation.within(counted, top)
    assert len(calls) == 4096 // Evaluation.CHUNK


def masked_reference(model, context, query):
    """The models written the textbook way: the whole sequence [context; query] per layer,
    a mask that lets every position attend to the N context positions only."""
    import torch
    from oodcalc.depth.models import AttentionOnly

    H = torch.cat([context, query[:, None]], 1)
    N = context.shape[1]
    mask = torch.zeros(H.shape[1], H.shape[1], dtype=torch.bool)
    mask[:, N:] = True                                  # nobody attends to the query

    def attend(layer, X):
        logits = layer.q(X) @ layer.k(X).transpose(1, 2) * layer.scale
        weights = torch.softmax(logits.masked_fill(mask, float("-inf")), -1)
        return layer.o(weights @ layer.v(X))

    for block in model.blocks:
        if isinstance(model, AttentionOnly):
            H = H + attend(block, H)
        else:
            H = H + attend(block.attention, block.norm1(H))
            H = H + block.mlp(block.norm2(H))
    if isinstance(model, AttentionOnly):
        return H[:, N, -1]
    return model.head(model.norm(H[:, N]))[:, 0]


@pytest.mark.parametrize("arch", ["attention", "standard"])
def test_models_match_the_masked_textbook_form(arch):
    torch = needs_torch()
    from oodcalc.depth.models import build
    from oodcalc.depth.training import Design, Prompts, feature_sets, generator, random_basis

    gen = generator(0, "data")
    V, _ = feature_sets(random_basis(gen, 15), 0.0)
    prompts = Prompts.build(V, Design.draw(gen, 32, 16, 2, 15))
    model = build(arch, 3, 16, seed=1)
    with torch.no_grad():
        ours = model(prompts.context, prompts.query)
        reference = masked_reference(model, prompts.context, prompts.query)
        assert torch.allclose(ours, reference, atol=1e-5)
        # the context tokens matter (through the masked attention), the query token does not
        other = Prompts.build(V, Design.draw(gen, 32, 16, 2, 15))
        assert not torch.allclose(model(other.context, prompts.query), ours, atol=1e-3)


def test_ctrl_c_with_workers_ends_them_at_once(tmp_path, monkeypatch):
    """Ctrl-C while worker processes train: the workers are ended (not waited for, which
    took minutes) and the interrupt propagates; the main CLI turns it into one line."""
    needs_torch()
    import concurrent.futures
    import multiprocessing
    import time

    from oodcalc.depth.experiment import collect

    def interrupted(futures, *args, **kwargs):
        time.sleep(1)                    # the workers have started their (long) runs
        raise KeyboardInterrupt
        yield
    monkeypatch.setattr(concurrent.futures, "as_completed", interrupted)
    slow = configs(["standard"], ["sgd"], [3], eps=1e-4, max_steps=40_000)  # minutes a run
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        collect(slow, [0, 1], [0.0], Cache(tmp_path), workers=2)
    assert time.monotonic() - start < 30
    # killed; on a loaded machine a worker still loading torch can take seconds to be
    # reaped (seen at load 6), where waiting for its run took minutes
    deadline = time.monotonic() + 15
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not multiprocessing.active_children()


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import importlib

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(importlib.import_module("oodcalc.prediction"), "predict", interrupt)
    assert main(["predict", "--gamma", "1,-0.9"]) == 130
    assert capsys.readouterr().err == "oodcalc: error: interrupted\n"
