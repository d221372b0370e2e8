"""Results cached by their parameters, one JSON file per run (never pickle).

The file name is the SHA-256 of the run's parameters (the protocol, seed, γ, the code's
protocol version, the torch version and the machine); the file repeats the parameters and a
record is used only when they match exactly and every field has the shape a run writes, so
a stale, truncated or foreign file is recomputed (and replaced atomically), never trusted.
A cache entry that is not a regular file (a FIFO, a device, a directory) is refused with
one line before any training. Default place: ``$XDG_CACHE_HOME/oodcalc/depth`` (else, or
when the variable is not an absolute path, ``~/.cache/oodcalc/depth``).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import cache_home, check_cache_dir, write_text_atomic
from .protocol import run_key

__all__ = ["Cache", "MAX_RECORD_BYTES", "default_directory", "well_formed"]


#: Largest cache file read (bytes): a record is a few kB (its source- and OOD-loss curves
#: grow by four numbers per fine-tuning step), so anything larger is not one of ours.
MAX_RECORD_BYTES = 128 << 20


def default_directory(name: str = "depth") -> Path:
    return cache_home()[0] / "oodcalc" / name


class Cache:
    """``load(parameters)`` → record or None; ``store(record)``. ``directory=None`` and
    ``enabled=False`` turn it off (nothing read, nothing written)."""

    #: The default directory's name under ``$XDG_CACHE_HOME/oodcalc``.
    NAME = "depth"

    def __init__(self, directory: str | Path | None = None, *, enabled: bool = True,
                 option: str = "--cache-dir") -> None:
        self.enabled = enabled
        self.directory = Path(directory) if directory is not None else \
            default_directory(self.NAME)
        self.option = option
        self.rejected = 0     # damaged or foreign entries found (then recomputed)
        if enabled:
            # refused before any training: a file, a system path, a read-only directory
            # (the default's refusal names XDG_CACHE_HOME, not the option)
            check_cache_dir(directory, f"oodcalc/{self.NAME}", option)
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputError(option, str(self.directory),
                                 f"cannot use it as a cache directory ({err.strerror})") from None

    def path(self, parameters: dict[str, Any]) -> Path:
        return self.directory / f"{run_key(parameters)}.json"

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        record = self._decoded(parameters)
        if record is None:
            return None
        if not well_formed(record, parameters):
            self.rejected += 1
            return None
        return record

    def _decoded(self, parameters: dict[str, Any]) -> Any:
        """The entry's JSON, unchecked; None without one (or disabled), False when it is
        not JSON (truncated, binary, NaN, a 5000-digit int): the caller counts it."""
        if not self.enabled:
            return None
        data = self._read(self.path(parameters))
        if data is None:
            return None
        try:
            return json.loads(data.decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, RecursionError):
            return False

    def _read(self, path: Path) -> bytes | None:
        """The entry's bytes; None if there is none (or it is too large to be a record)."""
        try:   # O_NONBLOCK: opening a FIFO must not wait for a writer
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise InputError(self.option, str(self.directory), f"cannot read the cache entry "
                             f"{path.name} ({err.strerror}); remove it") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" \
                if stat.S_ISFIFO(mode) else "a device" \
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
            raise InputError(self.option, str(self.directory), f"the cache entry "
                             f"{path.name} is {kind}, not a regular file; remove it")
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES:
            self.rejected += 1
            return None
        return data

    def store(self, record: dict[str, Any]) -> None:
        if self.enabled:
            # a symlink at the entry's name is replaced, never written through
            write_text_atomic(self.path(record["parameters"]),
                              json.dumps(record, separators=(",", ":"), allow_nan=False),
                              option=self.option, follow_symlinks=False)


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _number(x: Any, optional: bool = False) -> bool:
    if x is None:
        return optional
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _numbers(xs: Any, n: int, optional: bool = True) -> bool:
    """A list of ``n`` numbers (None allowed where a diverged run left no finite value)."""
    return isinstance(xs, list) and len(xs) == n and all(_number(x, optional) for x in xs)


def _phase(phase: Any, steps: str, n: int) -> bool:
    return (isinstance(phase, dict) and isinstance(phase.get(steps), int)
            and not isinstance(phase[steps], bool) and phase[steps] >= 0
            and isinstance(phase.get("converged"), bool)
            and isinstance(phase.get("diverged"), bool)
            and _numbers(phase.get("error"), n) and _number(phase.get("seconds")))


def well_formed(record: Any, parameters: dict[str, Any]) -> bool:
    """``record`` is what a run with these ``parameters`` writes (training.run_seed): the
    same parameters, and every field the table and the plot read, of the right shape."""
    if not isinstance(record, dict) or record.get("parameters") != parameters:
        return False
    K = parameters["K"]
    if not _phase(record.get("pretrain"), "T1", K):
        return False
    if not record["pretrain"]["converged"]:
        return True                # nothing was fine-tuned
    finetune = record.get("finetune")
    if not (_phase(finetune, "T2", K) and _numbers(record.get("ood_error"), K)
            and _numbers(record.get("source_before"), K)
            and _numbers(record.get("source_after"), K)):
        return False
    curve = finetune.get("source_curve")
    if not (isinstance(curve, list) and all(_numbers(row, K) for row in curve)):
        return False
    if finetune["converged"]:      # a usable run: its F enters the table
        return _number(record.get("F")) and _numbers(record.get("F_k"), K, optional=False)
    return _number(record.get("F"), True) and _numbers(record.get("F_k"), K)
