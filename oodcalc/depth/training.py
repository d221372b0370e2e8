"""One seed of the depth experiment: pretrain on V, then for each γ fine-tune a copy on U.

Data (per seed, K = 2): a random orthonormal basis q1, q2, q3 of R^15 (width − 1
dimensions), ``V = [q1, q2]`` and ``U = [q1, γ q2 + √(1−γ²) q3]``. A prompt has N context
tokens whose features are drawn uniformly from the K features, a query feature, a task
``w ~ N(0, I_15)`` and labels ``y = wᵀx``; tokens are ``[x; y]``, the query ``[x_q; 0]``.
Training draws ``batch`` fresh prompts every step (query uniform); the loss is
``½ mean (ŷ − y_q)²``, which is ``L = Σ_k e_k / K`` as in the theory. The evaluation prompts
are fixed per seed (half ask each feature); the V and U evaluation sets share their
token choices, queries and tasks, so F is a paired difference.

Random streams (seed s): the basis and evaluation prompts, the model initialisation, the
pretraining batches and the fine-tuning batches each have their own generator derived from
s, so every depth, architecture and optimizer sees the same data for the same seed, and
every γ sees the same fine-tuning batches (common random numbers along the γ-curve).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..report import jsonable
from .arms import Intervention, replay_count, weighted_loss
from .models import build, feature_logits
from .protocol import DepthConfig

__all__ = [
    "Design", "Evaluation", "Phase", "Prompts", "STREAMS", "feature_sets", "generator", "mixed",
    "random_basis", "reproducible_torch", "run_seed", "stream_seed", "train",
]


STREAMS = {"data": 0, "init": 1, "pretrain": 2, "finetune": 3}


def stream_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one random stream of one seed (numpy's SeedSequence mixing)."""
    state = np.random.SeedSequence([int(seed), STREAMS[stream]]).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def generator(seed: int, stream: str) -> torch.Generator:
    return torch.Generator().manual_seed(stream_seed(seed, stream))


@contextlib.contextmanager
def reproducible_torch():
    """One intra-op thread and deterministic kernels (the same numbers for any --workers);
    the caller's settings are restored afterwards."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


@dataclass(frozen=True)
class Design:
    """Which feature each token shows, which the query asks, and the tasks: (B, N), (B,), (B, D)."""

    tokens: torch.Tensor
    queries: torch.Tensor
    tasks: torch.Tensor

    @staticmethod
    def draw(gen: torch.Generator, prompts: int, N: int, K: int, D: int,
             balanced: bool = False) -> "Design":
        tokens = torch.randint(0, K, (prompts, N), generator=gen)
        queries = (torch.arange(prompts) % K if balanced
                   else torch.randint(0, K, (prompts,), generator=gen))
        return Design(tokens, queries, torch.randn(prompts, D, generator=gen))

    def head(self, n: int) -> "Design":
        return Design(self.tokens[:n], self.queries[:n], self.tasks[:n])


@dataclass(frozen=True)
class Prompts:
    context: torch.Tensor   # (B, N, width): [x_i; y_i]
    query: torch.Tensor     # (B, width): [x_q; 0]
    target: torch.Tensor    # (B,): y_q = wᵀ x_q
    asks: torch.Tensor      # (B,): the query's feature index

    @staticmethod
    def build(features: torch.Tensor, design: Design) -> "Prompts":
        """``features`` is D × K, one column per feature."""
        x = features.T[design.tokens]                              # (B, N, D)
        y = torch.einsum("bnd,bd->bn", x, design.tasks)
        xq = features.T[design.queries]
        context = torch.cat([x, y[..., None]], -1)
        query = torch.cat([xq, torch.zeros(len(xq), 1)], -1)
        return Prompts(context, query, (xq * design.tasks).sum(-1), design.queries)


def feature_sets(basis: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``V = [q1, q2]``, ``U = [q1, γ q2 + √(1−γ²) q3]`` (orthonormal columns)."""
    q1, q2, q3 = basis.T
    V = torch.stack([q1, q2], 1)
    U = torch.stack([q1, gamma * q2 + math.sqrt(max(0.0, 1.0 - gamma * gamma)) * q3], 1)
    return V, U


def mixed(target: torch.Tensor, source: torch.Tensor, design: Design, m: int) -> Prompts:
    """Replay's batch: the draw's first ``B − m`` prompts on the target features, its last
    ``m`` on the source's (same tokens, queries and tasks as plain's draw)."""
    B = len(design.queries)
    head = Prompts.build(target, design.head(B - m))
    tail = Prompts.build(source, Design(design.tokens[B - m:], design.queries[B - m:],
                                        design.tasks[B - m:]))
    return Prompts(*(torch.cat([a, b]) for a, b in zip(
        (head.context, head.query, head.target, head.asks),
        (tail.context, tail.query, tail.target, tail.asks))))


