"""``oodcalc reproduce``: the paper's experiments, one subcommand each.

``oodcalc reproduce`` alone runs ``synthetic`` (the one-layer tables) with its defaults;
other experiments register a subcommand on ``reproduce_app``.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import paper
from .. import paper_protocols as pp
from ..setting import Protocol
from . import options
from .app import app
from .setting_options import Eps, Eta, EtaFt, build_protocol

reproduce_app = typer.Typer(help="Reproduce the paper's experiments beside its figures. "
                            "Without a subcommand: the synthetic one-layer tables.")
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.callback(invoke_without_command=True)
def reproduce(ctx: typer.Context) -> None:
    """Reproduce the paper's experiments beside its figures (default: synthetic)."""
    if ctx.invoked_subcommand is None:
        synthetic()


class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


SIGN_MARK = {"same sign": "✓", "opposite sign": "✗", "paper ≈ 0": "≈0"}


def fmt(x: float) -> str:
    return f"{x:.4g}"


def as_markdown(tables, protocol: Protocol) -> str:
    lines = [f"Protocol: ε = {protocol.eps:g}, η = {protocol.eta:g}, η_ft = {protocol.eta_ft:g}, "
             "Q⁽⁰⁾ = 0, full-batch GD, stop when every e_k <= ε. "
             f"Paper: arXiv {paper.ARXIV}; each figure names the table row that reports it.", ""]
    from ..experiments import common_fit
    for title, rows in tables.items():
        sims = list(rows[0].simulations) if rows else []
        fits = any(r.fit for r in rows)
        extra = " protocol giving the paper's F | F there |" if fits else ""
        lines += [f"### {title}", "",
                  "| experiment | quantity | theory | " + " | ".join(sims) +
                  (" | " if sims else "") + "paper | reported in | sign | magnitude | why |"
                  + extra, "|---" * (8 + len(sims) + 2 * fits) + "|"]
        for r in rows:
            q = r.quantity
            cells = [q.experiment, q.name, fmt(r.theory), *(fmt(v) for v in r.simulations.values()),
                     q.figure.printed, q.figure.where, r.sign, r.magnitude, r.note]
            if fits:
                cells += fit_cells(r)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
        if fits:
            lines += [FIT_INTRO, ""]
            lines += [f"- {r.quantity.experiment}: {r.fit['why']}." for r in rows if r.fit]
            lines += ["", common_fit(tables), ""]
    from ..experiments import warnings
    lines += [f"Warning: {w}" for w in warnings(tables)] + [""] * bool(warnings(tables))
    return "\n".join(lines)


#: What the fit columns are, in words (the search, its grid and its tolerance).
FIT_INTRO = ("The protocol giving the paper's F: the exact dynamics (oc.predict) searched, "
             "per row, over pretraining ε in {" + ", ".join(f"{e:g}" for e in pp.EPS_GRID)
             + f"}} at η = {pp.ETA:g}, fine-tuning step sizes η_ft from "
             f"{pp.ETA_FT_GRID[0]:g} to {pp.ETA_FT_GRID[-1]:g} (quarter decades) and every "
             f"length up to {pp.MAX_FT_STEPS} steps, or under the paper's own rule; a value "
             f"matches when it rounds to the printed one (±{pp.TOLERANCE:g}). Shown is the "
             "first that exists of: the paper's rule at some ε; a fixed length at η_ft = η "
             "(the smallest such ε); one step at ε = 0.01 with its own η_ft; else none, with "
             "the bound that excludes it (the theory guide of the documentation, 'The paper's "
             "forgetting table').")


def fit_cells(r) -> list[str]:
    """The protocol giving the paper's value (or "none: why"), and F there (oc.predict)."""
    f = r.fit
    if f is None:
        return ["", ""]
    return [f["summary"], "—" if f["F"] is None else f"{f['F']:+.4f}"]


