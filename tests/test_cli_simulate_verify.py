import json
import re
from io import StringIO

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console

from oodcalc import checks
from oodcalc.claims import CLAIMS
from oodcalc.cli import main
from oodcalc.prediction import pretrain_logits


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_population_human(capsys):
    code, out, err = run(capsys, "simulate", "--gamma", "1,-0.9", "--rows", "3")
    assert code == 0 and err == ""
    # full-Q GD must stop where the exact K×K dynamics stop (357 steps for ε = 0.01, η = 0.1)
    T1 = int(pretrain_logits(2, 0.01, 0.1, 10**6).steps[0])
    for fragment in ("population GD", f"T1 = {T1}", "Trajectories", "fine-tune", "F_k"):
        assert fragment in out


def test_simulate_prompts_json_with_trajectories(capsys):
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "-s", "prompts", "--N", "8",
                       "--batch", "64", "--seed", "2", "--json", "--trajectories")
    assert code == 0
    data = json.loads(out)
    assert data["parameters"]["simulator"]["N"] == 8
    assert data["parameters"]["simulator"]["resample"] is True
    assert {"pretrain", "finetune_ood", "finetune_source_loss"} <= data["trajectories"].keys()
    assert len(data["trajectories"]["pretrain"]) == data["pretrain"]["T1"] + 1


def test_simulate_compare(capsys):
    code, out, _ = run(capsys, "simulate", "--theta", "pi/6", "--K", "3", "--compare", "--json")
    assert code == 0
    data = json.loads(out)
    assert {"theory", "simulation", "differences"} <= data.keys()
    diffs = {d["field"]: d for d in data["differences"]}
    assert diffs["pretrain.T1"]["max_abs"] == 0
    assert diffs["ood.beta"]["max_abs"] < 1e-10 and diffs["finetune.z_ood"]["max_abs"] < 1e-10
    assert diffs["pretrain.alpha_star"]["simulation"] is None   # theory-only field
    code, out, _ = run(capsys, "simulate", "--gamma", "1,-0.9", "--compare", "-s", "prompts",
                       "--N", "8", "--batch", "64", "--fixed-sample")
    assert code == 0 and "field by field" in out and "F[k=2].trend" in out


@pytest.mark.parametrize("args, fragment", [
    (["--gamma", "1,-0.9", "--N", "8"], "--N: got '8'; only --simulator prompts"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--N", "0"], "--N: got '0'"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--batch", "x"], "--batch: got 'x'"),
    (["--gamma", "1,-0.9", "-s", "prompts", "--holdout", "100"], "--stop heldout"),
    (["--gamma", "1,-0.9", "-s", "nope"], "--simulator"),
    (["--gamma", "1,2"], "[-1, 1]"),
    ([], "choose exactly one"),
])
def test_simulate_bad_input(capsys, args, fragment):
    code, out, err = run(capsys, "simulate", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("oodcalc: error: ") and fragment in err


def test_simulate_stuck_run_is_exit_1(capsys):
    code, _, err = run(capsys, "simulate", "--gamma", "1,-0.9", "--max-steps", "5")
    # refused before the first step (predict's estimate), named as the command line names it
    assert code == 1 and err.count("\n") == 1 and "more than --max-steps = 5" in err


def test_verify_one_claim(capsys):
    code, out, err = run(capsys, "verify", "--quick", "--claim", "1")
    assert code == 0 and err.startswith("verify: 1/1 claim 1 (Aggregated attention): PASS, ")
    assert "Aggregated attention" in out and "PASS" in out and "Tolerances" in out
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "aggregated-attention", "--json")
    data = json.loads(out)
    assert code == 0 and data["passed"] and data["rows"][0]["verdict"] == "PASS"
    assert data["rows"][0]["population"]["max_abs"] <= checks.EXACT_TOL


def test_verify_fail_exits_1(capsys, monkeypatch):
    from oodcalc.claims import claim1_attention

    def failing(ctx):
        return (checks.PopulationCheck("forced", 1.0, 1.0, "<= 0", False), None, ["forced"])
    monkeypatch.setattr(claim1_attention, "check", failing)
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "1")
    assert code == 1 and "FAIL" in out


