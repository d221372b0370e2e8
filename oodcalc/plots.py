"""Pictures of the theory (matplotlib, the ``plot`` extra): each function returns a
Figure; :func:`save` writes it atomically in the format its file extension names."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import geometry as geo
from . import estimates, limits, theory
from .finetune.dynamics import ood_start
from .errors import InputError, NothingToDraw, param
from .io import check_output as check_file, write_atomic
from .model import conditional_errors
from .prediction import pretrain_logits
from .report import Report
from .setting import Protocol, Setting

__all__ = [
    "ETA_FT", "FORMATS", "K3_CLASS_COLORS", "K3_DIRECTION_COLORS", "K3_LABELS", "K3_SHORT",
    "K3_VERDICT_COLORS", "LABELLED", "MPLCONFIGDIR", "OVERLAP_SIGN_COLORS", "advice_figure",
    "check_output", "error_curves", "forgetting_curve", "loss_trajectories",
    "ood_error_vs_theta", "overlap_map", "overlap_map_figure", "phase_diagram",
    "phase_diagram_k2", "phase_k3", "phase_k3_slices", "protocol_text", "save",
    "weight_trajectories",
]


FORMATS = (".png", ".svg", ".pdf")


def _pyplot():
    if "matplotlib" not in sys.modules:
        _usable_matplotlib_dirs()
    try:
        import matplotlib
    except ImportError:
        raise InputError("plot", "matplotlib missing", 'install the plot extra: '
                         'pip install "oodcalc[plot]"') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


#: Environment variable matplotlib reads its configuration and cache directory from.
MPLCONFIGDIR = "MPLCONFIGDIR"


def _usable_matplotlib_dirs() -> None:
    """Before matplotlib is imported: when its default configuration or cache directory
    cannot be used (``XDG_CACHE_HOME`` a file, ``HOME`` read-only...), point
    ``MPLCONFIGDIR`` at a private directory of oodcalc's in the temporary directory, so
    that matplotlib neither prints its two warning lines nor makes a new temporary
    directory on every run. An ``MPLCONFIGDIR`` the user set is left alone."""
    if os.environ.get(MPLCONFIGDIR):
        return
    home = os.path.expanduser("~")
    defaults = (os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
                os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"))
    if all(_can_hold(os.path.join(base, "matplotlib")) for base in defaults):
        return
    private = _private_directory()
    if private is not None:
        os.environ[MPLCONFIGDIR] = private


def _can_hold(path: str) -> bool:
    """``path`` is a writable directory, or ``mkdir -p`` could make it one (nothing is
    created here)."""
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _private_directory() -> str | None:
    """``$TMPDIR/oodcalc-matplotlib-UID`` (mode 700, reused: matplotlib's font cache
    lives there), or a fresh temporary directory removed at exit when that name is taken
    by something that is not this user's private directory."""
    import atexit
    import shutil
    import stat
    import tempfile
    path = os.path.join(tempfile.gettempdir(), f"oodcalc-matplotlib-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() \
                and not st.st_mode & 0o077 and os.access(path, os.W_OK | os.X_OK):
            return path
        fresh = tempfile.mkdtemp(prefix="oodcalc-matplotlib-")
    except OSError:
        return None
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)
    return fresh


def check_output(path: str | Path, option: str = "--output") -> Path:
    """Fail before any work if the figure could not be written there."""
    check_file(path, option, suffixes=FORMATS)
    _pyplot()
    return Path(path)


def save(fig, path: str | Path, option: str = "--output") -> Path:
    path = check_output(path, option)
    written = write_atomic(path, lambda tmp: fig.savefig(tmp, format=path.suffix[1:].lower(),
                                                         dpi=150, bbox_inches="tight"),
                           option=option)
    _pyplot().close(fig)
    return written


def _check_drawing(kind: str, report: Report) -> None:
    """Refuse a figure too large to draw, before drawing (``limits.check_figure``)."""
    trajectories = report.trajectories
    points = len(trajectories["pretrain"]) + len(trajectories["finetune_ood"])
    limits.check_figure(estimates.trajectory_curves(kind, report.parameters["K"]), points)


def protocol_text(p: dict | Protocol) -> str:
    """The protocol in a figure's words (subscripts as mathtext, not ``η_ft``)."""
    p = p.describe() if isinstance(p, Protocol) else p
    text = f"ε = {p['eps']:g}, η = {p['eta']:g}, {ETA_FT} = {p['eta_ft']:g}"
    if p.get("ft_steps") is not None:
        steps = p["ft_steps"]
        return text + f", {steps:,} fine-tuning step{'s' if steps != 1 else ''}"
    if p.get("eps_ft", p["eps"]) != p["eps"]:
        return text + rf", $\varepsilon_{{\rm ft}}$ = {p['eps_ft']:g}"
    return text


#: Mathtext for the symbols the figures name: matplotlib draws ``$...$`` as TeX-like
#: maths; raw text such as ``β_{2,1}`` would be printed as it is written.
ETA_FT = r"$\eta_{\rm ft}$"


def _plain(text: str) -> str:
    """User-given text (a file name) shown as written: a ``$`` would start maths."""
    return text.replace("$", r"\$")


def _marker(n_points: int) -> str:
    """A line of one point is invisible; a marker shows it."""
    return "o" if n_points == 1 else ""


