"""The ``oodcalc`` command: a thin root app (:mod:`.app`); one module per command, each
registering itself on the app when it is imported. A run imports only its own command's
module (all of them, and their click tree, cost more than a small prediction); the help,
the groups and anything unrecognised import them all.

Errors: an :class:`~oodcalc.errors.OodcalcError` or a usage error from the parser becomes
one line on stderr, ``oodcalc: error: ...``, with exit code 2 for bad input and 1 for a
failed computation; so does running out of memory, and (as a last resort, marked
"internal error") any other exception: never a traceback, unless ``OODCALC_TRACEBACK=1``.
Results go to stdout, diagnostics to stderr.

The command line is the interface: the command modules under ``oodcalc.cli`` are its
internals (they translate options into library calls), have no ``__all__`` and promise no
Python names; this package's ``__all__`` names what tests and tools call (``main``,
``root_command``, ...).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import textwrap
import warnings
from typing import Sequence

import typer

from .. import __version__
from ..errors import OodcalcError
from ..console import StripTrailing
from ..limits import MEMORY_VARIABLE

from . import options
# The root app under another name: ``app`` stays the module (``oodcalc.cli.app``).
from .app import CONTEXT, START, SUMMARY, app as root_app

__all__ = [
    "COMMAND_MODULES", "DEFAULT_SUBCOMMAND", "INTERRUPTED", "LISTED", "SINGLE",
    "error_line", "load_commands", "main", "root_command", "start_text", "unwrap",
]


#: The modules that register commands (the groups' subcommands in this order).
COMMAND_MODULES = ("predict", "advise", "sequence", "reproduce", "reproduce_real", "sweep",
                   "plot", "simulate", "verify", "derive", "reproduce_depth",
                   "reproduce_ladder", "explore")
#: The commands one module holds whole. The groups (``reproduce``, ``plot``) gather their
#: subcommands from several modules.
SINGLE = {name: name for name in ("predict", "advise", "sequence", "sweep", "simulate",
                                  "verify", "derive", "explore")}
#: The order ``oodcalc -h`` lists the commands in (typer's: commands, then groups).
LISTED = (*SINGLE, "reproduce", "plot")


def load_commands(command: str | None = None) -> None:
    """Import the module of ``command`` (registering it on the app), or every command
    module when it is not one of :data:`SINGLE`."""
    for module in (SINGLE[command],) if command in SINGLE else COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{module}")


def error_line(message: str) -> None:
    """One line, whatever the message quotes (control characters and line breaks escaped)."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    print(f"oodcalc: error: {safe}", file=sys.stderr)


def root_command(command: str | None = None):
    """The click command tree with ``command`` in it (every command without one)."""
    load_commands(command)
    return _tree(frozenset(m for m in COMMAND_MODULES if f"{__name__}.{m}" in sys.modules))


@functools.lru_cache(maxsize=None)
def _tree(loaded: frozenset[str]):
    """The tree of the commands registered so far, built once per set of loaded modules,
    listed in :data:`LISTED` order whatever order they were loaded in."""
    group = typer.main.get_command(root_app)
    rank = {name: i for i, name in enumerate(LISTED)}     # others (added on app) last
    group.commands = dict(sorted(group.commands.items(),
                                 key=lambda c: rank.get(c[0], len(rank))))
    _unwrap_help(group)
    return group


def unwrap(text: str | None) -> str | None:
    """``text`` with each paragraph on one line: docstrings break lines at 90 columns, and
    the help (rich) kept those breaks, cutting sentences in the middle of a wider or
    narrower terminal; rich wraps the joined text to the width at hand."""
    if not text:
        return text
    return "\n\n".join(" ".join(part.split()) for part in text.split("\n\n"))


def _unwrap_help(command) -> None:
    """Every command's and option's help in the tree, unwrapped (:func:`unwrap`)."""
    command.help = unwrap(command.help)
    command.short_help = unwrap(command.short_help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = unwrap(param.help)
    for sub in getattr(command, "commands", {}).values():
        _unwrap_help(sub)


def start_text() -> str:
    """What bare ``oodcalc`` prints: what it is, where to start, and the commands."""
    command = root_command()
    ctx = command.context_class(command, info_name="oodcalc")
    names = command.list_commands(ctx)
    width = max(map(len, names))
    lines = [*textwrap.wrap(f"oodcalc {__version__}: {SUMMARY}", 79), "", START, "",
             "Commands:"]
    for name in names:
        help_text = command.get_command(ctx, name).get_short_help_str(limit=300)
        lines += textwrap.wrap(help_text, 79, initial_indent=f"  {name:<{width}}  ",
                               subsequent_indent=" " * (width + 4))
    lines += ["", "oodcalc COMMAND -h shows a command's options; oodcalc -h, all of this."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns (and, as a script, exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    options.reset_names()
    stdout = sys.stdout
    if not _isatty(stdout):             # piped: no line ends in the padding of a table
        sys.stdout = StripTrailing(stdout)
    try:
        return _run(args, argv)
    finally:
        sys.stdout = stdout


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):      # no isatty, or a closed stream
        return False


def _run(args: list[str], argv) -> int:
    result = None
    try:
        command = root_command(args[0] if args else None)
        if not args:
            print(start_text())
            return _exit(0, argv)
        with warnings.catch_warnings():
            # numpy's overflow warnings are not for users: the output says "overflow" itself
            warnings.simplefilter("ignore", RuntimeWarning)
            result = command.main(args=_with_default_subcommand(args), prog_name="oodcalc",
                                  standalone_mode=False)
    except KeyboardInterrupt:   # Ctrl-C outside the command (typer handles it inside)
        result = INTERRUPTED
    except BrokenPipeError:   # the reader went away (oodcalc ... | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except OodcalcError as err:     # the library's words for parameters → the options
        error_line(err.render({**options.parameter_names(), **err.names}))
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
    except MemoryError:
        error_line(f"out of memory (the estimate allowed this run, the machine did not); "
                   f"make the problem smaller, or lower the cap {MEMORY_VARIABLE} so that "
                   "runs like it are refused before they start")
        code = 1
    except RecursionError:
        error_line("the input is nested too deeply to process")
        code = 2
    except Exception as err:   # a bug: still one line, and the way to see more
        if os.environ.get("OODCALC_TRACEBACK"):
            raise
        error_line(f"internal error ({type(err).__name__}: {str(err)[:200]}); please report "
                   "it with the command line; OODCALC_TRACEBACK=1 shows the traceback")
        code = 1
    else:
        code = result if isinstance(result, int) else 0
    if result == INTERRUPTED:   # typer turns Ctrl-C into a silent exit code 130
        error_line("interrupted")
        code = INTERRUPTED
    return _exit(code, argv)


#: Exit code after Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


#: Groups that run a subcommand when given none; their options then go to it
#: (``oodcalc reproduce -f markdown`` is ``oodcalc reproduce synthetic -f markdown``).
DEFAULT_SUBCOMMAND = {"reproduce": "synthetic"}


def _with_default_subcommand(args: list[str]) -> list[str]:
    group = DEFAULT_SUBCOMMAND.get(args[0])
    if group and len(args) > 1 and args[1].startswith("-") \
            and args[1] not in CONTEXT["help_option_names"]:
        return [args[0], group, *args[1:]]
    return args


def _exit(code: int, argv) -> int:
    if argv is None:
        sys.exit(code)
    return code
