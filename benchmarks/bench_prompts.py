"""The finite-prompt simulator against a PyTorch autograd version of it, in steps per second.

    python benchmarks/bench_prompts.py [--N 32] [--batch 1024]   # needs torch==2.13.0

Both train Q ∈ R^{d×d} from zero on the same fixed sample of prompts per phase (the
simulator's own seeding, ``resample=False``), stopping on the population errors
(``stop="population"``), pretraining on V then fine-tuning on U. The autograd version
computes the sampled loss ``½ mean_b (Σ_i softmax_i(x_iᵀ Q x_q) y_i − y_q)²`` and lets
``backward()`` find the gradient. T1, T2 and every F_k must agree. Target: the simulator
at least 2× the autograd steps per second.
"""

from __future__ import annotations

import argparse

import numpy as np

from _common import machine, table, timed, verdict

import oodcalc as oc
from oodcalc.simulate import simulate_prompts
from oodcalc.simulate.prompts import phase_generators, sample_prompts

TARGET = 2.0
AGREE = 1e-9


def torch_prompts(setting, N, batch, seed=0, max_steps=1_000_000):
    import torch

    geo, proto = setting.geometry, setting.protocol
    pre_rng, ft_rng, _ = phase_generators(seed)          # the simulator's own prompts
    # contiguous, as a PyTorch user would hold them (sampled prompts are views of the
    # simulator's own layout; a strided tensor would slow the baseline down)
    t = lambda a: torch.tensor(np.ascontiguousarray(a), dtype=torch.float64)
    V, U, K = t(geo.V), t(geo.U), geo.K
    Q = torch.zeros(geo.d, geo.d, dtype=torch.float64, requires_grad=True)

    def errors(F):
        A = torch.softmax(F.T @ Q @ F, dim=0)
        return 0.5 * ((F @ A - F) ** 2).sum(dim=0)

    def train(F_np, F, eta, rng):
        P = sample_prompts(F_np, N, batch, rng)
        X, xq, y, yq = t(P.X), t(P.xq), t(P.y), t(P.yq)
        for step in range(max_steps + 1):
            with torch.no_grad():
                done = bool((errors(F) <= proto.eps).all())
            if done:
                return step
            logits = torch.einsum("bnd,de,be->bn", X, Q, xq)
            y_hat = (torch.softmax(logits, dim=1) * y).sum(dim=1)
            loss = 0.5 * ((y_hat - yq) ** 2).mean()
            Q.grad = None
            loss.backward()
            with torch.no_grad():
                Q.sub_(eta * Q.grad)
        raise RuntimeError("did not converge")

    T1 = train(geo.V, V, proto.eta, pre_rng)
    with torch.no_grad():
        before = errors(V) / K
    T2 = train(geo.U, U, proto.eta_ft, ft_rng)
    with torch.no_grad():
        after = errors(V) / K
    return T1, T2, (after - before).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--N", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    import torch
    print(machine() + f"; torch {torch.__version__} ({torch.get_num_threads()} threads)")
    rows = []
    for gamma in ([1, -0.9], [0.8, 0.6, -0.5, 0.3]):
        setting = oc.Setting(oc.parallel_shift(gamma))
        t_np, sim = timed(simulate_prompts, setting, args.N, args.batch,
                               resample=False, repeat=2)
        t_torch, (T1, T2, Fk) = timed(torch_prompts, setting, args.N, args.batch, repeat=2)
        assert (T1, T2) == (sim.pretrain.T1, sim.finetune.T2), (T1, T2)
        worst = max(abs(Fk[k] - f.F_k) for k, f in enumerate(sim.forgetting))
        assert worst <= AGREE, worst
        steps = T1 + T2
        ratio = (steps / t_np) / (steps / t_torch)
        rows.append([f"K = {len(gamma)}, γ = {gamma}", f"{steps:,}",
                     f"{steps / t_torch:,.0f}", f"{steps / t_np:,.0f}", f"{ratio:.1f}×",
                     f"{worst:.0e}", f">= {TARGET:g}×: {verdict(ratio >= TARGET)}"])
    print(f"\nN = {args.N} tokens, {args.batch} prompts per phase (fixed sample), "
          "stopping rule on population errors; T1, T2 identical in both\n")
    print(table(["setting", "T1 + T2", "autograd steps/s", "simulator steps/s",
                 "speed-up", "max |ΔF_k|", "target"], rows))
    path_projection()


def path_projection(d: int = 128, K: int = 64, steps: int = 64) -> None:
    """The simulators read z[t] = Fᵀ Q^(t) F off every stored Q: ``logit_path`` (BLAS
    products) against the einsum it replaced (no ``optimize``: one loop over t·d²·K²)."""
    from oodcalc.simulate.population import logit_path
    rng = np.random.default_rng(0)
    F = np.linalg.qr(rng.standard_normal((d, K)))[0]
    path = [rng.standard_normal((d, d)) for _ in range(steps)]
    t_einsum, slow = timed(np.einsum, "dn,tde,ek->tnk", F, np.array(path), F, repeat=1)
    t_blas, fast = timed(logit_path, F, path, repeat=3)
    worst = float(np.abs(fast - slow).max())
    assert worst <= 1e-9, worst
    print(f"\nThe logits of {steps} stored iterates (d = {d}, K = {K})\n")
    print(table(["what", "time", "per iterate", "speed-up", "max |Δz|"],
                [["np.einsum without optimize (before)", f"{t_einsum:.2f} s",
                  f"{t_einsum / steps * 1e3:.1f} ms", "1×", ""],
                 ["simulate.population.logit_path", f"{t_blas * 1e3:.1f} ms",
                  f"{t_blas / steps * 1e3:.2f} ms", f"{t_einsum / t_blas:,.0f}×",
                  f"{worst:.0e}"]]))


if __name__ == "__main__":
    main()
