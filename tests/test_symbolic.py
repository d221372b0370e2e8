"""The symbolic engine: every registry entry's derivation runs, its checks pass, the level
it earns from its decisive checks is the level the registry promises, and the generated
documents in derivations/ are current. (The mutation tests are in test_mutations.py.)"""

from __future__ import annotations

import io
import re
import shutil
import subprocess

import numpy as np
import pytest
import sympy as sp

from oodcalc.claims import CLAIMS, get_claim, get_claims
from oodcalc.errors import InputError
from oodcalc.symbolic import documents
from oodcalc.symbolic.core import (EXPLICIT, NUMERIC, PAPER, PROSE, REFUTED, SYMBOLIC, Check,
                                   certify_nonnegative, coefficients_nonnegative, eq, is_zero,
                                   is_zero_rational, level_of, prose_lemmas,
                                   simplex_nonnegative)
from oodcalc.symbolic.model import Column, column_symbols, conditional_error
from oodcalc.symbolic.render import formula_latex, markdown_text, math_latex, math_text, \
    print_text, prose_parts, tex_text, to_latex, to_markdown
from rich.cells import cell_len
from rich.console import Console
from sympy.printing.latex import greek_letters_set


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


def test_the_measurement_s_nelder_mead_finds_known_minima():
    """9b's measured sup rests on this search: it must find a curved valley's floor and a
    shifted quadratic's, and report the value at the point (not the start)."""
    from oodcalc.claims.claim9_step_size import _nelder_mead
    rosenbrock = lambda x: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2  # noqa: E731
    assert _nelder_mead(rosenbrock, np.array([-1.2, 1.0])) < 1e-14
    bowl = lambda x: float(((x - np.arange(4.0)) ** 2).sum()) + 3.0          # noqa: E731
    assert abs(_nelder_mead(bowl, np.zeros(4)) - 3.0) < 1e-12


def test_registry_lookup():
    assert [c.id for c in get_claims("8")] == ["8a", "8b", "8c", "8d", "8e"]
    assert get_claim("8b").key == "forgetting-paper-k3" and get_claim("conservation").id == "2"
    with pytest.raises(InputError):
        get_claim("8")                     # names several parts
    with pytest.raises(InputError):
        get_claims("14")
    assert [c.key for c in get_claims("10")] == ["interventions"]
    assert [c.id for c in get_claims("11")] == ["11a", "11b", "11c"]
    assert [c.id for c in get_claims("12")] == ["12a", "12b", "12c"]
    assert get_claim("advice-projection").id == "12c" and get_claim("12b").refutes
    assert [c.id for c in get_claims("13")][:4] == ["13a", "13b", "13c", "13d"]
    assert get_claim("overlap-t1").id == "13c" and get_claim("overlap-loss").number == 13


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
    assert (tex_text("α ≥ 0, v̄ and 50% of x_1")
            == r"$\alpha \ge 0$, $\bar{v}$ and 50\% of $x_{1}$")
    with pytest.raises(KeyError):
        tex_text("☃")
    with pytest.raises(KeyError):
        tex_text("x_1 ≥ é")


# --- typesetting: formulas in prose are math, one printer for symbols -----------------------

def test_prose_formulas_are_found_and_the_words_between_them_kept():
    text = ("each margin follows m ← m + 2ηe^m/(1 + e^m)³, and 1 − e_k ~ 2e^{α(2 − c)} for "
            "c_k < 0 (a K = 2 column) with oodcalc.theory.flow_time; c_k/4 ∈ [−1/16, 0).")
    parts = prose_parts(text)
    assert "".join(piece for _, piece in parts) == text          # nothing lost or added
    assert [p for k, p in parts if k == "math"] == [
        "m ← m + 2ηe^m/(1 + e^m)³", "1 − e_k ~ 2e^{α(2 − c)}", "c_k < 0", "K = 2",
        "c_k/4 ∈ [−1/16, 0)"]
    assert [p for k, p in parts if k == "code"] == ["oodcalc.theory.flow_time"]
    assert prose_parts("claim 8b (9b: 3m)") == [("text", "claim 8b (9b: "), ("math", "3m"),
                                                 ("text", ")")]
    assert ("text", ", and ") in parts and "a " in "".join(p for k, p in parts if k == "text")


