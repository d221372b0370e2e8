"""Regenerate the generated blocks of the README and docs/ (or check that they are current).

    python tools/generate_docs.py            # rewrite every stale block (and file) in place
    python tools/generate_docs.py --check    # exit 1 and name the stale ones

A generated block sits between two markers in a Markdown file:

    <!-- NAME:start -->
    ...generated text...
    <!-- NAME:end -->

and is produced by one function of this module, registered in ``BLOCKS`` (most sit in
the guide pages, docs/guide/*.md; the README keeps the example output). The tests
(tests/test_docs.py) regenerate every block and fail when the file differs, so a block
never goes stale silently. To add a block: write its function, add one ``Block`` line,
put the two markers in the file, run this script. Whole generated files (the example
notebook) are listed in ``FILES``.

Tables generated from a registry take their columns from a list of
``(heading, function of one entry)``: adding a column is one line there.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import json
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from oodcalc.depth.documents import BLOCKS as DEPTH_BLOCKS   # (file, name) of depth's blocks

ROOT = Path(__file__).resolve().parents[1]
TIMES_FILE = ROOT / "tools" / "readme_times.json"


# --- Markdown helpers --------------------------------------------------------------------

def cell(value: Any) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(columns: Sequence[tuple[str, Callable[[Any], Any]]],
                   entries: Sequence[Any]) -> str:
    """A Markdown table with one row per entry; ``columns`` is ``[(heading, getter)]``."""
    lines = ["| " + " | ".join(heading for heading, _ in columns) + " |",
             "|" + "---|" * len(columns)]
    for entry in entries:
        lines.append("| " + " | ".join(cell(get(entry)) for _, get in columns) + " |")
    return "\n".join(lines)


def run_cli(argv: list[str], columns: int = 100) -> str:
    """What ``oodcalc ARGV`` prints to a terminal ``columns`` wide (trailing blanks cut)."""
    from oodcalc.cli import main

    buffer = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        with contextlib.redirect_stdout(buffer):
            code = main(argv)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    if code != 0:
        raise RuntimeError(f"oodcalc {' '.join(argv)} exited with {code}")
    return "\n".join(line.rstrip() for line in buffer.getvalue().strip().splitlines())


# --- the claims (registry: oodcalc/claims/) -----------------------------------------------

def _derivation_link(claim) -> str:
    """A link from docs/guide/ (where the short table is) to the claim's derivation."""
    from oodcalc.symbolic.documents import file_stem
    return f"[{claim.id}](../../derivations/{file_stem(claim)}.md)"


#: docs/theory.md: the full table. One line per column.
THEORY_CLAIM_COLUMNS: list[tuple[str, Callable[[Any], Any]]] = [
    ("#", lambda c: c.id),
    ("claim", lambda c: c.title),
    ("statement checked", lambda c: c.statement),
    ("level", lambda c: c.level),
    ("decisive step", lambda c: c.decisive_step),
]

#: docs/guide/derive.md: the short table, linking each claim's derivation. One line per column.
GUIDE_CLAIM_COLUMNS: list[tuple[str, Callable[[Any], Any]]] = [
    ("#", _derivation_link),
    ("claim", lambda c: c.title),
    ("level", lambda c: c.level),
    ("decisive step", lambda c: c.decisive_step),
]


def claims_table(columns) -> Callable[[], str]:
    def generate() -> str:
        from oodcalc.claims import CLAIMS
        return markdown_table(columns, CLAIMS)
    return generate


# --- the paper's figures (oodcalc/paper_figures.toml) -------------------------------------

FIGURE_COLUMNS: list[tuple[str, Callable[[Any], Any]]] = [
    ("experiment", lambda f: f.experiment),
    ("quantity", lambda f: f.quantity),
    ("reported", lambda f: f.printed),
    ("where in the paper", lambda f: f.where),
]


def figures_table() -> str:
    from oodcalc import paper
    return markdown_table(FIGURE_COLUMNS, list(paper.figures().values()))


# --- command output ------------------------------------------------------------------------

def reproduce_markdown() -> str:
    return run_cli(["reproduce", "synthetic", "-f", "markdown"])


PREDICT_EXAMPLE = ["predict", "--gamma", "1,-0.9"]


def predict_example() -> str:
    command = "oodcalc " + " ".join(PREDICT_EXAMPLE)
    return f"```text\n$ {command}\n{run_cli(PREDICT_EXAMPLE)}\n```"


ADVISE_EXAMPLE = ["advise", "--gamma", "1,-0.9", "--format", "markdown"]


def advise_example() -> str:
    """``oodcalc advise`` in Markdown (its ``##`` heading sits under the guide page's title)."""
    text = run_cli(ADVISE_EXAMPLE)
    return f"`oodcalc {' '.join(ADVISE_EXAMPLE)}` prints:\n\n{text}"


