"""The one exception family oodcalc raises for problems a user can act on.

The CLI maps each class to a one-line message and an exit code; the Python API lets
them propagate, so callers can catch ``OodcalcError`` alone.
"""

from __future__ import annotations


class OodcalcError(Exception):
    """A problem the user can act on; ``str(err)`` is the whole message."""

    exit_code = 1


class InputError(OodcalcError, ValueError):
    """Bad input: an argument, a value or a file that oodcalc cannot accept."""

    exit_code = 2

    def __init__(self, what: str, value: object, accepted: str) -> None:
        self.what, self.value, self.accepted = what, value, accepted
        shown = value if isinstance(value, str) and value.isprintable() else repr(value)
        super().__init__(f"{what}: got {shown}; {accepted}")


class ComputationError(OodcalcError, RuntimeError):
    """A computation that was well posed but could not finish (for example the
    stopping rule was not met within the step cap)."""

    exit_code = 1