def test_formulas_are_set_by_sympy_symbol_printer():
    # the reported defects: prose markup, <= split by breqn, \mathrm{phi}, 2^(j+2)
    assert formula_latex("−γ_kγ_m0 > γ_k²") == r"-\gamma_{k}\gamma_{m0} > \gamma_{k}^{2}"
    assert formula_latex("L_{v_k}") == "L_{v_{k}}"
    assert formula_latex("e^m") == "e^{m}" and formula_latex("2^j") == "2^{j}"
    assert formula_latex("t <= T(m_t) <= phi(H)") == r"t \le T(m_{t}) \le \phi(H)"
    assert formula_latex("φ(x)") == r"\varphi(x)" and formula_latex("ε") == r"\varepsilon"
    assert formula_latex("2^(j+2) (1+u)^3") == "2^{j+2} (1+u)^{3}"
    assert formula_latex("Q^(T1)") == "Q^{(T1)}"                 # an iterate keeps its ()
    assert formula_latex("γ_nγ_kW_nk") == r"\gamma_{n}\gamma_{k}W_{nk}"
    assert formula_latex("a_ke_k") == "a_{k}e_{k}"                # the index is k, not ke
    assert formula_latex("T_flow + c_min") == r"T_{\mathrm{flow}} + c_{\min}"
    assert formula_latex("R_Lambda") == r"R_{\Lambda}"            # was R_L ambda
    assert formula_latex("u_k'ᵀ") == r"u_{k}^{\prime \mathsf T}"   # no double superscript
    assert formula_latex("|(log h)'| ≤ 2") == r"\lvert(\log h)'\rvert \le 2"
    for name in ("alpha", "gamma", "Lambda", "phi", "varphi", "omega"):  # any Greek name
        assert formula_latex(name) == sp.latex(sp.Symbol(name))


#: Greek letter names (sympy's list) that must never be set as upright words
_GREEK_NAMES = sorted(set(greek_letters_set) | {"varphi", "varepsilon", "ell", "nabla",
                                                "partial", "lambda", "Lambda"})
_UPRIGHT_GREEK = re.compile(r"\\(?:mathrm|text|operatorname)\{(?:" + "|".join(_GREEK_NAMES)
                            + r")\}")


def typesetting_defects(source: str, fmt: str) -> list[str]:
    """What a generated document (``fmt`` "latex" or "markdown") must not contain: a ``_``
    or ``^`` outside math and code (a formula set as text: ``γ\\_k``, ``e\\textasciicircum{}m``),
    ``<=`` or ``>=`` inside math (breqn breaks a line at its ``<`` and its ``=``), and a Greek
    letter's name set as an upright word (``\\mathrm{phi}``)."""
    if fmt == "latex":
        source = re.sub(r"\\texttt\{[^{}]*\}", " ", source.split(r"\begin{document}", 1)[-1])
        math = r"\\begin\{dmath\*\}(.*?)\\end\{dmath\*\}|\$(.*?)\$"
        scripts = r".{0,30}(?:\\_|\\textasciicircum|[_^]).{0,30}"
    else:
        source = re.sub(r"<!--.*?-->|`[^`]*`", " ", source, flags=re.S)
        math = r"\$\$(.*?)\$\$|\$(.*?)\$"
        scripts = r".{0,30}[_^].{0,30}"
    formulas = [a or b for a, b in re.findall(math, source, re.S)]
    prose = re.sub(math, " ", source, flags=re.S)
    found = [f"script set as text: {s!r}" for s in re.findall(scripts, prose)]
    found += [f"<= or >= in math: {f!r}" for f in formulas if re.search(r"<\s*=|>\s*=", f)]
    found += [f"a Greek name set upright: {m!r}" for f in formulas
              for m in _UPRIGHT_GREEK.findall(f)]
    return found


