"""The intervention arms' table (issue 31): per rung (or architecture), depth, γ and arm,
F under the stopping rule beside the theory's exact prediction for the same intervention,
the paired contrast arm − plain, and F at matched OOD loss (the design's second endpoint,
oodcalc.depth.design), with the figure of F against the OOD loss per arm.

The theory's prediction applies at the ``theory`` rung (docs/theory.md's model); it is
printed beside every row, as the ladder prints the plain theory beside every rung.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..report import jsonable
from .arms import Arm, theory_text
from .cache import Cache, _numbers
from .design import DESIGN, benjamini_hochberg, contrast_interval
from .experiment import Progress, Results, collect
from .ladder import LadderCache, _interval as _summary, _number as _num  # the ladder's text
from .protocol import DepthConfig, canonical_gamma
from .statistics import VERDICT_SEEDS, Summary
from .table import usable, verdict

__all__ = [
    "ArmRow", "ArmsCache", "ArmsTable", "Contrast", "LadderArmsCache", "arms_depth",
    "arms_ladder", "arms_summary", "build_arms", "contrast_grid", "level", "loss_curves",
    "make_rows", "markdown", "matched_F", "matched_at", "matched_plot", "show", "with_bh",
]


@functools.lru_cache(maxsize=None)
def arm_theory(arm: Arm, gamma: float, eps: float, ft_steps: int | None = None
               ) -> float | None:
    """The one-layer theory's F for this arm's intervention (exact population dynamics,
    ``oodcalc.predict``), or None: no theory counterpart."""
    interventions = arm.theory()
    if interventions is None:
        return None
    from ..prediction import predict
    from ..geometry import parallel_shift
    from ..setting import Protocol, Setting
    return predict(Setting(parallel_shift([1.0, gamma]),
                           Protocol(eps=eps, ft_steps=ft_steps, **interventions))).F


# --- the matched-loss endpoint --------------------------------------------------------

def loss_curves(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(L_U(t), F(t)) along fine-tuning on the curve prompts: ``L_U = max_k e_k^U`` (what
    the stopping rule bounds by ε), and ``F = Σ_k (e_k^V(t) − e_k^V(0)) / K``."""
    ft = record["finetune"]
    src, tgt = np.array(ft["source_curve"], float), np.array(ft["target_curve"], float)
    K = src.shape[1]
    return tgt.max(1), (src - src[0]).sum(1) / K


def level(L0: float, eps: float, s: float) -> float:
    """``ℓ_s = L0^(1−s) ε^s``: a share s of the way from the start's OOD loss to ε (log)."""
    return math.exp((1 - s) * math.log(L0) + s * math.log(eps))


def matched_F(L: np.ndarray, F: np.ndarray, target: float) -> float | None:
    """F at the first step where ``L <= target``, linear in log L between the step before
    and it; None if never reached."""
    hit = np.flatnonzero(L <= target)
    if hit.size == 0:
        return None
    t = int(hit[0])
    if t == 0:
        return float(F[0])
    a, b = math.log(L[t - 1]), math.log(max(L[t], 1e-300))
    w = 1.0 if a == b else (a - math.log(target)) / (a - b)
    return float(F[t - 1] + w * (F[t] - F[t - 1]))


def matched_at(record: dict[str, Any], eps: float, s: float) -> float | None:
    L, F = loss_curves(record)
    if not L[0] > eps:                 # already within ε: no grid to walk
        return None
    return matched_F(L, F, level(L[0], eps, s))


# --- the table ------------------------------------------------------------------------

@dataclass(frozen=True)
class Contrast:
    n: int
    mean: float
    low: float
    high: float
    p: float
    rejected: bool = False           # BH within its endpoint's family (n >= VERDICT_SEEDS)

    def text(self) -> str:
        if self.n == 0:
            return "no paired seed"
        mark = "" if self.n < VERDICT_SEEDS else " *" if self.rejected else ""
        if not math.isfinite(self.low):
            return f"{self.mean:+.4f} (n = {self.n})"
        return f"{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}]{mark}"

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "ci95_t": [self.low, self.high], "p": self.p,
                "bh_rejected": self.rejected if self.n >= VERDICT_SEEDS else None}


