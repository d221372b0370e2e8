"""Print a :class:`~oodcalc.symbolic.core.Derivation` as text (rich), Markdown or LaTeX.

Markdown and LaTeX are deterministic (no timings, no addresses), so the checked-in files
in ``derivations/`` can be compared with a fresh rendering.
"""

from __future__ import annotations

import re

from typing import Any

import sympy as sp

#: A :class:`~oodcalc.symbolic.core.Derivation`, read by its fields (id, title, steps,
#: checks, scope, findings, level): this module sits below core.py, whose Jupyter repr
#: calls it, and does not import it.
Derivation = Any

FORMATS = ("text", "markdown", "latex")

# Symbol names are short formulas ("nabla_Q L", "Sigma_{n != k} ∂e_k/∂z_{n,k}",
# "(K/eta) delta margin_n"): sympy's printers would set them as one italic word, so they
# are translated word by word: Greek and operator names get their command, any other word
# of two or more letters is upright text, "!=" is ≠ and "^T" the transpose.
_GREEK_WORDS = ("alpha", "beta", "gamma", "delta", "Delta", "epsilon", "eta", "theta",
                "Lambda", "lambda", "sigma", "tau", "mu", "ell", "nabla", "partial")
_OPERATORS = ("max", "min", "log", "exp")
_WORD_LATEX = {**{w: "\\" + w for w in _GREEK_WORDS + _OPERATORS}, "Sigma": r"\sum"}
_PIECES_LATEX = (("∂", r"\partial "), ("!=", r"\neq "), ("^T", r"^{\mathsf T}"),
                 ("hat y", r"\hat y"), ("vbar", r"\bar v"))
_WHOLE_LATEX = {"softmax_i": r"\mathrm{softmax}_i", "Sigma_m(a_m^2)": r"\sum_m a_m^2"}
_TOKEN = re.compile(r"\\[A-Za-z]+|[A-Za-z]+|.", re.S)


def _symbol_latex(name: str) -> str:
    if name in _WHOLE_LATEX:
        return _WHOLE_LATEX[name]
    for piece, latex in _PIECES_LATEX:
        name = name.replace(piece, latex)
    out: list[str] = []
    for token in _TOKEN.findall(name):
        if token[0].isalpha() and len(token) > 1:
            token = _WORD_LATEX.get(token, rf"\mathrm{{{token}}}")
        if out and out[-1] in "_^" and len(token) > 1 and not token.startswith("\\"):
            token = "{" + token + "}"           # a multi-letter script: T_{\mathrm{flow}}
        elif out and out[-1] in "_^" and token.startswith(("\\mathrm", "\\max", "\\min")):
            token = "{" + token + "}"
        out.append(token)
    return "".join(out)


_GREEK_UNICODE = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "Delta": "Δ",
                  "epsilon": "ε", "eta": "η", "theta": "θ", "Lambda": "Λ", "lambda": "λ",
                  "sigma": "σ", "ell": "ℓ", "nabla": "∇", "Sigma": "Σ", "partial": "∂"}
_SUBSCRIPT = dict(zip("0123456789aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ"))


def _symbol_text(name: str) -> str:
    """The name in Unicode, as one word sympy's pretty printer sets as it stands."""
    out = name.replace("Sigma_m(a_m^2)", "Σₘaₘ²").replace(" != ", "≠").replace("!=", "≠")
    for piece, char in (("^T", "ᵀ"), ("^{(T_1)}", "⁽ᵀ¹⁾"), ("^*", "*"), ("^2", "²"),
                        ("vbar", "v̄"), ("hat y", "ŷ")):
        out = out.replace(piece, char)
    out = re.sub(r"(?<![A-Za-z])(" + "|".join(_GREEK_UNICODE) + r")(?![A-Za-z])",
                 lambda m: _GREEK_UNICODE[m.group(1)], out)
    out = re.sub(r"_\{([^{}]*)\}", r"[\1]", out)
    return re.sub(r"_([0-9a-z])(?![A-Za-z])", lambda m: _SUBSCRIPT.get(m.group(1),
                                                                     "_" + m.group(1)), out)


def _subscripted(base: str, index: str) -> str:
    return f"{base}_{index}" if len(index) == 1 else f"{base}_{{{index}}}"


