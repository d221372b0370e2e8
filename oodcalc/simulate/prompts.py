"""Simulator (b): finite-prompt training, the transformer the paper idealises.

A prompt holds ``N`` tokens drawn i.i.d. uniformly from the features (or, ``balanced``,
each feature exactly ``N/K`` times), a query drawn uniformly from the same features, a
task ``w ~ N(0, I_d)`` and labels ``y = wᵀx``. The
model is one softmax attention layer, ``ŷ = Σ_i softmax_i(x_iᵀ Q x_query) · y_i``, the
softmax taken over the ``N`` token vectors of that prompt (no grouping by feature). The
loss is the sampled squared error ``½ mean_b (ŷ_b − wᵀx_query,b)²``, whose population limit
is the protocol's ``L = Σ_k L_k`` (docs/theory.md); gradient descent runs on ``Q ∈ R^{d×d}`` with the gradient
of that sampled loss. α and β are read off by projecting ``Q`` on the features.

Two ways to draw prompts (``resample``):

* ``True`` (default): a fresh mini-batch of ``batch`` prompts at every step (stochastic
  gradients; the noise averages over the trajectory, so the finite-N bias shows);
* ``False``: one fixed sample of ``batch`` prompts per phase, full-batch gradient descent on
  its empirical loss (deterministic given the seed; its sampling error stays frozen in).

The stopping rule (``stop``). The protocol stops at the first step with ``L_k(Q) <= ε/K`` for
every k, where ``L_k`` is the population loss. With sampled losses there are two honest
readings, and the simulator offers both:

* ``"population"`` (default): evaluate the rule on the population errors
  ``e_k(Q) = ½‖F softmax(FᵀQ f_k) − f_k‖²`` of the current iterate, computed from ``Q`` and
  the explicit feature vectors. The rule is then the same deterministic function of ``Q`` as
  in the theory, so any difference in T1, T2, α, β comes from the finite-prompt gradients
  alone, not from a noisy stopping decision. This is what ``oodcalc verify`` uses.
* ``"heldout"``: evaluate it on a fixed held-out sample of ``holdout`` prompts (queries
  balanced over the features, ``holdout / K`` each): ``ê_k`` is the mean sampled squared
  error ``½(ŷ − y)²`` of the held-out prompts with query ``f_k``. This is what a
  practitioner without the population formula would do. Its estimate has a finite-N floor:
  a prompt that lacks the query's feature has error ``>= ½`` in expectation over w, which
  happens with probability ``(1 − 1/K)^N``, so small ``N`` may never meet a small ``ε``
  (reported as a ComputationError naming the phase); balanced prompts have no such floor.

Token counts. Averaged over the task, a prompt with ``c_n`` tokens of ``f_n`` has the error
``½‖Σ_n a_n f_n − f_k‖²`` with ``a = softmax(z_k + log c)`` (:func:`task_averaged_errors`):
a balanced prompt (``c_n = N/K``) has the population ``e_k`` exactly, for every N and for
overlapping features as for orthonormal ones; i.i.d. tokens scatter the counts and raise
the mean error by ``½tr(HΣ)/N + O(1/N²)`` (:mod:`oodcalc.simulate.token_counts`).

Everything is seeded through one ``np.random.SeedSequence(seed)``, spawned into one stream
per phase and one for the held-out sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import limits
from ..errors import ComputationError, InputError, param
from ..report import OOD, FeatureForgetting, Finetune, Pretrain, Report, trend
from ..setting import Setting, check_setting
from .population import Interventions, errors_and_gradient, logit_path

__all__ = [
    "Phase", "Prompts", "STOP_RULES", "attention_weights", "check_balanced",
    "check_replay_batch", "check_simulation_inputs", "finetune_on_prompts",
    "heldout_errors", "phase_generators", "pretrain_prompts", "sample_prompts",
    "sampled_loss_and_gradient", "simulate_prompts", "task_averaged_errors",
    "train_on_prompts",
]


STOP_RULES = ("population", "heldout")


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts with explicit token vectors.

    ``X``: tokens ``(B, N, d)``; ``xq``: queries ``(B, d)``; ``y``: token labels ``(B, N)``;
    ``yq``: the query's label ``(B,)``; ``q``: the query's feature index ``(B,)``;
    ``tokens``: the feature index of every token ``(B, N)`` (used only by diagnostics).
    """

    X: np.ndarray
    xq: np.ndarray
    y: np.ndarray
    yq: np.ndarray
    q: np.ndarray
    tokens: np.ndarray

    # Training computes with the prompts innermost: the softmax's sums over N tokens then
    # run across all prompts at once (over an axis of length N they cost ~90 ns a prompt).
    # Sampled prompts are held in this layout (X and y are views of it): no copy. Not
    # cached, so that prompts built otherwise and changed in place are read as they are.
    @property
    def X_last(self) -> np.ndarray:
        """``X`` as ``(d, N, B)``, contiguous."""
        return np.ascontiguousarray(self.X.transpose(2, 1, 0))

    @property
    def y_last(self) -> np.ndarray:
        """``y`` as ``(N, B)``, contiguous."""
        return np.ascontiguousarray(self.y.T)


