"""A :class:`~oodcalc.report.Report` as Markdown or HTML, for Jupyter and for documents.

Both renderings come from one list of sections (a title, a few lines, one table), so
they show the same numbers. Only the standard library is used: displaying a report in a
notebook costs no import beyond numpy.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from .geometry import describe_text

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

