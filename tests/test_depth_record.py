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
