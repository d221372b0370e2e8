"""Nothing committed depends on the last bits of floating point: regenerated on another CPU
(simulated by tools/other_machine.py, which moves every result of the machine-dependent
functions by a few units in the last place), every generated text reads the same, and no
committed document prints a round-off residual as a value."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from oodcalc.claims import CLAIMS
from oodcalc.symbolic import documents
from oodcalc.symbolic.render import to_latex, to_markdown

from test_docs import load_tool

ROOT = Path(__file__).resolve().parent.parent
other_machine = load_tool("other_machine")

C9 = "oodcalc.claims.claim9_step_size"


def _9b_documents() -> dict[str, str]:
    """9b's Markdown and LaTeX, derived afresh (not the per-process cache)."""
    claim = next(c for c in CLAIMS if c.id == "9b")
    derivation = claim.load("derive")()
    stem = documents.file_stem(claim)
    return {stem + ".md": to_markdown(derivation, claim),
            stem + ".tex": to_latex(derivation, claim)}


@pytest.mark.parametrize("shift", [4 * 2.0 ** -52, -3 * 2.0 ** -52, 1e-13, -1e-12])
def test_the_optimiser_s_last_bits_do_not_reach_9b_s_documents(monkeypatch, shift):
    """9b prints the measured sup of the curvature beside c₂; the search ends within
    ~1e-16 of c₂ and where exactly depends on the CPU. Moved by a few ulps (or by 1e-12,
    far more than any machine moves it), the committed documents stay as they are."""
    import oodcalc.claims.claim9_step_size as c9
    measured = c9.measured_sup()
    monkeypatch.setattr(c9, "measured_sup", lambda: {K: v * (1 + shift) if K % 2 else v + shift
                                                     for K, v in measured.items()})
    for name, text in _9b_documents().items():
        assert text == (documents.DEFAULT_DIR / name).read_text(encoding="utf-8"), name


def test_a_real_gap_still_reaches_9b_s_documents(monkeypatch):
    """The perturbation test above could pass by printing nothing of the measurement: a
    sup 1e-6 away from c₂ must change the documents (and fail the check)."""
    import oodcalc.claims.claim9_step_size as c9
    measured = c9.measured_sup()
    monkeypatch.setattr(c9, "measured_sup", lambda: {K: v + 1e-6 for K, v in measured.items()})
    fresh = _9b_documents()
    assert any(text != (documents.DEFAULT_DIR / name).read_text(encoding="utf-8")
               for name, text in fresh.items())
    from oodcalc.symbolic.render import markdown_text      # the prose, typeset
    assert markdown_text("max |sup_K − c₂| >= 1e-9") in next(iter(fresh.values()))


# --- the simulated other machine ----------------------------------------------------------

def test_the_other_machine_moves_what_it_says():
    """The nudge is real (a residual printed to two digits changes, an exact identity of
    IEEE arithmetic does not), ufunc methods still work, and everything is restored."""
    exp, log = np.exp, math.log
    residual = lambda: f"{float(np.exp(np.log(3.0))) - 3.0:.1e}"       # noqa: E731
    here = residual()
    with other_machine.other_machine(ulps=2):
        assert np.exp(0.5) != exp(0.5) and math.log(3.0) != log(3.0)
        assert residual() != here
        assert np.add.reduce(np.ones(3)) == 3.0 and np.sqrt(2.0) ** 2 == 2.0000000000000004
        buffer = np.ones(4)
        np.exp(buffer, out=buffer)
        assert np.all(buffer != math.e) and abs(buffer - math.e).max() < 1e-15
    assert np.exp is exp and math.log is log
    assert residual() == here


def test_no_nudged_function_outlives_the_block():
    """A lambdify made inside the block gets the nudged exp; sympy keeps its namespace for
    the process, so without the refill every later lambdify (a mutation test's 10⁶-step
    recurrence, after this file in the same session) ran through the wrapper: slow and
    nudged. And a namespace filled before the block is refilled inside it, or the block's
    lambdified code would escape the nudge (as it did when this file ran late)."""
    import sympy as sp
    x = sp.Symbol("x")
    sp.lambdify(x, sp.exp(x), "numpy")       # the namespace is filled before the block, too
    with other_machine.other_machine(ulps=2):
        inside = sp.lambdify(x, sp.exp(x), "numpy")
        assert other_machine.nudged_leftovers()          # the leak the refill undoes
    assert other_machine.nudged_leftovers() == []
    after = sp.lambdify(x, sp.exp(x), "numpy")
    assert after(0.5) == np.exp(0.5) and inside.__globals__["exp"] is not np.exp
    assert after.__globals__["exp"] is np.exp


