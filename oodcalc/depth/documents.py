"""What docs/depth.md and docs/guide/reproduce.md show of the depth experiment, built from
the record of its runs (docs/depth.json, :mod:`.record`): which runs each part uses (the
selections below), the generated blocks, and the figures. numpy and the theory only: no torch.

    python tools/depth_full_run.py --workers 2    # train what is missing, write the record
    python tools/generate_docs.py                 # the blocks, from the record
    python tools/depth_full_run.py --figures      # the figures, from the record
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import configs
from .experiment import Results
from .ladder import build_ladder, ladder_configs
from .ladder import markdown as ladder_markdown
from .protocol import CURVE_POINTS, CURVE_SEEDS, PAPER_GAMMAS, DepthConfig, canonical_gamma
from .table import (amplification, build_table, header, interval, make_cell, markdown, signed,
                    summary_markdown)

__all__ = [
    "BLOCKS", "CURVE", "CURVES", "LADDER_RUNS", "PROTOCOLS", "PROTOCOL_GROUPS",
    "PROTOCOL_TABLE", "RECORD", "ROOT", "SEEDS", "SELECTIONS", "Selection", "TABLE",
    "bimodality", "figures", "generate", "inference_block", "ladder_block", "protocol_name",
    "protocols_block", "summary_block", "table_block", "training_hours",
]


ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "depth.json"
SEEDS = tuple(range(10))
CURVE = tuple(float(g) for g in np.linspace(-1, 1, CURVE_POINTS))
#: The configurations every protocol of the protocol table is run for: the theory's model
#: trained the theory's way, and the standard block trained as a practitioner would.
PROTOCOL_GROUPS = (("attention", "sgd"), ("standard", "adam"))
#: The protocols of the protocol table: the stopping rule at four ε, and one fixed length.
PROTOCOLS = ({"eps": 0.05}, {"eps": 0.02}, {"eps": 0.01}, {"eps": 0.005},
             {"eps": 0.01, "ft_steps": 500})


@dataclass(frozen=True)
class Selection:
    """Which runs one part of the documents reads."""

    configs: tuple[DepthConfig, ...]
    seeds: tuple[int, ...]
    gammas: tuple[float, ...]

    def runs(self) -> list[tuple[DepthConfig, int, float]]:
        return [(c, s, canonical_gamma(g)) for c in self.configs for s in self.seeds
                for g in self.gammas]

    def missing(self, results: Results) -> list[tuple[DepthConfig, int, float]]:
        return [key for key in self.runs() if key not in results.records]

    def present(self, results: Results) -> bool:
        return not self.missing(results)


TABLE = Selection(tuple(configs()), SEEDS, PAPER_GAMMAS)
PROTOCOL_TABLE = Selection(tuple(
    DepthConfig(arch=a, optimizer=o, layers=n, **p)
    for a, o in PROTOCOL_GROUPS for p in PROTOCOLS for n in (1, 2, 3)), SEEDS, PAPER_GAMMAS)
CURVES = Selection(tuple(configs()), tuple(range(CURVE_SEEDS)), CURVE)
LADDER_RUNS = Selection(tuple(c for _, c in ladder_configs()), SEEDS, PAPER_GAMMAS)
SELECTIONS = {"table": TABLE, "protocols": PROTOCOL_TABLE, "curve": CURVES,
              "ladder": LADDER_RUNS}


def protocol_name(config: DepthConfig) -> str:
    return (f"ε = {config.eps:g}" if config.ft_steps is None
            else f"ε = {config.eps:g}, {config.ft_steps} fine-tuning steps")


# --- the blocks ---------------------------------------------------------------------------

def training_hours(results: Results) -> float:
    """Wall time stored in the records: each pretraining once, every fine-tuning."""
    pretrain: dict[tuple[DepthConfig, int], float] = {}
    finetune = 0.0
    for (config, seed, _), record in results.records.items():
        pretrain[(config, seed)] = record["pretrain"]["seconds"]
        finetune += record.get("finetune", {}).get("seconds", 0.0)
    return (sum(pretrain.values()) + finetune) / 3600


def bimodality(results: Results, selection: Selection, gamma: float) -> str:
    """Per configuration at γ: which feature forgets, seed by seed (×1000)."""
    lines = [f"Per-seed F_1 · F_2 at γ = {gamma:+.2f} (×1000; * marks the feature that "
             "forgets more):", ""]
    for config in selection.configs:
        cell = make_cell(results, config, selection.seeds, gamma)
        runs = " ".join(
            f"{1000 * r['F_k'][0]:+.1f}{'*' if r['F_k'][0] > r['F_k'][1] else ''}·"
            f"{1000 * r['F_k'][1]:+.1f}{'*' if r['F_k'][1] >= r['F_k'][0] else ''}"
            for r in cell.per_seed)
        p = cell.patterns
        lines.append(f"- {config.arch}, {config.optimizer}, {config.layers} L — forgets only 1: "
                     f"{p['only 1']}, only 2: {p['only 2']}, both: {p['both']}, neither: "
                     f"{p['neither']}; runs: {runs}")
    return "\n".join(lines)


def table_block(results: Results) -> str:
    """docs/depth.md's full table under the stopping rule at ε = 0.01."""
    table = build_table(results, TABLE.configs, TABLE.seeds, TABLE.gammas)
    return (markdown(table) + "\n" + bimodality(results, TABLE, -0.75) + "\n\nTraining time "
            f"stored in these runs (wall, summed): {training_hours(_only(results, TABLE)):.2f} h.")