def _for_display(expr: sp.Basic, rename) -> sp.Basic:
    """``expr`` with every indexed entry ``x[n]`` made the symbol ``x_n`` and, unless
    ``rename`` is None, every Symbol renamed by ``rename(name)``. An
    equation is rebuilt unevaluated: ``Eq(symbol, matrix)`` would otherwise evaluate to
    ``False`` the moment a substitution touches it."""
    if isinstance(expr, sp.core.relational.Relational):
        return expr.func(_for_display(expr.lhs, rename), _for_display(expr.rhs, rename),
                         evaluate=False)
    rename_or_keep = rename or (lambda name: name)
    mapping = {x: sp.Symbol(rename_or_keep(_subscripted(str(x.base.label), str(x.indices[0]))))
               for x in expr.atoms(sp.Indexed) if len(x.indices) == 1}
    if rename is not None:
        mapping.update({s: sp.Symbol(rename(s.name), **s.assumptions0)
                        for s in expr.atoms(sp.Symbol)})
    return expr.xreplace(mapping) if mapping else expr


def math_latex(expr: sp.Basic) -> str:
    shown = _for_display(expr, None)      # names are set by the printer's symbol_names
    names = {s: _symbol_latex(s.name) for s in shown.atoms(sp.Symbol)}
    return sp.latex(shown, symbol_names=names)


def math_text(expr: sp.Basic) -> str:
    return sp.pretty(_for_display(expr, _symbol_text), use_unicode=True, wrap_line=False)


# --- Markdown -------------------------------------------------------------------------

def to_markdown(d: Derivation, claim) -> str:
    """``claim``: the registry entry (statement and decisive step)."""
    lines = [f"# Claim {d.id}: {d.title}", "",
             "<!-- generated by `python -m oodcalc.symbolic.documents`; do not edit -->", "",
             f"**Statement.** {claim.statement}", "",
             f"**Level: {d.level}.** {d.scope}", "",
             f"**Decisive step.** {claim.decisive_step}", "", "## Derivation", ""]
    for i, step in enumerate(d.steps, 1):
        lines.append(f"{i}. {step.text}")
        for expr in step.math:
            lines += ["", f"   $$ {math_latex(expr)} $$"]
        lines.append("")
    lines += ["## Checks", "", "Decisive checks (the level rests on them) are marked ★.", "",
              "| # | check | method | on | result |", "|---|---|---|---|---|"]
    for i, c in enumerate(d.checks, 1):
        what = c.what.replace("|", "\\|")
        lines.append(f"| {i}{' ★' if c.decisive else ''} | {what} | {c.method} | "
                     f"{c.detail or '—'} | {'passed' if c.passed else '**FAILED**'} |")
    if d.findings:
        lines += ["", "## Where the paper's statement differs", ""]
        lines += [f"- {f}" for f in d.findings]
    return "\n".join(lines) + "\n"


# --- LaTeX ----------------------------------------------------------------------------

_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                "^": r"\textasciicircum{}", "|": r"\textbar{}", "<": r"\textless{}",
                ">": r"\textgreater{}"}
_TEX_UNICODE = {
    "α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "ε": r"\varepsilon",
    "η": r"\eta", "θ": r"\theta", "λ": r"\lambda", "Λ": r"\Lambda", "Δ": r"\Delta",
    "Σ": r"\Sigma", "ℓ": r"\ell", "π": r"\pi", "σ": r"\sigma", "μ": r"\mu",
    "∂": r"\partial", "≥": r"\geq", "≤": r"\leq", "≠": r"\neq", "−": "-", "·": r"\cdot",
    "⊥": r"\perp", "⇒": r"\Rightarrow", "⇔": r"\Leftrightarrow", "→": r"\to",
    "∞": r"\infty", "⟨": r"\langle", "⟩": r"\rangle", "‖": r"\|", "√": r"\surd",
    "∈": r"\in", "ᵀ": r"^{\mathsf T}", "²": r"^2", "≈": r"\approx", "∝": r"\propto",
    "×": r"\times", "∑": r"\sum", "₁": r"_1", "₂": r"_2", "ᵢ": r"_i", "∇": r"\nabla",
    "←": r"\leftarrow", "Π": r"\Pi", "½": r"\tfrac12", "∫": r"\int", "★": r"\star",
    "₀": r"_0", "₋": r"_-", "₊": r"_+", "ρ": r"\rho", "τ": r"\tau", "⊗": r"\otimes",
    "³": r"^3", "⁴": r"^4", "⁵": r"^5", "ⁿ": r"^n", "φ": r"\varphi", "±": r"\pm",
    "∓": r"\mp", "≡": r"\equiv", "⌈": r"\lceil", "⌉": r"\rceil", "¹": r"^1",
}
_TEX_TEXT = {"—": "---", "–": "--", "…": r"\dots{}", "’": "'", "“": "``", "”": "''"}