def show_tables(tables, protocol: Protocol) -> None:
    """One table per experiment: text cells wrap, numbers never do; when even that does not
    fit the terminal, each row is printed as a short block instead."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..console import make_console, say

    console = make_console()
    say(console, f"[bold]oodcalc reproduce[/bold] · ε = {protocol.eps:g}, η = {protocol.eta:g}, "
                 f"η_ft = {protocol.eta_ft:g} · figures reported in the paper, "
                 f"arXiv {paper.ARXIV}")
    note_number = 0
    for title, rows in tables.items():
        notes, cells = [], []
        for r in rows:
            note_number += 1
            notes.append(escape(f"[{note_number}] {r.quantity.figure.where}: {r.note}"))
            style = "green" if r.magnitude == "agrees" else "yellow"
            magnitude = escape(r.magnitude.replace('ours/paper = ', '×'))
            cells.append((escape(r.quantity.experiment), escape(r.quantity.name), fmt(r.theory),
                          *(fmt(v) for v in r.simulations.values()),
                          escape(r.quantity.figure.printed.split()[-1]), SIGN_MARK[r.sign],
                          f"[{style}]{magnitude}[/{style}]",
                          f"[{note_number}]"))
        headers = ["experiment", "quantity", "theory",
                   *(rows[0].simulations if rows else []), "paper", "sign", "magnitude", "note"]
        widths = _widths(headers, cells, console.width)
        if widths is None:   # not even one word per line fits: one block per row
            say(console, escape(title), style="italic")
            for row in cells:
                say(console, f"{row[0]} · {row[1]}", style="bold")
                pairs = (f"{h} {v}".replace(" ", "\u00a0") for h, v in zip(headers[2:], row[2:]))
                say(console, "  " + " · ".join(pairs), indent=4)
        else:
            table = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD,
                          pad_edge=False, show_edge=False, padding=(0, 1, 0, 0))
            for i, (name, width) in enumerate(zip(headers, widths)):
                table.add_column(name, width=width, no_wrap=i >= 2,
                                 justify="right" if 2 <= i < len(headers) - 3 else "left")
            for row in cells:
                table.add_row(*row)
            console.print(table)
        for note in notes:
            say(console, note, indent=4, style="dim")
        console.print()
        if any(r.fit for r in rows):
            show_fits(console, title, rows, tables)


def show_fits(console, title: str, rows, tables) -> None:
    """Beside each forgetting row's value under the stopping rule: the protocol under which
    the exact dynamics give the paper's value, or "none: why" (the text column wraps)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..console import say
    from ..experiments import common_fit
    fitted = [r for r in rows if r.fit]
    headers = ["experiment", "theory", "paper", "protocol giving the paper's F", "F there"]
    cells = [tuple(escape(c) for c in (r.quantity.experiment, fmt(r.theory),
                                        r.quantity.figure.printed.split()[-1], *fit_cells(r)))
             for r in fitted]
    full = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    words = max(len(w) for c in cells for w in c[3].split())
    room = console.width - sum(full) + full[3] - 2 * (len(headers) - 1)
    say(console, escape(f"{title}: the protocol that gives the paper's F"), style="italic")
    if room < max(words, 12):   # the text column cannot fit: one block per row
        for c in cells:
            say(console, f"{c[0]} · theory {c[1]} · paper {c[2]} · F there {c[4]}",
                style="bold")
            say(console, "  " + c[3], indent=4)
    else:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                      padding=(0, 1, 0, 0))
        for i, name in enumerate(headers):
            table.add_column(name, width=min(full[i], room) if i == 3 else full[i],
                             no_wrap=i != 3, justify="right" if i in (1, 2, 4) else "left")
        for c in cells:
            table.add_row(*c)
        console.print(table)
    for r in fitted:
        say(console, escape(f"{r.quantity.experiment}: {r.fit['why']}."), indent=4,
            style="dim")
    say(console, FIT_INTRO, indent=0, style="dim")
    say(console, escape(common_fit(tables)), indent=0)
    console.print()


def _widths(headers: list[str], cells: list[tuple], room: int) -> list[int] | None:
    """Column widths for ``room`` columns: numbers and marks at full width, the two text
    columns (experiment, quantity) sharing the rest, never narrower than their longest
    word; None when that does not fit."""
    from rich.text import Text
    full = [max([len(h)] + [Text.from_markup(row[i]).cell_len for row in cells])
            for i, h in enumerate(headers)]
    words = [max(len(w) for text in [headers[i]] + [row[i] for row in cells]
                 for w in text.split()) for i in (0, 1)]
    free = room - sum(full[2:]) - 2 * (len(headers) - 1)   # a gap: padding and rule
    if free < sum(words):
        return None
    text = full[:2]
    while sum(text) > free:   # take from the wider text column first
        i = 0 if text[0] - words[0] >= text[1] - words[1] else 1
        text[i] -= 1
    return text + full[2:]


