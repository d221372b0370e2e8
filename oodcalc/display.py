"""A :class:`~oodcalc.report.Report` as Markdown or HTML, for Jupyter and for documents,
and as a short plain-text summary (``str(report)``) and a one-line ``repr``.

The Markdown and HTML renderings come from one list of sections (a title, a few lines,
one table), so they show the same numbers; the text summary reads the same fields. Only the standard library is used: displaying a report in a
notebook costs no import beyond numpy.
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field
from typing import Any

from .geometry import describe_text

__all__ = [
    "Section", "TEXT_MAX_FEATURES", "fmt", "one_line", "sections", "to_html", "to_markdown",
    "to_text",
]


#: A :class:`~oodcalc.report.Report`, read by its fields: this module sits below report.py
#: (whose Jupyter reprs call it) and does not import it.
Report = Any


def fmt(x: float | None, digits: int = 5) -> str:
    return "—" if x is None else f"{x + 0.0:.{digits}g}"     # + 0.0: no "-0"


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


def sections(report: Report) -> list[Section]:
    """What a report says, phase by phase, as text cells."""
    p = report.parameters
    K = p["K"]
    head = Section(f"oodcalc report ({report.source}) · {describe_text(p['geometry'])}",
                   [f"K = {K}, d = {p['d']}, ε = {fmt(p['eps'])}, η = {fmt(p['eta'])}, "
                    f"η_ft = {fmt(p['eta_ft'])}",
                    *(f"warning: {w}" for w in report.warnings)])

    pre = report.pretrain
    pretrain = Section(f"1 · Pretraining on V: T1 = {pre.T1}",
                       header=["quantity", "at T1", "closed-form threshold"])
    star = pre.alpha_star
    pretrain.rows = [
        ["α (every v_k)", fmt(pre.alpha), fmt(star)],
        ["β (every pair)", fmt(pre.beta), fmt(None if star is None else -star / (K - 1))],
        ["max e_k on V", fmt(float(pre.error.max())), f"<= ε = {fmt(p['eps'])}"],
    ]

    ood = report.ood
    ood_section = Section("2 · OOD features at T1",
                          [f"OOD loss L = Σ e_k/K = {fmt(float(ood.error.sum() / K))}"],
                          ["k", "α_{u_k}", "Attn_k", "e_k", "corollary"])
    for k in range(K):
        case = ood.corollary[k] if ood.corollary else None
        ood_section.rows.append([str(k + 1), fmt(ood.z[k, k]), fmt(ood.attention[k, k]),
                                 fmt(ood.error[k]), case or "—"])

    ft = report.finetune
    finetune = Section(f"3 · Fine-tuning on U: T2 = {ft.T2}")
    if ft.step_size_bound is not None:
        within = "within" if ft.eta_ft <= ft.step_size_bound else "exceeds"
        finetune.lines.append(f"step-size bound (claim 9) = {fmt(ft.step_size_bound)}; "
                              f"η_ft = {fmt(ft.eta_ft)} {within} it")
    F = report.F
    meaning = ("net forgetting" if F > 0 else "net positive backward transfer" if F < 0
               else "no net change")
    finetune.lines.append(f"F = L_tr(after) − L_tr(before) = {F:+.5g} ({meaning})")
    finetune.header = ["k", "paper's verdict (claim 8)", "condition", "first step ΔL_{v_k} (exact)",
                       "D_k (first order)", "F_k = ΔL_{v_k}", "L_{v_k} trend"]
    for f in report.forgetting:
        trend = f.trend + (" ✗ (contradicts the verdict)" if f.theorem_holds is False else "")
        first = ("—" if f.first_step is None
                 else f"{f.initial_direction} ({f.first_step:+.3g})")
        criterion = ("—" if f.D_k is None else f"{f.D_k:+.4g} "
                     + ("✓" if f.D_k_agrees else "✗ (the O(η²) term decides)"))
        finetune.rows.append([str(f.k), f.regime or "—", f.condition or "—", first,
                              criterion, f"{f.F_k:+.4g}", trend])
    return [head, pretrain, ood_section, finetune]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(report: Report) -> str:
    out = []
    for s in sections(report):
        out.append(f"**{s.title}**")
        if s.lines:
            out += [""] + [f"{line}  " for line in s.lines]   # two spaces: a line break
        if s.header:
            out += ["", "| " + " | ".join(s.header) + " |", "|" + "---|" * len(s.header)]
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in s.rows]
        out.append("")
    return "\n".join(out).strip() + "\n"


def to_html(report: Report) -> str:
    esc = html.escape
    out = ['<div class="oodcalc-report">']
    for i, s in enumerate(sections(report)):
        tag = "h4" if i == 0 else "h5"
        out.append(f"<{tag}>{esc(s.title)}</{tag}>")
        out += [f"<p>{esc(line)}</p>" for line in s.lines]
        if s.header:
            out.append("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in s.header)
                       + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                    for row in s.rows]
            out.append("</tbody></table>")
    out.append("</div>")
    return "\n".join(out)



#: ``str(report)`` lists this many features; a larger K shows the first and last ones.
TEXT_MAX_FEATURES = 12


def to_text(report: Report, width: int = 80) -> str:
    """A plain-text summary within ``width`` columns: the geometry and parameters, T1, the
    OOD loss, T2, ``F_k`` per feature with its trend and the paper's verdict, and F.

    The full tables are :func:`to_markdown` (Jupyter) and ``oodcalc predict``'s output.
    """
    p = report.parameters
    K = p["K"]
    pre, ood, ft = report.pretrain, report.ood, report.finetune
    lines = [f"oodcalc report ({report.source}) · {describe_text(p['geometry'], 8)}",
             f"K = {K}, d = {p['d']}, ε = {fmt(p['eps'])}, η = {fmt(p['eta'])}, "
             f"η_ft = {fmt(p['eta_ft'])}"]
    alpha = f"α = {fmt(pre.alpha)}"
    if pre.alpha_star is not None:
        alpha += f", threshold α* = {fmt(pre.alpha_star)}"
    lines.append(f"1 · Pretraining on V: T1 = {pre.T1} ({alpha})")
    lines.append(f"2 · OOD features at T1: OOD loss L = Σ e_k/K = {fmt(ood.loss)}")
    step = ""
    if ft.step_size_bound is not None:
        within = "within" if ft.eta_ft <= ft.step_size_bound else "exceeds"
        step = f" (η_ft {within} the step-size bound {fmt(ft.step_size_bound)})"
    lines.append(f"3 · Fine-tuning on U: T2 = {ft.T2}{step}")

    rows = [(str(f.k), f"{f.F_k + 0.0:+.4g}", f.trend,
             (f.regime or "—") + (" ✗ contradicted" if f.theorem_holds is False else ""))
            for f in report.forgetting]
    if len(rows) > TEXT_MAX_FEATURES:
        half = TEXT_MAX_FEATURES // 2
        rows = rows[:half] + [("…", f"({len(rows) - 2 * half} more)", "", "")] + rows[-half:]
    header = ("k", "F_k = ΔL_{v_k}", "L_{v_k} trend", "paper's verdict (claim 8)")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(3)]
    for row in (header, *rows):
        cells = [row[0].rjust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2])]
        lines.append(("   " + "  ".join(cells) + "  " + row[3]).rstrip())
    F = report.F
    meaning = ("net forgetting" if F > 0 else "net positive backward transfer" if F < 0
               else "no net change")
    lines.append(f"F = L_tr(after) − L_tr(before) = {F + 0.0:+.5g} ({meaning})")
    lines += [f"warning: {w}" for w in report.warnings]
    wrapped = []
    for line in lines:   # a long geometry or warning continues indented
        wrapped += textwrap.wrap(line, width, subsequent_indent="    ",
                                 break_on_hyphens=False) or [""]
    return "\n".join(wrapped)


def one_line(report: Report, max_geometry: int = 80) -> str:
    """``repr(report)``: who made it, the geometry and the headline numbers, one line."""
    p = report.parameters
    geometry = describe_text(p["geometry"], 6)
    if len(geometry) > max_geometry:
        geometry = geometry[:max_geometry - 1] + "…"
    return (f"<Report {report.source}: {geometry}; K={p['K']}, T1={report.pretrain.T1}, "
            f"ood_loss={fmt(report.ood.loss, 4)}, T2={report.finetune.T2}, "
            f"F={report.F + 0.0:+.4g}>")
