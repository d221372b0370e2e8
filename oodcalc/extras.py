"""Optional dependencies: one place that names the extra to install when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import OodcalcError


__all__ = ["MissingDependency", "install_hint", "require"]


def install_hint(extra: str) -> str:
    """The command that installs an optional extra of oodcalc."""
    return f'pip install "oodcalc[{extra}]"'


class MissingDependency(OodcalcError, ImportError):
    """An optional dependency is not installed (a usage problem: exit code 2)."""

    exit_code = 2


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or fail with one line naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(f"{what} needs {module}, which is not installed: "
                                f"{install_hint(extra)}") from None
