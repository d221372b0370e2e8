"""Tables of a real-text result (the dict of :func:`oodcalc.real.experiment.run`):
Markdown, or rich tables for the terminal. Pure formatting: no torch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import paper
from ..depth.design import FDR as DESIGN_Q
from ..depth.statistics import VERDICT_SEEDS as VERDICT

__all__ = [
    "COLUMN_TITLES", "FAMILY_TITLES", "PARTS_NOTE", "PART_TITLES", "POWER_NOTE", "RULE_TEXT",
    "SECTIONS", "angle", "arm_rows", "arm_rows_compact", "arms_note", "ci", "fmt",
    "forgetting_rows", "markdown", "notes", "null_note", "null_rows", "pair_rows", "paper_rows",
    "part_rows", "power_rows", "rho", "rotation_rows", "runs_text", "sections_of", "seeds_text",
    "setup_lines", "shape_rows", "shift_orderings", "shift_rows", "show", "signed_ci",
    "theory_F", "too_few",
]


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
        f"each review's loss averaged over seeds), unless 'runs counted': each fold's model "
        f"is shared by about a fifth of the reviews, which an interval over reviews does not "
        f"count (see the power table; `oodcalc.real.experiment.runs_counted`). Theory: oodcalc predict, K = 2, "
        f"ε = {th['eps']:g}, η = {th['eta']:g}"
        + ("" if th.get("ft_steps") is None else f", fine-tuned exactly {th['ft_steps']} steps")
        + f"; its OOD error e is a squared error of "
        f"in-context regression, on another scale than cross-entropy: compare shapes and "
        f"orderings, not values. {RULE_TEXT[p['theory_rule']]}",
    ]


#: What each stopping rule means for the theory on the class means as they are.
RULE_TEXT = {
    "relative": "Real geometry: V, U are the class means as they are (each scaled to unit "
                "norm, not orthogonalised; the Gram dynamics), with the stopping rule "
                "relative to their geometry: pretraining at ε·c_V and η/c_V³, fine-tuning at "
                "ε·c_U and η/c_U³, c = 1 − (cosine of the two class means) (at fixed ε the "
                "rule holds at uniform attention, e = c/4 < ε, and nothing is learned); "
                "beside it the same means with ε, η as given, and the orthonormalised "
                "(Löwdin) means.",
    "absolute": "Real geometry: V, U are the class means as they are (each scaled to unit "
                "norm, not orthogonalised; the Gram dynamics) with ε, η as given; beside it "
                "the orthonormalised (Löwdin) means.",
}
#: The theory columns at the real geometry (experiment.THEORY_COLUMNS), as headed.
COLUMN_TITLES = {"raw": "raw means, ε relative: e",
                 "raw_vs_uniform": "raw means, ε relative: e / e(uniform attention)",
                 "raw_fixed_eps": "raw means, ε as given: e",
                 "orthonormalised": "orthonormalised means: e"}


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
    header = ["rotation", "shape (fixed contrasts)", "CE(π/2) − CE(0)",
              "CE(π/2) − CE(π)", "CE(π) − CE(0)", "argmax θ", "local maxima of the mean",
              "γ_eff at π", "theory at the real geometry, π/2: raw means e · e/e(uniform)",
              "orthonormalised means e"]
    rows = []
    for fam, v in result["rotation"]["families"].items():
        s = v["shape"]
        half = len(v["theory_raw"]) // 2
        rows.append([FAMILY_TITLES.get(fam, fam), s["verdict"],
                     signed_ci(s["rise_0_to_half_pi"]), signed_ci(s["fall_half_pi_to_pi"]),
                     signed_ci(s["change_0_to_pi"]), angle(s["argmax_theta"]),
                     ", ".join(angle(t) for t in s["local_maxima"]) or "none",
                     f"{v['gamma_eff'][-1]:+.3f}",
                     f"{v['theory_raw'][half]:.2e} · {v['theory_raw_vs_uniform'][half]:.3f}",
                     f"{v['theory_orthonormalised'][half]:.4f}"])
    return header, rows


def theory_F(x: float, spec: str) -> str:
    """A theory F; one within round-off of 0 as a bound (its last bits are not a result)."""
    return "0 (< 1e-12)" if abs(x) < 1e-12 else format(x, spec)


def rho(x: float | None) -> str:
    return "—" if x is None else f"{x:+.2f}"


def shift_orderings(result: dict[str, Any]) -> str:
    """Do the target domains' losses order as their distance to the source and as the
    theory's columns (the source against itself left out)?"""
    rc = result["shift"]["rank_correlations"]
    n = len(rc["domains"])
    parts = []
    for measured in ("CE", "class-balanced CE"):
        r = rc[measured]
        parts.append(f"{measured} with (1 − cosine) {rho(r['1 − cosine'])}, with the theory "
                     + ", ".join(f"({COLUMN_TITLES[c]}) {rho(r[c])}" for c in COLUMN_TITLES))
    chance = math.factorial(n)
    return (f"Spearman rank correlation over the {n} target domains (the source against "
            f"itself left out): " + "; ".join(parts) + f". With {n} domains a correlation "
            f"of +1 arises by chance once in {chance} orderings.")