def test_every_generated_text_reads_the_same_on_another_machine():
    """Every file tools/generate_docs.py writes, the notebook's outputs and every
    derivation document, regenerated with the machine-dependent functions nudged by 2 ulps
    (the derivations run again), read as committed. (Each generated block is regenerated
    so in test_docs.py, where the same run checks that it is current.)"""
    found = other_machine.differences(ulps=2, blocks=False)
    assert not found, "\n".join(f"{label}:\n{diff}" for label, diff in found.items())


def test_a_residual_in_a_generated_text_is_found(monkeypatch):
    """The comparison above can fail: a block that prints a round-off residual (exp∘log
    of 3 minus 3, to two digits) reads differently on the simulated machine."""
    generate_docs = load_tool("generate_docs")
    block = generate_docs.Block("README.md", "predict-example",
                                lambda: f"{float(np.exp(np.log(3.0))) - 3.0:.1e}")
    monkeypatch.setattr(generate_docs, "BLOCKS", [block])
    committed = block.generate()                    # as this machine wrote it
    monkeypatch.setattr(generate_docs, "current", lambda b, root=ROOT: committed)
    assert other_machine.differences(["README.md:predict-example"], ulps=2)


# --- what committed documents print -------------------------------------------------------

#: a number at round-off scale (|x| < 1e-12) in scientific notation with a measured
#: mantissa (1.7e-16, 9e-19): a residual printed as a value. A power of ten (1e-15) is a
#: bound or a tolerance, and so is any number after "<" or "≤".
_ROUNDOFF = re.compile(r"(?<![\w.])(?!1e)(\d(?:\.\d+)?)e-(1[3-9]|[2-9]\d)\b")
#: (superscript digits are not one Unicode range: ¹²³ are Latin-1, ⁰ and ⁴-⁹ U+2070 on;
#: [³-⁹] would take ⁰ as well, and flag 10⁻¹⁰)
_ROUNDOFF_UNICODE = re.compile(r"(?<![\w.])(?!1·)(\d(?:\.\d+)?)\s?[·×]\s?10⁻(¹[³⁴-⁹]|[²³⁴-⁹][⁰¹²³⁴-⁹])")
_BOUND_BEFORE = re.compile(r"(<|≤|<=|\\le|\\leq|\\textless\{\})\s*$")

#: committed documents that are regenerated from the code or from a committed record
#: (docs/performance.md is a dated benchmark record of one machine: its figures are
#: measurements, not regenerated; it is read, never rewritten, by the tests).
DOCUMENTS = sorted([*Path(ROOT, "derivations").glob("*.md"),
                    *Path(ROOT, "derivations").glob("*.tex"),
                    ROOT / "README.md", ROOT / "examples" / "tour.ipynb",
                    *Path(ROOT, "docs", "guide").glob("*.md"),
                    *[p for p in Path(ROOT, "docs").glob("*.md") if p.name != "performance.md"]])


def roundoff_values(text: str) -> list[str]:
    """Round-off-scale numbers ``text`` prints as values, with what stands before them."""
    found = []
    for match in [*_ROUNDOFF.finditer(text), *_ROUNDOFF_UNICODE.finditer(text)]:
        before = text[max(0, match.start() - 24):match.start()]
        if not _BOUND_BEFORE.search(before) and float(match.group(1)) != 1:
            found.append(f"…{before}{match.group(0)}")
    return found


def test_the_roundoff_lint_finds_a_residual():
    assert roundoff_values("max |sup_K − c₂| = 1.7e-16; loose") == ["…max |sup_K − c₂| = 1.7e-16"]
    assert roundoff_values("simulator to 1.9e-17") == ["…simulator to 1.9e-17"]
    assert roundoff_values("(residual 9e-19)") == ["…(residual 9e-19"]
    assert roundoff_values("an F within 1.9·10⁻¹⁷ (float64)") == ["…an F within 1.9·10⁻¹⁷"]
    assert roundoff_values("1·10⁻¹⁵, < 3·10⁻¹⁶, 2·10⁻⁹, 9.5·10⁻¹⁰") == []
    assert roundoff_values("a gap of 4.4·10⁻¹⁶") == ["…a gap of 4.4·10⁻¹⁶"]
    assert roundoff_values("residual < 4e-15, |x| ≤ 2e-14, within 1e-13, 1.0e-16") == []
    assert roundoff_values("a GD step of 1e-3 or 2.5e-9, 1e-300") == []


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_committed_document_prints_a_roundoff_residual(path):
    found = roundoff_values(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.relative_to(ROOT)} prints round-off residuals as values (they "
                       f"differ from machine to machine; print the bound they are checked "
                       f"against): {found}")
