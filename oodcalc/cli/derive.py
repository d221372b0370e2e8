"""``oodcalc derive``: the symbolic derivation of a claim, step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..claims import CLAIMS, get_claim
from ..errors import ComputationError, InputError
from . import app

FORMATS = ("text", "markdown", "latex")


@app.command()
def derive(
    claim: Annotated[Optional[str], typer.Argument(metavar="[CLAIM]",
        help="Claim number or key (e.g. 2 or conservation); all claims if omitted.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT",
        help="text (terminal), markdown ($...$ math) or latex (a standalone document).")] = "text",
    list_claims: Annotated[bool, typer.Option("--list",
        help="List the claims with their proof status and exit (fast: derives nothing).")] = False,
    write: Annotated[Optional[Path], typer.Option("--write", metavar="DIR",
        help="Write the Markdown and LaTeX of every claim into DIR (e.g. derivations/).")] = None,
) -> None:
    """Derive a claim from the model's definitions with sympy and print every step.

    Example: oodcalc derive conservation --format markdown
    """
    if fmt not in FORMATS:
        raise InputError("--format", fmt, f"expected one of {', '.join(FORMATS)}")
    if list_claims:
        _print_list()
        return
    if write is not None:
        if claim is not None:
            raise InputError("CLAIM", claim, "--write writes every claim; omit CLAIM")
        from ..symbolic.documents import write as write_documents
        for path in write_documents(write):
            print(path)
        return
    chosen = [get_claim(claim)] if claim is not None else list(CLAIMS)
    from ..symbolic.documents import derivation_of
    from ..symbolic.render import print_text, to_latex, to_markdown
    failed = []
    for c in chosen:
        if c.derivation is None:
            raise ComputationError(f"claim {c.number} has no symbolic derivation yet")
        d = derivation_of(c.number)
        if fmt == "text":
            print_text(d, c.statement)
        elif fmt == "markdown":
            print(to_markdown(d, c.statement))
        else:
            print(to_latex(d, c.statement))
        if not d.passed:
            failed.append(str(c.number))
    if failed:
        raise ComputationError(f"a symbolic check failed for claim(s) {', '.join(failed)}")


def _print_list() -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title="Claims (MODEL.md) and what the symbolic engine proves")
    for column in ("#", "key", "claim", "proof status"):
        table.add_column(column)
    for c in CLAIMS:
        table.add_row(str(c.number), c.key, c.title, c.proof or "not derived")
    Console(highlight=False).print(table)
