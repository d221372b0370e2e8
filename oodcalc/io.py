"""Input and output files: inputs opened only when they are regular files, outputs
checked before any work, then written atomically.

:func:`open_input` opens a file oodcalc reads (feature files, saved results, records), or
refuses it with one line (exit 2): no such file, a directory, a FIFO (opening one waits for
a writer: forever), a device (``/dev/zero`` never ends), a socket, or a file larger than
the reader takes. Every input file of the CLI or the library goes through it (the depth
cache reads its entries the same way: opened without waiting, refused unless regular).

:func:`check_output` says where a file for a requested path will go, or refuses it with one
line (exit 2): an empty path, a directory, a device, a FIFO or socket, a path under a file
or in a missing directory, a name too long for the file system, a directory oodcalc cannot
create files in, a read-only file, or an extension the format cannot write. A symlink is
followed, as shell redirection does: its target is written and the link stays; a cache
writes with ``follow_symlinks=False`` instead, replacing a link planted at an entry's name
(its target is never written).

:func:`write_atomic` writes to a temporary file beside the target, then renames it over the
target, so a failure or an interrupt never leaves a half-written file or destroys the old
one. Temporary files are named ``.NAME.PID.oodcalc-partial``; one whose process is gone (the
run was killed) is removed by the next write of the same target.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from .errors import InputError

__all__ = [
    "CACHE_VARIABLE", "NAME_MAX", "PARTIAL", "PATH_MAX", "SYSTEM", "cache_home",
    "check_cache_dir", "check_output", "check_output_dir", "open_input", "read_input",
    "remove_stale", "write_atomic", "write_npz_atomic", "write_text_atomic",
]


PARTIAL = ".oodcalc-partial"
#: Paths under these are never output files (devices, kernel files), whatever they resolve to.
SYSTEM = ("/dev/", "/proc/", "/sys/")
NAME_MAX = 255      # bytes in one path component, when the file system does not say
PATH_MAX = 4096


def _refuse(option: str, path: object, accepted: str) -> InputError:
    return InputError(option, repr(str(path)), accepted)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_input(path: str | Path, option: str, *, max_bytes: int | None = None,
               expected: str = "") -> BinaryIO:
    """``path`` open for binary reading, after refusing anything but a regular file of at
    most ``max_bytes``; ``expected`` ("; expected ...") ends each refusal. The file is
    looked at before it is opened (a device is never opened) and opened without waiting
    (a FIFO swapped in meanwhile is refused, not waited on)."""
    text = os.fspath(path)
    if not text.strip() or "\x00" in text:
        raise InputError(option, repr(text), ("an empty path" if "\x00" not in text else
                                              "a path cannot contain a NUL character")
                         + expected)
    try:
        _require_regular(os.stat(text), option, text, max_bytes, expected)
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise InputError(option, text, _unreadable(err, text) + expected) from None
    try:
        _require_regular(os.fstat(fd), option, text, max_bytes, expected)  # what was opened
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _require_regular(info: os.stat_result, option: str, text: str, max_bytes: int | None,
                     expected: str) -> None:
    kind = _kind(info.st_mode)
    if kind is not None:
        raise InputError(option, text, f"{kind}, not a regular file; oodcalc reads regular "
                         "files only" + expected)
    if max_bytes is not None and info.st_size > max_bytes:
        raise InputError(option, text, f"the file has {_bytes(info.st_size)}; at most "
                         f"{_bytes(max_bytes)} is accepted" + expected)


def _unreadable(err: OSError, text: str) -> str:
    """Why an input cannot be opened, in words."""
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if err.errno == errno.ENOTDIR:
        return f"{_first_file(Path(text))} is a file, not a directory"
    if isinstance(err, PermissionError):
        return "permission denied"
    return f"cannot read it ({err.strerror})"


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def read_input(path: str | Path, option: str, *, max_bytes: int,
               expected: str = "") -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see :func:`open_input`)."""
    with open_input(path, option, max_bytes=max_bytes, expected=expected) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:     # grew since it was looked at
        raise InputError(option, os.fspath(path), f"the file is larger than "
                         f"{_bytes(max_bytes)}" + expected)
    return data


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return NAME_MAX


def _check_text(path: str | Path, option: str, thing: str = "file") -> str:
    text = os.fspath(path)
    if not text.strip():
        raise _refuse(option, text, f"an empty path; give a {thing} name")
    if "\x00" in text:
        raise _refuse(option, text, "a path cannot contain a NUL character")
    if len(os.fsencode(text)) > PATH_MAX:
        raise _refuse(option, text[:40] + "…", f"the path is longer than {PATH_MAX} bytes")
    return text


