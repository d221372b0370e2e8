"""The γ-curve: forgetting F and F_k against γ per depth (mean and 95% t band over
seeds), the one-layer theory's curve under the same protocol and the paper's nine points;
one column per architecture and optimizer; and the ladder's F per rung (matplotlib)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .experiment import Results
from .protocol import PAPER_GAMMAS, DepthConfig
from .table import make_cell, paper_figure, theory

__all__ = ["gamma_curves", "ladder_plot"]


def gamma_curves(results: Results, configs: Sequence[DepthConfig], seeds: Sequence[int],
                 gammas: Sequence[float]):
    """One column per architecture and optimizer. Top: F against γ per depth (mean, 95%
    t band), the one-layer theory's curve under the same protocol, the paper's
    points (those beyond the axis listed in a box, with their value). Bottom: F_1
    and F_2 per depth, and the theory's. Linear axes; a point from fewer usable seeds than
    were run carries its n."""
    from ..plots import _pyplot
    plt = _pyplot()
    panels: dict[tuple[str, str], list[DepthConfig]] = {}
    for c in configs:
        panels.setdefault((c.arch, c.optimizer), []).append(c)
    fig, axes = plt.subplots(2, len(panels), squeeze=False, sharex=True, sharey="row",
                             figsize=(4.4 * len(panels), 7.6),
                             gridspec_kw={"height_ratios": [3, 2]})
    fine = np.linspace(-1, 1, 81)
    eps, ft_steps = configs[0].eps, configs[0].ft_steps
    exact = [theory(float(g), eps, ft_steps) for g in fine]
    cells = {c: [make_cell(results, c, seeds, g) for g in gammas] for c in configs}
    values = [v for cs in cells.values() for cell in cs if cell.F.n
              for v in (cell.F.low, cell.F.high)]
    values = values or [-0.01, 0.01]          # no usable run: an axis around 0
    span = max(values) - min(values)
    top = (min(values) - 0.08 * span, max(values) + 0.12 * span)
    protocol = (f"ε = {eps:g}" + (f", {ft_steps} fine-tuning steps" if ft_steps else ""))
    for col, ((arch, optimizer), group) in enumerate(panels.items()):
        ax, ax_k = axes[0][col], axes[1][col]
        for a in (ax, ax_k):
            a.axhline(0, color="0.6", lw=0.8)
            a.grid(alpha=0.3)
        ax.plot(fine, [t.F for t in exact], color="k", lw=1.6,
                label=f"theory, 1 layer ({protocol})")
        for k, style in ((0, "-"), (1, "--")):
            ax_k.plot(fine, [t.F_k[k] for t in exact], color="k", ls=style, lw=1.2,
                      label=f"theory $F_{k + 1}$")
        off_axis: list[str] = []
        for i, config in enumerate(sorted(group, key=lambda c: c.layers)):
            color, layers = f"C{i}", f"{config.layers} layer{'s' * (config.layers > 1)}"
            row = [c for c in cells[config] if c.F.n]
            x = np.array([c.gamma for c in row])
            ax.fill_between(x, [c.F.low for c in row], [c.F.high for c in row], color=color,
                            alpha=0.2, lw=0)
            ax.plot(x, [c.F.mean for c in row], "o-", color=color, ms=3.5, lw=1.4,
                    label=f"ours, {layers}")
            for c in row:
                if c.F.n < len(seeds):
                    ax.annotate(f"n={c.F.n}", (c.gamma, c.F.mean), fontsize=6.5, color=color,
                                textcoords="offset points", xytext=(2, -9))
            for k, (style, marker) in enumerate((("-", "o"), ("--", "s"))):
                mean = np.array([c.F_k[k].mean for c in row])
                shift = (k - 0.5) * 0.012          # F_1 and F_2 side by side at each γ
                ax_k.errorbar(x + shift, mean,
                              yerr=[mean - [c.F_k[k].low for c in row],
                                    [c.F_k[k].high for c in row] - mean],
                              ls=style, marker=marker, ms=3, lw=1.1, elinewidth=0.8,
                              capsize=0, color=color, label=f"ours $F_{k + 1}$, {layers}")
            beyond = []
            for g in PAPER_GAMMAS:
                figure = paper_figure(config.layers, g)
                if figure is None:
                    continue
                margin = 0.04 * (top[1] - top[0])     # a marker on the edge would be cut
                if top[0] + margin <= figure.value <= top[1] - margin:
                    ax.plot([g], [figure.value], "D", mfc="none", mec=color, mew=1.6, ms=8)
                else:        # beyond the axis: listed in the panel's box instead
                    beyond.append(f"γ {g:+.2f}: {figure.value:+.2f}")
            if beyond:
                off_axis.append(f"{layers}: " + ", ".join(beyond))
        if off_axis:
            ax.text(0.98, 0.98, "paper, beyond this axis\n" + "\n".join(off_axis),
                    transform=ax.transAxes, ha="right", va="top", fontsize=7,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.7", "alpha": 0.9})
        ax.set_ylim(*top)
        ax.set_title(f"{arch}, {optimizer} (lr {group[0].lr:g})", fontsize=10)
        ax_k.set_xlabel(r"$\gamma = \langle v_2, u_2 \rangle$  ($\gamma_1$ = 1)")
    axes[0][0].set_ylabel("$F = F_1 + F_2$")
    axes[1][0].set_ylabel("$F_k$ ($F_1$ solid, $F_2$ dashed)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], ls="none", marker="D", mfc="none", mec="0.3", mew=1.6))
    labels.append("paper (in the box when beyond the axis)")
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(f"Forgetting after fine-tuning, width {configs[0].width}, {protocol}; "
                 f"{len(seeds)} seeds per point unless marked n (band: 95% t CI; "
                 "runs that never met the stopping rule left out)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def ladder_plot(table):
    """F per rung (mean and 95% t interval over seeds, dots: seeds), one column per
    γ, with the one-layer theory's F at the same ε drawn across (a
    :class:`~.ladder.LadderTable`). Linear axes: the top row shows every rung, the bottom
    row the one-layer rungs on their own scale, where the departures from the theory
    begin (a symlog axis would hide them)."""
    from ..plots import _pyplot
    plt = _pyplot()
    gammas = table.gammas
    fig, axes = plt.subplots(2, len(gammas), squeeze=False, sharey="row",
                             figsize=(4.2 * len(gammas), 7.4),
                             gridspec_kw={"height_ratios": [3, 2]})
    names = list(dict.fromkeys(r.rung.name for r in table.rows))     # one colour per rung
    for col, gamma in enumerate(gammas):
        every = [r for r in table.rows if r.cell.gamma == gamma]
        theory_F = every[0].cell.theory.F
        for ax, rows in ((axes[0][col], every),
                         (axes[1][col], [r for r in every if r.cell.config.layers == 1])):
            x = np.arange(len(rows))
            ax.axhline(0, color="0.6", lw=0.8)
            ax.axhline(theory_F, color="k", lw=1.4, ls="--",
                       label=f"theory, 1 layer: F = {theory_F:+.4f}")
            for i, row in zip(x, rows):
                F = row.cell.F
                if F.n == 0:
                    continue
                ax.errorbar([i], [F.mean], yerr=[[F.mean - F.low], [F.high - F.mean]],
                            fmt="o", color=f"C{names.index(row.rung.name)}", capsize=3, ms=5)
                ax.plot([i] * len(row.cell.per_seed), [s["F"] for s in row.cell.per_seed],
                        ".", color="0.4", ms=3)
            ax.set_xticks(x, [f"{r.rung.name}\n{r.cell.config.layers} L" for r in rows],
                          rotation=45 if len(rows) > 3 else 0, ha="right" if len(rows) > 3
                          else "center", fontsize=8)
            ax.grid(alpha=0.3)
        axes[0][col].set_title(f"γ = {gamma:+.2f}  ($\\gamma_1$ = 1)", fontsize=10)
        axes[0][col].legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylabel("$F = F_1 + F_2$, every rung")
    axes[1][0].set_ylabel("F, the one-layer rungs")
    p = table.protocol
    fig.suptitle(f"The ladder: forgetting F per rung (mean, 95% t CI, dots: seeds); "
                 f"SGD lr {p.lr:g}, ε = {p.eps:g}, {len(table.seeds)} seeds per rung", fontsize=10)
    fig.tight_layout()
    return fig
