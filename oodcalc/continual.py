"""``oodcalc.sequence``: continual learning in the theory's exact model, pretraining on V
and then fine-tuning on a sequence of shifts (engine: :mod:`oodcalc.finetune.sequence`)."""

from __future__ import annotations

import numpy as np

from . import estimates, limits
from .finetune.sequence import SequenceResult, Shifts, check_shifts, check_stage_weights, \
    run_sequence, stage_protocols
from .prediction import pretrain_logits
from .setting import Protocol


__all__ = ["sequence", "sequence_estimate"]


def sequence(shifts: Shifts, protocol: Protocol | None = None, *,
             stages: list | None = None, progress=None) -> SequenceResult:
    """Pretrain on V, then fine-tune on U_1, ..., U_S in turn, exactly (K×K logits of
    every domain), and measure what each stage did to every domain.

    Parameters
    ----------
    shifts : Shifts
        :func:`oodcalc.parallel_shifts` (one γ per feature per stage) or
        :func:`oodcalc.shifts_from_arrays` (V and a list of U's).
    protocol : Protocol, optional
        ε, η (pretraining), η_ft, ε_ft or ft_steps and the step cap of each stage
        (``finetune_cap``; not raised by an estimate, as predict's ``auto`` cap is),
        and the interventions of every stage (``replay``, ``l2``, ``project``,
        ``weights``), each read for a sequence as follows. Stage i (on U_i) with
        replay λ: each step is ``(1 − λ)`` of the gradient on U_i plus ``λ/i`` of the
        gradient on each earlier domain D_0 = V, U_1, ..., U_{i−1} (every earlier domain
        equally, total share λ: a replay buffer balanced over past experiences, as
        avalanche's ``ExperienceBalancedBuffer``). ``project``: the fit's update off
        the span of every earlier domain's features (V's and U_1..U_{i−1}'s; stage 1:
        span(V), as :func:`oodcalc.predict`). ``l2``: the pull ``(μ/2)‖Q − Q_start‖²``
        toward the weights at the start of the stage (where the previous stage ended;
        stage 1: the pretrained ``Q^(T1)``), as an L2 penalty anchored at the previous
        task's solution. ``weights``: the query weights on U_i (a rule reads each
        ``u^(i)_k``'s cosine to the pretraining centre). With one shift every stage is
        :func:`oodcalc.predict`'s fine-tuning. The joint reference stays plain GD.
    stages : list, keyword-only, optional
        One entry per shift: a dict of interventions (keys ``replay``, ``l2``,
        ``project``, ``weights``) replacing ``protocol``'s for that stage, or None
        (the stage as ``protocol`` says).
    progress : callable, keyword-only, optional
        ``progress(phase, done, expected)``, told of the steps of ``"pretraining"``, each
        ``"stage i"`` and ``"joint"`` against their estimates (:func:`sequence_estimate`),
        as :func:`oodcalc.predict` tells its phases (the CLI draws a bar on stderr).

    Returns
    -------
    SequenceResult
        ``R[i][j]``: the loss on domain j (0 = source V) after stage i (0 = after
        pretraining); ``steps``/``reached`` per stage; ``metrics`` (backward transfer,
        forgetting, forward transfer, in loss; definitions and sources in
        :mod:`oodcalc.finetune.sequence`); ``joint`` (GD on every domain at once from
        ``Q^(T1)``); ``to_dict()`` is ``oodcalc sequence --json``.

    Raises
    ------
    InputError
        For something that is not a sequence of shifts, or a bad stage entry (named
        ``stages[i]``).
    ComputationError
        Before any work, if pretraining or the first stage is estimated past twice its
        cap (:func:`oodcalc.limits.check_simulation`); after, if pretraining does not
        meet its rule within its cap. A later stage that does not is reported
        (``reached``), and the next one starts where it stopped.

    Example
    -------
    >>> import oodcalc as oc
    >>> result = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
    >>> result.T1, result.R.shape, all(result.reached)
    (357, (3, 3), True)
    >>> bwt = ((result.R[0, 0] - result.R[2, 0]) + (result.R[1, 1] - result.R[2, 1])) / 2
    >>> bool(abs(result.metrics["bwt"].value - bwt) < 1e-15), result.steps
    (True, [360, 331])
    """
    shifts = check_shifts(shifts)
    protocol = Protocol() if protocol is None else protocol
    if not isinstance(protocol, Protocol):
        from .errors import InputError, shorten
        raise InputError("protocol", shorten(repr(protocol)), "expected an oc.Protocol")
    plans = stage_protocols(protocol, shifts.S, stages)
    check_stage_weights(plans, shifts.K)
    # what a simulator refuses for its one fine-tuning (estimated from the logits at α*),
    # for the first stage; the later stages start elsewhere and have no such estimate
    first = shifts.gram[0, 1]
    diagonal = np.diag(first) if np.array_equal(first, np.diag(np.diag(first))) else None
    limits.check_simulation(shifts.K, protocol, diagonal=diagonal,
                            M=first if diagonal is None else None)
    expected = _estimated_steps(shifts, protocol) if progress is not None else None
    if progress is not None:
        progress("pretraining", 0, expected[0])
    run = pretrain_logits(shifts.K, protocol.eps, protocol.eta,
                          limits.pretrain_cap(shifts.K, protocol))
    if progress is not None:
        progress("pretraining", int(run.steps[0]), int(run.steps[0]))
    return run_sequence(shifts, run.z[0], protocol, T1=int(run.steps[0]), stages=plans,
                        progress=progress, expected=None if expected is None
                        else expected[1:])