def test_the_typesetting_lint_finds_what_it_names():
    # the text of the old renderer (8e as it was committed) and what the new one writes
    old_latex = (r"\begin{document} the margin m\_k = $\gamma$\_k e\textasciicircum{}m"
                 r"\begin{dmath*} t <= T(m_t) \end{dmath*}"
                 r"\begin{dmath*} \mathrm{phi}(x) = 1 \end{dmath*}")
    found = typesetting_defects(old_latex, "latex")
    assert sum(f.startswith("script") for f in found) >= 1
    assert any(f.startswith("<=") for f in found) and any("phi" in f for f in found)
    assert typesetting_defects("the margin m_k of $x$", "markdown")
    assert typesetting_defects("$$ x >= 0 $$", "markdown")
    assert typesetting_defects(r"so $\mathrm{varphi}(H)$", "markdown")
    text = "the margin m_k = γ_k e^m, t ≤ T(m_t), φ(x) via oodcalc.theory.flow_time"
    assert not typesetting_defects(r"\begin{document}" + tex_text(text), "latex")
    assert not typesetting_defects(markdown_text(text), "markdown")


def test_every_generated_document_is_typeset():
    """Run over every derivation in LaTeX and Markdown (the files of derivations/ and the
    one document `oodcalc derive --format latex` writes)."""
    from oodcalc.symbolic.render import latex_document
    files = documents.render_all()
    files["derive.tex"] = latex_document([(documents.derivation_of(c.id), c) for c in CLAIMS])
    for name, source in files.items():
        found = typesetting_defects(source, "latex" if name.endswith(".tex") else "markdown")
        assert not found, (name, found[:5])


# --- what a reader sees: every derivation in every format --------------------------------

#: upright text in LaTeX math (its letters may form words)
_UPRIGHT = re.compile(r"\\(?:mathrm|text|operatorname|mathsf|mathbb)\{[^{}]*\}")


def latex_math_defects(latex: str) -> list[str]:
    """What a LaTeX formula must not contain: a bare True/False (an equation sympy
    evaluated), a word of two or more letters outside a command or upright text (a
    name without its backslash: ``nabla_Q``, ``Sigma_{n != k}``, ``margin``), ``!=``, or
    an indexed entry printed raw (``Lambda[n]``)."""
    found = [latex] if latex.strip() in ("True", "False", r"\text{True}", r"\text{False}") else []
    words = re.sub(r"\\[A-Za-z]+", " ", _UPRIGHT.sub(" ", latex))
    words = re.sub(r"_\{[a-z]{2}\}", " ", words)           # an index pair: z_{kk}, W_{nk}
    found += re.findall(r"[A-Za-z]{2,}", words)
    found += re.findall(r"!=|[A-Za-z]\[", latex)
    found += re.findall(r"[+-]\s*[+-]", latex)       # "a + - \mu Q": a sum's sign twice
    return found


def test_the_defect_finder_finds_the_defects_it_names():
    for bad in ("False", r"nabla_Q L = F G F^{T}", r"Sigma_{n != k} x", r"\delta margin_n",
                r"\gamma[n]", r"\eta_{paper}", r"\lambda g_{V} + - \mu V^{T} Q_{1} V"):
        assert latex_math_defects(bad), bad
    for good in (r"\nabla_Q L = F G F^{T}", r"z_{kk} - z_{nk}", r"\sum_{n \neq k} x",
                 r"\delta \mathrm{margin}_n",
                 r"\frac{d}{d s} e_k", r"\log{\left(x \right)}", r"\eta_{\mathrm{paper}}"):
        assert not latex_math_defects(good), good


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: f"claim{c.id}")
def test_every_displayed_equation_reads_right_in_every_format(claim):
    d = documents.derivation_of(claim.id)
    markdown, latex = to_markdown(d, claim), to_latex(d, claim)
    formulas = {"markdown": re.findall(r"\$\$ (.*?) \$\$", markdown),
                "latex": re.findall(r"\\begin\{dmath\*\} (.*?) \\end\{dmath\*\}", latex)}
    shown = sum(len(step.math) for step in d.steps)
    for fmt, found in formulas.items():
        assert len(found) == shown, fmt
        for formula in found:
            assert not latex_math_defects(formula), (fmt, formula)
    console = Console(file=io.StringIO(), width=100, color_system=None)
    print_text(d, claim, console)
    text = console.file.getvalue()
    for expr in (e for step in d.steps for e in step.math):
        shown = math_text(expr, 96)                   # the console's width less the indent
        assert all(cell_len(line) <= 96 for line in shown.splitlines()), shown
        if any(isinstance(e, sp.MatAdd) for e in sp.preorder_traversal(expr)):
            assert not sum_defects(shown), (sum_defects(shown), shown)
        assert "\n".join("    " + line for line in shown.splitlines()) in text
        assert not re.search(r"(?m)^\s*(True|False)\s*$", shown), shown
        # Greek and operator names in words, or Python's != and x[n] of an indexed entry
        assert not re.search(r"(?<![A-Za-z])(alpha|beta|gamma|delta|Delta|eta|Lambda|Sigma|"
                             r"nabla|sigma|epsilon)|!=|(alpha|gamma|Lambda)\[", shown), shown


