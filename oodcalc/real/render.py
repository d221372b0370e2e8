"""Tables of a real-text result (the dict of :func:`oodcalc.real.experiment.run`):
Markdown, or rich tables for the terminal. Pure formatting: no torch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import paper

FAMILY_TITLES = {"scenario 1": "scenario 1 (large × small)",
                 "scenario 2": "scenario 2 (small × small)",
                 "scenario 1 (head)": "scenario 1, ranked by the trained head",
                 "scenario 2 (head)": "scenario 2, ranked by the trained head",
                 "all": "all dimensions"}


def ci(x: dict[str, float], digits: int = 3) -> str:
    return f"{x['mean']:.{digits}f} [{x['lo']:.{digits}f}, {x['hi']:.{digits}f}]"


def signed_ci(x: dict[str, float], digits: int = 3) -> str:
    return f"{x['mean']:+.{digits}f} [{x['lo']:+.{digits}f}, {x['hi']:+.{digits}f}]"


def angle(theta: float) -> str:
    """θ as a multiple of π when it is one of the grid's simple fractions."""
    ratio = theta / math.pi
    for den in (1, 2, 3, 4, 6, 8, 12, 24):
        num = round(ratio * den)
        if abs(ratio * den - num) < 1e-9:
            if num == 0:
                return "0"
            frac = math.gcd(num, den)
            num, den = num // frac, den // frac
            top = "π" if num == 1 else f"{num}π"
            return top if den == 1 else f"{top}/{den}"
    return f"{theta:.4f}"


def setup_lines(result: dict[str, Any]) -> list[str]:
    p = result["parameters"]
    src = result["data"][p["source"]]
    t, ft, th = p["training"], p["finetune"], p["theory_protocol"]
    return [
        f"Model: {p['model']} (model.safetensors SHA-256 {p['model_sha256'][:12]}…), "
        f"embeddings and layers 0–{p['layer'] - 1} frozen (hidden states cached), trained: "
        f"the attention block of layer {p['layer']} and a linear head on mean-pooled tokens "
        f"(≤ {p['max_len']} tokens per review).",
        f"Data: drug reviews (drugsCom.zip SHA-256 {p['data_sha256'][:12]}…), binary "
        f"sentiment; source = {p['source']} ({src['n']} reviews: {src['positive']} positive, "
        f"{src['negative']} negative); {p['folds']}-fold cross-validation × {p['seeds']} "
        f"seed(s) ({', '.join(map(str, p['seed_list']))}).",
        f"Training: {t['optimizer']}, lr {t['lr']:g}, {t['epochs']} epochs, batch {t['batch']}, "
        f"head initialised by a linear probe; forgetting fine-tune: lr {ft['lr']:g}, "
        + (f"{ft['epochs']} epoch(s)" if "steps" not in ft else f"exactly {ft['steps']} steps")
        + f" (everything, or one part alone). Rotations: {p['pairs']} "
        f"pairs per scenario, θ on {p['steps'] + 1} points over [0, π], at the input of "
        f"layer {p['layer']}.",
        f"Intervals: 95 % percentile bootstrap over reviews ({p['bootstrap']} resamples; "
        f"each review's loss averaged over seeds). Theory: oodcalc predict, K = 2, "
        f"ε = {th['eps']:g}, η = {th['eta']:g}"
        + ("" if th.get("ft_steps") is None else f", fine-tuned exactly {th['ft_steps']} steps")
        + f"; its OOD error e is a squared error of "
        f"in-context regression, on another scale than cross-entropy: compare shapes and "
        f"orderings, not values.",
    ]


