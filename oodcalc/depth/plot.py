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
    eps = configs[0].eps
    theory_line = [theory(float(g), eps).F for g in fine]
    for (arch, optimizer), group in panels.items():
        ax = axes[archs.index(arch)][optimizers.index(optimizer)]
        ax.axhline(0, color="0.6", lw=0.8)
        ax.plot(fine, theory_line, color="k", lw=1.6, label=f"theory, 1 layer (ε = {eps:g})")
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
