"""How time grows with K (exact dynamics) and with d (full-Q population simulator).

    python benchmarks/bench_scaling.py [--full-K 32] [--max-d 512]

K table: the exact K×K dynamics. Pretraining to the stopping rule takes T1 steps that grow
fast with K at the default η = 0.1 (the gradient carries 1/K), so runs to the stopping
rule are timed up to ``--full-K``; beyond, the cost of one step is timed (100 steps from
the T1 state of the rotation θ = π/6, per step), up to K = 1024. Each K is checked against
plain GD on the full Q = V Z Vᵀ (random orthonormal V, d = K) over 10 steps
(3 beyond K = 256).

d table: the full-Q simulator (``oodcalc.simulate.simulate_population``, K = 4, rotation
θ = π/6, padded to d) to the stopping rule in both phases, against the exact dynamics on the
same setting (``oodcalc.predict``), whose cost does not depend on d; T1, T2 and every F_k
must agree.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from _common import machine, table, timed

import oodcalc as oc
from oodcalc.finetune.dynamics import descend
from oodcalc.prediction import pretrain_logits
from oodcalc.simulate import simulate_population
from oodcalc.simulate.population import errors_and_gradient
from oodcalc.sweep import sweep, theta_grid

AGREE = 1e-10


def check_against_full_q(K: int, z0: np.ndarray, steps: int = 10) -> float:
    """Max |z − VᵀQV| after ``steps`` GD steps: exact dynamics vs plain GD on the full
    ``Q = V z0 Vᵀ`` with random orthonormal features V (d = K)."""
    exact = descend(z0[None], 0.1, 1e-300, steps).z[0]   # ε tiny: exactly `steps` steps
    V, _ = np.linalg.qr(np.random.default_rng(K).standard_normal((K, K)))
    Q = V @ z0 @ V.T
    for _ in range(steps):
        Q -= 0.1 * errors_and_gradient(Q, V)[2]
    return float(np.abs(exact - V.T @ Q @ V).max())


def k_table(full_K: int) -> list[list[str]]:
    rows = []
    for K in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        theta = math.pi / 6
        z1 = pretrain_logits(K, 0.01, 0.1, 10**7).z[0] if K <= full_K else oc.theory.symmetric_logits(K, oc.theory.alpha_star(K, 0.01))
        gap = check_against_full_q(K, z1, 10 if K <= 256 else 3)
        assert gap <= AGREE, (K, gap)
        per_step, _ = timed(lambda: descend(z1[None], 0.1, 1e-300, 100), repeat=2)
        per_step /= 100
        if K <= full_K:
            t_full, r = timed(sweep, theta_grid([theta], K), repeat=1)
            full = [f"{int(r['T1'][0]):,}", f"{int(r['T2'][0]):,}", f"{t_full:.3f} s"]
        else:
            full = ["—", "—", "not run"]
        rows.append([K, f"{per_step * 1e3:.3f} ms", *full, f"{gap:.0e}"])
        print(f"  K = {K} done", file=sys.stderr, flush=True)   # progress, not the record
    return rows


def d_table(max_d: int) -> list[list[str]]:
    rows = []
    K = 4
    for d in (8, 16, 32, 64, 128, 256, 512):
        if d > max_d:
            break
        setting = oc.Setting(oc.rotation(math.pi / 6, K, d=d))
        t_sim, sim = timed(simulate_population, setting, repeat=1)
        t_exact, exact = timed(oc.predict, setting, repeat=3)
        assert (sim.pretrain.T1, sim.finetune.T2) == (exact.pretrain.T1, exact.finetune.T2)
        worst = max(abs(a.F_k - b.F_k) for a, b in zip(sim.forgetting, exact.forgetting))
        assert worst <= AGREE, (d, worst)
        steps = sim.pretrain.T1 + sim.finetune.T2
        rows.append([d, f"{steps:,}", f"{t_sim:.2f} s", f"{t_sim / steps * 1e3:.3f} ms",
                     f"{t_exact * 1e3:.1f} ms", f"{t_sim / t_exact:,.0f}×", f"{worst:.0e}"])
        print(f"  d = {d} done", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full-K", type=int, default=32,
                        help="largest K run to the stopping rule [32]")
    parser.add_argument("--max-d", type=int, default=512)
    args = parser.parse_args()
    print(machine())
    started = time.perf_counter()
    k_rows = k_table(args.full_K)
    d_rows = d_table(args.max_d)
    print("\nExact dynamics vs K (one configuration; η = 0.1, ε = 0.01, rotation θ = π/6)\n")
    print(table(["K", "time per step", "T1", "T2", "T1 + T2 run", "|Δz| vs full Q"], k_rows))
    print("\nFull-Q population simulator vs d (K = 4, rotation θ = π/6, both phases)\n")
    print(table(["d", "T1 + T2", "full-Q simulator", "per step", "exact dynamics (predict)",
                 "ratio", "max |ΔF_k|"], d_rows))
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
