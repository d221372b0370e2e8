"""``oodcalc predict`` as K grows: T1, T2, wall time and peak memory, each in a fresh process.

    python benchmarks/bench_predict.py [--rotation-K 2,...,1024] [--random-K 2,...,64]

Rotations (``--theta 0.5 --K K``) keep every column on the symmetric ray: both phases are
scalar recurrences (compiled by Numba when installed). Random γ (uniform in [-1, 1], seed
0) fine-tune the full K×K logits. Each run is checked: T1 equals the ray recurrence's
estimate to 1 %, and T1, T2 are read from the printed report (not --json: see run()).
"""

from __future__ import annotations

import argparse
import re
import os
import subprocess
import sys
import time

import numpy as np

from _common import machine, table


PROBE = ("import sys, resource; from oodcalc.cli import main; code = main(sys.argv[1:]); "
         "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
         "sys.exit(code)")


def run(args: list[str]) -> tuple[dict, float, float]:
    """One fresh process: its JSON, wall time and own peak RSS (MiB)."""
    start = time.perf_counter()
    # Text output, not --json: the JSON of K = 1024 holds millions of numbers, and reading
    # it here would inflate this process, whose size a forked child's ru_maxrss inherits.
    proc = subprocess.run([sys.executable, "-c", PROBE, "predict", *args],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[0]}, wall, 0.0
    rss = int(proc.stderr.rsplit("RSS", 1)[1]) / 1024
    text = " ".join(proc.stdout.split())
    T1 = int(re.search(r"T1 (\d+)", text).group(1))
    T2 = int(re.search(r"T2 = (\d+) steps", text).group(1))
    return {"pretrain": {"T1": T1}, "finetune": {"T2": T2}}, wall, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rotation-K", default="2,4,8,16,32,64,128,256,512,1024")
    parser.add_argument("--random-K", default="2,4,8,16,32,64")
    args = parser.parse_args()
    print(machine())
    print("load average before:", os.getloadavg())
    from oodcalc.estimates import pretrain_steps
    rows = []
    cases = [("rotation θ = 0.5", int(K), ["--theta", "0.5", "--K", K])
             for K in args.rotation_K.split(",") if K]
    rng = np.random.default_rng(0)
    cases += [("random γ", int(K), ["--gamma", ",".join(f"{g:.3f}" for g in
                                                     rng.uniform(-1, 1, int(K)))])
              for K in args.random_K.split(",") if K]
    for label, K, cli in cases:
        out, wall, rss = run(cli)
        if "error" in out:
            rows.append([label, K, "—", "—", f"{wall:.2f} s", "—", out["error"][:60]])
            continue
        T1, T2 = out["pretrain"]["T1"], out["finetune"]["T2"]
        assert abs(T1 - pretrain_steps(K, 0.01, 0.1)) <= 0.01 * T1 + 1
        rows.append([label, K, f"{T1:,}", f"{T2:,}", f"{wall:.2f} s", f"{rss:.0f} MiB", ""])
        print(f"  {label} K = {K}: {wall:.1f} s", flush=True)
    print()
    print(table(["geometry", "K", "T1", "T2", "wall", "peak RSS", "note"], rows))
    print("\nload average after:", os.getloadavg())


if __name__ == "__main__":
    main()