@dataclass(frozen=True)
class ArmRow:
    rung: str
    layers: int
    gamma: float
    arm: Arm
    F: Summary
    failed: int
    T2: float                                     # median fine-tuning steps
    theory: float | None
    matched: tuple[tuple[float, Summary, int], ...]  # (s, F at level s, runs not reached)
    versus_plain: Contrast | None                 # F − F(plain), paired
    matched_versus_plain: tuple[Contrast, ...] = ()
    #: per seed (the record a reader recomputes every interval from): F, T2 and F at each
    #: matched level (None: not reached); a failed run's seed is absent
    per_seed: dict[str, Any] = field(default_factory=dict)

    @property
    def versus_theory(self) -> str:
        return "" if self.theory is None else verdict(self.F, self.theory)

    def to_dict(self) -> dict[str, Any]:
        return {"rung": self.rung, "layers": self.layers, "gamma": self.gamma,
                "arm": self.arm.describe(), "F": self.F.to_dict(), "failed": self.failed,
                "T2_median": self.T2, "theory": {"F": self.theory, "as": theory_text(self.arm)},
                "versus_theory": self.versus_theory,
                "matched": [{"s": s, "F": m.to_dict(), "not_reached": miss}
                            for s, m, miss in self.matched],
                "versus_plain": None if self.versus_plain is None
                else self.versus_plain.to_dict(),
                "matched_versus_plain": [c.to_dict() for c in self.matched_versus_plain],
                "per_seed": self.per_seed}


def _contrast(mine: dict[int, float], plain: dict[int, float]) -> Contrast:
    common = sorted(set(mine) & set(plain))
    diffs = [mine[s] - plain[s] for s in common]
    mean, low, high, p = contrast_interval(diffs)
    return Contrast(len(common), mean, low, high, p)


def make_rows(results: Results, label: str, configs: dict[Arm, DepthConfig],
              seeds: Sequence[int], gamma: float, levels: Sequence[float]) -> list[ArmRow]:
    gamma = canonical_gamma(gamma)
    per_arm = {}
    for arm, config in configs.items():
        records = {s: results.get(config, s, gamma) for s in seeds}
        good = {s: r for s, r in records.items() if usable(r)}
        matched = {x: {s: matched_at(r, config.eps, x) for s, r in good.items()} for x in levels}
        per_arm[arm] = (config, records, good, matched)
    plain = next(a for a in configs if a.plain)
    _, _, plain_good, plain_matched = per_arm[plain]
    rows = []
    for arm, (config, records, good, matched) in per_arm.items():
        F = {s: r["F"] for s, r in good.items()}
        rows.append(ArmRow(
            rung=label, layers=config.layers, gamma=gamma, arm=arm,
            F=Summary.of(list(F.values())), failed=len(records) - len(good),
            T2=float(np.median([r["finetune"]["T2"] for r in good.values()])) if good
            else math.nan,
            theory=arm_theory(arm, gamma, config.eps, config.ft_steps),
            matched=tuple((x, Summary.of([v for v in matched[x].values() if v is not None]),
                           sum(v is None for v in matched[x].values())) for x in levels),
            versus_plain=None if arm.plain else _contrast(F, {s: r["F"]
                                                              for s, r in plain_good.items()}),
            matched_versus_plain=() if arm.plain else tuple(
                _contrast({s: v for s, v in matched[x].items() if v is not None},
                          {s: v for s, v in plain_matched[x].items() if v is not None})
                for x in levels),
            per_seed={"seeds": sorted(good), "F": [F[s] for s in sorted(good)],
                      "T2": [int(good[s]["finetune"]["T2"]) for s in sorted(good)],
                      "matched": {f"{x:g}": [matched[x][s] for s in sorted(good)]
                                  for x in levels}}))
    return rows


def with_bh(rows: list[ArmRow], q: float) -> list[ArmRow]:
    """Mark the contrasts BH rejects, within each endpoint's family (those with at least
    VERDICT_SEEDS paired seeds enter it)."""
    import dataclasses
    primary = [(i, r.versus_plain) for i, r in enumerate(rows) if r.versus_plain is not None
               and r.versus_plain.n >= VERDICT_SEEDS]
    secondary = [(i, j, c) for i, r in enumerate(rows) for j, c in
                 enumerate(r.matched_versus_plain) if c.n >= VERDICT_SEEDS]
    out = list(rows)
    rej = benjamini_hochberg([c.p for _, c in primary], q)
    for (i, c), r in zip(primary, rej):
        out[i] = dataclasses.replace(out[i], versus_plain=dataclasses.replace(c, rejected=bool(r)))
    rej = benjamini_hochberg([c.p for _, _, c in secondary], q)
    for (i, j, c), r in zip(secondary, rej):
        m = list(out[i].matched_versus_plain)
        m[j] = dataclasses.replace(c, rejected=bool(r))
        out[i] = dataclasses.replace(out[i], matched_versus_plain=tuple(m))
    return out


