"""The depth table: per architecture and optimizer, per depth and γ, the paper's F, ours
over seeds (mean, sd, 95% Student-t interval, per-feature F_k and which feature forgets),
the one-layer theory at the same ε, and a verdict; plus the depth amplification 3 vs 1
layer with a paired bootstrap interval (a ratio of means has no t form). Text, Markdown and
JSON renderings."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import paper
from ..report import jsonable
from .experiment import Results
from .protocol import DepthConfig, canonical_gamma
from .statistics import VERDICT_SEEDS, Ratio, Summary, forgetting_patterns

__all__ = [
    "AMPLIFICATION_ID", "Amplification", "COLUMNS", "Cell", "DepthTable", "Theory",
    "VERDICT_LEGEND", "amplification", "amplification_text", "build_table",
    "describe_protocol", "failures", "grid_cell", "header", "interval", "make_cell",
    "markdown", "paper_figure", "percent", "ratio_text", "row", "show", "signed",
    "summary_markdown", "usable", "verdict",
]


AMPLIFICATION_ID = "tiny-transformer-depth-amplification"


def paper_figure(layers: int, gamma: float) -> paper.Figure | None:
    """The paper's F for this depth and γ, if it reports one."""
    try:
        return paper.figure(f"tiny-transformer-layers={layers}-gamma={gamma:+.2f}")
    except KeyError:
        return None


@dataclass(frozen=True)
class Theory:
    """The one-layer theory (exact population dynamics) for γ = (1, γ) at this ε (and
    fine-tuning length, where one is fixed)."""

    F: float
    F_k: tuple[float, ...]
    eta: float


@functools.lru_cache(maxsize=None)
def theory(gamma: float, eps: float, ft_steps: int | None = None) -> Theory:
    from ..geometry import parallel_shift
    from ..prediction import predict
    from ..setting import Protocol, Setting
    report = predict(Setting(parallel_shift([1.0, gamma]),
                             Protocol(eps=eps, ft_steps=ft_steps)))
    return Theory(report.F, tuple(f.F_k for f in report.forgetting),
                  report.parameters["eta"])


VERDICT_LEGEND = ("verdicts: ✓ same sign as the reference and our 95% CI excludes 0, ✗ opposite "
                  "sign, ≈0 our CI contains 0; ×r = our mean / the reference; 'in CI' = the "
                  f"reference lies inside our interval; no mark from fewer than {VERDICT_SEEDS} "
                  "seeds")


def verdict(ours: Summary, reference: float) -> str:
    """Our interval against a reference value, in a few characters (see VERDICT_LEGEND)."""
    if ours.n == 0:
        return ""
    if ours.n < VERDICT_SEEDS:
        return f"n = {ours.n}: no mark"
    if ours.contains(reference):
        return ("≈0, " if ours.sign == 0 else "✓ ") + "in CI"
    if abs(reference) < 1e-12:
        return "≈0" if ours.sign == 0 else f"{'+' if ours.sign > 0 else '−'} vs 0"
    mark = "≈0" if ours.sign == 0 else "✓" if ours.sign == np.sign(reference) else "✗"
    return f"{mark} ×{ratio_text(ours.mean / reference)}"


def usable(record: dict[str, Any]) -> bool:
    """Both phases met the stopping rule (no divergence, no step cap)."""
    return bool(record["pretrain"]["converged"] and record.get("finetune", {}).get("converged"))


@dataclass(frozen=True)
class Cell:
    config: DepthConfig
    gamma: float
    seeds: tuple[int, ...]           # the seeds whose runs are usable
    F: Summary
    F_k: tuple[Summary, ...]
    patterns: dict[str, int]
    failed: dict[str, int]           # runs left out, by reason
    T1: float                        # median steps over the usable seeds
    T2: float
    per_seed: tuple[dict[str, Any], ...]
    theory: Theory
    paper: paper.Figure | None

    @property
    def versus_paper(self) -> str:
        return "" if self.paper is None else verdict(self.F, self.paper.value)

    @property
    def versus_theory(self) -> str:
        return verdict(self.F, self.theory.F)

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.config.arch, "optimizer": self.config.optimizer,
                "layers": self.config.layers, "gamma": self.gamma,
                "F": self.F.to_dict(), "F_k": [s.to_dict() for s in self.F_k],
                "forgets": self.patterns, "failed": self.failed,
                "T1_median": self.T1, "T2_median": self.T2,
                "theory": {"F": self.theory.F, "F_k": list(self.theory.F_k),
                           "eta": self.theory.eta},
                "paper": None if self.paper is None else {
                    "F": self.paper.value, "printed": self.paper.printed,
                    "id": self.paper.id, "source": self.paper.source},
                "versus_paper": self.versus_paper, "versus_theory": self.versus_theory,
                "per_seed": list(self.per_seed)}


