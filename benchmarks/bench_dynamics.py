"""The batched exact dynamics against a per-configuration PyTorch autograd script.

    python benchmarks/bench_dynamics.py            # needs: pip install torch==2.13.0

1. The 201×201 K = 2 phase diagram (γ1, γ2 ∈ [-1, 1]; pretraining and fine-tuning to
   the stopping rule at every point), through ``oodcalc.sweep``. Target: <= 2 s.
2. The same population GD written the way a user would script it in PyTorch: explicit
   features V, U in R^d, Q ∈ R^{d×d} from zero, ``loss.backward()`` and ``Q -= η Q.grad``
   until every e_k <= ε, one configuration at a time. Run on configurations taken from
   the grid; T1, T2, the OOD loss and every F_k must agree with the sweep's rows.
   Target: >= 1000× the per-trajectory speed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import machine, table, timed, verdict

import oodcalc as oc
from oodcalc.sweep import gamma_grid, sweep

PHASE_TARGET_S = 2.0
SPEEDUP_TARGET = 1000.0
AGREE = 1e-10   # float64 both sides; only the order of the arithmetic differs


def torch_trajectory(V, U, eps, eta, eta_ft, max_steps=1_000_000):
    """Population GD on the full Q with autograd, one configuration, as a user writes it."""
    import torch

    V = torch.tensor(V, dtype=torch.float64)
    U = torch.tensor(U, dtype=torch.float64)
    K, d = V.shape[1], V.shape[0]
    Q = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)

    def errors(F):                      # e_k = ½‖F softmax(Fᵀ Q f_k) − f_k‖²
        A = torch.softmax(F.T @ Q @ F, dim=0)
        return 0.5 * ((F @ A - F) ** 2).sum(dim=0)

    def train(F, step):
        for t in range(max_steps + 1):
            e = errors(F)
            if bool((e <= eps).all()):
                return t
            Q.grad = None
            (e.sum() / K).backward()
            with torch.no_grad():
                Q.sub_(step * Q.grad)
        raise RuntimeError("did not converge")

    T1 = train(V, eta)
    with torch.no_grad():
        before, ood_loss = errors(V) / K, float(errors(U).sum() / K)
    T2 = train(U, eta_ft)
    with torch.no_grad():
        after = errors(V) / K
    return T1, T2, ood_loss, (after - before).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=201, help="points per γ axis [201]")
    parser.add_argument("--torch-configs", type=int, default=24,
                        help="configurations run through the autograd script [24]")
    args = parser.parse_args()
    import torch

    print(machine() + f"; torch {torch.__version__} ({torch.get_num_threads()} threads)")
    g = np.linspace(-1, 1, args.n)
    grid = gamma_grid([g, g])
    B = len(grid)

    t_phase, result = timed(sweep, grid, repeat=3)
    assert result["converged"].all()

    # The autograd script on configurations spread over the grid.
    rows = np.linspace(0, B - 1, args.torch_configs).round().astype(int)
    t0 = time.perf_counter()
    torch_out = []
    for i in rows:
        geo = oc.parallel_shift([result["gamma_1"][i], result["gamma_2"][i]])
        torch_out.append(torch_trajectory(geo.V, geo.U, 0.01, 0.1, 0.1))
    t_torch = time.perf_counter() - t0

    # The batched dynamics on exactly those configurations, in one call.
    picked = grid.take(rows)
    t_same, same = timed(sweep, picked, repeat=5)

    worst = 0.0
    for j, (i, (T1, T2, ood, Fk)) in enumerate(zip(rows, torch_out)):
        assert (T1, T2) == (result["T1"][i], result["T2"][i]), (i, T1, T2)
        assert (same["T1"][j], same["T2"][j]) == (T1, T2)
        diffs = [abs(ood - result["ood_loss"][i])] + \
                [abs(Fk[k] - result[f"F_{k + 1}"][i]) for k in range(2)]
        worst = max(worst, *diffs)
    assert worst <= AGREE, worst

    per_torch = t_torch / len(rows)
    per_grid, per_same = t_phase / B, t_same / len(rows)
    steps = (result["T1"][rows] + result["T2"][rows]).mean()
    print(f"\nAgreement on {len(rows)} configurations: T1 and T2 identical, "
          f"max |ΔF_k|, |Δ OOD loss| = {worst:.1e} (tolerance {AGREE:g}); "
          f"mean T1 + T2 = {steps:.0f} steps.\n")
    print(table(
        ["what", "configurations", "time", "per trajectory", "speed vs autograd", "target"],
        [["PyTorch autograd on Q, one at a time (baseline)", len(rows), f"{t_torch:.2f} s",
          f"{per_torch * 1e3:.1f} ms", "1×", ""],
         ["exact batched dynamics, the same configurations", len(rows), f"{t_same * 1e3:.1f} ms",
          f"{per_same * 1e6:.0f} µs", f"{per_torch / per_same:,.0f}×", ""],
         [f"exact batched dynamics, {args.n}×{args.n} phase diagram", f"{B:,}",
          f"{t_phase:.2f} s", f"{per_grid * 1e6:.1f} µs", f"{per_torch / per_grid:,.0f}×",
          f"<= {PHASE_TARGET_S:g} s: {verdict(t_phase <= PHASE_TARGET_S)}; "
          f">= {SPEEDUP_TARGET:,.0f}×: {verdict(per_torch / per_grid >= SPEEDUP_TARGET)}"]]))


if __name__ == "__main__":
    main()
