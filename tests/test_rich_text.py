"""Text that rich prints is shown as written: a square bracket in a claim's prose, a
condition, a title or a progress label is no style tag. (rich read 8e's
"[t, t + φ(H)(m_t − m_0)]" as markup and dropped it from `oodcalc derive --list`.)"""

from __future__ import annotations

import dataclasses
from io import StringIO

from rich.console import Console

import oodcalc as oc

#: what rich would take for markup: a style tag, a closing tag, a bracket opening on a letter
MARKUP_LIKE = ("[t, t + φ(H)(m_t − m_0)]", "[bold]bold?[/bold]", "[red]x[/]")


def console(width: int = 400) -> Console:
    return Console(file=StringIO(), width=width, highlight=False, color_system=None)


def shown(text: str, out: str) -> bool:
    return all(piece in out for piece in MARKUP_LIKE) and text in out


def test_derive_text_shows_prose_as_written():
    from oodcalc.claims import get_claim
    from oodcalc.symbolic.core import EXPLICIT, Recorder
    from oodcalc.symbolic.render import print_text
    text = "lies in " + " and ".join(MARKUP_LIKE)
    r = Recorder()
    r.step("step: " + text)
    r.check("c", "check: " + text, EXPLICIT, True, detail="on " + text, ks=(2,))
    r.finding("finding: " + text)
    d = r.result("8e", "title " + text, "scope " + text)
    out = console()
    print_text(d, get_claim("8e"), out)
    printed = out.file.getvalue()
    for where in ("step: ", "check: ", "on ", "finding: ", "title ", "scope "):
        assert shown(where + text, printed), where


def test_predict_shows_conditions_and_trends_as_written():
    from oodcalc.cli.render import render_prediction
    report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    text = " ".join(MARKUP_LIKE)
    features = tuple(dataclasses.replace(f, condition=text, trend=text)
                     for f in report.forgetting)
    report = dataclasses.replace(report, forgetting=features)
    out = console(width=2000)
    render_prediction(report, out)
    printed = out.file.getvalue()
    assert shown(text, printed) and "[t, t + φ" in printed


def test_verify_shows_titles_and_findings_as_written(quick_ledger):
    from oodcalc.cli.verify import render
    text = " ".join(MARKUP_LIKE)
    rows = [dataclasses.replace(r, title=f"{r.title} {text}", findings=[text])
            for r in quick_ledger.rows[:2]]
    out = console(width=2000)
    render(dataclasses.replace(quick_ledger, rows=rows), False, console=out)
    printed = out.file.getvalue()
    assert shown(text, printed) and printed.count(text) >= 4     # 2 titles, 2 findings


def test_progress_labels_are_shown_as_written():
    from oodcalc.cli.progress import count_progress
    terminal = Console(file=StringIO(), force_terminal=True, width=200, color_system=None)
    label = " ".join(MARKUP_LIKE)
    with count_progress("derive", console=terminal) as progress:
        progress(1, 2, label)
    assert label in terminal.file.getvalue()
