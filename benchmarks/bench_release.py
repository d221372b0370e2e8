"""This checkout against a previous release, workload by workload, in the same run.

    python benchmarks/bench_release.py [--release 85f2993] [--repeat 3]

The release's ``oodcalc`` package is taken from git (``git archive``, into a temporary
directory; nothing in the repository changes) and imported in fresh processes through
``PYTHONPATH``; this checkout's runs in the same way, alternately, ``--repeat`` times each.
Every workload times only its computation (imports and set-up excluded, except for the
command-line one, which is timed as a user sees it) and prints a checksum of its result
(T1, T2 and F over every configuration), which must be the same for both. A workload the
release cannot run is reported, not timed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import load, machine, table, user_env, verdict

ROOT = Path(__file__).resolve().parents[1]
#: 85f2993: the last commit before the structural fast paths (issue 12's first pass).
RELEASE = "85f2993"

WORKLOAD = r'''
import sys, time, math
import numpy as np
import oodcalc as oc
from oodcalc.sweep import gamma_grid, geometry_grid, sweep, theta_grid

name = sys.argv[1]
if name == "phase 201x201":
    g = np.linspace(-1, 1, 201)
    make = lambda: gamma_grid([g, g])
    run = lambda grid: sweep(grid)
elif name == "phase 201x201 + CSV":
    import io
    g = np.linspace(-1, 1, 201)
    make = lambda: gamma_grid([g, g])
    run = lambda grid: (sweep(grid).to_csv(), sweep(grid))[1]
elif name == "theta x K":
    thetas = np.linspace(0, math.pi / 2, 46)
    make = lambda: [theta_grid(thetas, K) for K in (2, 4, 8, 16, 32)]
    run = lambda grids: sweep(grids)
elif name == "K=8, 300 random":
    rows = np.random.default_rng(0).uniform(-1, 1, (300, 8))
    make = lambda: geometry_grid([oc.parallel_shift(r) for r in rows])
    run = lambda grid: sweep(grid)
elif name.startswith("predict"):
    kind, K = name.split()[1], int(name.split()[2])
    geo = (oc.rotation(0.5, K) if kind == "rotation" else
           oc.parallel_shift(np.random.default_rng(0).uniform(-1, 1, K).round(3)))
    make = lambda: oc.Setting(geo)
    run = lambda setting: oc.predict(setting)
else:
    raise SystemExit(f"unknown workload {name}")
data = make()
start = time.perf_counter()
out = run(data)
seconds = time.perf_counter() - start
if hasattr(out, "columns"):
    check = (int(out["T1"].sum()), int(out["T2"].sum()), round(float(np.sum(out["F"])), 9))
else:
    check = (out.pretrain.T1, out.finetune.T2, round(out.F, 12))
print(seconds, check)
'''

WORKLOADS = ["phase 201x201", "phase 201x201 + CSV", "theta x K", "K=8, 300 random",
             "predict random 8", "predict random 32", "predict rotation 16"]
CLI = ["oodcalc predict --gamma 1,-0.9"]


def export(release: str) -> Path:
    """The release's package in a temporary directory (cached per commit)."""
    target = Path(tempfile.gettempdir()) / f"oodcalc-release-{release}"
    if not (target / "oodcalc" / "__init__.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", release, "oodcalc"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def once(path: Path, args: list[str]) -> tuple[float, str]:
    env = user_env(PYTHONPATH=str(path))      # bytecode cached, as installed
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["failed"])[-1])
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", default=RELEASE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    old, new = export(args.release), ROOT
    for path, label in ((old, args.release), (new, "this checkout")):
        where = once(path, ["-c", "import oodcalc; print(oodcalc.__file__)"])[1].strip()
        assert where.startswith(str(path)), (label, where)
    rows = []
    for name in WORKLOADS + CLI:
        times = {"old": [], "new": []}
        checks = {}
        try:
            for _ in range(args.repeat):
                for key, path in (("old", old), ("new", new)):
                    if name in CLI:
                        command = ["-c", "from oodcalc.cli import main; main()",
                                   *name.split()[1:]]
                        seconds = once(path, command)[0]
                        checks[key] = "same output"
                    else:
                        out = once(path, ["-c", WORKLOAD, name])[1].split(maxsplit=1)
                        seconds, checks[key] = float(out[0]), out[1].strip()
                    times[key].append(seconds)
        except RuntimeError as why:
            rows.append([name, "—", "—", "—", f"not run: {why}"[:60], load()])
            continue
        assert checks["old"] == checks["new"], (name, checks)
        t_old, t_new = min(times["old"]), min(times["new"])
        rows.append([name, f"{t_old:.3f} s", f"{t_new:.3f} s", f"{t_new / t_old:.2f}",
                     verdict(t_new <= t_old * 1.05), load()])
        print(f"  {name}: {t_old:.2f} s → {t_new:.2f} s", file=sys.stderr, flush=True)
    print(f"\n### This checkout against release {args.release} (best of {args.repeat}, "
          "fresh processes, same results checked)\n")
    print(table(["workload", f"release {args.release}", "now", "now / release",
                 "not slower (5 %)", "load"], rows))


if __name__ == "__main__":
    main()
