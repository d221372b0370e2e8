"""The ladder: from the theory's model to a standard transformer, one change per rung.

Every rung is trained under the depth experiment's protocol (:class:`DepthConfig`: the
same data, seeds, batches, evaluation prompts, stopping rule and SGD step size, see
docs/depth.md) and summarised with its statistics:

==============  ======  =====================================================================
rung            layers  what changes from the rung below
==============  ======  =====================================================================
theory          1       (the bottom) docs/theory.md's model: merged Q on the features, Q = 0
                        at the start, the label as the value, no read-out
readout         1       learned value and output matrices read the prediction out
factorised      1       separate W_Q, W_K on the whole token, default initialisation, in
                        place of the merged Q = 0 on the features (= depth's ``attention``)
depth           2, 3    2 and 3 such layers, residual stream
layernorm-mlp   2, 3    each layer depth's ``standard`` block (pre-LayerNorm, MLP, biases,
                        1/√width, final LayerNorm and linear head)
==============  ======  =====================================================================

Per rung, depth and γ: F and F_k over seeds (mean, 95% t interval), the one-layer
theory at the same ε, α and β per layer (the mean of the diagonal and of the off-diagonal of
the layer's K × K logits on the bare source features, at T1 and after fine-tuning) and the
paired change of F from the rung below.

:func:`theory_on_simulator_draws` trains the ``theory`` rung's torch model, with the same
training loop, on the finite-prompt simulator's own draws (``oodcalc simulate -s prompts``:
its geometry, its numpy generators, its population stopping rule), so that the two can be
compared number for number (tests/test_ladder.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pathlib import Path

from ..report import jsonable
from .cache import Cache, _numbers
from .experiment import Progress, Results, collect
from .protocol import DepthConfig, canonical_gamma
from .statistics import Summary
from .table import Cell, make_cell, theory, usable


__all__ = [
    "LADDER", "LadderCache", "LadderTable", "PopulationErrors", "RUNGS", "Row", "Rung",
    "alpha_beta", "below", "build_ladder", "ladder_configs", "make_row", "markdown",
    "reproduce_ladder", "show", "simulator_batches", "theory_on_simulator_draws",
]


@dataclass(frozen=True)
class Rung:
    name: str
    arch: str
    layers: tuple[int, ...]
    change: str


LADDER = (
    Rung("theory", "theory", (1,), "the theory's model (merged Q on the features from Q = 0, "
         "the label as the value, no read-out)"),
    Rung("readout", "readout", (1,), "learned value and output matrices (PyTorch's default "
         "initialisation) read the prediction out"),
    Rung("factorised", "attention", (1,), "separate W_Q, W_K on the whole token with "
         "PyTorch's default initialisation, in place of the merged Q = 0 on the features"),
    Rung("depth", "attention", (2, 3), "2 and 3 such layers (residual stream)"),
    Rung("layernorm-mlp", "standard", (2, 3), "the standard block at each layer "
         "(pre-LayerNorm, MLP 4×width, biases, 1/√width, final LayerNorm, linear head)"),
)
RUNGS = tuple(r.name for r in LADDER)


def ladder_configs(**protocol: Any) -> list[tuple[Rung, DepthConfig]]:
    """Every rung at each of its depths, SGD, sharing one protocol."""
    return [(rung, DepthConfig(arch=rung.arch, optimizer="sgd", layers=n, **protocol))
            for rung in LADDER for n in rung.layers]


def below(rung: Rung, layers: int) -> tuple[str, int] | None:
    """The row one change down: the previous rung at the same depth, or (for the depth
    rung) one layer fewer."""
    if rung.name == "theory":
        return None
    if rung.name == "depth":
        return ("factorised", 1) if layers == 2 else ("depth", layers - 1)
    previous = RUNGS[RUNGS.index(rung.name) - 1]
    return previous, layers


def alpha_beta(z: Sequence[Sequence[float]]) -> tuple[float, float]:
    """α = mean of the diagonal, β = mean of the off-diagonal of a K × K logit matrix."""
    z = np.asarray(z, dtype=float)
    off = ~np.eye(len(z), dtype=bool)
    return float(np.mean(np.diag(z))), float(np.mean(z[off]))


@functools.lru_cache(maxsize=None)
def theory_alpha_beta(gamma: float, eps: float, ft_steps: int | None = None
                      ) -> dict[str, tuple[float, float]]:
    """The one-layer theory's source α, β at T1 and after fine-tuning (exact dynamics)."""
    from ..geometry import parallel_shift
    from ..prediction import predict
    from ..setting import Protocol, Setting
    report = predict(Setting(parallel_shift([1.0, gamma]),
                             Protocol(eps=eps, ft_steps=ft_steps)))
    return {"T1": alpha_beta(report.pretrain.z), "after": alpha_beta(report.finetune.z_source)}


