"""Build the documentation site, then check every link inside it, offline.

    python tools/build_docs.py                 # -> docs/_build/html/index.html
    python tools/build_docs.py -o /tmp/site    # another folder

Needs the ``docs`` extra (pip install -e ".[docs]"). Step 1 is
``python -m sphinx -W --keep-going -n -b html docs OUT``: any warning fails it, among them a
link to a missing page or heading and a cell of a tutorial that raises (docs/conf.py
executes every notebook afresh). Step 2 reads the built HTML and fails on a relative
``href``/``src`` whose file is not in the site, or whose ``#fragment`` names no element of
that page: what a reader would click on and find missing, whichever source made the link.
External links (http, https, mailto) are not fetched: the build works without a network.
Exit 0: built and every internal link resolves; 1: either step failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SPHINX = ["-W", "--keep-going", "-n", "-b", "html"]


class _Page(HTMLParser):
    """The ids of one HTML page and the links it makes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            elif name == "href" and tag in ("a", "link") or name == "src" and tag in (
                    "img", "script", "iframe", "source"):
                self.links.append(value)


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(site: Path) -> list[str]:
    """Every relative link of the built ``site`` that resolves to nothing, one line each."""
    site = site.resolve()
    # the pages; _static holds the theme's files (templates among them), not pages
    pages = {path: _read(path) for path in sorted(site.rglob("*.html"))
             if path.relative_to(site).parts[0] not in ("_static", "_sources")}
    problems = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not (parts.path or parts.fragment):
                continue                                  # external, or a bare "#"
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = path.relative_to(site)
            if not target.is_relative_to(site):
                problems.append(f"{where}: {link} leaves the site")
            elif not target.exists():
                problems.append(f"{where}: {link} -> no file {target.relative_to(site)}")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _read(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: {link} -> {target.relative_to(site)} has no "
                                    f"element id={unquote(parts.fragment)!r}")
    return problems


def build(out: Path) -> int:
    """Sphinx with every warning an error, then the link check; the exit code."""
    done = subprocess.run([sys.executable, "-m", "sphinx", *SPHINX, str(DOCS), str(out)])
    if done.returncode != 0:
        print(f"build_docs: sphinx failed (exit {done.returncode}): see its warnings above",
              file=sys.stderr)
        return 1
    problems = broken_links(out)
    for problem in problems:
        print(f"build_docs: broken link: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"build_docs: built {out / 'index.html'}; every internal link resolves")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=DOCS / "_build" / "html",
                        help="output folder (default docs/_build/html)")
    args = parser.parse_args(argv)
    return build(args.out)


if __name__ == "__main__":
    sys.exit(main())
