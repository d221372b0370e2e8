"""Claims 13e–13g (fine-tuning and forgetting with overlapping features) at the command
line and in the ledger. Their mutation tests are tests/mutations_overlap.py's tables, run by
tests/test_mutations.py."""

from __future__ import annotations

from rich.cells import cell_len

from cli_run import run


def _fits(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if cell_len(line) > width]


def test_derive_13f_fits_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, "derive", "13f")
    assert code == 0 and not err and not _fits(out), _fits(out)
    words = " ".join(out.split())                  # wrapped lines joined
    assert "Level: K = 2" in words and "2√5 − 1" in words and "5√6 − 1" in words


def test_verify_13f_fits_80_columns(capsys, monkeypatch, quick_context):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, "verify", "--quick", "--claim", "13f", "--details")
    assert code == 0 and not _fits(out), _fits(out)
    assert "PASS" in out and "no FAIL" in out


def test_the_grid_s_counts(quick_context):
    """`oodcalc verify --quick --claim 13f --details`: over 35 (ρ, γ_2) at γ_1 = 1 every
    first step has C_k's sign; the whole run's sign differs once (ρ = 0.8, γ_2 = 0.7: the
    first step falls, the run forgets); the paper's rule misses 5 of 70 features."""
    from oodcalc import verify
    from oodcalc.claims import get_claim
    row = verify.run_claim(get_claim("13f"), quick_context)
    details = "\n".join(row.population.details)
    assert row.verdict == "PASS"
    assert "first step: 70/70 features of C_k's sign" in details
    assert "sign F_k = sign C_k for 69/70 features; the paper's rule right for 65/70" in details
    assert "ρ = +0.8, γ = (1, +0.7), k = 2: C_k = -2.32e-05 but F_k = +1.19e-04" in details
