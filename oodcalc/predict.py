"""What the theory predicts for one setting: closed forms plus the exact population
dynamics, gathered into a :class:`~oodcalc.report.Report`."""

from __future__ import annotations

import numpy as np

from . import theory
from .dynamics import descend, ood_start, require_converged, source_logits
from .model import attention, conditional_errors
from .report import OOD, FeatureForgetting, Finetune, Pretrain, Report, off_diagonal, trend
from .setting import Setting

def pretrain_logits(K: int, eps: float, eta: float, max_steps: int,
                    record: bool = False):
    """Pretraining from Q = 0 on any orthonormal V: the logits do not depend on V."""
    run = descend(np.zeros((1, K, K)), eta, eps, max_steps, record=record)
    require_converged(run, "pretraining", lambda b: f"K = {K}, eps = {eps:g}, eta = {eta:g}")
    return run


def predict(setting: Setting) -> Report:
    """Pretrain to T1, evaluate on U, fine-tune to T2, and measure forgetting, exactly."""
    geo, proto, K = setting.geometry, setting.protocol, setting.K
    params = setting.describe()
    M = geo.M

    pre = pretrain_logits(K, proto.eps, proto.eta, proto.max_steps, record=True)
    z1 = pre.z[0]
    a_star = theory.alpha_star(K, proto.eps)
    pretrain = Pretrain(T1=int(pre.steps[0]), z=z1, error=conditional_errors(z1),
                        alpha_star=a_star)

    z_ood0 = ood_start(z1, M)
    closed = theory.ood_logits(M, a_star)
    ood = OOD(z=z_ood0, attention=attention(z_ood0), error=conditional_errors(z_ood0),
              corollary=theory.corollary_cases(M),
              at_alpha_star={"alpha": np.diag(closed), "beta": off_diagonal(closed),
                             "error": conditional_errors(closed)})

    ft = descend(z_ood0[None], proto.eta_ft, proto.eps, proto.max_steps, record=True)
    require_converged(ft, "fine-tuning", lambda b: (
        f"K = {K}, eps = {proto.eps:g}, eta_ft = {proto.eta_ft:g}, geometry {geo.kind}"))
    z_ood = ft.z[0]
    source_path = source_logits(z1, M, z_ood0, ft.trajectory[:, 0])
    bounds = theory.step_size_bounds(z_ood0)
    finetune = Finetune(T2=int(ft.steps[0]), z_ood=z_ood, z_source=source_path[-1],
                        error_ood=conditional_errors(z_ood),
                        step_size_bound=float(bounds.min()), step_size_bounds=bounds,
                        eta_ft=proto.eta_ft)

    source_loss = conditional_errors(source_path) / K   # L_{v_k} along fine-tuning
    gamma = geo.gamma
    regimes = theory.forgetting_regimes(gamma) if gamma is not None else [None] * K
    D = theory.first_step_D(gamma, z_ood0) if gamma is not None else [None] * K
    directions = theory.initial_directions(gamma, z_ood0) if gamma is not None else [None] * K
    forgetting = [
        FeatureForgetting(k=k + 1, F_k=float(source_loss[-1, k] - source_loss[0, k]),
                          loss_before=float(source_loss[0, k]),
                          loss_after=float(source_loss[-1, k]),
                          trend=trend(source_loss[:, k]),
                          regime=r.regime if r else None,
                          condition=r.condition if r else None,
                          D_k=None if D[k] is None else float(D[k]),
                          initial_direction=directions[k])
        for k, r in enumerate(regimes)]

    return Report(source="theory", parameters=params, pretrain=pretrain, ood=ood,
                  finetune=finetune, forgetting=forgetting,
                  trajectories={"pretrain": pre.trajectory[:, 0],
                                "finetune_ood": ft.trajectory[:, 0],
                                "finetune_source": source_path})
