"""`oodcalc derive`, `oodcalc predict --precision` and the mpmath closed forms."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata

import mpmath
import numpy as np
import pytest

from oodcalc import theory
from oodcalc.cli import main
from oodcalc.model import conditional_errors
from oodcalc.symbolic import documents, highprec


def test_derive_list(capsys):
    assert main(["derive", "--list"]) == 0
    out = capsys.readouterr().out
    for key in ("conservation", "forgetting-criterion", "step-size"):
        assert key in out
    for level in ("symbolic K", "K = 2", "refuted", "rests on the paper"):
        assert level in out
    assert "Decisive steps argued in prose, not derived:" in out and "lemma in prose" in out


def test_derive_list_at_80_columns(capsys, monkeypatch):
    """At 80 columns the key and the decisive step sit under the title (five columns left
    the step a few letters wide); every line fits, every claim is there with its level."""
    from oodcalc.claims import CLAIMS
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["derive", "--list"]) == 0
    out = capsys.readouterr().out
    width = [sum(not unicodedata.combining(ch) for ch in line) for line in out.splitlines()]
    assert max(width) <= 80                        # v̄ is two code points, one column
    flat = " ".join(" ".join(line.strip("│ ").split()) for line in out.splitlines())
    for c in CLAIMS:
        assert f"({c.key})" in flat.replace("( ", "("), c.id
    assert "decisive step: the token softmax of a prompt" in flat
    assert "┃ key" not in out


def test_derive_list_shows_every_cell_as_written(capsys, monkeypatch):
    # rich read "[t, t + φ(H)(m_t − m_0)]" in 8e's decisive step as a style tag and dropped it
    from oodcalc.claims import CLAIMS
    monkeypatch.setenv("COLUMNS", "3000")           # one line per row: cells are not wrapped
    assert main(["derive", "--list"]) == 0
    out = capsys.readouterr().out
    for c in CLAIMS:
        for cell in (c.title, c.level, c.decisive_step):
            assert cell in out, (c.id, cell)
    assert "[t, t + φ(H)(m_t − m_0)]" in out


def test_derive_shows_progress_on_a_terminal_only(capsys):
    # every claim takes about a minute and a half: a terminal sees which claim is derived
    import io

    from rich.console import Console

    from oodcalc.claims import get_claims
    from oodcalc.cli.derive import derive_all
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    chosen = get_claims("7") + get_claims("8b")
    derived = derive_all(chosen, console=terminal)
    assert [c.id for _, c in derived] == ["7", "8b"] and all(d.passed for d, _ in derived)
    shown = terminal.file.getvalue()
    assert "derive" in shown and "2/2" in shown
    piped = Console(file=io.StringIO(), width=100)          # not a terminal: nothing
    derive_all(chosen, console=piped)
    assert piped.file.getvalue() == ""
    assert main(["derive", "7", "--format", "latex"]) == 0   # the output is the document
    out, err = capsys.readouterr()
    assert out.startswith(r"\documentclass") and err == ""


@pytest.mark.parametrize("fmt,marker", [("text", "Level: symbolic K"),
                                        ("markdown", "$$"), ("latex", r"\documentclass")])
def test_derive_formats(capsys, fmt, marker):
    assert main(["derive", "corollary", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert marker in out and "Two failure cases" in out


def test_derive_number_selects_every_part(capsys):
    assert main(["derive", "8", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert all(f"# Claim 8{p}:" in out for p in "abcd")


def test_derive_bad_input(capsys):
    assert main(["derive", "99"]) == 2
    assert "claim" in capsys.readouterr().err
    assert main(["derive", "2", "--format", "pdf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--format" in err


def test_derive_write(tmp_path, capsys):
    assert main(["derive", "--write", str(tmp_path)]) == 0
    assert (tmp_path / "claim2-conservation.tex").exists()
    assert (tmp_path / "claim8b-forgetting-paper-k3.md").exists()
    assert (tmp_path / "README.md").exists()


def test_derive_write_keeps_what_the_user_had(tmp_path, capsys, monkeypatch):
    """A user's own README.md or claim1-notes.md in the directory is neither replaced nor
    removed (it was: README.md overwritten, every claim*-*.* not generated deleted); the
    refusal comes before the minutes of deriving, and a directory oodcalc wrote is
    rewritten and pruned as before."""
    from oodcalc.cli import derive
    (tmp_path / "README.md").write_text("my notes\n")
    monkeypatch.setattr(derive, "derive_all", lambda _: pytest.fail("derived before refusing"))
    assert main(["derive", "--write", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--write" in err and "README.md" in err
    assert (tmp_path / "README.md").read_text() == "my notes\n"

    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "claim1-notes.md").write_text("mine\n")
    (ours / "claim99-renamed.md").write_text(f"<!-- {documents.MARK} -->\n")
    monkeypatch.setattr(documents, "render_all", lambda: {n: f"% {documents.MARK}\n"
                                                          for n in documents.file_names()})
    documents.write(ours)
    assert (ours / "claim1-notes.md").read_text() == "mine\n"          # not ours: kept
    assert not (ours / "claim99-renamed.md").exists()                    # ours, stale: gone
    assert documents.MARK in (ours / "README.md").read_text()
    documents.write(ours)                                                # ours: rewritten


def test_alpha_star_agrees_with_float64_where_float64_works():
    for K, eps in ((2, 0.01), (4, 1e-3), (10, 1e-8)):
        assert float(highprec.alpha_star(K, eps)) == pytest.approx(theory.alpha_star(K, eps),
                                                                   rel=1e-13)


def test_high_precision_where_float64_fails():
    # float64 misses the threshold error at eps = 1e-30 by >10 %; mpmath hits it
    K, eps = 4, mpmath.mpf("1e-30")
    float_error = conditional_errors(theory.symmetric_logits(K, theory.alpha_star(K, 1e-30)))
    assert abs(float_error[0] / 1e-30 - 1) > 0.1
    values = highprec.closed_forms(np.eye(K).tolist(), eps, 60)
    with mpmath.workdps(60):
        assert abs(values["train_error_at_alpha_star"] / eps - 1) < mpmath.mpf(10) ** -45
    # huge weights: exp(−β) underflows/overflows in float64, not in mpmath
    values = highprec.closed_forms([[1, 0], [0, -1]], "1e-1500", 30)   # eps < float64 range
    assert values["step_size_bound"] > 0 and mpmath.isfinite(values["step_size_bound"])
    assert float(values["alpha_star"]) > 709
    z = theory.ood_logits(np.diag([1.0, -1.0]), float(values["alpha_star"]))
    assert theory.step_size_bounds(z).min() == 0.0          # float64 underflows


def test_predict_precision(capsys):
    assert main(["predict", "--gamma", "1,-0.9", "--eps", "1e-30", "--precision", "40",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["digits"] == 40 and out["parameters"]["K"] == 2
    assert out["parameters"]["eps"].startswith("1.0e-30")
    # recipe: K = 2 gives δ = √ε = 1e-15 and α* = ½ ln((1 − δ)/δ); with mpmath at 40 digits
    # mpmath.mpf(1)/2 * mpmath.log((1 - mpmath.mpf('1e-15')) / mpmath.mpf('1e-15'))
    assert out["alpha_star"].startswith("17.26938819745534213013493591013")
    assert main(["predict", "--gamma", "1,-0.9", "--precision", "50"]) == 0
    assert "α*_(K,ε)" in capsys.readouterr().out
    assert main(["predict", "--gamma", "1,-0.9", "--precision", "two"]) == 2
    assert main(["predict", "--gamma", "1,-0.9", "--precision", "20", "--eps", "0"]) == 2


def test_predict_default_path_stays_light():
    code = ("import sys; from oodcalc.cli import main; "
            "main(['predict', '--gamma', '1,-0.9', '--json']); "
            "sys.stderr.write(str(sorted(m for m in ('sympy', 'mpmath') if m in sys.modules)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip() == "[]"
