"""``oodcalc predict`` as K grows: T1, T2, wall time, CPU time and peak memory, each run
as a user runs it (the command, in a fresh process), with and without ``--json``.

    python benchmarks/bench_predict.py [--rotation-K 2,...,1024] [--random-K 2,...,512]
                                       [--json-K 128,256,1024] [--peer-K 256]

Rotations (``--theta 0.5 --K K``) keep every column on the symmetric ray: both phases are
scalar recurrences (a long one counted by the step counter, oodcalc.finetune.ray_leap). Random γ (uniform in [-1, 1], seed 0, three decimals) fine-tune the
full K×K logits (the compiled per-column kernel with ``oodcalc[fast]``, else NumPy). Each
run is checked: T1 equals the gradient-flow estimate to 1 %, and the engines are read
from the report's last line. For each K of ``--json-K`` the same command runs again with
``--json`` (its output's size beside it; above K = 16 every K×K matrix is summarised).
Beside each wall time, the time predict estimates before it starts (``expected_seconds``;
a run estimated past a minute is announced on stderr): an order of magnitude, kept honest.
CPU time is the child's user + system time (on a shared machine, wall time grows with the
load; CPU time much less). Targets: random γ K = 128 under 30 s and 500 MB (issue 12),
K = 256 under 120 s on 2 threads (issue 22) and 1 GB; rotation K = 1024 under 10 s; its
``--json`` under 1 MB and within 1.5× the plain run's time (issue 22). CPU targets
(issue 34): random γ K = 256 under 25 s, K = 512 under 5 min, rotation K = 1024 under 1 s.

The strongest peer of the random-γ runs is the direct per-column kernel that the node
kernel replaced from K = 48 on (``_kernels.finetune_diagonal_direct``, every logit of
every column): for each K of ``--peer-K`` the same command runs again, in the same run,
with it forced (K = 512 is left out by default: about 25 min), and the two reports are
compared: T2 identical, the largest |ΔF_k| printed (accepted below 1e-12). The peer of
the rotation at K = 1024 is the engine the step counter replaced, the ray's scalar loop
compiled by Numba (:data:`LOOP`): its ``--json`` run repeated with it, T1 and T2
identical and |ΔF_k| below 1e-12 required.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time

import numpy as np

from _common import load, machine, table, user_env, verdict

PROBE = ("import sys, resource; from oodcalc.cli import main; code = main(sys.argv[1:]); "
         "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
         "sys.exit(code)")

TARGETS = {("random γ", 128): (30, 500), ("random γ", 256): (120, 1024),
           ("rotation θ = 0.5", 1024): (10, None)}
#: CPU seconds (issue 34).
CPU_TARGETS = {("random γ", 256): 25, ("random γ", 512): 300, ("rotation θ = 0.5", 1024): 1}
#: The probe with the direct kernel forced at every K (the peer of the node kernel).
DIRECT = "from oodcalc.finetune import _kernels; _kernels.NODES_FROM_K = 10**9; "
#: The probe with the ray's step counter off: the scalar loop, compiled by Numba (the
#: engine before it; the peer of the step counter).
LOOP = "from oodcalc import estimates; estimates.RAY_LEAP_FROM_STEPS = float('inf'); "
#: --json of the rotation at K = 1024: at most this many bytes and this times the plain run.
JSON_BYTES, JSON_SLOWDOWN = 10**6, 1.5


def run(args: list[str], prefix: str = "") -> dict:
    """One fresh process: T1, T2, engines, wall and CPU seconds, its own peak RSS (MiB);
    ``prefix``: code run first (:data:`DIRECT`, :data:`LOOP`: a peer's engine forced)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Wide, so that no line of the text output wraps.
    proc = subprocess.run([sys.executable, "-c", prefix + PROBE,
                           "predict", *args],
                          capture_output=True, text=True, env=user_env(COLUMNS="400"))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[0], "wall": wall, "cpu": cpu}
    rss = int(proc.stderr.rsplit("RSS", 1)[1]) / 1024
    if "--json" in args:
        report = json.loads(proc.stdout)
        return {"T1": report["pretrain"]["T1"], "T2": report["finetune"]["T2"],
                "engines": (report["run"]["engine"]["pretrain"],
                            report["run"]["engine"]["finetune"]),
                "wall": wall, "cpu": cpu, "rss": rss, "bytes": len(proc.stdout.encode()),
                "F_k": [f["F_k"] for f in report["forgetting"]["per_feature"]]}
    text = " ".join(proc.stdout.split())
    engines = re.search(r"Dynamics: pretraining by the (.*?), fine-tuning by the (.*?)\.$",
                        text)
    return {"T1": int(re.search(r"T1 (\d+)", text).group(1)),
            "T2": int(re.search(r"T2 = (\d+) steps", text).group(1)),
            "engines": engines.groups(), "wall": wall, "cpu": cpu, "rss": rss}


