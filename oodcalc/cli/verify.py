"""``oodcalc verify``: the ledger, one row per statement of the claim registry."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .app import app


def render(ledger, details: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if console.width < 120:
        console = Console(highlight=False, width=120)
    b = ledger.budget
    from ..verify import MAIN, OOD_SETTING, EXACT_TOL, K_SIGMA
    console.print(f"[bold]oodcalc verify[/bold] ({b.name}) · simulator (a): population GD on "
                  f"the full Q; simulator (b): prompts of N = {', '.join(map(str, b.Ns))} "
                  f"tokens, fresh mini-batches of {b.batch}, {b.seeds} seeds, stopping rule on "
                  "population errors")
    console.print(f"(b) settings: γ = (1, −0.9), K = 2, ε = {MAIN.protocol.eps:g}, "
                  f"η = {MAIN.protocol.eta:g}; claims 1, 5, 6: K = 4, d = 8, "
                  f"η = {OOD_SETTING.protocol.eta:g}. Exact tolerance {EXACT_TOL:g}; Monte "
                  f"Carlo: {K_SIGMA:g} standard errors (SE).")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("claim", no_wrap=True, max_width=24, overflow="ellipsis")
    table.add_column("symbolic", no_wrap=True, max_width=14, overflow="ellipsis")
    table.add_column("(a) abs / rel err", no_wrap=True)
    table.add_column("(b) largest N, mean ± SE", no_wrap=True)
    table.add_column("rate in N", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in ledger.rows:
        pop = r.population
        err = ("—" if pop.max_abs is None else f"{pop.max_abs:.2g}" if pop.max_rel is None
               else f"{pop.max_abs:.2g} / {pop.max_rel:.2g}")
        err = err if pop.passed else f"[red]{err} ✗[/red]"
        if r.prompts is None:
            mc, rate = "—", ""
        else:
            pts = r.prompts.points
            if r.prompts.kind == "exact":
                mc = f"residual {max(p.mean for p in pts):.2g} (exact)"
            else:
                mc = f"{pts[-1].N}: {pts[-1].mean:+.2g} ± {pts[-1].se:.1g}"
            rate = "" if r.prompts.rate is None else \
                f"N^{-r.prompts.rate:+.2f}±{r.prompts.rate_se:.2f}"
            if not r.prompts.passed:
                mc = f"[red]{mc} ✗[/red]"
        verdict = {"PASS": "[green]PASS[/green]", "REFUTED": "[yellow]REFUTED[/yellow]",
                   "FAIL": "[bold red]FAIL[/bold red]"}[r.verdict]
        if r.refutes and r.passed:
            err = "counterexample reproduced"
        table.add_row(r.claim, r.title, r.symbolic, err, mc, rate, verdict)
    console.print(table)
    console.print("[bold]Tolerances[/bold] ((a) closed form vs simulator a; (b) finite prompts)")
    for r in ledger.rows:
        console.print(f"  {r.claim}. (a) {r.population.tolerance}"
                      + (f"; (b) {r.prompts.criterion}" if r.prompts else ""))
    if not details:
        console.print("[bold]Simulator (b) by N[/bold] (mean ± SE over seeds)")
        for r in ledger.rows:
            if r.prompts is not None and r.prompts.kind != "exact":
                console.print(f"  {r.claim}. " + "; ".join(
                    f"N={p.N}: {p.mean:+.3g} ± {p.se:.2g}" for p in r.prompts.points))
    console.print("[bold]Findings[/bold]")
    for r in ledger.rows:
        notes = list(r.findings)
        if details or not r.passed or r.refutes:
            notes = [f"(a) {r.population.compared}"] + [f"(a) {d}" for d in r.population.details]
            if r.prompts is not None:
                notes += [f"(b) {r.prompts.compared}", f"(b) {r.prompts.criterion}"]
                notes += [f"(b) {d}" for d in r.prompts.details]
            notes += r.findings
        for note in notes:
            console.print(f"  {r.claim}. {note}")
    failed = [r.claim for r in ledger.rows if r.verdict == "FAIL"]
    refuted = [r.claim for r in ledger.rows if r.verdict == "REFUTED"]
    summary = ("[green]no FAIL[/green]" if not failed
               else f"[bold red]FAIL: claim {', '.join(failed)}[/bold red]")
    if refuted:
        summary += (f"; [yellow]REFUTED: {', '.join(refuted)}[/yellow] (statements of the "
                    "paper contradicted by counterexamples that full-Q GD reproduced)")
    console.print(f"{summary} ({ledger.seconds:.1f} s). --details shows every comparison; "
                  "--json the whole ledger.")


@app.command()
def verify(
    quick: Annotated[bool, typer.Option("--quick",
        help="CI budget: fewer N, seeds and grid points (well under a minute).")] = False,
    claim: Annotated[Optional[list[str]], typer.Option("--claim", metavar="N|KEY",
        help="Only this claim (repeatable), by number (all its parts), id (8b) or key.",
        show_default="every claim")] = None,
    details: Annotated[bool, typer.Option("--details",
        help="Print every comparison behind each row.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ledger as JSON.")] = False,
) -> int:
    """Check every claim against gradient descent: closed forms vs population GD on the
    full Q (simulator a) and vs finite-prompt training at several N (simulator b).

    Verdicts: PASS; REFUTED (a statement of the paper contradicted by a counterexample that
    full-Q GD reproduces in this run); FAIL (oodcalc's closed forms disagree with
    simulation, or a counterexample stopped reproducing). Exit code 0 when no row FAILs,
    1 otherwise. Example: oodcalc verify --quick
    """
    from ..claims import get_claims
    from ..errors import InputError
    from ..verify import FULL, QUICK, ledger

    try:
        chosen = None if not claim else [c for name in claim for c in get_claims(name)]
    except InputError as err:
        raise InputError("--claim", err.value, err.accepted) from None
    result = ledger(QUICK if quick else FULL, chosen)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        render(result, details)
    return 0 if result.passed else 1