def random_basis(gen: torch.Generator, D: int, count: int = 3) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(D, count, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(torch.float32)


class Evaluation:
    """Per-feature conditional errors e_k = ½ E[(ŷ − y_q)² | query asks feature k] on fixed
    prompts, evaluated in chunks (a few times faster than one large batch on CPU)."""

    CHUNK = 512

    def __init__(self, prompts: Prompts, K: int) -> None:
        self.prompts, self.K = prompts, K
        self.counts = np.array([int((prompts.asks == k).sum()) for k in range(K)], dtype=float)

    def _sums(self, model: torch.nn.Module, bound: float | None) -> np.ndarray | None:
        """Per-feature sums of ½(ŷ − y_q)², chunk by chunk. With a bound: None as soon as a
        feature's partial sum exceeds bound × its prompt count; the sums only grow, so that
        feature's e_k is then above the bound whatever the remaining chunks hold."""
        p, sums = self.prompts, np.zeros(self.K)
        limit = None if bound is None else bound * self.counts * (1 + 1e-12)  # > any rounding
        with torch.inference_mode():
            for i in range(0, len(p.target), self.CHUNK):
                out = model(p.context[i:i + self.CHUNK], p.query[i:i + self.CHUNK])
                squared = 0.5 * (out - p.target[i:i + self.CHUNK]).double() ** 2
                asks = p.asks[i:i + self.CHUNK]
                for k in range(self.K):
                    sums[k] += squared[asks == k].sum().item()
                if limit is not None and np.any(sums > limit):
                    return None
        return sums

    def errors(self, model: torch.nn.Module) -> np.ndarray:
        return self._sums(model, None) / self.counts

    def within(self, model: torch.nn.Module, eps: float,
               covered: np.ndarray | None = None) -> np.ndarray | None:
        """The errors if every e_k <= eps, else None (decided as soon as it is certain: the
        same decision as ``errors(model).max() <= eps``, usually from a fraction of the
        prompts while the errors are far above eps). ``covered``: only these features
        count (an arm's rule, oodcalc.depth.arms)."""
        if covered is None:
            sums = self._sums(model, eps)
        else:
            sums = self._sums(model, np.where(covered, eps, np.inf))
        if sums is None:
            return None
        error = sums / self.counts
        ok = error.max() <= eps if covered is None else np.all(error[covered] <= eps)
        return error if ok else None


@dataclass
class Phase:
    steps: int
    converged: bool
    diverged: bool
    error: np.ndarray                 # e_k on the full evaluation set at the end
    curve: list[list[float]] | None   # e_k of the watched set at every step (fine-tuning)
    seconds: float
    target_curve: list[list[float]] | None = None   # OOD e_k at the same steps


def train(model: torch.nn.Module, features: torch.Tensor, config: DepthConfig,
          gen: torch.Generator, full: Evaluation, watch: Evaluation | None = None,
          batches: Callable[[], Prompts] | None = None, steps: int | None = None,
          intervention: "Intervention | None" = None, source: torch.Tensor | None = None,
          target_watch: Evaluation | None = None) -> Phase:
    """Train on fresh prompts of ``features`` until every e_k <= eps on ``full``, checked
    before every update: the phase stops at the first step where the rule holds; with
    ``steps``, exactly that many updates instead (no rule; ``converged`` when they ran).
    ``watch`` (the source's first prompts, during fine-tuning) is recorded at every step:
    the source-loss curve. ``batches``, if given, replaces the draw from ``gen``: it returns
    the next training batch (the ladder feeds the finite-prompt simulator's draws through
    it); ``full`` and ``watch`` need only ``errors(model)`` and ``within(model, eps)``.
    ``intervention`` (fine-tuning only): the arm's step (oodcalc.depth.arms); replay's
    share of each drawn batch is built on ``source`` (the last prompts of the draw, so the
    random stream is plain's); ``target_watch`` records the OOD curve beside ``watch``'s."""
    start = time.perf_counter()
    optimizer = (torch.optim.SGD(model.parameters(), lr=config.lr) if config.optimizer == "sgd"
                 else torch.optim.Adam(model.parameters(), lr=config.lr))
    curve = [] if watch is not None else None
    target_curve = [] if target_watch is not None else None
    D, K = config.features, config.K
    covered = None if intervention is None else intervention.covered()
    if covered is not None and covered.all():
        covered = None
    from_source = 0 if intervention is None or batches is not None else \
        replay_count(intervention.arm, config.batch)

    def end(step, converged, diverged, error=None):
        error = full.errors(model) if error is None else error
        return Phase(step, converged, diverged, error, curve, time.perf_counter() - start,
                     target_curve)

    for step in range(config.max_steps + 1 if steps is None else steps + 1):
        if curve is not None:
            curve.append(watch.errors(model).tolist())
        if target_curve is not None:
            target_curve.append(target_watch.errors(model).tolist())
        if steps is not None:
            if step == steps:
                return end(step, True, False)
        else:
            error = full.within(model, config.eps, covered)
            if error is not None:
                return end(step, True, False, error)
            if step == config.max_steps:
                return end(step, False, False)
        if batches is not None:
            batch = batches()
        else:
            design = Design.draw(gen, config.batch, config.N, K, D)
            batch = (Prompts.build(features, design) if not from_source
                     else mixed(features, source, design, from_source))
        weights = (None if intervention is None
                   else intervention.sample_weights(batch.query[:, :-1]))
        loss = weighted_loss(model(batch.context, batch.query), batch.target, weights)
        if not torch.isfinite(loss):
            return end(step, False, True)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if intervention is not None:
            intervention.after_backward()
        optimizer.step()
    raise AssertionError("unreachable")


#: pretrained models by (configuration without its arm, seed), oldest dropped first (a
#: model of width 16 is a few kB to ~50 kB)
PRETRAINED: dict = {}
PRETRAINED_MAX = 64


def run_seed(config: DepthConfig, seed: int, gammas: Sequence[float]) -> list[dict[str, Any]]:
    """Pretrain once on V, then fine-tune a copy on U for each γ; one record per γ."""
    with reproducible_torch():
        return _run_seed(config, seed, gammas)


def _run_seed(config: DepthConfig, seed: int, gammas: Sequence[float]) -> list[dict[str, Any]]:
    D, K = config.features, config.K
    data = generator(seed, "data")
    basis = random_basis(data, D)
    design = Design.draw(data, config.eval_prompts, config.N, K, D, balanced=True)
    V, _ = feature_sets(basis, 0.0)

    source = Prompts.build(V, design)
    source_full = Evaluation(source, K)
    n = config.curve_prompts
    source_curve = Evaluation(Prompts(source.context[:n], source.query[:n], source.target[:n],
                                      source.asks[:n]), K)
    # the arms share one pretraining per seed (its stream never reads the arm): trained
    # once per process and reused, the same numbers
    key = (config.with_(arm=None), seed)
    if key not in PRETRAINED:
        model = build(config.arch, config.layers, config.width, stream_seed(seed, "init"))
        pre = train(model, V, config, generator(seed, "pretrain"), source_full)
        pretrain = {"T1": pre.steps, "converged": pre.converged, "diverged": pre.diverged,
                    "error": pre.error.tolist(), "seconds": pre.seconds,
                    "logits": feature_logits(model, V)}
        if len(PRETRAINED) >= PRETRAINED_MAX:
            PRETRAINED.pop(next(iter(PRETRAINED)))
        PRETRAINED[key] = (model, pre, pretrain)
    model, pre, pretrain = PRETRAINED[key]
    pretrain = copy.deepcopy(pretrain)

    records = []
    for gamma in gammas:
        parameters = config.run_parameters(seed, gamma)
        record: dict[str, Any] = {"parameters": parameters, "pretrain": pretrain}
        if pre.converged:
            _, U = feature_sets(basis, parameters["gamma"])
            target = Prompts.build(U, design)
            target_full = Evaluation(target, K)
            target_curve = Evaluation(Prompts(target.context[:n], target.query[:n],
                                              target.target[:n], target.asks[:n]), K)
            tuned = copy.deepcopy(model)
            ood = target_full.errors(tuned)
            intervention = None if config.arm is None else Intervention(
                config.arm, tuned, V, U, lambda: tuned(source.context, source.query))
            ft = train(tuned, U, config, generator(seed, "finetune"), target_full,
                       watch=source_curve, steps=config.ft_steps, intervention=intervention,
                       source=V, target_watch=target_curve)
            after = source_full.errors(tuned)
            F_k = (after - pre.error) / K            # L_{v_k} = e_k / K, as in the theory
            record.update(
                ood_error=ood.tolist(),
                finetune={"T2": ft.steps, "converged": ft.converged, "diverged": ft.diverged,
                          "error": ft.error.tolist(), "seconds": ft.seconds,
                          "source_curve": ft.curve, "target_curve": ft.target_curve,
                          "logits": feature_logits(tuned, V)},
                source_before=pre.error.tolist(), source_after=after.tolist(),
                F=float(F_k.sum()), F_k=F_k.tolist())
        records.append(jsonable(record))
    return records
