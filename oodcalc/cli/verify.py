"""``oodcalc verify``: the ledger, one row per statement of the claim registry."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .app import app


#: The table's columns: one line per row when that fits the width (only the claim's
#: title wraps) ...
WIDE = ("#", "claim", "symbolic", "(a) abs / rel err", "(b) largest N, mean ± SE",
        "rate in N", "verdict")
#: ... else stacked: the level under the claim, the rate in N under the finite-prompt figure.
NARROW = ("#", "claim\nsymbolic", "(a) abs / rel err", "(b) largest N,\nmean ± SE\nrate in N",
          "verdict")


def cells(row, narrow: bool = False, title: str | None = None) -> tuple[str, ...]:
    """A ledger row as the table's cells (rich markup), in the order of ``WIDE`` (or of
    ``NARROW``); ``title`` replaces the claim's title (wrapped, or left out)."""
    from rich.markup import escape
    title = escape(row.title if title is None else title)    # the cells are markup
    pop = row.population
    err = ("—" if pop.max_abs is None else f"{pop.max_abs:.2g}" if pop.max_rel is None
           else f"{pop.max_abs:.2g} / {pop.max_rel:.2g}")
    err = err if pop.passed else f"[red]{err} ✗[/red]"
    if row.prompts is None:
        mc, rate = "—", ""
    else:
        pts = row.prompts.points
        if row.prompts.kind == "exact":
            mc = f"residual {max(p.mean for p in pts):.2g} (exact)"
        else:
            mc = f"{pts[-1].N}: {pts[-1].mean:+.2g} ± {pts[-1].se:.1g}"
        rate = "" if row.prompts.rate is None else \
            f"N^{-row.prompts.rate:+.2f}±{row.prompts.rate_se:.2f}"
        if not row.prompts.passed:
            mc = f"[red]{mc} ✗[/red]"
    # a level's qualifier goes on a line of its own: the column stays as narrow as its base
    level = escape(row.symbolic).replace(" + ", "\n+ ")
    if row.derivation is not None and not row.derivation.passed:
        level = f"[red]{level} ✗[/red]"
    verdict = {"PASS": "[green]PASS[/green]", "REFUTED": "[yellow]REFUTED[/yellow]",
               "FAIL": "[bold red]FAIL[/bold red]"}[row.verdict]
    if row.refutes and row.passed:
        err = "counterexample\nreproduced" if narrow else "counterexample reproduced"
    if narrow:
        return (escape(row.claim), f"{title}\n[dim]{level}[/dim]", err,
                mc + (f"\n{rate}" if rate else ""), verdict)
    return (escape(row.claim), title, level, err, mc, rate, verdict)


def ledger_table(ledger, narrow: bool, titles: list[str] | None = None):
    """The ledger's table (``titles``: the claims' titles as they are to be shown). The
    claim id and the verdict never break. Wide, only the claim's title wraps; narrow,
    every other cell folds (wraps at spaces; a word is split only when nothing else fits),
    as the depth table's cells do: never an ellipsis."""
    from rich.table import Table

    from .render import TABLE

    table = Table(**TABLE)
    for name in NARROW if narrow else WIDE:
        key = name in ("#", "verdict")
        table.add_column(name, justify="right" if name == "#" else "left",
                         no_wrap=key or (not narrow and name != "claim"),
                         overflow="ellipsis" if key else "fold")
    for i, r in enumerate(ledger.rows):
        table.add_row(*cells(r, narrow, None if titles is None else titles[i]))
    return table


def fitting_table(ledger, console):
    """The wide table if its numbers fit on one line each at the console's width, else the
    narrow one; either way the claims' titles wrap, at spaces outside their formulas
    (``K = 2`` stays whole), in the room the other columns leave."""
    from rich.measure import Measurement
    from rich.text import Text

    from ..console import breaks

    unbounded = console.options.update_width(10**6)

    def natural(renderable) -> int:
        return Measurement.get(console, unbounded, renderable).maximum

    def wrap(title: str, room: int) -> str:
        cuts = [0, *breaks(title, room), len(title)]
        return "\n".join(title[i:j].rstrip() for i, j in zip(cuts, cuts[1:]))

    word = max(Measurement.get(console, unbounded, Text(r.title)).minimum for r in ledger.rows)
    for narrow in (False, True):
        blank = ledger_table(ledger, narrow, [""] * len(ledger.rows))   # titles left out
        column = blank.columns[1]
        left = max(natural(Text.from_markup(str(c))) for c in [column.header, *column.cells])
        room = console.width - (natural(blank) - left)
        if room >= word:
            return ledger_table(ledger, narrow, [wrap(r.title, room) for r in ledger.rows])
    return ledger_table(ledger, narrow=True)   # too narrow for whole words: rich folds


