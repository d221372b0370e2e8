"""The model's definitions in sympy, in the logit coordinates ``z[n, k] = f_nᵀ Q f_k``.

Column ``k`` of the logits belongs to the query ``f_k``; the loss is
``L = Σ_k e_k / K`` with ``e_k = ½ Σ_n (a_n − δ_{nk})²`` and ``a`` the softmax of the
column. Two encodings of a column:

* **explicit K**: a list of K symbols (:func:`attention`, :func:`conditional_error`,
  :func:`loss`);
* **symbolic K** (:class:`Column`): a few *named* entries (the query's own logit first, then
  whichever entries a derivation needs) and the rest of the column through two sums,
  ``R = Σ_rest e^{z_m}`` and ``P = Σ_rest e^{2 z_m}``. The definitions touch the rest of the
  column only through R and P, so an identity proved in the named entries, R and P holds
  for every number of features; a derivative with respect to a rest entry is one with
  respect to a named entry (name it). :meth:`Column.on_ray` puts K back as a Symbol by
  giving the rest one common value: ``R = (K − j) e^β``, ``P = (K − j) e^{2β}``.

Nothing here states a claim; the claim modules derive from these definitions.
"""

from __future__ import annotations

from typing import Sequence

import sympy as sp

from .core import sym_K


__all__ = ["Column", "attention", "column_symbols", "conditional_error", "logits", "loss"]


# --- explicit K -----------------------------------------------------------------------

def attention(column: Sequence[sp.Expr]) -> list[sp.Expr]:
    """Softmax down one column of logits: ``a_n = e^{z_n} / Σ_m e^{z_m}``."""
    weights = [sp.exp(x) for x in column]
    total = sp.Add(*weights)
    return [w / total for w in weights]


def conditional_error(column: Sequence[sp.Expr], k: int) -> sp.Expr:
    """``e_k = ½‖Σ_n a_n f_n − f_k‖² = ½ Σ_n (a_n − δ_{nk})²`` (orthonormal features)."""
    a = attention(column)
    return sp.Rational(1, 2) * sp.Add(*[(a[n] - (1 if n == k else 0)) ** 2
                                        for n in range(len(a))])


def loss(Z: sp.Matrix) -> sp.Expr:
    """``L = Σ_k e_k / K`` with ``e_k`` computed from column ``k`` of ``Z``."""
    K = Z.shape[1]
    return sp.Add(*[conditional_error(list(Z[:, k]), k) for k in range(K)]) / K


def logits(K: int, name: str = "z") -> sp.Matrix:
    """A K×K matrix of real symbols ``z_{n,k}`` (1-based in the names)."""
    return sp.Matrix(K, K, lambda n, k: sp.Symbol(f"{name}_{{{n + 1},{k + 1}}}", real=True))


def column_symbols(K: int, name: str = "z") -> list[sp.Symbol]:
    return [sp.Symbol(f"{name}_{n + 1}", real=True) for n in range(K)]


# --- symbolic K -----------------------------------------------------------------------

class Column:
    """One column of logits with symbolic K: named entries plus the sums R and P.

    ``Column("k", "n")`` names the query's own logit ``z_k`` and one other ``z_n``; the
    remaining ``K − 2`` entries enter through ``R`` and ``P`` only.
    """

    def __init__(self, *names: str) -> None:
        if not names:
            raise ValueError("name at least the query's own entry")
        self.names = names
        self.z = {name: sp.Symbol(f"z_{name}", real=True) for name in names}
        self.R, self.P = sp.symbols("R P", nonnegative=True)
        exps = {name: sp.exp(z) for name, z in self.z.items()}
        self.total = sp.Add(*exps.values()) + self.R
        self.a = {name: w / self.total for name, w in exps.items()}
        #: Σ_m a_m² over the whole column
        self.S = (sp.Add(*[w ** 2 for w in exps.values()]) + self.P) / self.total ** 2
        own = names[0]
        others = sp.Add(*[self.a[n] ** 2 for n in names[1:]]) + self.P / self.total ** 2
        #: e_k = ½[(1 − a_k)² + Σ_{n≠k} a_n²]: the definition, with the rest in P/total²
        self.error = sp.Rational(1, 2) * ((1 - self.a[own]) ** 2 + others)

    def d(self, name: str) -> sp.Expr:
        """``∂e_k/∂z_name``."""
        return sp.diff(self.error, self.z[name])

    def on_ray(self, alpha: sp.Expr, beta: sp.Expr, K: sp.Expr | None = None) -> dict:
        """Substitution for a two-valued column: own entry α, every other entry β, K given
        (default the Symbol K): the K − j unnamed entries make ``R = (K − j)e^β``."""
        K = sym_K() if K is None else K
        rest = K - len(self.names)
        subs = {self.z[self.names[0]]: alpha, self.R: rest * sp.exp(beta),
                self.P: rest * sp.exp(2 * beta)}
        subs.update({self.z[n]: beta for n in self.names[1:]})
        return subs

    def explicit(self, K: int) -> tuple[dict, list[sp.Symbol]]:
        """Substitution giving the rest explicit symbols ``w_1..w_{K−j}``, and those symbols:
        with it the encoding must equal :func:`conditional_error` on the full column."""
        rest = sp.symbols(f"w_1:{K - len(self.names) + 1}", real=True)
        subs = {self.R: sp.Add(*[sp.exp(w) for w in rest]),
                self.P: sp.Add(*[sp.exp(2 * w) for w in rest])}
        return subs, list(rest)