def tex_text(text: str) -> str:
    """Plain Unicode prose → LaTeX; raises ``KeyError`` for a character it cannot set."""
    text = re.sub(r"(\w)\u0304", lambda m: "\x00bar" + m.group(1) + "\x01", text)
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\x00":                      # a barred letter
            end = text.index("\x01", i)
            out.append(rf"$\bar{{{text[i + 4:end]}}}$")
            i = end + 1
            continue
        if ch == "ŷ":
            out.append(r"$\hat y$")
        elif ch in _TEX_SPECIAL:
            out.append(_TEX_SPECIAL[ch])
        elif ch in _TEX_UNICODE:
            out.append(f"${_TEX_UNICODE[ch]}$")
        elif ch in _TEX_TEXT:
            out.append(_TEX_TEXT[ch])
        elif ord(ch) < 128:
            out.append(ch)
        else:
            raise KeyError(f"no LaTeX for character {ch!r} (U+{ord(ch):04X})")
        i += 1
    return "".join(out).replace("$$", "")


def to_latex_body(d: Derivation, claim) -> str:
    parts = [rf"\section*{{Claim {d.id}: {tex_text(d.title)}}}",
             rf"\noindent\textbf{{Statement.}} {tex_text(claim.statement)}", "",
             rf"\noindent\textbf{{Level: {tex_text(d.level)}.}} {tex_text(d.scope)}", "",
             rf"\noindent\textbf{{Decisive step.}} {tex_text(claim.decisive_step)}",
             r"\subsection*{Derivation}", r"\begin{enumerate}"]
    for step in d.steps:
        parts.append(rf"\item {tex_text(step.text)}")
        for expr in step.math:
            parts.append(rf"\begin{{dmath*}} {math_latex(expr)} \end{{dmath*}}")
    parts += [r"\end{enumerate}", r"\subsection*{Checks}", r"\begin{enumerate}"]
    for c in d.checks:
        detail = f" ({tex_text(c.detail)})" if c.detail else ""
        verdict = "passed" if c.passed else r"\textbf{FAILED}"
        star = r" ($\star$ decisive)" if c.decisive else ""
        parts.append(rf"\item {tex_text(c.what)}{detail} --- \emph{{{tex_text(c.method)}}}"
                     f"{star}: {verdict}.")
    parts.append(r"\end{enumerate}")
    if d.findings:
        parts += [r"\subsection*{Where the paper's statement differs}", r"\begin{itemize}"]
        parts += [rf"\item {tex_text(f)}" for f in d.findings]
        parts.append(r"\end{itemize}")
    return "\n".join(parts) + "\n"


PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[utf8]{inputenc}
\usepackage[T1]{fontenc}
\usepackage{lmodern}
\usepackage[margin=2cm]{geometry}
\usepackage{amsmath,amssymb}
\usepackage{breqn}
\sloppy
"""


def to_latex(d: Derivation, claim) -> str:
    """The file ``derivations/claim….tex``."""
    return latex_document([(d, claim)], "generated by `python -m oodcalc.symbolic.documents`; "
                                        "do not edit")


def latex_document(derivations, comment: str = "generated by `oodcalc derive`") -> str:
    """One standalone document holding every ``(derivation, claim)`` pair, a page each."""
    bodies = (r"\newpage" + "\n").join(to_latex_body(d, claim) for d, claim in derivations)
    return (PREAMBLE + f"% {comment}\n" + r"\begin{document}" + "\n" + bodies
            + r"\end{document}" + "\n")


# --- text (rich) ----------------------------------------------------------------------

def print_text(d: Derivation, claim, console=None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False)
    console.rule(f"Claim {d.id}: {d.title}")
    console.print(Text("Statement: ", style="bold") + Text(claim.statement))
    console.print(Text(f"Level: {d.level}. ", style="bold") + Text(d.scope))
    console.print(Text("Decisive step: ", style="bold") + Text(claim.decisive_step))
    console.print()
    for i, step in enumerate(d.steps, 1):
        console.print(Text(f"{i}. ", style="bold") + Text(step.text))
        for expr in step.math:
            console.print(Text(_indent(math_text(expr), 4)), soft_wrap=True)
        console.print()
    table = Table(title="Checks", show_lines=False)
    for column in ("#", "check", "method", "on", "result"):
        table.add_column(column)
    for i, c in enumerate(d.checks, 1):
        table.add_row(f"{i}{' ★' if c.decisive else ''}", c.what, c.method, c.detail or "—",
                      Text("passed", style="green") if c.passed
                      else Text("FAILED", style="bold red"))
    console.print(table)
    for f in d.findings:
        console.print(Text("Differs from the paper: ", style="bold yellow") + Text(f))


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())