def make_cell(results: Results, config: DepthConfig, seeds: Sequence[int], gamma: float) -> Cell:
    gamma = canonical_gamma(gamma)
    records = [(s, results.get(config, s, gamma)) for s in seeds]
    good = [(s, r) for s, r in records if usable(r)]
    failed = {"pretraining diverged": 0, "pretraining hit the step cap": 0,
              "fine-tuning diverged": 0, "fine-tuning hit the step cap": 0}
    for _, r in records:
        phase, name = ((r["pretrain"], "pretraining") if not r["pretrain"]["converged"]
                       else (r.get("finetune"), "fine-tuning"))
        if phase is not None and not phase["converged"]:
            failed[f"{name} {'diverged' if phase['diverged'] else 'hit the step cap'}"] += 1
    F_k = np.array([r["F_k"] for _, r in good]).reshape(-1, config.K)
    return Cell(
        config=config, gamma=gamma, seeds=tuple(s for s, _ in good),
        F=Summary.of([r["F"] for _, r in good]),
        F_k=tuple(Summary.of(F_k[:, k]) for k in range(config.K)),
        patterns=forgetting_patterns(F_k), failed={k: v for k, v in failed.items() if v},
        T1=float(np.median([r["pretrain"]["T1"] for _, r in good])) if good else math.nan,
        T2=float(np.median([r["finetune"]["T2"] for _, r in good])) if good else math.nan,
        per_seed=tuple({"seed": s, "F": r["F"], "F_k": r["F_k"], "T1": r["pretrain"]["T1"],
                        "T2": r["finetune"]["T2"]} for s, r in good),
        theory=theory(gamma, config.eps, config.ft_steps),
        paper=paper_figure(config.layers, gamma))


@dataclass(frozen=True)
class Amplification:
    """F(deep)/F(shallow) − 1 at one γ over the seeds usable at both depths (paired)."""

    arch: str
    optimizer: str
    gamma: float
    shallow: int
    deep: int
    ratio: Ratio

    def to_dict(self) -> dict[str, Any]:
        figure = paper.figure(AMPLIFICATION_ID)
        return {"arch": self.arch, "optimizer": self.optimizer, "gamma": self.gamma,
                "layers": [self.shallow, self.deep], **self.ratio.to_dict(),
                "paper": {"increase": figure.value, "printed": figure.printed,
                          "source": figure.source}}


def amplification(results: Results, shallow: DepthConfig, deep: DepthConfig,
                  seeds: Sequence[int], gamma: float) -> Amplification:
    pairs = [(results.get(shallow, s, gamma), results.get(deep, s, gamma)) for s in seeds]
    pairs = [(a["F"], b["F"]) for a, b in pairs if usable(a) and usable(b)]
    a, b = (list(x) for x in zip(*pairs)) if pairs else ([], [])
    return Amplification(shallow.arch, shallow.optimizer, canonical_gamma(gamma),
                         shallow.layers, deep.layers, Ratio.of(a, b))