# --- measured times (tools/measure_readme_times.py writes tools/readme_times.json) ---------

def format_seconds(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def times_table() -> str:
    data = json.loads(TIMES_FILE.read_text(encoding="utf-8"))
    rows = markdown_table([("command", lambda r: f"`{r['command']}`"),
                           ("CPU time", lambda r: format_seconds(r["cpu_seconds"])),
                           ("wall time (this run)", lambda r: format_seconds(r["wall_seconds"])),
                           ("what it does", lambda r: r["what"])], data["commands"])
    m = data["machine"]
    return (f"{rows}\n\nMeasured by `python tools/measure_readme_times.py` on {m['date']}, "
            f"{m['cores']} cores ({m['platform']}, Python {m['python']}). CPU time is what a "
            "command costs (on an idle machine its wall time is close to it, less where it "
            "runs work in parallel); the wall times of this run were taken with a load "
            f"average of {m['load_before']} from other work on the machine.")


# --- the verification ledger (oodcalc verify --json > docs/ledger.json) -------------------

LEDGER_FILE = ROOT / "docs" / "ledger.json"
LEDGER_COMMAND = "oodcalc verify --json > docs/ledger.json"


def bounded(x: float) -> str:
    """A measured error: two digits, or at round-off scale (< 1e-12) the power of ten that
    bounds it (its last digits differ from machine to machine)."""
    if x == 0:
        return "0"
    if abs(x) < 1e-12:
        exponent = math.floor(math.log10(abs(x))) + 1
        return f"< 1e{exponent}"
    return f"{x:.2g}"


def ledger_population(row: dict) -> str:
    pop = row["population"]
    if pop["max_abs"] is None:
        return "—"
    text = bounded(pop["max_abs"])
    if pop["max_rel"] is not None:
        text += f" / {bounded(pop['max_rel'])}"
    return text if pop["passed"] else f"{text} ✗"


def ledger_prompts(row: dict) -> str:
    prompts = row["prompts"]
    if prompts is None:
        return "—"
    points = prompts["points"]
    if prompts["kind"] == "exact":
        text = f"exact (residual {bounded(max(p['mean'] for p in points))})"
    else:
        last = points[-1]
        text = f"N = {last['N']}: {last['mean']:+.2g} ± {last['se']:.1g}"
        if prompts["rate"] is not None:
            text += f", N^{-prompts['rate']:+.2f}±{prompts['rate_se']:.2f}"
        if prompts.get("batch_points"):
            b = prompts["batch_points"][-1]
            text += f"; batch sweep, B = {b['N']}: {b['mean']:+.2g} ± {b['se']:.1g}"
    return text if prompts["passed"] else f"{text} ✗"


LEDGER_COLUMNS = [
    ("#", lambda r: r["claim"]),
    ("claim", lambda r: r["title"]),
    ("symbolic (earned in the run)", lambda r: r["symbolic"]),
    ("vs population GD: max abs / rel", ledger_population),
    ("vs finite prompts: largest N, mean ± SE, rate", ledger_prompts),
    ("verdict", lambda r: r["verdict"] if r["verdict"] == "PASS" else f"**{r['verdict']}**"),
]


def ledger_block() -> str:
    """The ledger of docs/guide/simulate-verify.md: the rows of a full `oodcalc verify
    --json` run, as recorded."""
    data = json.loads(LEDGER_FILE.read_text(encoding="utf-8"))
    rows, prompts = data["rows"], data["conventions"]["prompts"]
    third = rows[2]
    Ns = prompts["Ns"]
    return (f"Measured with the full ledger (`{LEDGER_COMMAND}`; mode {data['mode']}: "
            f"N = {Ns[0]}…{Ns[-1]}, {prompts['seeds']} seeds, mini-batches of "
            f"{prompts['batch']}), {len(rows)} rows; round-off residuals as the power of ten "
            "that bounds them. A piped run logs one line per finished row, e.g. "
            f"`verify: 3/{len(rows)} claim {third['claim']} ({third['title']}): "
            f"{third['verdict']}` and the row's time.\n\n"
            + markdown_table(LEDGER_COLUMNS, rows))


# --- the example notebook (examples/tour.py, jupytext "percent" format) ---------------------

def notebook_from_script(script: Path) -> str:
    """A Jupyter notebook (nbformat 4, no outputs) from a percent-format script: each
    ``# %%`` line starts a code cell, ``# %% [markdown]`` a Markdown cell whose lines
    drop their leading ``# ``."""
    cells: list[dict[str, Any]] = []
    kind, lines = None, []

    def close() -> None:
        while lines and not lines[-1].strip():
            lines.pop()
        if kind is None or not lines:
            return
        if kind == "markdown":
            text = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines]
        else:
            text = list(lines)
        cell: dict[str, Any] = {"cell_type": kind, "id": f"cell-{len(cells) + 1}",
                                "metadata": {},
                                "source": [line + "\n" for line in text[:-1]] + [text[-1]]}
        if kind == "code":
            cell |= {"execution_count": None, "outputs": []}
        cells.append(cell)

    for line in script.read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            close()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None and (lines or line.strip()):
            lines.append(line)
    close()
    notebook = {"cells": cells,
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                            "name": "python3"},
                             "language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def executed(notebook: str) -> str:
    """``notebook`` run top to bottom in a fresh Jupyter kernel (nbclient and ipykernel:
    the ``notebook`` extra), with its outputs as a reader's Jupyter shows them, less what
    would differ from run to run or machine to machine: no timings, the kernel's metadata
    (its Python version) left as the script's, consecutive stream chunks joined, and no
    plain-text repr beside a table or a formula (a Report's dataclass repr prints every
    float in full; the script prints bounds, never round-off digits)."""
    import nbclient
    import nbformat
    nb = nbformat.reads(notebook, as_version=4)
    metadata = json.loads(json.dumps(nb.metadata))
    sources = [cell["source"] for cell in json.loads(notebook)["cells"]]   # as lines
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    for cell, source in zip(nb.cells, sources):
        cell.source = source
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            if (out.output_type == "stream" and outputs and outputs[-1].output_type == "stream"
                    and outputs[-1].name == out.name):
                outputs[-1].text += out.text
                continue
            if "data" in out and {"text/html", "text/markdown"} & set(out.data):
                out.data.pop("text/plain", None)
            outputs.append(out)
        cell.outputs = outputs
        cell.metadata = {}
    nb.metadata = metadata
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def without_outputs(notebook: str) -> dict[str, Any]:
    """A notebook's cells and metadata as :func:`notebook_from_script` writes them: no
    outputs, no execution counts."""
    nb = json.loads(notebook)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell |= {"execution_count": None, "outputs": []}
    return nb