def _outside_below(ax, **options):
    """The legend under the axes (outside the data: curves reach every corner)."""
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18),
                     **{"fontsize": 8, "ncol": 2, "frameon": False, **options})


def _legend_below_panels(fig, ax, title: str) -> None:
    """One legend for every panel, below them (inside a panel ten arms hide its curves),
    in as many columns as the figure's width holds (a label is up to ~2.5 in at 8 pt),
    and ``title`` wrapped to the figure's width (~11 characters an inch at 10 pt); the
    panels fill what is left."""
    import textwrap
    width, height = fig.get_size_inches()
    handles, labels = ax.get_legend_handles_labels()
    ncol = max(1, min(len(labels), int(width // 2.5)))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    title = textwrap.fill(title, width=int(width * 11), break_on_hyphens=False)
    fig.suptitle(title, fontsize=10)
    rows = -(-len(labels) // ncol)
    fig.tight_layout(rect=(0, (0.15 + 0.2 * rows) / height, 1,
                           1 - (0.15 + 0.17 * (title.count("\n") + 1)) / height))


# --- OOD error against the rotation angle ---------------------------------------------

def ood_error_vs_theta(K: int = 4, protocol: Protocol | None = None, *,
                       markers: int = 7,
                       simulators: dict[str, Callable[[Setting], Report]] | None = None):
    """Theory (line): OOD loss at T1 for every θ; simulation (markers) at a few θ."""
    from .simulate import simulate_population
    protocol = protocol or Protocol()
    limits.check_ood_vs_theta(K, protocol, None)
    plt = _pyplot()
    simulators = {"GD on Q": simulate_population} if simulators is None else simulators
    pretrained = pretrain_logits(K, protocol.eps, protocol.eta, protocol.max_steps)
    z1 = pretrained.z[0]
    thetas = np.linspace(0, math.pi / 2, 181)
    line = [conditional_errors(ood_start(z1, geo.rotation(t, K).M)).mean() for t in thetas]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(thetas, line, color="C0", lw=2, label="theory: exact dynamics + claim 5")
    grid = np.linspace(0, math.pi / 2, markers)
    for i, (label, simulate) in enumerate(simulators.items()):
        values = [simulate(Setting(geo.rotation(t, K, d=2 * K), protocol)).ood.error.mean()
                  for t in grid]
        ax.plot(grid, values, "os^"[i % 3], mfc="none", color=f"C{i + 1}", ms=8 + 3 * i,
                label=f"simulation: {label}")
    ax.axhline(theory.uniform_error(K), color="grey", ls="--", lw=1,
               label=f"random guessing, $(K-1)/(2K)$ = {theory.uniform_error(K):g}")
    ax.axhline(protocol.eps, color="grey", ls=":", lw=1,
               label=f"stopping level ε = {protocol.eps:g}")
    if not np.any(pretrained.steps):       # a flat line at random guessing: say why
        ax.text(0.5, 0.5, f"pretraining takes no step ($T_1$ = 0 at ε = {protocol.eps:g}):\n"
                "every rotation is at random guessing", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="0.3")
    ax.set_xticks([0, math.pi / 6, math.pi / 4, math.pi / 3, math.pi / 2],
                  ["0", "π/6", "π/4", "π/3", "π/2"])
    ax.set_xlabel("rotation angle θ of every feature out of span(V)")
    ax.set_ylabel(r"OOD loss at $T_1$,  $L = \Sigma_k e_k / K$")
    ax.set_title(f"OOD error after pretraining, K = {K}  ({protocol_text(protocol)})",
                 fontsize=10)
    _outside_below(ax)
    ax.grid(alpha=0.3)
    return fig


# --- losses and weights through both phases -------------------------------------------

def _phases(report: Report):
    """Source and OOD logits at every step of pretraining and fine-tuning."""
    M = np.asarray(report.parameters["geometry"]["M"])
    pre = report.trajectories["pretrain"]
    T1 = len(pre) - 1
    source = np.concatenate([pre, report.trajectories["finetune_source"][1:]])
    ood = np.concatenate([ood_start(pre, M), report.trajectories["finetune_ood"][1:]])
    return T1, source, ood


def _check_moves(report: Report, figure: str) -> None:
    """Refuse a trajectory figure of one point: neither phase takes a step."""
    T1, T2 = report.pretrain.T1, report.finetune.T2
    if T1 == 0 and T2 == 0:
        eps = report.parameters["eps"]
        raise NothingToDraw(
            f"{figure}: nothing to draw: neither phase takes a step here (T1 = T2 = 0: the "
            f"losses at the start already meet the stopping level ε = {eps:g}); "
            f"{param('eps', 'lower')} to train")


def _title(report: Report) -> str:
    p = report.parameters
    where = _plain(geo.describe_text(p["geometry"], max_values=LABELLED))
    where = where.replace("u_1 = v̄", r"$u_1 = \bar{v}$")
    return f"{where}; K = {p['K']}, {protocol_text(p)}"


#: Up to this many features every curve has its own legend entry; beyond, one entry per
#: kind of curve (K = 64 gave legends of 4,000 entries that buried the axes).
LABELLED = 6


def _label(k: int, K: int, each: str, together: str) -> str | None:
    """Feature k's legend entry: its own up to ``LABELLED`` features, else one for all."""
    if K <= LABELLED:
        return each
    return together if k == 0 else None


def error_curves(report: Report) -> dict[str, Any]:
    """What ``loss_trajectories`` draws: ``steps`` (0 … T1 + T2), ``T1``, the per-feature
    errors ``e_k`` on the source (``source``) and OOD (``ood``) features at every step,
    ``(steps, K)``, and the stopping level ``eps`` they are compared with: the quantity
    of predict's sections 1 and 2 and of the explorer's error plot (no matplotlib)."""
    T1, source, ood = _phases(report)
    return {"steps": np.arange(len(source)), "T1": T1, "source": conditional_errors(source),
            "ood": conditional_errors(ood), "eps": report.parameters["eps"]}


def loss_trajectories(report: Report):
    """Per-feature source and OOD errors ``e_k`` through pretraining and fine-tuning, with
    the stopping level ε (``error_curves``)."""
    _check_drawing("loss_trajectories", report)
    _check_moves(report, "losses")
    plt = _pyplot()
    curves = error_curves(report)
    T1, steps, K = curves["T1"], curves["steps"], report.parameters["K"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k in range(K):
        ax.plot(steps, curves["source"][:, k], color=f"C{k}", lw=1.8,
                marker=_marker(len(steps)),
                label=_label(k, K, f"source $v_{{{k + 1}}}$", f"source $v_k$, k = 1..{K}"))
        ax.plot(steps, curves["ood"][:, k], color=f"C{k}", lw=1.2, ls="--",
                marker=_marker(len(steps)), mfc="none",
                label=_label(k, K, f"OOD $u_{{{k + 1}}}$", f"OOD $u_k$, k = 1..{K}"))
    eps = curves["eps"]
    ax.axhline(eps, color="grey", ls=":", lw=1, label=f"stopping level ε = {eps:g}")
    ax.axvline(T1, color="black", lw=0.8)
    ax.annotate(r" $T_1$: fine-tuning on U starts", (T1, 0.02),
                xycoords=("data", "axes fraction"), fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("gradient step (pretraining on V, then fine-tuning on U)")
    ax.set_ylabel(r"per-feature error $e_k$  (loss $L_k = e_k / K$)")
    ax.set_title(_title(report), fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax.grid(alpha=0.3)
    return fig


def forgetting_curve(report: Report):
    """``F_k(t) = L_{v_k}(t) − L_{v_k}(T1)`` for every source feature and their sum ``F(t)``
    along fine-tuning (``Report.forgetting_curve``), on a logarithmic step axis."""
    _check_drawing("forgetting_curve", report)
    plt = _pyplot()
    curve = report.forgetting_curve()
    steps, K = curve["steps"], report.parameters["K"]
    shown = steps >= 1                                    # step 0: F = 0 by definition
    if not shown.any():
        raise NothingToDraw(
            f"forgetting curve: nothing to draw: fine-tuning takes no step here (T2 = 0: "
            f"the OOD loss meets the stopping level at T1 = {report.pretrain.T1:,}); give "
            f"{param('ft_steps')} N to fine-tune N steps anyway")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    marker = _marker(int(shown.sum()))
    for k in range(K):
        ax.plot(steps[shown], curve["F_k"][shown, k], color=f"C{k}", lw=1.4, marker=marker,
                label=_label(k, K, f"$F_{{{k + 1}}}$ (source $v_{{{k + 1}}}$)",
                             f"$F_k$, k = 1..{K}"))
    ax.plot(steps[shown], curve["F"][shown], color="black", lw=2.2, marker=marker,
            mfc="none", label=r"$F = \Sigma_k F_k$")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"fine-tuning step t ($T_2$ = {report.finetune.T2:,})")
    ax.set_ylabel(r"forgetting  $F_k(t) = L_{v_k}(t) - L_{v_k}(T_1)$")
    ax.set_title(_title(report), fontsize=9)
    _outside_below(ax, ncol=min(K + 1, 4))
    ax.grid(alpha=0.3, which="both")
    return fig


def weight_trajectories(report: Report):
    """α and β through both phases, and the conservation law: the growth of each α equals
    the summed decrease of the β in its column (on the features being trained)."""
    _check_drawing("weight_trajectories", report)
    _check_moves(report, "weights")
    plt = _pyplot()
    T1, source, ood = _phases(report)
    K = report.parameters["K"]
    T2 = len(ood) - 1 - T1
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.2), sharex="col")
    phases = [("pretraining on V: weights of v (equal for every k by symmetry)",
               source[:T1 + 1], 0, "pretraining takes no step ($T_1$ = 0)" if T1 == 0 else ""),
              ("fine-tuning on U: weights of u", ood[T1:], T1,
               "fine-tuning takes no step ($T_2$ = 0)" if T2 == 0 else "")]
    for row, (label, z, start, empty) in enumerate(phases):
        steps = start + np.arange(len(z))
        marker = _marker(len(z))
        ax = axes[row, 0]
        for k in range(K):
            ax.plot(steps, z[:, k, k], color=f"C{k}", lw=1.8, marker=marker,
                    label=_label(k, K, rf"$\alpha_{{{k + 1}}}$", rf"$\alpha_k$, k = 1..{K}"))
            for n in range(K):
                if n != k:
                    ax.plot(steps, z[:, n, k], color=f"C{k}", lw=0.9, ls="--", marker=marker,
                            mfc="none",
                            label=rf"$\beta_{{{n + 1},{k + 1}}}$" if K <= 3 else
                            r"$\beta_{n,k}$, n ≠ k (dashed)" if (k, n) == (0, 1) else None)
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("weight (logit)")
        ax = axes[row, 1]
        change = z - z[0]
        for k in range(K):
            growth = change[:, k, k]
            decrease = -(change[:, :, k].sum(axis=1) - change[:, k, k])
            ax.plot(steps, growth, color=f"C{k}", lw=3, alpha=0.4, marker=marker,
                    label=_label(k, K, rf"$\Delta\alpha_{{{k + 1}}}$",
                                 rf"$\Delta\alpha_k$, k = 1..{K}"))
            ax.plot(steps, decrease, color=f"C{k}", lw=1, ls="--", marker=marker, mfc="none",
                    label=_label(k, K, rf"$\Sigma_n \Lambda_{{{k + 1},n}}$ (decrease of β)",
                                 r"$\Sigma_n \Lambda_{k,n}$ (decrease of β, dashed)"))
        gap = np.abs(change.sum(axis=1)).max()
        ax.set_title(r"conservation: $\Delta\alpha_k = \Sigma_{n \neq k} \Lambda_{k,n}$"
                     f"  (max gap {gap:.1e})", fontsize=9)
        for ax in axes[row]:
            ax.grid(alpha=0.3)
            if empty:
                ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center",
                        fontsize=9, color="0.3")
    for ax in axes[1]:
        ax.set_xlabel("gradient step")
        # one legend per column, under it: the curves fill every corner of the panels, and
        # the same entries serve both rows
        _outside_below(ax, fontsize=7, ncol=4 if K <= 2 else 3)
    fig.suptitle(_title(report), fontsize=10)
    fig.tight_layout()
    return fig


# --- the K = 2 phase diagram ----------------------------------------------------------

def phase_diagram(F: np.ndarray, F_k: np.ndarray, gamma1: Sequence[float],
                  gamma2: Sequence[float], protocol: Protocol):
    """``F`` and the sign of each ``F_k`` over (γ1, γ2), with the theorem's thresholds.

    ``F`` is (n1, n2), ``F_k`` is (n1, n2, 2): rows follow γ1, columns γ2.
    For K = 2 the threshold −γ_kγ_m = γ_k² is the pair of lines γ_k = 0 and γ1 + γ2 = 0.
    """
    plt = _pyplot()
    from matplotlib.colors import ListedColormap, Normalize, TwoSlopeNorm
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    g1, g2 = np.asarray(gamma1), np.asarray(gamma2)
    if not (np.nan_to_num(F) != 0).any() and not (np.nan_to_num(F_k) != 0).any():
        raise NothingToDraw(
            "phase diagram: nothing to draw: no point of the grid fine-tunes (F = 0 "
            f"everywhere: at ε = {protocol.eps:g} the OOD loss meets the stopping level at "
            f"T1); {param('eps', 'lower')}")
    extent = (g2[0], g2[-1], g1[0], g1[-1])
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    # Each sign saturates at its own extreme: F > 0 is ten times smaller than F < 0 at the
    # defaults, and a scale symmetric about 0 left the forgetting region a faint pink.
    low, high = float(np.nanmin(F)), float(np.nanmax(F))
    norm = (TwoSlopeNorm(0.0, low, high) if low < 0 < high else
            Normalize(min(low, 0.0), max(high, 0.0)))
    image = axes[0].imshow(F, origin="lower", extent=extent, aspect="equal", cmap="RdBu_r",
                           norm=norm)
    bar = fig.colorbar(image, ax=axes[0], fraction=0.046, pad=0.04,
                       label=r"$F = L_{\rm tr}(\mathrm{after}) - L_{\rm tr}(\mathrm{before})$")
    if low < 0 < high:
        ticks = [low, low / 2, 0.0, high / 2, high]
        bar.set_ticks(ticks, labels=[f"{t:+.1e}" if t else "0" for t in ticks])
    axes[0].set_title("total F (red: forgetting, blue: backward transfer;\n"
                      "each colour saturates at its own extreme)", fontsize=9)
    regime_map = ListedColormap(["#4575b4", "#f7f7f7", "#d73027"])
    for k in range(2):
        sign = np.sign(np.where(np.abs(F_k[..., k]) < 1e-15, 0.0, F_k[..., k]))
        axes[k + 1].imshow(sign, origin="lower", extent=extent, aspect="equal", cmap=regime_map,
                           vmin=-1, vmax=1, interpolation="nearest")
        condition = rf"$\gamma_{k + 1}(\gamma_1 + \gamma_2) < 0$"
        axes[k + 1].set_title(f"feature {k + 1}: sign of $F_{k + 1}$ (exact dynamics)\n"
                              f"theorem: forgetting iff {condition}", fontsize=9)
    line = np.linspace(-1, 1, 3)
    for ax in axes:
        ax.plot(line, -line, color="black", lw=1.2)
        ax.axhline(0, color="black", lw=1.2, ls="--")
        ax.axvline(0, color="black", lw=1.2, ls=":")
        ax.set_xticks([-1, -0.5, 0, 0.5, 1])
        ax.set_yticks([-1, -0.5, 0, 0.5, 1])
        ax.set_xlabel(r"$\gamma_2 = \langle v_2, u_2 \rangle$")
        ax.set_ylabel(r"$\gamma_1 = \langle v_1, u_1 \rangle$")
    # one legend under the panels: inside, any corner hides part of a map
    fig.legend(handles=[Line2D([], [], color="black", lw=1.2, label=r"$\gamma_1 + \gamma_2 = 0$"),
                        Line2D([], [], color="black", lw=1.2, ls="--", label=r"$\gamma_1 = 0$"),
                        Line2D([], [], color="black", lw=1.2, ls=":", label=r"$\gamma_2 = 0$"),
                        Patch(color="#d73027", label="$F_k > 0$ (forgetting)"),
                        Patch(color="#4575b4", label="$F_k < 0$ (backward transfer)"),
                        Patch(color="#f7f7f7", ec="grey", label="$F_k = 0$ (unaffected)")],
               loc="lower center", ncol=6, fontsize=8, frameon=False)
    fig.suptitle(f"K = 2 phase diagram over {len(g1)}×{len(g2)} parallel shifts "
                 f"({protocol_text(protocol)})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def phase_diagram_k2(n: int = 201, protocol: Protocol | None = None, **sweep_options):
    """Compute the K = 2 grid with :func:`oodcalc.sweep.sweep` and draw it."""
    from .sweep import gamma_grid, sweep
    protocol = protocol or Protocol()
    limits.check_phase_diagram(n)
    axis = np.linspace(-1.0, 1.0, n)
    result = sweep(gamma_grid([axis, axis], eps=protocol.eps, eta=protocol.eta,
                              eta_ft=protocol.eta_ft),
                   max_steps=protocol.max_steps, **sweep_options)
    F = result.grid("F").reshape(n, n)
    F_k = np.stack([result.grid(f"F_{k}").reshape(n, n) for k in (1, 2)], axis=-1)
    return phase_diagram(F, F_k, axis, axis, protocol)


# --- K = 3 slices of claim 8 for feature 1 --------------------------------------------

K3_VERDICT_COLORS = {"backward-transfer": "#4575b4", "undetermined": "#d9d9d9",
                     "forgetting": "#d73027", "unaffected": "#ffffbf"}
K3_DIRECTION_COLORS = {"falling": "#4575b4", "flat": "#ffffbf", "rising": "#d73027"}
#: Colour of each combination of rules contradicting the sign of F_1, indexed by the bit mask
#: (1: paper, 2: corrected, 4: sign D_1, 8: first step); the explorer page uses the same.
K3_CLASS_COLORS = ("#f4f4f4", "#ff7f00", "#377eb8", "#984ea3", "#a65628", "#fdbf6f",
                   "#1f78b4", "#6a3d9a", "#999999", "#ffff33", "#a6cee3", "#cab2d6",
                   "#e7298a", "#4daf4a", "#b2df8a", "#000000")


#: ``k3maps.LABELS`` and ``SHORT`` (plain text for the terminal) as the figure writes them.
K3_LABELS = {"paper": "paper's verdict (claim 8b)",
             "corrected": "corrected sufficient condition",
             "D_sign": "sign of $D_1$ (first order, claim 8c)",
             "first_step": "exact first step of $L_{v_1}$",
             "F_sign": "exact sign of $F_1$ (whole run)"}
K3_SHORT = {"paper": "paper", "corrected": "corrected", "D_sign": "sign $D_1$",
            "first_step": "first step"}


def phase_k3(maps):
    """K = 3, feature 1: per slice (fixed γ_1, γ_2 across, γ_3 up) the paper's verdict, the
    corrected condition, the sign of D_1, the exact first step, the exact sign of F_1 and
    where the first four contradict it (:mod:`oodcalc.k3maps`); claim 8b's counterexamples
    are starred where a slice goes through them."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from .k3maps import RULES
    maps = list(maps)
    limits.check_k3_figure(len(maps))
    # the disagreement classes over every slice together, so that one legend serves all
    bits = []
    for s in maps:
        b = np.zeros(s.F_sign.shape, dtype=np.int64)
        for i, rule in enumerate(RULES):
            b |= s.disagrees(rule).astype(np.int64) << i
        bits.append(b)
    present = np.unique(np.concatenate([[0]] + [b.ravel() for b in bits]))
    if not any(s.scored.any() for s in maps):
        p = maps[0].protocol
        eps = (p.describe() if isinstance(p, Protocol) else p)["eps"]
        raise NothingToDraw(
            "K = 3 slices: nothing to draw: no point fine-tunes (T2 = 0 everywhere: the OOD "
            f"loss meets the stopping level ε = {eps:g} at T1), no rule can "
            f"be scored; {param('eps', 'lower')}")
    class_names = ["no rule contradicts the sign of $F_1$" if c == 0 else
                   "contradicted by: " + ", ".join(K3_SHORT[r] for i, r in enumerate(RULES)
                                                   if c >> i & 1) for c in present]
    class_map = ListedColormap([K3_CLASS_COLORS[c] for c in present])
    verdict_map = ListedColormap(list(K3_VERDICT_COLORS.values()))
    direction_map = ListedColormap(list(K3_DIRECTION_COLORS.values()))
    verdict_index = {n: i for i, n in enumerate(K3_VERDICT_COLORS)}
    direction_index = {n: i for i, n in enumerate(K3_DIRECTION_COLORS)}

    fig = plt.figure(figsize=(12.5, 8.4 * len(maps) + 1.3), layout="constrained")
    rows = fig.subfigures(len(maps) + 1, 1, height_ratios=[8.4] * len(maps) + [1.3],
                          hspace=0.04)
    for s, b, sub in zip(maps, bits, rows[:-1]):
        fractions = s.fractions()
        extent = (s.axis[0], s.axis[-1], s.axis[0], s.axis[-1])
        axes = sub.subplots(2, 3)
        panels = []
        for rule in ("paper", "corrected"):
            panels.append((rule, np.vectorize(verdict_index.get, otypes=[float])(s.verdicts[rule]),
                           verdict_map, len(K3_VERDICT_COLORS)))
        for rule in ("D_sign", "first_step"):
            panels.append((rule, np.vectorize(direction_index.get, otypes=[float])(s.verdicts[rule]),
                           direction_map, len(K3_DIRECTION_COLORS)))
        panels.append(("F_sign", (s.F_sign + 1).astype(float), direction_map, 3))
        panels.append(("classes", np.searchsorted(present, b).astype(float), class_map,
                       len(present)))
        for ax, (name, image, cmap, n) in zip(axes.ravel(), panels):
            shown = np.where(s.scored, image, np.nan) if name == "classes" else image
            ax.imshow(shown, origin="lower", extent=extent, cmap=cmap, vmin=-0.5,
                      vmax=n - 0.5, interpolation="nearest", aspect="equal")
            if name in fractions:
                f = fractions[name]
                title = (f"{K3_LABELS[name]}\ncontradicts $F_1$ on {100 * f['disagrees']:.2f} %"
                         + (f", undecided on {100 * f['undecided']:.1f} %"
                            if f["undecided"] else ""))
            elif name == "F_sign":
                title = (f"{K3_LABELS[name]}\n$F_1 > 0$ on {100 * (s.F_sign > 0).mean():.1f} %, "
                         f"< 0 on {100 * (s.F_sign < 0).mean():.1f} %")
            else:
                title = "where the rules contradict the exact sign of $F_1$"
            ax.set_title(title, fontsize=9)
            ax.axhline(0, color="black", lw=0.5, alpha=0.5)
            ax.axvline(0, color="black", lw=0.5, alpha=0.5)
            ax.plot([-1, 1], [-1, 1], color="black", lw=0.5, ls=":", alpha=0.5)
            for c in s.counterexamples:
                ax.plot(c[1], c[2], marker="*", ms=15, mfc="yellow", mec="black", mew=1.2)
                ax.annotate("claim 8b", (c[1], c[2]), xytext=(6, 6), textcoords="offset points",
                            fontsize=8, fontweight="bold")
            ax.set_xlim(-1, 1)
            ax.set_ylim(-1, 1)
            ax.set_xticks([-1, -0.5, 0, 0.5, 1])
            ax.set_yticks([-1, -0.5, 0, 0.5, 1])
            ax.set_xlabel(r"$\gamma_2$", fontsize=9)
            ax.set_ylabel(r"$\gamma_3$", fontsize=9)
            ax.tick_params(labelsize=8)
        not_scored = (~s.scored).sum()
        note = (f"; {not_scored} point{'s' if not_scored != 1 else ''} without a fine-tuning "
                "step ($T_2$ = 0) not scored (blank in the last panel)" if not_scored else "")
        sub.suptitle(f"K = 3, source feature 1, slice $\\gamma_1$ = {s.gamma1:g} "
                     f"({len(s.axis)}×{len(s.axis)} points; {protocol_text(s.protocol)})"
                     f"{note}", fontsize=10.5, fontweight="bold")
    legend = rows[-1]
    legend.legend(handles=[Patch(color=c, label=n) for n, c in K3_VERDICT_COLORS.items()],
                  title="verdicts (paper, corrected)", loc="upper left",
                  bbox_to_anchor=(0.02, 0.95), fontsize=8, title_fontsize=8.5, ncol=2)
    legend.legend(handles=[Patch(color=c, label=n + (" ($F_1 > 0$)" if n == "rising" else
                                                      " ($F_1 < 0$)" if n == "falling" else
                                                      " ($F_1 = 0$)"))
                           for n, c in K3_DIRECTION_COLORS.items()],
                  title="signs ($D_1$, first step, $F_1$)", loc="upper left",
                  bbox_to_anchor=(0.31, 0.95), fontsize=8, title_fontsize=8.5)
    legend.legend(handles=[Patch(facecolor=K3_CLASS_COLORS[c], edgecolor="grey", label=n)
                           for c, n in zip(present, class_names)],
                  title="last panel", loc="upper left", bbox_to_anchor=(0.56, 0.95),
                  fontsize=8, title_fontsize=8.5)
    return fig


def phase_k3_slices(gamma1=(0.25,), n: int = 201, protocol: Protocol | None = None,
                    **sweep_options):
    """Compute the slices with :func:`oodcalc.k3maps.slices` and draw them; returns
    ``(figure, slices)``."""
    from .k3maps import check_gamma1, slices
    limits.check_k3_figure(len(check_gamma1(gamma1)))    # the figure's cost, before the sweep
    maps = slices(gamma1, n, protocol, **sweep_options)
    return phase_k3(maps), maps


# --- the overlap phase diagram (K = 2, ⟨v_1, v_2⟩ = ρ) ------------------------------

OVERLAP_SIGN_COLORS = ("#9ecae1", "#f7f7f7", "#fc9272")      # F_k < 0, = 0, > 0


def overlap_map(m):
    """Per source feature k (feature 2 first, where the rules differ) the exact sign of F_k
    over (γ2, ρ), the paper's K = 2 rule's boundary (it ignores ρ), the overlap-aware
    criterion's boundary ``C_k = 0`` and the points where each contradicts the exact sign
    (:mod:`oodcalc.overlap_map`); the issue's two counterexamples starred."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    rho, g2 = m.rho, m.gamma2
    if not m.scored.any():
        raise NothingToDraw(
            "overlap map: nothing to draw: no point of the grid fine-tunes (T2 = 0 "
            f"everywhere: at ε = {m.protocol['eps']:g} the OOD loss meets the stopping level "
            f"at T1); {param('eps', 'lower')}")
    h = (g2[-1] - g2[0]) / (len(g2) - 1)
    extent = (g2[0] - h / 2, g2[-1] + h / 2, rho[0] - h / 2, rho[-1] + h / 2)
    fig, axes = plt.subplots(1, 2, figsize=(14, 6.6), width_ratios=(1.7, 1))
    cmap = ListedColormap(OVERLAP_SIGN_COLORS).with_extremes(bad="#d9d9d9")
    G, R = np.meshgrid(g2, rho)
    for ax, k in zip(axes, (2, 1)):
        sign = np.where(m.scored, m.F_sign[..., k - 1], np.nan)
        ax.imshow(sign, origin="lower", extent=extent, cmap=cmap, vmin=-1.5, vmax=1.5,
                  interpolation="nearest", aspect="auto")
        # the paper's K = 2 rule: forgetting iff −γ_kγ_m > γ_k², i.e. for feature 2
        # −1 < γ2 < 0 at every ρ; for feature 1 never (unaffected at γ2 = −1)
        for x in ((-1.0, 0.0) if k == 2 else (-1.0,)):
            ax.axvline(x, color="black", lw=2.0, ls="--")
        C = m.C[..., k - 1]
        if (C > 0).any() and (C < 0).any():      # flat points (C_k = 0 exactly) left out:
            flat = m.verdicts["C_sign"][..., k - 1] == "flat"   # a line along the edge
            ax.contour(G, R, np.ma.masked_where(flat, C), levels=[0.0], colors="#006d2c",
                       linewidths=2.0)
        wrong_paper = m.disagrees("paper")[..., k - 1]
        wrong_C = m.disagrees("C_sign")[..., k - 1]
        ax.plot(G[wrong_paper], R[wrong_paper], ls="none", marker="x", ms=5, mew=1.2,
                color="black")
        ax.plot(G[wrong_C], R[wrong_C], ls="none", marker="o", ms=7, mfc="none", mew=1.4,
                color="#006d2c")
        for r, g in m.counterexamples:
            if rho[0] <= r <= rho[-1]:
                ax.plot(g, r, marker="*", ms=18, mfc="yellow", mec="black", mew=1.2)
                i, j = np.argmin(np.abs(rho - r)), np.argmin(np.abs(g2 - g))
                ax.annotate(f"$F_{k}$ = {m.F[i, j, k - 1]:+.2e}", (g, r), xytext=(8, 8),
                            textcoords="offset points", fontsize=8, fontweight="bold",
                            bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none",
                                      alpha=0.8))
        f = m.fractions(k)
        rule = (r"forgetting iff $-1 < \gamma_2 < 0$" if k == 2 else
                r"backward transfer if $\gamma_2 > -1$")
        ax.set_title(f"source feature {k}: sign of $F_{k}$ (exact, whole run)\n"
                     f"paper's rule ({rule}): wrong on {100 * f['paper']:.1f} % of the "
                     f"points\nsign of $C_{k}$ (first order, with overlap): wrong on "
                     f"{100 * f['C_sign']:.1f} %", fontsize=9.5)
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        ax.set_xlabel(r"$\gamma_2 = \langle v_2, u_2 \rangle$  ($\gamma_1$ = 1)")
        ax.set_ylabel(r"$\rho = \langle v_1, v_2 \rangle$")
    not_scored = int((~m.scored).sum())
    fig.legend(handles=[
        Patch(color=OVERLAP_SIGN_COLORS[2], label="$F_k > 0$ (forgetting)"),
        Patch(color=OVERLAP_SIGN_COLORS[0], label="$F_k < 0$ (backward transfer)"),
        Patch(facecolor=OVERLAP_SIGN_COLORS[1], edgecolor="grey", label="$F_k = 0$"),
        Patch(color="#d9d9d9", label="not scored ($T_2$ = 0)"),
        Line2D([], [], color="black", lw=2.0, ls="--",
               label=r"paper's boundary $-\gamma_k\gamma_m = \gamma_k^2$ (ignores $\rho$)"),
        Line2D([], [], color="#006d2c", lw=2.0, label="$C_k = 0$ (overlap-aware, first order)"),
        Line2D([], [], ls="none", marker="x", color="black", label="paper's rule wrong"),
        Line2D([], [], ls="none", marker="o", mfc="none", color="#006d2c",
               label="sign of $C_k$ wrong"),
        Line2D([], [], ls="none", marker="*", ms=12, mfc="yellow", mec="black",
               label=r"$(\rho, \gamma_2)$ = (0.8, 0.5), (−0.5, −0.2)")],
        loc="lower center", ncol=5, fontsize=8.5, frameon=False)
    fig.suptitle(f"K = 2, overlapping training features: {len(rho)} × {len(g2)} points "
                 f"(ρ, γ2), $u_k = \\gamma_k v_k + \\sqrt{{1-\\gamma_k^2}}\\, w_k$ "
                 f"({protocol_text(m.protocol)})"
                 + (f"; {not_scored} points with $T_2$ = 0 not scored" if not_scored else ""),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return fig


def overlap_map_figure(n: int = 41, protocol: Protocol | None = None, *,
                       rho_max: float | None = None, progress=None):
    """Compute the map with :func:`oodcalc.overlap_map.compute` and draw it; returns
    ``(figure, map)``."""
    from . import overlap_map as om
    m = om.compute(n, protocol, rho_max=om.RHO_MAX if rho_max is None else rho_max,
                   progress=progress)
    return overlap_map(m), m


# --- what to do about forgetting: every intervention side by side ----------------------

def advice_figure(advice):
    """Three panels from :func:`oodcalc.advise`: every arm's forgetting F against its
    fine-tuning steps (colour: the final OOD loss; filled: on the Pareto front; ×: the
    rule on U not met), and F against the replay share λ and the pull μ along each
    search, with λ* and μ* marked."""
    plt = _pyplot()
    p = advice.parameters
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.4), width_ratios=(1.5, 1, 1))
    ax = axes[0]
    arms = [a for a in advice.arms if math.isfinite(a.F)]
    losses = np.array([a.loss_ood for a in arms])
    norm = plt.matplotlib.colors.LogNorm(vmin=max(losses.min(), 1e-6),
                                         vmax=max(losses.max(), losses.min() * 10, 1e-5))
    cmap = plt.get_cmap("viridis")
    front = set(advice.pareto)
    # one marker shape per arm, named in the legend: arms with equal F (the
    # projections' F = 0) sit side by side, where labels beside them would collide
    shapes = "osD^vP*hX<>p"
    for i, a in enumerate(arms):
        colour = cmap(norm(max(a.loss_ood, 1e-6)))
        ax.scatter(a.steps, a.F, s=80, marker=shapes[i % len(shapes)], edgecolors=colour,
                   linewidths=1.8, facecolors=colour if a.name in front else "none", zorder=3,
                   label=a.name + ("" if a.reached else " (rule on U not met)"))
    ax.axhline(0, color="grey", lw=1, ls="--")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(plt.matplotlib.ticker.NullFormatter())
    ax.margins(x=0.1, y=0.12)
    _outside_below(ax, markerscale=0.8)
    ax.set_xlabel("fine-tuning steps")
    ax.set_ylabel(r"forgetting $F = \Sigma_k F_k$")
    ax.set_title("every intervention (filled: on the Pareto front)", fontsize=9)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, pad=0.01)
    bar.set_label(r"final OOD loss $L_U$", fontsize=8)
    ax.grid(alpha=0.3)
    plain = advice.arm("plain")
    for ax, t, each, symbol, scale in (
            (axes[1], advice.replay, advice.replay_each, "λ", "linear"),
            (axes[2], advice.l2, advice.l2_each, "μ", "log")):
        if not (t.tried or each.tried):
            ax.axis("off")
            ax.text(0.5, 0.5, f"{symbol}* = 0: {t.why}", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, wrap=True)
            continue
        ax.axhline(0, color="grey", lw=1, ls="--")
        ax.set_xlabel(f"{'replay share' if symbol == 'λ' else 'pull'} {symbol}")
        ax.set_xscale(scale)
        ax.grid(alpha=0.3)
        # both searches' runs: the total F and the worst feature's F_k along the value
        runs = {row[0]: row for row in t.tried + each.tried}
        if scale == "linear":
            runs[0.0] = (0.0, plain.F, max(plain.F_k), plain.steps, True)
        xs, Fs, worst, _, met = (np.array(v) for v in zip(*sorted(runs.values())))
        met = met.astype(bool)
        for values, colour, name in ((Fs, "C0", "F"), (worst, "C1", "worst $F_k$")):
            ax.plot(xs, values, color=colour, lw=1, label=name)
            ax.scatter(xs[met], values[met], s=12, color=colour, zorder=3)
            if (~met).any():
                ax.scatter(xs[~met], values[~met], s=30, marker="x", color="C3", zorder=3)
        if (~met).any():
            ax.scatter([], [], s=30, marker="x", color="C3", label="rule on U not met")
        if each.value:
            ax.axvline(each.value, color="C1", lw=1, ls=":",
                       label=f"{symbol}ₖ* = {each.value:.6g} (every $F_k$ ≤ 0)")
        if t.value:
            ax.axvline(t.value, color="C0", lw=1, ls=":",
                       label=f"{symbol}* = {t.value:.6g} (F ≤ 0)")
            ax.set_title(f"{symbol}* = {t.value:.6g} ({t.runs} runs)", fontsize=9)
        else:
            ax.set_title(f"no {symbol} meets the rule with F ≤ 0", fontsize=9)
        _outside_below(ax, ncol=1)
    axes[1].set_ylabel(r"F and the worst $F_k$")
    fig.suptitle(f"What to do about forgetting: {_plain(geo.describe_text(p['geometry']))}, "
                 f"K = {p['K']} ({protocol_text(p)}); exact gradient descent, every arm",
                 fontsize=10)
    fig.tight_layout()
    return fig