def shift_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["domain", "reviews (+/−)", "cos(mean, source mean)", "cos(class means)",
              "principal angles (°)", "theory e, raw means, ε relative [e/e(uniform)] · T1",
              "theory e, raw means, ε as given · T1", "theory e, orthonormalised means",
              "theory F: raw means · orthonormalised", "CE [95 %]", "class-balanced CE [95 %]"]
    rows = []
    for r in result["shift"]["rows"]:
        raw, fixed, ortho = r["theory_raw"], r["theory_raw_fixed_eps"], \
            r["theory_orthonormalised"]
        angles = ", ".join(f"{a:.1f}" for a in ortho["principal_angles_deg"])
        rows.append([r["domain"], f"{r['n']} ({r['positive']}/{r['n'] - r['positive']})",
                     f"{r['cos_mean']:.4f}", f"{raw['cos_U']:.4f}", angles,
                     f"{raw['ood_loss']:.2e} [{raw['ood_vs_uniform']:.3f}] · {raw['T1']}",
                     f"{fixed['ood_loss']:.2e} · {fixed['T1']}",
                     f"{ortho['ood_loss']:.4f}", f"{theory_F(raw['F'], '+.1e')} · {theory_F(ortho['F'], '+.4f')}",
                     ci(r["loss"]), ci({"mean": r["balanced_loss"], **r["balanced_interval"]})])
    return header, rows


def fmt(x: float, column: str) -> str:
    """A theory value in its column's format (raw e are c ≈ 0.01 times smaller)."""
    return f"{x:.2e}" if column in ("raw", "raw_fixed_eps") else f"{x:.3f}"


def null_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per theory column: the split-source null (mean, t interval, largest draw) and each
    target domain's value with the share of null draws at or above it and its
    permutation p (the source's and the domain's reviews dealt again within each class)."""
    shift = result["shift"]
    null, perm = shift["null"], shift["permutation"]
    domains = [r["domain"] for r in shift["rows"][1:]]
    n = len(null["splits"])
    header = ["theory column", f"split-source null: mean [95 % t, {n} splits] · largest"] + \
        [f"{d}: value · null share ≥ · permutation p" for d in domains]
    rows = []
    for c, title in COLUMN_TITLES.items():
        s = null["summary"][c]
        t = s["null"]
        level = fmt(t["mean"], c) + ("" if t["lo"] is None else
                                     f" [{fmt(t['lo'], c)}, {fmt(t['hi'], c)}]")
        rows.append([title, f"{level} · {fmt(s['null_max'], c)}"]
                    + [f"{fmt(perm['shift'][d][c]['observed'], c)} · "
                       f"{s['share_at_or_above'][d]:.2f} · {perm['shift'][d][c]['p']:.3f}"
                       for d in domains])
    return header, rows


def pair_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Does the theory order two domains beyond the noise: the difference of their values
    and its permutation p (the two domains' reviews dealt again within each class)."""
    perm = result["shift"]["permutation"]
    header = ["domains"] + [f"{title}: difference (p)" for title in COLUMN_TITLES.values()]
    rows = [[pair] + [f"{'+' if v[c]['observed'] >= 0 else '−'}"
                      f"{fmt(abs(v[c]['observed']), c)} ({v[c]['p']:.3f})"
                      for c in COLUMN_TITLES]
            for pair, v in perm["pairs"].items()]
    return header, rows


def null_note(result: dict[str, Any]) -> str:
    perm = result["shift"]["permutation"]["permutations"]
    return ("The split-source null: the source's reviews split into two random halves (each "
            "class halved), the theory value between them; its 95 % interval is Student's t "
            "over the splits (no model is trained: the splits are exchangeable draws). 'Null "
            "share ≥': of the null's draws, (1 + those at or above the domain's value)/(1 + "
            "splits); the halves have half the source's reviews, so the null is the noisier "
            "and errs towards calling a domain noise. 'Permutation p': the source's and the "
            f"domain's reviews pooled and dealt again within each class ({perm} times, each "
            "keeping its sizes and label shift), one-sided, (1 + permuted ≥ observed)/(1 + "
            "permutations). Between two domains: their reviews dealt again the same way, "
            "two-sided on the difference, no correction for the comparisons made.")


