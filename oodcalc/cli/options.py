"""Parsing of command-line values into numbers, with one-line errors that name the
option, the value and what is accepted. Options arrive as text so that every bad value,
NaN and inf included, gets the same kind of message."""

from __future__ import annotations

import math
import re

from ..errors import InputError, Names
from ..limits import MAX_INT

# --- the library's parameters, in this command line's words -----------------------------
#
# The library names parameters in API words (``Protocol.eps``, ``the geometry's K``); its
# errors are shown here with the option that set each one. ``main`` starts every command
# from these and the command adds what depends on how it was called (``--gamma: got 5000
# values`` for K).

#: Options that name a library parameter the same way in every command.
OPTION_NAMES: dict[str, str | tuple[str, object]] = {
    "K": "--K", "d": "--d", "eps": "--eps", "eta": "--eta", "eta_ft": "--eta-ft",
    "max_steps": "--max-steps", "sweep_max_steps": "--max-steps", "eps_ft": "--eps-ft",
    "ft_steps": "--ft-steps", "replay": "--replay", "l2": "--l2", "project": "--project",
    "weights": "--weights", "tolerance": "--search-tol", "N": "--N", "batch": "--batch", "holdout": "--holdout",
    "workers": "--workers", "predict": "predict", "simulate_population": "simulate",
    "simulate_prompts": "simulate -s prompts",
}
_names: dict[str, str | tuple[str, object]] = dict(OPTION_NAMES)


def reset_names() -> None:
    """Start a command from :data:`OPTION_NAMES`."""
    _names.clear()
    _names.update(OPTION_NAMES)


def name_parameters(names: Names) -> None:
    """This command's names for library parameters (``{"K": ("--gamma", "5 values")}``:
    the option, and the value to show as given)."""
    _names.update(names)


def parameter_names() -> Names:
    return dict(_names)

# Digits only (ASCII; no underscores), optionally in e-notation with an integer value (1e6).
_INTEGER = re.compile(r"^\s*[+-]?\d+(?:\.0*)?(?:[eE]\+?\d+)?\s*$", re.ASCII)

_PI_EXPR = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)?)\s*\*?\s*pi\s*(?:/\s*(\d+\.?\d*))?\s*$")


# A decimal number as written in ASCII (no underscores, no other scripts' digits).
_NUMBER = re.compile(r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$", re.ASCII)


def number(option: str, text: str, accepted: str = "expected a finite real number") -> float:
    if text.strip().lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise InputError(option, repr(text), accepted + " (NaN and inf are not accepted)")
    if not _NUMBER.match(text):
        raise InputError(option, repr(text), accepted)
    x = float(text)
    if not math.isfinite(x):
        raise InputError(option, repr(text), accepted + " (NaN and inf are not accepted)")
    _no_underflow(option, text, x)
    return x


def _no_underflow(option: str, text: str, x: float, whole: str | None = None
                  ) -> None:
    """A nonzero number written so small that it reads as 0 (1e-400) is refused; the
    message shows ``whole``, the option's value, if ``text`` is one entry of it."""
    if x == 0.0 and re.search(r"[1-9]", text.lower().partition("e")[0]):
        raise InputError(option, repr(whole if whole is not None else text),
                         f"{text.strip()} is too small for a float64 (it would be read as "
                         "0); write 0 or a number of magnitude >= 1e-308")


def positive(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    x = number(option, text, "expected a finite number > 0")
    if x <= 0:
        raise InputError(option, repr(text), "expected a finite number > 0")
    return x


def integer(option: str, text: str | None, minimum: int, maximum: int = MAX_INT,
            why: str = "no option takes a larger integer", accepted: str | None = None
            ) -> int | None:
    """An integer in ``[minimum, maximum]``; ``why`` says where the maximum comes from,
    ``accepted`` replaces the message for text that is not such an integer."""
    if text is None:
        return None
    accepted = accepted or f"expected an integer >= {minimum}"
    if not _INTEGER.match(text):
        raise InputError(option, repr(text), accepted)
    mantissa, _, exponent = text.strip().lower().partition("e")
    if len(exponent) > 3 or len(mantissa) > 30:
        n = math.inf if not mantissa.lstrip().startswith("-") else -math.inf
    else:
        n = int(mantissa.split(".")[0]) * 10 ** int(exponent or 0)
    if n < minimum:
        raise InputError(option, repr(text), accepted)
    if n > maximum:
        raise InputError(option, repr(text), f"at most {maximum:,} ({why})")
    return int(n)


def numbers(option: str, text: str) -> list[float]:
    """A comma-separated list of finite numbers, e.g. ``1,-0.9``."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        x = float(part) if _NUMBER.match(part) else math.nan
        if not math.isfinite(x):
            raise InputError(option, repr(text), f"entry {part!r} is not a finite number; "
                             "expected comma-separated finite numbers, e.g. 1,-0.9")
        _no_underflow(option, part, x, text)   # repr(text) only when refused: O(n)
        values.append(x)
    return values


def angle(option: str, text: str) -> float:
    """Radians, as a number (``0.5236``) or a multiple of pi (``pi/6``, ``-2pi/3``)."""
    accepted = "expected an angle in radians, e.g. 0.5236 or pi/6"
    match = _PI_EXPR.match(text.replace("π", "pi"))
    if match:
        factor = match.group(1)
        factor = float(factor + "1" if factor in ("", "+", "-") else factor)
        divisor = float(match.group(2)) if match.group(2) else 1.0
        value = factor * math.pi / divisor if divisor > 0 else math.inf
        if not math.isfinite(value):
            raise InputError(option, repr(text), accepted + " (a finite one: not a division "
                             "by zero)")
        return value
    return number(option, text, accepted)


#: A dask scheduler's address: PROTOCOL://HOST:PORT.
SCHEDULER = re.compile(r"^[a-z][a-z0-9+]*://[^\s/]+:\d{1,5}$")


def scheduler_executor(scheduler: str | None, workers: str | None = None):
    """``(executor, close)`` on the dask cluster at ``--scheduler`` (``(None, None)`` when
    not given), with one-line errors for a malformed or unreachable address and for
    --workers given too. Shared by ``sweep`` and the torch experiments."""
    client, close = scheduler_client(scheduler, workers)
    return (None, None) if client is None else (client.get_executor(), close)


def scheduler_client(scheduler: str | None, workers: str | None = None):
    """``(client, close)``: :func:`scheduler_executor`'s dask.distributed.Client itself,
    for a command that scatters data to the workers once (``reproduce real``)."""
    if scheduler is None:
        return None, None
    if workers is not None:
        raise InputError("--workers", workers, "use --workers (local processes) or "
                         "--scheduler (a dask cluster), not both")
    if not SCHEDULER.match(scheduler):
        raise InputError("--scheduler", repr(scheduler), "expected a scheduler address "
                         "PROTOCOL://HOST:PORT, e.g. tcp://10.0.0.5:8786")
    try:
        from dask.distributed import Client
    except ImportError:
        raise InputError("--scheduler", scheduler, "needs dask.distributed: "
                         'pip install "oodcalc[dask]"') from None
    try:
        client = Client(scheduler, timeout="10s")
    except Exception as err:  # noqa: BLE001 - dask raises many kinds for a bad address
        raise InputError("--scheduler", scheduler, f"could not connect to a dask "
                         f"scheduler there ({err})") from None
    return client, client.close
