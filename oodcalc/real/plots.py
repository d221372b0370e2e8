"""Figures of a real-text result (matplotlib; no torch): the rotation curves beside the
theory's, and the natural shift against the representation geometry."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..plots import _legend_below_panels, _outside_below, _plain, _pyplot
from .render import FAMILY_TITLES

__all__ = [
    "COLORS", "LABEL_PLACES", "arms", "drawn_points", "label_points", "rotation", "shift",
]


COLORS = {"scenario 1": "tab:red", "scenario 2": "tab:blue", "scenario 1 (head)": "tab:orange",
          "scenario 2 (head)": "tab:purple", "all": "tab:green"}


def _subtitle(result: dict[str, Any]) -> str:
    p = result["parameters"]
    return _plain(f"{p['model']}, layer-{p['layer']} attention block + head fine-tuned on "
                  f"{p['source']} reviews; {p['folds']}-fold CV × {p['seeds']} seed(s); "
                  "bands: 95 % bootstrap")


def rotation(result: dict[str, Any]):
    """Two panels over θ: the CE measured on held-out source reviews for each rotation
    (95 % bands, the paper's scenario-1 figures drawn), and the theory's OOD error e for the
    rotation geometry and the real class-mean geometry. Two scales, two panels: a second
    y-axis on one panel invited reading a cross-entropy against a squared error."""
    from .. import paper
    plt = _pyplot()
    rot = result["rotation"]
    theta = np.array(rot["theta"])
    fig, (measured, theory) = plt.subplots(1, 2, figsize=(12, 5.6), sharex=True)
    for fam, v in rot["families"].items():
        fam_title = _plain(FAMILY_TITLES.get(fam, fam))
        mean = np.array([x["mean"] for x in v["loss"]])
        lo = np.array([x["lo"] for x in v["loss"]])
        hi = np.array([x["hi"] for x in v["loss"]])
        color = COLORS.get(fam)
        measured.plot(theta, mean, "s--" if "(head)" in fam else "o-", ms=3, color=color,
                      label=f"{fam_title} (n = {result['parameters']['seeds']}"
                            f" seed(s) × {result['parameters']['folds']} folds)")
        measured.fill_between(theta, lo, hi, color=color, alpha=0.2, lw=0)
    start, end = paper.figure("bert-rotation-scenario1-start"), \
        paper.figure("bert-rotation-scenario1-end")
    measured.plot([theta[0], theta[-1]], [start.value, end.value], "x", ms=9, mew=2,
                  color=COLORS["scenario 1"], ls="none",
                  label=f"paper, scenario 1 ({start.setting['model']} on "
                        f"{start.setting['data']}): {start.printed}")
    measured.set_ylabel("cross-entropy on held-out source reviews (nats)")
    measured.set_title("measured (real encoder)", fontsize=9)
    # legends under the panels: inside, the curves of every rotation reach each corner
    _outside_below(measured, fontsize=7.5, ncol=1)
    # every curve as a fraction of its geometry's error at uniform attention (1/4 for
    # orthonormal features, (1 − ρ)/4 for class means at cosine ρ): one scale for all
    theory.plot(theta, np.array(rot["theory_rotation"]) / 0.25, "k--", lw=1.5,
                label="rotation geometry γ = cos θ (oodcalc predict --theta, K = 2)")
    for fam, v in rot["families"].items():
        if fam != "all":     # for all dimensions the real geometry gives the line above
            name = _plain(FAMILY_TITLES.get(fam, fam))
            theory.plot(theta, v["theory_raw_vs_uniform"], ":", lw=1.8, color=COLORS.get(fam),
                        label=f"class means as they are (ε relative): {name}")
            theory.plot(theta, np.array(v["theory_orthonormalised"]) / 0.25, "-.", lw=0.9,
                        color=COLORS.get(fam), alpha=0.6,
                        label=f"class means orthonormalised: {name}")
    theory.set_ylabel("theory's OOD error e / e at uniform attention")
    theory.set_ylim(bottom=0)
    theory.set_title("theory (exact dynamics, one layer)", fontsize=9)
    _outside_below(theory, fontsize=7.5, ncol=1)
    ticks = [0, math.pi / 4, math.pi / 2, 3 * math.pi / 4, math.pi]
    for ax in (measured, theory):
        ax.set_xticks(ticks, ["0", "π/4", "π/2", "3π/4", "π"])
        ax.set_xlabel("rotation angle θ (top axis: γ = cos θ)")
        top = ax.secondary_xaxis("top")
        top.set_xticks(ticks, [f"{math.cos(t):+.2f}" for t in ticks])
        ax.grid(alpha=0.3)
    fig.suptitle("Rotating hidden dimensions of a real encoder\n" + _subtitle(result),
                 fontsize=9)
    fig.tight_layout()
    return fig


def shift(result: dict[str, Any]):
    """Measured CE per domain against the cosine of its mean representation to the
    source's, the largest principal angle between class-mean subspaces, and the theory's
    OOD error for V, U the class means as they are (as a fraction of uniform attention's
    error) and orthonormalised, each with the split-source null: the range of its draws
    (light band) and the t interval of their mean (dark band)."""
    plt = _pyplot()
    rows = result["shift"]["rows"]
    mean = np.array([r["loss"]["mean"] for r in rows])
    err = np.array([[r["loss"]["mean"] - r["loss"]["lo"] for r in rows],
                    [r["loss"]["hi"] - r["loss"]["mean"] for r in rows]])
    xs = [("cosine of mean representation to the source's",
           [r["cos_mean"] for r in rows]),
          ("largest principal angle between class-mean subspaces (°)",
           [max(r["theory_orthonormalised"]["principal_angles_deg"]) for r in rows]),
          ("theory: class means as they are, ε relative\ne / e at uniform attention",
           [r["theory_raw"]["ood_vs_uniform"] for r in rows]),
          ("theory: class means orthonormalised, e",
           [r["theory_orthonormalised"]["ood_loss"] for r in rows])]
    null = result["shift"]["null"]
    balanced = np.array([r["balanced_loss"] for r in rows])
    balanced_err = np.array([[r["balanced_loss"] - r["balanced_interval"]["lo"] for r in rows],
                             [r["balanced_interval"]["hi"] - r["balanced_loss"] for r in rows]])
    fig, axes = plt.subplots(1, 4, figsize=(15, 4.2), sharey=True)
    for ax, column in zip(axes[2:], ("raw_vs_uniform", "orthonormalised")):
        # shaded spans, not markers: the domains' names may lie over them
        draws = null["values"][column]
        ax.axvspan(min(draws), max(draws), color="0.92", lw=0,
                   label="split-source null: range of its draws")
        t = null["summary"][column]["null"]
        if t["lo"] is not None:
            ax.axvspan(t["lo"], t["hi"], color="0.75", lw=0,
                       label="split-source null: its mean's 95 % t interval")
    for ax, (label, x) in zip(axes, xs):
        ax.errorbar(x, mean, yerr=err, fmt="o", capsize=3, label="CE (95 % bootstrap)")
        ax.errorbar(x, balanced, yerr=balanced_err, fmt="s", mfc="none", capsize=3,
                    color="tab:orange", label="class-balanced CE (95 % bootstrap)")
        ax.margins(x=0.12)                # room for the names beside the outer points
        ax.set_xlabel(label, fontsize=8)
    for ax in axes[2:]:             # the theory's targets crowd at the right: room for names
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi + 0.35 * (hi - lo))
    axes[0].invert_xaxis()          # less similar to the right, as the other panels
    axes[0].set_ylabel("cross-entropy (nats)")
    # under the panels: inside, it covered the source domain's point
    handles, labels = axes[0].get_legend_handles_labels()
    for h, lab in zip(*axes[2].get_legend_handles_labels()):
        if lab.startswith("split-source"):
            handles.append(h)
            labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Natural shift between review domains\n" + _subtitle(result), fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    names = [_plain(r["domain"]) for r in rows]
    for ax, (_, x) in zip(axes, xs):
        label_points(ax, x, mean, names)
    return fig


#: Where a point's name may go, in points from it: right, left, above right, below right...
LABEL_PLACES = ((5, 4, "left", "bottom"), (-5, 4, "right", "bottom"),
                (5, -4, "left", "top"), (-5, -4, "right", "top"),
                (0, 9, "center", "bottom"), (0, -9, "center", "top"))


def label_points(ax, xs, ys, names) -> None:
    """Name each point beside it, at the first place in :data:`LABEL_PLACES` where the
    name overlaps no name already placed, nothing drawn (markers, error bars) and stays
    in the axes (nearby domains' names were printed over each other and over the bars)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    drawn = drawn_points(ax)
    box = ax.get_window_extent(renderer)
    placed = []
    for xy, name in zip(zip(xs, ys), names):
        for dx, dy, ha, va in LABEL_PLACES:
            text = ax.annotate(name, xy, textcoords="offset points", xytext=(dx, dy),
                               fontsize=8, ha=ha, va=va)
            extent = text.get_window_extent(renderer).expanded(1.05, 1.1)
            clear = (not any(extent.overlaps(b) for b in placed)
                     and not extent.count_contains(drawn)
                     and box.contains(extent.x0, extent.y0) and box.contains(extent.x1, extent.y1))
            if clear or (dx, dy) == LABEL_PLACES[-1][:2]:
                placed.append(extent)
                break
            text.remove()


def drawn_points(ax, per_segment: int = 24) -> np.ndarray:
    """Points along everything drawn in ``ax`` (lines, markers, error bars), in display
    coordinates: what a label or a legend must not cover."""
    pieces = []
    for line in ax.get_lines():
        xy = line.get_transform().transform(
            np.column_stack(line.get_data(orig=False)).astype(float))
        joined = line.get_linestyle() not in ("None", "none", "", " ")   # else markers only
        pieces.append(_along(xy, per_segment) if joined else xy[np.isfinite(xy).all(axis=1)])
    for collection in ax.collections:
        for segment in getattr(collection, "get_segments", lambda: [])():
            pieces.append(_along(collection.get_transform().transform(segment), per_segment))
    pieces = [p for p in pieces if len(p)]
    return np.concatenate(pieces) if pieces else np.empty((0, 2))


def _along(xy: np.ndarray, n: int) -> np.ndarray:
    """``xy``'s vertices and ``n`` points on each segment between them (finite only)."""
    xy = xy[np.isfinite(xy).all(axis=1)]
    if len(xy) < 2:
        return xy
    t = np.linspace(0, 1, n, endpoint=False)[None, :, None]
    inner = xy[:-1, None, :] + t * (xy[1:, None, :] - xy[:-1, None, :])
    return np.concatenate([inner.reshape(-1, 2), xy[-1:]])


def arms(result: dict[str, Any], grid: int = 21):
    """F against the new task's held-out loss per arm, one panel per forgetting condition:
    x is s, the share of the way (in log loss) from the start's loss L(0) to plain's at the
    end of its fine-tune, y the mean over fits reaching that level of F read off each fit's
    curve there (oodcalc.real.arms.matched), drawn while every fit reaches it; the design's
    levels dotted. Needs a run with --arms."""
    from .arms import levels, matched
    plt = _pyplot()
    conditions = result["arms"]["conditions"]
    cols = min(3, len(conditions))
    rows = -(-len(conditions) // cols)
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(4.2 * cols, 3.0 * rows + 1.2))
    s_grid = np.linspace(0, 1, grid)
    for k, c in enumerate(conditions):
        ax = axes[k // cols][k % cols]
        ax.axhline(0, color="0.6", lw=0.8)
        for s in result["arms"]["matched_levels"]:
            ax.axvline(s, color="0.8", ls=":", lw=0.8)
        plain = c["rows"][0]["fits"]
        lv = [levels(f["curve"][0][0], f["curve"][-1][0], list(s_grid)) for f in plain]
        for i, r in enumerate(c["rows"]):
            # fits where plain did not lower the new task's loss have no levels: left out
            per_fit = [matched(f["curve"], t) for f, t in zip(r["fits"], lv) if t is not None]
            # the mean over every fit, drawn while every fit has reached the level (a mean
            # over the fits still in would jump as they drop out)
            ys = [np.nan if any(x[j] is None for x in per_fit) or not per_fit
                  else np.mean([x[j] for x in per_fit]) for j in range(grid)]
            ax.plot(s_grid, ys, "-", color=f"C{i}", lw=2.2 if i == 0 else 1.4,
                    label=_plain(r["label"]))
        used = sum(t is not None for t in lv)
        ax.set_title(_plain(f"{c['condition']} ({used} of {len(lv)} fits: plain lowered "
                            "its loss)" if used < len(lv) else c["condition"]), fontsize=9)
        ax.grid(alpha=0.3)
        ax.set_xlabel("s: new task's loss from L(0) (0) to plain's end (1), log", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel("F on the held-out source (nats)")
    for k in range(len(conditions), rows * cols):
        axes[k // cols][k % cols].axis("off")
    p = result["parameters"]
    _legend_below_panels(fig, axes[0][0], _plain(
        f"Forgetting at matched new-task loss per arm (mean over {p['folds']} folds × "
        f"{p['seeds']} seed(s); a line ends where a fit no longer reaches the level). "
        f"{p['model']}, layer-{p['layer']} attention block + head, source {p['source']}"))
    return fig
