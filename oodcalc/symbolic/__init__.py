"""The symbolic engine: every claim of MODEL.md derived with sympy from the model's
definitions (column softmax over feature groups, the conditional error ``e_k``, the loss
``L = Σ e_k / K`` and its gradient through ``z[n, k] = f_nᵀ Q f_k``).

One module per claim, each with ``derive() -> Derivation`` (named by the claim registry,
:mod:`oodcalc.claims`). :mod:`.core` holds the shared definitions and the result types,
:mod:`.render` prints a derivation as text, Markdown or LaTeX, :mod:`.documents` writes
and checks ``derivations/``, and :mod:`.highprec` evaluates the closed forms with mpmath.

Importing this package imports nothing heavy; sympy loads with the claim modules.
"""