def run_cells(cells: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each code cell run in this process, in one namespace, as a kernel runs it: what it
    prints (stdout), then, when it ends in an expression, that value's HTML and Markdown:
    the outputs :func:`executed` keeps, re-made without Jupyter (tests/test_docs.py and
    tools/other_machine.py compare them with the committed ones)."""
    import ast
    namespace: dict[str, Any] = {"__name__": "__main__"}
    outputs = []
    for cell in cells:
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, "<cell>", "exec"), namespace)
            value = (eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                     if last is not None else None)
        out = ([{"output_type": "stream", "name": "stdout", "text": printed.getvalue()}]
               if printed.getvalue() else [])
        data = {mime: getattr(value, f"_repr_{kind}_")()
                for mime, kind in (("text/html", "html"), ("text/markdown", "markdown"))
                if hasattr(value, f"_repr_{kind}_")}
        if data:
            out.append({"output_type": "execute_result", "data": data})
        outputs.append(out)
    return outputs


def comparable(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cell's outputs as :func:`run_cells` gives them (texts joined; no counts)."""
    keep = []
    for o in outputs:
        if o["output_type"] == "stream":
            keep.append({"output_type": "stream", "name": o["name"], "text": "".join(o["text"])})
        else:
            keep.append({"output_type": o["output_type"],
                         "data": {k: "".join(v) for k, v in o["data"].items()}})
    return keep


def code_cells(path: Path) -> list[dict[str, Any]]:
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def can_execute() -> bool:
    """Whether nbclient and a Python kernel are installed (the ``notebook`` extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("nbclient", "ipykernel"))


#: Whole files generated from others: path → generator.
FILES: dict[str, Callable[[], str]] = {}
#: Notebooks generated from a script and executed (outputs committed): path → script.
NOTEBOOKS: dict[str, Path] = {"examples/tour.ipynb": ROOT / "examples" / "tour.py"}


# --- the registry of blocks -----------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    file: str            # relative to the repository root
    name: str
    generate: Callable[[], str]


@functools.lru_cache(maxsize=1)
def depth_runs():
    """The depth experiment's record (docs/depth.json) as results: no torch needed."""
    from oodcalc.depth import documents, record
    return record.load(documents.RECORD)[1]


def depth_block(file: str, name: str) -> Callable[[], str]:
    """A block of the depth experiment, from its record (tools/depth_full_run.py)."""
    def generate() -> str:
        from oodcalc.depth import documents
        return documents.generate(depth_runs(), file, name)
    return generate


def real_block(saved: str) -> Callable[[], str]:
    """The tables of a saved real-text run (``oodcalc reproduce real -i FILE -f markdown``)."""
    def generate() -> str:
        from oodcalc.real import render
        return render.markdown(json.loads((ROOT / saved).read_text(encoding="utf-8")))
    return generate


def arms_block(saved: str) -> Callable[[], str]:
    """The closing tables of a saved arms record (``oodcalc reproduce ladder --arms ... -f
    json -o FILE``; oodcalc.depth.arms_table.arms_summary)."""
    def generate() -> str:
        from oodcalc.depth.arms_table import arms_summary
        return arms_summary(json.loads((ROOT / saved).read_text(encoding="utf-8")))
    return generate


def long_finetuning_table() -> str:
    """Claim 8e at reachable t: the flow, the closed form and its bracket, the recurrence."""
    from oodcalc.claims.claim8e_long_finetuning import reachable_markdown
    return reachable_markdown()


# --- interventions: advise's thresholds, and the open question on the total F --------------

#: γ1 = 1 and these γ2, then the K = 4 geometry where the paper's advice (1)–(2) backfires
ADVISE_GEOMETRIES = ((1, -0.9), (1, -0.5), (1, -0.2), (-0.44, -0.55, 0.05, -0.14))


def advise_table() -> str:
    """``oodcalc advise --gamma 1,γ2`` for each γ2: λ*, μ*, the projections' price, the
    verdicts on the paper's advice (λ* to 5 decimals: its bracket is 1e-6 wide)."""
    import oodcalc as oc
    rows = ["| γ | plain F (steps) | λ* (steps) | λₖ*, every F_k (steps) | μ* | "
            "key projection F (steps) | advice (1) cosine | (2) drop negative | (3) project |",
            "|---|---|---|---|---|---|---|---|---|"]
    for gamma in ADVISE_GEOMETRIES:
        a = oc.advise(oc.Setting(oc.parallel_shift(list(gamma))))
        plain, key = a.arm("plain"), a.arm("project key")
        lam, lam_k, mu = (_threshold_cell(t) for t in (a.replay, a.replay_each, a.l2))
        rows.append(f"| ({', '.join(f'{g:g}' for g in gamma)}) | {plain.F:+.3g} "
                    f"({plain.steps}) | {lam} | {lam_k} | {mu} | "
                    f"{key.F:g} ({key.steps}) | "
                    + " | ".join(v.verdict for v in a.verdicts) + " |")
    return ("\n".join(rows) + "\n\nε = 0.01, η = η_ft = 0.1; every entry a run of "
            "`oodcalc advise --gamma γ` (λ* and μ*: the smallest share and pull whose run "
            "meets the rule on U with F <= 0, λₖ* with every F_k <= 0, bracketed to 1e-6; "
            "\"none\": no value on the "
            "search grid does, and a stronger pull stops short of the rule).")


def _threshold_cell(t) -> str:
    if t.value == 0 and t.arm is None:
        return "0 (not needed)"
    return "none" if t.value is None else f"{t.value:.5f} ({t.arm.steps})"


# --- overlapping features: T1 and F as the overlap grows --------------------------------

#: (γ, ρ) of the overlap table: the issue's two shifts at four overlaps, then the case where
#: a negative overlap makes the paper's rule wrong the other way
OVERLAP_CASES = tuple(((1, g2), rho) for g2 in (-0.5, 0.5) for rho in (-0.5, 0, 0.5, 0.8)) \
    + (((1, -0.2), -0.5),)


def overlap_table() -> str:
    """``oodcalc predict --overlap ρ --gamma γ`` per case: T1, T2, F and F_k, the paper's
    K = 2 rule against the sign of F_k, and the overlap-aware first-order criterion."""
    import oodcalc as oc
    rows = ["| γ | ρ | T1 | T2 | F | F_1 | F_2 | paper's rule, feature 2 | "
            "sign of C_2 (first order) |", "|---|---|---|---|---|---|---|---|---|"]
    for gamma, rho in OVERLAP_CASES:
        r = oc.predict(oc.Setting(oc.overlap(rho, list(gamma))))
        f2 = r.forgetting[1]
        said = "forgetting" if f2.regime == "forgetting" else "no forgetting"
        rule = said + (", right" if f2.theorem_holds else ", **wrong**")
        moved = "rises" if f2.D_k > 0 else "falls"
        C = moved + (", right" if (f2.D_k > 0) == (f2.F_k > 0) else ", **wrong**")
        F_k = " | ".join(f"{f.F_k:+.3e}" for f in r.forgetting)
        rows.append(f"| ({gamma[0]:g}, {gamma[1]:+g}) | {rho:g} | {r.pretrain.T1} | "
                    f"{r.finetune.T2} | {r.F:+.3e} | {F_k} | {rule} | {C} |")
    return ("\n".join(rows) + "\n\nK = 2, ε = 0.01, η = η_ft = 0.1; every row a run of "
            "`oodcalc predict --overlap ρ --gamma γ` (exact: full-Q gradient descent on the "
            "same vectors gives the same T1 and T2 and F_k within 1e-12, tests/test_overlap.py). "
            "\"right\"/\"wrong\": against the sign of F_2 over the whole run.")


def overlap_map_summary() -> str:
    """What ``oodcalc plot overlap-map`` (its defaults) counts: where each rule contradicts
    the exact sign of F_k."""
    from oodcalc import overlap_map
    m = overlap_map.compute()
    points, unscored = m.T2.size, int((~m.scored).sum())
    wrong = {k: {rule: int(m.disagrees(rule)[..., k - 1].sum()) for rule in ("paper",
                                                                            "C_sign")}
             for k in (1, 2)}

    def share(count: int) -> str:
        return f"{count} ({100 * count / points:.1f} %)"
    return (f"Over the whole plane (γ1 = 1, {len(m.gamma2)} values of γ2 in [−1, 1], "
            f"{len(m.rho)} of ρ in [{m.rho[0]:g}, {m.rho[-1]:g}]; {unscored} points with "
            f"`T2 = 0` not scored), the paper's rule contradicts the exact sign of `F_2` at "
            f"{share(wrong[2]['paper'])} of the {points:,} points and the sign of `C_2` at "
            f"{share(wrong[2]['C_sign'])}; for feature 1 at {share(wrong[1]['paper'])} and "
            f"{share(wrong[1]['C_sign'])}. Recipe: `oodcalc plot overlap-map` (its defaults; "
            f"ε = {m.protocol['eps']:g}, η = η_ft = {m.protocol['eta']:g}).")


TOTAL_FORGETTING_RECORD = ROOT / "docs" / "total_forgetting.json"


def total_forgetting_block() -> str:
    """The search for a positive total F at K >= 3 (tools/scan_total_forgetting.py)."""
    data = json.loads(TOTAL_FORGETTING_RECORD.read_text(encoding="utf-8"))
    r, grid = data["random"], data["grid"]

    def tup(values, fmt="g"):
        return "(" + ", ".join(format(v, fmt) for v in values) + ")"

    def where(row):
        return (f"K = {row['K']}, ε = {row['eps']:g}, η = {row['eta']:g}, "
                f"γ = {tup(row['gamma'])}")

    top, near = r["largest_F"], r["largest_rho"]
    lines = [
        f"- **Random search, resolved steps** ({r['runs']} parallel shifts, K = 3..6, "
        f"ε ∈ {{{', '.join(f'{e:g}' for e in grid['eps'])}}}, "
        f"η ∈ {{{', '.join(f'{e:g}' for e in grid['eta'])}}}, seed {data['seed']}; pairs "
        f"not run: {r['skipped_pairs']['coarse']} where predict warns the step is too "
        f"coarse, {r['skipped_pairs']['long']} with T1 > {grid['max_T1']}): F > 0 in "
        f"{r['positive'] or 'none'} of them ({r['unmoved']} with nothing moved, F = 0 "
        f"exactly). The largest F is {top['F']:+.2g} ({where(top)}); the closest to "
        f"positive relative to its parts, ρ = F / Σ|F_k| = {near['rho']:+.2f}, at "
        f"{where(near)}.",
        "- **Ascent** (differential evolution on ρ over γ ∈ [−1, 1]^K, the initial "
        "population seeded with K = 2's forgetting pairs (1, −0.9) and (1, −0.58)): the "
        "largest ρ found, and where:"]
    for a in data["ascent"]:
        lines.append(f"  - K = {a['K']}, ε = {a['eps']:g}, η = {a['eta']:g}: "
                     f"ρ = {a['rho']:+.2f} (F = {a['F']:+.2g}) at γ = {tup(a['gamma'])}")
    trend = data["epsilon_trend"]
    lines.append(f"- **As ε falls** (γ = (1/4, −1, −1), η = {trend[0]['eta']:g}): ρ = "
                 + ", ".join(f"{t['rho']:+.2f}" for t in trend) + " at ε = "
                 + ", ".join(f"{t['eps']:g}" for t in trend) + ".")
    lines.append("- **Large steps** (differential evolution on F / e(T1); \"coarse\": "
                 "predict warns the step is too coarse): the largest F found")
    def value(name: str, x: float, sign: str = "+") -> str:   # round-off scale: its bound
        if abs(x) >= 1e-12:
            return f"{name} = {x:{sign}.1e}"
        return f"{name if x >= 0 else '|' + name + '|'} {bounded(abs(x))}"
    for c in data["coarse"]:
        lines.append(f"  - K = {c['K']}, ε = {c['eps']:g}, η = {c['eta']:g}"
                     f"{', coarse' if c['coarse'] else ''} "
                     f"(T1 = {c['T1']}, T2 = {c['T2']}, {value('e(T1)', c['e_T1'], '')}): "
                     f"{value('F', c['F'])} at γ = {tup(c['gamma'])}")
    c = data["counterexample"]
    lines.append(
        f"- **Counterexample** (K = {c['K']}): γ = {tup(c['gamma'])}, ε = {c['eps']:g}, "
        f"η = {c['eta']:g}: F = {c['F']:+.2g} (F_k = {tup(c['F_k'], '+.2g')}), T1 = "
        f"{c['T1']}, T2 = {c['T2']}, past claim 9's step-size bound "
        f"({c['step_size_bound']:.2f}); `oodcalc predict --gamma "
        f"{','.join(f'{g:g}' for g in c['gamma'])} --eps {c['eps']:g} --eta {c['eta']:g}`.")
    g, m = data["general"]["mean"], data["general"]["v3"]
    lines.append(
        f"- **Not a parallel shift** (K = 3, d = 4, ε = 0.01, η = 0.1, no warning): u_1, u_3 = "
        f"(v̄ ± w)/√2, u_2 = (v_1 − v_2)/√2 gives F = {g['F']:+.2g} (F_k = "
        f"{tup(g['F_k'], '+.2g')}, T1 = {g['T1']}, T2 = {g['T2']}); with v_3 in place of v̄, "
        f"F = {m['F']:+.2g}.")
    lines.append(f"\nRecipe: `{data['recipe']}` (oodcalc {data['oodcalc']}).")
    return "\n".join(lines)


# --- benchmark figures (python benchmarks/all.py writes docs/performance.md) --------------

PERFORMANCE_FILE = ROOT / "docs" / "performance.md"

#: bench_peers.py's rows, as the guide's performance columns (heading, the row's implementation).
PEER_COLUMNS = [
    ("NumPy (K,K,B)", "batched NumPy, (K, K, B) layout"),
    ("NumPy, buffers reused", "batched NumPy, buffers reused"),
    ("NumPy, K = 2 scalar margins", "NumPy on K = 2 scalar margins, distinct starts"),
    ("PyTorch, 1 thread", "batched PyTorch, analytic gradient, 1 thread"),
    ("JAX jit(vmap)", "JAX jit(vmap(while_loop)), x64"),
    ("Numba, 1 / 2 threads", "Numba, fused loop per configuration, 1 thread",
     "Numba, fused loop per configuration, 2 threads"),
]
SWEEP_ROW = "oodcalc sweep (every column of the table)"
OUTPUTS_ROW = "oodcalc, the peers' outputs only (T1, T2, F_k)"
SCALAR_ROW = "NumPy on K = 2 scalar margins, distinct starts"
BATCHED_ROW = "batched NumPy, (K, K, B) layout"


def benchmark_sections(text: str) -> dict[str, dict[str, list[dict[str, str]]]]:
    """docs/performance.md read back: per script (``bench_peers.py``), per ``###`` heading
    ("" before the first; a second table under one heading gets " #2"), the table's rows
    keyed by column heading."""
    sections: dict[str, dict[str, list[dict[str, str]]]] = {}
    tables: dict[str, list[dict[str, str]]] = {}
    heading, rows = "", None
    for line in text.splitlines():
        if line.startswith("## `python benchmarks/"):
            script = line.split("/", 1)[1].split("`")[0].split()[0]    # without its options
            tables = sections.setdefault(script, {})
            heading, rows = "", None
        elif line.startswith("### "):
            heading, rows = line[4:].strip(), None
        elif not line.startswith("|"):
            rows = None
        elif not set(line) <= set("|-: "):             # not the rule under the header
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if rows is None:
                key = heading if heading not in tables else f"{heading} #2"
                header, rows = cells, tables.setdefault(key, [])
            else:
                rows.append(dict(zip(header, cells)))
    return sections


def _row(table: list[dict[str, str]], name: str) -> dict[str, str]:
    for row in table:
        if row.get("implementation", row.get("workload")) == name:
            return row
    raise KeyError(f"docs/performance.md has no row {name!r}: rerun benchmarks/all.py")


def _seconds(cell: str) -> float:
    return float(cell.split()[0])


def _measured(text: str, script: str, header: str, tables) -> str:
    """When and at what load ``script``'s tables in docs/performance.md were measured: its
    own "Measured alone ... on DATE" (a rerun with ``all.py --only``) and the range of its
    rows' load column, else the whole run's dates and loads from the ``header``."""
    section = text.split(f"## `python benchmarks/{script}", 1)[1].split("\n## ", 1)[0]
    alone = re.search(r"Measured alone \(.*?\) on (\S+ \S+ UTC)", section)
    if alone is None:
        run = re.search(r"from (\S+ \S+) to (\S+ \S+),", header)
        loads = re.search(r"load average ([0-9.]+) at the start, ([0-9.]+) at the end", header)
        return (f"{run.group(1)}–{run.group(2)}, load average {loads.group(1)} at the start "
                f"and {loads.group(2)} at the end")
    loads = sorted(float(r["load"]) for rows in tables.values() for r in rows
                   if r.get("load", "").replace(".", "", 1).isdigit())
    return f"{alone.group(1)} (measured alone), load average {loads[0]:g}–{loads[-1]:g}"


def performance_summary() -> str:
    text = PERFORMANCE_FILE.read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("Generated by"))
    if "--quick" in header:
        raise ValueError("docs/performance.md holds a smoke test (all.py --quick): the guide "
                         "quotes a full run; rerun python benchmarks/all.py")
    bench = benchmark_sections(text)
    peers = bench["bench_peers.py"]
    when = _measured(text, "bench_peers.py", header, peers)
    workloads = [("K = 2 phase diagram, 201×201", "201×201 K = 2 phase diagram"),
                 ("K = 8, 10⁴ random γ", "K = 8, 10,000 random γ"),
                 ("θ × K, 46 angles, K = 2..32", "θ × K sweep (46 angles, K = 2, 4, 8, 16, 32)")]
    lines = ["| workload (`bench_peers.py`) | oodcalc | "
             + " | ".join(c[0] for c in PEER_COLUMNS) + " |",
             "|---" * (len(PEER_COLUMNS) + 2) + "|"]
    for label, heading in workloads:
        table = peers[heading]
        ours = _row(table, SWEEP_ROW)["best time"]
        ratio = lambda name: _row(table, name)["time / oodcalc"].replace("K = 2 only", "—")
        cells = [" / ".join(ratio(n) for n in names) for _, *names in PEER_COLUMNS]
        lines.append(f"| {label} (oodcalc {ours}) | 1 | " + " | ".join(cells) + " |")
    margins = bench["bench_margins.py"]
    engine = [t for h, t in sorted(margins.items(), key=lambda item: "heap tuned" in item[0])
              if "margin engine" in h]
    if len(engine) != 2:
        raise KeyError("bench_margins.py's two tables (default and tuned heap) are not both "
                       "in docs/performance.md: rerun benchmarks/all.py")
    default, tuned = engine

    def versus(table, row, peer):
        return _seconds(_row(table, row)["wall"]) / _seconds(_row(table, peer)["wall"])
    tuned_scalar = versus(tuned, SWEEP_ROW, SCALAR_ROW)

    predict = {r["run"]: r for r in bench["bench_predict.py"]["Targets"]}
    cli = bench["bench_cli.py"]
    cli_row = next(r for t in cli.values() for r in t if r["command"].startswith("oodcalc"))
    release = {r["workload"]: r for t in bench["bench_release.py"].values() for r in t}
    prompts = [r for t in bench.get("bench_prompts.py", {}).values() for r in t]
    paragraphs = [
        "`python benchmarks/all.py` runs every benchmark and writes "
        "[`docs/performance.md`](../performance.md) (the tables, the command, the date and "
        "the machine load beside every number); the figures below are read from it (a test "
        "regenerates this paragraph). Each peer is checked first to give identical T1 and T2 "
        "and F_k within 1e-12 on every configuration. Time relative to oodcalc's sweep "
        f"(above 1: slower than oodcalc), on this project's shared 2-core machine, {when}:",
        "\n".join(lines),
        "The peers allocate fresh arrays every step and a page fault here costs "
        "microseconds, so their times move with the C library's heap. `bench_margins.py` "
        "(best of 7, rows interleaved) measures the 201×201 diagram both ways: with the "
        "default heap the whole sweep takes "
        f"{versus(default, SWEEP_ROW, BATCHED_ROW):.2f}× the plain batched NumPy peer's "
        f"time and {versus(default, SWEEP_ROW, SCALAR_ROW):.2f}× the scalar-margin peer's; "
        "with glibc's heap tuned so that nothing faults, "
        f"{versus(tuned, SWEEP_ROW, BATCHED_ROW):.2f}× and "
        f"{tuned_scalar:.2f}×: the scalar-margin peer, written for "
        "K = 2 alone and computing only T1, T2 and F_k, is then "
        + ("ahead of" if tuned_scalar > 1 else "behind")
        + " the whole table; oodcalc's dynamics on the same outputs take "
        f"{versus(tuned, OUTPUTS_ROW, SCALAR_ROW):.2f}× its time, the margin engine alone "
        f"{versus(tuned, 'descend_columns alone (the margin engine)', SCALAR_ROW):.2f}×.",
        "`oodcalc predict` (`bench_predict.py`, a fresh process each): "
        + "; ".join(f"{name}: {r['measured']} (target {r['target']}: {r['verdict']})"
                    for name, r in predict.items())
        + f". `oodcalc predict --gamma 1,-0.9` starts in {cli_row['vs import numpy']} "
        f"`python -c \"import numpy\"` (`bench_cli.py`, target {cli_row['target']}). "
        "Against the previous release (`bench_release.py`, same run), time now / then: "
        + "; ".join(f"{name}: {r['now / release']}" for name, r in release.items()) + "."
        + ("" if not prompts else " The finite-prompt simulator (`bench_prompts.py`), steps "
           "per second against its PyTorch autograd version: "
           + "; ".join(f"{r['speed-up']} ({r['setting']})" for r in prompts) + "."),
    ]
    return "\n\n".join(p if p.startswith("|") else textwrap.fill(p, 91, break_on_hyphens=False,
                                                                 break_long_words=False)
                         for p in paragraphs)


