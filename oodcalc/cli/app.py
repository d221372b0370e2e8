"""The root ``oodcalc`` app that every command module registers on (``@app.command()``).

It lives in its own module so that the command modules import it from here, below the
package that loads them (``oodcalc.cli``, which also holds ``main``).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import __version__

#: Every command and group takes -h as well as --help (sub-contexts inherit this).
CONTEXT = {"help_option_names": ["-h", "--help"]}
SUMMARY = ("Closed forms, exact dynamics and checks for OOD in-context learning in softmax "
           "attention (arXiv 2609.36448).")
START = "Start with: oodcalc predict --gamma 1,-0.9"

app = typer.Typer(
    name="oodcalc",
    help=SUMMARY,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)


def _version(value: bool) -> None:
    if value:
        print(f"oodcalc {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version,
        is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """Closed forms, exact dynamics and checks for OOD in-context learning in softmax
    attention (arXiv 2609.36448). Start with: oodcalc predict --gamma 1,-0.9"""
    # before any command: a bad NUMBA_NUM_THREADS is refused whether or not this run
    # would import Numba (as a bad OODCALC_MAX_MEMORY is), not only when it does
    from ..finetune import compiled
    compiled.threads_variable()
