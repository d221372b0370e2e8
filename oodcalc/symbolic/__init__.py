"""The symbolic engine: what the claims of arXiv 2609.36448 are derived with.

:mod:`.model` holds the model's definitions in sympy (column softmax over feature groups,
the conditional error ``e_k``, the loss ``L = Σ e_k / K``; a symbolic-K column encoding),
:mod:`.core` the result types (steps, checks, derivations), the proof levels and the exact
zero tests, :mod:`.render` prints a derivation as text, Markdown or LaTeX,
:mod:`.documents` writes and checks ``derivations/``, and :mod:`.highprec` evaluates the
closed forms with mpmath. The derivations themselves live with their claims
(:mod:`oodcalc.claims`).

Importing this package imports nothing heavy; sympy loads with the submodules.
"""

__all__ = []