def test_verify_refuted_exits_0_and_a_lost_counterexample_fails(capsys, monkeypatch):
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "8b", "--json")
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["verdict"] == "REFUTED" and row["claim"] == "8b"
    assert any("(0.5, -0.9, -0.9)" in d and "reproduced" in d
               for d in row["population"]["details"])
    from oodcalc.claims import claim8_forgetting
    monkeypatch.setattr(claim8_forgetting, "COUNTEREXAMPLES", ((1.0, -0.9, 0.5),))
    code, out, _ = run(capsys, "verify", "--quick", "--claim", "8b", "--json")
    assert code == 1 and json.loads(out)["rows"][0]["verdict"] == "FAIL"


@pytest.mark.parametrize("args, fragment", [
    (["--claim", "14"], "--claim: got '14'"),
    (["--claim", "nonsense"], "--claim: got 'nonsense'"),
    (["--fast"], "No such option"),
])
def test_verify_bad_input(capsys, args, fragment):
    code, out, err = run(capsys, "verify", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err


# --- verify: the table at any width, and progress on stderr -------------------------------

def table_part(out: str) -> str:
    """The ledger's table: from its header to the Tolerances heading."""
    start = out.index("\n", out.index("(SE).")) + 1
    return out[start:out.index("Tolerances")]


@pytest.mark.parametrize("columns", ["80", None], ids=["COLUMNS=80", "piped"])
def test_verify_table_is_whole_at_80_columns_and_piped(capsys, monkeypatch, quick_ledger,
                                                       columns):
    """Every claim id and verdict whole on its row's first line, no ellipsis, nothing over
    80 columns at COLUMNS=80; stderr has one progress line per finished row, stdout none.
    The rows are quick_ledger's (the same run_claim on the same shared context): the
    command's loop, progress and rendering run, its checks are not run a second and third
    time (45 s each; `oodcalc verify --quick` itself runs in the guide's test)."""
    from oodcalc import verify as verify_module
    rows = {row.claim: row for row in quick_ledger.rows}
    monkeypatch.setattr(verify_module, "run_claim",
                        lambda claim, ctx, derive=None: rows[claim.id])
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run(capsys, "verify", "--quick")
    assert code == 0
    table = table_part(out)
    assert "…" not in table and "..." not in table
    verdicts = {r.claim: r.verdict for r in quick_ledger.rows}
    assert [c.id for c in CLAIMS] == list(verdicts)
    for claim_id, verdict in verdicts.items():
        assert re.search(rf"^ *{claim_id} .*\b{verdict} *$", table, re.M), (claim_id, table)
    if columns == "80":
        assert max(cell_len(line) for line in out.splitlines()) <= 80
    else:   # piped: one line per row
        assert len([line for line in table.splitlines() if re.match(r" *\d+[a-z]? ", line)]) \
            == len(CLAIMS)
    lines = err.splitlines()
    assert len(lines) == len(CLAIMS)
    for i, (line, claim) in enumerate(zip(lines, CLAIMS), 1):
        assert line.startswith(f"verify: {i}/{len(CLAIMS)} claim {claim.id} ({claim.title}): "
                               f"{verdicts[claim.id]}, ") and line.endswith(" s")
    assert "verify:" not in out


def test_verify_json_stays_clean_with_progress_on_stderr(capsys, quick_ledger):
    code, out, err = run(capsys, "verify", "--quick", "--claim", "8", "--json")
    data = json.loads(out)   # the whole of stdout is the JSON
    assert code == 0 and [r["claim"] for r in data["rows"]] == ["8a", "8b", "8c", "8d", "8e"]
    assert [line.split(" claim ")[0] for line in err.splitlines()] == \
        [f"verify: {i}/5" for i in range(1, 6)]


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
def test_verify_table_never_cuts_an_id_or_a_verdict(quick_ledger, width):
    """Stacked below the width of one line per row, wide above it; ids and verdicts whole
    and no line over the width at every width."""
    from oodcalc.cli.verify import render
    console = Console(file=StringIO(), width=width, highlight=False)
    render(quick_ledger, False, console=console)
    out = console.file.getvalue()
    table = table_part(out)
    assert "…" not in table
    for r in quick_ledger.rows:
        assert re.search(rf"^ *{r.claim} .*\b{r.verdict} *$", table, re.M), (width, r.claim)
    assert max(cell_len(line) for line in out.splitlines()) <= width
    header = table.split("─")[0].strip("\n").splitlines()
    assert (len(header) == 1) == (width >= 120), (width, header)   # wide, else stacked
    if width >= 80:   # titles wrap outside their formulas
        # "K = 2" stands whole in every title and level that has it (8a, 8e, 11a, 11c)
        whole = sum(c.title.endswith("K = 2") for c in CLAIMS) + \
            sum(c.level.startswith("K = 2") for c in CLAIMS)
        assert "K > 2" in table and table.count("K = 2") == whole, table


def test_count_progress_draws_a_bar_on_a_terminal_and_lines_otherwise():
    from oodcalc.cli.progress import count_progress
    terminal = Console(file=StringIO(), force_terminal=True, width=100)
    with count_progress("verify", lines=True, console=terminal) as progress:
        progress(0, 2, "")
        progress(1, 2, "claim 1 (Aggregated attention): PASS, 1.5 s")
        progress(2, 2, "claim 2 (Conservation law): PASS, 3.5 s")
    drawn = terminal.file.getvalue()
    assert "verify" in drawn and "2/2" in drawn and "claim 2 (Conservation law)" in drawn
    assert "\x1b[" in drawn                      # a live bar (cursor control), not lines
    assert "verify: 1/2" not in drawn
    for lines in (True, False):
        piped = Console(file=StringIO())
        with count_progress("verify", lines=lines, console=piped) as progress:
            for done in range(3):
                progress(done, 2, f"row {done}")
        assert piped.file.getvalue() == ("verify: 1/2 row 1\nverify: 2/2 row 2\n" if lines
                                         else "")


def test_verify_failing_after_some_rows_ends_with_one_error_line(capsys, monkeypatch):
    """Progress lines are no diagnostics: a run that fails midway prints the rows done so
    far, then the one error line (PROGRESS_LINE tells them apart, as the fuzz test does)."""
    from oodcalc.claims import claim2_conservation
    from oodcalc.cli.progress import PROGRESS_LINE
    from oodcalc.errors import ComputationError

    def broken(ctx):
        raise ComputationError("forced failure")
    monkeypatch.setattr(claim2_conservation, "check", broken)
    code, out, err = run(capsys, "verify", "--quick", "--claim", "1", "--claim", "2")
    lines = err.splitlines()
    assert code == 1 and out == "" and len(lines) == 2
    assert PROGRESS_LINE.match(lines[0]) and lines[0].startswith("verify: 1/2 claim 1 ")
    assert lines[1] == "oodcalc: error: forced failure" and not PROGRESS_LINE.match(lines[1])


def test_simulate_json_summarises_large_matrices_and_arrays_hold_both_reports(
        tmp_path, capsys, monkeypatch):
    from oodcalc import report
    monkeypatch.setattr(report, "FULL_MATRIX_K", 2)    # K = 3 counts as large (K = 17: 9 s)
    npz = tmp_path / "sim.npz"
    assert main(["simulate", "--theta", "0.5", "--K", "3", "--compare", "--json",
                 "--arrays", str(npz)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["simulation"]["matrices"]["full"] is False
    assert out["theory"]["matrices"]["full"] is False
    assert out["simulation"]["pretrain"]["z"]["shape"] == [3, 3]
    with np.load(npz, allow_pickle=False) as saved:
        assert "pretrain.z" in saved.files and "theory.pretrain.z" in saved.files
        # the full-Q simulator and the theory agree on the T1 logits
        np.testing.assert_allclose(saved["pretrain.z"], saved["theory.pretrain.z"], atol=1e-10)
