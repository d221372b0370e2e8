"""The real-text experiment as (seed, fold) tasks (oodcalc.real.tasks): a rerun reads the
finished fits from the task cache, a run with half of them cached computes the rest (in
two local processes), a dask cluster computes them too, and every way gives the serial
run's JSON exactly (a tiny random BERT on generated reviews, as tests/test_real.py). The
identity cannot hold vacuously: two fits' results swapped, or one cached loss edited,
change the JSON. (An unreachable --scheduler is tests/test_inference.py's: the same
options.scheduler_client.)"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from oodcalc.errors import InputError

from oodcalc.real.top import Training

from test_real import TINY, Notes, generated_reviews, tiny_encoder

#: 2 seeds x 2 folds (4 fits) of short trainings, with an arm beside plain (its fits and
#: theory cached too; project-value: its theory is plain's, l2's would triple a fit's time)
SMALL = replace(TINY, seeds=2, folds=2, permutations=3, bootstrap=100,
                training=Training(epochs=3, lr=3e-3, batch=8),
                finetune=Training(epochs=1, lr=3e-3, batch=8))


def dumped(result) -> str:
    return json.dumps(result, sort_keys=True)


def small():
    from oodcalc.depth.arms import parse
    return replace(SMALL, arms=parse("project-value"))


def run(cache=None, **kwargs):
    from oodcalc.real.experiment import run as run_experiment
    notes = Notes()
    result = run_experiment(tiny_encoder(), generated_reviews(), "f" * 64, small(),
                            cache_dir=cache, progress=notes, **kwargs)
    assert notes.done == notes.totals                       # the progress bar fills up
    return dumped(result), notes.notes


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The serial run, every fit computed and stored."""
    cache = tmp_path_factory.mktemp("cache")
    text, notes = run(cache)
    assert notes == ["hidden states computed and cached"]
    return cache, text


def entries(cache):
    return sorted((cache / "real-tasks").glob("*.json"))


def copy_of(cache, tmp_path, keep=lambda record: True):
    """A new cache directory holding the hidden states and the fits ``keep`` picks."""
    (tmp_path / "real-tasks").mkdir(parents=True)
    for f in cache.glob("hidden-*.npz"):
        shutil.copy(f, tmp_path / f.name)
    for f in entries(cache):
        if keep(json.loads(f.read_text())):
            shutil.copy(f, tmp_path / "real-tasks" / f.name)
    return tmp_path


def test_rerun_and_half_cached_run_in_processes_give_the_serial_json(first, tmp_path):
    cache, text = first
    assert len(entries(cache)) == 4
    again, notes = run(copy_of(cache, tmp_path / "all"))
    assert notes == ["hidden states read from the cache",
                     "4 of 4 fits read from the task cache"]
    assert again == text
    half = copy_of(cache, tmp_path / "half", lambda r: r["parameters"]["seed"] == 0)
    assert len(entries(half)) == 2
    # seed 1's two fits in two local processes (serial resumption: the damaged-entry test)
    resumed, notes = run(half, workers=2)
    assert notes[1] == "2 of 4 fits read from the task cache" and resumed == text
    assert len(entries(half)) == 4                  # the fits computed now are stored
    for f in entries(half):                          # written as JSON, no pickle
        record = json.loads(f.read_text())
        assert set(record) == {"parameters", "result"}
        assert record["parameters"]["format"] >= 1 and "seeds" not in record["parameters"]


def test_swapped_fits_or_an_edited_cached_loss_change_the_json(first, tmp_path, monkeypatch):
    """Perturbations: the identity above is not vacuous."""
    cache, text = first
    edited = copy_of(cache, tmp_path / "edited")
    path = entries(edited)[0]
    record = json.loads(path.read_text())
    record["result"]["forget"]["rotation θ = π"]["both"][0] += 0.25
    path.write_text(json.dumps(record))
    assert run(edited)[0] != text                  # the rerun reads the cache, no recompute

    import oodcalc.real.tasks as tasks
    collect = tasks.collect

    def swapped(*args, **kwargs):
        fits, read = collect(*args, **kwargs)
        fits[(0, 1)], fits[(1, 0)] = fits[(1, 0)], fits[(0, 1)]
        return fits, read

    monkeypatch.setattr(tasks, "collect", swapped)
    assert run(copy_of(cache, tmp_path / "swapped"))[0] != text