@dataclass(frozen=True)
class ArmsTable:
    protocol: DepthConfig
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    gammas: tuple[float, ...]
    levels: tuple[float, ...]
    rows: tuple[ArmRow, ...]
    results: Results | None = None       # for the figure (not serialised)
    groups: tuple = ()                   # (label, {arm: config}) per rung-depth

    def to_dict(self) -> dict[str, Any]:
        described = self.protocol.describe()
        for name in ("arch", "layers", "arm"):
            described.pop(name, None)
        return jsonable({
            "parameters": {"protocol": described, "seeds": list(self.seeds),
                           "gammas": list(self.gammas), "arms": [a.describe() for a in self.arms],
                           "design": DESIGN.describe(),
                           "matched_levels": list(self.levels),
                           "contrast": "arm − plain paired by seed; two-sided 95% t interval; "
                                       f"BH at q = {DESIGN.fdr:g} per endpoint (marked *, only "
                                       f"from >= {VERDICT_SEEDS} seeds)"},
            "rows": [r.to_dict() for r in self.rows]})


def build_arms(results: Results, groups: Sequence[tuple[str, dict[Arm, DepthConfig]]],
               seeds: Sequence[int], gammas: Sequence[float],
               levels: Sequence[float] = DESIGN.matched_levels) -> ArmsTable:
    """``groups``: (row label, {arm: config}) per rung-depth (or architecture-depth)."""
    rows: list[ArmRow] = []
    for label, configs in groups:
        for g in gammas:
            rows += make_rows(results, label, configs, seeds, g, levels)
    rows = with_bh(rows, DESIGN.fdr)
    first = next(iter(groups[0][1].values()))
    return ArmsTable(first, tuple(groups[0][1]), tuple(seeds),
                     tuple(canonical_gamma(g) for g in gammas), tuple(levels), tuple(rows),
                     results, tuple(groups))


class ArmsCache(Cache):
    """A cache whose records must hold the OOD curve (the matched-loss endpoint reads it);
    a plain record written before the arms existed is recomputed (the same numbers, the
    same key) with it."""

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        record = super().load(parameters)
        if record is None or not usable(record):
            return record
        curve = record["finetune"].get("target_curve")
        if (isinstance(curve, list) and len(curve) == len(record["finetune"]["source_curve"])
                and all(_numbers(row, parameters["K"]) for row in curve)):
            return record
        self.rejected += 1
        return None


def arms_ladder(arms: Sequence[Arm], seeds: Sequence[int], gammas: Sequence[float],
                workers: int = 1, progress: Progress | None = None,
                cache: Cache | None = None, executor=None, **protocol: Any) -> ArmsTable:
    """Every rung of the ladder under every arm (plain included), tabulated."""
    from .ladder import ladder_configs
    base = ladder_configs(**protocol)
    groups = [(rung.name, {a: c.with_(arm=None if a.plain else a) for a in arms})
              for rung, c in base]
    cache = cache if cache is not None else Cache(enabled=False)
    configs = [c for _, g in groups for c in g.values()]
    results = collect(configs, list(seeds), gammas, cache, workers, progress, executor)
    return build_arms(results, groups, seeds, gammas)


def arms_depth(arms: Sequence[Arm], configs: Sequence[DepthConfig], seeds: Sequence[int],
               gammas: Sequence[float], workers: int = 1, progress: Progress | None = None,
               cache: Cache | None = None, executor=None) -> ArmsTable:
    """The depth experiment's configurations under every arm, tabulated (rows labelled
    architecture · optimizer)."""
    groups = [(f"{c.arch} · {c.optimizer}", {a: c.with_(arm=None if a.plain else a)
                                               for a in arms}) for c in configs]
    cache = cache if cache is not None else Cache(enabled=False)
    every = [c for _, g in groups for c in g.values()]
    results = collect(every, list(seeds), gammas, cache, workers, progress, executor)
    return build_arms(results, groups, seeds, gammas)


# --- text -----------------------------------------------------------------------------