def _probe(directory: Path, option: str, shown: object) -> None:
    """Fail unless files can be created in ``directory`` (a read-only file system, a
    directory without write permission, one that cannot be entered), without creating
    anything."""
    reason = _unwritable(directory)
    if reason is not None:
        where = os.path.abspath(directory)
        place = "the working directory " + where if where == os.getcwd() else where
        raise _refuse(option, shown, f"cannot create a file in {place}: {reason}")


def _unwritable(directory: Path) -> str | None:
    """Why files cannot be created in ``directory``, in words (None if they can)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except (OSError, AttributeError):
        pass
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    if not os.access(directory, os.X_OK):
        return "permission denied (the directory cannot be entered)"
    return "the directory is read-only (no write permission)"


def check_output(path: str | Path, option: str = "--output", *,
                 suffixes: Iterable[str] | None = None, formats: str | None = None,
                 follow_symlinks: bool = True) -> Path:
    """The regular file that writing ``path`` will create or replace (a symlink's target;
    without ``follow_symlinks``, the link itself, which the file will replace), after
    checking it can be written; nothing is left behind.

    ``suffixes`` (lower case, with the dot) are the extensions the format can write;
    ``formats`` describes them for the message (default: the list).
    """
    text = _check_text(path, option)
    if text.endswith(os.sep):
        raise _refuse(option, text, "a directory; give a file name inside it")
    requested = Path(text)
    if text.startswith("="):      # "-o=out.png": a short option keeps the "=" in its value
        short = " (-o=FILE names the file '=FILE': write -o FILE)" if option == "--output" \
            else ""
        raise _refuse(option, text, f"a file name starting with '='{short}; write "
                      f"{option} FILE or {option}=FILE, or ./{text} for such a file")
    if _system(text):
        raise _refuse(option, text, "a system path (devices, /proc); oodcalc writes regular "
                      "files only (for the terminal, leave out the output option or use '-' "
                      "where the command accepts it)")
    _check_name(requested, option, text)
    link = requested.is_symlink()
    target = Path(os.path.realpath(requested)) if link and follow_symlinks else requested
    _check_name(target, option, text)
    directory = target.parent if str(target.parent) else Path(".")
    mode = None if link and not follow_symlinks else _mode(target, option, text)
    if mode is not None:
        kind = _kind(mode)
        if kind == "a directory":
            raise _refuse(option, text, "a directory; give a file name inside it")
        if kind is not None:
            raise _refuse(option, text, f"{kind}, not a regular file; oodcalc writes regular "
                          "files only (for the terminal, leave out the output option or "
                          "use '-' where the command accepts it)")
        if not os.access(target, os.W_OK):
            raise _refuse(option, text, "the file is read-only")
    if suffixes is not None:
        suffixes = tuple(suffixes)
        if requested.suffix.lower() not in suffixes:
            described = formats or ("a name ending in " + ", ".join(suffixes[:-1])
                                    + " or " + suffixes[-1] if len(suffixes) > 1
                                    else "a name ending in " + suffixes[0])
            raise _refuse(option, text, f"this output needs {described}")
    _check_directory(directory, option, text)
    return target


def _mode(path: Path, option: str, shown: str) -> int | None:
    """``st_mode`` of what ``path`` names (None if nothing), or a refusal."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:   # a symlink loop, a component that is a file...
        if err.errno == errno.ENOTDIR:
            raise _refuse(option, shown, f"{_first_file(path)} is a file, not a "
                          "directory") from None
        raise _refuse(option, shown, f"cannot use this path ({err.strerror})") from None


def _check_directory(directory: Path, option: str, shown: str) -> None:
    """``directory`` exists, is one, and files can be created in it."""
    first = _first_file(directory)
    if first is not None:
        raise _refuse(option, shown, f"{first} is a file, not a directory")
    if not directory.is_dir():
        raise _refuse(option, shown, f"the directory {directory} does not exist")
    _probe(directory, option, shown)


def _system(text: str) -> bool:
    path = os.path.abspath(text)
    return any(path == p.rstrip("/") or path.startswith(p) for p in SYSTEM)


def _check_name(path: Path, option: str, shown: str) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    limit = _name_max(directory if directory.is_dir() else Path("."))
    length = len(os.fsencode(path.name))
    if length > limit:
        raise _refuse(option, shown[:40] + "…", f"the file name is {length} bytes long; "
                      f"this file system allows {limit}")


