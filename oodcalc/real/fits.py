"""What one fit of the real-text experiment computes and reads, below both the experiment
(:mod:`.experiment`, which assembles the fits and summarises them) and its tasks
(:mod:`.tasks`, one (seed, fold) fit each): the rotation families, the forgetting
conditions and the parts fine-tuned, the folds, the library versions a fit records, and the
theory on the class means (raw, and orthonormalised by Löwdin)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .. import limits
from ..errors import ComputationError
from ..estimates import gram_scale
from ..finetune import gram
from ..finetune.dynamics import ood_start
from ..finetune.terms import column_errors
from ..geometry import from_arrays
from ..geometry import rotation as rotation_geometry
from ..model import conditional_errors, errors_and_gradient
from ..prediction import pretrain_logits, predict
from ..setting import Protocol, Setting
from .shared import real_protocol, unit_columns

__all__ = [
    "FAMILIES", "FINETUNED", "FORGET_THETAS", "SourceTheory", "THEORY_COLUMNS",
    "class_geometry", "class_means", "cosine", "lowdin", "stratified_folds", "theory_for",
    "theory_ood_error", "theory_raw", "theory_rotation_F", "uniform_error", "versions",
]

#: The theory's OOD error at the real geometry, four ways (:class:`SourceTheory`): the class
#: means as they are under the config's rule (``raw``; and as a fraction of uniform
#: attention's error on U, ``raw_vs_uniform``), as they are with ε, η as given
#: (``raw_fixed_eps``), and orthonormalised (Löwdin) with ε, η as given.
THEORY_COLUMNS = ("raw", "raw_vs_uniform", "raw_fixed_eps", "orthonormalised")
#: Rotation families: scenarios 1 and 2 with dimensions ranked by the linear probe on the
#: block's input, the same two ranked by the trained head (on the block's output), and all.
FAMILIES = ("scenario 1", "scenario 2", "scenario 1 (head)", "scenario 2 (head)", "all")
FORGET_THETAS = (("π/2", math.pi / 2), ("3π/4", 3 * math.pi / 4), ("π", math.pi))
#: Which part of the trained model a forgetting fine-tune moves (a key of top.PARTS, None:
#: everything): F with everything moving, then with one part moving alone.
FINETUNED = {"both": None, "attention only": "attention", "head only": "head",
             "scores only": "scores", "values only": "values"}


def stratified_folds(labels: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """k folds of positions, each class dealt round-robin after a shuffle."""
    folds: list[list[int]] = [[] for _ in range(k)]
    start = 0
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        for j, p in enumerate(members):
            folds[(start + j) % k].append(int(p))
        start += len(members)
    return [np.sort(np.array(f, dtype=np.int64)) for f in folds]


def lowdin(A: np.ndarray) -> np.ndarray:
    """Orthonormalise the columns symmetrically, A (AᵀA)^(-1/2): the orthonormal basis of
    span(A) closest to A, so column k stays class k's direction."""
    w, Q = np.linalg.eigh(A.T @ A)
    return A @ (Q * w ** -0.5) @ Q.T


