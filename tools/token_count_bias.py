"""Measure the finite-N bias of i.i.d.-token prompts against its prediction.

For overlapping features (oc.overlap(ρ, γ), K = 2 by default) at the pretrained logits
(population GD from Q = 0 to every e_k <= ε, Gram dynamics), this prints per N:

* the exact bias (every multinomial count vector enumerated) and N × it, which tends to
  c = ½tr(HΣ) (oodcalc.simulate.token_counts);
* the bias measured on sampled prompts (oodcalc.simulate.prompts.sample_prompts, the
  prompt simulator's own sampler, on a Q in R^{d×d} with those logits), both as the
  sampled squared error ½(ŷ − y)² with a fresh task w per prompt and as the error
  averaged over tasks given the tokens, with 95 % intervals (1.96 standard errors).

Usage: python tools/token_count_bias.py [--rho 0.5] [--prompts 2000000] [--seed 0]
       [--N 8,32,256]
Each N uses the stream np.random.SeedSequence(seed).spawn(len(Ns))[i].
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import oodcalc as oc
from oodcalc.finetune import gram
from oodcalc.model import errors_and_gradient
from oodcalc.simulate.prompts import (sample_prompts, sampled_loss_and_gradient,
                                      task_averaged_errors)
from oodcalc.simulate.token_counts import token_count_bias

CHUNK = 20_000


def measure(Q, V, N, total, rng):
    """Mean and standard error of ½r² (fresh w) and of its task average, over ``total``
    prompts with queries balanced over the features."""
    K = V.shape[1]
    sums = np.zeros((2, 2))                 # [sampled, averaged] × [Σx, Σx²]
    done = 0
    while done < total:
        B = min(CHUNK, total - done)
        queries = np.arange(done, done + B) % K
        P = sample_prompts(V, N, B, rng, queries=queries)
        for i, x in enumerate((sampled_loss_and_gradient(Q, P)[2],
                               task_averaged_errors(Q, P))):
            sums[i] += x.sum(), (x**2).sum()
        done += B
    mean = sums[:, 0] / total
    se = np.sqrt((sums[:, 1] / total - mean**2) / (total - 1))
    return mean, se


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--gamma", default="1,0.5")
    parser.add_argument("--eps", type=float, default=0.01)
    parser.add_argument("--eta", type=float, default=0.1)
    parser.add_argument("--prompts", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--N", default="8,32,256")
    args = parser.parse_args()
    geometry = oc.overlap(args.rho, [float(g) for g in args.gamma.split(",")])
    V, G = geometry.V, geometry.G_V
    z = gram.pretrain(G, args.eta, args.eps, 10**7).z[0]
    W = np.linalg.solve(G, np.linalg.solve(G, z).T).T          # z = G W G, Q = V W Vᵀ
    Q = V @ W @ V.T
    population = errors_and_gradient(z, G)[0]
    assert np.abs(V.T @ Q @ V - z).max() < 1e-12
    Ns = [int(n) for n in args.N.split(",")]
    c = token_count_bias(z, G, 1).coefficient.mean()
    print(f"overlap ρ = {args.rho}, γ = ({args.gamma}), K = {geometry.K}, d = {geometry.d}; "
          f"pretrained logits (ε = {args.eps:g}, η = {args.eta:g}); population e_k mean = "
          f"{population.mean():.6g}; c = ½tr(HΣ) = {c:.5f} (without G: "
          f"{token_count_bias(z, None, 1).coefficient.mean():.5f})")
    print(f"{args.prompts:,} prompts per N (queries alternating), seed {args.seed} "
          "(SeedSequence spawned per N); intervals: ± 1.96 standard errors")
    print(f"{'N':>5} {'N·exact':>9} {'N·sampled ½r²':>22} {'N·task-averaged':>22} {'s':>5}")
    streams = np.random.SeedSequence(args.seed).spawn(len(Ns))
    for N, stream in zip(Ns, streams):
        start = time.perf_counter()
        exact = token_count_bias(z, G, N).exact.mean()
        mean, se = measure(Q, V, N, args.prompts, np.random.default_rng(stream))
        cells = [f"{N * (m - population.mean()):.4f} ± {1.96 * N * s:.4f}"
                 for m, s in zip(mean, se)]
        print(f"{N:>5} {N * exact:>9.5f} {cells[0]:>22} {cells[1]:>22} "
              f"{time.perf_counter() - start:>5.0f}")


if __name__ == "__main__":
    main()