def forgetting_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    by_theta = {"bert-forgetting-theta=pi": "rotation θ = π",
                "bert-forgetting-theta=pi/2": "rotation θ = π/2"}
    printed = {cond: paper.figure(fid).printed for fid, cond in by_theta.items()}
    header = ["fine-tuned on", "γ", "its own loss before → after", "F on the source [95 %]",
              "theory F (rotation)", "theory F (real geometry: raw means, ε relative)",
              "theory F (orthonormalised means)", "paper (BERT-base, MRPC)"]
    rows = []
    if any(r.get("F_runs") for r in result["forgetting"]):
        header[3] = "F on the source [95 % over reviews] · [95 %, runs counted]"
    for r in result["forgetting"]:
        gamma = "" if r["gamma"] is None else f"{r['gamma']:+.3f}"
        ideal = "" if r["theory_F_rotation"] is None else f"{r['theory_F_rotation']:+.4f}"
        rows.append([r["condition"], gamma, f"{r['ood_before']:.3f} → {r['ood_after']:.3f}",
                     signed_ci(r["F"]) + runs_text(r), ideal, theory_F(r["theory_F_raw"], "+.1e"),
                     theory_F(r["theory_F_orthonormalised"], "+.4f"),
                     printed.get(r["condition"], "")])
    return header, rows


def runs_text(r: dict[str, Any]) -> str:
    """' · [lo, hi] runs counted' where the record has that interval (runs made from
    version 3 on with 2 seeds or more; older records hold the interval over reviews only)."""
    runs = r.get("F_runs")
    return "" if not runs else f" · runs counted [{runs['lo']:+.3f}, {runs['hi']:+.3f}]"


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
                     f"{signed_ci(r['F'])}{runs_text(r)} · {r['ood_after']:.3f}"]
                    + [f"{signed_ci(r['by_part'][p]['F'])}{runs_text(r['by_part'][p])} · "
                       f"{r['by_part'][p]['ood_after']:.3f}" for p in parts])
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
    """Per rotation family: the change from 0 to π and the double-peak contrasts (fixed
    after the first full run), each with its power at the seeds run and what 80 % power
    would need; from one seed neither (the runs' share of the variance is unknown)."""
    header = ["rotation", "contrast", "mean [95 %, runs counted]",
              "power if the estimate were true (two-sided)", "seeds for 80 % power",
              "sd between reviews · of a seed's mean"]
    rows = []
    for fam, v in result["rotation"]["families"].items():
        shape = v["shape"]
        contrasts = [("CE(π) − CE(0)", shape["change_0_to_pi"]["power"])] + \
            [(c["contrast"], c) for c in shape["double_peak"]["contrasts"]]
        for name, p in contrasts:
            if p["run_var"] is None:          # one seed: no runs counted, no power figure
                rows.append([FAMILY_TITLES.get(fam, fam), name, f"{p['effect']:+.3f} "
                             "(1 seed: runs not counted)", "—", "—", "—"])
                continue
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
    ("Natural shift: the theory's values against the noise (split-source null, permutations)",
     null_rows, null_note),
    ("Natural shift: does the theory order two domains beyond the noise?", pair_rows),
    ("Forgetting: fine-tune further, then the change of the held-out source loss",
     forgetting_rows),
    ("Which part's fine-tuning forgets: one part moves, the rest is frozen", part_rows,
     PARTS_NOTE),
    ("Contrasts and their power: the double-peak test (fixed after the first full run)",
     power_rows,
     POWER_NOTE),
)


def _contrast(c: dict[str, Any] | None) -> str:
    """arm − plain by seed: mean [t interval], * = BH-rejected (only from enough seeds)."""
    if c is None:
        return "—"
    if c["n"] == 0 or c["mean"] is None:
        return "no paired seed"
    if c["ci95_t"][0] is None:
        return f"{c['mean']:+.4f} (n = {c['n']}, no interval)"
    mark = " *" if c["bh_rejected"] else ""
    return f"{c['mean']:+.4f} [{c['ci95_t'][0]:+.4f}, {c['ci95_t'][1]:+.4f}]{mark}"


