"""The record behind the documents: every run a table, a figure or a sentence of
docs/depth.md uses, saved as one JSON file (docs/depth.json), so that each generated block
is rebuilt from a committed file, without torch and without retraining.

A run is kept as the cache holds it (:mod:`.cache`) less its source-loss curve (two numbers
per fine-tuning step, which no document reads); runs are grouped by configuration, whose
protocol is written once. The record names the code's protocol version
(:data:`~.protocol.PROTOCOL_VERSION`), the torch version and the machine the runs were made
with: a record whose version is not the code's describes runs the code no longer makes
(tests/test_depth_record.py fails on it).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io import read_input
from .cache import well_formed
from .experiment import Results
from .protocol import PROTOCOL_VERSION, DepthConfig, run_key, torch_version

__all__ = [
    "FORMAT", "FromRecord", "MADE_BY", "MAX_BYTES", "WithRecord", "build", "compact",
    "current", "dumps", "load", "reusable",
]


#: 2: runs grouped by seed under their configuration (one pretraining per seed).
FORMAT = 2
#: Largest record read (bytes): the full run's is 1.3 MB.
MAX_BYTES = 256 << 20


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """A cached run without its parameters and pretraining (its group's) and without its
    source-loss curve."""
    out = {k: v for k, v in record.items() if k not in ("parameters", "pretrain")}
    out["gamma"] = record["parameters"]["gamma"]
    if "finetune" in out:
        out["finetune"] = {k: v for k, v in out["finetune"].items() if k != "source_curve"}
    return out


def build(results: Results, regenerate: str) -> dict[str, Any]:
    """The record of every run in ``results`` (JSON-ready), grouped by configuration in
    the order first met, then by seed (one pretraining serves every γ of a seed);
    ``regenerate`` is the command that rebuilt it."""
    groups: dict[DepthConfig, dict[int, dict[str, Any]]] = {}
    made: set[tuple[Any, ...]] = set()
    for (config, seed, gamma), record in results.records.items():
        p = record["parameters"]
        made.add((p["version"], p["torch"], p["machine"], p["threads"]))
        entry = groups.setdefault(config, {}).setdefault(
            seed, {"seed": seed, "pretrain": record["pretrain"], "runs": {}})
        if _timeless(entry["pretrain"]) != _timeless(record["pretrain"]):
            raise InputError("records", f"{config.describe()}, seed {seed}",
                             "expected one pretraining per seed (the same numbers "
                             "whenever it was trained)")
        entry["runs"].setdefault(gamma, compact(record))
    if len(made) != 1:
        raise InputError("records", sorted(made), "expected runs of one code version, torch "
                         "version and machine")
    version, torch, machine, threads = made.pop()
    return {"format": FORMAT, "regenerate": regenerate, "version": version, "torch": torch,
            "machine": machine, "threads": threads,
            "configs": [{"config": c.describe(),
                         "seeds": [{**e, "runs": [e["runs"][g] for g in sorted(e["runs"])]}
                                   for _, e in sorted(seeds.items())]}
                        for c, seeds in groups.items()]}


def _timeless(phase: dict[str, Any]) -> dict[str, Any]:
    """A phase without its wall time: a seed's pretraining trained twice (for the curve
    and the table, or in the ladder's cache) gives the same numbers, not the same seconds;
    the record keeps the seconds of the first met."""
    return {k: v for k, v in phase.items() if k != "seconds"}


def dumps(record: dict[str, Any]) -> str:
    """One pretraining or run per line: a diff of the record shows which runs changed."""
    def line(x: Any) -> str:
        return json.dumps(x, separators=(",", ":"), allow_nan=False)

    groups = []
    for group in record["configs"]:
        seeds = []
        for entry in group["seeds"]:
            runs = ",\n".join("      " + line(r) for r in entry["runs"])
            seeds.append(f'    {{"seed": {entry["seed"]}, "pretrain": {line(entry["pretrain"])}, '
                         f'"runs": [\n{runs}\n    ]}}')
        groups.append('  {"config": ' + line(group["config"]) + ', "seeds": [\n'
                      + ",\n".join(seeds) + "\n  ]}")
    head = {k: v for k, v in record.items() if k != "configs"}
    return (json.dumps(head, ensure_ascii=False, allow_nan=False)[:-1]
            + ', "configs": [\n' + ",\n".join(groups) + "\n]}\n")


def load(path: str | Path) -> tuple[dict[str, Any], Results]:
    """The record and its runs as :class:`Results` (what the cache would give), each run
    checked to be what a run with its parameters writes."""
    path = Path(path)
    data = read_input(path, "record", max_bytes=MAX_BYTES, expected="; expected a depth "
                      "record")
    try:
        record = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as err:   # a UnicodeDecodeError is a ValueError
        raise InputError("record", str(path), f"expected a depth record "
                         f"({str(err)[:120] or type(err).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputError("record", str(path), f"expected a depth record of format {FORMAT}")
    results = Results()
    try:
        made = {name: record[name] for name in ("version", "torch", "machine", "threads")}
        for group in record["configs"]:
            config = _checked(path, lambda: DepthConfig(**group["config"]))
            for entry in group["seeds"]:
                seed = entry["seed"]
                for run in entry["runs"]:
                    parameters = _checked(path, lambda: config.run_parameters(
                        seed, run["gamma"])) | made
                    full = {"parameters": parameters, "pretrain": entry["pretrain"],
                            **{k: v for k, v in run.items() if k != "gamma"}}
                    if "finetune" in full:
                        full["finetune"] = {**full["finetune"], "source_curve": []}
                    if not well_formed(full, parameters):
                        raise InputError("record", str(path), f"run {config.describe()}, "
                                         f"seed {seed}, γ = {run['gamma']} is not a run's "
                                         "record")
                    results.records[(config, seed, parameters["gamma"])] = full
    except (KeyError, TypeError) as err:
        raise InputError("record", str(path), f"expected a depth record (a field is missing "
                         f"or malformed: {type(err).__name__} {err})") from None
    return record, results


def _checked(path: Path, make):
    """``make()``, its refusal (a bad field of the record) named as the record's."""
    try:
        return make()
    except InputError as err:
        raise InputError("record", str(path), f"expected a depth record ({err})") from None


def current(record: dict[str, Any]) -> bool:
    """Were the record's runs made by this code's protocol version?"""
    return record.get("version") == PROTOCOL_VERSION


def reusable(record: dict[str, Any]) -> bool:
    """Would this machine make the record's runs again, number for number (the code's
    protocol version, the same torch version and kind of machine)?"""
    return current(record) and (record.get("torch"), record.get("machine")) == (
        torch_version(), platform.machine())


class WithRecord:
    """A cache that answers first from a record's runs (so that they are not trained
    again), then from ``cache``; new runs go to ``cache``."""

    def __init__(self, cache, results: Results) -> None:
        self.cache = cache
        self._runs = {run_key(r["parameters"]): r for r in results.records.values()}

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        return self._runs.get(run_key(parameters)) or self.cache.load(parameters)

    def store(self, record: dict[str, Any]) -> None:
        self.cache.store(record)


#: Run parameters that name what made a run (the torch build, the kind of machine), not
#: what was run: a record made elsewhere answers for the same run here when drawing.
MADE_BY = ("torch", "machine", "threads")


def _protocol_key(parameters: dict[str, Any]) -> str:
    return run_key({k: v for k, v in parameters.items() if k not in MADE_BY})


class FromRecord:
    """A cache for drawing: ``cache`` first (this machine's runs), then a record's runs
    with the same protocol (configuration, seed, γ and protocol version), whichever torch
    and machine made them, so that ``plot depth`` draws docs/depth.json's runs without
    torch. New runs go to ``cache``."""

    def __init__(self, cache, results: Results) -> None:
        self.cache = cache
        self._runs = {_protocol_key(r["parameters"]): r for r in results.records.values()}

    def load(self, parameters: dict[str, Any]) -> dict[str, Any] | None:
        return self.cache.load(parameters) or self._runs.get(_protocol_key(parameters))

    def store(self, record: dict[str, Any]) -> None:
        self.cache.store(record)