def summary_block(results: Results) -> str:
    """The summary of the same table in docs/guide/reproduce.md."""
    table = build_table(results, TABLE.configs, TABLE.seeds, TABLE.gammas)
    return header(table, verdicts=False) + "\n\n" + summary_markdown(table)


def protocols_block(results: Results) -> str:
    """F per protocol: for each configuration of :data:`PROTOCOL_GROUPS`, one row per
    protocol and depth, one column per γ (F [95 % CI] and mean F_1 · F_2), the one-layer
    theory under the same protocol, and the paired depth change F(3) − F(1)."""
    groups: dict[tuple[str, str], list[DepthConfig]] = {}
    for c in PROTOCOL_TABLE.configs:
        groups.setdefault((c.arch, c.optimizer), []).append(c)
    gammas, seeds = PROTOCOL_TABLE.gammas, PROTOCOL_TABLE.seeds
    first = PROTOCOL_TABLE.configs[0]
    lines = [f"Protocol as above (width {first.width}, N = {first.N}, batch {first.batch}, "
             f"{first.eval_prompts} evaluation prompts, ≤ {first.max_steps} steps per phase), "
             f"{len(seeds)} seeds per cell, pretraining to the stopping rule at ε; "
             "fine-tuning to the same rule, or for exactly the steps named. Each cell: F "
             "[95% t CI] and the mean F_1 · F_2 (n: usable seeds where fewer than "
             f"{len(seeds)}); the theory row: one layer, exact population dynamics under the "
             "same protocol. Last column: paired F(3 layers) − F(1 layer) at γ = −0.75.", ""]
    for (arch, optimizer), group in groups.items():
        lines += [f"#### {arch}, {optimizer} (lr {group[0].lr:g})", "",
                  "| protocol | layers | " + " | ".join(f"γ = {g:+.2f}" for g in gammas)
                  + " | F(3) − F(1), γ = −0.75 |", "|---|---:|" + "---|" * (len(gammas) + 1)]
        by_protocol: dict[str, list[DepthConfig]] = {}
        for c in group:
            by_protocol.setdefault(protocol_name(c), []).append(c)
        for name, depths in by_protocol.items():
            theory_cells = [make_cell(results, depths[0], seeds, g).theory for g in gammas]
            lines.append(f"| {name} | theory | " + " | ".join(
                f"{signed(t.F)} ({' · '.join(signed(x) for x in t.F_k)})"
                for t in theory_cells) + " | |")
            deep = amplification(results, depths[0], depths[-1], seeds, -0.75)
            for c in depths:
                cells = [make_cell(results, c, seeds, g) for g in gammas]
                change = (interval(deep.ratio.difference) + f" (n = {deep.ratio.n})"
                          if c is depths[-1] else "")
                lines.append(f"| {name} | {c.layers} | " + " | ".join(
                    _protocol_cell(cell, len(seeds)) for cell in cells) + f" | {change} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _protocol_cell(cell, seeds: int) -> str:
    n = f" n = {cell.F.n};" if cell.F.n != seeds else ""
    return (f"{interval(cell.F)};{n} {' · '.join(signed(s.mean) for s in cell.F_k)}")


def inference_block(results: Results) -> str:
    """Every F interval of docs/depth.md's three tables (each distinct configuration and γ
    once): how many change verdict between the percentile bootstrap and the t interval,
    which, and how many of the t tests against 0 survive Benjamini–Hochberg at q = 0.05."""
    from .statistics import (benjamini_hochberg, percentile_interval, sign_rank_pvalue,
                             t_interval, t_pvalue)
    from .table import usable

    def sign(low: float, high: float) -> str:
        return "+" if low > 0 else "−" if high < 0 else "≈0"

    cells: dict[tuple[DepthConfig, float], list[float]] = {}
    for part in (TABLE, PROTOCOL_TABLE, LADDER_RUNS):
        for config in part.configs:
            for gamma in part.gammas:
                runs = [results.get(config, s, gamma) for s in part.seeds]
                cells[(config, canonical_gamma(gamma))] = [r["F"] for r in runs if usable(r)]
    rungs = {c: name for name, c in ladder_configs()}
    changed, pvalues, signrank = [], [], []
    for (config, gamma), F in cells.items():
        if len(F) < 2:
            continue
        before, after = sign(*percentile_interval(F)), sign(*t_interval(F))
        pvalues.append(t_pvalue(F))
        signrank.append(sign_rank_pvalue(F))
        if before != after:
            name = rungs.get(config) or (f"{config.arch} · {config.optimizer} {config.layers} L"
                                         f", {protocol_name(config)}")
            lo, hi = t_interval(F)
            changed.append(f"{name}, γ = {gamma:+.2f} (n = {len(F)}): {before} → {after}, "
                           f"t interval [{signed(lo)}, {signed(hi)}]")
    m = len(pvalues)
    return "\n".join([
        f"{m} distinct F intervals (configuration × protocol × γ, over the usable of "
        f"{len(SEEDS)} seeds) stand in this page's three tables (results, protocols, ladder). "
        "Their sign verdict (the 95 % "
        "interval above 0, below 0, or containing it) under the 95 % percentile bootstrap "
        f"and under the Student-t interval differs in {len(changed)} of them:", ""]
        + [f"- {line}" for line in changed] + ["",
        f"Multiplicity: of the {m} two-sided t tests of F = 0, "
        f"{sum(p < 0.05 for p in pvalues)} have p < 0.05 (the t intervals that exclude 0) "
        f"and {benjamini_hochberg(pvalues, 0.05)} survive Benjamini–Hochberg at a false "
        f"discovery rate q = 0.05; the Wilcoxon sign-rank test (no normality assumed; its "
        f"smallest p at 10 seeds is 2/1024) gives {sum(p < 0.05 for p in signrank)} and "
        f"{benjamini_hochberg(signrank, 0.05)}. Recipe: `oodcalc.depth.documents."
        "inference_block` on docs/depth.json (`python tools/generate_docs.py`)."])


def ladder_block(results: Results) -> str:
    return ladder_markdown(build_ladder(results, ladder_configs(), LADDER_RUNS.seeds,
                                        LADDER_RUNS.gammas))


#: Generated blocks: (file, block name) → (the selection it needs, its generator).
BLOCKS = {("docs/depth.md", "depth-table"): ("table", table_block),
          ("docs/guide/reproduce.md", "depth"): ("table", summary_block),
          ("docs/depth.md", "depth-protocols"): ("protocols", protocols_block),
          ("docs/depth.md", "ladder-table"): ("ladder", ladder_block),
          ("docs/depth.md", "depth-inference"): ("protocols", inference_block)}
#: Blocks that read more than their selection: the other selections they need.
ALSO_NEEDS = {("docs/depth.md", "depth-inference"): ("table", "ladder")}


def _only(results: Results, selection: Selection) -> Results:
    keys = set(selection.runs())
    return Results({k: v for k, v in results.records.items() if k in keys})


def generate(results: Results, file: str, name: str) -> str:
    """One block, from the record's runs (a clear error if runs it needs are missing)."""
    selection, make = BLOCKS[(file, name)]
    parts = [selection, *ALSO_NEEDS.get((file, name), ())]
    missing = [key for part in parts for key in SELECTIONS[part].missing(results)]
    if missing:
        config, seed, gamma = missing[0]
        raise LookupError(f"{file} block {name!r} needs {len(missing)} runs the record does "
                          f"not hold (first: {config.describe()}, seed {seed}, γ = {gamma}); "
                          "run python tools/depth_full_run.py")
    return make(results)


# --- figures ---------------------------------------------------------------------------

def figures(results: Results) -> dict[str, Any]:
    """The figures whose runs the record holds: name → matplotlib figure."""
    from .plot import gamma_curves, ladder_plot
    out = {}
    if CURVES.present(results):
        out["depth"] = gamma_curves(results, CURVES.configs, CURVES.seeds, CURVES.gammas)
    if LADDER_RUNS.present(results):
        out["ladder"] = ladder_plot(build_ladder(results, ladder_configs(), LADDER_RUNS.seeds,
                                                 LADDER_RUNS.gammas))
    return out