def short(engine: str) -> str:
    return (engine.replace("symmetric-ray recurrence", "ray").replace("per-column kernel",
                                                                       "kernel")
            .replace("K×K descent", "K×K"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rotation-K", default="2,4,8,16,32,64,128,256,512,1024")
    parser.add_argument("--random-K", default="2,4,8,16,32,64,128,256,512")
    parser.add_argument("--json-K", default="128,256,1024",
                        help="the K whose runs are repeated with --json")
    parser.add_argument("--peer-K", default="256",
                        help="the random-γ K whose --json run is repeated by the direct kernel")
    args = parser.parse_args()
    print(machine())
    import oodcalc as oc
    from oodcalc.estimates import pretrain_steps
    from oodcalc.prediction import expected_seconds
    rng = np.random.default_rng(0)
    cases = [("rotation θ = 0.5", int(K), ["--theta", "0.5", "--K", K],
              oc.rotation(0.5, int(K))) for K in args.rotation_K.split(",") if K]
    for K in filter(None, args.random_K.split(",")):
        gamma = [f"{g:.3f}" for g in rng.uniform(-1, 1, int(K))]
        cases.append(("random γ", int(K), ["--gamma=" + ",".join(gamma)],
                      oc.parallel_shift([float(g) for g in gamma])))
    json_K = {int(K) for K in args.json_K.split(",") if K}
    peer_K = {int(K) for K in args.peer_K.split(",") if K}
    rows, checks, plain, cpu_rows = [], [], {}, []
    for label, K, cli, geometry in cases:
        # what predict tells the user before the run (announced past a minute)
        estimate = f"{expected_seconds(oc.Setting(geometry))[0]:.2g} s"
        outputs = ["text", "--json"] if K in json_K or (label == "random γ" and K in peer_K) \
            else ["text"]
        for output in outputs:
            out = run(cli + ([output] if output != "text" else []))
            size = f"{out['bytes'] / 1e6:.2f} MB" if "bytes" in out else "—"
            if "error" in out:
                rows.append([label, K, output, "—", "—", f"{out['wall']:.2f} s", "—",
                             f"{out['cpu']:.2f} s", "—", "—", out["error"][:70], load()])
                continue
            assert abs(out["T1"] - pretrain_steps(K, 0.01, 0.1)) <= 0.01 * out["T1"] + 1
            engines = " / ".join(short(e) for e in out["engines"])
            rows.append([label, K, output, f"{out['T1']:,}", f"{out['T2']:,}",
                         f"{out['wall']:.2f} s", estimate, f"{out['cpu']:.2f} s",
                         f"{out['rss']:.0f} MiB", size, engines, load()])
            if output == "text":
                plain[label, K] = out
                checks += _checks(label, K, out)
                if (label, K) in CPU_TARGETS:
                    cpu_rows.append(_cpu_row(label, K, out, CPU_TARGETS[label, K]))
            elif label == "random γ" and K in peer_K:
                cpu_rows.append(_peer_row(f"{label}, K = {K}, --json", "direct kernel",
                                          run(cli + ["--json"], DIRECT), out))
            elif (label, K) == ("rotation θ = 0.5", 1024):
                cpu_rows.append(_peer_row(f"{label}, K = {K}, --json", "compiled ray loop",
                                          run(cli + ["--json"], LOOP), out))
                slower = out["wall"] / plain[label, K]["wall"]
                checks.append([f"{label}, K = {K}, --json",
                               f"< {JSON_BYTES / 1e6:g} MB, <= {JSON_SLOWDOWN}× the text run",
                               f"{out['bytes']:,} bytes, {slower:.2f}× ({out['wall']:.2f} s)",
                               verdict(out["bytes"] < JSON_BYTES and slower <= JSON_SLOWDOWN),
                               load()])
            print(f"  {label} K = {K} {output}: {out['wall']:.1f} s", file=sys.stderr,
                  flush=True)
    print("\n### `oodcalc predict` as K grows (ε = 0.01, η = 0.1; fresh process each)\n")
    print(table(["geometry", "K", "output", "T1", "T2", "wall", "estimate", "CPU",
                 "peak RSS", "JSON",
                 "engines (pretraining / fine-tuning)", "load"], rows))
    if checks:
        print("\n### Targets\n")
        print(table(["run", "target", "measured", "verdict", "load"], checks))
    if cpu_rows:
        print("\n### CPU time against the limit and the strongest peer (issue 34)\n")
        print(table(["run", "limit / peer", "peer CPU", "CPU", "peer / ours", "check",
                     "verdict", "load"], cpu_rows))


def _peer_row(run_name: str, peer_name: str, peer: dict, out: dict) -> list:
    """A peer's --json run beside ours: CPU, the ratio, T1 and T2 identical and F_k within
    1e-12 required."""
    same = (peer.get("T1"), peer.get("T2")) == (out["T1"], out["T2"])
    gap = max(abs(a - b) for a, b in zip(out["F_k"], peer.get("F_k", [])))
    return [run_name, f"{peer_name} (peer)", f"{peer['cpu']:.2f} s", f"{out['cpu']:.2f} s",
            f"{peer['cpu'] / out['cpu']:.1f}×",
            f"T1, T2 {'identical' if same else 'DIFFER'}, max |ΔF_k| "
            f"{'< 1e-12' if gap < 1e-12 else f'{gap:.1e}'}",
            verdict(same and gap < 1e-12), load()]


def _cpu_row(label: str, K: int, out: dict, seconds: float) -> list:
    return [f"{label}, K = {K}", f"< {seconds} s CPU", "—", f"{out['cpu']:.2f} s", "—",
            f"T2 {out['T2']:,}", verdict(out["cpu"] <= seconds), load()]


def _checks(label: str, K: int, out: dict) -> list[list]:
    """The target row of a text run, if it has one."""
    if (label, K) not in TARGETS:
        return []
    seconds, mib = TARGETS[label, K]
    ok_time = out["wall"] <= seconds
    ok_mem = mib is None or out["rss"] <= mib
    return [[f"{label}, K = {K}", f"< {seconds} s" + (f", < {mib} MiB" if mib else ""),
             f"{out['wall']:.1f} s wall ({out['cpu']:.1f} s CPU), {out['rss']:.0f} MiB",
             verdict(ok_time and ok_mem) + ("" if ok_time or out["cpu"] > seconds
                                            else " (CPU time within)"), load()]]


if __name__ == "__main__":
    main()
