"""``oodcalc derive``: the symbolic derivation of a claim, step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..claims import CLAIMS, get_claims
from ..errors import ComputationError, InputError
from .app import app

FORMATS = ("text", "markdown", "latex")


@app.command()
def derive(
    claim: Annotated[Optional[str], typer.Argument(metavar="[CLAIM]",
        help="Claim number, id or key (e.g. 2, 8b or conservation); a number selects all "
             "its parts; every claim if omitted.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT",
        help="text (terminal), markdown (math in $…$, displays in $$…$$) or latex (one "
             "standalone document holding every chosen claim).")] = "text",
    list_claims: Annotated[bool, typer.Option("--list",
        help="List the claims with the level of their decisive step and exit (fast: derives "
             "nothing).")] = False,
    write: Annotated[Optional[str], typer.Option("--write", metavar="DIR",
        help="Write the Markdown and LaTeX of every claim into DIR (e.g. derivations/).")] = None,
) -> None:
    """Derive a claim from the model's definitions with sympy and print every step.

    Example: oodcalc derive conservation --format markdown
    """
    if fmt not in FORMATS:
        raise InputError("--format", repr(fmt), f"expected one of {', '.join(FORMATS)}")
    if list_claims:
        _print_list()
        return
    if write is not None:
        if claim is not None:
            raise InputError("CLAIM", claim, "--write writes every claim; omit CLAIM")
        from ..io import check_output_dir
        from ..symbolic import documents
        check_output_dir(write, "--write")   # before the minutes of deriving
        documents.check_writable(Path(write), "--write")
        derive_all(CLAIMS)                   # with progress; write reads the cache
        for path in documents.write(write, "--write"):
            print(path)
        return
    chosen = get_claims(claim) if claim is not None else list(CLAIMS)
    from ..symbolic.render import latex_document, print_text, to_markdown
    derived = derive_all(chosen)
    if fmt == "latex":                      # one document, so pdflatex sets every claim
        print(latex_document(derived), end="")
    for d, c in derived:
        if fmt == "text":
            print_text(d, c)
        elif fmt == "markdown":
            print(to_markdown(d, c))
    failed = [c.id for d, c in derived if not d.passed]
    if failed:
        raise ComputationError(f"a symbolic check failed for claim(s) {', '.join(failed)}")


def derive_all(chosen, console=None) -> list:
    """``[(derivation, claim), …]`` for the chosen claims (every claim: about a minute and a
    half), with a progress bar on stderr when it is a terminal (``console``: where the bar
    goes); piped or redirected, nothing is added to the output."""
    from ..symbolic.documents import derivation_of
    from .progress import count_progress
    derived = []
    with count_progress("derive", console=console) as progress:
        for done, c in enumerate(chosen):
            progress(done, len(chosen), f"claim {c.id}")
            derived.append((derivation_of(c.id), c))
        progress(len(chosen), len(chosen), "")
    return derived


#: From this console width on, ``derive --list`` gives the key and the decisive step their
#: own columns.
WIDE_LIST = 160


def _print_list() -> None:
    from rich.table import Table
    from rich.text import Text

    from ..console import make_console
    console = make_console()
    table = Table(title="The claims of arXiv 2609.36448 and what the symbolic engine derives",
                  title_justify="left")
    table.add_column("#", no_wrap=True)
    # a narrow terminal squeezed a fifth column to a few letters a line (80 columns: 5):
    # there the key and the decisive step go under the claim's title, in its own cell
    wide = console.width >= WIDE_LIST
    if wide:
        table.add_column("key", no_wrap=True)
    table.add_column("claim")
    table.add_column("level", no_wrap=True)
    if wide:
        table.add_column("decisive step")
    for c in CLAIMS:      # Text, not markup: "[t, t + φ(H)(m_t − m_0)]" is no style tag
        if wide:
            cells = (c.id, c.key, c.title, c.level, c.decisive_step)
        else:
            cells = (c.id, f"{c.title} ({c.key})\ndecisive step: {c.decisive_step}", c.level)
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)
    lemmas = [(c.id, lemma) for c in CLAIMS for lemma in c.lemmas]
    console.print(Text("Decisive steps argued in prose, not derived: "
                       + ("; ".join(f"{cid}: {lemma}" for cid, lemma in lemmas) if lemmas
                          else "none") + "."))
    console.print(Text("Levels: symbolic K = sympy derived the decisive step with K a Symbol (inequalities "
          "by nonnegativity certificates); '+ lemma in prose' = a decisive step is argued in "
          "prose, not derived; K = a..b = for each K in that range; numeric; rests on the "
          "paper; refuted = a counterexample to the paper's statement stands. `oodcalc "
          "derive N` prints the derivation."))