def markdown(table: ArmsTable) -> str:
    p = table.protocol
    levels = ", ".join(f"{s:g}" for s in table.levels)
    lines = [
        f"Protocol: depth's (docs/depth.md), {p.optimizer.upper()} lr {p.lr:g}, width "
        f"{p.width}, N = {p.N}, batch {p.batch}, {p.eval_prompts} evaluation prompts, stop "
        f"when every covered e_k <= ε = {p.eps:g} (≤ {p.max_steps} steps per phase); seeds "
        f"{', '.join(map(str, table.seeds))}. Arms: "
        f"{', '.join(a.label for a in table.arms)} (oodcalc.depth.arms). F: mean over "
        "seeds [95% Student t interval]. Theory: one layer, exact population dynamics "
        "with the arm's intervention at the same ε (it applies at the theory rung). ΔF: "
        "arm − plain paired by seed [95% t interval], * = BH-rejected at q = "
        f"{DESIGN.fdr:g} (only from >= {VERDICT_SEEDS} seeds). F@s: F at matched OOD loss "
        f"ℓ_s = L_U(0)^(1−s) ε^s, s = {levels} (curve prompts; 'n/r' = runs not reaching "
        "it).", "",
        "| rung | layers | γ | arm | theory as | F [95% CI] | theory F | vs theory | T2 "
        "| ΔF vs plain | " + " | ".join(f"F@{s:g} (ΔF)" for s in table.levels) + " |",
        "|---|---:|---:|---|---|---|---:|---|---:|---|" + "---|" * len(table.levels)]
    for r in table.rows:
        matched = []
        for j, (s, m, miss) in enumerate(r.matched):
            text = _num(m.mean) + (f" ({miss} n/r)" if miss else "")
            if r.matched_versus_plain:
                text += f" (Δ {r.matched_versus_plain[j].text()})"
            matched.append(text)
        failed = f" ({r.failed} out)" if r.failed else ""
        lines.append(
            f"| {r.rung} | {r.layers} | {r.gamma:+.2f} | {r.arm.label} | "
            f"{theory_text(r.arm)} | {_summary(r.F)}{failed} | {_num(r.theory)} | "
            f"{r.versus_theory} | {r.T2:.0f} | "
            f"{'—' if r.versus_plain is None else r.versus_plain.text()} | "
            + " | ".join(matched) + " |")
    return "\n".join(lines)


def contrast_grid(record: dict[str, Any], gamma: float, matched: float | None = None) -> str:
    """The closing table of an arms record (``ArmsTable.to_dict()``, e.g. read back from
    JSON) at one γ: a row per arm, a column per rung-depth, each cell ΔF = arm − plain
    [95% t] (* BH-rejected), plain's own F in its row; at the stopping rule, or at the
    matched OOD-loss level ``matched`` (s)."""
    rows = [r for r in record["rows"] if r["gamma"] == canonical_gamma(gamma)]
    columns = list(dict.fromkeys((r["rung"], r["layers"]) for r in rows))
    arms = list(dict.fromkeys(r["arm"]["name"] for r in rows))
    cell: dict[tuple, str] = {}
    for r in rows:
        if r["arm"]["name"] == "plain":
            F = r["F"] if matched is None else next(
                m["F"] for m in r["matched"] if m["s"] == matched)
            text = f"F {_num(F['mean'])}"
        else:
            c = r["versus_plain"] if matched is None else \
                r["matched_versus_plain"][[m["s"] for m in r["matched"]].index(matched)]
            if c["n"] == 0:
                text = "no paired seed"
            else:
                low, high = c["ci95_t"]
                text = f"{c['mean']:+.3f}" + ("" if low is None or not math.isfinite(low)
                                              else f" [{low:+.3f}, {high:+.3f}]")
                text += " *" if c["bh_rejected"] else ""
        cell[r["arm"]["name"], r["rung"], r["layers"]] = text
    where = "the stopping rule" if matched is None else f"matched OOD loss s = {matched:g}"
    head = [f"γ = {canonical_gamma(gamma):+.2f}, {where}"] + \
        [f"{rung} {layers} L" for rung, layers in columns]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for arm in arms:
        lines.append("| " + " | ".join([arm] + [cell.get((arm, *col), "—")
                                                for col in columns]) + " |")
    return "\n".join(lines)


def arms_summary(record: dict[str, Any], matched: float = 0.5) -> str:
    """An arms record as the documents show it: its design and protocol in a line, how many
    contrasts BH keeps, then :func:`contrast_grid` at every γ, at the stopping rule and at
    the matched OOD-loss level ``matched``."""
    p = record["parameters"]
    design, protocol = p["design"], p["protocol"]
    primary = [r["versus_plain"] for r in record["rows"] if r["versus_plain"] is not None
               and r["versus_plain"]["bh_rejected"] is not None]
    at = [c for r in record["rows"] for c in r["matched_versus_plain"]
          if c["bh_rejected"] is not None]
    head = (f"Design version {design['version']} (oodcalc/depth/design.py): seeds "
            f"{p['seeds'][0]}–{p['seeds'][-1]}, arms {', '.join(a['name'] for a in p['arms'])}; "
            f"{protocol['optimizer'].upper()} lr {protocol['lr']:g}, ε = {protocol['eps']:g}, "
            f"{protocol['eval_prompts']} evaluation prompts. Cells: ΔF = F(arm) − F(plain), "
            f"paired by seed, mean [95% t]; * = kept by Benjamini–Hochberg at q = "
            f"{re.search(r'q = ([0-9.]+)', design['test']).group(1)} within its endpoint's family "
            f"({sum(c['bh_rejected'] for c in primary)} of {len(primary)} at the rule, "
            f"{sum(c['bh_rejected'] for c in at)} of {len(at)} at matched loss, every "
            "level); plain's row: its F.")
    grids = [contrast_grid(record, g) for g in p["gammas"]]
    grids += [contrast_grid(record, g, matched=matched) for g in p["gammas"]]
    return "\n\n".join([head, *grids])