def test_an_equation_with_a_matrix_side_is_shown_not_evaluated():
    # Eq(symbol, matrix expression) evaluates to False when rebuilt by a substitution
    A = sp.MatrixSymbol("A", 2, 2)
    shown = eq(sp.Symbol("nabla_Q L"), A.T)
    assert math_text(shown) != "False" and "∇_Q L" in math_text(shown)
    assert math_latex(shown).startswith(r"\nabla_{Q} L =")


def sum_defects(picture: str) -> list[str]:
    """What the rows of sympy's Unicode picture of an equation must not show on their
    baselines (the lines holding " = " or starting with a term's sign): two terms side by
    side with no sign between them ("V  (1 - λ)", "α⋅𝕀 ─────"), a minus that is no
    operator ("G -μ⋅U") or a sign twice ("+ -")."""
    found = []
    for line in picture.splitlines():
        rhs = line.split(" = ", 1)[1] if " = " in line else \
            line if re.match(r"\s*[+-] ", line) else None
        if rhs is None:
            continue
        found += re.findall(r"[\w)⎠⎟]\s+[\w(⎛⎜⎝─]", rhs)
        found += re.findall(r"[\w)⎠⎟]\s+[+-][^\s]", rhs)
        found += re.findall(r"[+-]\s*[+-]", rhs)
    return found


def test_the_sum_defect_finder_finds_the_defects_it_names():
    # claim 10's and claim 5's baselines as the old renderer printed them, and as now
    for bad in ("    Vᵀ D V = λ⋅g_V -μ⋅V ⋅Q₁⋅V + μ⋅V ⋅Q⋅V (1 - λ)⋅V ⋅U⋅G⋅U ⋅V",
                "    D = μ⋅(-Q₁ + Q) + λ⋅V⋅g_V⋅V  (1 - λ)⋅⎝-V⋅V  + 𝕀⎠⋅U⋅G⋅U ⋅⎝-V⋅V  + 𝕀⎠",
                "    Z = α⋅𝕀 ─────⋅⎝-𝕀 + 1⋅1 ⎠", "    Z = a + - b", "             -μ⋅G"
                "\n             + (1 - λ)⋅G -μ⋅U"):
        assert sum_defects(bad), bad
    for good in ("    Vᵀ D V = λ⋅g_V - μ⋅V ⋅Q₁⋅V + μ⋅V ⋅Q⋅V + (1 - λ)⋅V ⋅U⋅G⋅U ⋅V",
                 "    D = μ⋅(-Q₁ + Q) + λ⋅V⋅g_V⋅V  + (1 - λ)⋅⎝-V⋅V  + 𝕀⎠⋅U⋅G⋅U ⋅⎝-V⋅V  + 𝕀⎠",
                 "    Z = α⋅𝕀 - ─────⋅⎝-𝕀 + 1⋅1 ⎠", "    Z = -μ⋅G + G\n             - μ⋅U"):
        assert not sum_defects(good), good


