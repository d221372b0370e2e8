"""The symbolic engine: every registry entry's derivation runs, its checks pass, the level
it earns from its decisive checks is the level the registry promises, and the generated
documents in derivations/ are current. (The mutation tests are in test_mutations.py.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import sympy as sp

from oodcalc.claims import CLAIMS, get_claim, get_claims
from oodcalc.errors import InputError
from oodcalc.symbolic import documents
from oodcalc.symbolic.core import (EXPLICIT, NUMERIC, PAPER, PROSE, REFUTED, SYMBOLIC, Check,
                                   certify_nonnegative, coefficients_nonnegative, is_zero,
                                   is_zero_rational, level_of, prose_lemmas,
                                   simplex_nonnegative)
from oodcalc.symbolic.model import Column, column_symbols, conditional_error
from oodcalc.symbolic.render import tex_text, to_latex, to_markdown


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"claim{c.id}")
def test_derivation_earns_the_registry_level(claim):
    d = documents.derivation_of(claim.id)
    assert d.id == claim.id and d.steps and d.checks
    assert not d.failed(), d.failed()
    assert d.level == claim.level          # computed from the checks, never declared
    assert tuple(c.what for c in prose_lemmas(d.checks)) == claim.lemmas   # listed as such
    decisive = [c for c in d.checks if c.decisive]
    if claim.level == SYMBOLIC:
        assert decisive and all(c.method == SYMBOLIC for c in decisive)
    if claim.level == PAPER:
        assert not decisive and any(c.method == NUMERIC for c in d.checks)
    assert d.refutes == claim.refutes


def test_the_issue_s_symbolic_k_claims():
    """Claims 1, 2, 3, 5, 7 and claim 8's criterion are derived with K a Symbol."""
    for claim_id in ("1", "2", "3", "5", "7", "8c"):
        assert get_claim(claim_id).level == SYMBOLIC


def test_level_of_follows_the_weakest_decisive_check():
    sym = Check("a", "x", SYMBOLIC, True, decisive=True)
    assert level_of([sym]) == SYMBOLIC
    assert level_of([sym, Check("b", "x", EXPLICIT, True, decisive=True, ks=(2, 3, 4))]) \
        == "K = 2..4"
    assert level_of([sym, Check("c", "x", NUMERIC, True, decisive=True)]) == NUMERIC
    assert level_of([Check("d", "x", SYMBOLIC, True)]) == PAPER          # nothing decisive
    assert level_of([Check("e", "x", SYMBOLIC, False, decisive=True)]).startswith("not")
    assert level_of([sym], refutes=True) == REFUTED
    prose = Check("f", "a lemma argued in prose", PROSE, True, decisive=True)
    assert level_of([sym, prose]) == "symbolic K + lemma in prose"
    assert level_of([sym, Check("g", "x", EXPLICIT, True, decisive=True, ks=(2,)), prose]) \
        == "K = 2 + lemma in prose"
    assert level_of([sym, Check("h", "x", PROSE, True)]) == SYMBOLIC   # not decisive


def test_nonnegativity_certificates_can_fail():
    """The inequality checks are decision procedures that refuse a false inequality."""
    a, b, r, Q = sp.symbols("a b r Q", nonnegative=True)
    x, y = sp.symbols("x y", real=True)
    assert coefficients_nonnegative(a * b + 2 * r, [a, b, r])
    assert not coefficients_nonnegative(a * b - r, [a, b, r])
    assert coefficients_nonnegative(a + b, [a, b], strict=True)
    assert not coefficients_nonnegative(a * b, [a, b], strict=True, positive=[a])
    assert certify_nonnegative((x - y) ** 2 + 2 * x * y, a + b, {a: x ** 2, b: y ** 2})
    assert not certify_nonnegative((x - y) ** 2, a + b, {a: x ** 2, b: y ** 2})  # wrong identity
    assert not certify_nonnegative(x ** 2 - y ** 2, a - b, {a: x ** 2, b: y ** 2})  # sign
    S = a ** 2 + b ** 2 + Q                                 # Σ a_m² on the simplex a + b + r = 1
    assert simplex_nonnegative(2 - (2 * b + a - S), [a, b, r], {Q: 2})
    assert not simplex_nonnegative(1 - (2 * b + a - S), [a, b, r], {Q: 2})
    assert not simplex_nonnegative(a * b - sp.Rational(1, 5), [a, b, r])


def test_registry_lookup():
    assert [c.id for c in get_claims("8")] == ["8a", "8b", "8c", "8d"]
    assert get_claim("8b").key == "forgetting-paper-k3" and get_claim("conservation").id == "2"
    with pytest.raises(InputError):
        get_claim("8")                     # names several parts
    with pytest.raises(InputError):
        get_claims("10")


def test_zero_tests_detect_non_identities():
    """The exact decision procedures behind the checks are not vacuous."""
    zs = column_symbols(4)
    e = conditional_error(zs, 0)
    assert is_zero_rational(sp.Add(*[sp.diff(e, x) for x in zs]), zs)
    assert not is_zero_rational(sp.Add(*[sp.diff(e, x) for x in zs[1:]]), zs)
    col = Column("k", "n")
    assert is_zero(col.d("k") + 2 * col.a["k"] * col.error)
    assert not is_zero(col.d("k") + 2 * col.a["n"] * col.error)


def test_column_encoding_matches_the_definition():
    """The symbolic-K encoding, with the rest given explicit entries, is e_k itself."""
    col = Column("k", "n")
    for K in (2, 3, 5):
        subs, rest = col.explicit(K)
        zs = column_symbols(K)
        encoded = col.error.xreplace(subs).xreplace({col.z["k"]: zs[0], col.z["n"]: zs[1]})
        full = [zs[0], zs[1], *rest]
        assert is_zero_rational(encoded - conditional_error(full, 0), full)
        assert not is_zero_rational(encoded - conditional_error(full, 1), full)


def test_derivation_documents_are_current():
    stale = documents.stale()
    assert not stale, (f"derivations/ is stale ({', '.join(stale)}); regenerate with "
                       "`python -m oodcalc.symbolic.documents`")


def test_tex_text_refuses_unknown_characters():
    assert tex_text("α ≥ 0, v̄ and 50% of x_1") == r"$\alpha$ $\geq$ 0, $\bar{v}$ and 50\% of x\_1"
    with pytest.raises(KeyError):
        tex_text("☃")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_documents_compile(tmp_path):
    for claim in CLAIMS:
        d = documents.derivation_of(claim.id)
        tex = tmp_path / f"claim{claim.id}.tex"
        tex.write_text(to_latex(d, claim), encoding="utf-8")
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                              tex.name], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stdout[-2000:]
        assert (tmp_path / f"claim{claim.id}.pdf").exists()


def test_markdown_shows_level_decisive_step_and_math():
    claim = get_claim("3")
    md = to_markdown(documents.derivation_of("3"), claim)
    assert "$$" in md and "**Level: symbolic K.**" in md
    assert f"**Decisive step.** {claim.decisive_step}" in md and "★" in md
