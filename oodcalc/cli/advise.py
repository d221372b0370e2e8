"""``oodcalc advise``: every fine-tuning intervention for one geometry, side by side."""

from __future__ import annotations

import json
import math
import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .. import limits
from ..prescribe import CAP_FACTOR, MIN_CAP, TOLERANCE, Advice
from ..console import make_console, say
from ..geometry import describe_text as describe_geometry
from . import options
from .app import app
from .render import TABLE, fmt
from .setting_options import (Dimension, Eps, Eta, EtaFt, Features, Gamma, MaxSteps,
                              MeanQuery, NumFeatures, Ood, Orthogonal, Overlap, Theta,
                              Tolerance, build_setting)


class Style(str, Enum):
    text = "text"
    markdown = "markdown"
    json = "json"


Width = Annotated[Optional[str], typer.Option("--search-tol", metavar="WIDTH",
    help="Bracket λ* and μ* to this width w (0 < w <= 0.01).",
    show_default=f"{TOLERANCE:g}")]
StyleOption = Annotated[Style, typer.Option("--format", "-f",
    help="text (tables), markdown or json.")]


@app.command()
def advise(
    gamma: Gamma = None, overlap: Overlap = None, theta: Theta = None,
    mean_query: MeanQuery = False,
    orthogonal: Orthogonal = False, features: Features = None, ood: Ood = None,
    K: NumFeatures = None, d: Dimension = None, tol: Tolerance = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
    search_tol: Width = None, style: StyleOption = Style.text,
) -> None:
    """What to do about forgetting: every fine-tuning intervention run exactly, the smallest
    replay share λ* and pull μ* that prevent forgetting, the paper's advice judged.

    Example: oodcalc advise --gamma 1,-0.9
    """
    from ..prescribe import advise as run_advise
    width = TOLERANCE if search_tol is None else options.number(
        "--search-tol", search_tol, "expected a width 0 < w <= 0.01")
    setting = build_setting(gamma, theta, K, mean_query, orthogonal, features, ood, d, tol,
                            eps, eta, eta_ft, max_steps, checks=[limits.check_predict],
                            overlap=overlap)
    console = make_console(stderr=True)
    show = sys.stderr.isatty() and style is Style.text

    def progress(name: str) -> None:
        if show:
            console.print(f"[dim]running {escape(name)}[/dim]", end="\r")

    advice = run_advise(setting, tolerance=width, progress=progress)
    if style is Style.json:
        print(json.dumps(advice.to_dict(), indent=2, ensure_ascii=False))
    elif style is Style.markdown:
        print(markdown(advice))
    else:
        render(advice)


#: A threshold's run ends its search within the bracket's width of F = 0 (or F_k = 0): what
#: is left there is the search's residual, shown as a bound, not as digits.
RESIDUAL = 1e-9


def _change(x: float, digits: int) -> str:
    if x != 0 and abs(x) < RESIDUAL:
        return f"{'+' if x > 0 else '-'}<{RESIDUAL:g}"
    return "0" if x == 0 else fmt(x, digits, "+")


def _rows(advice: Advice) -> list[list[str]]:
    rows = []
    for arm in advice.arms:
        if math.isnan(arm.F):
            rows.append([arm.name, "not run", "", "", "", ""])
            continue
        rows.append([arm.name, _change(arm.F, 4), _change(max(arm.F_k), 3),
                     fmt(arm.loss_ood, 3), str(arm.steps), "yes" if arm.reached else "no"])
    return rows


HEADERS = ("arm", "F", "worst F_k", "final L_U", "steps", "rule met")


def _threshold_lines(advice: Advice) -> list[str]:
    lines = []
    for t, label in ((advice.replay, "λ* (replay)"), (advice.l2, "μ* (pull)"),
                     (advice.replay_each, "λₖ* (replay, every F_k)"),
                     (advice.l2_each, "μₖ* (pull, every F_k)")):
        if t.value is None:
            lines.append(f"{label}: none. {t.why}")
        elif t.arm is None:
            lines.append(f"{label} = 0: {t.why}")
        else:
            lines.append(f"{label} = {t.value:.7g}: F = {_change(t.arm.F, 3)} in "
                         f"{t.arm.steps} steps (plain: {advice.arm('plain').steps}); {t.why}")
    return lines


def _footer(advice: Advice) -> str:
    return (f"Every arm is exact gradient descent on the population loss; an arm runs at most "
            f"{advice.cap} steps ({CAP_FACTOR} × plain fine-tuning's, at least {MIN_CAP} and "
            "twice pretraining's). F = Σ_k F_k, the source loss's change (±<1e-9: a search's "
            "residual at its threshold); L_U = (1/K) Σ_k e_k on U at the end. Pareto: no other arm has F, L_U and steps all no larger (one "
            "smaller).")


def render(advice: Advice) -> None:
    console = make_console()
    p = advice.parameters
    say(console, f"[bold]oodcalc advise[/bold] · {escape(describe_geometry(p['geometry']))}")
    say(console, f"K = {p['K']}, ε = {fmt(p['eps'])}, η = {fmt(p['eta'])}, η_ft = "
                 f"{fmt(p['eta_ft'])}; exact population dynamics from Q = 0")
    table = Table(title="Interventions, each to the stopping rule on U", title_justify="left",
                  **TABLE)
    for i, name in enumerate(HEADERS):
        table.add_column(name, justify="left" if i == 0 else "right")
    pareto = set(advice.pareto)
    for row, arm in zip(_rows(advice), advice.arms):
        table.add_row(*row, style="bold" if arm.name in pareto else None)
    console.print(table)
    say(console, "[bold]Thresholds[/bold]")
    for line in _threshold_lines(advice):
        say(console, f"  {escape(line)}", indent=2)
    say(console, "[bold]The paper's advice, on this geometry[/bold]")
    for v in advice.verdicts:
        say(console, f"  {escape(v.advice)}: [bold]{escape(v.verdict)}[/bold] "
                     f"({escape(v.reason)})", indent=2)
    say(console, f"Pareto front (bold): {escape(', '.join(advice.pareto))}")
    for arm in advice.arms:
        if arm.note:
            say(console, f"[dim]{escape(arm.name)}: {escape(arm.note)}[/dim]", indent=2)
    say(console, f"[dim]{escape(_footer(advice))}[/dim]")


def markdown(advice: Advice) -> str:
    p = advice.parameters
    pareto = set(advice.pareto)
    lines = [f"## oodcalc advise · {describe_geometry(p['geometry'])}", "",
             f"K = {p['K']}, ε = {p['eps']:g}, η = {p['eta']:g}, η_ft = {p['eta_ft']:g}.", "",
             "| " + " | ".join(HEADERS) + " |", "|---|" + "---:|" * (len(HEADERS) - 1)]
    for row, arm in zip(_rows(advice), advice.arms):
        cells = [f"**{c}**" if arm.name in pareto and c else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *(f"- {line}" for line in _threshold_lines(advice)), "",
              "The paper's advice, on this geometry:", ""]
    lines += [f"- {v.advice}: **{v.verdict}** ({v.reason})" for v in advice.verdicts]
    lines += ["", f"Pareto front (bold): {', '.join(advice.pareto)}.", ""]
    lines += [f"- {arm.name}: {arm.note}" for arm in advice.arms if arm.note]
    lines += ["", _footer(advice)]
    return "\n".join(lines)
