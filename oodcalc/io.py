"""Output files are written atomically: to a temporary file beside the target, then
renamed over it, so a failure never leaves a half-written file or destroys the old one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from .errors import InputError


def write_atomic(path: str | Path, write: Callable[[Path], None], *, option: str = "output") -> Path:
    """Call ``write(tmp_path)`` then move the result onto ``path``."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(option, str(path), f"the directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=directory)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str, *, option: str = "output") -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), option=option)
