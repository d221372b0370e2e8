"""The ``oodcalc`` command: a thin root app; one module per command.

Errors: an :class:`~oodcalc.errors.OodcalcError` or a usage error from the parser becomes
one line on stderr, ``oodcalc: error: ...``, with exit code 2 for bad input and 1 for a
failed computation. Results go to stdout, diagnostics to stderr.
"""

from __future__ import annotations

import sys
from typing import Sequence

import typer

from ..errors import OodcalcError

app = typer.Typer(
    name="oodcalc",
    help="Closed forms, exact dynamics and checks for OOD in-context learning "
         "in softmax attention (arXiv 2609.36448).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def root() -> None:
    """Closed forms, exact dynamics and checks for OOD in-context learning in softmax
    attention (arXiv 2609.36448). Start with: oodcalc predict --gamma 1,-0.9"""


from . import predict as _predict  # noqa: E402,F401  (each import registers a command)
from . import reproduce as _reproduce  # noqa: E402,F401
from . import sweep as _sweep  # noqa: E402,F401
from . import plot as _plot  # noqa: E402,F401
from . import simulate as _simulate  # noqa: E402,F401
from . import verify as _verify  # noqa: E402,F401
from . import derive as _derive  # noqa: E402,F401
from . import reproduce_depth as _reproduce_depth  # noqa: E402,F401


def error_line(message: str) -> None:
    print(f"oodcalc: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the exit code."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=list(sys.argv[1:] if argv is None else argv),
                              prog_name="oodcalc", standalone_mode=False)
    except OodcalcError as err:
        error_line(str(err))
        code = err.exit_code
    except typer.TyperException as err:  # the parser's usage errors (exit code 2)
        message, ctx = err.format_message(), getattr(err, "ctx", None)
        if message:  # empty when the parser already printed the help (no arguments)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            error_line(message + hint)
        code = getattr(err, "exit_code", 2)
    except typer.Abort:
        error_line("aborted")
        code = 1
    else:
        code = result if isinstance(result, int) else 0
    if argv is None:
        sys.exit(code)
    return code
