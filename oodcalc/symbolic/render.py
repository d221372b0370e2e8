"""Print a :class:`~oodcalc.symbolic.core.Derivation` as text (rich), Markdown or LaTeX.

Markdown and LaTeX are deterministic (no timings, no addresses), so the checked-in files
in ``derivations/`` can be compared with a fresh rendering.
"""

from __future__ import annotations

import re

from typing import Any

import sympy as sp
from sympy.printing.latex import LatexPrinter, translate
from sympy.printing.pretty.pretty import PrettyPrinter
from sympy.printing.pretty.pretty_symbology import greek_unicode, pretty_use_unicode
from sympy.printing.pretty.stringpict import prettyForm, stringPict

__all__ = [
    "FORMATS", "PREAMBLE", "formula_latex", "latex_document", "markdown_text", "math_latex",
    "math_text", "print_text", "prose_parts", "tex_text", "to_latex", "to_latex_body",
    "to_markdown",
]


#: A :class:`~oodcalc.symbolic.core.Derivation`, read by its fields (id, title, steps,
#: checks, scope, findings, level): this module sits below core.py, whose Jupyter repr
#: calls it, and does not import it.
Derivation = Any

FORMATS = ("text", "markdown", "latex")

# Formulas written as text: symbol names ("nabla_Q L", "Sigma_{n != k} ∂e_k/∂z_{n,k}",
# "(K/eta) delta margin_n") and the formulas in prose ("c_k = γ_k(γ_k + γ_n)",
# "e^{2m}/(4η)") are set by one translation, formula_latex: letters and Greek names
# (ASCII or Unicode) by sympy's own symbol printer (sympy.printing.latex.translate), so
# "phi" is \phi, never \mathrm{phi}; operator names get their command; any other word of two
# or more letters is upright text; "<=" is \le, "!=" \neq and "^T" the transpose.

#: Unicode Greek → the name sympy prints: its own table, with the project's curly φ and ε
_UNICODE_NAME = {char: name for name, char in greek_unicode.items()
                 if name not in ("lamda", "Lamda")}
_UNICODE_NAME.update({"φ": "varphi", "ε": "varepsilon", "ℓ": "ell"})
del _UNICODE_NAME["Σ"]                    # Σ in a formula is a sum (_SYMBOL_LATEX)
_COMMAND_NAMES = {"nabla": r"\nabla", "partial": r"\partial", "Sigma": r"\sum",
                  **{f: "\\" + f for f in ("ln", "log", "exp", "max", "min", "lim", "sup",
                                           "inf", "sin", "cos", "det")},
                  **{f: rf"\operatorname{{{f}}}" for f in ("diag", "argmax", "argmin",
                                                           "softmax", "sign", "tr", "span")}}
_SYMBOL_LATEX = {
    "≥": r"\ge", "≤": r"\le", "≠": r"\neq", "−": "-", "·": r"\cdot", "×": r"\times",
    "∈": r"\in", "→": r"\to", "←": r"\leftarrow", "⇒": r"\Rightarrow",
    "⇔": r"\Leftrightarrow", "∞": r"\infty", "⟨": r"\langle", "⟩": r"\rangle",
    "√": r"\surd", "≈": r"\approx", "∝": r"\propto",
    "∑": r"\sum", "Σ": r"\sum", "∫": r"\int", "★": r"\star", "⊗": r"\otimes", "⊥": r"\perp",
    "±": r"\pm", "∓": r"\mp", "≡": r"\equiv", "⌈": r"\lceil", "⌉": r"\rceil",
    "½": r"\tfrac12", "~": r"\sim", "…": r"\dots", "∂": r"\partial", "∇": r"\nabla",
    "<=": r"\le", ">=": r"\ge", "!=": r"\neq", "...": r"\dots", "%": r"\%", "&": r"\&",
    "#": r"\#", "$": r"\$",
}
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹ⁿ⁺⁻ᵀ", "0123456789n+-T"))
_SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ₊₋",
                       "0123456789aehijklmnoprstuvx+-"))