def class_means(pooled: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d × 2: the mean representation of the negative and of the positive reviews."""
    return np.stack([pooled[labels == c].mean(axis=0) for c in (0, 1)], axis=1)


@functools.lru_cache(maxsize=8)
def _pretrained_logits(K: int, eps: float, eta: float, max_steps: int) -> np.ndarray:
    return pretrain_logits(K, eps, eta, max_steps).z[0]


def theory_ood_error(M: np.ndarray, protocol: Protocol) -> float:
    """The theory's OOD error at T1 for orthonormal V, U with alignment M = VᵀU: exactly
    what ``predict(...).ood.error.mean()`` gives, with the V-independent pretraining shared."""
    z1 = _pretrained_logits(M.shape[0], protocol.eps, protocol.eta, protocol.max_steps)
    return float(conditional_errors(ood_start(z1, M)).mean())


def class_geometry(means_source: np.ndarray, means_ood: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """V, U: the orthonormalised class means (column k = class k)."""
    return lowdin(means_source.astype(np.float64)), lowdin(means_ood.astype(np.float64))


def uniform_error(G: np.ndarray) -> float:
    """Mean e_k at uniform attention (Q = 0) for features with Gram matrix G: (1 − ρ)/4
    for two at cosine ρ, 1/4 for orthonormal ones."""
    return float(errors_and_gradient(np.zeros(G.shape), G)[0].mean())


def theory_raw(means_source: np.ndarray, means_ood: np.ndarray, protocol: Protocol,
               rule: str) -> dict[str, Any]:
    """oodcalc.predict on V, U = the class means as they are (unit-norm columns, the Gram
    dynamics; ``--features/--ood``) under ``rule``: OOD error at T1 (and as a fraction
    of uniform attention's error on U), forgetting F after fine-tuning on U, T1, the
    class-mean cosines and the ε, η the rule gave."""
    V, U = unit_columns(means_source), unit_columns(means_ood)
    G_V, G_U = V.T @ V, U.T @ U
    used = real_protocol(protocol, G_V, G_U, rule)
    report = predict(Setting(from_arrays(V, U), used))
    e = float(report.ood.error.mean())
    return {"ood_loss": e, "ood_vs_uniform": e / uniform_error(G_U), "F": report.F,
            "T1": int(report.pretrain.T1), "cos_V": float(G_V[0, 1]),
            "cos_U": float(G_U[0, 1]), "eps": used.eps, "eta": used.eta}


def theory_for(means_source: np.ndarray, means_ood: np.ndarray,
               protocol: Protocol) -> dict[str, Any]:
    """oodcalc.predict on V, U = orthonormalised class means (``--features/--ood``):
    OOD error at T1, forgetting F after fine-tuning on U, M and the principal angles."""
    V, U = class_geometry(means_source, means_ood)
    report = predict(Setting(from_arrays(V, U), protocol))
    M = V.T @ U
    e = float(report.ood.error.mean())
    return {"ood_loss": e, "ood_vs_uniform": e / uniform_error(np.eye(M.shape[0])),
            "F": report.F, "M": M.tolist(),
            "principal_angles_deg": np.degrees(np.arccos(np.clip(
                np.linalg.svd(M, compute_uv=False), -1, 1))).tolist()}


class SourceTheory:
    """The theory's OOD error from one set of source class means against many OOD ones,
    pretraining shared (exactly ``predict(...).ood.error.mean()`` of :func:`theory_raw`
    and :func:`theory_for`): ``raw`` under the config's rule, ``raw_fixed_eps`` with ε, η
    as given, ``orthonormalised`` on the Löwdin bases with ε, η as given."""

    def __init__(self, means_source: np.ndarray, protocol: Protocol, rule: str) -> None:
        self.protocol, self.rule = protocol, rule
        self.V = unit_columns(means_source)
        self.G_V = self.V.T @ self.V
        self.lowdin = lowdin(np.asarray(means_source, dtype=np.float64))
        K = self.G_V.shape[0]
        self.z1 = {}
        for name, r in (("raw", rule), ("raw_fixed_eps", "absolute")):
            # the same pretraining, and cap, as predict's for overlapping features
            used = real_protocol(protocol, self.G_V, self.G_V, r)
            cap = limits.pretrain_cap(K, used, overlap=gram_scale(self.G_V))
            pre = gram.pretrain(self.G_V, used.eta, used.eps, cap)
            if not pre.converged[0]:
                raise ComputationError(f"pretraining on the source class means did not meet "
                                       f"the stopping rule within {cap} steps")
            self.z1[name] = pre.z[0]

    def ood(self, means_ood: np.ndarray) -> dict[str, float]:
        U = unit_columns(means_ood)
        G_U, M = U.T @ U, self.V.T @ U
        out = {}
        for name, z1 in self.z1.items():
            e = float(column_errors(gram.ood_start(z1, self.G_V, M), G_U).mean())
            out[name] = e
            if name == "raw":
                out["raw_vs_uniform"] = e / uniform_error(G_U)
        out["orthonormalised"] = theory_ood_error(
            self.lowdin.T @ lowdin(np.asarray(means_ood, dtype=np.float64)), self.protocol)
        return out


def theory_rotation_F(theta: float, protocol: Protocol) -> float:
    """Forgetting F in the theory's idealised rotation geometry, K = 2."""
    return predict(Setting(rotation_geometry(theta, 2), protocol)).F


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "numpy": np.__version__}