def show(table: ArmsTable, console=None, title: str = "oodcalc reproduce ladder --arms"
         ) -> None:
    """The arms in the terminal: one block per rung-depth and γ, an arm a line, its F
    beside the theory's F for the same intervention."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        from ..console import make_console
        console = make_console()
    console.print(f"[bold]{escape(title)}[/bold]")
    console.print(escape(markdown(table).split("\n", 1)[0]), style="dim")
    t = Table(box=box.SIMPLE_HEAD)
    for name in ("rung, γ", "arm", "F [95% CI]", "theory F (as)", "ΔF vs plain [t CI]",
                 "F@" + "/".join(f"{s:g}" for s in table.levels)):
        t.add_column(name, overflow="fold")
    previous = None
    for r in table.rows:
        key = (r.rung, r.layers, r.gamma)
        head = "" if key == previous else f"{r.rung} {r.layers} L, γ {r.gamma:+.2f}"
        previous = key
        t.add_row(escape(head), escape(r.arm.label), escape(_summary(r.F) + (
                      f" ({r.failed} out)" if r.failed else "")),
                  escape(f"{_num(r.theory)} ({theory_text(r.arm)})"),
                  escape("—" if r.versus_plain is None else r.versus_plain.text()),
                  escape(" / ".join(_num(m.mean) for _, m, _ in r.matched)))
    console.print(t)


# --- the figure -----------------------------------------------------------------------

def matched_plot(table: ArmsTable, grid: int = 21):
    """F against the OOD loss per arm: one panel per rung-depth (rows) and γ (columns); x
    is s, the share of the way (in log L_U) from the start's OOD loss to ε, y the mean F
    at that level over the seeds that reached it; the design's levels dotted."""
    from ..plots import _legend_below_panels, _pyplot
    plt = _pyplot()
    results = table.results
    groups = table.groups
    fig, axes = plt.subplots(len(groups), len(table.gammas), squeeze=False, sharex=True,
                             figsize=(3.6 * len(table.gammas), 2.4 * len(groups) + 0.8))
    s_grid = np.linspace(0, 1, grid)
    for i, (label, configs) in enumerate(groups):
        for j, gamma in enumerate(table.gammas):
            ax = axes[i][j]
            ax.axhline(0, color="0.6", lw=0.8)
            for s in table.levels:
                ax.axvline(s, color="0.8", ls=":", lw=0.8)
            drawn = False
            for c, (arm, config) in enumerate(configs.items()):
                records = [results.records.get((config, seed, gamma)) for seed in table.seeds]
                records = [r for r in records if r is not None and usable(r)]
                ys = []
                for s in s_grid:   # a mean over the same seeds all along: where one falls
                    vals = [matched_at(r, config.eps, float(s)) for r in records]   # short,
                    ys.append(np.mean(vals) if vals and None not in vals else np.nan)  # stop
                ax.plot(s_grid, ys, "-", color=f"C{c}", lw=1.4, label=arm.label)
                drawn = drawn or bool(np.isfinite(ys).any())
            if not drawn:
                ax.text(0.5, 0.5, "no level reached by every seed\n(or $L_U(0) \\leq \\epsilon$)",
                        transform=ax.transAxes, ha="center", va="center", fontsize=8)
            layers = next(iter(configs.values())).layers
            ax.set_title(f"{label}, {layers} L, γ = {gamma:+.2f}", fontsize=9)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("F (curve prompts)")
            if i == len(groups) - 1:
                ax.set_xlabel("s: OOD loss from $L_U(0)$ (0) to ε (1), log")
    p = table.protocol
    _legend_below_panels(
        fig, axes[0][0],
        f"Forgetting at matched OOD loss per arm (ε = {p.eps:g}, seeds {table.seeds[0]}–"
        f"{table.seeds[-1]}, mean over the usable seeds; a curve ends where one of them "
        "never reaches the level)")
    return fig




class LadderArmsCache(LadderCache, ArmsCache):
    """The ladder's cache (its directory, its logits check), records with the OOD curve."""