BLOCKS: list[Block] = [
    Block("README.md", "predict-example", predict_example),
    Block("docs/guide/predict.md", "predict-example", predict_example),
    Block("docs/guide/advise.md", "advise-example", advise_example),
    Block("docs/guide/derive.md", "claims", claims_table(GUIDE_CLAIM_COLUMNS)),
    Block("docs/guide/reproduce.md", "reproduce", reproduce_markdown),
    Block("docs/guide/timing.md", "times", times_table),
    Block("docs/guide/simulate-verify.md", "ledger", ledger_block),
    Block("docs/guide/timing.md", "performance", performance_summary),
    Block("docs/theory.md", "claims", claims_table(THEORY_CLAIM_COLUMNS)),
    Block("docs/theory.md", "figures", figures_table),
    Block("docs/theory.md", "long-finetuning", long_finetuning_table),
    Block("docs/theory.md", "advise", advise_table),
    Block("docs/theory.md", "total-forgetting", total_forgetting_block),
    Block("docs/theory.md", "overlap", overlap_table),
    Block("docs/theory.md", "overlap-map", overlap_map_summary),
    *(Block(file, name, depth_block(file, name)) for file, name in DEPTH_BLOCKS),
    Block("docs/depth.md", "ladder-arms", arms_block("docs/ladder_arms.json")),
    Block("docs/real.md", "real", real_block("docs/real.json")),
    Block("docs/real.md", "real-layer3", real_block("docs/real_layer3.json")),
]


