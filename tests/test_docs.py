"""Generated parts of the docs stay true: every block and file that
tools/generate_docs.py produces is regenerated and compared; the docs cite the paper and
nothing outside the repository."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_tool(name: str):
    """A script of tools/ as a module (they are not part of the package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate_docs = load_tool("generate_docs")
other_machine = load_tool("other_machine")
FIX = "python tools/generate_docs.py"


@pytest.mark.parametrize("block", generate_docs.BLOCKS, ids=lambda b: f"{b.file}:{b.name}")
def test_generated_block_is_current(block):
    """Regenerated as on another machine (tools/other_machine.py: the machine-dependent
    functions nudged by 2 ulps), the block reads as committed: one regeneration checks
    that it is current and that it does not print the last bits of floating point. Only
    when it differs is it regenerated as this machine computes, to say which it is."""
    committed = generate_docs.current(block)
    with other_machine.other_machine(ulps=2):
        elsewhere = block.generate().strip()
    if elsewhere == committed:
        return
    assert block.generate().strip() == committed, (
        f"{block.file} is stale in its '{block.name}' block: run `{FIX}`")
    pytest.fail(f"{block.file}'s '{block.name}' block is current here but reads differently "
                f"on another machine (it prints round-off):\n"
                f"{other_machine.diff(committed, elsewhere)}")


def test_the_block_check_tells_a_stale_block_from_a_roundoff_one(monkeypatch):
    """The check above can fail both ways, and says which: a block printing a round-off
    residual (exp∘log of 3 minus 3) is current here and differs on another machine; a
    block whose text changed is stale; a block that prints neither passes."""
    import numpy as np
    residual = generate_docs.Block("README.md", "predict-example",
                                   lambda: f"{float(np.exp(np.log(3.0))) - 3.0:.1e}")
    committed = {"README.md:predict-example": residual.generate().strip()}
    monkeypatch.setattr(generate_docs, "current",
                        lambda b, root=ROOT: committed[f"{b.file}:{b.name}"])
    with pytest.raises(pytest.fail.Exception, match="reads differently on another machine"):
        test_generated_block_is_current(residual)
    stale = generate_docs.Block("README.md", "predict-example", lambda: "new text")
    committed["README.md:predict-example"] = "old text"
    with pytest.raises(AssertionError, match="is stale in its 'predict-example' block"):
        test_generated_block_is_current(stale)
    committed["README.md:predict-example"] = "new text"
    test_generated_block_is_current(stale)


def test_generated_files_are_current():
    """(None at present: the notebook, executed, is checked below.)"""
    for name, generate in generate_docs.FILES.items():
        assert (ROOT / name).read_text(encoding="utf-8") == generate(), (
            f"{name} is stale: run `{FIX}`")


def test_a_stale_block_is_found_and_regenerated(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "theory.md", tmp_path / "docs" / "theory.md")
    block = next(b for b in generate_docs.BLOCKS if b.file == "docs/theory.md")
    path = tmp_path / block.file
    text = path.read_text(encoding="utf-8")
    start = text.index(f"<!-- {block.name}:start -->")
    path.write_text(text[:start] + text[start:].replace("|", "¦", 3), encoding="utf-8")
    assert generate_docs.current(block, tmp_path) != block.generate().strip()
    assert generate_docs.update(block, tmp_path) is True
    assert path.read_text(encoding="utf-8") == text
    assert generate_docs.update(block, tmp_path) is False


def test_a_missing_block_is_named():
    block = generate_docs.Block("docs/theory.md", "no-such-block", lambda: "")
    with pytest.raises(LookupError, match="no-such-block"):
        generate_docs.current(block)


def test_a_new_column_is_one_line(monkeypatch):
    columns = [*generate_docs.THEORY_CLAIM_COLUMNS, ("key", lambda c: c.key)]
    table = generate_docs.claims_table(columns)()
    assert table.splitlines()[0].endswith("| key |")
    assert "| conservation |" in table


def test_the_ledger_record_is_a_full_run_of_the_current_registry():
    """The guide's ledger comes from docs/ledger.json (`oodcalc verify --json`): a claim
    added, renamed or relabelled without re-running verify fails here, as a README table
    typed by hand once did (12 rows against verify's 14)."""
    from oodcalc.claims import CLAIMS
    data = json.loads(generate_docs.LEDGER_FILE.read_text(encoding="utf-8"))
    assert data["mode"] == "full", f"re-run `{generate_docs.LEDGER_COMMAND}` (not --quick)"
    rows = data["rows"]
    assert [(r["claim"], r["title"]) for r in rows] == [(c.id, c.title) for c in CLAIMS], (
        f"docs/ledger.json is not the registry's ledger: re-run `{generate_docs.LEDGER_COMMAND}`")
    for row, claim in zip(rows, CLAIMS):
        assert row["derivation"] is not None and row["derivation"]["expected"] == claim.level
    block = generate_docs.ledger_block()
    assert f"verify: 3/{len(CLAIMS)} claim 3 " in block
    table = [line for line in block.splitlines() if line.startswith("|")]
    assert len(table) == len(CLAIMS) + 2          # heading, rule, one line a row


TOUR = "examples/tour.ipynb"


def committed_tour() -> dict:
    return json.loads((ROOT / TOUR).read_text(encoding="utf-8"))


def test_the_notebook_follows_the_script_and_has_its_outputs():
    """A reader browsing the notebook sees its outputs (it was committed without any):
    every code cell that prints or ends in an expression has them, none is an error, and
    nothing in it records when or where it ran."""
    script = generate_docs.NOTEBOOKS[TOUR]
    fresh = json.loads(generate_docs.notebook_from_script(script))
    text = (ROOT / TOUR).read_text(encoding="utf-8")
    assert generate_docs.without_outputs(text) == fresh, f"{TOUR} is stale: run `{FIX}`"
    code = [c for c in committed_tour()["cells"] if c["cell_type"] == "code"]
    source = script.read_text(encoding="utf-8")
    assert len(code) == source.count("# %%\n") and all("".join(c["source"]) in source
                                                        for c in code)
    for cell in code:
        body = "".join(cell["source"])
        speaks = "print(" in body or not body.rstrip().splitlines()[-1].startswith(
            ("import", "from", " ", ")"))
        assert bool(cell["outputs"]) == speaks, body[:80]
        assert all(o["output_type"] != "error" for o in cell["outputs"])
        assert cell["metadata"] == {}                       # no timings
    assert committed_tour()["metadata"]["language_info"] == {"name": "python"}
    assert "iopub" not in text and "execute_input" not in text      # no timestamps


_run_cells = generate_docs.run_cells
_comparable = generate_docs.comparable


def test_the_notebooks_outputs_are_what_its_cells_compute():
    """Every committed output, re-made by running the cells here (no Jupyter needed):
    the printed text and each table's and formula's Markdown and HTML, character for
    character (the tour prints bounds, not round-off digits)."""
    code = [c for c in committed_tour()["cells"] if c["cell_type"] == "code"]
    for cell, fresh in zip(code, _run_cells(code)):
        assert _comparable(cell["outputs"]) == fresh, (
            f"{TOUR}: a cell's outputs changed: run `{FIX}`\n" + "".join(cell["source"])[:200])


def test_the_output_check_sees_a_changed_number():
    code = [c for c in committed_tour()["cells"] if c["cell_type"] == "code"]
    cell = next(c for c in code if "T1 = " in "".join(c["outputs"][0].get("text", "")
                                                       if c["outputs"] else ""))
    edited = json.loads(json.dumps(cell))
    edited["outputs"][0]["text"] = "".join(edited["outputs"][0]["text"]).replace("357", "358")
    index = code.index(cell)
    fresh = _run_cells(code[:index + 1])[index]
    assert _comparable(cell["outputs"]) == fresh and _comparable(edited["outputs"]) != fresh


@pytest.mark.skipif(not generate_docs.can_execute(),
                    reason='nbclient and ipykernel are not installed (pip install -e '
                           '".[notebook]"): the notebook is not re-executed in Jupyter')
def test_the_notebook_reexecutes_in_jupyter_to_its_committed_self():
    fresh = generate_docs.executed(generate_docs.notebook_from_script(
        generate_docs.NOTEBOOKS[TOUR]))
    assert fresh == (ROOT / TOUR).read_text(encoding="utf-8"), f"{TOUR} is stale: run `{FIX}`"


def test_the_times_table_comes_from_the_measurements():
    data = json.loads(generate_docs.TIMES_FILE.read_text(encoding="utf-8"))
    table = generate_docs.times_table()
    for row in data["commands"]:
        assert f"`{row['command']}`" in table
        assert generate_docs.format_seconds(row["cpu_seconds"]) in table
        assert generate_docs.format_seconds(row["wall_seconds"]) in table
    measured = {row["key"] for row in data["commands"]}
    assert measured == set(load_tool("measure_readme_times").COMMANDS)


# --- the project stands alone ---------------------------------------------------------------

#: Files outside the repository, as the docs must never name them. Written with character
#: classes so that this file does not match itself.
OUTSIDE = re.compile(r"shared[/]|MODEL[.]md|seeds[/]")


def tracked_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return done.stdout.split()


def test_nothing_refers_to_files_outside_the_repository():
    hits = {}
    for name in tracked_files():
        path = ROOT / name
        if path.suffix in {".png", ".pdf", ".npz", ".npy"} or not path.is_file():
            continue
        found = OUTSIDE.findall(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            hits[name] = found
    assert not hits, f"refer to files outside the repository: {sorted(hits)}"


def test_the_outside_pattern_matches_what_it_must():
    assert OUTSIDE.search("see " + "shared" + "/" + "MODEL" + ".md")
    assert OUTSIDE.search("the " + "seeds" + "/000.txt file")
    assert not OUTSIDE.search("the paper, arXiv 2609.36448")


def test_the_performance_figures_come_from_a_full_run(tmp_path, monkeypatch):
    """The performance paragraph (docs/guide/timing.md) is read from docs/performance.md: a
    number changed there changes the paragraph; a smoke-test record (all.py --quick, its headings carrying
    options) is refused with the reason, not quoted."""
    text = generate_docs.PERFORMANCE_FILE.read_text(encoding="utf-8")
    sections = generate_docs.benchmark_sections(text.replace(
        "## `python benchmarks/bench_peers.py`", "## `python benchmarks/bench_peers.py --n 41`"))
    assert "bench_peers.py" in sections and "bench_margins.py" in sections
    changed = tmp_path / "performance.md"
    ratio = re.search(r"starts in ([0-9.]+)×", generate_docs.performance_summary()).group(1)
    changed.write_text(text.replace(f"{ratio}× | <= 3×", "9.99× | <= 3×"), encoding="utf-8")
    monkeypatch.setattr(generate_docs, "PERFORMANCE_FILE", changed)
    assert "starts in 9.99×" in generate_docs.performance_summary()
    # the peers' figures are dated as their section was measured: a rerun with --only
    # carries its own date, else the whole run's (whichever the record holds now)
    whole = re.sub(r"Measured alone \(`python benchmarks/all.py --only bench_peers.py`\).*\n",
                   "", text)
    changed.write_text(whole, encoding="utf-8")
    header = re.search(r"from (\S+ \S+) to (\S+ \S+),", text)
    assert f"{header.group(1)}–{header.group(2)}, load average" in \
        generate_docs.performance_summary().replace("\n", " ")
    heading = "## `python benchmarks/bench_peers.py`\n"
    changed.write_text(whole.replace(heading, heading + "\nMeasured alone (`python benchmarks/"
                                     "all.py --only bench_peers.py`) on 2031-01-02 03:04 UTC.\n"),
                       encoding="utf-8")
    assert "2031-01-02 03:04 UTC (measured alone)" in \
        generate_docs.performance_summary().replace("\n", " ")
    changed.write_text(text.replace("`python benchmarks/all.py` from",
                                    "`python benchmarks/all.py` --quick from"), encoding="utf-8")
    with pytest.raises(ValueError, match="smoke test"):
        generate_docs.performance_summary()


#: an interval as the docs quote it: ΔF [low, high], three decimals, either minus sign
QUOTED_INTERVAL = re.compile(r"[+−-]\d\.\d{3} \[[+−-]\d\.\d{3}, [+−-]\d\.\d{3}\]")


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def unquoted(prose: str, block: str) -> list[str]:
    """The intervals ``prose`` quotes that its generated ``block`` does not hold."""
    held = block.replace("−", "-")
    return [q for q in QUOTED_INTERVAL.findall(prose) if q.replace("−", "-") not in held]


def _ladder_findings() -> tuple[str, str]:
    depth = (ROOT / "docs/depth.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    prose = _between(depth, "### The ladder's full run: every arm", "<!-- ladder-arms:start -->")
    bullet = _between(readme, "- Beyond one layer", "\n")
    return prose + bullet, _between(depth, "<!-- ladder-arms:start -->", "<!-- ladder-arms:end -->")


def test_the_ladder_findings_quote_their_record():
    """The prose of docs/depth.md's arms findings and the README's bullet quote intervals of
    the generated block (itself regenerated from docs/ladder_arms.json above), and their
    counts are the record's."""
    prose, block = _ladder_findings()
    assert len(QUOTED_INTERVAL.findall(prose)) >= 10
    assert unquoted(prose, block) == []
    record = json.loads((ROOT / "docs/ladder_arms.json").read_text(encoding="utf-8"))
    params = record["parameters"]
    runs = len(params["arms"]) * len(params["gammas"]) * len(params["seeds"]) * len(
        {(r["rung"], r["layers"]) for r in record["rows"]})
    assert f"{runs:,} runs" in prose and "seeds 0–9" in prose
    replay = [c for r in record["rows"] if r["arm"]["name"] == "replay"
              for c in [r["versus_plain"], *r["matched_versus_plain"]] if c is not None]
    assert all(c["mean"] < 0 for c in replay)
    kept = sum(bool(c["bh_rejected"]) for c in replay)
    assert f"all {len(replay)} of its cells" in prose and f"{kept} of them kept by BH" in prose


def test_a_misquoted_interval_is_found():
    prose, block = _ladder_findings()
    quoted = QUOTED_INTERVAL.findall(prose)[0]
    wrong = quoted[:-2] + str((int(quoted[-2]) + 1) % 10) + "]"
    assert unquoted(prose.replace(quoted, wrong), block) == [wrong]
