"""Human output of ``oodcalc predict`` with rich (imported only when a human asks)."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import theory
from ..geometry import describe_text as describe_geometry
from ..report import Report
from ..setting import INTERVENTIONS
from ..console import breaks, make_console, say

#: Every table: a rule under the header, no frame, one space between columns.
TABLE = dict(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))

REGIME_STYLE = {"forgetting": "red", "backward-transfer": "green",
                "undetermined": "yellow", "unaffected": "cyan", None: "dim"}


def fmt(x: float, digits: int = 5, sign: str = "") -> str:
    """``x`` to ``digits`` significant digits; a float64 overflow is said in words, never
    printed as inf or nan."""
    if math.isnan(x):
        return "undefined (overflow)"
    if math.isinf(x):
        return "overflow" if x > 0 else "−overflow"
    return f"{x + 0.0:{sign}.{digits}g}"        # + 0.0: −0.0 (−α*/(K−1) at α* = 0) is 0


def add_feature_rows(table: Table, rows: list[tuple[str, ...]],
                     generic: list[tuple[str, ...]] | None = None) -> None:
    """One row per feature k (first cell: k); consecutive features whose cells print the
    same merge into one row ``k–k'`` (``all``: a rotation of K = 1024 features is one row).
    ``generic[k]``, if given, is row k with its feature indices written as k and m: what
    is compared, and what a merged row shows."""
    generic = generic or rows
    start = 0
    for k in range(1, len(rows) + 1):
        if k == len(rows) or generic[k] != generic[start]:
            if k == start + 1:
                table.add_row(str(k), *rows[start])
            else:
                label = "all" if (start, k) == (0, len(rows)) else f"{start + 1}–{k}"
                table.add_row(label, *generic[start])
            start = k


def generic_indices(text: str, k: int) -> str:
    """``−γ3·γ1 = … <= γ3² <= −γ3·γ4`` for feature 3 → ``−γk·γm = … <= γk² <= −γk·γm′``
    (v3 → vk): the other features named m, m′ in order of appearance."""
    names: dict[int, str] = {k: "k"}

    def name(match: re.Match) -> str:
        i = int(match.group(2))
        if i not in names:
            names[i] = "m" + "′" * (len(names) - 1)
        return match.group(1) + names[i]

    return re.sub(r"([γv])(\d+)", name, text)


@functools.lru_cache(maxsize=4096)     # a rotation's K rows repeat a handful of cells
def _cell_width(markup: str) -> int:
    return max(Text.from_markup(line).cell_len for line in markup.split("\n"))


def _forgetting_table(report: Report, console: Console) -> Table:
    """Per source feature: the paper's verdict and its condition, the exact first step
    with the first-order D_k, F_k and the trend. The condition wraps, at spaces outside
    its formulas, in the width the other columns leave (never when piped)."""
    p = report.parameters
    gamma = p["geometry"].get("gamma") or np.diag(np.asarray(p["geometry"]["M"]))
    # one quantity per column, named: changes of L_{v_k} = e_k/K (they add up to F)
    headers = ("k", "γ_k", "paper's verdict\n(claim 8)", "first step (exact)\nΔL_{v_k}; D_k",
               "F_k (exact)\nΔL_{v_k}", "L_{v_k}\ntrend")
    rows = []
    for f in report.forgetting:
        first = (f"{escape(f.initial_direction)} {fmt(f.first_step, 3, '+')}"
                 if f.initial_direction else "[dim]n/a[/dim]")
        if f.D_k is not None:
            first += f"\nD_k = {fmt(f.D_k, 4, '+')} " + ("✓" if f.D_k_agrees else "[red]✗[/red]")
        trend = escape(f.trend)
        trend = trend if f.theorem_holds is not False else f"[red]{trend} ✗[/red]"
        rows.append([fmt(gamma[f.k - 1], 4), None, first, fmt(f.F_k, 4, "+"), trend])
    others = [max(_cell_width(h), *(_cell_width(r[j - 1]) for r in rows))
              for j, h in enumerate(headers) if j != 2]
    others[0] = max(others[0], len(str(len(rows))) * 2 + 1)    # a merged label "1–3"
    room = None if console.soft_wrap else max(17, console.width - sum(others) - len(headers))
    generic = []
    for f, row in zip(report.forgetting, rows):
        style = REGIME_STYLE[f.regime]
        condition = f.condition or ""           # wrapped as text, then escaped: markup
        if room is not None:
            cuts = [0, *breaks(condition, room), len(condition)]
            condition = "\n".join(condition[i:j].rstrip() for i, j in zip(cuts, cuts[1:]))
        row[1] = (f"[{style}]{escape(f.regime)}[/{style}]\n{escape(condition)}" if f.regime
                  else "[dim]n/a: the theorem is\nfor plain fine-tuning[/dim]"
                  if intervened(report.parameters)
                  else "[dim]n/a: the theorem\nassumes a parallel shift[/dim]")
        generic.append(tuple(generic_indices(cell, f.k) for cell in row))
    table = Table(**TABLE)
    for j, name in enumerate(headers):
        table.add_column(name, no_wrap=True, justify="right" if j in (1, 4) else "left")
    add_feature_rows(table, [tuple(r) for r in rows], generic)
    return table


def intervened(parameters: dict) -> bool:
    return any(name in parameters for name in INTERVENTIONS)


def describe_interventions(parameters: dict) -> str:
    """``replay λ = 0.5, L2 pull μ = 0.1, key-side projection, weights cosine``."""
    p, parts = parameters, []
    if "replay" in p:
        parts.append(f"replay λ = {fmt(p['replay'])}")
    if "l2" in p:
        parts.append(f"L2 pull μ = {fmt(p['l2'])} toward Q^(T1)")
    if "project" in p:
        side = {"key": "the key side", "query": "the query side", "both": "both sides"}
        parts.append(f"the update projected off span(V) on {side[p['project']]}")
    if "weights" in p:
        w = p["weights"]
        parts.append(f"query weights {w}" if isinstance(w, str)
                     else "query weights c = (" + ", ".join(fmt(c) for c in w) + ")")
    return ", ".join(parts)


def render_prediction(report: Report, console: Console | None = None) -> None:
    console = console or make_console()
    p = report.parameters
    K = p["K"]
    say(console, f"[bold]oodcalc predict[/bold] · {escape(describe_geometry(p['geometry']))}")
    say(console, f"K = {K}, d = {p['d']}, ε = {fmt(p['eps'])}, η = {fmt(p['eta'])}, "
                 f"η_ft = {fmt(p['eta_ft'])}; exact population dynamics from Q = 0")
    if intervened(p):
        say(console, f"fine-tuning with {escape(describe_interventions(p))}")

    pre = report.pretrain
    table = Table(title="1 · Pretraining on V: where the stopping rule e_k <= ε is met",
                  title_justify="left", **TABLE)
    table.add_column("quantity")
    table.add_column("closed form (threshold)", justify="right")
    table.add_column("gradient descent at T1", justify="right")
    overlapping = "G_V" in p["geometry"]
    if pre.alpha_star is None:          # overlapping features without equal overlaps
        table.add_row("α  (mean over v_k)", "[dim]no closed form known[/dim]", fmt(pre.alpha))
        table.add_row("β  (mean over pairs)", "", fmt(pre.beta))
    else:
        star = "α*(ρ)" if overlapping else "α*"
        table.add_row("α  (every v_k)", f"{star} = {fmt(pre.alpha_star)}", fmt(pre.alpha))
        table.add_row("β  (every pair)", f"−{star}/(K−1) = {fmt(-pre.alpha_star / (K - 1))}",
                      fmt(pre.beta))
    table.add_row("e_k on v_k", f"<= ε = {fmt(p['eps'])}", fmt(float(pre.error.max())))
    table.add_row("T1", "", str(pre.T1))
    console.print(table)

    ood = report.ood
    title = ("2 · OOD features at T1 (z_U = Mᵀ G_V⁻¹ z_V G_V⁻¹ M, M = VᵀU)" if overlapping
             else "2 · OOD features at T1 (claim 5, M = VᵀU)")
    table = Table(title=title, title_justify="left", **TABLE)
    for name in ("k", "α_{u_k}", "β_{u_n,u_k}, n≠k", "Attn_k", "e_k", "e_k at α*", "corollary"):
        table.add_column(name, justify="left" if name in ("k", "corollary") else "right")
    closed_error = (ood.at_alpha_star["error"] if ood.at_alpha_star is not None
                    else [math.nan] * K)
    off = ~np.eye(K, dtype=bool)
    rows = []
    for k in range(K):
        betas = ood.z[off[:, k], k]
        beta_text = (", ".join(fmt(b, 4) for b in betas) if K <= 4
                     else f"{fmt(betas.min(), 4)} … {fmt(betas.max(), 4)}")
        rows.append((fmt(ood.z[k, k]), beta_text, fmt(ood.attention[k, k]),
                     fmt(ood.error[k]),
                     "—" if math.isnan(closed_error[k]) else fmt(closed_error[k]),
                     escape(ood.corollary[k] or "—")))
    add_feature_rows(table, rows)
    console.print(table)
    if "G_U" in p["geometry"]:   # overlapping OOD features guess better: e_k depends on G_U
        guess = theory.uniform_errors(np.array(p["geometry"]["G_U"]))
        guess_text = (fmt(float(guess[0])) if np.ptp(guess) <= 1e-12 * guess.max() else
                      "(" + ", ".join(fmt(float(e), 4) for e in guess[:8])
                      + (", …)" if K > 8 else ")"))
    else:
        guess_text = fmt(theory.uniform_error(K))
    say(console, f"Random guessing (uniform attention 1/K) has e_k = {guess_text}; "
                 f"OOD loss L = Σ e_k/K = {fmt(float(ood.error.sum() / K))}.")

    ft = report.finetune
    console.print()
    if p.get("ft_steps") is not None:
        rule = "exactly that many steps, no stopping rule"
    elif p.get("eps_ft", p["eps"]) != p["eps"]:
        rule = f"until every e_k <= ε_ft = {fmt(p['eps_ft'])}"
    else:
        rule = "until every e_k <= ε"
    if "weights" in p:
        rule = rule.replace("every e_k <= ", "e_k <= ") + " for every k with c_k > 0"
    if ft.reached is not None:
        rule += "; reached" if ft.reached else "; [red]not reached[/red], see the warning"
    say(console, f"[bold]3 · Fine-tuning on U[/bold] from Q^(T1): T2 = {ft.T2} steps "
                 f"({rule})")
    if ft.step_size_bound is not None:
        verdict = ("is [green]within[/green]" if ft.eta_ft <= ft.step_size_bound
                   else "[red]exceeds[/red]")
        say(console, f"step-size bound min_(n≠k) exp(−β_(u_n,u_k)) = "
                     f"{fmt(ft.step_size_bound)}; η_ft = {fmt(ft.eta_ft)} {verdict} it.")
    elif overlapping and not intervened(p):
        say(console, "The step-size bound of claim 9 is for orthonormal features; the "
                     "paper's verdicts below read the γ of the construction.")
    else:
        say(console, "The closed forms of claims 8 and 9 (regimes, D_k, step-size bound) "
                     "describe plain fine-tuning and are not shown beside interventions.")
    console.print(_forgetting_table(report, console))
    if overlapping and any(f.D_k is not None for f in report.forgetting):
        say(console, "First step: the exact change of L_{v_k} = e_k/K over fine-tuning's "
                     "first step (F_k: over all of it); below it the overlap-aware "
                     "first-order change of e_k per unit η_ft, D_k = −⟨∇_(z_V) e_k, "
                     "M g_U Mᵀ⟩: ✓ its sign is the step's, ✗ it is not.")
    elif any(f.D_k is not None for f in report.forgetting):
        say(console, "First step: the exact change of L_{v_k} = e_k/K over fine-tuning's "
                     "first step (F_k: over all of it); "
                     "below it D_k = Σ_(n≠k)(−γ_kγ_n)Λ_n − (K−1)γ_k²Δ, whose sign is the step's "
                     "to first order in η_ft (claim 8c): ✓ the signs agree, ✗ they differ "
                     "(near D_k = 0 the O(η_ft²) term decides).")
    if any(f.theorem_holds is False for f in report.forgetting):
        why = ("the paper's rule assumes orthonormal features; with overlap it is wrong "
               "here" if overlapping else "for K > 2 its condition is not sufficient")
        say(console, f"[red]✗[/red] the exact trajectory contradicts the paper's verdict: "
                     f"{why}.")
    F = report.F
    meaning = ("net forgetting" if F > 0 else "net positive backward transfer" if F < 0
               else "no net change")
    say(console, f"F = L_tr(after) − L_tr(before) = [bold]{fmt(F, 5, '+')}[/bold] ({meaning}).")
    engine = report.run.get("engine")
    if engine:
        say(console, f"[dim]Dynamics: pretraining by the {escape(engine['pretrain'])}, "
                     f"fine-tuning by the {escape(engine['finetune'])}.[/dim]")
