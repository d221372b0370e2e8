"""Hostile files and environment (issue 29): a FIFO, a device or a malformed .npy given as
input, a symlink planted in a cache, cache and thread variables out of range. Each is
refused with one line naming what is wrong (exit 2), before any work and without hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from oodcalc import limits
from oodcalc.finetune import compiled
from cli_run import one_line, run
from oodcalc.cli import main
from oodcalc.errors import InputError




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
    code = ("import sys; from oodcalc.finetune import compiled\n"
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


@pytest.mark.parametrize("command", [["predict", "--gamma", "1,-0.9"], ["derive", "--list"],
                                     ["sweep", "--gamma", "1,-0.9", "-o", "s.csv"]],
                         ids=" ".join)
def test_numba_threads_refused_by_every_command(command, capsys, monkeypatch, tmp_path):
    """Also a run that would not import Numba (as a bad OODCALC_MAX_MEMORY is refused
    whatever the run): the same command line must not fail only once it grows."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(compiled.THREADS_VARIABLE, "0")
    code, out, err = run(capsys, *command)
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert one_line(err).startswith("oodcalc: error: NUMBA_NUM_THREADS: got '0'; ")
    assert run(capsys, "--version")[0] == 0
    monkeypatch.setenv(compiled.THREADS_VARIABLE, "1")
    assert run(capsys, *command)[0] == 0


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


# --- inputs: only regular files are opened -----------------------------------------------

import contextlib  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402

import numpy as np  # noqa: E402

from oodcalc import geometry, io, sweep  # noqa: E402


@contextlib.contextmanager
def watchdog(seconds: float = 20):
    """Fail (not hang) a call that blocks, e.g. opening a FIFO that no one writes."""
    def hang(*_):   # pytest's failure is no Exception: main() cannot turn it into a line
        pytest.fail(f"blocked for {seconds} s")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def files(tmp_path):
    np.save(tmp_path / "V.npy", np.eye(3, 2))
    np.save(tmp_path / "U.npy", np.eye(3)[:, [0, 2]])
    os.mkfifo(tmp_path / "f.npy")
    os.mkfifo(tmp_path / "f.json")
    (tmp_path / "zero.npy").symlink_to("/dev/zero")
    (tmp_path / "d.npy").mkdir()
    return tmp_path


