"""Fine-tuning as a sum of terms, on the state ``(z_U, z_V)``: the OOD and source logits.

Plain fine-tuning moves ``z_V`` as a function of ``z_U`` alone (claim 7), which the fast
engines of :mod:`oodcalc.finetune.dynamics` use; replay, the pull and projections do not, so this
engine carries both logits and lets each :class:`~oodcalc.finetune.terms.Term` add its
share. Batched over configurations ``(B, K, K)``, NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..setting import STALL_STEP
from .terms import Recipe, errors_and_gradient, loss_gradient


__all__ = ["ENGINE", "Run", "finetune", "probe"]


#: How the report names this engine.
ENGINE = "terms on (z_U, z_V) (NumPy)"


@dataclass(frozen=True)
class Run:
    """Where fine-tuning ended, per configuration: the final logits, the stopping step,
    whether the rule (every covered ``e_k(z_U) <= ε``) held there, and why a run that
    did not reach it stopped early: ``blocked`` (every covered feature still above ε
    is frozen: no step can move it) or ``stalled`` (a step moved no logit by more than
    :data:`~oodcalc.setting.STALL_STEP`: the run has settled where the pull balances
    the fit)."""

    z_U: np.ndarray
    z_V: np.ndarray
    steps: np.ndarray
    reached: np.ndarray
    blocked: np.ndarray
    stalled: np.ndarray


def finetune(z_U: np.ndarray, z_V: np.ndarray, recipe: Recipe, eta, eps, max_steps: int,
             *, fixed: bool = False,
             observe: Callable[[int, np.ndarray, np.ndarray], None] | None = None) -> Run:
    """GD ``z ← z − η Σ terms`` from ``(z_U, z_V)`` (stacks ``(B, K, K)``) until every
    covered ``e_k(z_U) <= eps``, or until that cannot change (see :class:`Run`), or
    ``max_steps`` steps; ``fixed``: exactly ``max_steps`` steps, no rule.
    ``observe(t, z_U, z_V)`` sees every iterate (read-only), ``t = 0`` first.
    Configurations that stop are frozen; ``reached`` says whether the rule held at the
    end (for ``fixed`` runs too). ``eta`` and ``eps``: numbers or ``(B,)``."""
    z_U, z_V = np.array(z_U, dtype=np.float64), np.array(z_V, dtype=np.float64)
    B = z_U.shape[0]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,))[:, None, None]
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), (B,))[:, None]
    free = ~np.broadcast_to(recipe.covered, (B, z_U.shape[-1]))   # outside the rule
    steps = np.full(B, max_steps, dtype=np.int64)
    live = np.ones(B, dtype=bool)
    reached, blocked, stalled = (np.zeros(B, dtype=bool) for _ in range(3))
    for t in range(max_steps + 1):
        e_U, g_U = errors_and_gradient(z_U, recipe.G_U)
        within = (e_U <= eps) | free
        met = within.all(axis=-1)
        if observe is not None:
            observe(t, _read_only(z_U), _read_only(z_V))
        if not fixed:
            done = live & (within | recipe.frozen).all(axis=-1)
            steps[done], reached[done], live[done] = t, met[done], False
            blocked |= done & ~met
        if t == max_steps or not live.any():
            break
        g_V = loss_gradient(z_V, recipe.G_V) if recipe.source_gradient else None
        dU, dV = np.zeros_like(z_U), np.zeros_like(z_V)
        for term in recipe.terms:
            term.add(z_U, z_V, g_U, g_V, dU, dV)
        rate = np.where(live[:, None, None], eta, 0.0)
        dU *= rate
        dV *= rate
        if recipe.settles and not fixed:
            still = live & _below_stall(dU) & _below_stall(dV)
            steps[still], stalled[still], live[still] = t, True, False
        z_U -= dU
        z_V -= dV
    if fixed:
        reached = met
    return Run(z_U, z_V, steps, reached, blocked, stalled)


def _below_stall(change: np.ndarray) -> np.ndarray:
    return np.abs(change).max(axis=(-2, -1)) <= STALL_STEP


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view



def probe(z_U: np.ndarray, z_V: np.ndarray, recipe: Recipe, eta: float, eps: float,
          steps: int) -> tuple[bool, float, np.ndarray, np.ndarray]:
    """A piece of :func:`finetune` (one configuration, ``(K, K)`` logits) for the cost
    model: ``(stopped, e, z_U, z_V)``, whether it stopped within ``steps`` steps, the
    largest error of a covered, movable OOD feature at the end, and the logits there (a
    next piece continues from them exactly: a step reads only the logits and the
    recipe)."""
    run = finetune(z_U[None], z_V[None], recipe, eta, eps, steps)
    stopped = bool(run.reached[0] or run.blocked[0] or run.stalled[0]) or \
        int(run.steps[0]) < steps
    movable = recipe.covered & ~recipe.frozen
    e = float(errors_and_gradient(run.z_U[0], recipe.G_U)[0][movable].max(initial=0.0))
    return stopped, e, run.z_U[0], run.z_V[0]