_FORMULA_TOKEN = re.compile(r"\\[A-Za-z]+|[A-Za-z]+|\d+(?:\.\d+)?|<=|>=|!=|\.\.\.|\s+|.",
                            re.S)
_INDEX = re.compile(r"[a-z]\d*|[a-z]{2}|\d+")    # an index set in italic: k, kk, m0, 12


def _scripts_spelled(text: str) -> str:
    """Unicode super- and subscripts, bars and hats spelled with ^, _ and sympy's words."""
    text = re.sub("[" + "".join(_SUPERSCRIPTS) + "]+",
                  lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group()) + "}", text)
    text = re.sub("[" + "".join(_SUBSCRIPTS) + "]+",
                  lambda m: "_{" + "".join(_SUBSCRIPTS[c] for c in m.group()) + "}", text)
    text = re.sub(r"([A-Za-z])\u0304", r"\1bar ", text)           # v̄
    text = re.sub(r"<([^<>=\s]+,[^<>=\s]+)>", r"⟨\1⟩", text)        # <a,v>: a product
    return text.replace("ŷ", "yhat ").replace("hat y", "yhat")


def _closing(text: str, i: int, opening: str, closing: str) -> int:
    """Index of the bracket closing the one at ``text[i]``."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == opening) - (text[j] == closing)
        if depth == 0:
            return j
    raise KeyError(f"unbalanced {opening!r} in formula {text!r}")


def _word_latex(word: str) -> str:
    if word in _COMMAND_NAMES:
        return _COMMAND_NAMES[word]
    printed = translate(word)                # Greek names and modifiers, as sympy sets them
    if printed != word or len(word) == 1:
        return printed
    if word.isupper() or len(word) == 2:
        return " ".join(word)                # a product: UW, VZ, Hv, cm
    return rf"\mathrm{{{word}}}"


def formula_latex(text: str) -> str:
    """A formula written as text (a symbol's name or a formula in prose) in LaTeX math;
    raises ``KeyError`` for a character it cannot set."""
    text = _scripts_spelled(text)
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "_^" and i + 1 < len(text):
            i, script = _script(text, i + 1, ch, out[-1] if out else "")
            if ch == "^" and out and out[-1] == "'":     # u_k'ᵀ: the prime is a superscript
                out.pop()
                script = r"\prime " + script
            out.append(ch + "{" + script + "}")
            continue
        token = _FORMULA_TOKEN.match(text, i).group()
        i += len(token)
        if token in _UNICODE_NAME:
            out.append(translate(_UNICODE_NAME[token]))
        elif token in _SYMBOL_LATEX:
            out.append(_SYMBOL_LATEX[token])
        elif token.isascii() and token[0].isalpha():
            out.append(_word_latex(token))
        elif token == "*" and out and not out[-1].isspace():
            out.append("^{*}")                                 # F*, t*: a starred value
        elif token == "{":                                     # span{v}: a set
            end = _closing(text, i - 1, "{", "}")
            out.append(r"\lbrace " + formula_latex(text[i:end]) + r"\rbrace ")
            i = end + 1
        elif token.isspace():
            out.append(" ")
        elif token.isascii() or token == "‖":
            out.append(token)
        else:
            raise KeyError(f"no LaTeX for character {token!r} (U+{ord(token):04X})")
    bars = {"|": [r"\lvert", r"\rvert"], "‖": [r"\lVert", r"\rVert"]}
    count = {"|": 0, "‖": 0}
    for j, piece in enumerate(out):      # |x| as opening and closing bars: spaced as (x)
        if piece in bars:
            out[j] = bars[piece][count[piece] % 2]
            count[piece] += 1
    joined = ""
    for piece in out:                # a command's name must not run into the next letter
        if re.search(r"\\[A-Za-z]+$", joined) and re.match(r"[A-Za-z0-9]", piece):
            joined += " "
        joined += piece
    return re.sub(r" {2,}", " ", joined).strip()


def _script(text: str, i: int, kind: str, base: str) -> tuple[int, str]:
    """The sub- or superscript starting at ``text[i]``: (index after it, its LaTeX)."""
    ch = text[i]
    if ch == "{":
        end = _closing(text, i, "{", "}")
        inner = text[i + 1:end]
        return end + 1, r"\mathsf T" if kind == "^" and inner == "T" else formula_latex(inner)
    if ch == "(" and kind == "^":               # 2^(j+2): a power; Q^(T1): an iterate
        end = _closing(text, i, "(", ")")
        inner = formula_latex(text[i + 1:end])
        return end + 1, inner if base[-1:].isdigit() else f"({inner})"
    if kind == "^" and ch == "T" and not text[i + 1:i + 2].isalnum():
        return i + 1, r"\mathsf T"                                  # the transpose
    name = re.match(r"[A-Za-z]+", text[i:])
    if name and (name.group() in _COMMAND_NAMES or len(name.group()) > 2
                 and translate(name.group()) != name.group()):
        return i + name.end(), _word_latex(name.group())   # R_Lambda, c_min (not nu: n, u)
    run = re.match(r"\d+" if kind == "^" else r"[a-z0-9]+", text[i:])
    if run is None:
        token = _FORMULA_TOKEN.match(text, i).group()
        token = token if not token.isascii() or not token[0].isalpha() else token[0]  # e^m
        return i + len(token), formula_latex(token)
    word = run.group()
    if len(word) == 2 and word[-1].isalpha() and text[i + len(word):][:1] == "_":
        word = word[:-1]              # a_ke_k, w_nv_n: the last letter is the next symbol
    if _INDEX.fullmatch(word):
        return i + len(word), word
    return i + len(word), _word_latex(word)


# --- prose: text with formulas in it ----------------------------------------------------

# Prose is plain Unicode with formulas written inline ("the margin m_k = z_kk − z_nk starts at
# αc_k"). prose_parts finds the formulas word by word: a word with a script, a Greek letter or
# a math sign is a formula, and so is a single letter (not the article "a", nor "A" opening a
# sentence), f(x), m0, dQ, 3m or x/h; a number or an operator name (ln, max) joins the formula
# beside it; words side by side that no operator joins are two formulas ("0 (n = j + 2)");
# a dotted or snake_case Python name is code. What no rule fits stays text: the typesetting
# test (tests/test_symbolic.py) fails on any _ or ^ left in the text of a document.
_MATH_CHARS = frozenset("_^=<>+~|‖*" + "".join(k for k in _SYMBOL_LATEX
                                                 if len(k) == 1 and not k.isascii())
                        + "".join(_UNICODE_NAME)
                        + "".join(_SUPERSCRIPTS) + "".join(_SUBSCRIPTS) + "ŷ\u0304")
_OPERATOR_WORDS = frozenset({"=", "+", "−", "-", "<", ">", "≥", "≤", "≠", "~", "≈", "∈",
                             "×", "·", "→", "←", "/", "⇒", "⇔", "≡", "∝", "<=", ">=", "±"})
_CONNECTOR = re.compile(r"[−-]?\d+(?:\.\d+)?|[A-Z]\d|ln|log|exp|max|min")
_OPEN_END = re.compile(r"(?:[=+−<>≥≤≠~≈∈×·→←/±]|ln|log|exp|max|min)$")
_CODE = re.compile(r"[a-z]\w+(?:\.[a-z_]\w*)+(?:\(\))?|[a-z][a-z0-9]+(?:_[A-Za-z0-9]+)+")
_SINGLE_OR_CALL = re.compile(r"[A-Za-z]'?\*?|[a-z]\d+|d[A-Z]|[A-Za-z]'?\(.*"
                             r"|\d+(?!st|nd|rd|th)[A-Za-z]{1,2}|[\w().']*/[\w().']*")
_OPENING, _CLOSING = "([", ")]"
_STRIP = "([,.;:)]"


def _words(text: str) -> list[str]:
    """``text`` cut at the spaces outside braces (``e^{α(2 − c)}`` is one word)."""
    words, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if ch == " " and depth == 0:
            words.append(text[start:i])
            start = i + 1
    return words + [text[start:]]


def _kind(word: str) -> str:
    core = word.strip(_STRIP)
    if not core:
        return "text"
    if _CODE.fullmatch(core) and core.split("_")[0] not in _COMMAND_NAMES:   # not max_m
        return "code"
    if word in _OPERATOR_WORDS:
        return "operator"
    if re.fullmatch(r"[1-9][a-e]", core):            # a claim's id: 8b, 9a
        return "text"
    if any(ch in _MATH_CHARS for ch in core) or (
            core != "a" and _SINGLE_OR_CALL.fullmatch(core)
            and not re.search(r"[A-Za-z]{3}", re.sub(r"log|exp|max|min|lim|diag", "", core))):
        return "math"
    return "connector" if _CONNECTOR.fullmatch(core) else "text"


def _depth(text: str) -> int:
    return sum((ch in _OPENING) - (ch in _CLOSING) for ch in text)


_PREFIX = re.compile(r"(?:[Σ∑∫√]|ln|log|exp|max|min|lim|sup|inf|diag)(?:_\S*)?$")


def _two_formulas(before: str, after: str) -> bool:
    """Whether two words of a formula are two formulas side by side ("2 h", "(K = 2) W"):
    neither is an operator or ends/starts with one, and the first is no sum or function."""
    return not (re.search(r"[=+−<>≥≤≠~≈∈×·→←/±,(\[-]$", before)
                or re.match(r"[=+−<>≥≤≠~≈∈×·→←/±)\]-]", after)
                or _PREFIX.search(before))


def prose_parts(text: str) -> list[tuple[str, str]]:
    """``text`` as (kind, piece) pairs, kind ``"text"``, ``"math"`` or ``"code"``; joined,
    the pieces are ``text``."""
    words = _words(text)
    kinds = [_kind(w) for w in words]
    for i, word in enumerate(words):          # "A second counterexample": an article
        if word in ("A", "I") and (i == 0 or words[i - 1][-1:] in ".:;"):
            kinds[i] = "text"
        if word == "a" and "operator" in kinds[max(i - 1, 0):i + 2]:     # a + (K − 1)b
            kinds[i] = "math"
    parts: list[tuple[str, str]] = []
    run: list[str] = []             # the words of the formula being read

    def emit(kind: str, piece: str) -> None:
        if not piece:
            return
        if parts and parts[-1][0] == kind == "text":
            parts[-1] = (kind, parts[-1][1] + piece)
        else:
            parts.append((kind, piece))

    def close() -> None:
        formula, lead, trail = " ".join(run), "", ""
        run.clear()
        if _depth(formula) > 0:           # "m_0 ≥ −ln 2 (c_k ≥ −1/4 below)": ( is prose
            depth, cut = 0, None
            for j in range(len(formula) - 1, -1, -1):
                depth += (formula[j] in _OPENING) - (formula[j] in _CLOSING)
                if depth > 0:
                    cut = j
                    break
            if cut is not None and (cut == 0 or formula[cut - 1] == " "):
                before = formula[:cut].rstrip()
                emit("math", before)
                lead, formula = formula[len(before):cut + 1], formula[cut + 1:]
        while formula[-1:] in _CLOSING and _depth(formula) < 0:  # "c = c_k < 0)"
            formula, trail = formula[:-1], formula[-1] + trail
        emit("text", lead)
        emit("math", formula)
        emit("text", trail)

    for i, (word, kind) in enumerate(zip(words, kinds)):
        following = kinds[i + 1] if i + 1 < len(kinds) else "text"
        if kind == "connector":
            joins = (following == "operator" or bool(run) and (
                following == "math" or _depth(" ".join(run)) > 0
                or bool(_OPEN_END.search(run[-1]))))
        else:
            joins = kind in ("math", "operator")
        if not joins:
            if run:
                close()
            emit("text", " " if i else "")
            if kind == "code":
                core = word.strip(_STRIP)
                lead, trail = word.split(core, 1)
                emit("text", lead)
                emit("code", core)
                emit("text", trail)
            else:
                emit("text", word)
            continue
        punctuation = re.search(r"(?:'s)?[,.;:]*$", word)          # Z₁'s, c_k:
        body = word[:punctuation.start()]
        if run and _two_formulas(run[-1], body):                  # "0 (n = j + 2)"
            close()
        if not run:
            emit("text", " " if i else "")
        run.append(body)
        if punctuation.group():
            if punctuation.group() == "," and _depth(" ".join(run)) > 0:  # diag(γ_1, γ_2)
                run[-1] += ","
            else:
                close()
                emit("text", punctuation.group())
    if run:
        close()
    return parts


_GREEK_UNICODE = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "Delta": "Δ",
                  "epsilon": "ε", "eta": "η", "theta": "θ", "Lambda": "Λ", "lambda": "λ",
                  "sigma": "σ", "ell": "ℓ", "nabla": "∇", "Sigma": "Σ", "partial": "∂",
                  "phi": "φ", "varphi": "φ"}
_SUBSCRIPT = dict(zip("0123456789aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ"))


def _symbol_text(name: str) -> str:
    """The name in Unicode, as one word sympy's pretty printer sets as it stands."""
    out = name.replace("Sigma_m(a_m^2)", "Σₘaₘ²").replace(" != ", "≠").replace("!=", "≠")
    out = out.replace("<=", "≤").replace(">=", "≥")
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


# A sum of matrices (MatAdd) is printed by sympy as if no term had a sign of its own: the
# LaTeX printer joins a term -μ·Q with " + " ("a + - \mu Q"), and the pretty printer,
# asking whether the term's coefficient could be negated, drops the " + " before a term with
# coefficient 1 − λ and sets "a -μ⋅Q" against a term -μ·Q. The printers below join each
# term by its sign: a term whose coefficient leads with a negative number (-μ, -α/(K − 1))
# is " - " and its magnitude, any other " + " and the term as it stands.

def _signed(term: sp.Basic) -> tuple[bool, sp.Basic]:
    """(negative, what is shown after the sign) for a term of a sum."""
    if isinstance(term, sp.MatrixExpr):
        scalar, matrix = term.as_coeff_mmul()
        number, rest = sp.S(scalar).as_coeff_Mul()
        if not (number.is_Number and number.is_negative):
            return False, term
        factors = [f for f in [-number * rest] if f != 1]
        factors += matrix.args if isinstance(matrix, sp.MatMul) else [matrix]
        return True, sp.MatMul(*factors) if len(factors) > 1 else factors[0]
    number, rest = term.as_coeff_Mul()
    if not (number.is_Number and number.is_negative):
        return False, term
    if rest == 1:
        return True, -number                      # -1/2
    return True, rest if number == -1 else sp.Mul(-number, rest, evaluate=False)


class _LatexPrinter(LatexPrinter):
    def _print_MatAdd(self, expr):
        tex = ""
        for i, term in enumerate(self._as_ordered_terms(expr)):
            negative, shown = _signed(term) if i else (False, term)   # -μQ leads as it is
            tex += (" - " if negative else " + ") if i else ""
            printed = self._print(shown)
            tex += rf"\left({printed}\right)" if self._needs_add_brackets(shown) else printed
        return tex


class _PrettyPrinter(PrettyPrinter):
    def _print_MatAdd(self, expr):
        pieces = [p for piece in self.sum_pieces(expr) for p in piece if p != ""]
        return prettyForm(*stringPict.next(*pieces), binding=prettyForm.ADD)

    def sum_pieces(self, expr) -> list[tuple[str, prettyForm]]:
        """The terms of the sum ``expr`` as (sign, form): "" for the first (its own sign
        printed with it), " + " or " - " for the others."""
        terms = expr.args if isinstance(expr, sp.MatAdd) else self._as_ordered_terms(expr)
        pieces = [("", self._print(terms[0]))]              # -μ⋅Q leads as it is
        for term in terms[1:]:
            negative, shown = _signed(term)
            form = self._print(shown)
            if negative and form.binding == prettyForm.ADD:
                form = prettyForm(*form.parens())
            pieces.append((" - " if negative else " + ", form))
        return pieces


def math_latex(expr: sp.Basic) -> str:
    shown = _for_display(expr, None)      # names are set by the printer's symbol_names
    names = {s: formula_latex(s.name) for s in shown.atoms(sp.Symbol)}
    return _LatexPrinter({"symbol_names": names}).doprint(shown)


def math_text(expr: sp.Basic, width: int | None = None) -> str:
    """``expr`` as sympy's Unicode picture. With ``width``, an equation wider than that is
    cut before a term of its right side (a sum), each further line starting with the term's
    sign under the right side; a piece still too wide is cut by sympy (marked ↪)."""
    shown = _for_display(expr, _symbol_text)
    printer = _PrettyPrinter({"use_unicode": True, "wrap_line": False})
    unicode_before = pretty_use_unicode(True)
    try:
        whole = printer._print(shown)
        if width is None or whole.width() <= width:
            return whole.render(wrap_line=False)
        rows = [whole]
        if isinstance(shown, sp.Equality):
            lead = stringPict(*stringPict.next(printer._print(shown.lhs), " = "))
            numerator, denominator = sp.fraction(shown.rhs, exact=True)
            if isinstance(shown.rhs, (sp.Add, sp.MatAdd)):
                rows = _rows(lead, printer.sum_pieces(shown.rhs), width)
            elif denominator != 1 and isinstance(numerator, sp.Add):
                # a fraction over a long sum (claim 4's T_flow): the sum's lines over one bar
                top = _rows(stringPict(""), printer.sum_pieces(numerator),
                            width - lead.width())
                wide = max(row.width() for row in top)        # stack centres: pad right
                top = [stringPict(*stringPict.next(row, " " * (wide - row.width())))
                       for row in top]
                over = prettyForm(*stringPict.stack(*top)) / printer._print(denominator)
                rows = [stringPict(*stringPict.next(lead, over))]
        return "\n".join(row.render(wrap_line=True, num_columns=width, use_unicode=True)
                         for row in rows)
    finally:
        pretty_use_unicode(unicode_before)


def _rows(lead: stringPict, pieces: list, width: int) -> list[stringPict]:
    """``lead`` (``lhs = ``) and the sum's terms, as many on a line as ``width`` allows; a
    further line is indented by ``lead`` and starts with its term's sign."""
    row = stringPict(*stringPict.next(lead, pieces[0][1]))
    rows = []
    for sign, form in pieces[1:]:
        longer = stringPict(*stringPict.next(row, sign, form))
        if longer.width() <= width:
            row = longer
            continue
        rows.append(row)
        row = stringPict(*stringPict.next(" " * lead.width(), sign.lstrip(), form))
    return rows + [row]


# --- Markdown -------------------------------------------------------------------------

def to_markdown(d: Derivation, claim) -> str:
    """``claim``: the registry entry (statement and decisive step)."""
    md = markdown_text
    lines = [f"# Claim {d.id}: {md(d.title)}", "",
             "<!-- generated by `python -m oodcalc.symbolic.documents`; do not edit -->", "",
             f"**Statement.** {md(claim.statement)}", "",
             f"**Level: {md(d.level)}.** {md(d.scope)}", "",
             f"**Decisive step.** {md(claim.decisive_step)}", "", "## Derivation", ""]
    for i, step in enumerate(d.steps, 1):
        lines.append(f"{i}. {md(step.text)}")
        for expr in step.math:
            lines += ["", f"   $$ {math_latex(expr)} $$"]
        lines.append("")
    lines += ["## Checks", "", "Decisive checks (the level rests on them) are marked ★.", "",
              "| # | check | method | on | result |", "|---|---|---|---|---|"]
    for i, c in enumerate(d.checks, 1):
        cells = [md(text).replace("|", "\\|") for text in (c.what, c.method, c.detail or "—")]
        lines.append(f"| {i}{' ★' if c.decisive else ''} | {' | '.join(cells)} | "
                     f"{'passed' if c.passed else '**FAILED**'} |")
    if d.findings:
        lines += ["", "## Where the paper's statement differs", ""]
        lines += [f"- {md(f)}" for f in d.findings]
    return "\n".join(lines) + "\n"


# --- LaTeX ----------------------------------------------------------------------------

_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                "^": r"\textasciicircum{}", "|": r"\textbar{}", "<": r"\textless{}",
                ">": r"\textgreater{}"}