def arm_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per forgetting condition and arm: F (everything moving) beside plain's and the
    theory's F for the same intervention, and F at matched OOD loss."""
    arms = result["arms"]
    shares = arms["matched_levels"]
    header = ["fine-tuned on", "arm", "F on the source [95 %]", "ΔF vs plain [95 % t, by seed]",
              "own loss before → after", "theory F, same intervention (raw means)",
              "theory takes it as"] + [f"F at matched OOD loss s = {x:g} (ΔF)" for x in shares]
    rows = []
    for c in arms["conditions"]:
        for i, r in enumerate(c["rows"]):
            matched = []
            for m in r["matched"]:
                text = "—" if m["F"] is None else f"{m['F']:+.4f}"
                if m["not_reached"]:
                    text += f" ({m['not_reached']} n/r)"
                if m["versus_plain"] is not None:
                    text += f" (Δ {_contrast(m['versus_plain'])})"
                matched.append(text)
            rows.append([c["condition"] if i == 0 else "", r["label"], signed_ci(r["F"]),
                         _contrast(r["versus_plain"]),
                         f"{r['ood_before']:.3f} → {r['ood_after']:.3f}",
                         "—" if r["theory_F"] is None else theory_F(r["theory_F"], "+.1e"),
                         r["theory_as"]] + matched)
    return header, rows


def arm_rows_compact(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The arms table narrow enough for a terminal: F, ΔF, the theory's F, and F at the
    matched levels (their contrasts are in the markdown and JSON)."""
    arms = result["arms"]
    shares = "/".join(f"{x:g}" for x in arms["matched_levels"])
    header = ["condition · arm", "F [95 %]", "ΔF vs plain", "theory F (as)",
              f"F at matched loss s = {shares}"]
    rows = []
    for c in arms["conditions"]:
        for i, r in enumerate(c["rows"]):
            d = r["versus_plain"]
            delta = "—" if d is None else _contrast(d).replace(", no interval", "")
            theory = "—" if r["theory_F"] is None else theory_F(r["theory_F"], "+.1e")
            rows.append([(c["condition"] + " · " if i == 0 else "  ") + r["label"],
                         signed_ci(r["F"]), delta, f"{theory} ({r['theory_as']})",
                         " / ".join("—" if m["F"] is None else f"{m['F']:+.3f}"
                                    for m in r["matched"])])
    return header, rows


def arms_note(result: dict[str, Any]) -> str:
    seeds = result["parameters"]["seeds"]
    few = too_few(seeds)
    return ("Each arm fine-tunes everything on the same batches from the same trained model "
            "(oodcalc.real.arms: what each does to a step). F: the held-out source loss after "
            "minus before; ΔF: arm − plain, each seed's cross-validated F paired, 95 % t "
            f"interval, * = rejected by Benjamini–Hochberg at q = {DESIGN_Q:g} within its "
            f"endpoint (only from >= {VERDICT} seeds{few}). Theory: oodcalc.predict on the raw "
            "class means (the forgetting table's raw column, its rule) with the arm's "
            "intervention; its F is a squared error, the measurement a cross-entropy: compare "
            "signs and orderings, not values. Matched OOD loss: F read off each fit's curve "
            "where the new task's held-out loss first reaches ℓ_s = L(0)^(1−s) · L_plain(end)^s "
            "(n/r: fits that never do).")


def too_few(seeds: int) -> str:
    return f"; this run has {seeds}: no marks" if seeds < VERDICT else ""


def sections_of(result: dict[str, Any], compact: bool = False) -> tuple:
    """The sections a result has: the arms' only when it ran arms (``compact``: the
    terminal's narrower arms table)."""
    if "arms" not in result:
        return SECTIONS
    return SECTIONS + (("Intervention arms of the forgetting fine-tune",
                        arm_rows_compact if compact else arm_rows, arms_note),)


def notes(note, result: dict[str, Any]) -> list[str]:
    """A section's notes: fixed text, or text made from the result."""
    return [n(result) if callable(n) else n for n in note]


def markdown(result: dict[str, Any]) -> str:
    def table(header, rows):
        esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
        return ["| " + " | ".join(map(esc, header)) + " |", "|---" * len(header) + "|"] + \
               ["| " + " | ".join(map(esc, r)) + " |" for r in rows]

    lines = [" ".join(setup_lines(result)), "",
             f"### The paper's figures beside ours (arXiv {paper.ARXIV})", ""]
    lines += table(["measurement", "paper", "ours", "95 % interval"], paper_rows(result))
    for title, rows_of, *note in sections_of(result):
        lines += ["", f"### {title}", ""]
        lines += table(*rows_of(result))
        lines += ["", *notes(note, result)] if note else []
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
                *sections_of(result, compact=True))
    for title, rows_of, *note in sections:
        header, rows = rows_of(result)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for h in header:
            table.add_column(h)
        for r in rows:
            table.add_row(*(escape(str(cell)) for cell in r))
        console.print(table)
        for line in notes(note, result):
            console.print(escape(line), style="dim")
    console.print(escape(shift_orderings(result)))