def _first_file(path: Path) -> Path | None:
    """The first component of ``path`` that exists and is not a directory."""
    for parent in reversed((path, *path.parents)):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def check_output_dir(path: str | Path, option: str, *, parents: bool = False) -> Path:
    """A directory that files can be written into (created later if missing; with
    ``parents``, missing parents too, as ``mkdir -p`` would)."""
    text = _check_text(path, option, "directory")
    if _system(text):
        raise _refuse(option, text, "a system directory (devices, /proc); give a directory "
                      "of your own")
    directory = Path(text)
    _check_name(directory, option, text)
    mode = _mode(directory, option, text)
    if mode is not None and not stat.S_ISDIR(mode):
        raise _refuse(option, text, f"{_kind(mode) or 'a file'}, not a directory")
    # an existing directory must take files; a new one, its parent (or the nearest
    # existing ancestor, with parents)
    holder = directory if mode is not None else \
        (directory.parent if str(directory.parent) else Path("."))
    while parents and mode is None and not os.path.lexists(holder) and holder != holder.parent:
        holder = holder.parent if str(holder.parent) else Path(".")
    _check_directory(holder, option, text)
    return directory


#: The XDG variable that places the user's caches (else ~/.cache).
CACHE_VARIABLE = "XDG_CACHE_HOME"


def cache_home() -> tuple[Path, str | None]:
    """The user's cache directory, as the XDG base-directory spec says: ``$XDG_CACHE_HOME``
    when it is an absolute path, else ``~/.cache`` (a relative one is ignored); and
    :data:`CACHE_VARIABLE` when it came from there (None: from the home directory)."""
    value = os.environ.get(CACHE_VARIABLE, "")
    if os.path.isabs(value):
        return Path(value), CACHE_VARIABLE
    return Path(os.path.expanduser("~")) / ".cache", None


def check_cache_dir(directory: str | Path | None, default: str,
                    option: str = "--cache-dir") -> Path:
    """A cache directory files can be written into (see :func:`check_output_dir`): the
    ``directory`` given (refusals name ``option``), else ``default`` under
    :func:`cache_home`, whose refusals name what chose it (``XDG_CACHE_HOME`` or the home
    directory), not an option that was not given."""
    if directory is not None:
        return check_output_dir(directory, option, parents=True)
    base, variable = cache_home()
    path = base / default
    try:
        return check_output_dir(path, option, parents=True)
    except InputError as err:
        where = f"the default cache directory {path} cannot be used"
        if variable is not None:
            raise InputError(variable, repr(str(base)), f"{err.accepted}, so {where}; point "
                             f"{variable} at a directory, or give {option} DIR") from None
        raise InputError(option, "nothing", f"{err.accepted}, so {where} (it is under the "
                         f"home directory; {CACHE_VARIABLE} is unset or not an absolute "
                         f"path); give {option} DIR") from None


def _partial_prefix(target: Path) -> str:
    return f".{target.name[:180]}."


def remove_stale(target: Path) -> list[Path]:
    """Remove temporary files left beside ``target`` by runs that were killed."""
    prefix, removed = _partial_prefix(target), []
    directory = target.parent if str(target.parent) else Path(".")
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(PARTIAL)):
            continue
        pid = name[len(prefix):-len(PARTIAL)]
        if not pid.isdigit() or _running(int(pid)):
            continue
        try:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def write_atomic(path: str | Path, write: Callable[[Path], None], *, option: str = "output",
                 suffixes: Iterable[str] | None = None, follow_symlinks: bool = True) -> Path:
    """Call ``write(tmp_path)``, then move the result onto ``path`` (a symlink's target;
    without ``follow_symlinks``, onto the link: a cache never writes through one).

    Returns ``path`` as given.
    """
    target = check_output(path, option, suffixes=suffixes, follow_symlinks=follow_symlinks)
    remove_stale(target)
    tmp = target.parent / f"{_partial_prefix(target)}{os.getpid()}{PARTIAL}"
    _create_new(tmp)
    try:
        write(tmp)
        os.chmod(tmp, _mode_for(target))   # made 0600; give the file its usual mode
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Path(path)


def _create_new(tmp: Path) -> None:
    """Create ``tmp`` empty, as a new file: whatever is at its name (a symlink planted
    there, a file of a process that had this PID) is removed, never written through."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileExistsError:
        os.unlink(tmp)
        fd = os.open(tmp, flags, 0o600)
    os.close(fd)


def _mode_for(path: Path) -> int:
    """The existing regular file's mode, else (nothing there, or a symlink that is being
    replaced) what a plain ``open(path, "w")`` would give."""
    try:
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode):
            return info.st_mode & 0o777
    except FileNotFoundError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str, *, option: str = "output",
                      follow_symlinks: bool = True) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), option=option,
                        follow_symlinks=follow_symlinks)


def write_npz_atomic(path: str | Path, arrays: dict, *, option: str = "output") -> Path:
    """Named numeric arrays as a compressed ``.npz`` (no pickles: ``np.load`` reads it with
    ``allow_pickle=False``), written atomically."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
    return write_atomic(path, write, option=option, suffixes=(".npz",))