def paper_rows(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in result["paper"]:
        ours = r["text"] if "text" in r else f"{r['value']:.3f}"
        interval = "" if "text" in r else f"[{r['lo']:.3f}, {r['hi']:.3f}]"
        printed = r["paper"] + (f" ({r['paper_note']})" if r.get("paper_note") and "text" in r
                                else "")
        rows.append([r["ours"], f"{printed} — {r['paper_setting']}", ours, interval])
    return rows


def rotation_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rot = result["rotation"]
    fams = rot["families"]
    header = ["θ", "γ = cos θ", "theory e (rotation)"] + \
             [f"CE: {FAMILY_TITLES.get(f, f)}" for f in fams]
    rows = []
    for i, theta in enumerate(rot["theta"]):
        rows.append([angle(theta), f"{rot['gamma'][i]:+.3f}", f"{rot['theory_rotation'][i]:.4f}"]
                    + [ci(v["loss"][i]) for v in fams.values()])
    return header, rows


def shape_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["rotation", "shape (pre-registered contrasts)", "CE(π/2) − CE(0)",
              "CE(π/2) − CE(π)", "CE(π) − CE(0)", "argmax θ", "local maxima of the mean",
              "γ_eff at π", "theory e at the real geometry, π/2"]
    rows = []
    for fam, v in result["rotation"]["families"].items():
        s = v["shape"]
        half = len(v["theory_real"]) // 2
        rows.append([FAMILY_TITLES.get(fam, fam), s["verdict"],
                     signed_ci(s["rise_0_to_half_pi"]), signed_ci(s["fall_half_pi_to_pi"]),
                     signed_ci(s["change_0_to_pi"]), angle(s["argmax_theta"]),
                     ", ".join(angle(t) for t in s["local_maxima"]) or "none",
                     f"{v['gamma_eff'][-1]:+.3f}", f"{v['theory_real'][half]:.4f}"])
    return header, rows


def spearman(x, y) -> float:
    """Rank correlation (no ties expected among a handful of domains)."""
    rx, ry = (np.argsort(np.argsort(v)).astype(float) for v in (x, y))
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def shift_orderings(result: dict[str, Any]) -> str:
    """Do the domains' losses order as their similarity to the source and as the theory?"""
    rows = result["shift"]["rows"]
    distance = [1 - r["cos_mean"] for r in rows]
    theory = [r["theory"]["ood_loss"] for r in rows]
    parts = []
    for name, key in (("CE", lambda r: r["loss"]["mean"]),
                      ("class-balanced CE", lambda r: r["balanced_loss"])):
        y = [key(r) for r in rows]
        parts.append(f"{name} with (1 − cosine) {spearman(y, distance):+.2f} and with the "
                     f"theory's OOD error {spearman(y, theory):+.2f}")
    return (f"Spearman rank correlation over the {len(rows)} domains: " + "; ".join(parts)
            + ".")


def shift_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["domain", "reviews (+/−)", "cos(mean, source mean)",
              "principal angles (°)", "theory e (V, U from class means)", "theory F",
              "CE [95 %]", "class-balanced CE [95 %]"]
    rows = []
    for r in result["shift"]["rows"]:
        angles = ", ".join(f"{a:.1f}" for a in r["theory"]["principal_angles_deg"])
        rows.append([r["domain"], f"{r['n']} ({r['positive']}/{r['n'] - r['positive']})",
                     f"{r['cos_mean']:.4f}", angles, f"{r['theory']['ood_loss']:.4f}",
                     f"{r['theory']['F']:+.4f}", ci(r["loss"]),
                     ci({"mean": r["balanced_loss"], **r["balanced_interval"]})])
    return header, rows


def forgetting_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    by_theta = {"bert-forgetting-theta=pi": "rotation θ = π",
                "bert-forgetting-theta=pi/2": "rotation θ = π/2"}
    printed = {cond: paper.figure(fid).printed for fid, cond in by_theta.items()}
    header = ["fine-tuned on", "γ", "its own loss before → after", "F on the source [95 %]",
              "theory F (rotation)", "theory F (real geometry)", "paper (BERT-base, MRPC)"]
    rows = []
    for r in result["forgetting"]:
        gamma = "" if r["gamma"] is None else f"{r['gamma']:+.3f}"
        ideal = "" if r["theory_F_rotation"] is None else f"{r['theory_F_rotation']:+.4f}"
        rows.append([r["condition"], gamma, f"{r['ood_before']:.3f} → {r['ood_after']:.3f}",
                     signed_ci(r["F"]), ideal, f"{r['theory_F_real']:+.4f}",
                     printed.get(r["condition"], "")])
    return header, rows


PART_TITLES = {"attention only": "the attention block", "head only": "the head",
               "scores only": "W_Q, W_K", "values only": "W_V, W_O, LayerNorm"}


def part_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per forgetting condition: F and the new task's own loss after fine-tuning, with
    everything moving and with each part moving alone (same reviews, folds, batches)."""
    parts = list(result["forgetting"][0]["by_part"])
    header = ["fine-tuned on", "own loss before", "everything moves: F [95 %] · own loss after"] \
        + [f"only {PART_TITLES.get(p, p)} moves" for p in parts]
    rows = []
    for r in result["forgetting"]:
        rows.append([r["condition"], f"{r['ood_before']:.3f}",
                     f"{signed_ci(r['F'])} · {r['ood_after']:.3f}"]
                    + [f"{signed_ci(r['by_part'][p]['F'])} · {r['by_part'][p]['ood_after']:.3f}"
                       for p in parts])
    return header, rows


PARTS_NOTE = ("The parts are nested, not a partition: the attention block is W_Q, W_K and "
              "W_V, W_O, LayerNorm together, so their F need not add up. 'Own loss': the new "
              "task's held-out loss (the rotated held-out source fold, or 64 held-out reviews "
              "of the domain), before and after its fine-tuning: a part that forgets little "
              "because it learns little shows as such.")


def seeds_text(p: dict[str, Any]) -> str:
    """Seeds that would give 80 % power against the observed contrast."""
    if p["run_var"] is None:
        return "— (1 seed: not estimable)"
    if p["seeds_for_80"] is not None and p["seeds_for_80"] <= p["seeds"]:
        return f"met at {p['seeds']}"
    if p["seeds_for_80"] is None:
        return (f"none suffice (≈ {p['reviews_for_80']:,} reviews would at {p['seeds']} seeds)"
                if p["reviews_for_80"] else "none suffice, nor more reviews alone")
    return f"{p['seeds_for_80']:,}"


def power_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per rotation family: the change from 0 to π and the pre-registered double-peak
    contrasts, each with its power at the seeds run and what 80 % power would need."""
    header = ["rotation", "contrast", "mean [95 %, runs counted]",
              "power if the estimate were true (two-sided)", "seeds for 80 % power",
              "sd between reviews · of a seed's mean"]
    rows = []
    for fam, v in result["rotation"]["families"].items():
        shape = v["shape"]
        contrasts = [("CE(π) − CE(0)", shape["change_0_to_pi"]["power"])] + \
            [(c["contrast"], c) for c in shape["double_peak"]["contrasts"]]
        for name, p in contrasts:
            review = ("0 (within seed noise)" if p["review_var"] == 0
                      else f"{p['review_var'] ** 0.5:.3f}")
            spread = review + " · " + \
                ("—" if p["run_var"] is None else f"{p['run_var'] ** 0.5:.3f}")
            rows.append([FAMILY_TITLES.get(fam, fam), name,
                         f"{p['effect']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]",
                         f"{p['power']:.0%}", seeds_text(p), spread])
        rows.append([FAMILY_TITLES.get(fam, fam),
                     f"double peak (all four above 0)? {shape['double_peak']['verdict']}",
                     "", "", "", ""])
    return header, rows


POWER_NOTE = ("These intervals count each fold's shared model (σ_r²/n + τ²/S: σ_r the "
              "spread between reviews, τ that of one seed's mean), so they are wider than "
              "the shape table's bootstraps over reviews. A double peak needs all four "
              "peak contrasts above 0; the power of a negative one is that of resolving "
              "it below 0. 'Seeds for 80 %': at these reviews, if the estimate were the "
              "truth; 'none suffice' when the reviews' own spread alone is too wide.")


SECTIONS = (
    ("Rotation of hidden dimensions: cross-entropy on held-out source reviews", rotation_rows),
    ("Shape of each rotation curve", shape_rows),
    ("Natural shift: the source model on the other domains", shift_rows),
    ("Forgetting: fine-tune further, then the change of the held-out source loss",
     forgetting_rows),
    ("Which part's fine-tuning forgets: one part moves, the rest is frozen", part_rows,
     PARTS_NOTE),
    ("Contrasts and their power: the double-peak test (pre-registered)", power_rows,
     POWER_NOTE),
)


def markdown(result: dict[str, Any]) -> str:
    def table(header, rows):
        esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
        return ["| " + " | ".join(map(esc, header)) + " |", "|---" * len(header) + "|"] + \
               ["| " + " | ".join(map(esc, r)) + " |" for r in rows]

    lines = [" ".join(setup_lines(result)), "",
             f"### The paper's figures beside ours (arXiv {paper.ARXIV})", ""]
    lines += table(["measurement", "paper", "ours", "95 % interval"], paper_rows(result))
    for title, rows_of, *note in SECTIONS:
        lines += ["", f"### {title}", ""]
        lines += table(*rows_of(result))
        lines += ["", *note] if note else []
    lines += ["", shift_orderings(result)]
    return "\n".join(lines)


def show(result: dict[str, Any]) -> None:
    """Rich tables on stdout."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)      # every dynamic text escaped: text, not markup
    console.print(f"[bold]oodcalc reproduce real[/bold] · the paper's BERT experiments "
                  f"(arXiv {paper.ARXIV}) on {escape(str(result['parameters']['model']))} "
                  "and drug reviews")
    for line in setup_lines(result):
        console.print(escape(line), style="dim")
    sections = (("The paper's figures beside ours",
                 lambda r: (["measurement", "paper", "ours", "95 %"], paper_rows(r))),
                *SECTIONS)
    for title, rows_of, *note in sections:
        header, rows = rows_of(result)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for h in header:
            table.add_column(h)
        for r in rows:
            table.add_row(*(escape(str(cell)) for cell in r))
        console.print(table)
        for line in note:
            console.print(escape(line), style="dim")
    console.print(escape(shift_orderings(result)))