_TEX_TEXT = {"—": "---", "–": "--", "…": r"\dots{}", "’": "'", "“": "``", "”": "''"}


def _tex_escaped(text: str) -> str:
    out = []
    for ch in text:
        if ch in _TEX_SPECIAL:
            out.append(_TEX_SPECIAL[ch])
        elif ch in _TEX_TEXT:
            out.append(_TEX_TEXT[ch])
        elif ord(ch) < 128:
            out.append(ch)
        else:
            raise KeyError(f"no LaTeX for character {ch!r} (U+{ord(ch):04X})")
    return "".join(out)


def tex_text(text: str) -> str:
    """Prose (plain Unicode, formulas written inline) → LaTeX, every formula in math mode;
    raises ``KeyError`` for a character it cannot set."""
    out = []
    for kind, piece in prose_parts(text):
        if kind == "math":
            out.append(f"${formula_latex(piece)}$")
        elif kind == "code":
            out.append(rf"\texttt{{{_tex_escaped(piece)}}}")
        else:
            out.append(_tex_escaped(piece))
    return "".join(out)


def markdown_text(text: str) -> str:
    """Prose → Markdown: formulas as inline math ``$…$``, Python names as code."""
    out = []
    for kind, piece in prose_parts(text):
        out.append(f"${formula_latex(piece)}$" if kind == "math"
                   else f"`{piece}`" if kind == "code" else piece)
    return "".join(out)


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
    console.rule(Text(f"Claim {d.id}: {d.title}"))      # Text: no prose read as markup
    console.print(Text("Statement: ", style="bold") + Text(claim.statement))
    console.print(Text(f"Level: {d.level}. ", style="bold") + Text(d.scope))
    console.print(Text("Decisive step: ", style="bold") + Text(claim.decisive_step))
    console.print()
    for i, step in enumerate(d.steps, 1):
        console.print(Text(f"{i}. ", style="bold") + Text(step.text))
        for expr in step.math:
            console.print(Text(_indent(math_text(expr, console.width - 4), 4)),
                          soft_wrap=True)
        console.print()
    table = Table(title="Checks", show_lines=False)
    for column in ("#", "check", "method", "on", "result"):
        table.add_column(column)
    for i, c in enumerate(d.checks, 1):
        table.add_row(Text(f"{i}{' ★' if c.decisive else ''}"), Text(c.what), Text(c.method),
                      Text(c.detail or "—"),
                      Text("passed", style="green") if c.passed
                      else Text("FAILED", style="bold red"))
    console.print(table)
    for f in d.findings:
        console.print(Text("Differs from the paper: ", style="bold yellow") + Text(f))


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())