def _matrices():
    K, d = sp.symbols("K d", integer=True, positive=True)
    U, Q, G = sp.MatrixSymbol("U", d, K), sp.MatrixSymbol("Q", d, d), sp.MatrixSymbol("G", K, K)
    lam, mu, alpha = sp.symbols("lambda mu alpha", real=True)
    return K, U, Q, G, lam, mu, alpha


def test_a_sum_of_matrices_is_joined_by_each_term_s_sign():
    # sympy printed these "G + - \mu U^{T} Q U" (LaTeX) and "G -μ⋅U…", "… U⋅Q⋅U (1 - λ)⋅…"
    # (pretty: no + before a coefficient 1 − λ, none before −α/(K − 1))
    K, U, Q, G, lam, mu, alpha = _matrices()
    UQU = U.T * Q * U
    total = sp.MatAdd(G, -mu * UQU, (1 - lam) * UQU, -alpha / (K - 1) * UQU, -2 * UQU,
                      evaluate=False)
    latex = math_latex(total)
    assert not latex_math_defects(latex), latex
    for term in (r"- \mu U^{T} Q U", r" + \left(1 - \lambda\right) U^{T} Q U",
                 r" - \frac{\alpha}{K - 1} U^{T} Q U", r" - 2 U^{T} Q U"):
        assert term in latex, (term, latex)
    picture = math_text(sp.Eq(sp.Symbol("Z"), total, evaluate=False))
    assert not sum_defects(picture), picture
    baseline = next(line for line in picture.splitlines() if " = " in line)
    for term in (" - μ⋅U ⋅Q⋅U", " + (1 - λ)⋅U ⋅Q⋅U", " - ─────⋅U ⋅Q⋅U", " - 2⋅U ⋅Q⋅U"):
        assert term in baseline, (term, picture)
    # a sum that leads with a negative term prints it as sympy does
    lead = sp.MatAdd(-mu * UQU, G, evaluate=False)
    assert math_latex(lead).startswith(r"- \mu U^{T} Q U") and "-μ⋅U" in math_text(lead)


def test_a_wide_equation_is_cut_before_a_term_of_its_sum():
    K, U, Q, G, lam, mu, alpha = _matrices()
    UQU = U.T * Q * U
    total = sp.MatAdd(G, -mu * UQU, (1 - lam) * UQU, lam * G * UQU, -mu * G * G, UQU * G,
                      evaluate=False)
    x = sp.Symbol("x")
    for equation in (sp.Eq(sp.Symbol("Z"), total, evaluate=False),
                     sp.Eq(sp.Symbol("y"), sum((-1) ** n * (n + 1) * x ** n for n in range(9)))):
        whole = math_text(equation)
        cut = math_text(equation, 30)
        lines = cut.splitlines()
        assert cell_len(whole.splitlines()[-1]) > 30 and len(lines) > len(whole.splitlines())
        assert all(cell_len(line) <= 30 for line in lines) and "↪" not in cut, cut
        assert not sum_defects(cut), cut
        # every further line starts with its term's sign under the right side ("Z = ")
        rows = [line for line in lines if " = " in line or re.match(r" {4}[+-] ", line)]
        assert len(rows) > 1 and all(re.match(r" {4}[+-] ", row) for row in rows[1:]), cut
        # the baselines, read in turn, are the one line's baseline (the same terms, signs)
        def flat(text):
            return re.sub(r"\s+", " ", text).strip()
        baseline = [line for line in whole.splitlines() if " = " in line][0]
        assert flat(" ".join(rows)) == flat(baseline), cut
    # a fraction over a wide sum (claim 4's T_flow took 153 columns): the sum's lines, each
    # after the first led by its sign, over one bar
    fraction = math_text(sp.Eq(sp.Symbol("y"), sum(x ** n for n in range(12)) / (x + 1)), 30)
    lines = fraction.splitlines()
    assert all(cell_len(line) <= 30 for line in lines) and "↪" not in fraction, fraction
    bar = next(i for i, line in enumerate(lines) if line.startswith("y = ──"))
    assert lines[bar + 1].strip() == "x + 1" and lines[bar - 1].strip() == "+ x + 1", fraction
    assert sum(bool(re.match(r" {4}\+ x", line)) for line in lines[:bar]) == 2, fraction
    # what cannot be cut at a term (a product) is cut by sympy, marked ↪
    wide = sp.Eq(sp.Symbol("w"), sp.Mul(*sp.symbols("a0:30")) / (x + 1))
    assert all(cell_len(line) <= 30 for line in math_text(wide, 30).splitlines())
    assert "↪" in math_text(wide, 30) and math_text(wide) == math_text(wide, 1000)