def test_fifo_as_features_is_refused_without_hanging(files):
    """The reproduction, in its own process with a timeout: it waited forever for a writer
    (feature_shape opened the file before the regular-file check)."""
    out = subprocess.run([sys.executable, "-m", "oodcalc", "predict", "--features",
                          str(files / "f.npy"), "--ood", str(files / "U.npy")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert one_line(out.stderr) == (f"oodcalc: error: --features: got {files / 'f.npy'}; "
                                    "a FIFO (named pipe), not a regular file; oodcalc "
                                    "reads regular files only")


FEATURE_COMMANDS = [["predict"], ["simulate"], ["plot", "losses", "-o", "a.png"],
                    ["plot", "forgetting-curve", "-o", "a.png"],
                    ["plot", "weights", "-o", "a.png"]]


@pytest.mark.parametrize("command", FEATURE_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("which", ["--features", "--ood"])
@pytest.mark.parametrize("special", ["f.npy", "f.json", "zero.npy", "d.npy"])
def test_every_feature_option_refuses_what_is_no_file(command, which, special, files,
                                                      capsys, monkeypatch):
    monkeypatch.chdir(files)
    given = {"--features": "V.npy", "--ood": "U.npy", which: special}
    with watchdog():
        code, out, err = run(capsys, *command, "--features", given["--features"],
                             "--ood", given["--ood"])
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"oodcalc: error: {which}: got {special}; "), line
    assert "not a regular file; oodcalc reads regular files only" in line, line
    assert not (files / "a.png").exists()


@pytest.mark.parametrize("reader", [
    lambda p: sweep.read_result(p),
    lambda p: geometry.load_features(p, "V"),
    lambda p: geometry.from_files(p, p),
    lambda p: io.read_input(p, "x", max_bytes=100),
    lambda p: __import__("oodcalc.depth.record", fromlist=["load"]).load(p),
], ids=["read_result", "load_features", "from_files", "read_input", "depth record"])
@pytest.mark.parametrize("special", ["zero.npy", "f.npy", "d.npy"])
def test_library_readers_refuse_special_files_before_opening(reader, special, files,
                                                             monkeypatch, never_open):
    """A device is never opened, a FIFO never waited on."""
    monkeypatch.chdir(files)
    never_open += [special, "/dev/zero"]
    with watchdog(), pytest.raises(InputError, match="not a regular file"):
        reader(special)


@pytest.fixture
def never_open(monkeypatch):
    """Opening one of the paths in the returned list fails the test at once (a reader that
    opened /dev/zero read it until memory ran out)."""
    import builtins
    guarded: list[str] = []

    def guard(real):
        def opener(path, *args, **kwargs):
            if os.fspath(path) in guarded:
                pytest.fail(f"{path} was opened before it was refused")
            return real(path, *args, **kwargs)
        return opener
    monkeypatch.setattr(os, "open", guard(os.open))
    monkeypatch.setattr(builtins, "open", guard(builtins.open))
    return guarded


def test_read_result_never_opens_a_device(never_open):
    """The reproduction: read_result("/dev/zero") opened the device."""
    never_open.append("/dev/zero")
    with watchdog(), pytest.raises(InputError, match=r"^path: got /dev/zero; a device, not a "
                                   "regular file; oodcalc reads regular files only; expected "
                                   "an .npz written by SweepResult.write$"):
        sweep.read_result("/dev/zero")


def test_fifo_swapped_in_after_the_check_is_not_waited_on(files, monkeypatch):
    """The opener looks (stat) before it opens; a FIFO put there in between is opened
    without waiting and refused from what was opened."""
    target = files / "V.npy"
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(target):
            target.unlink()
            os.mkfifo(target)
        return info
    monkeypatch.setattr(os, "stat", stat_then_swap)
    with watchdog(), pytest.raises(InputError, match="a FIFO .*not a regular file"):
        io.open_input(target, "V")


def test_reading_regular_files_is_unchanged(files, tmp_path):
    """What the guarded opener lets through: every format, its bytes hashed as before."""
    import hashlib
    V = np.eye(3, 2)
    np.save(tmp_path / "F.npy", np.asfortranarray(V[::-1]))
    np.save(tmp_path / "B.npy", V.astype(">f8"))
    (tmp_path / "V.json").write_text(json.dumps(V.tolist()))
    np.savetxt(tmp_path / "V.csv", V, delimiter=",")
    assert geometry.load_features(tmp_path / "F.npy", "V").tolist() == V[::-1].tolist()
    assert geometry.load_features(tmp_path / "B.npy", "V").tolist() == V.tolist()
    assert geometry.load_features(tmp_path / "V.npy", "V").flags.writeable
    for name in ("V.npy", "V.json", "V.csv"):
        g = geometry.from_files(tmp_path / name, tmp_path / name)
        assert g.params["sha256"][0] == hashlib.sha256((tmp_path / name).read_bytes()) \
            .hexdigest()


# --- malformed .npy: refused with the true reason ----------------------------------------

def npy(header: str | bytes, data: bytes = b"", version: tuple[int, int] = (1, 0),
        length: int | None = None) -> bytes:
    raw = header.encode("latin1") if isinstance(header, str) else header
    width = "<H" if version == (1, 0) else "<I"
    return (b"\x93NUMPY" + bytes(version) + struct.pack(width, len(raw) if length is None
                                                        else length) + raw + data)


def header(shape, descr="'<f8'", fortran="False") -> str:
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"
    return text + " " * (-(len(text) + 11) % 64) + "\n"


GOOD = np.eye(3, 2).tobytes()

#: (file bytes, what the one line must say): each was refused for another reason, or
#: accepted, before (see the comments).
MALFORMED = {
    # "holds Python objects" (numpy's max_header_size error mentions allow_pickle)
    "50 MB header": (npy(header("(3, 2)") + " " * (50 << 20), GOOD, (2, 0)),
                     "its header claims 52,428,"),
    "5000-deep shape": (npy(header("(" + "1, " * 5000 + ")"), b"\0" * 8, (2, 0)),
                        "its header claims 15,"),
    "3000-D shape": (npy(header("(" + "1," * 3000 + ")"), b"\0" * 8, (2, 0)),
                     "the array has 3000 dimensions"),
    "nested shape": (npy(header("((3, 2), (1,))")),
                     "its shape must be a tuple of sizes >= 0"),
    "1000 nested parentheses": (npy(header("(" * 1000 + ")" * 1000)),
                                "its header is not numpy's"),
    # "raise the cap to ...": the shape was believed
    "header lies about the data": (npy(header("(3, 100000000000000)"), GOOD),
                                   "the file is truncated: its header claims shape "
                                   "(3, 100000000000000) of float64 (2.13 PiB) but 48 bytes"),
    "header length past the end": (npy(header("(3, 2)"), GOOD, length=9000),
                                   "the file is truncated: its header claims 9,000 bytes but the whole file has 176"),
    # accepted silently
    "10 MB trailing garbage": (npy(header("(3, 2)"), GOOD + b"\xff" * (10 << 20)),
                               "10 MiB of other bytes follow the array its header describes (shape (3, 2) of "
                               "float64); a .npy holds one array and nothing after it"),
    "version 9.9": (npy(header("(3, 2)"), GOOD, (9, 9)), "format version 9.9"),
    "no magic": (b"hello, not a .npy at all" * 4, "not a .npy file"),
    "code in the header": (npy("__import__('os').system('true')" + " " * 83 + "\n", GOOD),
                           "its header is not numpy's"),
    "negative shape": (npy(header("(3, -2)")), "its shape must be a tuple of sizes >= 0"),
    "bad descr": (npy(header("(3, 2)", descr="'<q99'"), GOOD), "its descr is not a numpy"),
    "object dtype": (npy(header("(3, 2)", descr="'|O'"), GOOD),
                     "the .npy holds Python objects"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_npy_is_refused_for_its_true_reason(case, tmp_path, capsys, monkeypatch):
    content, reason = MALFORMED[case]
    (tmp_path / "bad.npy").write_bytes(content)
    np.save(tmp_path / "U.npy", np.eye(3, 2))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "predict", "--features", "bad.npy", "--ood", "U.npy")
    line = one_line(err)
    assert code == 2 and line.startswith("oodcalc: error: --features: got bad.npy; "), line
    assert reason in line, line
    with pytest.raises(InputError, match="^V: got .*" + reason.replace("(", r"\(")
                       .replace(")", r"\)")):
        geometry.load_features(tmp_path / "bad.npy", "V")


def test_a_valid_npy_of_every_version_is_read(tmp_path):
    """Perturbation of the cases above: the same header and data, well formed, pass."""
    for version in ((1, 0), (2, 0), (3, 0)):
        (tmp_path / "v.npy").write_bytes(npy(header("(3, 2)"), GOOD, version))
        assert geometry.load_features(tmp_path / "v.npy", "V").tolist() == \
            np.eye(3, 2).tolist()
        assert geometry.feature_shape(tmp_path / "v.npy") == (3, 2)
    (tmp_path / "v.npy").write_bytes(npy(header("(3, 2)"), GOOD + b"\0"))   # one byte more
    assert geometry.feature_shape(tmp_path / "v.npy") is None


# --- caches never write through a symlink ------------------------------------------------

def depth_cache(kind, directory):
    from fuzz_cases import depth_record
    from oodcalc.depth import Cache, DepthConfig
    from oodcalc.depth.ladder import LadderCache
    cache = Cache(directory) if kind == "depth" else LadderCache(directory)
    config = DepthConfig() if kind == "depth" else DepthConfig(arch="attention", layers=1)
    parameters = config.run_parameters(0, 0.0)
    record = depth_record(parameters)
    z = [[1.0, -1.0], [-1.0, 1.0]]
    record["pretrain"]["logits"] = record["finetune"]["logits"] = [z]
    return cache, parameters, record


@pytest.mark.parametrize("kind", ["depth", "ladder"])
@pytest.mark.parametrize("target", ["precious.txt", "missing.txt"])
def test_symlink_planted_as_cache_entry_is_replaced_not_written_through(kind, target,
                                                                        tmp_path):
    """The run wrote its record over the link's target (any file the user can write);
    now the link is replaced by the record and the target is left as it was."""
    cache_dir, outside = tmp_path / "cache", tmp_path / target
    cache, parameters, record = depth_cache(kind, cache_dir)
    if target == "precious.txt":
        outside.write_text("the user's file")
    entry = cache.path(parameters)
    entry.symlink_to(outside)
    assert cache.load(parameters) is None           # nothing (or nothing valid) behind it
    cache.store(record)
    assert not entry.is_symlink() and entry.is_file()
    assert cache.load(parameters) == record
    if target == "precious.txt":
        assert outside.read_text() == "the user's file"
    else:
        assert not outside.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == [entry.name]   # no temporary left


def test_a_valid_record_behind_a_link_is_read_and_replaced_by_a_copy(tmp_path):
    """Perturbation of the case above: the link is followed for reading (what is behind it
    is checked as any entry), and replacing it writes the same record, not the target."""
    cache, parameters, record = depth_cache("depth", tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere.json"
    cache_copy = tmp_path / "cache2"
    other, _, _ = depth_cache("depth", cache_copy)
    other.store(record)
    other.path(parameters).rename(elsewhere)
    cache.path(parameters).symlink_to(elsewhere)
    assert cache.load(parameters) == record
    before = elsewhere.stat().st_mtime_ns
    cache.store(record)
    assert not cache.path(parameters).is_symlink()
    assert elsewhere.stat().st_mtime_ns == before


def test_symlink_at_the_temporary_name_is_not_written_through(tmp_path):
    """write_atomic's temporary file is created new (O_EXCL | O_NOFOLLOW): a link planted at
    its name (the PID is guessable) is removed, its target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out.txt"
    (tmp_path / f".out.txt.{os.getpid()}{io.PARTIAL}").symlink_to(victim)
    io.write_text_atomic(out, "result")
    assert out.read_text() == "result" and victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "victim.txt"]


def test_output_symlinks_are_still_followed(tmp_path):
    """Outputs (not caches) keep shell redirection's rule: the link's target is written."""
    target = tmp_path / "target.txt"
    (tmp_path / "link.txt").symlink_to(target)
    io.write_text_atomic(tmp_path / "link.txt", "x")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "x"


# --- XDG_CACHE_HOME ----------------------------------------------------------------------

@pytest.mark.parametrize("command", [["reproduce", "depth", "--quick"],
                                     ["reproduce", "ladder", "--quick"],
                                     ["reproduce", "real", "--quick"]], ids=" ".join)
def test_xdg_cache_home_that_is_a_file_is_named_not_the_option(command, tmp_path, capsys,
                                                               monkeypatch):
    """Was '--cache-dir: got .../afile/oodcalc/depth', an option the user never gave."""
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "afile"))
    code, out, err = run(capsys, *command)
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"oodcalc: error: XDG_CACHE_HOME: got '{tmp_path / 'afile'}'; "
                           f"{tmp_path / 'afile'} is a file, not a directory, so the default "
                           f"cache directory {tmp_path / 'afile' / 'oodcalc'}"), line
    assert line.endswith("point XDG_CACHE_HOME at a directory, or give --cache-dir DIR"), line
    # the option given instead is used (and named when it is the one at fault)
    code, _, err = run(capsys, *command, "--cache-dir", str(tmp_path / "afile"))
    assert one_line(err).startswith("oodcalc: error: --cache-dir: got ")


@pytest.mark.parametrize("value", ["relative/cache", "", "."])
def test_relative_xdg_cache_home_is_ignored(value, tmp_path, monkeypatch):
    """The XDG spec: a relative path is invalid and ignored; ~/.cache is used (it was used
    relative to the working directory)."""
    from oodcalc.depth import Cache
    from oodcalc.depth.ladder import LadderCache
    from oodcalc.real import default_cache_dir
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home" / ".cache" / "oodcalc"
    assert io.cache_home() == (tmp_path / "home" / ".cache", None)
    assert Cache().directory == home / "depth" and (home / "depth").is_dir()
    assert LadderCache().directory == home / "ladder"
    assert default_cache_dir() == home
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]   # nothing made here
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))     # an absolute one is used
    assert Cache().directory == tmp_path / "xdg" / "oodcalc" / "depth"


def test_unusable_home_cache_names_the_home_directory(tmp_path, capsys, monkeypatch):
    (tmp_path / ".cache").write_text("x")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    code, _, err = run(capsys, "reproduce", "ladder", "--quick")
    line = one_line(err)
    assert code == 2 and line.startswith(f"oodcalc: error: --cache-dir: got nothing; "
                                         f"{tmp_path / '.cache'} is a file"), line
    assert "it is under the home directory" in line and line.endswith("give --cache-dir DIR")


def test_the_fuzz_sees_a_cache_writing_through_its_link(tmp_path, monkeypatch):
    """The fuzz fixture dcache-link (a link to a file outside the cache): the store replaces
    the link, which the fuzz's change check accepts; writing through it, as before, is
    caught as a change outside the cache."""
    import fuzz_cases as fc
    from oodcalc.depth import Cache
    fc.make_outputs(tmp_path)
    name, parameters = fc.depth_entry()
    record = fc.depth_record(parameters)
    before = fc.snapshot(tmp_path)
    Cache(tmp_path / "dcache-link").store(record)
    assert fc.unexpected_changes(before, fc.snapshot(tmp_path), ["dcache-link"], tmp_path) == []
    assert (tmp_path / "dcache-link-target.json").read_text() != json.dumps(record)
    (tmp_path / "dcache-link" / name).unlink()
    (tmp_path / "dcache-link" / name).symlink_to("../dcache-link-target.json")
    before = fc.snapshot(tmp_path)
    io.write_text_atomic(tmp_path / "dcache-link" / name, json.dumps(record))   # through it
    assert fc.unexpected_changes(before, fc.snapshot(tmp_path), ["dcache-link"],
                                 tmp_path) == ["dcache-link-target.json"]


def test_derivations_check_never_waits_on_a_fifo(tmp_path, capsys, monkeypatch):
    """python -m oodcalc.symbolic.documents --check reads the generated files of --dir:
    a FIFO at one's name is refused in one line (it waited for a writer)."""
    from oodcalc.symbolic import documents
    monkeypatch.setattr(documents, "render_all", lambda: {"README.md": "x"})   # no sympy
    (tmp_path / "claim1-a.md").write_text("x")
    assert documents.main(["--check", "--dir", str(tmp_path)]) == 1    # stale: it can fail
    capsys.readouterr()
    (tmp_path / "claim1-a.md").unlink()
    os.mkfifo(tmp_path / "README.md")
    with watchdog(120):
        assert documents.main(["--check", "--dir", str(tmp_path)]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"python -m oodcalc.symbolic.documents: error: --dir: got "
                    f"{tmp_path / 'README.md'}; a FIFO (named pipe), not a regular file; "
                    "oodcalc reads regular files only"), line