def test_damaged_or_foreign_entry_is_recomputed_a_special_one_refused(first, tmp_path):
    from oodcalc.real.tasks import TaskCache
    cache, text = first
    damaged = copy_of(cache, tmp_path / "damaged")
    files = entries(damaged)
    files[0].write_text(files[0].read_text()[:100])                    # truncated
    result, notes = run(damaged)
    assert notes[1:] == ["3 of 4 fits read from the task cache",
                         "1 damaged or foreign task-cache entry recomputed"]
    assert result == text
    assert json.loads(files[0].read_text()) == json.loads(entries(cache)[0].read_text())
    # a record filed under another fit's name, or one missing a review, is not used
    store = TaskCache(damaged / "real-tasks")
    record = json.loads(files[1].read_text())
    parameters = record["parameters"]
    assert store.load(parameters) == record
    foreign = {**record, "parameters": {**parameters, "fold": 1 - parameters["fold"]}}
    files[1].write_text(json.dumps(foreign))
    assert store.load(parameters) is None and store.rejected == 1
    files[1].unlink()
    files[1].mkdir()
    with pytest.raises(InputError, match="is a directory, not a regular file; remove it"):
        run(damaged)


def test_task_record_shape_check_catches_each_defect(first):
    """well_formed_task on a stored record, and on it with one defect at a time."""
    import copy
    import math

    import numpy as np

    from oodcalc.real.tasks import Shared, shape_of, well_formed_task
    cache, _ = first
    record = json.loads(entries(cache)[0].read_text())
    s, f = record["parameters"]["seed"], record["parameters"]["fold"]
    reviews = generated_reviews()
    domains = np.array([r.domain for r in reviews])
    labels = np.array([r.label for r in reviews])
    shared = Shared(None, None, None, labels, domains)
    shape = shape_of(small(), shared, s, f)
    good = record["result"]
    assert well_formed_task(good, shape, s, f)
    assert not well_formed_task(good, shape, s, 1 - f)
    assert not well_formed_task(good, {**shape, "arms": 0}, s, f)

    def broken(edit):
        bad = copy.deepcopy(good)
        edit(bad)
        return well_formed_task(bad, shape, s, f)

    assert not broken(lambda r: r["rot"]["all"][1].append(0.0))
    assert not broken(lambda r: r["rot"].pop("scenario 1"))
    assert not broken(lambda r: r["gamma_eff"]["all"].__setitem__(0, math.nan))
    assert not broken(lambda r: r["theory_real"]["all"]["raw"].pop())
    assert not broken(lambda r: r["forget_ood"]["rotation θ = π"]["both"].append(1.0))
    assert not broken(lambda r: r["theory_forget_real"]["π"].__setitem__("raw", "x"))
    assert not broken(lambda r: r["arms"]["rotation θ = π"][0]["fit"]["curve"][0].pop())
    assert not broken(lambda r: r["arms"]["rotation θ = π"][0].__setitem__("theory", [1.0]))
    assert not broken(lambda r: r.pop("shift"))
    assert not broken(lambda r: r["test_pos"].reverse())          # another fold's reviews


def test_a_local_cluster_gives_the_serial_json(first, tmp_path):
    cache, text = first
    distributed = pytest.importorskip("dask.distributed")
    # threads in this process (2 workers, 1 thread each; fits take turns, as they share
    # torch's generator): worker processes would each import torch. Seed 0's fits are
    # cached, seed 1's run on the cluster.
    remote = copy_of(cache, tmp_path, lambda r: r["parameters"]["seed"] == 0)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  host="127.0.0.1", protocol="tcp",
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        result, notes = run(remote, client=client)
    assert result == text and notes[1] == "2 of 4 fits read from the task cache"
    assert len(entries(remote)) == 4                   # stored on this side


@pytest.mark.parametrize("args, fragment", [
    (["--scheduler", "localhost"], "expected a scheduler address PROTOCOL://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:1", "--seeds", "0"], "--seeds: got '0'"),  # first
    (["--input", "saved.json", "--no-cache"], "cannot be combined with --no-cache"),
    (["--input", "saved.json", "--scheduler", "tcp://127.0.0.1:1"],
     "cannot be combined with --scheduler"),
])
def test_cli_scheduler_and_cache_options_are_one_line(args, fragment, capsys, tmp_path,
                                                       monkeypatch):
    from oodcalc.cli import main
    monkeypatch.chdir(tmp_path)
    extra = [] if "--input" in args else ["--cache-dir", str(tmp_path)]
    code = main(["reproduce", "real", *extra, *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("oodcalc: error: ")
    assert fragment in err
