"""Measure how long the main commands take, and regenerate the guide's times table.

    python tools/measure_readme_times.py       # every command, several minutes

Runs each command as a user would (a fresh process, from a scratch directory; the tests
from the repository root), records the wall time, the exit code and the machine (cores,
platform, load average before the runs) in tools/readme_times.json, then rewrites the
generated "times" block of docs/guide/timing.md from that file (tools/generate_docs.py).
The README and the guide pages state no time that is not in that file. A command that
fails stops the run: its output's end is shown and nothing is written.

Two numbers per command: the CPU time of the command and every process it starts (what
it costs; close to the wall time on an idle machine, except where it runs work in
parallel), and the wall time of this run, which grows with whatever else the machine was
doing (the load average is recorded). Fast commands are run REPEAT times and the median
is kept; the long ones once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import generate_docs  # noqa: E402

REPEAT = 5

#: key → (command, what it does, run from the repository root?, repeat?)
COMMANDS: dict[str, tuple[str, str, bool, bool]] = {
    "predict": ("oodcalc predict --gamma 1,-0.9", "the main job", False, True),
    "derive-list": ("oodcalc derive --list", "the claims and their proof levels", False, True),
    "reproduce": ("oodcalc reproduce", "the paper's synthetic tables, theory and GD on Q",
                  False, False),
    "verify-quick": ("oodcalc verify --quick", "the verification ledger on small grids",
                     False, False),
    "verify": ("oodcalc verify", "the full verification ledger", False, False),
    "pytest": ("python -m pytest -q", "the test suite", True, False),
}


def run(command: str, cwd: Path, log: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the command and its children, exit code); the
    command's output goes to ``log`` (shown if it fails)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("wb") as out:
        done = subprocess.run(command, shell=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def machine() -> dict[str, object]:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {"date": datetime.date.today().isoformat(), "cores": os.cpu_count(),
            "platform": f"{platform.system()} {platform.machine()}",
            "python": platform.python_version(), "load_before": round(load, 2)}


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python tools/measure_readme_times.py",
                            description=__doc__.splitlines()[0]).parse_args(argv)
    measured = {}
    info = machine()     # all rows of one file come from one run on one machine
    with tempfile.TemporaryDirectory() as scratch:
        for key in COMMANDS:
            command, what, at_root, repeat = COMMANDS[key]
            log = Path(scratch) / f"{key}.log"
            runs = [run(command, ROOT if at_root else Path(scratch), log)
                    for _ in range(REPEAT if repeat else 1)]
            wall = statistics.median(w for w, _, _ in runs)
            cpu = statistics.median(c for _, c, _ in runs)
            code = runs[-1][2]
            measured[key] = {"key": key, "command": command, "what": what,
                             "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2),
                             "exit_code": code}
            print(f"cpu {cpu:8.2f} s  wall {wall:8.2f} s  exit {code}  {command}", flush=True)
            if code != 0:     # a failed run's time is not the command's: keep the old table
                tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
                print("\n".join(tail), file=sys.stderr)
                print(f"{command} exited {code}; nothing written", file=sys.stderr)
                return 1
    data = {"machine": info, "commands": list(measured.values())}
    generate_docs.TIMES_FILE.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    for block in generate_docs.BLOCKS:
        if block.name == "times":
            generate_docs.update(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