@dataclass(frozen=True)
class Row:
    rung: Rung
    cell: Cell
    logits: tuple[dict[str, dict[str, Summary]], ...]   # per layer: T1/after → alpha/beta
    below: tuple[str, int] | None
    change: Summary | None                              # paired F − F(row below)

    def to_dict(self) -> dict[str, Any]:
        c = self.cell
        theory_ab = theory_alpha_beta(c.gamma, c.config.eps, c.config.ft_steps)
        return {"rung": self.rung.name, "layers": c.config.layers, "arch": c.config.arch,
                "gamma": c.gamma, "F": c.F.to_dict(), "F_k": [s.to_dict() for s in c.F_k],
                "failed": c.failed, "T1_median": c.T1, "T2_median": c.T2,
                "theory": {"F": c.theory.F, "F_k": list(c.theory.F_k), "eta": c.theory.eta,
                           "alpha_beta": {t: {"alpha": a, "beta": b}
                                          for t, (a, b) in theory_ab.items()}},
                "versus_theory": c.versus_theory,
                "layers_alpha_beta": [{t: {name: s.to_dict() for name, s in ab.items()}
                                       for t, ab in layer.items()} for layer in self.logits],
                "change": self.rung.change,
                "below": None if self.below is None else
                {"rung": self.below[0], "layers": self.below[1],
                 "F_difference": self.change.to_dict()},
                "per_seed": list(c.per_seed)}


def make_row(results: Results, rung: Rung, config: DepthConfig, seeds: Sequence[int],
             gamma: float, rows: dict[tuple[str, int, float], Row]) -> Row:
    cell = make_cell(results, config, seeds, gamma)
    records = [results.get(config, s, gamma) for s in cell.seeds]
    logits = []
    for layer in range(config.layers):
        entry = {}
        for when, phase in (("T1", "pretrain"), ("after", "finetune")):
            pairs = [alpha_beta(r[phase]["logits"][layer]) for r in records]
            entry[when] = {"alpha": Summary.of([a for a, _ in pairs]),
                           "beta": Summary.of([b for _, b in pairs])}
        logits.append(entry)
    down = below(rung, config.layers)
    change = None
    if down is not None:
        other = rows[(*down, cell.gamma)]
        mine = dict((s["seed"], s["F"]) for s in cell.per_seed)
        theirs = dict((s["seed"], s["F"]) for s in other.cell.per_seed)
        common = [s for s in seeds if s in mine and s in theirs]
        change = Summary.of([mine[s] - theirs[s] for s in common])
    return Row(rung, cell, tuple(logits), down, change)


@dataclass(frozen=True)
class LadderTable:
    protocol: DepthConfig
    seeds: tuple[int, ...]
    gammas: tuple[float, ...]
    rows: tuple[Row, ...]

    def to_dict(self) -> dict[str, Any]:
        described = self.protocol.describe()
        for name in ("arch", "layers"):
            described.pop(name)
        return jsonable({
            "parameters": {"protocol": described, "seeds": list(self.seeds),
                           "gammas": list(self.gammas),
                           "intervals": "Student t over seeds, 95%",
                           "logits": "per layer, the K × K logits of the layer's score on "
                                     "the bare source features [v_k; 0]; alpha = mean of "
                                     "the diagonal, beta = mean of the off-diagonal"},
            "rungs": [{"rung": r.name, "arch": r.arch, "layers": list(r.layers),
                       "change": r.change} for r in LADDER],
            "rows": [row.to_dict() for row in self.rows]})


