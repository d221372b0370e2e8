"""Feature geometries: the training features V and the OOD features U (docs/theory.md, "Geometries").

Every constructor returns a validated :class:`Geometry`; ``d`` defaults to the smallest
dimension that holds the geometry, and a larger ``d`` pads every feature with zeros.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence

import numpy as np

from . import estimates, io, limits
from .errors import InputError, item_name, param, shorten

__all__ = [
    "FEATURE_FILE_SUFFIXES", "Geometry", "JSON_BYTES_PER_BYTE", "MAX_NPY_HEADER",
    "NpyHeader", "ORTHONORMAL_TOL", "PARALLEL_TOL", "check_K", "check_dimension",
    "check_features", "check_finite", "check_gram", "check_orthonormal", "check_sequence",
    "check_size", "describe_text", "feature_shape", "from_arrays", "from_files", "gram",
    "load_features", "mean_query", "orthogonal", "overlap", "parallel_shift",
    "read_npy_header", "rotation",
]


#: Largest entry of |VᵀV − I| (and |UᵀU − I|) accepted as orthonormal.
ORTHONORMAL_TOL = 1e-6
#: Off-diagonal entries of M = VᵀU below this count as zero when deciding whether a
#: geometry is a parallel shift (the paper's Assumption 5.4: ⟨v_k, u_n⟩ = 0 for n ≠ k).
PARALLEL_TOL = 1e-9

FEATURE_FILE_SUFFIXES = (".npy", ".csv", ".json")
#: Memory a JSON feature file takes to parse, per byte of the file (measured: 32).
JSON_BYTES_PER_BYTE = 40.0


@dataclass(frozen=True, eq=False)
class Geometry:
    """Orthonormal training features ``V`` and OOD features ``U``, both ``d × K``.

    ``V`` and ``U`` are built on first use (``build`` returns them): a constructed geometry
    knows its ``d``, ``K`` and, where it knows it, ``diag M`` without them, so an entry
    point can refuse a run out of reach before ``2·d·K`` floats exist (K = 5000: 800 MB,
    2 s). :meth:`of` wraps arrays that exist already. Build one with
    :func:`parallel_shift`, :func:`rotation`, :func:`mean_query`, :func:`orthogonal`,
    :func:`overlap`, :func:`from_arrays` or :func:`from_files`.

    Example
    -------
    >>> import oodcalc as oc
    >>> geometry = oc.rotation(0.5, K=3)
    >>> geometry
    Geometry(kind='rotation', params={'theta': 0.5}, d=6, K=3)
    >>> geometry.V.shape, geometry.U.shape                  # built on first use
    ((6, 3), (6, 3))
    """

    kind: str
    params: dict[str, Any]
    d: int
    K: int
    build: Callable[[], tuple[np.ndarray, np.ndarray]] = field(repr=False)
    #: ``diag M`` when the constructor knows ``M = VᵀU`` to be diagonal (parallel shifts,
    #: rotations, orthogonal subspaces), else None: what the cost model reads before any
    #: K × K work (``M`` itself costs a d × K × K product).
    known_diagonal: np.ndarray | None = field(default=None, repr=False)
    #: Whether V and U are orthonormal (decided by the constructor: a file's within its
    #: tolerance). Then ``G_V = G_U = I`` without forming the arrays, and the orthonormal
    #: dynamics run; else the Gram dynamics (:mod:`oodcalc.finetune.gram`).
    orthonormal: bool = field(default=True, repr=False)

    @classmethod
    def of(cls, V: np.ndarray, U: np.ndarray, kind: str, params: dict[str, Any],
           known_diagonal: np.ndarray | None = None, *,
           orthonormal: bool = True) -> "Geometry":
        """A geometry of arrays that exist already."""
        return cls(kind, params, V.shape[0], V.shape[1], functools.partial(_pair, V, U),
                   known_diagonal, orthonormal)

    @functools.cached_property
    def _features(self) -> tuple[np.ndarray, np.ndarray]:
        return self.build()

    @property
    def V(self) -> np.ndarray:
        return self._features[0]

    @property
    def U(self) -> np.ndarray:
        return self._features[1]

    @functools.cached_property
    def M(self) -> np.ndarray:
        """Alignment matrix ``M = VᵀU``: ``M[n, k] = ⟨v_n, u_k⟩`` (computed once, read-only).
        Where the constructor knows it to be diagonal, it is built from that diagonal,
        bit for bit the product (``+ 0.0``: the product's zeros are +0, a −0 γ included);
        else the d × K product (a third of a second at K = 1024, 15 s at K = 5000)."""
        if self.known_diagonal is not None:
            M = np.diag(self.known_diagonal) + 0.0
        else:
            M = self.V.T @ self.U
        M.setflags(write=False)
        return M

    @functools.cached_property
    def G_V(self) -> np.ndarray:
        """The Gram matrix ``VᵀV`` of the training features (read-only; the identity for
        an orthonormal set)."""
        return self._gram(0)

    @functools.cached_property
    def G_U(self) -> np.ndarray:
        """The Gram matrix ``UᵀU`` of the OOD features (read-only)."""
        return self._gram(1)

    def _gram(self, which: int) -> np.ndarray:
        if self.orthonormal:
            G = np.eye(self.K)
        else:
            F = self._features[which]
            G = F.T @ F
        G.setflags(write=False)
        return G

    @property
    def gamma(self) -> np.ndarray | None:
        """``γ_k = ⟨v_k, u_k⟩`` when the geometry is a parallel shift, else ``None``
        (overlapping features: see :attr:`shift`)."""
        if not self.orthonormal:
            return None
        M = self.M
        off_diagonal = M - np.diag(np.diag(M))
        if np.abs(off_diagonal).max() > PARALLEL_TOL:
            return None
        return np.diag(M).copy()

    @property
    def shift(self) -> np.ndarray | None:
        """The ``γ_k`` the paper's forgetting rule reads: :attr:`gamma`, or for overlapping
        features built as ``u_k = γ_k v_k + √(1 − γ_k²) w_k`` (:func:`overlap`,
        :func:`gram`) those ``γ_k``; else ``None``."""
        if self.orthonormal:
            return self.gamma
        gamma = self.params.get("gamma")
        return None if gamma is None else np.array(gamma, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description: enough to rebuild the geometry (with overlapping
        features, their Gram matrices too).

        Example
        -------
        >>> import oodcalc as oc
        >>> described = oc.parallel_shift([1, -0.9]).describe()
        >>> list(described)
        ['kind', 'gamma', 'K', 'd', 'M']
        >>> described["gamma"], described["M"]                  # M = VᵀU
        ([1.0, -0.9], [[1.0, 0.0], [0.0, -0.9]])
        """
        out = {"kind": self.kind, **self.params, "K": self.K, "d": self.d,
               "M": self.M.tolist()}
        if not self.orthonormal:
            out |= {"G_V": self.G_V.tolist(), "G_U": self.G_U.tolist()}
        return out


def _pair(V: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return V, U


def describe_text(description: dict[str, Any], max_values: int | None = None) -> str:
    """One line for people, from :meth:`Geometry.describe`'s dict; with ``max_values``, a
    longer γ shows its first and last values (a figure's title)."""
    kind = description["kind"]
    if kind == "parallel-shift":
        gamma = [f"{g:.5g}" for g in description["gamma"]]
        if max_values is not None and len(gamma) > max_values:
            gamma = gamma[:max_values // 2] + ["…"] + gamma[-(max_values // 2):]
            return f"parallel shift, γ = ({', '.join(gamma)}) ({len(description['gamma'])} values)"
        return "parallel shift, γ = (" + ", ".join(gamma) + ")"
    if kind == "rotation":
        return f"rotation by θ = {description['theta']:.5g} rad"
    if kind == "mean-query":
        return "mean-centred query, u_1 = v̄"
    if kind == "orthogonal":
        return "orthogonal subspaces, span(U) ⊥ span(V)"
    if kind in ("overlap", "gram"):
        gamma = ", ".join(f"{g:.5g}" for g in description["gamma"])
        how = (f"⟨v_n, v_k⟩ = ρ = {description['rho']:.5g}" if kind == "overlap"
               else "VᵀV given")
        return f"overlapping features ({how}), shifted by γ = ({gamma})"
    return f"features from {description['features']} and {description['ood']}"


# --- validation helpers ---------------------------------------------------------------

def check_dimension(d: int | None, d_min: int, name: str = "d") -> int:
    if d is None:
        return d_min
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < d_min:
        raise InputError(name, d, f"this geometry needs an integer dimension >= {d_min}")
    return int(d)


def check_K(K: Any, name: str = "K") -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 2:
        raise InputError(name, K, "the number of features must be an integer >= 2")
    return int(K)


def check_sequence(values: Any, name: str, accepted: str) -> list:
    """``values`` as a list, refusing what only looks like a sequence: a string is not
    split (``"1,-0.9"`` would iterate its characters), a number or None is not one."""
    try:
        if isinstance(values, (str, bytes)):
            raise TypeError
        return list(values)
    except TypeError:
        raise InputError(name, shorten(repr(values)),
                         f"expected a sequence of numbers: {accepted}") from None


def check_finite(value: Any, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(name, value, "expected a real number") from None
    if not math.isfinite(x):
        raise InputError(name, value, "expected a finite real number (not NaN or inf)")
    return x


def _embed(V: np.ndarray, U: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    pad = d - V.shape[0]
    if pad == 0:
        return V, U
    return np.pad(V, ((0, pad), (0, 0))), np.pad(U, ((0, pad), (0, 0)))


def check_size(d: int, K: int, d_min: int) -> None:
    """Refuse, before V and U exist, a geometry whose d × K arrays exceed the memory cap
    (naming d when the smallest d would fit, else K)."""
    limits.refuse_over_cap(estimates.geometry_bytes(d, K), "the geometry (V and U, d × K "
                           "each)", [(param("d"), d, estimates.geometry_bytes(d_min, K),
                                      f"{param('d', 'lower')} (it changes no number; leave "
                                      "it out)"),
                                     (param("K"), K, 0.0, param("K", "lower"))])


def check_orthonormal(F: np.ndarray, name: str, tol: float, why: str = "") -> None:
    gram_error = np.abs(F.T @ F - np.eye(F.shape[1])).max()
    if gram_error > tol:
        raise InputError(name, f"columns with max |FᵀF − I| = {gram_error:.3g}",
                         f"each column is a feature and the columns must be orthonormal "
                         f"within {tol:g}" + (f": {why}" if why else ""))


def check_features(F: np.ndarray, name: str, tol: float) -> None:
    """Unit-norm, linearly independent columns: what the Gram dynamics need (orthogonal
    or not). ``tol`` bounds ``|‖f_k‖² − 1|`` and is the smallest eigenvalue of ``FᵀF``
    accepted (pretraining takes longer as it shrinks: :func:`oodcalc.estimates.gram_slowdown`)."""
    G = F.T @ F
    norms = np.abs(np.diag(G) - 1.0)
    worst = int(np.argmax(norms))
    if norms[worst] > tol:
        raise InputError(name, f"column {worst + 1} of squared norm {G[worst, worst]:.6g}",
                         f"each column is a feature of unit norm (|‖f‖² − 1| <= {tol:g}); "
                         "scale the columns to length 1")
    smallest = float(np.linalg.eigvalsh(G)[0])
    if smallest <= tol:
        raise InputError(name, f"columns whose Gram matrix FᵀF has smallest eigenvalue "
                         f"{smallest:.3g}", f"linearly independent features (smallest "
                         f"eigenvalue of FᵀF > {tol:g}): drop or merge a feature that is a "
                         "combination of the others")


def check_gram(G: Any, name: str, tol: float = ORTHONORMAL_TOL) -> np.ndarray:
    """A Gram matrix of unit-norm, independent features: square, symmetric, unit
    diagonal, positive definite (smallest eigenvalue > ``tol``)."""
    try:
        G = np.array(G, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(name, shorten(repr(G)), "expected a K × K matrix of real "
                         "numbers") from None
    if G.ndim != 2 or G.shape[0] != G.shape[1] or G.shape[0] < 2:
        raise InputError(name, f"an array of shape {G.shape}", "expected a K × K matrix, "
                         "K >= 2")
    if not np.isfinite(G).all():
        raise InputError(name, "a matrix containing NaN or inf", "every entry must be finite")
    if np.abs(G - G.T).max() > tol or np.abs(np.diag(G) - 1.0).max() > tol:
        raise InputError(name, shorten(str(G.tolist())), f"a Gram matrix of unit features: "
                         f"symmetric with unit diagonal (within {tol:g})")
    smallest = float(np.linalg.eigvalsh(G)[0])
    if smallest <= tol:
        raise InputError(name, f"a matrix of smallest eigenvalue {smallest:.3g}",
                         f"a positive definite Gram matrix (smallest eigenvalue > {tol:g}): "
                         "the features must be linearly independent")
    return (G + G.T) / 2


# --- constructors ---------------------------------------------------------------------

def parallel_shift(gamma: Sequence[float], d: int | None = None, *,
                   name: str = "gamma") -> Geometry:
    """A parallel shift (the paper's Assumption 5.4): ``⟨v_k, u_k⟩ = γ_k`` and
    ``⟨v_k, u_n⟩ = 0`` for ``n ≠ k``, so ``M = VᵀU = diag(γ)``.

    ``u_k = γ_k v_k + √(1 − γ_k²) w_k`` with a fresh direction ``w_k ⊥ span(V)`` for every
    ``|γ_k| < 1``.

    Parameters
    ----------
    gamma : sequence of float
        One ``γ_k ∈ [−1, 1]`` per feature; ``K = len(gamma) >= 2``.
    d : int, optional
        Dimension; default and minimum ``K + #{k : |γ_k| < 1}`` (a larger ``d`` pads
        with zeros and changes no result).
    name : str, keyword-only
        The name used for ``gamma`` in error messages.

    Returns
    -------
    Geometry
        ``V``, ``U`` (``d × K``), ``kind = "parallel-shift"``.

    Example
    -------
    >>> import oodcalc as oc
    >>> g = oc.parallel_shift([1, -0.9])
    >>> g.K, g.d, g.gamma.tolist()
    (2, 3, [1.0, -0.9])
    """
    values = _check_gamma(gamma, name)
    return _shifted(np.array(values), d, kind="parallel-shift",
                    params={"gamma": values})


def _shifted(cosines: np.ndarray, d: int | None, kind: str,
             params: dict[str, Any], sines: np.ndarray | None = None) -> Geometry:
    K = len(cosines)
    if sines is None:
        sines = np.sqrt(np.clip(1.0 - cosines**2, 0.0, None))
    moved = np.flatnonzero(np.abs(sines) > 0.0)
    d_min = K + len(moved)
    d = check_dimension(d, d_min)
    check_size(d, K, d_min)
    diagonal = cosines.astype(np.float64)
    diagonal.setflags(write=False)
    build = functools.partial(_shifted_arrays, diagonal, sines[moved], moved, d)
    return Geometry(kind, params, d, K, build, known_diagonal=diagonal)


def _shifted_arrays(cosines: np.ndarray, sines: np.ndarray, moved: np.ndarray,
                    d: int) -> tuple[np.ndarray, np.ndarray]:
    """V = the first K unit vectors, u_k = cos_k v_k + sin_k w_k for the moved k."""
    K, d_min = len(cosines), len(cosines) + len(moved)
    V = np.eye(d_min, K)
    U = np.zeros((d_min, K))
    U[np.arange(K), np.arange(K)] = cosines
    U[K + np.arange(len(moved)), moved] = sines
    return _embed(V, U, d)


def rotation(theta: float, K: int, d: int | None = None) -> Geometry:
    """Every feature turned by ``θ`` toward its own direction orthogonal to span(V):
    ``u_k = cos θ v_k + sin θ w_k`` (a parallel shift with every ``γ_k = cos θ``).

    Parameters
    ----------
    theta : float
        The angle in radians.
    K : int
        Number of features (>= 2).
    d : int, optional
        Dimension; default and minimum ``2K`` (``K`` when θ is a multiple of π).

    Returns
    -------
    Geometry
        ``kind = "rotation"``, ``M = cos θ · I``.

    Example
    -------
    >>> import math, oodcalc as oc
    >>> g = oc.rotation(math.pi / 3, K=4)
    >>> g.d, g.gamma.round(3).tolist()
    (8, [0.5, 0.5, 0.5, 0.5])
    """
    K = check_K(K)
    theta = check_finite(theta, "theta")
    c, s = math.cos(theta), math.sin(theta)
    if abs(s) < 1e-12:  # θ a multiple of π: u_k = ±v_k, no extra direction needed
        c, s = round(c), 0.0
    return _shifted(np.full(K, c), d, kind="rotation", params={"theta": theta},
                    sines=np.full(K, s))


def mean_query(K: int, d: int | None = None) -> Geometry:
    """The mean-centred query: ``u_1 = v̄ = (1/√K) Σ_i v_i``, and ``u_2..u_K`` complete an
    orthonormal basis of span(V). The first failure case of the corollary (claim 6):
    the query ``u_1`` gets uniform attention ``1/K``.

    Parameters
    ----------
    K : int
        Number of features (>= 2).
    d : int, optional
        Dimension; default and minimum ``K``.

    Returns
    -------
    Geometry
        ``kind = "mean-query"``.

    Example
    -------
    >>> import oodcalc as oc
    >>> report = oc.predict(oc.Setting(oc.mean_query(4)))
    >>> report.ood.corollary[0], round(float(report.ood.attention[0, 0]), 6)
    ('mean-query', 0.25)
    """
    K = check_K(K)
    d = check_dimension(d, K)
    check_size(d, K, K)
    seed = np.eye(K)
    seed[:, 0] = 1.0 / math.sqrt(K)
    basis, _ = np.linalg.qr(seed)
    basis *= np.sign(basis[0, 0]) if basis[0, 0] != 0 else 1.0
    basis[:, 0] = 1.0 / math.sqrt(K)  # exact v̄, not its rounded QR image
    V = np.eye(K)
    V, U = _embed(V, V @ basis, d)
    return Geometry.of(V, U, "mean-query", {"mean_feature": 1})


def orthogonal(K: int, d: int | None = None) -> Geometry:
    """Orthogonal subspaces, span(U) ⊥ span(V) (``u_k = e_{K+k}``, ``M = 0``): the second
    failure case of the corollary (claim 6), uniform attention for every query.

    Parameters
    ----------
    K : int
        Number of features (>= 2).
    d : int, optional
        Dimension; default and minimum ``2K``.

    Returns
    -------
    Geometry
        ``kind = "orthogonal"``.

    Example
    -------
    >>> import oodcalc as oc
    >>> bool(oc.orthogonal(3).M.any())      # M = VᵀU = 0
    False
    """
    K = check_K(K)
    d = check_dimension(d, 2 * K)
    check_size(d, K, 2 * K)
    return Geometry("orthogonal", {}, d, K, functools.partial(_orthogonal_arrays, K, d),
                    known_diagonal=np.zeros(K))


def _orthogonal_arrays(K: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """v_k = e_k, u_k = e_{K+k}."""
    return _embed(np.eye(2 * K, K), np.eye(2 * K, 2 * K)[:, K:].copy(), d)


def overlap(rho: float, gamma: Sequence[float], d: int | None = None, *,
            names: tuple[str, str] = ("rho", "gamma")) -> Geometry:
    """Overlapping training features shifted like a parallel shift: unit ``v_k`` with
    ``⟨v_n, v_k⟩ = ρ`` for every ``n ≠ k``, and ``u_k = γ_k v_k + √(1 − γ_k²) w_k`` with
    ``w_1, w_2, …`` orthonormal and orthogonal to span(V) (:func:`gram` with
    ``VᵀV = (1 − ρ) I + ρ 11ᵀ``).

    Parameters
    ----------
    rho : float
        The overlap, ``−1/(K − 1) < ρ < 1`` (the features stay linearly independent).
    gamma : sequence of float
        One ``γ_k ∈ [−1, 1]`` per feature, ``K = len(gamma) >= 2``.
    d : int, optional
        Dimension; default and minimum ``K + #{k : |γ_k| < 1}``.
    names : (str, str), keyword-only
        The names of ``rho`` and ``gamma`` in error messages.

    Returns
    -------
    Geometry
        ``kind = "overlap"``, ``M = VᵀU = G_V diag(γ)``; ``orthonormal`` is False unless
        ``ρ = 0``.

    Example
    -------
    >>> import oodcalc as oc
    >>> g = oc.overlap(0.8, [1, 0.5])
    >>> g.G_V.tolist(), g.M.round(3).tolist()
    ([[1.0, 0.8], [0.8, 1.0]], [[1.0, 0.4], [0.8, 0.5]])
    """
    values = _check_gamma(gamma, names[1])
    K = len(values)
    rho = check_finite(rho, names[0])
    if not -1.0 / (K - 1) < rho < 1.0:
        raise InputError(names[0], rho, f"the overlap of K = {K} unit features must lie in "
                         f"(−1/(K−1), 1) = ({-1.0 / (K - 1):.4g}, 1): at either end they are "
                         "linearly dependent")
    G = (1.0 - rho) * np.eye(K) + rho
    return _gram_geometry(G, values, d, "overlap", {"rho": rho, "gamma": values})


def gram(G_V: Any, gamma: Sequence[float], d: int | None = None, *,
         names: tuple[str, str] = ("G_V", "gamma")) -> Geometry:
    """Training features with a given Gram matrix ``VᵀV = G_V`` (``V`` its Cholesky
    factor), shifted like a parallel shift: ``u_k = γ_k v_k + √(1 − γ_k²) w_k`` with
    ``w_k`` orthonormal and orthogonal to span(V), so ``M = G_V diag(γ)`` and
    ``UᵀU = diag(γ) G_V diag(γ) + diag(1 − γ²)``.

    Parameters
    ----------
    G_V : array_like
        ``K × K``, symmetric, unit diagonal, positive definite.
    gamma : sequence of float
        ``K`` values in ``[−1, 1]``.
    d : int, optional
        As :func:`overlap`.
    names : (str, str), keyword-only
        The names of ``G_V`` and ``gamma`` in error messages.

    Example
    -------
    >>> import oodcalc as oc
    >>> oc.gram([[1, 0.3, 0], [0.3, 1, 0.2], [0, 0.2, 1]], [1, 0.5, -0.5]).d
    5
    """
    values = _check_gamma(gamma, names[1])
    G = check_gram(G_V, names[0])
    if G.shape[0] != len(values):
        raise InputError(names[1], ",".join(map(str, values)), f"one γ per feature: {names[0]} is "
                         f"{G.shape[0]} × {G.shape[0]}, so {G.shape[0]} values")
    return _gram_geometry(G, values, d, "gram", {"G": G.tolist(), "gamma": values})


def _check_gamma(gamma: Any, name: str) -> list[float]:
    gamma = check_sequence(gamma, name, "one γ per feature, e.g. [1, -0.9]")
    values = [check_finite(g, item_name(name, i)) for i, g in enumerate(gamma)]
    if len(values) < 2:
        raise InputError(name, ",".join(map(str, gamma)) or "nothing",
                         "give at least 2 values (one per feature, K >= 2)")
    for i, g in enumerate(values):
        if not -1.0 <= g <= 1.0:
            raise InputError(item_name(name, i), g, "each γ must lie in [-1, 1]")
    return values


def _gram_geometry(G: np.ndarray, gamma: list[float], d: int | None, kind: str,
                   params: dict[str, Any]) -> Geometry:
    K = len(gamma)
    cosines = np.array(gamma)
    sines = np.sqrt(np.clip(1.0 - cosines**2, 0.0, None))
    moved = np.flatnonzero(sines > 0.0)
    d_min = K + len(moved)
    d = check_dimension(d, d_min)
    check_size(d, K, d_min)
    R = np.linalg.cholesky(G).T                  # RᵀR = G: the columns of R are the v_k
    V = np.zeros((d_min, K))
    V[:K] = R
    U = V * cosines
    U[K + np.arange(len(moved)), moved] = sines[moved]
    V, U = _embed(V, U, d)
    orthonormal = bool(np.abs(G - np.eye(K)).max() <= ORTHONORMAL_TOL)
    return Geometry.of(V, U, kind, params, orthonormal=orthonormal)


def from_arrays(V: Any, U: Any, d: int | None = None, *, tol: float = ORTHONORMAL_TOL,
                names: tuple[str, str] = ("V", "U"),
                params: dict[str, Any] | None = None) -> Geometry:
    """Your own features: two ``d × K`` arrays, each column a feature.

    Parameters
    ----------
    V, U : array_like
        Training and OOD features, same shape ``d × K`` with ``d >= K >= 2``; columns of
        unit norm, linearly independent. Orthonormal sets (``|FᵀF − I| <= tol``
        entrywise) run the orthonormal dynamics; others, overlapping features, the Gram
        dynamics (:mod:`oodcalc.finetune.gram`).
    d : int, optional
        Must equal the arrays' number of rows if given.
    tol : float, keyword-only, default 1e-6
        Tolerance of the checks: ``|‖f‖² − 1|``, the smallest eigenvalue of ``FᵀF``
        accepted, and ``|FᵀF − I|`` for orthonormal.
    names : (str, str), keyword-only
        Names of V and U in error messages.
    params : dict, keyword-only, optional
        Extra entries recorded in ``Geometry.describe()``.

    Returns
    -------
    Geometry
        ``kind = "file"``; a parallel shift is recognised (``gamma`` is set) when
        ``M = VᵀU`` is diagonal.

    Raises
    ------
    InputError
        For a non-numeric, non-finite or mis-shaped array, columns not of unit norm, or
        linearly dependent columns.

    Example
    -------
    >>> import numpy as np, oodcalc as oc
    >>> c, s = np.cos(0.3), np.sin(0.3)
    >>> V = np.eye(3, 2)
    >>> U = np.array([[c, 0], [0, 1], [s, 0]])     # u_1 turned by 0.3 rad, u_2 = v_2
    >>> oc.from_arrays(V, U).gamma.round(4).tolist()
    [0.9553, 1.0]
    """
    arrays = []
    for F, name in zip((V, U), names):
        try:
            F = np.asarray(F, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(name, "a non-numeric array", "expected a d × K array of "
                             "real numbers, each column a feature") from None
        if F.ndim != 2:
            raise InputError(name, f"an array of shape {F.shape}",
                             "expected a 2-D d × K array, each column a feature")
        if not np.isfinite(F).all():
            raise InputError(name, "an array containing NaN or inf",
                             "every entry must be a finite number")
        arrays.append(F)
    V, U = arrays
    if V.shape != U.shape:
        raise InputError(f"{names[0]} and {names[1]}", f"shapes {V.shape} and {U.shape}",
                         "both must have the same shape d × K")
    d_file, K = V.shape
    check_K(K, f"{names[0]} (number of columns)")
    if d_file < K:
        raise InputError(names[0], f"shape {V.shape}",
                         "need d >= K: at least as many rows as columns (features)")
    for F, name in zip((V, U), names):
        check_features(F, name, tol)
    if d is not None and d != d_file:
        raise InputError("d", d, f"the feature files fix d = {d_file}; omit d or give {d_file}")
    eye = np.eye(K)
    orthonormal = all(np.abs(F.T @ F - eye).max() <= tol for F in (V, U))
    return Geometry.of(V, U, "file", dict(params or {}), orthonormal=orthonormal)


#: Largest .npy header read (bytes): numpy writes 118 for a matrix, and refuses more than
#: 10,000 itself unless the file is trusted.
MAX_NPY_HEADER = 10_000
_NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class NpyHeader:
    """What a .npy header says, checked against the file it is in."""
    shape: tuple[int, int]
    dtype: np.dtype
    fortran_order: bool


def feature_shape(path: str | Path) -> tuple[int, ...] | None:
    """The shape a ``.npy`` feature file's header claims (None for other files, or when
    the file or its header is refused: :func:`load_features` then says why), read without
    its data."""
    if Path(str(path)).suffix.lower() != ".npy":
        return None
    try:
        with io.open_input(path, "features", max_bytes=limits.MAX_FEATURE_FILE) as f:
            return read_npy_header(f, "features", str(path)).shape
    except InputError:
        return None


def read_npy_header(f: BinaryIO, name: str, text: str) -> NpyHeader:
    """The header of the .npy open in ``f`` (left at its data), refused with its true
    reason unless it describes a real 2-D array of exactly the bytes that follow it: not a
    .npy, an unknown version, a header over :data:`MAX_NPY_HEADER` or past the end of the
    file, a header that is not numpy's dict, Python objects, a shape that is not 2-D, data
    truncated or followed by other bytes."""
    size = os.fstat(f.fileno()).st_size
    magic = f.read(8)
    if len(magic) < 8 or magic[:6] != _NPY_MAGIC:
        raise InputError(name, text, "not a .npy file (it does not start with numpy's magic "
                         "string \\x93NUMPY); save the matrix with numpy.save")
    version = (magic[6], magic[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise InputError(name, text, f"a .npy of format version {version[0]}.{version[1]}; "
                         "oodcalc reads versions 1.0, 2.0 and 3.0 (numpy.save writes them)")
    width = 2 if version == (1, 0) else 4
    length = int.from_bytes(f.read(width), "little")
    start = 8 + width
    if length > MAX_NPY_HEADER:
        raise InputError(name, text, f"its header claims {length:,} bytes; a .npy header "
                         f"is at most {MAX_NPY_HEADER:,} (numpy writes 118 for a matrix)")
    if start + length > size:
        raise InputError(name, text, f"the file is truncated: its header claims {length:,} "
                         f"bytes but the whole file has {size:,}")
    header = _npy_dict(f.read(length), version, name, text)
    dtype, shape, fortran = header["descr"], header["shape"], header["fortran_order"]
    if dtype.hasobject:
        raise InputError(name, text, "the .npy holds Python objects, which need pickle "
                         "and are never loaded; save a numeric array")
    if dtype.kind not in "fiu":
        kind = {"c": "complex", "b": "boolean", "U": "text", "S": "text",
                "V": "structured"}.get(dtype.kind, str(dtype))
        raise InputError(name, text, f"the array holds {kind} values; features are real "
                         "numbers (save a float array)")
    if len(shape) != 2:
        raise InputError(name, text, f"the array has {len(shape)} dimension"
                         f"{'' if len(shape) == 1 else 's'} (shape "
                         f"{shorten(shape, 40)}); expected a 2-D d × K array, each column "
                         "a feature")
    data, held = shape[0] * shape[1] * dtype.itemsize, size - start - length
    if held < data:
        raise InputError(name, text, f"the file is truncated: its header claims shape "
                         f"{shape} of {dtype} ({limits.size(data)}) but "
                         f"{limits.size(held)} of data follow it")
    if held > data:
        raise InputError(name, text, f"{limits.size(held - data)} of other bytes follow "
                         f"the array its header describes (shape {shape} of {dtype}); a .npy holds one "
                         "array and nothing after it")
    return NpyHeader(shape, dtype, fortran)


def _npy_dict(raw: bytes, version: tuple[int, int], name: str, text: str) -> dict:
    """numpy's header dict, parsed as a literal (never evaluated), its fields checked."""
    accepted = ("its header is not numpy's {'descr': ..., 'fortran_order': ..., 'shape': "
                "...} dict; save the matrix with numpy.save")
    try:
        header = ast.literal_eval(raw.decode("utf-8" if version == (3, 0) else "latin1"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError,
            UnicodeDecodeError):
        raise InputError(name, text, accepted) from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise InputError(name, text, accepted)
    shape, fortran = header["shape"], header["fortran_order"]
    if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)
            and type(fortran) is bool):
        raise InputError(name, text, accepted + " (its shape must be a tuple of sizes >= "
                         "0, its fortran_order True or False)")
    try:
        header["descr"] = np.lib.format.descr_to_dtype(header["descr"])
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, MemoryError,
            RecursionError):
        raise InputError(name, text, accepted + " (its descr is not a numpy dtype)") \
            from None
    return header


def load_features(path: str | Path, name: str) -> np.ndarray:
    """Read a ``d × K`` feature matrix from .npy (no pickles), .csv or .json.

    Only real numbers are read: a complex, boolean or text array, JSON ``true``/``false``,
    strings or objects are refused rather than converted. Only a regular file is opened
    (a FIFO, a device, a directory are refused first); the size a file claims is checked
    against the memory cap before it is read."""
    return _read_features(path, name)[0]


def _read_features(path: str | Path, name: str) -> tuple[np.ndarray, str]:
    """The matrix and the SHA-256 of the bytes it was read from."""
    text = str(path)
    if not text.strip() or "\x00" in text:
        raise InputError(name, repr(text), "expected the path of a .npy, .csv or .json file")
    suffix = Path(text).suffix.lower()
    if suffix not in FEATURE_FILE_SUFFIXES:
        raise InputError(name, text, "accepted files are .npy, .csv or .json "
                         "(pickles are never loaded)")
    with io.open_input(text, name, max_bytes=limits.MAX_FEATURE_FILE) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise InputError(name, text, "the file is empty; expected a d × K array")
        if suffix == ".npy":
            return _load_npy(f, name, text)
        if suffix == ".csv":
            limits.refuse_over_cap(20.0 * size, f"reading {text}",
                                   [(name, text, 0.0, "use a smaller file (or .npy)")])
        # json.loads holds about 30 bytes per byte of text (100 MB: 3.2 GB, 66 s): refused
        # by size first, then by memory where the cap is lower still
        elif size > limits.MAX_JSON_FEATURE_FILE:
            raise InputError(name, text, f"the file has {limits.size(size)}; JSON "
                             f"feature files are at most "
                             f"{limits.size(limits.MAX_JSON_FEATURE_FILE)} (save a larger "
                             "matrix as .npy or .csv)")
        else:
            limits.refuse_over_cap(JSON_BYTES_PER_BYTE * size, f"reading {text}",
                                   [(name, text, 0.0, "use a smaller file (or .npy)")])
        try:
            data = f.read(size + 1)
        except OSError as err:
            raise InputError(name, text, f"could not read the file ({err})") from None
    digest = hashlib.sha256(data).hexdigest()
    try:
        if suffix == ".csv":
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return np.loadtxt(data.decode("utf-8").splitlines(), delimiter=",",
                                  ndmin=2, dtype=np.float64), digest
        return _json_matrix(json.loads(data.decode("utf-8")), name, text), digest
    except InputError:
        raise
    except RecursionError:
        raise InputError(name, text, "the JSON is nested too deeply; expected a list of "
                         "rows, each a list of numbers") from None
    except (ValueError, UserWarning) as err:
        reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
        raise InputError(name, text, f"could not read a numeric d × K array ({reason})") \
            from None
    except UnicodeDecodeError as err:
        raise InputError(name, text, f"could not read the file ({err})") from None


def _load_npy(f: BinaryIO, name: str, text: str) -> tuple[np.ndarray, str]:
    """A real numeric 2-D .npy from ``f``, its header checked and its claimed size held
    against the memory cap before the data is read (from the same open file)."""
    header = read_npy_header(f, name, text)
    count = header.shape[0] * header.shape[1]
    limits.refuse_over_cap(8.0 * count + header.dtype.itemsize * count,
                           f"reading {text} (shape {header.shape})",
                           [(name, text, 0.0, "use a smaller file")])
    start = f.tell()
    data = bytearray(count * header.dtype.itemsize)     # writable, unlike bytes
    if f.readinto(data) != len(data):
        raise InputError(name, text, "the file was truncated while it was read")
    f.seek(0)
    digest = hashlib.sha256(f.read(start))              # the file's bytes: header, data
    digest.update(data)
    array = np.frombuffer(data, dtype=header.dtype, count=count)
    order = "F" if header.fortran_order else "C"
    return array.reshape(header.shape, order=order), digest.hexdigest()


def _json_matrix(data: Any, name: str, text: str) -> np.ndarray:
    """A JSON list of rows of numbers (not booleans, strings or objects) as float64."""
    accepted = "expected a JSON list of rows, each a list of numbers"
    if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
        raise InputError(name, text, accepted)
    if len({len(row) for row in data}) > 1:
        raise InputError(name, text, accepted + " of the same length")
    # one pass over the types, not a Python call per number (bool is not an int here)
    kinds = {type(x) for row in data for x in row}
    if not kinds <= {int, float}:
        bad = next(x for row in data for x in row if type(x) not in (int, float))
        raise InputError(name, text, f"{accepted}; found {json.dumps(bad)[:40]}")
    try:
        return np.asarray(data, dtype=np.float64)
    except OverflowError:
        raise InputError(name, text, f"{accepted}; found a number too large for "
                         "float64") from None


def from_files(features: str | Path, ood: str | Path, d: int | None = None, *,
               tol: float = ORTHONORMAL_TOL, names: tuple[str, str] = ("V", "U")) -> Geometry:
    """Your own features from two files (``oodcalc predict --features V --ood U``).

    Parameters
    ----------
    features, ood : str or Path
        ``d × K`` matrices, each column a feature: ``.npy`` (pickles are never loaded),
        ``.csv`` (comma-separated rows) or ``.json`` (a list of rows).
    d, tol, names
        As :func:`from_arrays`.

    Returns
    -------
    Geometry
        As :func:`from_arrays`; its description records both paths and their SHA-256.

    Example
    -------
    >>> import json, os, tempfile, oodcalc as oc
    >>> folder = tempfile.mkdtemp()
    >>> for name, rows in [("V.json", [[1, 0], [0, 1]]), ("U.json", [[0, 1], [1, 0]])]:
    ...     with open(os.path.join(folder, name), "w") as f:
    ...         json.dump(rows, f)
    >>> g = oc.from_files(os.path.join(folder, "V.json"), os.path.join(folder, "U.json"))
    >>> g.K, g.gamma                      # u_1 = v_2, u_2 = v_1: not a parallel shift
    (2, None)
    """
    (V, V_sha), (U, U_sha) = (_read_features(p, n) for p, n in zip((features, ood), names))
    params = {"features": str(features), "ood": str(ood), "sha256": [V_sha, U_sha],
              "tol": tol}
    return from_arrays(V, U, d, tol=tol, names=names, params=params)