def simulators(prompts: int | None, seed: int) -> dict:
    """Plain GD on the full Q always; the finite-prompt simulator when asked for."""
    from ..simulate import simulate_population
    chosen = {"GD on Q": simulate_population}
    if prompts is not None:
        from ..simulate.prompts import simulate_prompts
        chosen[f"prompts N={prompts}"] = lambda setting: simulate_prompts(setting, N=prompts,
                                                                          seed=seed)
    return chosen


#: File extensions each written format takes (-o infers the format from them).
SUFFIXES = {Format.markdown: (".md", ".markdown", ".txt"), Format.json: (".json",)}


def output_format_for(output: str | None, chosen: Format | None) -> Format:
    """The format: as given, else from -o's extension, else the terminal table; and -o
    checked before any work."""
    from ..errors import InputError
    from ..io import check_output
    if output is None:
        return chosen or Format.table
    if chosen is Format.table:
        raise InputError("--output", repr(output), "the table is for the terminal; write a "
                         "file with --format markdown or json (or -o FILE.md / FILE.json)")
    suffix = Path(output).suffix.lower()
    form = chosen or next((f for f, s in SUFFIXES.items() if suffix in s), None)
    if form is None:
        raise InputError("--output", repr(output), "a name ending in .md or .json (or give "
                         "--format markdown|json)")
    check_output(output, "--output", suffixes=SUFFIXES[form],
                 formats=f"a name ending in {' or '.join(SUFFIXES[form])} for {form.value}")
    return form


#: -f and -o of every reproduction (resolved by output_format_for).
FormatOption = Annotated[Optional[Format], typer.Option("--format", "-f",
    help="table (terminal), markdown or json.", show_default="table; with -o, from its extension")]
OutputOption = Annotated[Optional[str], typer.Option("--output", "-o", metavar="FILE",
    help="Write to FILE (atomically) instead of the terminal: .md (markdown) or .json.")]


@reproduce_app.command("synthetic")
def synthetic(
    output_format: FormatOption = None, output: OutputOption = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None,
    prompts: Annotated[Optional[str], typer.Option("--prompts", metavar="N",
        help="Add a column from the finite-prompt simulator with N tokens per prompt "
             "(fresh mini-batches of 1024 prompts; slower, about 25 s, with progress on "
             "stderr).",
        show_default="no such column")] = None,
    seed: Annotated[str, typer.Option("--seed", metavar="INT",
        help="Seed of the finite-prompt simulator.")] = "0",
) -> None:
    """The one-layer synthetic tables (K = 4, d = 8; K = 2 γ sweep) beside the paper's figures."""
    from .. import estimates, limits
    from ..experiments import reproduce as run
    from ..experiments import warnings as warnings_of
    from ..io import write_text_atomic

    form = output_format_for(output, output_format)
    protocol = build_protocol(eps, eta, eta_ft)
    n_tokens = options.integer("--prompts", prompts, 1)
    root_seed = options.integer("--seed", seed, 0)
    p = protocol
    limits.refuse_over_cap(
        estimates.reproduce_bytes(p.eps, p.eta, p.eta_ft, n_tokens),
        "the finite-prompt column (batches of 1024 prompts of N tokens)",
        [("--prompts", prompts, 0.0, "lower --prompts")])
    from ..experiments import expected_seconds
    from .progress import announce, count_progress
    more = " and the finite-prompt column" if n_tokens is not None else ""
    announce("reproduce", expected_seconds(protocol),          # the theory and GD on Q
             f"{more} (eps = {p.eps:g}, eta = {p.eta:g}, eta_ft = {p.eta_ft:g})")
    # progress on stderr: a bar on a terminal; piped, a line per finished setting for the
    # slow finite-prompt column
    with count_progress("reproduce", lines=n_tokens is not None) as progress:
        tables = run(protocol, simulators(n_tokens, root_seed), progress=progress)
    for warning in warnings_of(tables):      # as predict gives them
        print(f"oodcalc: warning: {warning}", file=sys.stderr)
    if form is Format.table:
        show_tables(tables, protocol)
        return
    if form is Format.json:
        text = json.dumps({"parameters": {**protocol.describe(), "prompts_N": n_tokens,
                                          "seed": root_seed},
                           "tables": {t: [r.to_dict() for r in rows] for t, rows in tables.items()}},
                          indent=2, ensure_ascii=False)
    else:
        text = as_markdown(tables, protocol)
    if output is None:
        print(text)
    else:
        write_text_atomic(output, text + "\n", option="--output")