def render(ledger, details: bool, console=None) -> None:
    """The ledger for a human: the table, then tolerances, points by N and findings.

    The console is the project's (:func:`~oodcalc.console.make_console`): a terminal's
    width, ``$COLUMNS``, or wide and never wrapped when piped. The table has one line per
    row when that fits the width, else it stacks cells (:func:`fitting_table`): at 80
    columns nothing is cut off."""
    from ..checks import EXACT_TOL, K_SIGMA, MAIN, OOD_SETTING
    from rich.markup import escape

    from ..console import make_console, say

    console = console or make_console()
    b = ledger.budget
    say(console, f"[bold]oodcalc verify[/bold] ({escape(b.name)}) · (a) the population "
                 f"simulator: GD on the full Q; (b) the prompts simulator: prompts of N = "
                 f"{', '.join(map(str, b.Ns))} "
                 f"tokens, fresh mini-batches of {b.batch}, {b.seeds} seeds, stopping rule on "
                 "population errors")
    say(console, f"(b) settings: γ = (1, −0.9), K = 2, ε = {MAIN.protocol.eps:g}, "
                 f"η = {MAIN.protocol.eta:g}; claims 1, 5, 6: K = 4, d = 8, "
                 f"η = {OOD_SETTING.protocol.eta:g}. Exact tolerance {EXACT_TOL:g}; Monte "
                 f"Carlo: {K_SIGMA:g} standard errors (SE).")
    console.print(fitting_table(ledger, console))
    say(console, "[bold]Tolerances[/bold] ((a) closed form vs the population simulator; (b) vs "
                 "the prompts simulator)")
    for r in ledger.rows:
        say(console, escape(f"  {r.claim}. (a) {r.population.tolerance}"
                            + (f"; (b) {r.prompts.criterion}" if r.prompts else "")), indent=4)
    if not details:
        say(console, "[bold](b) The prompts simulator by N[/bold] (mean ± SE over seeds)")
        for r in ledger.rows:
            if r.prompts is not None and r.prompts.kind != "exact":
                say(console, escape(f"  {r.claim}. ") + "; ".join(
                    f"N={p.N}: {p.mean:+.3g} ± {p.se:.2g}" for p in r.prompts.points),
                    indent=4)
    say(console, "[bold]Findings[/bold]")
    for r in ledger.rows:
        notes = list(r.findings)
        if details or not r.passed or r.refutes:
            notes = [] if r.derivation is None else \
                [f"(symbolic) {d}" for d in r.derivation.details]
            notes += [f"(a) {r.population.compared}"] + [f"(a) {d}" for d in r.population.details]
            if r.prompts is not None:
                notes += [f"(b) {r.prompts.compared}", f"(b) {r.prompts.criterion}"]
                notes += [f"(b) {d}" for d in r.prompts.details]
            notes += r.findings
        for note in notes:
            say(console, escape(f"  {r.claim}. {note}"), indent=4)
    derived = [r.derivation for r in ledger.rows if r.derivation is not None]
    if derived:
        ran = [d for d in derived if not d.cached]
        say(console, f"Derivations: {len(derived) - len(ran)} read from the cache of their "
                     f"code's outcome, {len(ran)} run ({sum(d.seconds for d in ran):.1f} s); "
                     f"{sum(d.passed for d in derived)}/{len(derived)} earned the registry's "
                     "level with every check passing.")
    failed = [r.claim for r in ledger.rows if r.verdict == "FAIL"]
    refuted = [r.claim for r in ledger.rows if r.verdict == "REFUTED"]
    summary = ("[green]no FAIL[/green]" if not failed
               else f"[bold red]FAIL: claim {', '.join(failed)}[/bold red]")
    if refuted:
        summary += (f"; [yellow]REFUTED: {', '.join(refuted)}[/yellow] (statements of the "
                    "paper contradicted by counterexamples that full-Q GD reproduced)")
    say(console, f"{summary} ({ledger.seconds:.1f} s). --details shows every comparison; "
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
    """Check every claim: its derivation (the level it earns; the outcome cached by a hash
    of the code it runs), closed forms vs the population simulator (GD on the full Q;
    column (a)) and vs the prompts simulator (finite-prompt training at several N; column (b)).

    Verdicts: PASS; REFUTED (a statement of the paper contradicted by a counterexample that
    full-Q GD reproduces in this run); FAIL (a check of the derivation failed or it earned
    another level than the registry's, oodcalc's closed forms disagree with simulation, or
    a counterexample stopped reproducing). Exit code 0 when no row FAILs,
    1 otherwise. Progress goes to stderr: a bar on a terminal, else a line per finished
    row. Example: oodcalc verify --quick
    """
    from ..claims import get_claims
    from ..errors import InputError
    from ..checks import FULL, QUICK
    from ..verify import ledger
    from .progress import count_progress

    try:
        chosen = None if not claim else [c for name in claim for c in get_claims(name)]
    except InputError as err:
        raise InputError("--claim", err.value, err.accepted) from None
    with count_progress("verify", lines=True) as progress:
        result = ledger(QUICK if quick else FULL, chosen, progress=progress)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        render(result, details)
    return 0 if result.passed else 1
