"""`pip install .` gives a wheel that works anywhere: built from the files a release
holds, installed with its `plot` extra into a fresh virtual environment, and every
command run from a directory outside the source tree.

This is the slowest test (about a minute: the build backend and the dependencies come
through pip, from its cache when it has them); `pytest -m "not slow"` leaves it out while
iterating. CI runs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASE_FILES = ["pyproject.toml", "README.md", "LICENSE", "oodcalc"]
OUTSIDE = re.compile(r"shared[/]|MODEL[.]md|seeds[/]")   # as in test_docs.py

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, bin directory of a fresh environment where the wheel is installed)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"          # only what a release holds: no tests, no tools
    source.mkdir()
    for name in RELEASE_FILES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name)
    for junk in source.rglob("__pycache__"):
        shutil.rmtree(junk)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = run([*pip, "wheel", "-v", "--no-deps", "-w", str(base / "dist"), str(source)], base)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "SetuptoolsDeprecationWarning" not in built.stdout + built.stderr
    wheel = next((base / "dist").glob("oodcalc-*.whl"))

    venv = base / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base)
    assert made.returncode == 0, made.stderr
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    done = run([*pip, "--python", str(python), "install", "--quiet", f"{wheel}[plot]"], base)
    assert done.returncode == 0, done.stderr[-3000:]
    return wheel, python.parent


def test_the_wheel_holds_the_package_data_and_the_license(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "oodcalc/paper_figures.toml" in names
    assert "oodcalc/paper_protocols.json" in names      # reproduce reads it
    for asset in ("page.html", "page.css", "dynamics.js", "explorer.js"):   # oodcalc explore
        assert f"oodcalc/explore/{asset}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "tools/", "benchmarks/")) for n in names)
    assert "License-Expression: MIT" in metadata
    assert not OUTSIDE.search(metadata), "the package description refers outside the repository"


COMMANDS = [
    (["predict", "--gamma", "1,-0.9"], "F = L_tr(after)"),
    (["derive", "--list"], "forgetting-criterion"),   # a key: never wrapped
    (["reproduce"], "arXiv 2609.36448"),
    (["verify", "--quick", "--claim", "2"], "PASS"),
    (["simulate", "--gamma", "1,-0.9"], "T1"),
    (["sweep", "--gamma", "1,-0.9", "-o", "sweep.csv"], None),
    (["plot", "losses", "--gamma", "1,-0.9", "-o", "losses.png"], None),
    (["explore", "--grid", "5", "--k3-grid", "5", "--gamma1", "0.5", "--overlap-grid", "5",
      "-o", "e.html"], None),
]


@pytest.mark.parametrize("args, expected", COMMANDS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_every_command_runs_outside_the_source_tree(installed, tmp_path, args, expected):
    _, bin_dir = installed
    done = run([str(bin_dir / "oodcalc"), *args], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    if expected is not None:
        assert expected in done.stdout
    if "-o" in args:
        target = tmp_path / args[args.index("-o") + 1]
        assert target.stat().st_size > 0


def test_the_installed_package_is_the_wheels(installed, tmp_path):
    _, bin_dir = installed
    done = run([str(bin_dir / "python"), "-c", "import oodcalc; print(oodcalc.__file__)"],
               tmp_path)
    assert done.returncode == 0, done.stderr
    location = Path(done.stdout.strip()).resolve()
    assert bin_dir.parent.resolve() in location.parents
    assert ROOT not in location.parents
