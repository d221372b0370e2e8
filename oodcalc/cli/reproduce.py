"""``oodcalc reproduce``: the paper's experiments, one subcommand each.

``oodcalc reproduce`` alone runs ``synthetic`` (the one-layer tables) with its defaults;
other experiments register a subcommand on ``reproduce_app``.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import paper
from ..setting import Protocol
from . import app, options
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
    for title, rows in tables.items():
        sims = list(rows[0].simulations) if rows else []
        lines += [f"### {title}", "",
                  "| experiment | quantity | theory | " + " | ".join(sims) +
                  (" | " if sims else "") + "paper | reported in | sign | magnitude | why |",
                  "|---" * (8 + len(sims)) + "|"]
        for r in rows:
            q = r.quantity
            cells = [q.experiment, q.name, fmt(r.theory), *(fmt(v) for v in r.simulations.values()),
                     q.figure.printed, q.figure.where, r.sign, r.magnitude, r.note]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def show_tables(tables, protocol: Protocol) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    console.print(f"[bold]oodcalc reproduce[/bold] · ε = {protocol.eps:g}, η = {protocol.eta:g}, "
                  f"η_ft = {protocol.eta_ft:g} · figures reported in the paper, arXiv {paper.ARXIV}")
    note_number = 0
    for title, rows in tables.items():
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        table.add_column("experiment", min_width=7)
        table.add_column("quantity", min_width=6)
        table.add_column("theory", justify="right", no_wrap=True)
        for sim in (rows[0].simulations if rows else []):
            table.add_column(sim, justify="right", no_wrap=True)
        table.add_column("paper", justify="right", no_wrap=True)
        table.add_column("sign", no_wrap=True)
        table.add_column("magnitude", no_wrap=True)
        table.add_column("note", no_wrap=True)
        notes = []
        for r in rows:
            note_number += 1
            notes.append(f"[{note_number}] {r.quantity.figure.where}: {r.note}")
            style = "green" if r.magnitude == "agrees" else "yellow"
            table.add_row(r.quantity.experiment, r.quantity.name, fmt(r.theory),
                          *(fmt(v) for v in r.simulations.values()),
                          r.quantity.figure.printed.split()[-1], SIGN_MARK[r.sign],
                          f"[{style}]{r.magnitude.replace('ours/paper = ', '×')}[/{style}]",
                          f"[{note_number}]")
        console.print(table)
        for note in notes:
            console.print(note, style="dim")
        console.print()


def simulators(prompts: int | None, seed: int) -> dict:
    """Plain GD on the full Q always; the finite-prompt simulator when asked for."""
    from ..simulate import simulate_population
    chosen = {"GD on Q": simulate_population}
    if prompts is not None:
        from ..simulate.prompts import simulate_prompts
        chosen[f"prompts N={prompts}"] = lambda setting: simulate_prompts(setting, N=prompts,
                                                                          seed=seed)
    return chosen


@reproduce_app.command("synthetic")
def synthetic(
    output_format: Annotated[Format, typer.Option("--format", "-f",
        help="table (terminal), markdown or json.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE",
        help="Write to FILE (atomically) instead of the terminal; needs markdown or json.")] = None,
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None,
    prompts: Annotated[Optional[str], typer.Option("--prompts", metavar="N",
        help="Add a column from the finite-prompt simulator with N tokens per prompt "
             "(fresh mini-batches of 1024 prompts; slower, about 25 s).")] = None,
    seed: Annotated[str, typer.Option("--seed", metavar="INT",
        help="Seed of the finite-prompt simulator.")] = "0",
) -> None:
    """The one-layer synthetic tables (K = 4, d = 8; K = 2 γ sweep) beside the paper's figures."""
    from ..experiments import reproduce as run
    from ..errors import InputError
    from ..io import write_text_atomic

    protocol = build_protocol(eps, eta, eta_ft)
    if output is not None and output_format is Format.table:
        raise InputError("--output", str(output), "writing a file needs --format markdown or json")
    tables = run(protocol, simulators(options.integer("--prompts", prompts, 1),
                                      options.integer("--seed", seed, 0)))
    if output_format is Format.table:
        show_tables(tables, protocol)
        return
    if output_format is Format.json:
        text = json.dumps({"parameters": {**protocol.describe(), "prompts_N": prompts,
                                          "seed": int(seed)},
                           "tables": {t: [r.to_dict() for r in rows] for t, rows in tables.items()}},
                          indent=2, ensure_ascii=False)
    else:
        text = as_markdown(tables, protocol)
    if output is None:
        print(text)
    else:
        write_text_atomic(output, text + "\n", option="--output")
