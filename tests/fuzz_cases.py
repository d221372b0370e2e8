"""The command table the CLI fuzzers draw from: one entry per command, listing its options
and the pool of values (valid and hostile) each option takes.

Used by ``tests/test_fuzz_cli.py`` (hypothesis, in-process, in CI) and by
``tools/fuzz_cli.py`` (a larger campaign, one forked process per case, with a memory cap
and a time limit). A new command is one more :class:`Entry` in ``ENTRIES``.

Values are text, as a shell would pass them. Placeholders: ``{in}`` is a directory of
input files made by :func:`make_inputs` (valid and hostile feature files); output paths
are relative to the case's own working directory, laid out by :func:`make_outputs`
(an existing file, a directory, a symlink, a FIFO, a device, a file to write "under").
Values in a pool's ``slow`` list make a valid run take seconds or more (or need the memory
caps to refuse them); the CI test leaves them out, the campaign uses them.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import random
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Pool:
    """Values for one option: ``valid`` ones, ``hostile`` ones, and ``slow`` valid ones
    (a valid run takes seconds or more, or needs the caps to refuse it; CI leaves them out)."""

    valid: tuple[str, ...]
    hostile: tuple[str, ...] = ()
    slow: tuple[str, ...] = ()

    def values(self, slow: bool) -> tuple[str, ...]:
        return self.valid + self.hostile + (self.slow if slow else ())

    def draw(self, rng: random.Random, slow: bool) -> str:
        """A valid value three times in four (a slow one a third of those, if allowed)."""
        good = self.valid + (self.slow * max(1, len(self.valid) // max(1, 2 * len(self.slow)))
                             if slow and self.slow else ())
        if self.hostile and (not good or rng.random() < 0.25):
            return rng.choice(self.hostile)
        return rng.choice(good)


JUNK = ("", " ", "abc", "nan", "inf", "-inf", "1e400", "-1e400", "99999999999999999999",
        "-99999999999999999999", "0x10", "1_0", "٣", "--", "None", "true", "1,2", "pi/0",
        "0/0", "+", "-", "1e", "\x00", "é" * 3, "-0")

EPS = Pool(("0.01", "0.02", "0.05", "0.1", "0.2", "0.3"), JUNK + ("0", "-0.01", "1e-320"),
           slow=("1e-3", "1e-6", "1e-12", "1e-30", "1", "10"))
ETA = Pool(("0.1", "0.2", "0.5", "1", "0.05"), JUNK + ("0", "-0.1", "1e308"),
           slow=("2", "1e-3", "1e-6", "50", "100", "1000", "1e6", "1e300"))
K_INT = Pool(("2", "3", "4", "5", "8"), JUNK + ("1", "0", "-2", "2.0", "1e3", " 3", "2 "),
             slow=("64", "100", "256", "1024", "5000", "100000", "1000000000"))
D_INT = Pool(("8", "16", "10"), JUNK + ("2", "1", "0", "-1"),
             slow=("1000", "100000", "1000000000"))
STEPS = Pool(("1000", "1000000", "100000"), JUNK + ("0", "-1", "1e6", "1", "5"),
             slow=("100000000", "1000000000000"))
TOL = Pool(("1e-6", "1e-3", "1e-9"), JUNK + ("0", "1e-20", "-1", "1"))
PRECISION = Pool(("15", "30", "50"), JUNK + ("0", "1", "-5", "2.5"), slow=("5000", "1000000"))
GAMMA = Pool(("1,-0.9", "0.5,0.5,-0.2", "1,0", "-0.7,0.9,0.95", "0,0", "1,1", "-1,-1",
              "-0,0", " 1 , -0.9 ", "1,-0.9,0.3,0.2", "0.9999999999999999,1", "1e-320,0"),
             ("0.5", "2,0", "1,nan", "1,inf", "1,,0", ",", "", "1,-0.9,", "1;0", "a,b",
              "1" * 400 + ",0", "1e-400,0.5", "0.5,-1e-999"),
             slow=(",".join(["0.5"] * 64), ",".join(["0.3"] * 300), ",".join(["0.1"] * 5000)))
THETA = Pool(("pi/6", "0.5236", "-2pi/3", "2pi", "π/3", "0", "pi/2", "1e308", "pi"),
             JUNK + ("pi/", "pi*pi", "3pi/0.0", "pi/1e-320"))
SWEEP_GAMMA = Pool(("1,-0.9", "-1:1:5,-1:1:5", "0:1:3:log,0.5", "1:2:3,0", "0:1:5,0:1:3,0:1:2",
                    "0.5,0.5,-0.2", "-1:1:11,0.3"),
                   ("0:1:0,0.5", "a:b:c,0", ":::,0", "-1:1:3", "0:1:nan,0", "0:1:-3,0",
                    "0:1:2.5,0", "0:1:1e3,0", "1,0.5,", "0:1,0", "2,0", "",
                    "1e-400,0.5"),
                   slow=(",".join(["0.5"] * 40), "-1:1:201,-1:1:201",
                         "0:1:99999999999999999999,0.5",
                         "0:1:1000000000,0.5", "-1:1:2000,-1:1:2000"))
SWEEP_THETA = Pool(("0:pi/2:5", "0,pi/6", "0:pi:3", "pi/6", "0:1:3"),
                   ("pi/0", "0:1:0", "a:b:3", "0:1:3:log", ""),
                   slow=("0:1:200000", "0:1:99999999999999999999", "0:1:1000000000"))
SWEEP_K = Pool(("2", "2,4", "3", "2:4:2"), ("1", "0", "abc", "2,", "99999999999999999999"),
               slow=("2,4,8", "100", "1000", "100000"))
SWEEP_PROTO = Pool(("0.01", "0.02,0.05", "1e-3:1e-1:3:log", "0.1:0.2:2"),
                   ("0:1:3:log", "-1", "nan", "", "0.1,,0.2"),
                   slow=("1e-12", "1e-6", "1e-3:1e-1:500:log"))
SMALL_INT = Pool(("1", "2", "3", "8", "16"), JUNK + ("0", "-1"),
                 slow=("100000", "1000000", "24"))
GRID = Pool(("3", "4", "5", "11"), JUNK + ("2", "0", "-1"), slow=("201", "1000", "3000"))
PROMPTS = Pool((), JUNK + ("0", "-1"), slow=("2", "8", "32", "100000", "1000000"))
FORMAT_SWEEP = Pool(("csv", "npz", "CSV"), ("png", "json", ""))
FORMAT_REPRO = Pool(("table", "markdown", "json", "MARKDOWN"), ("latex", ""))
FORMAT_DERIVE = Pool(("text", "markdown", "latex", "TEXT"), ("html", ""))
SIMULATOR = Pool(("population", "prompts"), ("theory", ""))
STOP = Pool(("population", "heldout"), ("never", ""))
CLAIM = Pool((), ("0", "14", "-1", "abc", "", "99999999999999999999", "conservation ", "1.0"),
             slow=("1", "2", "3", "conservation", "9", "step-size", "10", "interventions"))
SCHEDULER = Pool((), ("abc", "", "tcp://", "tcp://[::1", "unix://"))

#: Output paths relative to the case directory (see make_outputs).
OUT_PLOT = Pool(("out.png", "out.svg", "out.pdf", "out.PNG", "existing.png", "adir/out.png",
                 "link.png"),
                ("out.txt", "out", "", ".", "adir", "adir/", "missing/out.png", "afile/out.png",
                 "a" * 300 + ".png", "/proc/version", "dangling.png", "fifo.png",
                 "device.png", "rodir/out.png", "-", "out.png/", " ", "\x00.png"))
OUT_HTML = Pool(("out.html", "out.htm", "out.HTML", "adir/out.html"),
                ("out.png", "out", "", ".", "adir", "adir/", "missing/out.html",
                 "afile/out.html", "a" * 300 + ".html", "/proc/version", "fifo.csv",
                 "rodir/out.html", "\x00.html"))
RHO_MAX = Pool(("0", "0.3", "0.5", "-0"), JUNK + ("1", "-0.1", "1.5", "0.999999"),
               slow=("0.9", "0.95", "0.99"))
GAMMA1 = Pool(("1", "0.5", "1,0.5", "-0.7", "0", "-0", " 0.25 "),
              JUNK + ("1.5", "-1.01", "2,0", ",", "1,", "0.5;1"))
OUT_SWEEP = Pool(("out.csv", "out.npz", "-", "existing.csv", "out.CSV", "link.csv"),
                 ("out.png", "out", "", ".", "adir", "missing/out.csv", "afile/out.csv",
                  "a" * 300 + ".csv", "/proc/version", "dangling.csv", "fifo.csv",
                  "device.csv", "rodir/out.csv", "\x00.csv"))
OUT_TEXT = Pool(("out.md", "out.json", "out.txt", "existing.csv", "link.csv"),
                ("", ".", "adir", "missing/out.md", "afile/out.md", "a" * 300 + ".md",
                 "/proc/version", "dangling.csv", "fifo.csv", "device.csv", "rodir/out.md"))
OUT_DIR = Pool((), ("", ".", "afile", "afile/sub", "existing.csv", "/proc", "/proc/sys",
                    "fifo.csv", "device.csv", "a" * 300, "link.csv"),
               slow=("newdir", "adir"))
FEATURES = Pool(tuple("{in}/" + n for n in ("V.npy", "U.npy", "V.csv", "U.csv", "V.json",
                                             "U.json", "fortran.npy", "int.npy")),
                tuple("{in}/" + n for n in (
                    "obj.npy", "complex.npy", "str.npy", "bool.json", "dict.json",
                    "bigint.json", "deep.json", "empty.csv", "nan.csv", "1d.npy", "V.pkl",
                    "hugeshape.npy", "missing.npy", "adir", "wide.npy", "text.csv", "V.NPY"))
                + ("", "/proc/version", "/dev/zero"))

# --- the depth and real-text experiments (torch) ---------------------------------------
ARCH = Pool(("attention", "standard", "attention,standard", " standard , attention "),
            ("", "ATTENTION", "rnn", "attention,", ",", "attention,,standard", "1"))
OPTIMIZER = Pool(("sgd", "adam", "sgd,adam"), ("", "SGD", "rmsprop", "sgd,", ",", "adam;sgd"))
LAYERS = Pool(("1", "2", "1,2", "1,1"), JUNK + ("0", "-1", "1,0", "1.5", "1,,2", "1,"),
              slow=("3", "1,2,3", "12", "1000000", "1000000000000000"))
DEPTH_GAMMA = Pool(("0", "-0.75", "0.75", "1", "-1", "-0.75,0,0.75", "0:1:2", "-0"),
                   ("2", "-1.5", "1.0000001", "nan", "inf", "0:1:0", "a:b:3", "", "0,,1",
                    "1e400", "0:1:nan", "0:1:1e3", "0:1:-2", "-1:1:3:log"),
                   slow=("-1:1:17", "-1:1:1000", "-1:1:20000000", "-1:1:99999999999999999999"))
SEEDS = Pool(("1",), JUNK + ("0", "-1", "1.5"),
             slow=("2", "3", "10", "1000", "1000000000000000"))
WORKERS = Pool(("1",), JUNK + ("0", "-1", "1.5"),
               slow=("2", "4", "64", "100000", "1000000000000000"))
THREADS = Pool(("1", "2"), JUNK + ("0", "-1"), slow=("64", "100000", "1000000000000000"))
DEPTH_EPS = Pool(("0.05", "0.1", "0.3", "0.5"), JUNK + ("0", "-0.01", "1e-320"),
                 slow=("0.01", "1e-3", "1e-12", "10"))
LR = Pool(("0.1", "0.05", "1e-3"), JUNK + ("0", "-0.1", "1e-320"),
          slow=("1", "10", "1e300", "1e-12"))
DEPTH_STEPS = Pool(("1", "10", "100", "1000"), JUNK + ("0", "-1", "1.5"),
                   slow=("5000", "1000000", "1000000000000", "1000000000000000"))
EVAL_PROMPTS = Pool(("2", "64", "256", "1024", "1e3"), JUNK + ("0", "1", "3", "-2", "1e3.5"),
                    slow=("4096", "1000000", "100000000", "1000000000000000"))
#: Cache directories relative to the case directory (see make_outputs: dcache-* hold a
#: damaged entry at the exact key of DEPTH_FAST's run, rcache-* a damaged hidden-state file).
DEPTH_CACHE = Pool(("cache", "new/cache", "adir", "dcache-stale", "dcache-truncated",
                    "dcache-list", "dcache-fields", "dcache-nan", "dcache-pickle",
                    "dcache-empty", "dcache-binary", "dcache-link", "dcache-bigT"),
                   ("afile", "afile/sub", "rodir", "rodir/sub", "", "/proc", "/proc/self",
                    "/dev/null", "fifo.csv", "device.csv", "dangling.csv", "link.csv",
                    "a" * 300, "dcache-fifo", "dcache-zero", "dcache-dir", "\x00"))
REAL_CACHE = Pool(("cache", "adir", "rcache-truncated", "rcache-garbage", "rcache-empty",
                   "rcache-shape", "rcache-pickle", "rcache-offsets"),
                  ("afile", "afile/sub", "rodir", "", "/proc", "/dev/null", "fifo.csv",
                   "device.csv", "dangling.csv", "a" * 300, "rcache-fifo", "rcache-zero",
                   "rcache-dir"))
REAL_INPUT = Pool(("{in}/real.json",),
                  tuple("{in}/" + n for n in ("real-fields.json", "real-null.json",
                                               "real-inner.json",
                                               "real-nan.json", "real-truncated.json",
                                               "dict.json", "V.json", "deep.json",
                                               "bigint.json", "empty.csv", "V.npy",
                                               "missing.json", "adir"))
                  + ("", "/proc/version", "/dev/zero", "fifo.csv", "-"))
OUT_TEXT_REAL = Pool(("out.md", "out.json", "existing.csv", "link.csv"),
                     ("", ".", "adir", "missing/out.md", "afile/out.md", "a" * 300 + ".md",
                      "/proc/version", "dangling.csv", "fifo.csv", "device.csv",
                      "rodir/out.md", "-"))
#: Valid values that keep a depth run short (one tiny configuration, cached after the first
#: run); the campaign puts them before the drawn options, which override them (the parser
#: keeps an option's last value).
DEPTH_FAST = ("--quick", "--arch", "attention", "--optimizer", "sgd", "--layers", "1",
              "--seeds", "1", "--gamma", "0")
LADDER_FAST = ("--quick", "--seeds", "1", "--gamma", "0")


def geometry_options(slow: bool, rng: random.Random) -> list[str]:
    """One geometry, mostly well formed."""
    kind = rng.choice(("gamma", "gamma", "theta", "mean", "orth", "files", "none", "two"))
    pick = lambda pool: pool.draw(rng, slow)  # noqa: E731
    if kind == "gamma":
        return ["--gamma", pick(GAMMA)]
    if kind == "theta":
        return ["--theta", pick(THETA), "--K", pick(K_INT)]
    if kind == "mean":
        return ["--mean-query", "--K", pick(K_INT)]
    if kind == "orth":
        return ["--orthogonal", "--K", pick(K_INT)]
    if kind == "files":
        return ["--features", pick(FEATURES), "--ood", pick(FEATURES)]
    if kind == "two":
        return ["--gamma", pick(GAMMA), "--orthogonal"]
    return []


@dataclass(frozen=True)
class Entry:
    """A command: its words, its options (each with its value pool, ``None`` for a flag)
    and how likely each is to be given. ``output`` names the option that takes the
    requested output path (for the "nothing written elsewhere" check); ``geometry``
    says whether the command takes the shared geometry options; ``must`` lists options of
    which the CI test always gives one (commands whose valid defaults are slow); an
    option named ``ARG`` is a positional argument. ``writes`` names options whose value is
    a directory the command may write into (a cache); ``prefix`` holds valid values that
    keep a slow command short, put first (drawn options come after and override them)."""

    words: tuple[str, ...]
    options: dict[str, Pool | None] = field(default_factory=dict)
    output: str | None = None
    geometry: bool = False
    must: tuple[str, ...] = ()
    weight: float = 1.0
    writes: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()


PROTOCOL = {"--eps": EPS, "--eta": ETA, "--eta-ft": ETA, "--max-steps": STEPS}
REPLAY = Pool(("0", "0.1", "0.5", "0.25"), JUNK + ("1", "-0.1", "1.5", "0.999999999999999999"))
L2 = Pool(("0", "0.01", "0.1"), JUNK + ("-1", "1e308"))
PROJECT = Pool(("none", "key", "query", "both", "KEY"), ("side", "", "key,query", "0"))
WEIGHTS = Pool(("cosine", "drop-negative", "1,1", "1,0", "2,0.5"),
               ("0,0", "-1,1", "abc", "1,nan", "Cosine ", "", ","))
#: The interventions every fine-tuning command takes.
INTERVENTIONS = {"--replay": REPLAY, "--l2": L2, "--project": PROJECT, "--weights": WEIGHTS}
SEARCH_TOL = Pool(("1e-6", "0.01", "1e-3"), JUNK + ("0", "-1e-6", "0.5", "1"))
FORMAT_ADVISE = Pool(("text", "markdown", "json"), ("table", "", "TEXT "))
GEOMETRY_EXTRA = {"--d": D_INT, "--tol": TOL}

DEPTH_OPTIONS = {"--arch": ARCH, "--optimizer": OPTIMIZER, "--layers": LAYERS,
               "--gamma": DEPTH_GAMMA, "--seeds": SEEDS, "--workers": WORKERS, "--quick": None,
               "--cache-dir": DEPTH_CACHE, "--no-cache": None, "--eps": DEPTH_EPS, "--lr": LR,
               "--max-steps": DEPTH_STEPS, "--eval-prompts": EVAL_PROMPTS,
               "--ft-steps": DEPTH_STEPS, "--scheduler": SCHEDULER}
LADDER_OPTIONS = {k: v for k, v in DEPTH_OPTIONS.items()
                  if k not in ("--arch", "--optimizer", "--layers")}
#: --input is given half the time: without it the experiment runs (minutes: a 'hang').
REAL_OPTIONS = {"--input": REAL_INPUT, "--quick": None, "--seeds": SEEDS,
                "--cache-dir": REAL_CACHE, "--threads": THREADS}

ENTRIES: tuple[Entry, ...] = (
    Entry(("predict",), {**PROTOCOL, **GEOMETRY_EXTRA, **INTERVENTIONS, "--json": None,
                         "--precision": PRECISION}, geometry=True, weight=2),
    # every valid advise runs dozens of fine-tunings: CI gives it a refused --search-tol
    # (the campaign in tools/ runs the valid ones)
    Entry(("advise",), {**PROTOCOL, **GEOMETRY_EXTRA, "--search-tol": SEARCH_TOL,
                        "--format": FORMAT_ADVISE}, geometry=True, must=("--search-tol",),
          weight=0.5),
    Entry(("sequence",), {"--gamma": GAMMA, "--then": GAMMA, **PROTOCOL, "--eps-ft": EPS,
                          "--ft-steps": STEPS, "--json": None}, weight=0.5),
    Entry(("simulate",), {**PROTOCOL, **GEOMETRY_EXTRA, **INTERVENTIONS, "-s": SIMULATOR,
                          "--N": SMALL_INT,
                          "--batch": SMALL_INT, "--fixed-sample": None, "--balanced": None,
                          "--seed": SMALL_INT,
                          "--stop": STOP, "--holdout": SMALL_INT, "--compare": None,
                          "--rows": SMALL_INT, "--trajectories": None, "--json": None},
          geometry=True, weight=1.5),
    Entry(("sweep",), {"-o": OUT_SWEEP, **INTERVENTIONS, "--gamma": SWEEP_GAMMA,
                       "--theta": SWEEP_THETA,
                       "--K": SWEEP_K, "--eps": SWEEP_PROTO, "--eta": SWEEP_PROTO,
                       "--eta-ft": SWEEP_PROTO, "--max-steps": STEPS,
                       "--format": FORMAT_SWEEP, "--workers": SMALL_INT,
                       "--chunk-size": SMALL_INT, "--seed": SMALL_INT,
                       "--scheduler": SCHEDULER, "--progress": None, "--no-progress": None},
          output="-o", weight=2),
    Entry(("plot", "losses"), {"-o": OUT_PLOT, **PROTOCOL, **GEOMETRY_EXTRA},
          output="-o", geometry=True),
    Entry(("plot", "weights"), {"-o": OUT_PLOT, **PROTOCOL, **GEOMETRY_EXTRA},
          output="-o", geometry=True, weight=0.5),
    Entry(("plot", "ood-vs-theta"), {"-o": OUT_PLOT, "--K": K_INT, "--prompts": PROMPTS,
                                     **PROTOCOL}, output="-o", weight=0.7),
    Entry(("plot", "phase-diagram"), {"-o": OUT_PLOT, "--grid": GRID, **PROTOCOL},
          output="-o"),
    Entry(("plot", "phase-k3"), {"-o": OUT_PLOT, "--gamma1": GAMMA1, "--grid": GRID,
                                 **PROTOCOL}, output="-o", prefix=("--grid", "4"), weight=0.5),
    Entry(("plot", "overlap-map"), {"-o": OUT_PLOT, "--grid": GRID, "--rho-max": RHO_MAX,
                                    **PROTOCOL}, output="-o",
          prefix=("--grid", "4", "--rho-max", "0.5"), weight=0.5),
    Entry(("explore",), {"-o": OUT_HTML, "--grid": GRID, "--k3-grid": GRID,
                         "--gamma1": GAMMA1, "--overlap-grid": GRID, **PROTOCOL}, output="-o",
          prefix=("--grid", "5", "--k3-grid", "5", "--gamma1", "0.5", "--overlap-grid", "5"),
          weight=0.5),
    Entry(("plot",), {"ARG": Pool(("--help", "-h"), ("", "bogus"))}, weight=0.3),
    Entry(("reproduce",), {"-f": FORMAT_REPRO, "-o": OUT_TEXT, "--eps": EPS, "--eta": ETA,
                           "--eta-ft": ETA, "--prompts": PROMPTS, "--seed": SMALL_INT},
          output="-o", weight=0.7),
    Entry(("reproduce", "synthetic"), {"-f": FORMAT_REPRO, "-o": OUT_TEXT, "--eps": EPS,
                                       "--eta": ETA, "--prompts": PROMPTS,
                                       "--seed": SMALL_INT}, output="-o", weight=0.7),
    Entry(("derive",), {"ARG": CLAIM, "--format": FORMAT_DERIVE, "--list": None,
                        "--write": OUT_DIR}, output="--write",
          must=("ARG", "--list", "--write"), weight=0.3),
    Entry(("verify",), {"--quick": None, "--claim": CLAIM, "--details": None,
                        "--json": None}, must=("--claim",), weight=0.15),
    Entry((), {"ARG": Pool(("--version", "-h", "--help"), ("", "bogus", "-V", "--json"))},
          weight=0.3),
    Entry(("reproduce", "depth"), {**DEPTH_OPTIONS, "-f": FORMAT_REPRO, "-o": OUT_TEXT},
          output="-o", writes=("--cache-dir",), prefix=DEPTH_FAST, weight=0.6),
    Entry(("plot", "depth"), {"-o": OUT_PLOT, **DEPTH_OPTIONS}, output="-o",
          writes=("--cache-dir",), prefix=DEPTH_FAST, weight=0.4),
    Entry(("reproduce", "ladder"), {**LADDER_OPTIONS, "-f": FORMAT_REPRO, "-o": OUT_TEXT},
          output="-o", writes=("--cache-dir",), prefix=LADDER_FAST, weight=0.4),
    Entry(("plot", "ladder"), {"-o": OUT_PLOT, **LADDER_OPTIONS}, output="-o",
          writes=("--cache-dir",), prefix=LADDER_FAST, weight=0.3),
    Entry(("reproduce", "real"), {**REAL_OPTIONS, "-f": FORMAT_REPRO, "-o": OUT_TEXT_REAL},
          output="-o", writes=("--cache-dir",), weight=0.4),
    Entry(("plot", "real-rotation"), {"-o": OUT_PLOT, **REAL_OPTIONS}, output="-o",
          writes=("--cache-dir",), weight=0.2),
    Entry(("plot", "real-shift"), {"-o": OUT_PLOT, **REAL_OPTIONS}, output="-o",
          writes=("--cache-dir",), weight=0.2),
)


def random_case(rng: random.Random, slow: bool = True) -> tuple[list[str], list[str]]:
    """One invocation: ``(argv, the paths it may write: its output, its cache directory)``."""
    entry = rng.choices(ENTRIES, weights=[e.weight for e in ENTRIES])[0]
    argv = list(entry.words)
    if entry.prefix and rng.random() < 0.85:
        argv += entry.prefix
    if entry.geometry:
        argv += geometry_options(slow, rng)
    written = []
    for option, pool in entry.options.items():
        given = rng.random() < (0.9 if option == entry.output else 0.3)
        if not given:
            continue
        if pool is None:
            argv.append(option)
            continue
        value = pool.draw(rng, slow)
        if option == "ARG":
            argv.append(value)
        elif rng.random() < 0.1:
            argv.append(f"{option}={value}")
        else:
            argv += [option, value]
        if option == entry.output or option in entry.writes:
            written.append(value)
    if rng.random() < 0.03:
        argv.append(rng.choice(("--bogus", "extra", "-x", "--gamma")))
    return argv, written


def resolve(argv: list[str], inputs: Path) -> list[str]:
    return [a.replace("{in}", str(inputs)) for a in argv]


# --- the files the cases point at ------------------------------------------------------

def _write_npy_header(path: Path, shape: tuple[int, ...]) -> None:
    """A .npy whose header claims ``shape`` but holds 8 bytes of data."""
    header = repr({"descr": "<f8", "fortran_order": False, "shape": shape})
    header += " " * (118 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
                     + header.encode("latin1") + b"\x00" * 8)


def make_inputs(directory: Path) -> Path:
    """Valid and hostile feature files (K = 2, d = 3 where valid)."""
    directory.mkdir(parents=True, exist_ok=True)
    V, U = np.eye(3, 2), np.eye(3)[:, [0, 2]]
    np.save(directory / "V.npy", V)
    np.save(directory / "U.npy", U)
    np.save(directory / "V.NPY.npy", V)
    (directory / "V.NPY.npy").rename(directory / "V.NPY")
    np.savetxt(directory / "V.csv", V, delimiter=",")
    np.savetxt(directory / "U.csv", U, delimiter=",")
    (directory / "V.json").write_text(json.dumps(V.tolist()))
    (directory / "U.json").write_text(json.dumps(U.tolist()))
    np.save(directory / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(directory / "complex.npy", V + 1j * V)
    np.save(directory / "str.npy", V.astype(str))
    np.save(directory / "int.npy", V.astype(np.int64))
    np.save(directory / "fortran.npy", np.asfortranarray(V))
    np.save(directory / "1d.npy", np.ones(3))
    np.save(directory / "wide.npy", np.eye(2, 3))
    (directory / "bool.json").write_text("[[true, false], [false, true], [false, false]]")
    (directory / "dict.json").write_text('{"a": [1, 0]}')
    (directory / "bigint.json").write_text("[[" + "9" * 400 + ", 0]]")
    (directory / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (directory / "empty.csv").write_text("")
    (directory / "text.csv").write_text("a,b\nc,d\n")
    (directory / "nan.csv").write_text("nan,0\n0,1\n0,0\n")
    (directory / "V.pkl").write_bytes(pickle.dumps(V))
    _write_npy_header(directory / "hugeshape.npy", (10**6, 10**6))
    (directory / "adir").mkdir(exist_ok=True)
    real_inputs(directory)
    return directory


#: docs/real.json: a saved result of the real-text experiment (the valid --input).
REAL_JSON = Path(__file__).resolve().parents[1] / "docs" / "real.json"


def real_inputs(directory: Path) -> None:
    """The saved real-text result, and damaged copies of it for --input."""
    text = REAL_JSON.read_text(encoding="utf-8")
    (directory / "real.json").write_text(text, encoding="utf-8")
    (directory / "real-truncated.json").write_text(text[:len(text) // 2], encoding="utf-8")
    saved = json.loads(text)
    (directory / "real-fields.json").write_text(json.dumps(
        {key: "x" for key in saved}))                      # every key, values of no shape
    (directory / "real-null.json").write_text(json.dumps(
        {**saved, "rotation": None, "parameters": {**saved["parameters"], "seeds": "five"}}))
    (directory / "real-inner.json").write_text(json.dumps(
        {**saved, "rotation": {"thetas": "x"}, "shift": {}, "forgetting": [1], "paper": [None]}))
    damaged = json.loads(text)
    for block in damaged["rotation"].values() if isinstance(damaged["rotation"], dict) else ():
        if isinstance(block, dict):
            for key in list(block)[:2]:
                block[key] = float("nan")
    (directory / "real-nan.json").write_text(json.dumps(damaged))


#: Values in the hostile pools that oodcalc rightly accepts: the case's own directory, and a
#: claim key with a trailing space (a valid derive/verify run takes seconds to minutes).
ACCEPTED_ANYWAY = (".", "adir", "conservation ")

#: Entries make_outputs creates in a case directory, and what each must stay.
SPECIAL = {"existing.csv": "file", "existing.png": "file", "adir": "dir", "afile": "file",
           "link.csv": "symlink", "link.png": "symlink", "dangling.csv": "symlink",
           "dangling.png": "symlink", "fifo.csv": "fifo", "fifo.png": "fifo",
           "device.csv": "device", "device.png": "device", "rodir": "dir"}


def make_outputs(directory: Path) -> None:
    """The output-path fixtures of one case, in its (fresh, empty) directory."""
    (directory / "existing.csv").write_text("precious\n")
    (directory / "existing.png").write_text("precious\n")
    (directory / "adir").mkdir()
    (directory / "afile").write_text("a file\n")
    (directory / "target.csv").write_text("target\n")
    (directory / "link.csv").symlink_to("target.csv")
    (directory / "link.png").symlink_to("target.png")
    (directory / "dangling.csv").symlink_to("missing/x.csv")
    (directory / "dangling.png").symlink_to("missing/x.png")
    os.mkfifo(directory / "fifo.csv")
    os.mkfifo(directory / "fifo.png")
    for name in ("device.csv", "device.png"):
        try:   # a null device of our own (needs CAP_MKNOD); a FIFO stands in otherwise
            os.mknod(directory / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            os.mkfifo(directory / name)
    (directory / "rodir").mkdir()
    (directory / "rodir").chmod(0o555)
    depth_caches(directory)
    real_caches(directory)


@functools.lru_cache(maxsize=1)
def depth_entry() -> tuple[str, dict]:
    """The cache file name and parameters of the run DEPTH_FAST asks for (seed 0, γ = 0)."""
    from oodcalc.cli.reproduce_depth import QUICK
    from oodcalc.depth.protocol import DepthConfig, run_key
    protocol = {k: v for k, v in QUICK.items() if k != "seeds"}
    parameters = DepthConfig(arch="attention", optimizer="sgd", layers=1,
                             **protocol).run_parameters(0, 0.0)
    return f"{run_key(parameters)}.json", parameters


def depth_record(parameters: dict, F: float = -0.02) -> dict:
    """A record in the cache's shape (made up numbers, as a stale cache could hold)."""
    errors = [0.04, 0.03]
    return {"parameters": parameters,
            "pretrain": {"T1": 60, "converged": True, "diverged": False, "error": errors,
                         "seconds": 0.5},
            "ood_error": [0.1, 0.2],
            "finetune": {"T2": 50, "converged": True, "diverged": False, "error": errors,
                         "seconds": 0.5, "source_curve": [errors, errors]},
            "source_before": errors, "source_after": errors, "F": F, "F_k": [F / 2, F / 2]}


