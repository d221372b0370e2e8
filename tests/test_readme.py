"""Generated blocks in the README stay true: regenerate and compare."""

import re
from pathlib import Path

from oodcalc.cli import main

README = Path(__file__).parent.parent / "README.md"


def block(name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", README.read_text(), re.S)
    assert match, f"README has no {name} block"
    return match.group(1).strip()


def test_reproduce_block_is_current(capsys):
    assert main(["reproduce", "synthetic", "-f", "markdown"]) == 0
    assert block("reproduce") == capsys.readouterr().out.strip(), (
        "README is stale: paste the output of `oodcalc reproduce synthetic -f markdown` into its "
        "reproduce block")


def test_claims_block_is_current():
    from oodcalc.claims import markdown_table
    assert block("claims") == markdown_table(), (
        "README is stale: paste `python -c \"import oodcalc.claims as c; "
        "print(c.markdown_table())\"` into its claims block")
