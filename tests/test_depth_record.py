"""The depth experiment's record (docs/depth.json) is what the documents are made of: it
was made by this code's protocol version, it holds every run each generated block reads,
it reads back to the same bytes, and a changed run changes the blocks (no torch needed;
tests/test_docs.py regenerates every block from it)."""

from __future__ import annotations

import copy
import json

import pytest

from oodcalc.depth import documents, record
from oodcalc.depth.protocol import PROTOCOL_VERSION
from oodcalc.errors import InputError

FIX = "rerun `python tools/depth_full_run.py --workers 2`, then `python tools/generate_docs.py`"


@pytest.fixture(scope="module")
def saved():
    return record.load(documents.RECORD)


def test_record_is_of_this_code_and_holds_every_block(saved):
    data, results = saved
    assert data["version"] == PROTOCOL_VERSION, (
        f"docs/depth.json holds runs of protocol version {data['version']}, the code makes "
        f"version {PROTOCOL_VERSION}: {FIX}")
    assert data["torch"] and data["threads"] == 1
    for (file, name), (selection, _) in documents.BLOCKS.items():
        assert documents.SELECTIONS[selection].present(results), (file, name, FIX)


def test_record_reads_back_to_its_own_bytes(saved):
    data, results = saved
    text = documents.RECORD.read_text("utf-8")
    assert record.dumps(record.build(results, data["regenerate"])) == text


@pytest.mark.parametrize("block", [("docs/depth.md", "depth-table"),
                                   ("docs/depth.md", "depth-protocols")])
def test_a_changed_run_changes_its_block(saved, block):
    """The blocks are computed from the runs: nudge one run's F and F_1 and the block
    no longer matches."""
    _, results = saved
    selection = documents.SELECTIONS[documents.BLOCKS[block][0]]
    config, seed, gamma = selection.runs()[0]
    changed = copy.deepcopy(results)
    run = changed.records[(config, seed, gamma)]
    run["F"] += 0.01
    run["F_k"][0] += 0.01
    assert documents.generate(changed, *block) != documents.generate(results, *block)


def test_a_malformed_record_is_refused_in_one_line(tmp_path):
    data = json.loads(documents.RECORD.read_text("utf-8"))
    del data["configs"][0]["seeds"][0]["runs"][0]["F_k"]
    bad = tmp_path / "depth.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match="is not a run's record"):
        record.load(bad)
    bad.write_text("{}")
    with pytest.raises(InputError, match="expected a depth record"):
        record.load(bad)


def test_a_missing_run_is_named(saved):
    _, results = saved
    key = documents.TABLE.runs()[-1]
    fewer = copy.deepcopy(results)
    del fewer.records[key]
    with pytest.raises(LookupError, match="needs 1 runs the record does not hold"):
        documents.generate(fewer, "docs/depth.md", "depth-table")


def test_the_tool_reuses_the_records_runs(saved, monkeypatch):
    """tools/depth_full_run.py plans through WithRecord: a run the record holds is served
    from it (not trained again), any other goes to the cache. (On a machine with the
    record's torch: the plain install has none, so its version is set here.)"""
    from oodcalc.depth import Cache, protocol
    from oodcalc.depth.experiment import plan
    data, results = saved
    monkeypatch.setattr(protocol, "torch_version", lambda: data["torch"])
    cache = record.WithRecord(Cache(enabled=False), results)
    selection = documents.LADDER_RUNS
    found, tasks = plan(selection.configs, selection.seeds, selection.gammas, cache)
    assert not tasks and set(found.records) == set(selection.runs())
    config, seed, gamma = selection.runs()[0]
    other = config.run_parameters(seed, gamma) | {"seed": 99}
    assert cache.load(other) is None


def test_plot_depth_draws_the_record_without_torch(tmp_path, monkeypatch, capsys):
    """`plot depth` needed torch although docs/depth.json holds every run it draws: with
    torch unimportable and an empty cache it now draws from the record; told to ignore the
    record (--record none), the same plot needs torch and says so."""
    import sys
    pytest.importorskip("matplotlib")
    from oodcalc.cli import main
    monkeypatch.setitem(sys.modules, "torch", None)            # import torch fails
    argv = ["plot", "depth", "--arch", "attention", "--optimizer", "sgd", "--layers", "1",
            "--cache-dir", str(tmp_path / "cache")]
    figure = tmp_path / "depth.png"
    assert main([*argv, "-o", str(figure)]) == 0, capsys.readouterr().err
    assert figure.stat().st_size > 10_000
    assert not list((tmp_path / "cache").iterdir())           # nothing trained, nothing stored
    capsys.readouterr()
    assert main([*argv, "-o", str(tmp_path / "other.png"), "--record", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs torch" in err[0]
    assert not (tmp_path / "other.png").exists()


def test_a_record_answers_by_protocol_not_by_torch_build(saved):
    """FromRecord matches a run made by torch 2.13.0+cpu to the same run asked for on a
    machine without torch; a different protocol (another seed) finds nothing."""
    _, results = saved
    (config, seed, gamma), run = next(iter(results.records.items()))
    asked = config.run_parameters(seed, gamma) | {"torch": "missing", "machine": "other"}

    class Empty:
        def load(self, parameters):
            return None

    cache = record.FromRecord(Empty(), results)
    assert cache.load(asked) is run
    assert cache.load(asked | {"seed": 10_000}) is None
