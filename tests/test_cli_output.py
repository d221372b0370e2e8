"""What a reader sees of the command line, at 80 and 100 columns and piped: help that
wraps where the width ends (not where a docstring broke its lines), the simulators under
their own names, readable option help, no "-0", no "16–16", a missing extra named as
missing, and no trailing spaces in piped output."""

from __future__ import annotations

import importlib.util
import re

import pytest

from oodcalc.cli import main, root_command, unwrap
from oodcalc.console import StripTrailing

WIDTHS = ["80", "100", None]          # None: piped, $COLUMNS unset


def run(capsys, monkeypatch, columns, *argv) -> tuple[int, str, str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def walk(command, path="oodcalc"):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from walk(sub, f"{path} {name}")


def test_every_help_text_is_paragraphs_without_hard_line_breaks():
    for path, command in walk(root_command()):
        texts = [command.help, command.short_help] + [getattr(p, "help", None)
                                                     for p in command.params]
        for text in filter(None, texts):
            for paragraph in text.split("\n\n"):
                assert "\n" not in paragraph, (path, paragraph)


def test_unwrap_joins_lines_and_keeps_paragraphs():
    assert unwrap("one\ntwo  three\n\nfour\n") == "one two three\n\nfour"
    assert unwrap(None) is None


def panel_entries(text: str, panel: str) -> list[list[str]]:
    """The lines of each entry of a rich help panel (``╭─ Commands ─…``): per entry, its
    description's lines (the first line's name cut off)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {panel} "))
    entries, column = [], None
    for line in lines[start + 1:]:
        if line.startswith("╰"):
            break
        inner = line.strip("│").rstrip()
        body = inner[1:]
        name = re.match(r"(\S+(?: \S+)*?)(\s{2,})", body)
        if body and not body[0].isspace() and name:
            column = name.end() + 1
            entries.append([inner[column:].strip()])
        elif entries and inner[column:].strip():
            entries[-1].append(inner[column:].strip())
    return entries, column


@pytest.mark.parametrize("columns", ["80", "100"])
@pytest.mark.parametrize("argv", [["plot", "--help"], ["reproduce", "--help"], ["--help"]])
def test_a_help_panel_breaks_a_description_only_where_the_width_ends(capsys, monkeypatch,
                                                                      columns, argv):
    """`plot --help` at 100 columns broke "the corrected / condition" and "with the /
    theory's" where the docstrings had their line breaks, leaving half-empty lines."""
    code, out, _ = run(capsys, monkeypatch, columns, *argv)
    assert code == 0
    entries, _ = panel_entries(out, "Commands")
    room = max(len(line) for entry in entries for line in entry)   # the column's width
    assert entries and room > 30
    for entry in entries:
        for line, following in zip(entry, entry[1:]):
            if line.startswith("[default"):
                continue
            assert len(line) + 1 + len(following.split()[0]) > room, (line, following)


def test_verify_help_names_the_simulators_as_everything_else_does(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, "100", "verify", "--help")
    assert code == 0
    text = " ".join(out.replace("│", " ").split())
    assert "population simulator" in text and "prompts simulator" in text
    assert not re.search(r"simulator [ab]\b", text)


@pytest.mark.parametrize("columns", ["80", "100"])
def test_max_steps_help_is_short_and_says_its_range(capsys, monkeypatch, columns):
    code, out, _ = run(capsys, monkeypatch, columns, "predict", "--help")
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "--max-steps" in line)
    entry = []
    for line in lines[at:]:
        if entry and re.match(r"│ --", line):
            break
        entry.append(line)
    text = " ".join(" ".join(entry).replace("│", " ").split())
    assert "up to 10^12" in text and "1,000,000" in text and "up to 10^9" in text
    assert "[default: (auto)]" in text and "JSON" not in text
    assert len(entry) <= 4, entry


@pytest.mark.parametrize("columns", WIDTHS)
def test_no_negative_zero_at_a_coarse_eps(capsys, monkeypatch, columns):
    """--eps 0.5 holds at Q = 0 (α* = 0): the β threshold printed "−α*/(K−1) = -0"."""
    code, out, _ = run(capsys, monkeypatch, columns, "predict", "--gamma", "1,-0.9",
                       "--eps", "0.5")
    assert code == 0
    assert "−α*/(K−1) = 0" in out
    assert not re.search(r"(?<![\w.])[-−]0(?![\w.])", out), out


def test_a_range_of_equal_values_is_one_value():
    from oodcalc.claims.claim9_step_size import span
    assert span([16, 16]) == "16"
    assert span([4, 16, 8]) == "4–16"


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None
                    and importlib.util.find_spec("transformers") is not None,
                    reason="the real extra is installed: nothing is missing")
def test_a_missing_real_extra_is_named_as_missing(capsys, monkeypatch):
    code, _, err = run(capsys, monkeypatch, None, "reproduce", "real", "--quick")
    assert code == 2
    line = err.strip()
    assert "\n" not in line and "got not installed" not in line
    assert "needs torch and transformers, not installed here" in line and "pip install" in line


PIPED_COMMANDS = [
    ["predict", "--gamma", "1,-0.9"], ["predict", "--gamma=-0.3,0.95,0.018471"],
    ["reproduce"], ["derive", "--list"], ["plot", "--help"], ["verify", "--help"],
    ["predict", "--help"],
]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("argv", PIPED_COMMANDS, ids=lambda a: " ".join(a)[:40])
def test_output_that_is_not_a_terminal_has_no_trailing_spaces(capsys, monkeypatch, columns,
                                                              argv):
    code, out, _ = run(capsys, monkeypatch, columns, *argv)
    assert code == 0 and out.strip()
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]
    if columns is not None and argv[0] != "derive":   # derive's prose: another change's
        from rich.cells import cell_len        # what a terminal shows: v̄ is one cell
        assert max(map(cell_len, out.splitlines())) <= int(columns)


def test_strip_trailing_keeps_inner_spaces_across_writes():
    import io
    sink = io.StringIO()
    stream = StripTrailing(sink)
    for piece in ["a  ", " b", "   \n", "c ", "", "\n  \n", "end   "]:
        stream.write(piece)
    assert sink.getvalue() == "a   b\nc\n\nend"
