"""What each claim's derivation earned, cached on disk by a hash of the code it runs.

``oodcalc verify`` shows in its symbolic column the level the derivation *earned* in this
run (and fails the row when that is not the registry's level), so it has to run the
derivations: about 30 s for all of them. Their outcome depends only on source code, so it
is cached by a SHA-256 of the claim's module and of every oodcalc module it imports,
transitively, wherever the import statement sits (read with ``ast``: the same rule as
tests/test_layers.py), with the versions of Python, sympy, mpmath, numpy and scipy. Edit
any of those files and the derivation runs again.

One JSON file per claim and key (never pickle) in ``$XDG_CACHE_HOME/oodcalc/derivations``
(else ``~/.cache/oodcalc/derivations``). An entry is used only when it names the same claim
and key and has the fields a run writes; anything else is recomputed and replaced
atomically. A directory that cannot be read or written costs only the time: the
derivation runs, nothing is stored.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..claims import Claim

__all__ = [
    "FORMAT", "MAX_ENTRY_BYTES", "Outcome", "PACKAGE_ROOT", "VERSIONED", "closure",
    "code_key", "default_directory", "from_derivation", "imported_modules", "outcome",
]


#: Bumped when what an entry holds changes: older entries are then recomputed.
FORMAT = 1
#: Largest entry read (bytes): an outcome is a few hundred bytes.
MAX_ENTRY_BYTES = 1 << 16
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
VERSIONED = ("sympy", "mpmath", "numpy", "scipy")


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oodcalc" / "derivations"


@dataclass(frozen=True)
class Outcome:
    """A derivation's result as the ledger needs it: the level its decisive checks earned,
    how many checks ran and which failed; ``cached`` if it was read from disk."""

    claim: str
    level: str
    checks: int
    failed: tuple[str, ...]
    key: str
    cached: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"format": FORMAT, "claim": self.claim, "key": self.key, "level": self.level,
                "checks": self.checks, "failed": list(self.failed),
                "seconds": round(self.seconds, 2)}


# --- the key ---------------------------------------------------------------------------

def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "oodcalc":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(name: str, path: Path) -> set[str]:
    """The oodcalc modules ``name`` imports, at module level or inside functions."""
    info = path.stat()
    return _parsed_imports(name, path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=None)
def _parsed_imports(name: str, path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """:func:`_imports` once per version of the file (the ledger asks for every claim)."""
    return frozenset(imported_modules(name, path, lambda t: _module_file(t) is not None))


def imported_modules(name: str, path: Path, exists: Callable[[str], bool]) -> set[str]:
    """The modules (those ``exists`` accepts) that module ``name``, read from ``path``,
    imports: at module level, inside functions or under TYPE_CHECKING."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[:len(package) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            # ``from .. import theory`` imports a module; ``from ..x import f`` a name of x
            targets = [f"{base}.{a.name}" if exists(f"{base}.{a.name}") else base
                       for a in node.names]
        else:
            continue
        out |= {t for t in targets if exists(t)}
    return out


def closure(module: str) -> list[Path]:
    """The files of ``module`` and of every oodcalc module it imports, transitively."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_imports(name, path))
    return sorted(seen.values())


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def code_key(claim: Claim) -> str:
    """SHA-256 of what the derivation's outcome depends on: the source files it can run,
    the function's name and the versions of Python and the mathematical libraries."""
    digest = hashlib.sha256()
    digest.update(f"format {FORMAT}; {claim.id}; {claim.module}.{claim.derive}; python "
                  f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    for package in VERSIONED:
        digest.update(f"; {package} {_version(package)}".encode())
    for path in closure(claim.module):
        digest.update(b"\0" + str(path.relative_to(PACKAGE_ROOT)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


# --- the entries -----------------------------------------------------------------------

def from_derivation(claim: Claim, derivation, key: str = "", seconds: float = 0.0) -> Outcome:
    return Outcome(claim.id, derivation.level, len(derivation.checks),
                   tuple(derivation.failed()), key, False, seconds)


def _read(path: Path) -> dict | None:
    try:   # O_NONBLOCK: a FIFO planted as an entry must not make verify wait
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = f.read(MAX_ENTRY_BYTES + 1)
        if len(data) > MAX_ENTRY_BYTES:
            return None
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def _well_formed(entry, claim: Claim, key: str) -> bool:
    return (isinstance(entry, dict) and entry.get("format") == FORMAT
            and entry.get("claim") == claim.id and entry.get("key") == key
            and isinstance(entry.get("level"), str)
            and type(entry.get("checks")) is int and entry["checks"] >= 0
            and isinstance(entry.get("failed"), list)
            and all(isinstance(f, str) for f in entry["failed"]))


def outcome(claim: Claim, directory: Path | None = None, *, enabled: bool = True) -> Outcome:
    """The outcome of ``claim``'s derivation: from the cache when its code is unchanged,
    else run (and stored). ``enabled=False`` runs it without reading or writing."""
    from ..io import write_text_atomic
    from ..errors import OodcalcError

    key = code_key(claim)
    path = (default_directory() if directory is None else Path(directory)) / \
        f"claim{claim.id}-{key[:32]}.json"
    if enabled:
        entry = _read(path)
        if _well_formed(entry, claim, key):
            return Outcome(claim.id, entry["level"], entry["checks"], tuple(entry["failed"]),
                           key, True, 0.0)
    start = time.perf_counter()
    result = from_derivation(claim, claim.load("derive")(), key, time.perf_counter() - start)
    if enabled:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(result.to_dict(), indent=1) + "\n",
                              option="derivation cache")
        except (OSError, OodcalcError):
            pass      # an unusable cache directory costs the time, nothing else
    return result
