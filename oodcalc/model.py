"""The model's definitions in the K×K logit coordinates (docs/theory.md, "The model").

For orthonormal features ``f_1..f_K`` and a merged query-key matrix ``Q``, the logit that
the tokens of feature ``f_n`` get for query ``f_k`` is ``z[n, k] = f_nᵀ Q f_k``: the
diagonal holds the α-type weights, the off-diagonal the β-type weights. Every function
here works on stacks of such matrices, shape ``(..., K, K)``, column ``k`` = query ``f_k``.
"""

from __future__ import annotations

import numpy as np


__all__ = [
    "SMALL_K", "attention", "attention_first", "column_gram", "conditional_errors",
    "errors_and_gradient", "errors_first", "errors_from_attention", "feature_sum",
    "features_first", "features_last", "is_diagonal", "loss",
    "loss_gradient_from_attention", "matrices_first", "matrices_last",
]


def is_diagonal(M: np.ndarray) -> bool:
    """No nonzero entry off the last two axes' diagonal (two counts: no temporary)."""
    return np.count_nonzero(M) == np.count_nonzero(np.diagonal(M, axis1=-2, axis2=-1))


def column_gram(M: np.ndarray) -> np.ndarray:
    """``MᵀM`` (batched over leading axes): elementwise for a diagonal M (parallel shifts,
    rotations; K = 1024 saves a 0.1 s product), the same numbers (one term per entry)."""
    if M.ndim == 2 and is_diagonal(M):
        return np.diag(np.diagonal(M) ** 2) + 0.0
    return np.swapaxes(M, -1, -2) @ M


def attention(z: np.ndarray) -> np.ndarray:
    """Aggregated attention ``Attn[n, k]`` that the tokens of ``f_n`` receive for query ``f_k``
    (population limit, balanced features): a softmax down each column, max subtracted."""
    return matrices_last(attention_first(matrices_first(z)))


def errors_from_attention(attn: np.ndarray) -> np.ndarray:
    """Conditional errors ``e_k = ½‖Σ_n Attn[n,k] f_n − f_k‖²``, shape ``(..., K)``."""
    return features_last(errors_first(matrices_first(attn, copy=True)))


def conditional_errors(z: np.ndarray) -> np.ndarray:
    """``e_k(Q) = ½[(1 − Attn_k)² + Σ_{n≠k} Attn_n²]`` for each query ``f_k``."""
    return features_last(errors_first(attention_first(matrices_first(z))))


def errors_and_gradient(z: np.ndarray, G: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``e_k`` (``(..., K)``) and ``g = ∂L/∂z`` (``(..., K, K)``, ``L = (1/K) Σ_k e_k``)
    from one softmax, for unit-norm features with Gram matrix ``G = FᵀF`` (broadcasting
    against ``z``; None: orthonormal):

    ``e_k = ½ (a_k − δ_k)ᵀ G (a_k − δ_k)``,  ``g[n, k] = a_nk (s_nk − Σ_m a_mk s_mk) / K``,
    ``s = G (a − I)``.

    Without the layout below: a few small stacks pay per NumPy call, not per entry."""
    K = z.shape[-1]
    a = np.exp(z - z.max(axis=-2, keepdims=True))
    a /= a.sum(axis=-2, keepdims=True)
    r = a - np.eye(K)
    s = r if G is None else G @ r
    return 0.5 * (r * s).sum(axis=-2), a * (s - (a * s).sum(axis=-2, keepdims=True)) / K


# --- the layout the arithmetic runs in ---------------------------------------------------
#
# NumPy's loops run along the last axis. A stack of K×K matrices with K small has a last
# axis of K, and every broadcast or reduction down a column then runs in loops of K
# (at K = 2, 40,401 matrices: ~10× slower than one long loop). So the functions above
# work on ``x[n, k, ...]``, the matrix axes first: for small K a contiguous copy with the
# batch innermost, otherwise a view. Reductions over ``n`` add the rows in order in
# either layout, so the results are the same to the bit.

#: Below this many features a batched stack is copied batch-innermost.
SMALL_K = 8


def matrices_first(z: np.ndarray, copy: bool = False) -> np.ndarray:
    """``z[..., n, k]`` as ``x[n, k, ...]`` (float64): a contiguous copy with the batch
    innermost when there is a batch and ``K < SMALL_K``, else a view of ``z`` (with
    ``copy``, always a new array: batch-innermost for small K, else in ``z``'s order)."""
    z = np.asarray(z, dtype=np.float64)
    x = np.moveaxis(z, (-2, -1), (0, 1))
    small = z.ndim > 2 and z.shape[-1] < SMALL_K
    if copy:
        return x.copy(order="C" if small else "K")
    return np.ascontiguousarray(x) if small else x


def matrices_last(x: np.ndarray) -> np.ndarray:
    """The inverse of :func:`matrices_first`: ``(..., K, K)``, C-contiguous."""
    return np.ascontiguousarray(np.moveaxis(x, (0, 1), (-2, -1)))


def features_first(v: np.ndarray) -> np.ndarray:
    """Per-feature values ``v[..., k]`` as ``v[k, ...]``, contiguous (to go with
    :func:`matrices_first` of a stack with the same batch shape)."""
    return _moved(np.asarray(v, dtype=np.float64), -1, 0)


def features_last(e: np.ndarray) -> np.ndarray:
    """Per-feature values ``e[k, ...]`` as ``(..., K)``, C-contiguous."""
    return _moved(e, 0, -1)


def _moved(a: np.ndarray, source: int, destination: int) -> np.ndarray:
    """``np.moveaxis(a, source, destination)``, C-contiguous; a short moved axis (fewer
    than ``SMALL_K`` entries) is copied entry by entry, ~4× numpy's transposing copy."""
    moved = np.moveaxis(a, source, destination)
    if moved.flags.c_contiguous or a.shape[source] >= SMALL_K:
        return np.ascontiguousarray(moved)
    out = np.empty(moved.shape, dtype=a.dtype)
    seen_as_a = np.moveaxis(out, destination, source)
    for i in range(a.shape[source]):
        entry = (slice(None),) * (source % a.ndim) + (i,)
        seen_as_a[entry] = a[entry]
    return out


def feature_sum(e: np.ndarray) -> np.ndarray:
    """``e.sum(axis=-1)`` over the features of ``e[..., k]``, the same to the bit: for
    K < ``SMALL_K`` numpy adds a short last axis in order, as the sum down the first
    axis of :func:`features_first` does, which runs in long loops."""
    if e.shape[-1] >= SMALL_K or e.ndim < 2:
        return e.sum(axis=-1)
    return features_first(e).sum(axis=0)


def attention_first(x: np.ndarray) -> np.ndarray:
    """:func:`attention` of ``x[n, k, ...]`` (:func:`matrices_first`), in that layout."""
    a = x - x.max(axis=0)
    np.exp(a, out=a)
    a /= a.sum(axis=0)
    return a


def errors_first(a: np.ndarray) -> np.ndarray:
    """:func:`errors_from_attention` of ``a[n, k, ...]`` as ``e[k, ...]``; ``a`` is
    overwritten (its squared residual)."""
    diagonal = np.arange(a.shape[0])
    a[diagonal, diagonal] -= 1.0
    a *= a
    return 0.5 * a.sum(axis=0)


def loss(z: np.ndarray) -> np.ndarray:
    """``L(Q) = Σ_k L_k`` with ``L_k = e_k / K`` (the indicator-weighted loss)."""
    e = conditional_errors(z)
    return feature_sum(e) / e.shape[-1]


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
