"""How long `oodcalc derive` takes per claim, and where the time goes.

Each claim runs in a fresh process (`oodcalc derive ID --format markdown`), so the times
include Python start-up and the sympy import, as a user sees them; the import alone is
measured the same way and shown for comparison. There is no faster peer to compare with: the
reference is the previous release's `oodcalc derive N` (the issue measured claim 2 at
over 30 s), and the goal is a few seconds per claim.

    python benchmarks/bench_derive.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from _common import machine, table, user_env

from oodcalc.claims import CLAIMS


def run(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=user_env())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    cli = [sys.executable, "-c", "import sys; from oodcalc.cli import main; sys.exit(main())"]
    base = min(run([sys.executable, "-c", "import sympy, oodcalc.claims"])
               for _ in range(repeat))
    rows = []
    for claim in CLAIMS:
        best = min(run(cli + ["derive", claim.id, "--format", "markdown"]) for _ in range(repeat))
        rows.append([claim.id, claim.title, f"{best:.2f}", f"{best - base:.2f}", claim.level])
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}; best of {repeat}")
    print(f"python + import sympy, oodcalc.claims: {base:.2f} s")
    print(table(["claim", "title", "wall s", "derive s", "level"], rows))


if __name__ == "__main__":
    main()