def build_ladder(results: Results, configs: Sequence[tuple[Rung, DepthConfig]],
                 seeds: Sequence[int], gammas: Sequence[float]) -> LadderTable:
    rows: dict[tuple[str, int, float], Row] = {}
    for rung, config in configs:
        for gamma in gammas:
            row = make_row(results, rung, config, seeds, gamma, rows)
            rows[(rung.name, config.layers, row.cell.gamma)] = row
    return LadderTable(configs[0][1], tuple(seeds), tuple(canonical_gamma(g) for g in gammas),
                       tuple(rows.values()))


class LadderCache(Cache):
    """Depth's cache, in its own directory (``$XDG_CACHE_HOME/oodcalc/ladder``), and a
    record is used only if it holds the per-layer logits the ladder reads (a record from
    depth's own cache does not)."""

    NAME = "ladder"

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        record = super().load(parameters)
        if record is None:
            return None
        phases = [record["pretrain"]] + ([record["finetune"]] if usable(record) else [])
        if all(_logits(p.get("logits"), parameters) for p in phases):
            return record
        self.rejected += 1
        return None


def _logits(value: Any, parameters: dict[str, Any]) -> bool:
    """One K × K matrix of finite numbers per layer."""
    K, layers = parameters["K"], parameters["layers"] if parameters["arch"] in (
        "attention", "standard") else 1
    return (isinstance(value, list) and len(value) == layers
            and all(isinstance(z, list) and len(z) == K and all(_numbers(row, K, False)
                                                                  for row in z) for z in value))


def reproduce_ladder(seeds: Sequence[int] = range(10), gammas: Sequence[float] = (-0.75, 0, 0.75),
                     workers: int = 1, progress: Progress | None = None,
                     cache: Cache | None = None, executor=None,
                     **protocol: Any) -> LadderTable:
    """Train (or read from ``cache``) every rung and tabulate it."""
    configs = ladder_configs(**protocol)
    cache = cache if cache is not None else Cache(enabled=False)
    results = collect([c for _, c in configs], list(seeds), gammas, cache, workers, progress,
                      executor)
    return build_ladder(results, configs, list(seeds), gammas)


def _number(x: float, digits: int = 4) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:+.{digits}f}"


def _interval(s: Summary) -> str:
    if s.n == 0:
        return "no usable seed"
    return f"{_number(s.mean)} [{_number(s.low)}, {_number(s.high)}]"


def markdown(table: LadderTable) -> str:
    p = table.protocol
    lines = [
        f"Protocol: depth's (docs/depth.md), SGD lr {p.lr:g}, width {p.width}, N = {p.N}, "
        f"batch {p.batch}, {p.eval_prompts} evaluation prompts, stop when every e_k <= "
        f"ε = {p.eps:g} (≤ {p.max_steps} steps per phase); seeds "
        f"{', '.join(map(str, table.seeds))}. Intervals: 95% Student t over "
        "seeds. Theory: one layer, exact population dynamics at the same ε. α, β: the mean "
        "diagonal and off-diagonal logit of each layer's score on the bare source features, "
        "at T1 → after fine-tuning (mean over seeds). ΔF: paired F − F(row below).", "",
        "| rung | layers | γ | F [95% CI] | F_1 · F_2 | theory F | vs theory "
        "| α, β per layer (T1 → after) | ΔF vs below |",
        "|---|---:|---:|---|---|---:|---|---|---|"]
    for row in table.rows:
        c = row.cell
        layers = "; ".join(f"L{i + 1}: α {_arrow(ab['alpha'])}, β {_arrow(ab['beta'])}"
                           for i, ab in enumerate(_by_kind(row.logits)))
        change = ("—" if row.below is None else
                  f"{_interval(row.change)} vs {row.below[0]} ({row.below[1]} L)")
        failed = f" ({sum(c.failed.values())} out)" if c.failed else ""
        lines.append(
            f"| {row.rung.name} | {c.config.layers} | {c.gamma:+.2f} | {_interval(c.F)}"
            f"{failed} | {_number(c.F_k[0].mean)} · {_number(c.F_k[1].mean)} | "
            f"{_number(c.theory.F)} | {c.versus_theory} | {layers} | {change} |")
    lines += ["", "Changes, rung by rung:"]
    lines += [f"- {r.name} ({', '.join(map(str, r.layers))} L): {r.change}" for r in LADDER]
    return "\n".join(lines)