def _pattern(name: str) -> re.Pattern:
    name = re.escape(name)
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(^<!-- {name}:end -->)", re.S | re.M)


def current(block: Block, root: Path = ROOT) -> str:
    """The block's text as it stands in its file (a clear error if the markers are gone)."""
    text = (root / block.file).read_text(encoding="utf-8")
    match = _pattern(block.name).search(text)
    if match is None:
        raise LookupError(f"{block.file} has no '{block.name}' block "
                          f"(<!-- {block.name}:start --> ... <!-- {block.name}:end -->)")
    return match.group(2).strip()


def update(block: Block, root: Path = ROOT) -> bool:
    """Regenerate one block in place; True if the file changed."""
    path = root / block.file
    text = path.read_text(encoding="utf-8")
    current(block, root)
    fresh = block.generate().strip()
    new = _pattern(block.name).sub(lambda m: m.group(1) + fresh + "\n" + m.group(3), text,
                                   count=1)
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/generate_docs.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if any block is stale")
    args = parser.parse_args(argv)
    stale = []
    for block in BLOCKS:
        if args.check:
            if current(block) != block.generate().strip():
                stale.append(f"{block.file}: {block.name}")
        elif update(block):
            print(f"updated {block.file}: {block.name}")

    def settle(name: str, fresh: str, committed: str | None) -> None:
        """A generated whole file: stale under --check, else rewritten when it changed."""
        if committed == fresh:
            return
        if args.check:
            stale.append(name)
        else:
            (ROOT / name).write_text(fresh, encoding="utf-8")
            print(f"updated {name}")

    for name, generate in FILES.items():
        path = ROOT / name
        settle(name, generate(), path.read_text(encoding="utf-8") if path.exists() else None)
    for name, script in NOTEBOOKS.items():
        path, skeleton = ROOT / name, notebook_from_script(script)
        committed = path.read_text(encoding="utf-8") if path.exists() else None
        if not can_execute():       # the cells can still be checked, not the outputs
            print(f"{name}: outputs not re-executed (pip install -e \".[notebook]\")",
                  file=sys.stderr)
            if committed is None or without_outputs(committed) != json.loads(skeleton):
                stale.append(name)
            continue
        settle(name, executed(skeleton), committed)
    for name in stale:
        print(f"stale: {name}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