def _estimated_steps(shifts: Shifts, protocol: Protocol) -> list[float]:
    """Pretraining's, each stage's and the joint reference's estimated steps: stage i as
    plain fine-tuning on U_i from the logits at α* (``M = G[0, i]``; a later stage starts
    elsewhere, and interventions change it: an order of magnitude, no more), capped at
    its cap; the joint reference as the longest stage."""
    K = shifts.K
    out = [min(estimates.pretrain_steps(K, protocol.eps, protocol.eta),
               float(limits.pretrain_cap(K, protocol)))]
    for i in range(1, shifts.S + 1):
        if protocol.ft_steps is not None:
            out.append(float(protocol.ft_steps))
            continue
        M = shifts.gram[0, i]
        diagonal = np.diag(M) if np.array_equal(M, np.diag(np.diag(M))) else None
        log_t = estimates.finetune_log_steps(K, protocol.eps, protocol.eta_ft,
                                             diagonal=diagonal,
                                             M=M if diagonal is None else None,
                                             eps_ft=protocol.eps_ft)[0]
        out.append(min(estimates.exp_steps(log_t), float(protocol.finetune_cap)))
    out.append(min(max(out[1:]), float(protocol.max_steps)))
    return out


def sequence_estimate(shifts: Shifts, protocol: Protocol | None = None) -> tuple[float, str]:
    """How long :func:`sequence` will take, to the order of magnitude, before it runs:
    ``(seconds, what the time goes to)``, from the cost model
    (:func:`oodcalc.estimates.sequence_seconds`) on the estimated steps of every phase.

    Example
    -------
    >>> import oodcalc as oc
    >>> from oodcalc.continual import sequence_estimate
    >>> seconds, words = sequence_estimate(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
    >>> seconds < 10, words
    (True, '2 stages ≈ 674 steps and the joint reference ≈ 361 steps on 3 domains of 2×2 logits')
    """
    shifts = check_shifts(shifts)
    protocol = Protocol() if protocol is None else protocol
    steps = _estimated_steps(shifts, protocol)
    S, K = shifts.S, shifts.K
    seconds = estimates.sequence_seconds(K, S, steps[0], steps[1:-1], steps[-1],
                                           protocol.eta)
    return seconds, (f"{S} stage{'s' if S > 1 else ''} ≈ {sum(steps[1:-1]):,.0f} steps and "
                     f"the joint reference ≈ {steps[-1]:,.0f} steps on {S + 1} domains of "
                     f"{K}×{K} logits")
