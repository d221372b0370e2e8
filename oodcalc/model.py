"""The model's definitions in the K×K logit coordinates (docs/theory.md, "The model").

For orthonormal features ``f_1..f_K`` and a merged query-key matrix ``Q``, the logit that
the tokens of feature ``f_n`` get for query ``f_k`` is ``z[n, k] = f_nᵀ Q f_k``: the
diagonal holds the α-type weights, the off-diagonal the β-type weights. Every function
here works on stacks of such matrices, shape ``(..., K, K)``, column ``k`` = query ``f_k``.
"""

from __future__ import annotations

import numpy as np


def attention(z: np.ndarray) -> np.ndarray:
    """Aggregated attention ``Attn[n, k]`` that the tokens of ``f_n`` receive for query ``f_k``
    (population limit, balanced features): a softmax down each column, max subtracted."""
    shifted = z - down_columns(np.maximum, z)
    weights = np.exp(shifted)
    return weights / down_columns(np.add, weights)


def down_columns(op: np.ufunc, x: np.ndarray) -> np.ndarray:
    """``op.reduce`` over axis −2 (down each column), keepdims. Fewer than 8 rows are reduced one by one, in
    order (numpy reduces a short axis slowly, batch after batch; below 8 terms its own
    reduction also adds them in order, so the result is the same to the bit)."""
    K = x.shape[-2]
    if K >= 8:
        return op.reduce(x, axis=-2, keepdims=True)
    out = x[..., :1, :].copy()
    for n in range(1, K):
        op(out, x[..., n:n + 1, :], out=out)
    return out


def errors_from_attention(attn: np.ndarray) -> np.ndarray:
    """Conditional errors ``e_k = ½‖Σ_n Attn[n,k] f_n − f_k‖²``, shape ``(..., K)``."""
    residual = attn - np.eye(attn.shape[-1])
    return 0.5 * np.einsum("...nk,...nk->...k", residual, residual)


def conditional_errors(z: np.ndarray) -> np.ndarray:
    """``e_k(Q) = ½[(1 − Attn_k)² + Σ_{n≠k} Attn_n²]`` for each query ``f_k``."""
    return errors_from_attention(attention(z))


def loss(z: np.ndarray) -> np.ndarray:
    """``L(Q) = Σ_k L_k`` with ``L_k = e_k / K`` (the indicator-weighted loss)."""
    e = conditional_errors(z)
    return e.sum(axis=-1) / e.shape[-1]


def loss_gradient_from_attention(attn: np.ndarray) -> np.ndarray:
    """``∂L/∂z[n, k]`` given the attention, through the softmax Jacobian.

    With ``r = Attn − I`` (so ``∂e_k/∂Attn[n,k] = r[n,k]``), the chain rule through
    ``diag(a) − a aᵀ`` gives ``a_n (r_n − Σ_m a_m r_m)`` per column; each column sums to
    zero, which is the conservation law (claim 2).
    """
    K = attn.shape[-1]
    residual = attn - np.eye(K)
    mean_residual = np.einsum("...nk,...nk->...k", attn, residual)[..., None, :]
    return attn * (residual - mean_residual) / K
