"""Running the command line in-process, as the tests of its refusals do."""

from __future__ import annotations

from oodcalc.cli import main


def run(capsys, *args):
    """(exit code, stdout, stderr) of ``oodcalc ARGS``."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The one line a refusal prints, checked to be one line and no internal error."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oodcalc: error: "), err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]