@dataclass(frozen=True)
class DepthTable:
    configs: tuple[DepthConfig, ...]
    seeds: tuple[int, ...]
    gammas: tuple[float, ...]
    cells: tuple[Cell, ...]
    amplifications: tuple[Amplification, ...]
    torch: str                       # the torch version the runs were made with

    def groups(self) -> dict[tuple[str, str], list[Cell]]:
        out: dict[tuple[str, str], list[Cell]] = {}
        for cell in self.cells:
            out.setdefault((cell.config.arch, cell.config.optimizer), []).append(cell)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an undefined number (the sd of one seed, the mean of no usable
        run, an unbounded ratio) is None."""
        return jsonable({"parameters": {"configs": [c.describe() for c in self.configs],
                               "seeds": list(self.seeds), "gammas": list(self.gammas),
                               "intervals": "Student t over seeds, 95%; the depth ratio: "
                                            "paired percentile bootstrap, 10,000 resamples",
                               "paper": paper.CITATION},
                "cells": [c.to_dict() for c in self.cells],
                "amplification": [a.to_dict() for a in self.amplifications]})


def build_table(results: Results, configs: Sequence[DepthConfig], seeds: Sequence[int],
                gammas: Sequence[float]) -> DepthTable:
    cells = tuple(make_cell(results, c, seeds, g) for c in configs for g in gammas)
    groups: dict[tuple[str, str], dict[int, DepthConfig]] = {}
    for c in configs:
        groups.setdefault((c.arch, c.optimizer), {})[c.layers] = c
    amplifications = tuple(
        amplification(results, depths[min(depths)], depths[max(depths)], seeds, g)
        for depths in groups.values() if len(depths) > 1
        for g in gammas if g < 0)
    torch = {r["parameters"]["torch"] for r in results.records.values()}
    return DepthTable(tuple(configs), tuple(seeds), tuple(canonical_gamma(g) for g in gammas),
                      cells, amplifications, ", ".join(sorted(torch)))


# --- rendering ---------------------------------------------------------------------------

def signed(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:+.{digits}f}"


def interval(s: Summary) -> str:
    return f"{signed(s.mean)} [{signed(s.low)}, {signed(s.high)}]" if s.n else "no usable run"


def percent(x: float | None) -> str:
    if x is None:
        return "—"
    return ("+∞" if x > 0 else "−∞") if math.isinf(x) else f"{x:+.1%}"


def amplification_text(a: Amplification) -> str:
    r = a.ratio
    figure = paper.figure(AMPLIFICATION_ID)
    if r.increase is None:
        ours = (f"undefined (mean F at {a.shallow} layer{'s' * (a.shallow > 1)} is not > 0); "
                f"paired difference {interval(r.difference)}")
    else:
        ours = (f"{percent(r.increase)} [{percent(r.low)}, {percent(r.high)}]; paired "
                f"difference {interval(r.difference)}")
    return (f"{a.arch}, {a.optimizer}: F({a.deep} layers)/F({a.shallow}) − 1 at γ = "
            f"{a.gamma:+.2f}: ours {ours} over {r.n} paired seeds; paper {figure.printed}")


def describe_protocol(config: DepthConfig, seeds: Sequence[int], torch: str) -> str:
    return (f"width {config.width} (15 feature dims + label slot), N = {config.N} context "
            f"tokens, batch {config.batch} fresh prompts per step, {config.eval_prompts} fixed "
            f"evaluation prompts, " + (
                f"stop when every e_k <= ε = {config.eps:g} (both phases, ≤ "
                f"{config.max_steps} steps each)" if config.ft_steps is None else
                f"pretraining stops when every e_k <= ε = {config.eps:g} (≤ "
                f"{config.max_steps} steps), fine-tuning runs exactly {config.ft_steps} "
                "steps") + ", fresh optimizer for fine-tuning; "
            f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}); torch {torch}, "
            "1 thread, deterministic kernels")


COLUMNS = ("layers", "γ", "paper", "ours: F [95% CI]", "seeds", "F_1 · F_2",
           "forgets 1/2/both/none", "F_1 > F_2", "theory F (F_1 · F_2)", "vs paper",
           "vs theory")


def row(c: Cell) -> list[str]:
    p = c.patterns
    return [str(c.config.layers), f"{c.gamma:+.2f}",
            c.paper.printed.split("=")[-1].strip() if c.paper else "",
            interval(c.F), str(c.F.n) + (f" ({sum(c.failed.values())} out)" if c.failed else ""),
            " · ".join(signed(s.mean) for s in c.F_k),
            f"{p['only 1']}/{p['only 2']}/{p['both']}/{p['neither']}", str(p["F_1 > F_2"]),
            f"{signed(c.theory.F)} ({' · '.join(signed(x) for x in c.theory.F_k)})",
            c.versus_paper, c.versus_theory]


def failures(cells: Sequence[Cell]) -> list[str]:
    return [f"{c.config.layers} layer{'s' * (c.config.layers > 1)}, γ = {c.gamma:+.2f}: left "
            "out " + ", ".join(f"{n} × {why}" for why, n in c.failed.items())
            for c in cells if c.failed]


def ratio_text(r: float) -> str:
    return f"{r:.0f}" if abs(r) >= 100 else f"{r:.2g}"


def header(table: DepthTable, verdicts: bool = True) -> str:
    return (f"Protocol: {describe_protocol(table.configs[0], table.seeds, table.torch)}. "
            "Theory: one layer, "
            f"exact population dynamics at the same ε (η = {table.cells[0].theory.eta:g}). "
            f"Paper: {paper.CITATION}, TinyTransformer rows of the forgetting table. Intervals: "
            "95% Student t over seeds (the depth ratio: paired percentile bootstrap)"
            + (f"; {VERDICT_LEGEND}." if verdicts else "."))


def markdown(table: DepthTable) -> str:
    lines = [header(table), ""]
    for (arch, optimizer), cells in table.groups().items():
        lines += [f"#### {arch}, {optimizer} (lr {cells[0].config.lr:g})", "",
                  "| " + " | ".join(COLUMNS) + " |",
                  "|" + "---:|" * 3 + "---|---:|---|---|---:|" + "---|" * 3]
        lines += ["| " + " | ".join(row(c)) + " |" for c in cells]
        lines.append("")
        lines += [f"Left out: {line}." for line in failures(cells)]
        lines += [f"Depth amplification — {amplification_text(a)}."
                  for a in table.amplifications if (a.arch, a.optimizer) == (arch, optimizer)]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def grid_cell(c: Cell) -> str:
    """One (depth, γ) of the terminal grid: ours, per feature, the paper, the theory."""
    p = c.patterns
    lines = [interval(c.F),
             f"F_k {' · '.join(signed(s.mean) for s in c.F_k)}",
             f"forgets {p['only 1']}/{p['only 2']}/{p['both']}/{p['neither']}, "
             f"F_1>F_2 {p['F_1 > F_2']}, n {c.F.n}"]
    if c.paper is not None:
        lines.append(f"paper {c.paper.value:+.2f}: {c.versus_paper}")
    lines.append(f"theory {signed(c.theory.F)}: {c.versus_theory}")
    return "\n".join(lines)


def summary_markdown(table: DepthTable) -> str:
    """One row per (depth, γ): the paper, the theory, and ours for every architecture and
    optimizer (mean [95% CI], usable seeds); then the depth amplifications."""
    groups = table.groups()
    names = [f"{arch} · {optimizer}" for arch, optimizer in groups]
    lines = ["| layers | γ | paper | theory (1 layer) | " + " | ".join(names) + " |",
             "|---:|---:|---:|---:|" + "---|" * len(names)]
    keys = list(dict.fromkeys((c.config.layers, c.gamma) for c in table.cells))
    index = {(c.config.arch, c.config.optimizer, c.config.layers, c.gamma): c
             for c in table.cells}
    for layers, gamma in keys:
        cells = [index.get((a, o, layers, gamma)) for a, o in groups]
        first = next(c for c in cells if c is not None)
        lines.append(" | ".join([
            f"| {layers}", f"{gamma:+.2f}",
            first.paper.printed.split("=")[-1].strip() if first.paper else "",
            signed(first.theory.F)]
            + [interval(c.F) + (f" (n = {c.F.n})" if c.F.n != len(table.seeds) else "")
               if c is not None else "" for c in cells]) + " |")
    lines.append("")
    lines += [f"- {amplification_text(a)}." for a in table.amplifications]
    return "\n".join(lines).rstrip() + "\n"


def show(table: DepthTable, console=None) -> None:
    """The table in the terminal (rich): per architecture and optimizer, depth × γ."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        from ..console import make_console
        console = make_console()          # piped: wide and never cut (as every command)
    console.print("[bold]oodcalc reproduce depth[/bold]")
    console.print(escape(header(table)), style="dim")          # text, not markup
    console.print("Each cell: our F over seeds [95% CI]; mean F_1 · F_2; seeds where only "
                  "feature 1 / only 2 / both / neither forget, seeds where feature 1 loses more "
                  "than feature 2, usable seeds; the paper's F and the one-layer theory's, each "
                  "with its verdict.", style="dim")
    for (arch, optimizer), cells in table.groups().items():
        t = Table(title=escape(f"{arch}, {optimizer} (lr {cells[0].config.lr:g})"),
                  title_justify="left", box=box.SIMPLE_HEAD, show_lines=True)
        t.add_column("layers", justify="right", no_wrap=True, min_width=6)
        gammas = list(dict.fromkeys(c.gamma for c in cells))
        for g in gammas:
            # too narrow a terminal folds a cell's lines; it never cuts a number off
            t.add_column(f"γ = {g:+.2f}", overflow="fold")
        for layers in dict.fromkeys(c.config.layers for c in cells):
            mine = {c.gamma: c for c in cells if c.config.layers == layers}
            t.add_row(str(layers), *(escape(grid_cell(mine[g])) for g in gammas))
        console.print(t)
        for line in failures(cells):
            console.print(escape(line), style="yellow")
        for a in table.amplifications:
            if (a.arch, a.optimizer) == (arch, optimizer):
                console.print("Depth amplification — " + escape(amplification_text(a)))
        console.print()
