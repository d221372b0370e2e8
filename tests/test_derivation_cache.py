"""The ledger's derivation cache (oodcalc/symbolic/cache.py): an outcome is reused only for
the same code, and a damaged, foreign or unusable entry costs the time, never the answer."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from oodcalc.claims import get_claim
from oodcalc.symbolic import cache

CHEAP = get_claim("7")      # a derivation of a fraction of a second


def test_a_cold_run_stores_and_a_warm_run_reads(tmp_path):
    cold = cache.outcome(CHEAP, tmp_path)
    assert not cold.cached and cold.failed == () and cold.level == CHEAP.level
    (entry,) = tmp_path.glob("claim7-*.json")
    assert json.loads(entry.read_text())["key"] == cache.code_key(CHEAP)
    warm = cache.outcome(CHEAP, tmp_path)
    assert warm.cached and (warm.level, warm.checks, warm.failed) == \
        (cold.level, cold.checks, cold.failed)


def test_a_stored_failure_is_read_back_as_a_failure(tmp_path):
    cold = cache.outcome(CHEAP, tmp_path)
    (entry,) = tmp_path.glob("claim7-*.json")
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "level": "not established (a decisive check failed)",
                                 "failed": ["source-view"]}))
    warm = cache.outcome(CHEAP, tmp_path)
    assert warm.cached and warm.failed == ("source-view",) and warm.level != cold.level


@pytest.mark.parametrize("damage", ["garbage", "another key", "another claim", "bad field",
                                    "a directory", "a FIFO", "too large"])
def test_a_damaged_or_foreign_entry_is_recomputed(tmp_path, damage):
    cache.outcome(CHEAP, tmp_path)
    (entry,) = tmp_path.glob("claim7-*.json")
    data = json.loads(entry.read_text())
    entry.unlink()
    if damage == "garbage":
        entry.write_bytes(b"\x00{not json")
    elif damage == "another key":
        entry.write_text(json.dumps({**data, "key": "0" * 64}))
    elif damage == "another claim":
        entry.write_text(json.dumps({**data, "claim": "8b"}))
    elif damage == "bad field":
        entry.write_text(json.dumps({**data, "failed": "rate"}))
    elif damage == "a directory":
        entry.mkdir()
    elif damage == "a FIFO":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(entry)
    else:
        entry.write_text(" " * (cache.MAX_ENTRY_BYTES + 1) + json.dumps(data))
    again = cache.outcome(CHEAP, tmp_path)
    assert not again.cached and again.failed == () and again.level == CHEAP.level


def test_an_unusable_directory_costs_only_the_time(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    result = cache.outcome(CHEAP, blocker / "derivations")
    assert not result.cached and result.level == CHEAP.level and blocker.is_file()


def test_the_key_follows_the_code_the_derivation_runs(tmp_path, monkeypatch):
    """Claim 8e's key covers its module and what it imports (claim 7's CLAIMED, the
    symbolic engine), however deep the import sits, and nothing else."""
    names = {str(p.relative_to(cache.PACKAGE_ROOT)) for p in cache.closure(
        get_claim("8e").module)}
    assert {"claims/claim8e_long_finetuning.py", "claims/claim7_finetune_projection.py",
            "symbolic/core.py", "theory.py"} <= names
    assert not any(n.startswith(("real/", "depth/", "cli/")) for n in names)
    copy = tmp_path / "oodcalc"
    shutil.copytree(cache.PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "PACKAGE_ROOT", copy)
    claim = get_claim("8e")
    before = cache.code_key(claim)
    with open(copy / "real" / "plots.py", "a", encoding="utf-8") as f:   # not imported
        f.write("\n# an edit elsewhere\n")
    assert cache.code_key(claim) == before
    path = copy / "claims" / "claim7_finetune_projection.py"        # imported in a function
    text = path.read_text(encoding="utf-8")
    wrong = text.replace("g_n * g_k * W_nk,", "-g_n * g_k * W_nk,")
    assert wrong != text
    path.write_text(wrong, encoding="utf-8")
    assert cache.code_key(claim) != before


def test_the_cache_lives_where_the_others_do(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.default_directory() == tmp_path / "oodcalc" / "derivations"
