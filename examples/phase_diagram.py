"""Draw the K = 2 forgetting phase diagram over (γ1, γ2) ∈ [−1, 1]².

    python examples/phase_diagram.py [FILE.png] [N]

Every point runs pretraining and fine-tuning to the stopping rule with the exact batched
dynamics (one vectorised sweep); the theorem's threshold lines γ_k = 0 and γ1 + γ2 = 0
are drawn over the exact signs of F_1 and F_2.
"""

import sys

import numpy as np

from oodcalc import plots
from oodcalc.setting import Protocol
from oodcalc.sweep import gamma_grid, sweep

target = sys.argv[1] if len(sys.argv) > 1 else "phase_diagram.png"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 201

axis = np.linspace(-1, 1, n)
result = sweep(gamma_grid([axis, axis]), seed=0)
F = result.grid("F").reshape(n, n)
F_k = np.stack([result.grid(f"F_{k}").reshape(n, n) for k in (1, 2)], axis=-1)

# How often does the theorem's K = 2 condition name the exact sign of F_k? Points on the
# threshold lines (up to rounding of the grid) are "unaffected"; where U = ±V fine-tuning
# has nothing to do (T2 = 0) and nothing moves.
g1, g2 = np.meshgrid(axis, axis, indexing="ij")
moved = result.grid("T2").reshape(n, n) > 0
for k, gk in ((1, g1), (2, g2)):
    product = -gk * (g1 + g2)                      # forgetting iff γ_k(γ1 + γ2) < 0
    predicted = np.sign(np.where(np.abs(product) < 1e-12, 0, product))
    exact = np.sign(np.where(np.abs(F_k[..., k - 1]) < 1e-15, 0, F_k[..., k - 1]))
    agree = predicted[moved] == exact[moved]
    print(f"feature {k}: theorem and exact dynamics agree on the sign of F_{k} at "
          f"{agree.sum()} of {moved.sum()} points that fine-tune ({agree.mean():.2%}); "
          f"{(~moved).sum()} points need no fine-tuning (T2 = 0)")
print(f"F ranges over [{F.min():+.4f}, {F.max():+.4f}]")
print("wrote", plots.save(plots.phase_diagram(F, F_k, axis, axis, Protocol()), target))
