# %% [markdown]
# # A tour of oodcalc
#
# oodcalc computes the theory of *Theory on Attention Dynamics for Out-of-Distribution
# In-Context Learning* (NeurIPS 2026, arXiv 2609.36448): a one-layer softmax attention
# model pretrained on features `V`, evaluated and fine-tuned on shifted features `U`.
# The model, the conventions and the claims are in `docs/theory.md`.
#
# This notebook is generated from `examples/tour.py` and executed, outputs included, by
# `python tools/generate_docs.py` (with the `notebook` extra: nbclient and ipykernel); the
# tests run the script and check the outputs. In Jupyter, a `Report` and a derivation
# display as tables and formulas; as a script, it prints.

# %%
import math

import numpy as np

import oodcalc as oc

# %% [markdown]
# ## One prediction
#
# A `Setting` is a geometry (here a parallel shift: `⟨v_k, u_k⟩ = γ_k`) and a `Protocol`
# (stopping rule `ε`, step sizes `η`, `η_ft`). `predict` pretrains from `Q = 0` until every
# `e_k <= ε` (step `T1`), evaluates on `U`, fine-tunes on `U` (`T2` more steps) and measures
# how the loss on every source feature moved.

# %%
setting = oc.Setting(oc.parallel_shift([1, -0.9]), oc.Protocol(eps=0.01, eta=0.1))
report = oc.predict(setting)
print(f"T1 = {report.pretrain.T1}, T2 = {report.finetune.T2}, F = {report.F:+.3g}")
report

# %% [markdown]
# Every feature's verdict from the paper's theorem (claim 8) sits beside what the exact
# dynamics did. `help(oc.predict)`, `help(oc.Report)` describe every field.

# %%
for f in report.forgetting:
    print(f"v{f.k}: theorem says {f.regime} ({f.condition}); exact F_{f.k} = {f.F_k:+.2e}, "
          f"loss {f.trend}")

# %% [markdown]
# ## Theory against a simulation
#
# `simulate_population` runs plain gradient descent on the full `Q ∈ R^{d×d}` with the
# explicit feature vectors; it returns the same `Report` schema, so comparing is a
# field-by-field diff.

# %%
from oodcalc.compare import compare
from oodcalc.simulate import simulate_population

rotated = oc.Setting(oc.rotation(math.pi / 6, K=4, d=8))
diffs = compare(oc.predict(rotated), simulate_population(rotated))
worst = max(d.max_abs for d in diffs if d.max_abs is not None)
# a bound, not the difference itself: its last digits are round-off, machine to machine
print(f"{len(diffs)} fields compared; every one agrees within 1e-12: {worst < 1e-12}")

# %% [markdown]
# ## Where the paper's forgetting condition fails
#
# For more than two features, the paper's condition `−γ_kγ_m0 > γ_k²` does not make the
# source loss rise: with `γ = (−0.7, 0.9, 0.95)` feature 1 meets it, yet its loss falls
# at every step. `theorem_holds` is `False` there (`docs/theory.md`, "Claim 8 restated").

# %%
counterexample = oc.predict(oc.Setting(oc.parallel_shift([-0.7, 0.9, 0.95])))
first = counterexample.forgetting[0]
print(f"v1: theorem says {first.regime}, loss {first.trend}, theorem holds: {first.theorem_holds}")

# %% [markdown]
# ## Many configurations at once
#
# `sweep` runs a whole grid through the same exact dynamics in one batched pass. Here:
# the sign of `F_1` over a coarse `(γ1, γ2)` grid, against the two-feature theorem's
# condition (feature 1 forgets iff `γ1(γ1 + γ2) < 0`).

# %%
from oodcalc.sweep import gamma_grid, sweep

g = np.linspace(-1, 1, 21)
result = sweep(gamma_grid([g, g]))
F1 = result.grid("F_1")[0, 0]
g1, g2 = np.meshgrid(g, g, indexing="ij")
forgets = g1 * (g1 + g2) < 0
moved = np.abs(F1) > 1e-12
agree = np.all((F1[moved] > 0) == forgets[moved])
print(f"{moved.sum()} of {F1.size} grid points move F_1; the theorem gives its sign at all of "
      f"them: {agree}")

# %% [markdown]
# ## The paper's figures, and a derivation
#
# The numbers the paper reports are data (`oodcalc.paper`); `reproduce` runs its
# synthetic experiments and sets each figure beside oodcalc's.

# %%
from oodcalc import paper
from oodcalc.experiments import reproduce

figure = paper.figure("synthetic-k4-rotation-pi6")
print(f"{figure.quantity}: the paper reports {figure.printed} ({figure.source})")
for title, rows in reproduce(simulators={}).items():
    print(title)
    for row in rows:
        print(f"  {row.quantity.experiment:<11} {row.quantity.name:<17} ours {row.theory:<10.4g}"
              f" paper {row.quantity.figure.printed:<16} {row.magnitude}")

# %% [markdown]
# Every claim is derived with sympy from the model's definitions; in Jupyter the
# derivation displays as a document with its formulas (`oodcalc derive 1` in a terminal).

# %%
from oodcalc.symbolic.documents import derivation_of

derivation = derivation_of("1")
print(f"claim {derivation.id}: {derivation.title}: {derivation.level}, "
      f"{sum(c.passed for c in derivation.checks)}/{len(derivation.checks)} checks passed")
derivation
