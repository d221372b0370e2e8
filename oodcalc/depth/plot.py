"""The γ-curve: forgetting F against γ per depth (mean and 95% bootstrap band over seeds),
the one-layer theory's curve at the same ε and the paper's nine points; one panel per
architecture and optimizer (matplotlib)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .experiment import Results
from .protocol import PAPER_GAMMAS, DepthConfig
from .table import make_cell, paper_figure, theory

#: F spans the theory's ~1e-3 and the paper's ~0.3: symlog, linear inside ±LINEAR.
LINEAR = 0.01


def gamma_curves(results: Results, configs: Sequence[DepthConfig], seeds: Sequence[int],
                 gammas: Sequence[float]):
    from ..plots import _pyplot
    plt = _pyplot()
    panels: dict[tuple[str, str], list[DepthConfig]] = {}
    for c in configs:
        panels.setdefault((c.arch, c.optimizer), []).append(c)
    archs = list(dict.fromkeys(a for a, _ in panels))
    optimizers = list(dict.fromkeys(o for _, o in panels))
    fig, axes = plt.subplots(len(archs), len(optimizers), squeeze=False, sharex=True,
                             figsize=(5.6 * len(optimizers), 4.2 * len(archs)))
    fine = np.linspace(-1, 1, 81)
    eps, ft_steps = configs[0].eps, configs[0].ft_steps
    theory_line = [theory(float(g), eps, ft_steps).F for g in fine]
    for (arch, optimizer), group in panels.items():
        ax = axes[archs.index(arch)][optimizers.index(optimizer)]
        ax.axhline(0, color="0.6", lw=0.8)
        ax.plot(fine, theory_line, color="k", lw=1.6, label=f"theory, 1 layer (ε = {eps:g}"
                + (f", {ft_steps} fine-tuning steps)" if ft_steps else ")"))
        for i, config in enumerate(sorted(group, key=lambda c: c.layers)):
            color = f"C{i}"
            cells = [make_cell(results, config, seeds, g) for g in gammas]
            x = np.array([c.gamma for c in cells])
            mean = np.array([c.F.mean for c in cells])
            ax.fill_between(x, [c.F.low for c in cells], [c.F.high for c in cells],
                            color=color, alpha=0.2, lw=0)
            ax.plot(x, mean, "o-", color=color, ms=3.5, lw=1.4,
                    label=f"ours, {config.layers} layer{'s' * (config.layers > 1)}")
            points = [(g, f.value) for g in PAPER_GAMMAS
                      if (f := paper_figure(config.layers, g)) is not None]
            if points:
                ax.plot(*zip(*points), "D", mfc="none", mec=color, mew=1.6, ms=8,
                        label=f"paper, {config.layers} layer{'s' * (config.layers > 1)}")
        ax.set_yscale("symlog", linthresh=LINEAR)
        ax.set_title(f"{arch}, {optimizer} (lr {group[0].lr:g})", fontsize=10)
        ax.set_xlabel("γ = ⟨v2, u2⟩  (γ1 = 1)")
        ax.set_ylabel(f"F  (symlog, linear within ±{LINEAR:g})")
        ax.grid(alpha=0.3)
    # one legend for all panels, below them, so that no data hides behind it
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Forgetting after fine-tuning, width {configs[0].width}, {len(seeds)} seeds "
                 "(band: 95% bootstrap CI; runs that never met the stopping rule left out)",
                 fontsize=10)
    rows = (len(labels) + 3) // 4
    fig.tight_layout(rect=(0, 0.035 * rows / len(archs) + 0.02, 1, 1))
    return fig


def ladder_plot(table):
    """F per rung (mean and 95% bootstrap interval over seeds), one panel per γ, with the
    one-layer theory's F at the same ε drawn across (a :class:`~.ladder.LadderTable`)."""
    from ..plots import _pyplot
    plt = _pyplot()
    gammas = table.gammas
    fig, axes = plt.subplots(1, len(gammas), squeeze=False, sharey=True,
                             figsize=(4.2 * len(gammas), 4.2))
    for ax, gamma in zip(axes[0], gammas):
        rows = [r for r in table.rows if r.cell.gamma == gamma]
        x = np.arange(len(rows))
        names = list(dict.fromkeys(r.rung.name for r in rows))      # one colour per rung
        ax.axhline(0, color="0.6", lw=0.8)
        ax.axhline(rows[0].cell.theory.F, color="k", lw=1.4, ls="--",
                   label=f"theory, 1 layer: F = {rows[0].cell.theory.F:+.4f}")
        for i, row in zip(x, rows):
            F = row.cell.F
            if F.n == 0:
                continue
            ax.errorbar([i], [F.mean], yerr=[[F.mean - F.low], [F.high - F.mean]], fmt="o",
                        color=f"C{names.index(row.rung.name)}",
                        capsize=3, ms=5)
            ax.plot([i] * len(row.cell.per_seed), [s["F"] for s in row.cell.per_seed], ".",
                    color="0.4", ms=3)
        ax.set_xticks(x, [f"{r.rung.name}\n{r.cell.config.layers} L" for r in rows],
                      rotation=45, ha="right", fontsize=8)
        ax.set_yscale("symlog", linthresh=LINEAR / 10)
        ax.set_title(f"γ = {gamma:+.2f}  (γ1 = 1)", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel(f"F  (symlog, linear within ±{LINEAR / 10:g})")
    p = table.protocol
    fig.suptitle(f"The ladder: forgetting F per rung (mean, 95% bootstrap CI, dots: seeds); "
                 f"SGD lr {p.lr:g}, ε = {p.eps:g}, {len(table.seeds)} seeds", fontsize=10)
    fig.tight_layout()
    return fig
