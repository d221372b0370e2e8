"""Figures of a real-text result (matplotlib; no torch): the rotation curves with the
theory on a second axis, and the natural shift against the representation geometry."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..plots import _pyplot
from .render import FAMILY_TITLES

COLORS = {"scenario 1": "tab:red", "scenario 2": "tab:blue", "all": "tab:green"}


def _subtitle(result: dict[str, Any]) -> str:
    p = result["parameters"]
    return (f"{p['model']}, layer-{p['layer']} attention block + head fine-tuned on "
            f"{p['source']} reviews; {p['folds']}-fold CV × {p['seeds']} seed(s); "
            "bands: 95 % bootstrap")


def rotation(result: dict[str, Any]):
    """CE on held-out source reviews against θ for each rotation, and the theory's OOD
    error (rotation geometry, γ = cos θ) on the right-hand axis."""
    plt = _pyplot()
    rot = result["rotation"]
    theta = np.array(rot["theta"])
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for fam, v in rot["families"].items():
        mean = np.array([x["mean"] for x in v["loss"]])
        lo = np.array([x["lo"] for x in v["loss"]])
        hi = np.array([x["hi"] for x in v["loss"]])
        color = COLORS.get(fam)
        ax.plot(theta, mean, "o-", ms=3, color=color,
                label=f"{FAMILY_TITLES.get(fam, fam)}: measured CE")
        ax.fill_between(theta, lo, hi, color=color, alpha=0.2, lw=0)
    ax.set_xlabel("rotation angle θ (top axis: γ = cos θ)")
    ax.set_ylabel("cross-entropy on held-out source reviews (nats)")
    ticks = [0, math.pi / 4, math.pi / 2, 3 * math.pi / 4, math.pi]
    ax.set_xticks(ticks, ["0", "π/4", "π/2", "3π/4", "π"])
    top = ax.secondary_xaxis("top")
    top.set_xticks(ticks, [f"{math.cos(t):+.2f}" for t in ticks])
    twin = ax.twinx()
    twin.plot(theta, rot["theory_rotation"], "k--", lw=1.5,
              label="theory, rotation geometry γ = cos θ (oodcalc predict --theta, K = 2)")
    for fam, v in rot["families"].items():
        if fam != "all":     # for all dimensions the real geometry gives the line above
            twin.plot(theta, v["theory_real"], ":", lw=1.5, color=COLORS.get(fam),
                      label=f"theory, real class-mean geometry: {fam}")
    twin.set_ylabel("theory's OOD error e (squared error)")
    twin.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    ax.set_title("Rotating hidden dimensions of a real encoder\n" + _subtitle(result),
                 fontsize=9)
    fig.tight_layout()
    return fig


def shift(result: dict[str, Any]):
    """Measured CE per domain against the cosine of its mean representation to the
    source's, the largest principal angle between class-mean subspaces, and the theory's
    OOD error for V, U built from those class means."""
    plt = _pyplot()
    rows = result["shift"]["rows"]
    mean = np.array([r["loss"]["mean"] for r in rows])
    err = np.array([[r["loss"]["mean"] - r["loss"]["lo"] for r in rows],
                    [r["loss"]["hi"] - r["loss"]["mean"] for r in rows]])
    xs = [("cosine of mean representation to the source's",
           [r["cos_mean"] for r in rows]),
          ("largest principal angle between class-mean subspaces (°)",
           [max(r["theory"]["principal_angles_deg"]) for r in rows]),
          ("theory's OOD error e (oodcalc predict, V, U from class means)",
           [r["theory"]["ood_loss"] for r in rows])]
    balanced = [r["balanced_loss"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4), sharey=True)
    for ax, (label, x) in zip(axes, xs):
        ax.errorbar(x, mean, yerr=err, fmt="o", capsize=3, label="CE (95 % bootstrap)")
        ax.plot(x, balanced, "s", mfc="none", color="tab:orange", label="class-balanced CE")
        for xi, yi, r in zip(x, mean, rows):
            ax.annotate(r["domain"], (xi, yi), textcoords="offset points", xytext=(5, 4),
                        fontsize=8)
        ax.set_xlabel(label, fontsize=8)
    axes[0].invert_xaxis()          # less similar to the right, as the other panels
    axes[0].set_ylabel("cross-entropy (nats)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Natural shift between review domains\n" + _subtitle(result), fontsize=9)
    fig.tight_layout()
    return fig