def _by_kind(logits) -> list[dict[str, tuple[float, float]]]:
    """Per layer: alpha/beta → (mean at T1, mean after fine-tuning)."""
    return [{k: (ab["T1"][k].mean, ab["after"][k].mean) for k in ("alpha", "beta")}
            for ab in logits]


def _arrow(pair: tuple[float, float]) -> str:
    return f"{_number(pair[0], 2)}→{_number(pair[1], 2)}"


def show(table: LadderTable, console=None) -> None:
    """The ladder in the terminal (rich): rung × γ, each cell F [95% CI], the paired change
    from the row below and α, β of every layer at T1 → after fine-tuning."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        from ..console import make_console
        console = make_console()
    console.print("[bold]oodcalc reproduce ladder[/bold]")
    console.print(escape(markdown(table).split("\n", 1)[0]), style="dim")   # text, not markup
    t = Table(box=box.SIMPLE_HEAD, show_lines=True)
    t.add_column("rung", no_wrap=True)
    t.add_column("what changes from the row below", overflow="fold", max_width=28)
    for g in table.gammas:
        t.add_column(f"γ = {g:+.2f}", overflow="fold")
    first = [r for r in table.rows if r.rung.name == "theory"]
    t.add_row("theory, exact", "population dynamics, 1 layer",
              *(f"F = {_number(r.cell.theory.F)}" for r in first))
    keys = list(dict.fromkeys((r.rung, r.cell.config.layers) for r in table.rows))
    for rung, layers in keys:
        mine = [r for r in table.rows if r.rung == rung and r.cell.config.layers == layers]
        cells = []
        for row in mine:
            lines = [f"F = {_interval(row.cell.F)}"]
            if row.change is not None:
                lines.append(f"ΔF = {_interval(row.change)}")
            lines += [f"L{i + 1}: α {_arrow(ab['alpha'])}, β {_arrow(ab['beta'])}"
                      for i, ab in enumerate(_by_kind(row.logits))]
            cells.append(escape("\n".join(lines)))
        down = below(rung, layers)
        change = ("—" if down is None else "one more layer" if down[0] == rung.name
                  else rung.change)
        t.add_row(escape(f"{rung.name}, {layers} L"), escape(change), *cells)
    console.print(t)


# --- the theory rung on the finite-prompt simulator's own draws ------------------------

class PopulationErrors:
    """The simulator's default stopping rule: ``e_k(Q)`` from ``Q`` and the explicit
    features (duck-typed as :class:`~oodcalc.depth.training.Evaluation` for ``train``)."""

    def __init__(self, features: np.ndarray) -> None:
        self.features = features

    def errors(self, model) -> np.ndarray:
        from ..simulate.population import errors_and_gradient
        return errors_and_gradient(model.Q.detach().double().numpy(), self.features)[0]

    def within(self, model, eps: float, covered: np.ndarray | None = None
               ) -> np.ndarray | None:
        error = self.errors(model)
        ok = error <= eps if covered is None else (error <= eps) | ~covered
        return error if np.all(ok) else None


def simulator_batches(features: np.ndarray, N: int, batch: int, rng: np.random.Generator,
                      dtype: Any = None, source: np.ndarray | None = None, from_source: int = 0):
    """The simulator's next training batch (``sample_prompts`` from its own generator, in
    the same order), as the torch models' prompts: tokens ``[x; y]``, query ``[x_q; 0]``;
    with replay, ``batch − from_source`` prompts of ``features`` then ``from_source`` of
    ``source``, drawn in that order (the simulator's ``finetune_on_prompts``)."""
    import torch

    from ..simulate.prompts import sample_prompts
    from .training import Prompts
    dtype = torch.float64 if dtype is None else dtype
    t = functools.partial(torch.as_tensor, dtype=dtype)

    def convert(P):
        context = torch.cat([t(P.X), t(P.y)[..., None]], -1)
        query = torch.cat([t(P.xq), torch.zeros(len(P.xq), 1, dtype=dtype)], -1)
        return context, query, t(P.yq), torch.as_tensor(P.q)

    def draw() -> Prompts:
        parts = [convert(sample_prompts(features, N, batch - from_source, rng))]
        if from_source:
            parts.append(convert(sample_prompts(source, N, from_source, rng)))
        return Prompts(*(torch.cat(x) for x in zip(*parts)))
    return draw


def theory_on_simulator_draws(setting, N: int = 32, batch: int = 1024, *, seed: int = 0,
                              dtype: Any = None, arm: Any = None) -> dict[str, Any]:
    """The ``theory`` rung (torch, ``training.train``) on exactly the draws of
    ``simulate_prompts(setting, N, batch, seed=seed)`` (fresh mini-batches, population
    stopping rule): T1, T2, F, F_k and ``Q`` at T1 and after fine-tuning (float64 by
    default). ``arm`` (oodcalc.depth.arms.Arm): the torch arm in fine-tuning, against
    the simulator run with the arm's theory counterpart in ``setting``'s protocol."""
    import torch

    from ..simulate.population import errors_and_gradient
    from ..simulate.prompts import phase_generators
    from .models import build
    from .training import reproducible_torch, train
    dtype = torch.float64 if dtype is None else dtype
    geo, proto = setting.geometry, setting.protocol
    V, U, K = geo.V, geo.U, geo.K
    config = DepthConfig(arch="theory", width=geo.d + 1, N=N, batch=batch, eps=proto.eps,
                         lr=proto.eta, max_steps=proto.max_steps, K=K)
    finetune = config.with_(lr=proto.eta_ft, eps=proto.finetune_stop,
                            max_steps=proto.finetune_cap)
    pre_rng, ft_rng, spare_rng = phase_generators(seed)
    from .arms import Intervention, replay_count
    with reproducible_torch():
        model = build("theory", 1, config.width, 0).to(dtype)
        pre = train(model, None, config, None, PopulationErrors(V),
                    batches=simulator_batches(V, N, batch, pre_rng, dtype))
        Q1 = model.Q.detach().double().numpy().copy()
        # project-activations' source prompts: the simulator's unused third stream
        shown = simulator_batches(V, N, batch, spare_rng, dtype)
        intervention = None if arm is None else Intervention(
            arm, model, torch.as_tensor(V), torch.as_tensor(U),
            lambda: model(*(lambda p: (p.context, p.query))(shown())))
        ft = train(model, None, finetune, None, PopulationErrors(U),
                   batches=simulator_batches(U, N, batch, ft_rng, dtype, V,
                                             replay_count(arm, batch)),
                   intervention=intervention)
        Q2 = model.Q.detach().double().numpy().copy()
    before, after = (errors_and_gradient(Q, V)[0] / K for Q in (Q1, Q2))
    F_k = after - before
    return {"T1": pre.steps, "T2": ft.steps, "converged": pre.converged and ft.converged,
            "F": float(F_k.sum()), "F_k": F_k.tolist(), "Q1": Q1, "Q2": Q2}
