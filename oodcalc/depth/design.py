"""The intervention arms' design (issue 31, item 3), fixed before any run that makes its
records: the arms and their parameters, the seeds, rungs and γ, the endpoints, the
contrasts and the test. Its commit precedes every record it produces; an arms table
(``oodcalc.depth.arms_table``) states the design with its ``VERSION``. Changing anything
here after records exist is a new version.

- Arms: :data:`ARMS` (each with its parameter, oodcalc.depth.arms), every one against
  ``plain``.
- Ladder: seeds 0–9, every rung at each of its depths (theory 1; readout 1; factorised 1;
  depth 2, 3; layernorm-mlp 2, 3), γ ∈ {−0.75, 0, 0.75}, the depth protocol's defaults
  (SGD lr 0.1, ε = 0.01, 4,096 evaluation prompts, the source and OOD curves on the first
  512 of them).
- Real text: 5 seeds × 5 folds (``reproduce real --arms``, by its own module).
- Endpoints: (primary) F under the stopping rule; (secondary) F at matched OOD loss: along
  fine-tuning, the OOD loss ``L_U(t) = max_k e_k^U(t)`` (the stopping rule's quantity) and
  ``F(t)`` on the curve prompts;
  at each level ``ℓ_s = L_U(0)^(1−s) · ε^s`` for s in :data:`MATCHED_LEVELS` (a geometric
  grid from the start's OOD loss, which every arm of a seed and γ shares, to ε), F read at
  the first step where ``L_U <= ℓ_s`` (linear in log L_U between the two steps around it);
  a run that never gets there is counted "not reached", not imputed.
- Contrasts: each arm − plain, paired by seed, at every (rung, depth, γ) and endpoint
  (each matched level its own contrast).
- Test: a two-sided 95% t interval over the paired seeds and its p-value (t with n − 1
  degrees of freedom); Benjamini–Hochberg at q = 0.05 within each endpoint's family (the
  primary one, and the matched-loss one over all levels). A contrast with fewer than
  ``VERDICT_SEEDS`` (5) paired seeds gets no mark (the --quick runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..setting import VERDICT_SEEDS
from .arms import Arm
from .statistics import benjamini_hochberg_rejects, t_interval, t_pvalue

__all__ = [
    "ARMS", "DESIGN", "Design", "ENDPOINTS", "FDR", "GAMMAS", "LADDER_SEEDS", "LEVEL",
    "MATCHED_LEVELS", "REAL_FOLDS", "REAL_SEEDS", "RUNG_DEPTHS", "VERSION",
    "benjamini_hochberg", "contrast_interval",
]

#: 2: L_U is max_k e_k^U (1 had the mean, whose start lies below ε in some runs that
#: still fine-tune: 2 of 3 quick seeds of layernorm-mlp 2 L at γ = +0.75); no full run
#: was made under 1
VERSION = 2
ARMS = (Arm("plain"), Arm("replay", 0.25), Arm("l2", 0.01), Arm("reweight"),
        Arm("drop-negative", 0.0), Arm("project-input"), Arm("project-activations", 0.99),
        Arm("project-qk"), Arm("project-value"), Arm("project-all", 0.99))
LADDER_SEEDS = tuple(range(10))
REAL_SEEDS, REAL_FOLDS = tuple(range(5)), 5
GAMMAS = (-0.75, 0.0, 0.75)
#: (rung, depth) pairs: the ladder's rows (oodcalc.depth.ladder.LADDER)
RUNG_DEPTHS = (("theory", 1), ("readout", 1), ("factorised", 1), ("depth", 2), ("depth", 3),
               ("layernorm-mlp", 2), ("layernorm-mlp", 3))
MATCHED_LEVELS = (0.25, 0.5, 0.75)
ENDPOINTS = ("F at the stopping rule",) + tuple(
    f"F at matched OOD loss s = {s:g}" for s in MATCHED_LEVELS)
LEVEL = 0.95
FDR = 0.05


@dataclass(frozen=True)
class Design:
    version: int = VERSION
    arms: tuple[Arm, ...] = ARMS
    ladder_seeds: tuple[int, ...] = LADDER_SEEDS
    real_seeds: tuple[int, ...] = REAL_SEEDS
    real_folds: int = REAL_FOLDS
    gammas: tuple[float, ...] = GAMMAS
    rung_depths: tuple[tuple[str, int], ...] = RUNG_DEPTHS
    matched_levels: tuple[float, ...] = MATCHED_LEVELS
    endpoints: tuple[str, ...] = ENDPOINTS
    level: float = LEVEL
    fdr: float = FDR
    min_seeds: int = VERDICT_SEEDS
    protocol: dict[str, Any] = field(default_factory=lambda: {
        "optimizer": "sgd", "lr": 0.1, "eps": 0.01, "eval_prompts": 4096,
        "curve_prompts": 512, "batch": 256, "N": 16, "width": 16, "max_steps": 5000})

    def contrasts(self) -> list[tuple[str, str, int, float, str]]:
        """Every (arm, rung, depth, γ, endpoint) tested against plain."""
        return [(a.name, r, n, g, e) for e in self.endpoints for a in self.arms if not a.plain
                for r, n in self.rung_depths for g in self.gammas]

    def describe(self) -> dict[str, Any]:
        return {"version": self.version, "arms": [a.describe() for a in self.arms],
                "ladder_seeds": list(self.ladder_seeds), "real": {
                    "seeds": list(self.real_seeds), "folds": self.real_folds},
                "gammas": list(self.gammas), "rung_depths": [list(x) for x in self.rung_depths],
                "endpoints": list(self.endpoints), "matched_levels": list(self.matched_levels),
                "contrast": "arm − plain, paired by seed",
                "test": f"two-sided {self.level:.0%} t interval over seeds; BH at q = "
                        f"{self.fdr:g} within each endpoint family",
                "min_seeds": self.min_seeds, "protocol": dict(self.protocol)}


DESIGN = Design()


def contrast_interval(differences: Sequence[float], level: float = LEVEL
                      ) -> tuple[float, float, float, float]:
    """(mean, low, high, p) of paired differences: the Student t interval over seeds and the
    two-sided p-value it inverts (``oodcalc.depth.statistics``, the tables' kind)."""
    x = np.asarray(differences, dtype=float)
    mean = float(x.mean()) if x.size else float("nan")
    low, high = t_interval(x, level)
    return mean, low, high, t_pvalue(x)


def benjamini_hochberg(p_values: Sequence[float], q: float = FDR) -> np.ndarray:
    """Which hypotheses BH rejects at FDR ``q`` (a nan p-value is never rejected)."""
    return benjamini_hochberg_rejects(p_values, q)
