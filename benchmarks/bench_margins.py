"""The K = 2 margin engine against the NumPy peers of bench_peers.py, in one process.

    python benchmarks/bench_margins.py [--n 201] [--repeat 7]

The 201×201 K = 2 phase diagram: every column is a margin, so ``descend_columns`` is the
margin engine plus its bookkeeping. Rows: oodcalc's sweep (every column of the table), the
peers' outputs only (T1, T2, F_k, as bench_peers.py's row), ``descend_columns`` alone on
the OOD logits at T1, and the peers: batched NumPy with the (K, K, B) layout, written
plainly (the issue's reference) and with every buffer reused (about twice as fast here:
no fresh pages per step), and NumPy on K = 2 scalar margins (every distinct start once,
trajectories kept). Before any time is printed, every peer's T1 and T2 must be identical
to the sweep's and F_k agree to 1e-12. The rows run interleaved, each the best of
``--repeat``; each time is given as wall time and as CPU time of this process (on a
shared machine a preempted process loses wall time, not CPU time), each as a ratio to the
plain batched peer's; then the fused single-thread Numba peer on the distinct margins
(bench_peers.py) and the limit (distinct margin-steps × one vectorised exp). Target
(issue 34): the sweep within 0.07× the batched NumPy peer and ahead of the fused Numba
peer.

The peers allocate fresh arrays every step, and on a machine where a page fault costs
microseconds their times move with the C library's heap behaviour. So the script then
runs itself once more with glibc's heap tuned so that freed memory is kept and reused
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``): the same
table with page faults out of every implementation's way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

from _common import load, machine, table, verdict
from bench_peers import buffered_peer, check, exp_ns, fused_margin_peer, margin_peer, \
    margin_steps, numpy_peer, oodcalc_dynamics

from oodcalc.finetune.dynamics import descend_columns, ood_start
from oodcalc.sweep import _compiled_margins_pay, _pretrain, gamma_grid, sweep

TARGET = 0.07
#: glibc's heap kept and reused: no fresh pages, so no page faults, after the first steps.
TUNED_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**30),
              "MALLOC_TOP_PAD_": str(2**29)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=201)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    tuned = os.environ.get("OODCALC_BENCH_RERUN") == "1"      # the re-run below
    if not tuned and any(k in os.environ for k in TUNED_HEAP):
        raise SystemExit("run bench_margins.py with glibc's default heap: it runs the tuned "
                         "heap itself (unset MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, "
                         "MALLOC_TOP_PAD_)")
    if not tuned:
        print(machine())
    g = np.linspace(-1, 1, args.n)
    grid = gamma_grid([g, g])
    z1, T1, _ = _pretrain(grid, 10**7)
    z0 = ood_start(z1, grid.M)
    ours = sweep(grid)

    def as_the_sweep() -> bool:            # the sweep's choice of margin engine, now
        return _compiled_margins_pay([grid], [(T1, None)])

    rows = {"oodcalc sweep (every column of the table)": lambda: sweep(grid),
            "oodcalc, the peers' outputs only (T1, T2, F_k)": lambda: oodcalc_dynamics(grid),
            "descend_columns alone (the margin engine)":
                lambda: descend_columns(z0, grid.eta_ft, grid.eps, 10**7,
                                        compiled_margins=as_the_sweep()),
            "batched NumPy, (K, K, B) layout": lambda: numpy_peer(grid.M),
            "batched NumPy, buffers reused": lambda: buffered_peer(grid.M),
            "NumPy on K = 2 scalar margins, distinct starts": lambda: margin_peer(grid.M)}
    fused = "Numba, K = 2 margins, one fused lockstep pass, 1 thread"
    try:
        import numba  # noqa: F401
        fused_margin_peer(grid.M)                              # compile / warm up
        rows[fused] = lambda: fused_margin_peer(grid.M)
    except ImportError:
        print("skipped: the fused Numba peer (pip install numba)")
    checked = [n for i, n in enumerate(rows) if i not in (0, 2)]
    wall, cpu, loads = {n: np.inf for n in rows}, {n: np.inf for n in rows}, {}
    for rep in range(args.repeat):
        for name, run in rows.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            result = run()
            wall[name] = min(wall[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - start_cpu)
            loads[name] = load()
            if rep == 0 and name in checked:
                check(ours, [grid], [result], name)
    peer = "batched NumPy, (K, K, B) layout"
    out = [[name, f"{wall[name]:.3f} s", f"{wall[name] / wall[peer]:.3f}",
            f"{cpu[name]:.3f} s", f"{cpu[name] / cpu[peer]:.3f}", loads[name]]
           for name in rows]
    heap = " (glibc's heap tuned: no page faults per step)" if tuned else ""
    print(f"\n### {args.n}×{args.n} K = 2 phase diagram, the margin engine{heap}\n\n"
          f"{len(grid):,} configurations; every peer agrees (T1, T2 identical, |ΔF_k| <= "
          f"1e-12); best of {args.repeat}, rows interleaved\n")
    work = margin_steps([grid], ours["T2"])
    ns, how = exp_ns()
    limit = work * ns * 1e-9
    out.append([f"limit: {work:,} distinct margin-steps × {ns:.2f} ns (one vectorised exp "
                f"each, {how})", f"{limit:.3f} s", f"{limit / wall[peer]:.3f}", "", "", ""])
    print(table(["implementation", "wall", "wall / batched", "CPU", "CPU / batched",
                 "load"], out))
    sweep_name, outputs = list(rows)[0], list(rows)[1]
    scalar = "NumPy on K = 2 scalar margins, distinct starts"
    buffered = "batched NumPy, buffers reused"
    for clock, times in (("wall", wall), ("CPU", cpu)):
        ahead = f"{verdict(times[sweep_name] < times[fused])} " \
            f"({times[sweep_name] / times[fused]:.2f}×; the peers' outputs alone " \
            f"{times[outputs] / times[fused]:.2f}×)" if fused in times else "n/a (no Numba)"
        print(f"\n{clock}: sweep <= {TARGET}× batched NumPy: "
              f"{verdict(times[sweep_name] <= TARGET * times[peer])} "
              f"({times[sweep_name] / times[peer]:.3f}; {times[sweep_name] / times[buffered]:.3f}× "
              f"the buffered peer); sweep ahead of the fused Numba peer: {ahead}; "
              f"sweep against the scalar margins {times[sweep_name] / times[scalar]:.2f}×, "
              f"against the limit {times[sweep_name] / limit:.1f}×")
    if not tuned:
        sys.stdout.flush()
        env = os.environ | TUNED_HEAP | {"OODCALC_BENCH_RERUN": "1"}
        subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, check=True)


if __name__ == "__main__":
    main()
