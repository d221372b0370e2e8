"""The one exception family oodcalc raises for problems a user can act on.

The CLI maps each class to a one-line message and an exit code; the Python API lets
them propagate, so callers can catch ``OodcalcError`` alone.

Messages name parameters in the words of whoever called: the library writes
``param("eps")`` (a placeholder) where it names a parameter, and ``str(err)`` shows the
API's name (``Protocol.eps``, see :data:`API_NAMES`); a caller with its own names for
them (the CLI's options) wraps its calls in :func:`naming`, and the same error then reads
``--eps``. An :class:`InputError` whose subject is a placeholder also takes the value as
the caller gave it (``--gamma: got 5000 values`` rather than ``the geometry's K: got
5000``).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, Mapping, Union

__all__ = [
    "API_NAMES", "ComputationError", "InputError", "NothingToDraw", "OodcalcError", "fill",
    "item_name", "naming", "param", "shorten",
]


#: How the Python API names the parameters that library messages mention.
API_NAMES = {
    "K": "the geometry's K", "d": "the geometry's d",
    "eps": "Protocol.eps", "eta": "Protocol.eta", "eta_ft": "Protocol.eta_ft",
    "max_steps": "Protocol.max_steps", "sweep_max_steps": "max_steps",
    "eps_ft": "Protocol.eps_ft", "ft_steps": "Protocol.ft_steps",
    "replay": "Protocol.replay", "l2": "Protocol.l2", "project": "Protocol.project",
    "weights": "Protocol.weights", "tolerance": "advise's tolerance",
    "predict": "oodcalc.predict", "simulate_population": "oodcalc.simulate.simulate_population",
    "simulate_prompts": "oodcalc.simulate.simulate_prompts", "sequence": "oodcalc.sequence",
}

_PLACEHOLDER = re.compile("⟦([^⟦⟧]+)⟧")


def param(name: str, verb: str = "") -> str:
    """A placeholder for parameter ``name`` in a message (``verb``: "lower", "raise"...,
    which a caller may word differently: ``give fewer --gamma values``)."""
    return f"⟦{verb + ' ' if verb else ''}{name}⟧"


#: A caller's name for a parameter: its own name (an option), or ``(name, value as
#: given)``; keys are parameter names, or ``"verb name"`` for a whole phrase.
Names = Mapping[str, Union[str, tuple[str, object]]]


def _name(entry) -> str:
    return entry[0] if isinstance(entry, tuple) else entry


def fill(text: str, names: Names | None = None) -> str:
    """``text`` with every placeholder in ``names``' words (the API's where not given)."""
    names = names or {}

    def one(match: re.Match) -> str:
        key = match.group(1)
        if key in names:
            return _name(names[key])
        verb, _, name = key.rpartition(" ")
        shown = _name(names[name]) if name in names else API_NAMES.get(name, name)
        return f"{verb} {shown}" if verb else shown
    return _PLACEHOLDER.sub(one, text)


def item_name(name: str, index: int) -> str:
    """How entry ``index`` (0-based) of a sequence parameter is named in a message: as
    Python indexes it for the API (``gamma[0]``), counted from 1 for a command-line
    option (``--gamma value 1``)."""
    return f"{name} value {index + 1}" if name.startswith("--") else f"{name}[{index}]"


def shorten(value: object, limit: int = 60) -> str:
    """``value`` as a message shows it: its text, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


class OodcalcError(Exception):
    """A problem the user can act on; ``str(err)`` is the whole message.

    Example
    -------
    >>> import oodcalc as oc
    >>> try:
    ...     oc.predict(oc.Setting(oc.parallel_shift([1, 2])))
    ... except oc.OodcalcError as error:                  # bad input or a failed run
    ...     print(error)
    gamma[1]: got 2.0; each γ must lie in [-1, 1]
    """

    exit_code = 1
    #: The caller's names for the parameters the message mentions (see :func:`naming`).
    names: Names = {}

    def render(self, names: Names | None = None) -> str:
        return fill(super().__str__(), names)

    def __str__(self) -> str:
        return self.render(self.names)


class InputError(OodcalcError, ValueError):
    """Bad input: an argument, a value or a file that oodcalc cannot accept (also a
    ``ValueError``); ``what``, ``value`` and ``accepted`` are the message's parts.

    Example
    -------
    >>> import oodcalc as oc
    >>> try:
    ...     oc.parallel_shift([1, 2])
    ... except ValueError as error:
    ...     print(type(error).__name__, "|", error.what, "|", error.accepted)
    InputError | gamma[1] | each γ must lie in [-1, 1]
    """

    exit_code = 2

    def __init__(self, what: str, value: object, accepted: str) -> None:
        self.what, self.value, self.accepted = what, value, accepted
        super().__init__(self._message(what, value, accepted))

    @staticmethod
    def _message(what: str, value: object, accepted: str) -> str:
        shown = value if isinstance(value, str) and value.isprintable() else repr(value)
        return f"{what}: got {shown}; {accepted}"

    def render(self, names: Names | None = None) -> str:
        names = names or {}
        match = _PLACEHOLDER.fullmatch(self.what)
        entry = names.get(match.group(1)) if match else None
        if isinstance(entry, tuple):      # the subject and its value as the caller gave it
            return fill(self._message(entry[0], entry[1], self.accepted), names)
        return fill(super().render(names), names)


class ComputationError(OodcalcError, RuntimeError):
    """A computation that was well posed but could not finish (for example the
    stopping rule was not met within the step cap); also a ``RuntimeError``.

    Example
    -------
    >>> import oodcalc as oc
    >>> try:
    ...     oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(max_steps=10)))
    ... except oc.ComputationError as error:
    ...     print(str(error).split(" (")[0])
    pretraining would need about 357 steps to meet the stopping rule
    """

    exit_code = 1


class NothingToDraw(OodcalcError):
    """A well-posed figure with nothing in it (fine-tuning takes no step, no point of a
    map moves): said in one line instead of drawing empty axes."""

    exit_code = 1


@contextmanager
def naming(names: Names) -> Iterator[None]:
    """Errors raised inside name parameters as ``names`` says (inner names win)."""
    try:
        yield
    except OodcalcError as err:
        err.names = {**names, **err.names}
        raise
