"""What the real-text experiment and its arms share below them: the class means as the
theory reads them (unit columns, the stopping rule relative to their geometry) and the
bootstrap over examples. (A module of its own so that :mod:`.arms` need not import
:mod:`.experiment`, which imports it.)"""

from __future__ import annotations

import numpy as np

from ..estimates import gram_scale
from ..setting import Protocol

__all__ = ["THEORY_RULES", "interval", "real_protocol", "resampled_means", "unit_columns"]

#: How the theory columns on real class means set ε and η (``Config.theory_rule``).
#: Two class means at cosine ρ have a Gram matrix that acts on the directions the errors
#: live in as c = 1 − ρ (for K = 2 exactly; in general c is the smallest centred Gram
#: eigenvalue, :func:`oodcalc.estimates.gram_scale`): every e_k is c times its orthonormal
#: value, and a step's change of the logits c³ times. At ρ ≈ 0.99 uniform attention
#: already has e = c/4 < ε = 0.01, so the rule as given stops pretraining at T1 = 0
#: (nothing learned). "relative" scales the rule with the geometry: pretraining at ε·c_V,
#: η/c_V³, fine-tuning at ε_ft·c_U, η_ft/c_U³; for K = 2 pretraining from Q = 0 is then
#: step for step the orthonormal one at (ε, η), stopping at the same fraction of uniform
#: attention's error. "absolute": ε and η as given.
THEORY_RULES = ("relative", "absolute")


def resampled_means(x: np.ndarray, rng: np.random.Generator, B: int) -> np.ndarray:
    """The means of ``B`` bootstrap resamples of ``x``."""
    return x[rng.integers(0, len(x), size=(B, len(x)))].mean(axis=1)


def interval(per_example: np.ndarray, rng: np.random.Generator, B: int) -> dict[str, float]:
    """Mean and 95 % percentile-bootstrap interval over examples."""
    x = np.asarray(per_example, dtype=np.float64)
    lo, hi = np.percentile(resampled_means(x, rng, B), [2.5, 97.5])
    return {"mean": float(x.mean()), "lo": float(lo), "hi": float(hi)}


def unit_columns(A: np.ndarray) -> np.ndarray:
    """The class means as they are, each column scaled to unit norm (not orthogonalised)."""
    A = np.asarray(A, dtype=np.float64)
    return A / np.linalg.norm(A, axis=0)


def real_protocol(protocol: Protocol, G_V: np.ndarray, G_U: np.ndarray,
                  rule: str) -> Protocol:
    """The protocol the theory runs on features with Grams G_V, G_U under ``rule``
    (:data:`THEORY_RULES`): as given, or ε, η scaled by the geometry's c (``relative``)."""
    if rule == "absolute":
        return protocol
    c_V, c_U = gram_scale(G_V), gram_scale(G_U)
    ft = {"ft_steps": protocol.ft_steps} if protocol.ft_steps is not None else \
        {"eps_ft": protocol.eps_ft * c_U}
    return Protocol(eps=protocol.eps * c_V, eta=protocol.eta / c_V ** 3,
                    eta_ft=protocol.eta_ft / c_U ** 3,
                    max_steps="auto" if protocol.auto_steps else protocol.max_steps, **ft)
