"""How fine-tuning steps: every engine of the K×K logit dynamics, in one place.

Bottom first (each module imports only the ones above it in this list):

* :mod:`~oodcalc.finetune.ray_loop` — the symmetric ray's scalar recurrence, plain Python;
* :mod:`~oodcalc.finetune._kernels` — Numba kernels of the per-column fine-tuning;
* :mod:`~oodcalc.finetune.compiled` — the optional plug-in that compiles both (``[fast]``);
* :mod:`~oodcalc.finetune.dynamics` — pretraining (the ray, the K×K descent), the OOD start
  and plain fine-tuning, where the source logits follow from the OOD ones (claim 7);
* :mod:`~oodcalc.finetune.terms` — the interventions (replay, the pull toward the
  pretrained weights, projections, query weights) as terms of one step on ``(z_U, z_V)``;
* :mod:`~oodcalc.finetune.engine` — the step that sums the terms, with its stopping rule;
* :mod:`~oodcalc.finetune.sequence` — fine-tuning on a sequence of shifts.

The package imports nothing itself: the cost model reads :mod:`.compiled` (whether Numba
is there) without loading the engines that the cost model serves.
"""

__all__ = []
