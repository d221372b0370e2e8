"""Hostile files and environment (issue 29): a FIFO, a device or a malformed .npy given as
input, a symlink planted in a cache, cache and thread variables out of range. Each is
refused with one line naming what is wrong (exit 2), before any work and without hanging."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from oodcalc import compiled, limits
from oodcalc.cli import main
from oodcalc.errors import InputError


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oodcalc: error: "), err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


# --- NUMBA_NUM_THREADS -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "1000000", "abc", "1.5", "٣"])
def test_numba_threads_out_of_range_is_refused_by_name(value, monkeypatch):
    """0 was an internal error inside Numba, 1,000,000 a segmentation fault (exit 139)."""
    monkeypatch.setenv(compiled.THREADS_VARIABLE, value)
    with pytest.raises(InputError, match=r"^NUMBA_NUM_THREADS: got .*expected an integer "
                       r"from 1 to \d+ \(this machine's cores\)"):
        compiled.threads_variable()
    with pytest.raises(InputError):
        compiled.expected_threads()


@pytest.mark.parametrize("value, threads", [("1", 1), (" 1 ", 1), ("", None)])
def test_numba_threads_in_range_pass(value, threads, monkeypatch):
    monkeypatch.setenv(compiled.THREADS_VARIABLE, value)
    assert compiled.threads_variable() == threads
    assert compiled.expected_threads() >= 1
    monkeypatch.setenv(compiled.THREADS_VARIABLE, str(os.cpu_count()))   # the largest
    assert compiled.threads_variable() == os.cpu_count()
    monkeypatch.setenv(compiled.THREADS_VARIABLE, str(os.cpu_count() + 1))
    with pytest.raises(InputError):
        compiled.threads_variable()


def test_numba_threads_refused_before_numba_is_imported():
    """In a fresh process: the refusal comes first, Numba is never imported."""
    pytest.importorskip("numba")
    code = ("import sys; from oodcalc import compiled\n"
            "try:\n    compiled.numba()\nexcept Exception as err:\n"
            "    print(type(err).__name__, 'numba' in sys.modules)\n")
    env = {**os.environ, "NUMBA_NUM_THREADS": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.stdout.strip() == "InputError False", out.stderr


def test_numba_threads_on_the_command_line(capsys, monkeypatch):
    """The reproduction (--ft-steps 3000000 runs the compiled kernel): one line, exit 2."""
    monkeypatch.setenv(compiled.THREADS_VARIABLE, "1000000")
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9", "--ft-steps", "3000000")
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith("oodcalc: error: NUMBA_NUM_THREADS: got '1000000'; expected an "
                           "integer from 1 to"), line


# --- OODCALC_MAX_MEMORY -------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "0K", "0.4", "0e3"])
def test_memory_cap_of_zero_is_refused(value, capsys, monkeypatch):
    """Was a 0-byte cap that blamed --gamma ("give fewer --gamma values" for two)."""
    monkeypatch.setenv(limits.MEMORY_VARIABLE, value)
    code, out, err = run(capsys, "predict", "--gamma", "1,-0.9")
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"oodcalc: error: OODCALC_MAX_MEMORY: got '{value}'; a cap under "
                           "1 byte refuses every run; expected a positive size"), line


def test_smallest_memory_cap_is_accepted(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "1")
    assert limits.memory_cap()[0] == 1


def test_memory_refusal_does_not_advise_what_is_already_smallest(capsys, monkeypatch):
    """Two γ values are the fewest: only the cap can change; three may be fewer."""
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "1K")
    _, _, err = run(capsys, "predict", "--gamma", "1,-0.9")
    line = one_line(err)
    assert "give fewer --gamma values" not in line and "; raise the cap: " in line, line
    _, _, err = run(capsys, "predict", "--gamma", "1,-0.9,0.5")
    assert "give fewer --gamma values, or raise the cap: " in one_line(err)
