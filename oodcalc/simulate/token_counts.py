"""What drawing a prompt's tokens i.i.d. does to the population errors: the token-count bias.

A prompt of ``N`` tokens over the features ``f_1..f_K`` (Gram ``G = FᵀF``) with ``c_n``
tokens of ``f_n`` attends, for query ``f_k``, to feature ``n`` with weight
``a_n(s) = s_n e^{z_nk} / Σ_m s_m e^{z_mk}`` (shares ``s = c/N``: the softmax over the
tokens grouped by feature), and its error averaged over the task ``w ~ N(0, I_d)`` is

    e_k(s) = ½ (a(s) − δ_k)ᵀ G (a(s) − δ_k).

At equal shares ``s = 1/K`` this is the population error ``e_k`` of docs/theory.md: a
**balanced** prompt (every feature exactly N/K times) has it for every N. Tokens drawn
i.i.d. uniformly give multinomial counts, ``s`` scatters around ``1/K`` with covariance
``Σ/N``, ``Σ = diag(p) − ppᵀ`` (``p = 1/K``), and the mean error is biased:

    E[e_k(s)] − e_k(1/K) = ½ tr(H_k Σ) / N + O(1/N²),

``H_k`` the Hessian of ``e_k`` in the shares at ``1/K``. :func:`token_count_bias` gives the
exact expectation (every count vector enumerated, for small N and K) beside this leading
term. With ``x = z_k + log s`` and ``a = softmax(x)``, ``v = G(a − δ_k)``, ``m = aᵀv``:
``∇_x e = a ⊙ (v − m)`` and

    ∇²_x e = J G J + diag(a ⊙ (v − m)) − a (a⊙v)ᵀ − (a⊙v) aᵀ + 2m aaᵀ,   J = diag(a) − aaᵀ;

in the shares ``H[i, j] = ∇²_x e[i, j] / (s_i s_j) − δ_ij ∇_x e_i / s_i²``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from math import comb

import numpy as np

from ..errors import InputError

__all__ = [
    "MAX_COMPOSITIONS", "TokenCountBias", "bias_coefficient", "compositions",
    "multinomial_probabilities", "share_errors", "share_hessian", "token_count_bias",
]


#: Most count vectors :func:`token_count_bias` enumerates (``C(N + K − 1, K − 1)``).
MAX_COMPOSITIONS = 2_000_000


def _check(z, G) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] != z.shape[1] or z.shape[0] < 2 or not np.isfinite(z).all():
        raise InputError("z", getattr(z, "shape", z), "expected finite K × K logits, K >= 2 "
                         "(column k: query f_k)")
    K = z.shape[0]
    G = np.eye(K) if G is None else np.asarray(G, dtype=np.float64)
    if G.shape != (K, K) or not np.isfinite(G).all():
        raise InputError("G", G.shape, f"expected the K × K Gram matrix FᵀF (K = {K})")
    return z, G


def share_errors(z, G, shares) -> np.ndarray:
    """``e_k(s)`` for token shares ``s`` (``(..., K)``, rows summing to 1): ``(..., K)``,
    entry ``k`` the task-averaged error of query ``f_k`` (``G`` None: orthonormal)."""
    z, G = _check(z, G)
    s = np.asarray(shares, dtype=np.float64)[..., :, None]        # (..., n, 1)
    w = s * np.exp(z - z.max(axis=0))                               # (..., n, k)
    a = w / w.sum(axis=-2, keepdims=True)
    r = a - np.eye(z.shape[0])
    return 0.5 * np.einsum("...nk,nm,...mk->...k", r, G, r)


def share_hessian(z, G) -> np.ndarray:
    """``H[k] = ∂²e_k/∂s²`` at equal shares ``s = 1/K``, shape ``(K, K, K)`` (the module
    docstring's formula)."""
    z, G = _check(z, G)
    K = z.shape[0]
    s = np.full(K, 1.0 / K)
    out = np.empty((K, K, K))
    for k in range(K):
        x = z[:, k] + np.log(s)
        a = np.exp(x - x.max())
        a /= a.sum()
        v = G @ (a - np.eye(K)[k])
        m = a @ v
        J = np.diag(a) - np.outer(a, a)
        grad_x = a * (v - m)
        av = a * v
        hess_x = (J @ G @ J + np.diag(grad_x) - np.outer(a, av) - np.outer(av, a)
                  + 2 * m * np.outer(a, a))
        out[k] = hess_x / np.outer(s, s) - np.diag(grad_x / s**2)
    return out


def bias_coefficient(z, G) -> np.ndarray:
    """``c_k = ½ tr(H_k Σ)``, ``Σ = diag(p) − ppᵀ`` (``p = 1/K``): i.i.d. tokens raise the
    mean error of query ``f_k`` by ``c_k / N + O(1/N²)``. Shape ``(K,)``."""
    H = share_hessian(z, G)
    K = H.shape[0]
    p = np.full(K, 1.0 / K)
    sigma = np.diag(p) - np.outer(p, p)
    return 0.5 * np.einsum("kij,ji->k", H, sigma)


def compositions(N: int, K: int) -> np.ndarray:
    """Every count vector of ``N`` tokens over ``K`` features, ``(C(N+K−1, K−1), K)``
    (stars and bars)."""
    bars = np.array(list(combinations(range(N + K - 1), K - 1)), dtype=np.int64)
    bars = bars.reshape(-1, K - 1)
    edges = np.concatenate([np.full((len(bars), 1), -1), bars,
                            np.full((len(bars), 1), N + K - 1)], axis=1)
    return np.diff(edges, axis=1) - 1


def multinomial_probabilities(counts: np.ndarray, N: int) -> np.ndarray:
    """``N! / Π c_n! · K^{−N}`` for each row of ``counts`` (uniform over K features)."""
    K = counts.shape[1]
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, N + 1)))])
    return np.exp(log_fact[N] - log_fact[counts].sum(axis=1) - N * np.log(K))


@dataclass(frozen=True)
class TokenCountBias:
    """The mean error of i.i.d.-token prompts minus the population error, per query
    (``(K,)`` each): ``exact`` (every count vector enumerated), ``leading = c / N`` and
    the coefficient ``c`` (:func:`bias_coefficient`), for ``N`` tokens."""

    N: int
    exact: np.ndarray
    leading: np.ndarray
    coefficient: np.ndarray


def token_count_bias(z, G, N: int) -> TokenCountBias:
    """How much N i.i.d. uniform tokens raise the task-averaged error of each query above
    the population ``e_k`` (which balanced prompts have exactly), for logits ``z``
    (``K × K``, column k: query f_k) of features with Gram ``G`` (None: orthonormal).

    Exact: the expectation over the multinomial counts, every count vector enumerated
    (at most ``MAX_COMPOSITIONS`` of them: small N and K); leading order ``½tr(HΣ)/N``.
    """
    z, G = _check(z, G)
    K = z.shape[0]
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
        raise InputError("N", N, "expected an integer >= 1 (tokens per prompt)")
    n_counts = comb(N + K - 1, K - 1)
    if n_counts > MAX_COMPOSITIONS:
        raise InputError("N", N, f"K = {K} features and N = {N} tokens have {n_counts:,} "
                         f"count vectors, more than {MAX_COMPOSITIONS:,} to enumerate; lower N")
    counts = compositions(int(N), K)
    probabilities = multinomial_probabilities(counts, int(N))
    mean = probabilities @ share_errors(z, G, counts / N)
    population = share_errors(z, G, np.full(K, 1.0 / K))
    c = bias_coefficient(z, G)
    return TokenCountBias(int(N), mean - population, c / N, c)
