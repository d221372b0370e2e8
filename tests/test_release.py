"""Release hygiene: the version lives in oodcalc/_version.py only, and CITATION.cff,
CHANGELOG.md, the built metadata and `oodcalc --version` agree with it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import oodcalc

ROOT = Path(__file__).resolve().parent.parent
PAPER = "Theory on Attention Dynamics for Out-of-Distribution In-Context Learning"


def test_the_version_is_single_sourced():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"], "a second copy of the version"
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "oodcalc._version.__version__"
    # what the build backend will read (statically, as it does when building the wheel)
    from setuptools.config.expand import read_attr
    assert read_attr(attr, root_dir=ROOT) == oodcalc.__version__


def test_version_option_prints_the_package_version(capsys):
    from oodcalc.cli import main
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"oodcalc {oodcalc.__version__}"


def _citation() -> dict:
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    yaml = pytest.importorskip("yaml", reason="PyYAML (not an oodcalc dependency) parses "
                                              "CITATION.cff")
    return yaml.safe_load(text)


def test_citation_cff_parses_and_names_the_version_and_the_paper():
    cff = _citation()
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software" and cff["title"] == "oodcalc"
    assert str(cff["version"]) == oodcalc.__version__
    assert cff["license"] == "MIT"
    assert cff["authors"] == [{"name": "oodcalc developers"}]
    assert "repository-code" not in cff        # no URL is known; none is invented
    paper = cff["preferred-citation"]
    assert paper["title"] == PAPER and paper["year"] == 2026
    assert "NeurIPS 2026" in paper["collection-title"]
    ids = [i["value"] for ref in (paper, *cff["references"]) for i in ref["identifiers"]]
    assert ids and set(ids) == {"arXiv:2609.36448"}
    # no personal names: every author is an entity (name), never given/family names
    for ref in (cff, paper, *cff["references"]):
        assert all(set(a) == {"name"} for a in ref["authors"])


def test_the_package_metadata_names_the_citations_authors_and_no_invented_url():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    cff = _citation()
    assert project["authors"] == cff["authors"] == [{"name": "oodcalc developers"}]
    # a URL in the metadata only once CITATION.cff knows the repository
    assert ("urls" in project) == ("repository-code" in cff)


def test_changelog_names_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert versions[0] == "Unreleased"
    # the newest numbered section is the version the package carries
    assert next(v for v in versions if v != "Unreleased") == oodcalc.__version__
