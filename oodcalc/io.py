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
        os.chmod(tmp, _mode_for(path))   # mkstemp makes 0600; give the file its usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _mode_for(path: Path) -> int:
    """The existing file's mode, else what a plain ``open(path, "w")`` would give."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str, *, option: str = "output") -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), option=option)