@pytest.mark.parametrize("where", ["terminal", "piped"])
def test_claim10_reads_right_at_80_columns(where, capsys, monkeypatch):
    # issue 30: `oodcalc derive 10` dropped the + between matrix terms ("μ⋅V ⋅Q⋅V (1 - λ)⋅",
    # "G -μ⋅U"), the 'both' line took 136 columns, and Markdown/LaTeX read "+ - \mu"
    from oodcalc.cli import main
    claim, d = get_claim("10"), documents.derivation_of("10")
    if where == "terminal":
        console = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None)
        print_text(d, claim, console)
        text = console.file.getvalue()
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
        assert main(["derive", "10"]) == 0
        text = capsys.readouterr().out
    assert "Projection 'both'" in text and "Vᵀ D V" in text
    assert all(cell_len(line) <= 80 for line in text.splitlines()), \
        max(text.splitlines(), key=cell_len)
    equations = [line for line in text.splitlines() if line.startswith("    ")]
    assert len([line for line in equations if " = " in line]) == 7, text
    assert not sum_defects("\n".join(equations)), sum_defects("\n".join(equations))
    assert "+ -" not in text and "- -" not in text
    for source in (to_markdown(d, claim), to_latex(d, claim)):
        formulas = re.findall(r"\$\$ (.*?) \$\$|\\begin\{dmath\*\} (.*?) \\end\{dmath\*\}", source)
        sums = [a or b for a, b in formulas]
        assert len(sums) == 7 and not any(re.search(r"[+-]\s*[+-]", f) for f in sums), sums
        assert source.count(r"\lambda g_{V} - \mu V^{T} Q_{1} V") == 2, sums  # none, both


def _compile(tmp_path, name: str, source: str) -> tuple[int, str]:
    """pdflatex ``source``; returns (pages, text of the PDF or "" without pdftotext)."""
    tex = tmp_path / f"{name}.tex"
    tex.write_text(source, encoding="utf-8")
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", tex.name],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:]
    pages = int(re.search(r"Output written on .*?\((\d+) pages?", run.stdout).group(1))
    if shutil.which("pdftotext") is None:
        return pages, ""
    out = subprocess.run(["pdftotext", "-layout", f"{name}.pdf", "-"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    return pages, out.stdout


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_documents_compile(tmp_path):
    for claim in CLAIMS:
        pages, text = _compile(tmp_path, f"claim{claim.id}",
                               to_latex(documents.derivation_of(claim.id), claim))
        assert pages >= 1 and (not text or f"Claim {claim.id}:" in text)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
@pytest.mark.parametrize("selection", ["8", None], ids=["claim 8", "every claim"])
def test_derive_latex_is_one_document_holding_every_requested_claim(tmp_path, capsys,
                                                                    selection):
    from oodcalc.cli import main
    assert main(["derive", *([selection] if selection else []), "--format", "latex"]) == 0
    source = capsys.readouterr().out
    chosen = get_claims(selection) if selection else CLAIMS
    assert source.count(r"\begin{document}") == source.count(r"\end{document}") == 1
    pages, text = _compile(tmp_path, "derive", source)
    assert pages >= len(chosen)                     # a page each: \newpage between claims
    for claim in chosen:
        assert not text or f"Claim {claim.id}:" in text, claim.id


def test_markdown_shows_level_decisive_step_and_math():
    claim = get_claim("3")
    md = to_markdown(documents.derivation_of("3"), claim)
    assert "$$" in md and "**Level: symbolic $K$.**" in md
    assert f"**Decisive step.** {markdown_text(claim.decisive_step)}" in md and "★" in md