def depth_caches(directory: Path) -> None:
    """dcache-KIND: a cache directory whose entry for DEPTH_FAST's run is damaged."""
    name, parameters = depth_entry()
    good = json.dumps(depth_record(parameters))
    contents = {
        "stale": json.dumps(depth_record({**parameters, "version": 0})),
        "truncated": good[:len(good) // 2],
        "list": "[1, 2, 3]",
        "fields": json.dumps({"parameters": parameters, "pretrain": {"T1": "x"}, "F": "abc"}),
        "nan": good.replace('"F": -0.02', '"F": NaN'),
        "bigT": good.replace('"T1": 60', '"T1": ' + "9" * 5000),
        "pickle": pickle.dumps(parameters),
        "empty": "",
        "binary": b"\xff\xfe\x00garbage",
    }
    for kind, content in contents.items():
        folder = directory / f"dcache-{kind}"
        folder.mkdir()
        target = folder / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    # a link to a file outside the cache: the run replaces the link, never its target
    (directory / "dcache-link").mkdir()
    (directory / "dcache-link-target.json").write_text(contents["truncated"])
    (directory / "dcache-link" / name).symlink_to("../dcache-link-target.json")
    for kind in ("fifo", "zero", "dir"):
        (directory / f"dcache-{kind}").mkdir()
    os.mkfifo(directory / "dcache-fifo" / name)
    (directory / "dcache-zero" / name).symlink_to("/dev/zero")
    (directory / "dcache-dir" / name).mkdir()


@functools.lru_cache(maxsize=1)
def real_entry() -> str | None:
    """The hidden-state cache file the real-text experiment reads (None without its data)."""
    try:
        from oodcalc.real import assets, data
        from oodcalc.real.encoder import cache_key
        from oodcalc.real.experiment import Config
        texts = [r.text for r in data.read_zip(assets.data_zip())]
    except Exception:   # noqa: BLE001 - no data package, or no torch: no such fixtures
        return None

    class Identity:
        identity = assets.MODEL_FILES["model.safetensors"]
    config = Config()
    return f"hidden-{cache_key(Identity, assets.DATA_SHA256, texts, config.layer, config.max_len)}.npz"


def real_caches(directory: Path) -> None:
    """rcache-KIND: a cache directory whose hidden-state file is damaged."""
    kinds = ("truncated", "garbage", "empty", "shape", "pickle", "offsets", "fifo", "zero",
             "dir")
    for kind in kinds:
        (directory / f"rcache-{kind}").mkdir()
    name = real_entry()
    if name is None:
        return
    import io
    buffer = io.BytesIO()
    np.savez(buffer, hidden=np.ones((40, 384), dtype=np.float32),
             offsets=np.arange(0, 41, dtype=np.int64))
    npz = buffer.getvalue()
    files = {"truncated": npz[:len(npz) // 2], "garbage": b"PK\x03\x04" + b"\x00" * 64,
             "empty": b"", "pickle": pickle.dumps({"hidden": 1})}
    buffer = io.BytesIO()
    np.savez(buffer, hidden=np.ones(10, dtype=np.float32), offsets=np.arange(980))
    files["shape"] = buffer.getvalue()
    buffer = io.BytesIO()
    np.savez(buffer, hidden=np.ones((5, 384), dtype=np.float32),
             offsets=np.arange(980)[::-1].copy())
    files["offsets"] = buffer.getvalue()
    for kind, content in files.items():
        (directory / f"rcache-{kind}" / name).write_bytes(content)
    os.mkfifo(directory / "rcache-fifo" / name)
    (directory / "rcache-zero" / name).symlink_to("/dev/zero")
    (directory / "rcache-dir" / name).mkdir()


def kind_of(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    for kind, test in (("symlink", stat.S_ISLNK), ("dir", stat.S_ISDIR),
                       ("fifo", stat.S_ISFIFO), ("device", stat.S_ISCHR),
                       ("device", stat.S_ISBLK), ("file", stat.S_ISREG)):
        if test(mode):
            return kind
    return "other"


def snapshot(directory: Path) -> dict[str, tuple]:
    """Every entry below ``directory`` with its kind, size and mtime (symlinks not followed)."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root, name)
            st = os.lstat(path)
            out[str(path.relative_to(directory))] = (kind_of(path), st.st_size,
                                                     st.st_mtime_ns)
    return out


def unexpected_changes(before: dict, after: dict, requested: str | list[str] | None,
                       directory: Path) -> list[str]:
    """Entries created or changed other than the requested outputs (or, for a symlink,
    its target; for a directory, what is inside it: there a symlink may be replaced by a
    file, as a cache replaces a link at an entry's name, its target untouched)."""
    allowed: set[str] = set()
    for requested in [requested] if isinstance(requested, str) else requested or ():
        req = Path(requested)
        if requested and not req.is_absolute():
            allowed.add(os.path.normpath(requested))
            try:
                link = os.readlink(directory / req)
            except (OSError, ValueError):   # not a symlink, or a name the system refuses
                link = None
            if link is not None:
                allowed.add(os.path.normpath(os.path.join(os.path.dirname(requested), link)))
    # The directories that hold an allowed path change their times when it is written, and
    # are made when missing (a cache directory new/cache makes new/).
    holders = {os.path.normpath(os.path.join(a, *[".."] * i)) for a in allowed
               for i in range(1, a.count("/") + 1)}
    def inside(name: str) -> bool:   # "." (derive --write .) holds everything
        return name in allowed or any(a == "." or name.startswith(a.rstrip("/") + "/")
                                      for a in allowed)

    changed = []
    for name, info in after.items():
        if before.get(name) == info:
            continue
        if name in holders and info[0] == "dir" and before.get(name, (None,))[0] in (None, "dir"):
            continue
        if inside(name):
            was = before.get(name, (None,))[0]
            if was in (None, info[0]) or (was, info[0]) == ("symlink", "file"):
                continue
        changed.append(name)
    for name, info in before.items():   # a special file replaced or removed
        if name not in after and not inside(name):
            changed.append(f"{name} (removed)")
        elif name in after and after[name][0] != info[0] and not (
                inside(name) and (info[0], after[name][0]) == ("symlink", "file")):
            changed.append(f"{name} ({info[0]} became {after[name][0]})")
    return sorted(set(changed))
