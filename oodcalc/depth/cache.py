"""Results cached by their parameters, one JSON file per run (never pickle).

The file name is the SHA-256 of the run's parameters (the protocol, seed, γ, the code's
protocol version, the torch version and the machine); the file repeats the parameters and a
record is used only when they match exactly, so a stale or foreign file is recomputed,
never trusted. Writes are atomic. Default place: ``$XDG_CACHE_HOME/oodcalc/depth`` (else
``~/.cache/oodcalc/depth``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import write_text_atomic
from .protocol import run_key


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oodcalc" / "depth"


class Cache:
    """``load(parameters)`` → record or None; ``store(record)``. ``directory=None`` and
    ``enabled=False`` turn it off (nothing read, nothing written)."""

    def __init__(self, directory: str | Path | None = None, *, enabled: bool = True,
                 option: str = "--cache-dir") -> None:
        self.enabled = enabled
        self.directory = Path(directory) if directory is not None else default_directory()
        self.option = option
        if enabled:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputError(option, str(self.directory),
                                 f"cannot use it as a cache directory ({err.strerror})") from None

    def path(self, parameters: dict[str, Any]) -> Path:
        return self.directory / f"{run_key(parameters)}.json"

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        try:
            record = json.loads(self.path(parameters).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("parameters") != parameters:
            return None
        return record

    def store(self, record: dict[str, Any]) -> None:
        if self.enabled:
            write_text_atomic(self.path(record["parameters"]),
                              json.dumps(record, separators=(",", ":"), allow_nan=False),
                              option=self.option)