def sample_prompts(F: np.ndarray, N: int, B: int, rng: np.random.Generator,
                   queries: np.ndarray | None = None, balanced: bool = False) -> Prompts:
    """``B`` prompts over the features ``F`` (d × K); ``queries`` fixes the query indices.
    Tokens i.i.d. uniform over the features, or ``balanced``: each feature exactly
    ``N/K`` times (N a multiple of K; the order is immaterial to the softmax)."""
    d, K = F.shape
    check_balanced(balanced, N, K)
    if balanced:
        tokens = np.broadcast_to(np.repeat(np.arange(K), N // K), (B, N))
    else:
        tokens = rng.integers(K, size=(B, N))
    q = rng.integers(K, size=B) if queries is None else np.asarray(queries)
    w = rng.standard_normal((B, d))
    # Built in the training layout; X and y are views of it in theirs.
    X_last = np.take(F, tokens.T, axis=1)  # (d, N, B): the token vectors themselves
    y_last = np.einsum("dnb,bd->nb", X_last, w)
    xq = F.T[q]                           # (B, d)
    yq = np.einsum("bd,bd->b", xq, w)
    return Prompts(X_last.transpose(2, 1, 0), xq, y_last.T, yq, q, tokens)


def attention_weights(Q: np.ndarray, P: Prompts) -> np.ndarray:
    """``softmax_i(x_iᵀ Q x_query)`` over the N tokens of every prompt, shape ``(B, N)``."""
    return _attention(Q, P).T


def _attention(Q: np.ndarray, P: Prompts) -> np.ndarray:
    """:func:`attention_weights` as ``(N, B)``."""
    logits = np.einsum("dnb,db->nb", P.X_last, Q @ P.xq.T)    # x_iᵀ (Q x_query)
    logits -= logits.max(axis=0)
    a = np.exp(logits, out=logits)     # in place: a fresh array costs page faults here
    a /= a.sum(axis=0)                 # that outweigh this arithmetic
    return a


def sampled_loss_and_gradient(Q: np.ndarray, P: Prompts, query_weights: np.ndarray | None = None
                              ) -> tuple[float, np.ndarray, np.ndarray]:
    """Sampled loss ``½ mean_b r_b²`` (``r = ŷ − y_query``), its gradient in Q, and the
    per-prompt squared errors ``½ r_b²``. With ``query_weights`` (one per feature), the
    gradient is that of ``½ mean_b c_(q_b) r_b²`` (the loss returned stays unweighted).

    ``∂(½r²)/∂s_i = r · a_i (y_i − ŷ)`` for the logit ``s_i = x_iᵀ Q x_query`` and
    ``∂s_i/∂Q = x_i x_queryᵀ``.
    """
    a, y = _attention(Q, P), P.y_last                          # (N, B) both
    y_hat = np.einsum("nb,nb->b", a, y)
    r = y_hat - P.yq
    g = np.subtract(y, y_hat)
    g *= a
    g *= r if query_weights is None else r * query_weights[P.q]   # ∂(½ c r²)/∂s_i
    token_sum = np.einsum("nb,dnb->db", g, P.X_last)           # Σ_i g_i x_i, (d, B)
    grad = token_sum @ P.xq / len(r)
    half_sq = 0.5 * r**2
    return float(half_sq.mean()), grad, half_sq


def task_averaged_errors(Q: np.ndarray, P: Prompts) -> np.ndarray:
    """Each prompt's ``½ r²`` averaged over the task ``w ~ N(0, I_d)`` given its tokens:
    ``r = wᵀ(Σ_i a_i x_i − x_query)``, so ``E_w[½ r²] = ½‖Σ_i a_i x_i − x_query‖²``,
    shape ``(B,)`` (for a balanced prompt with query ``f_k``: the population ``e_k``)."""
    a = _attention(Q, P)                                          # (N, B)
    residual = np.einsum("nb,dnb->bd", a, P.X_last) - P.xq
    return 0.5 * np.einsum("bd,bd->b", residual, residual)


def heldout_errors(Q: np.ndarray, P: Prompts, K: int) -> np.ndarray:
    """``ê_k``: mean of ``½(ŷ − y)²`` over the held-out prompts with query ``f_k``."""
    half_sq = sampled_loss_and_gradient(Q, P)[2]
    return np.bincount(P.q, weights=half_sq, minlength=K) / np.bincount(P.q, minlength=K)


@dataclass
class Phase:
    Q: np.ndarray
    steps: int
    path: list              # Q^(t), t = 0 .. steps
    sampled_loss: list      # the training (sampled) loss at every step


def train_on_prompts(Q: np.ndarray, F: np.ndarray, eta: float, eps: float, max_steps: int,
                     phase: str, rng: np.random.Generator, N: int, batch: int,
                     resample: bool, heldout: Prompts | None, balanced: bool = False) -> Phase:
    """GD on the sampled loss until the stopping rule holds (see the module docstring);
    a negative ``eps`` (``setting.NEVER``) runs exactly ``max_steps`` steps."""
    K = F.shape[1]
    Q = Q.copy()
    fixed = None if resample else sample_prompts(F, N, batch, rng, balanced=balanced)
    path, losses = [], []
    for t in range(max_steps + 1):
        path.append(Q.copy())
        if heldout is None:
            errors = errors_and_gradient(Q, F)[0]
        else:
            errors = heldout_errors(Q, heldout, K)
        prompts = fixed if fixed is not None else sample_prompts(F, N, batch, rng,
                                                                 balanced=balanced)
        loss, grad, _ = sampled_loss_and_gradient(Q, prompts)
        losses.append(loss)
        if np.all(errors <= eps) or (eps < 0 and t == max_steps):
            return Phase(Q, t, path, losses)
        if t < max_steps:
            Q -= eta * grad
    rule = "population errors" if heldout is None else "held-out sampled errors"
    raise ComputationError(
        f"{phase} (finite-prompt simulator, N = {N}, batch = {batch}) did not meet the "
        f"stopping rule on the {rule} within max_steps = {max_steps} (eps = {eps:g}, "
        f"eta = {eta:g}); raise N, --eps or --max-steps")


def finetune_on_prompts(Q1: np.ndarray, U: np.ndarray, V: np.ndarray, protocol,
                        rng: np.random.Generator, N: int, batch: int, resample: bool,
                        heldout: Prompts | None, balanced: bool = False) -> Phase:
    """Fine-tuning with the protocol's interventions, each done to the sampled gradient
    on Q: a share λ of every batch's prompts comes from V (replay: ``λ·batch`` of them,
    the rest from U), the U prompts' gradient is weighted by their query's ``c_k`` and
    projected (``P_l ∇ P_r``, ``P`` the projector off span(V) on a projected side), and
    the pull adds ``μ(Q − Q1)``. Its expectation is the population step of
    :func:`oodcalc.simulate.population.finetune`; it stops as that one does (the weighted
    queries within ε, or only queries no update reaches left above it), except that a
    stochastic step never settles exactly: a pull that holds fine-tuning short of its rule
    runs to the cap."""
    p = protocol
    K = U.shape[1]
    from_v = round(p.replay * batch)          # a whole number (check_replay_batch)
    plan = Interventions.of(p, U, V)
    covered, frozen = plan.covered, plan.frozen
    c = None if p.weights is None else plan.weights
    def draw():
        return (sample_prompts(U, N, batch - from_v, rng, balanced=balanced),
                sample_prompts(V, N, from_v, rng, balanced=balanced) if from_v else None)
    fixed = None if resample else draw()
    Q, path, losses = Q1.copy(), [], []
    for t in range(p.finetune_cap + 1):
        path.append(Q.copy())
        errors = (errors_and_gradient(Q, U)[0] if heldout is None
                  else heldout_errors(Q, heldout, K))
        on_u, on_v = fixed if fixed is not None else draw()
        loss, grad, _ = sampled_loss_and_gradient(Q, on_u, c)
        losses.append(loss)
        within = (errors <= p.eps_ft) | ~covered
        if (p.ft_steps is None and (within | frozen).all()) or t == p.finetune_cap:
            break
        step = plan.projected(grad * ((batch - from_v) / batch))
        if on_v is not None:
            step = step + sampled_loss_and_gradient(Q, on_v)[1] * (from_v / batch)
        if p.l2:
            step = step + p.l2 * (Q - Q1)
        Q = Q - p.eta_ft * step
    if p.ft_steps is None and not (within | frozen).all():
        raise ComputationError(
            f"fine-tuning (finite-prompt simulator, N = {N}, batch = {batch}, with "
            f"{', '.join(f'{k} = {v}' for k, v in p.interventions.items())}) did not meet "
            f"the stopping rule within max_steps = {p.finetune_cap} (eps = {p.eps_ft:g}, "
            f"eta = {p.eta_ft:g}); raise N, --eps or --max-steps")
    return Phase(Q, t, path, losses)


def check_replay_batch(protocol, batch: int) -> None:
    """Replay takes a whole number of each batch's prompts from V."""
    share = protocol.replay * batch
    if protocol.replay and abs(share - round(share)) > 1e-9:
        raise InputError(param("replay"), protocol.replay, f"expected a share λ with λ × batch "
                         f"a whole number of prompts (batch = {batch}: λ = k/{batch})")


def check_balanced(balanced: bool, N: int, K: int) -> None:
    """Balanced prompts hold every feature the same number of times."""
    if not isinstance(balanced, (bool, np.bool_)):
        raise InputError("balanced", balanced, "expected True or False")
    if balanced and N % K:
        raise InputError(param("N"), N, f"balanced prompts hold each of the K = {K} features "
                         f"N/K times: expected a multiple of {K}")


def check_simulation_inputs(N: int, batch: int, stop: str, holdout: int, K: int,
                            balanced: bool = False) -> None:
    for name, value, low in (("N", N, 1), ("batch", batch, 1), ("holdout", holdout, K)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InputError(name, value, f"expected an integer >= {low}")
    if stop not in STOP_RULES:
        raise InputError("stop", stop, f"expected one of {', '.join(STOP_RULES)}")
    check_balanced(balanced, N, K)


def phase_generators(seed: int) -> tuple[np.random.Generator, ...]:
    """One independent stream each for pretraining, fine-tuning and the held-out sample."""
    return tuple(np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))


def pretrain_prompts(V: np.ndarray, eta: float, eps: float, max_steps: int, N: int,
                     batch: int, *, resample: bool = True, seed: int = 0,
                     balanced: bool = False) -> Phase:
    """Pretraining alone (population stopping rule), with the same seeding as
    :func:`simulate_prompts`: ``pretrain_prompts(...).Q`` is that run's ``Q^(T1)``."""
    check_simulation_inputs(N, batch, "population", V.shape[1], V.shape[1], balanced)
    return train_on_prompts(np.zeros((V.shape[0],) * 2), V, eta, eps, max_steps,
                            "pretraining", phase_generators(seed)[0], N, batch, resample, None,
                            balanced)


def simulate_prompts(setting: Setting, N: int = 32, batch: int = 1024, *,
                     resample: bool = True, seed: int = 0, stop: str = "population",
                     holdout: int = 4096, balanced: bool = False) -> Report:
    """Train the transformer on sampled prompts: pretrain over V from ``Q = 0``,
    evaluate on U, fine-tune on prompts over U.

    Each prompt has ``N`` tokens drawn from the features, a query and a task
    ``w ~ N(0, I_d)``; the softmax runs over the prompt's tokens and the gradient is that
    of the sampled squared error (see the module docstring for the details and the two
    stopping rules).

    Parameters
    ----------
    setting : Setting
        Geometry and protocol, as for :func:`oodcalc.predict`.
    N : int, default 32
        Tokens per prompt.
    batch : int, default 1024
        Prompts per gradient step.
    resample : bool, keyword-only, default True
        A fresh mini-batch every step (``True``) or one fixed sample per phase.
    seed : int, keyword-only, default 0
        Seeds everything; same inputs and seed, same report.
    stop : {"population", "heldout"}, keyword-only
        Evaluate the stopping rule on the population errors of the current ``Q``
        (default) or on ``holdout`` held-out prompts.
    holdout : int, keyword-only, default 4096
        Held-out prompts for ``stop="heldout"``.
    balanced : bool, keyword-only, default False
        Every prompt (training and held-out) holds each feature exactly ``N/K`` times
        (``N`` a multiple of K) instead of ``N`` i.i.d. uniform tokens: its task-averaged
        error is then the population ``e_k`` for any N (no finite-N bias from the counts).

    Returns
    -------
    Report
        Population quantities of the trained ``Q`` (α, β, e_k from the explicit vectors),
        so they compare field by field with the theory; the sampled training losses are
        in ``trajectories``.

    Example
    -------
    >>> import oodcalc as oc
    >>> from oodcalc.simulate import simulate_prompts
    >>> setting = oc.Setting(oc.parallel_shift([1, -0.9]))
    >>> report = simulate_prompts(setting, N=16, batch=256, seed=0)
    >>> report.source
    'simulation: finite prompts (N = 16, fresh mini-batches of 256, seed 0)'
    >>> report.pretrain.T1 < oc.predict(setting).pretrain.T1   # finite prompts stop sooner
    True
    """
    geo, proto = check_setting(setting).geometry, setting.protocol
    K = geo.K
    check_simulation_inputs(N, batch, stop, holdout, K, balanced)
    check_replay_batch(proto, batch)
    limits.check_prompts(K, geo.d, proto, N=N, batch=batch, holdout=holdout,
                         heldout=stop == "heldout")
    limits.check_simulation(K, proto, diagonal=geo.known_diagonal,
                            M=geo.M if geo.known_diagonal is None else None,
                            grams=None if geo.orthonormal else (geo.G_V, geo.G_U))
    V, U = geo.V, geo.U
    pre_rng, ft_rng, hold_rng = phase_generators(seed)
    queries = np.repeat(np.arange(K), holdout // K)       # balanced over the features
    hold_v = hold_u = None
    if stop == "heldout":
        hold_v = sample_prompts(V, N, len(queries), hold_rng, queries=queries,
                                balanced=balanced)
        hold_u = sample_prompts(U, N, len(queries), hold_rng, queries=queries,
                                balanced=balanced)

    pre = train_on_prompts(np.zeros((geo.d, geo.d)), V, proto.eta, proto.eps,
                           proto.max_steps, "pretraining", pre_rng,
                           N, batch, resample, hold_v, balanced)
    Q1 = pre.Q
    if proto.interventions:
        ft = finetune_on_prompts(Q1, U, V, proto, ft_rng, N, batch, resample, hold_u,
                                 balanced)
    else:
        ft = train_on_prompts(Q1, U, proto.eta_ft, proto.finetune_stop, proto.finetune_cap,
                              "fine-tuning", ft_rng, N, batch, resample, hold_u, balanced)
    Q2 = ft.Q


    source_loss = np.array([errors_and_gradient(Q, V)[0] for Q in ft.path]) / K
    forgetting = [FeatureForgetting(k=k + 1, F_k=float(source_loss[-1, k] - source_loss[0, k]),
                                    loss_before=float(source_loss[0, k]),
                                    loss_after=float(source_loss[-1, k]),
                                    trend=trend(source_loss[:, k]))
                  for k in range(K)]
    errors_u, attn_u, _ = errors_and_gradient(Q1, U)
    parameters = setting.describe() | {"simulator": {
        "kind": "prompts", "N": N, "batch": batch, "resample": resample, "seed": seed,
        "stop": stop, **({"holdout": len(queries)} if stop == "heldout" else {}),
        **({"balanced": True} if balanced else {})}}
    return Report(
        source=f"simulation: finite prompts (N = {N}, {'balanced, ' if balanced else ''}"
               f"{'fresh mini-batches' if resample else 'fixed sample'} of {batch}, seed {seed})",
        parameters=parameters,
        pretrain=Pretrain(T1=pre.steps, z=V.T @ Q1 @ V, error=errors_and_gradient(Q1, V)[0]),
        ood=OOD(z=U.T @ Q1 @ U, attention=attn_u, error=errors_u),
        finetune=Finetune(T2=ft.steps, z_ood=U.T @ Q2 @ U, z_source=V.T @ Q2 @ V,
                          error_ood=errors_and_gradient(Q2, U)[0]),
        forgetting=forgetting,
        trajectories={"pretrain": logit_path(V, pre.path),
                      "finetune_ood": logit_path(U, ft.path),
                      "finetune_source": logit_path(V, ft.path),
                      "finetune_source_loss": source_loss,
                      "pretrain_sampled_loss": np.array(pre.sampled_loss),
                      "finetune_sampled_loss": np.array(ft.sampled_loss)},
    )
