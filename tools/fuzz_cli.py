"""A fuzz campaign against the ``oodcalc`` command line (not run in CI; the suite's
``tests/test_fuzz_cli.py`` is the small in-process version).

Each case is drawn from the command table of ``tests/fuzz_cases.py`` (valid and hostile
values, input files and output paths, slow values included) and run in its own forked
process, one at a time: the CLI's ``main(argv)`` called in-process, in a fresh working
directory, stdin from /dev/null, with an address-space cap (``--memory``, default 6 GB)
and a time limit (``--timeout``, default 20 s). Outcomes:

- ``success``: exit 0;
- ``clean error``: exit 1 or 2 and exactly one stderr line ``oodcalc: error: ...``;
- ``unclean error``: exit 1 or 2 with anything else on stderr (several lines, warnings);
- ``traceback``: an exception escaped ``main`` (or "Traceback" on stderr);
- ``out-of-memory``: MemoryError, or killed by a signal other than ours;
- ``hang``: still running at the time limit (killed).

Flags counted on top: NaN/inf printed on stdout, a file created or changed other than the
requested output or cache directory (or a special file replaced), a temporary file left
behind, an "internal error" line (the CLI's last resort for an exception it did not expect).
The default caches (``XDG_CACHE_HOME``) are a directory of the campaign's own.

Run against any source tree (the same seed gives the same cases, in the same order)::

    python tools/fuzz_cli.py --cases 3300 --seed 10 --jobs 2 --json after.json
    PYTHONPATH=/path/to/other/checkout python tools/fuzz_cli.py ... --json before.json
    python tools/fuzz_cli.py --summarize before.json after.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fuzz_cases as fc  # noqa: E402

OUTCOMES = ("success", "clean error", "unclean error", "traceback", "out-of-memory", "hang")
NONFINITE = re.compile(r"(?<![\w.])(nan|inf|infinity)(?![\w])", re.IGNORECASE)
EXIT_MEMORY, EXIT_TRACEBACK = 70, 71


def child(argv: list[str], workdir: Path, memory: int) -> None:
    """In the forked process: run main(argv) and exit with its code (never returns)."""
    try:
        os.setpgid(0, 0)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        os.chdir(workdir)
        for fd, name, mode in ((0, "/dev/null", os.O_RDONLY),
                               (1, "stdout", os.O_WRONLY | os.O_CREAT),
                               (2, "stderr", os.O_WRONLY | os.O_CREAT)):
            target = os.open(name if fd == 0 else workdir.parent / f"{workdir.name}.{name}",
                             mode, 0o644)
            os.dup2(target, fd)
            os.close(target)
        from oodcalc.cli import main
        code = main(argv)
    except MemoryError:
        traceback.print_exc()
        code = EXIT_MEMORY
    except BaseException:   # noqa: BLE001 - everything that escapes is the finding
        traceback.print_exc()
        code = EXIT_TRACEBACK
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if isinstance(code, int) else 3)


def start_case(argv, workdir: Path, memory: int) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(argv, workdir, memory)
    return pid


def poll_case(pid: int, started: float, timeout: float):
    """``None`` while running; else ``(kind, code, seconds)``."""
    done, status = os.waitpid(pid, os.WNOHANG)
    elapsed = time.monotonic() - started
    if not done:
        if elapsed <= timeout:
            return None
        for target in (-pid, pid):   # the case's process group: workers it forked too
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
        return "hang", None, elapsed
    if os.WIFSIGNALED(status):
        return "out-of-memory", -os.WTERMSIG(status), elapsed
    return "exited", os.WEXITSTATUS(status), elapsed


def classify(kind: str, code: int | None, err: str) -> str:
    if kind != "exited":
        return kind
    if code == EXIT_MEMORY or "MemoryError" in err:
        return "out-of-memory"
    if code == EXIT_TRACEBACK or "Traceback (most recent call last)" in err:
        return "traceback"
    if code == 0:
        return "success"
    from oodcalc.cli.progress import PROGRESS_LINE   # a piped run's progress is no error
    lines = [line for line in err.strip().splitlines() if not PROGRESS_LINE.match(line)]
    if code in (1, 2) and len(lines) == 1 and lines[0].startswith("oodcalc: error: "):
        return "clean error"
    return "unclean error"


def last_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def recount(record: dict) -> set[str]:
    """A case's flags, from its recorded changes, without two artifacts of the checker: a
    directory that holds the requested output changes its time when the output is written
    (adir, rodir), and ``-o=NAME`` asks for a file named ``=NAME`` (the parser's reading
    of a short option)."""
    flags = set(record["flags"]) - {"wrote outside the requested path", "temporary file left"}
    real = [c for c in record["changes"] if c not in ("adir", "rodir") and not c.startswith("=")]
    if real:
        flags.add("wrote outside the requested path")
    if any("became" in c or "removed" in c for c in real):
        flags.add("special file replaced")
    if any(Path(c.split(" ")[0]).name.startswith(".") for c in real):
        flags.add("temporary file left")
    if "internal error" in record["stderr"]:   # one clean-looking line, but a bug behind it
        flags.add("internal error")
    return flags


def summarize(paths: list[Path], first: int | None) -> None:
    """Counts by outcome and flag of finished campaigns (--json or --log files), side by
    side, over the cases numbered below ``first`` (the same cases for every file)."""
    columns = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        records = (json.loads(text)["records"] if text.lstrip().startswith("{\n")
                   else [json.loads(line) for line in text.splitlines() if line.strip()])
        records = [r for r in records if first is None or r["i"] < first]
        counts = collections.Counter(r["outcome"] for r in records)
        counts.update(f for r in records for f in recount(r))
        counts["cases"] = len(records)
        columns[path.name] = counts
    rows = ["cases", *OUTCOMES, "internal error", "nan/inf printed",
            "wrote outside the requested path", "special file replaced", "temporary file left",
            "input files changed"]
    print("| outcome | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for row in rows:
        print(f"| {row} | " + " | ".join(f"{c[row]:,}" for c in columns.values()) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=3300)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--memory", type=float, default=6.0, help="address-space cap, GB")
    parser.add_argument("--json", type=Path, help="write every case and the counts here")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at the same time")
    parser.add_argument("--log", type=Path, help="append one JSON line per finished case here")
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="FILE",
                        help="print counts of finished campaigns instead of running one")
    parser.add_argument("--first", type=int, help="with --summarize: cases 0 .. FIRST-1 only")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize, args.first)
        return 0

    # Imports shared by every case happen once, before forking (each case then starts fast).
    import numpy  # noqa: F401
    import oodcalc
    import oodcalc.cli
    oodcalc.cli.root_command()                 # every command loaded, its tree built
    for heavy in ("matplotlib", "matplotlib.pyplot", "sympy"):
        try:
            __import__(heavy)
        except ImportError:
            pass
    try:
        import matplotlib
        matplotlib.use("Agg")
    except ImportError:
        pass
    print(f"oodcalc from {Path(oodcalc.__file__).parent}", file=sys.stderr)

    rng = random.Random(args.seed)
    cases = [fc.random_case(rng, slow=True) for _ in range(args.cases)]
    root = Path(tempfile.mkdtemp(prefix="oodcalc-fuzz-"))
    # The default caches (depth results, hidden states) go into the campaign's own
    # directory, shared by its cases, never into the user's.
    os.environ["XDG_CACHE_HOME"] = str(root / "xdg-cache")
    inputs = fc.make_inputs(root / "inputs")
    inputs_before = fc.snapshot(inputs)
    counts: collections.Counter = collections.Counter()
    flags: collections.Counter = collections.Counter()
    records = []
    memory = int(args.memory * 1e9)
    started = time.monotonic()
    try:
        def finish(i, output, workdir, before, result):
            nonlocal inputs_before
            kind, code, elapsed = result
            out = (root / f"case{i}.stdout").read_text(errors="replace")
            err = (root / f"case{i}.stderr").read_text(errors="replace")
            outcome = classify(kind, code, err)
            counts[outcome] += 1
            case_flags = []
            if NONFINITE.search(out):
                case_flags.append("nan/inf printed")
            changes = fc.unexpected_changes(before, fc.snapshot(workdir), output, workdir)
            if any(Path(c.split(" ")[0]).name.startswith(".") for c in changes):
                case_flags.append("temporary file left")
            if changes:
                case_flags.append("wrote outside the requested path")
            if fc.snapshot(inputs) != inputs_before:
                case_flags.append("input files changed")
                inputs_before = fc.snapshot(inputs)
            flags.update(case_flags)
            records.append({"i": i, "argv": argv_of[i], "outcome": outcome, "exit": code,
                            "seconds": round(elapsed, 3), "flags": case_flags,
                            "changes": changes, "stderr": last_error_line(err)})
            if args.log:
                with open(args.log, "a", encoding="utf-8") as log:
                    log.write(json.dumps(records[-1]) + "\n")
            if outcome not in ("success", "clean error") or case_flags:
                print(f"[{i}] {outcome} {case_flags} {' '.join(map(repr, argv_of[i]))[:200]}"
                      f"\n      {last_error_line(err)}", file=sys.stderr)
            for sub in workdir.rglob("*"):
                if sub.is_dir() and not sub.is_symlink():
                    sub.chmod(0o755)
            shutil.rmtree(workdir, ignore_errors=True)
            for name in ("stdout", "stderr"):
                (root / f"case{i}.{name}").unlink()

        argv_of = {}
        running: dict[int, tuple] = {}
        pending = list(enumerate(cases))[::-1]
        while pending or running:
            while pending and len(running) < args.jobs:
                i, (argv, output) = pending.pop()
                workdir = root / f"case{i}"
                workdir.mkdir()
                fc.make_outputs(workdir)
                before = fc.snapshot(workdir)
                argv_of[i] = fc.resolve(argv, inputs)
                pid = start_case(argv_of[i], workdir, memory)
                running[pid] = (i, output, workdir, before, time.monotonic())
            for pid in list(running):
                i, output, workdir, before, t0 = running[pid]
                result = poll_case(pid, t0, args.timeout)
                if result is not None:
                    del running[pid]
                    finish(i, output, workdir, before, result)
            time.sleep(0.005)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = time.monotonic() - started
    records.sort(key=lambda r: r["i"])
    summary = {"cases": args.cases, "seed": args.seed, "timeout": args.timeout,
               "jobs": args.jobs,
               "memory_gb": args.memory, "seconds": round(seconds, 1),
               "outcomes": {o: counts[o] for o in OUTCOMES}, "flags": dict(flags),
               "oodcalc": str(Path(oodcalc.__file__).parent)}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**summary, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
