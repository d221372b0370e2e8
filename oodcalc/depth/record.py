"""The record behind the documents: every run a table, a figure or a sentence of
docs/depth.md uses, saved as one JSON file (docs/depth.json), so that each generated block
is rebuilt from a committed file, without torch and without retraining.

A run is kept as the cache holds it (:mod:`.cache`) less its source-loss curve (two numbers
per fine-tuning step, which no document reads); runs are grouped by configuration, whose
protocol is written once. The record names the code's protocol version
(:data:`~.protocol.PROTOCOL_VERSION`), the torch version and the machine the runs were made
with: a record whose version is not the code's describes runs the code no longer makes
(tests/test_docs.py fails on it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError
from .cache import well_formed
from .experiment import Results
from .protocol import PROTOCOL_VERSION, DepthConfig, canonical_gamma

FORMAT = 1
#: The fields of a run's parameters that are not its configuration's.
RUN_FIELDS = ("seed", "gamma", "version", "torch", "machine", "threads")


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """A cached run without its parameters (the group's) and its source-loss curve."""
    out = {k: v for k, v in record.items() if k != "parameters"}
    out["seed"], out["gamma"] = record["parameters"]["seed"], record["parameters"]["gamma"]
    if "finetune" in out:
        out["finetune"] = {k: v for k, v in out["finetune"].items() if k != "source_curve"}
    return out


def build(results: Iterable[Results], regenerate: str) -> dict[str, Any]:
    """The record of every run in ``results`` (JSON-ready), grouped by configuration in
    the order first met; ``regenerate`` is the command that rebuilt it."""
    groups: dict[DepthConfig, list[dict[str, Any]]] = {}
    made: set[tuple[Any, ...]] = set()
    for part in results:
        for (config, seed, gamma), record in part.records.items():
            p = record["parameters"]
            made.add((p["version"], p["torch"], p["machine"], p["threads"]))
            runs = groups.setdefault(config, [])
            if all((r["seed"], r["gamma"]) != (seed, gamma) for r in runs):
                runs.append(compact(record))
    if len(made) != 1:
        raise InputError("records", sorted(made), "expected runs of one code version, torch "
                         "version and machine")
    version, torch, machine, threads = made.pop()
    return {"format": FORMAT, "regenerate": regenerate, "version": version, "torch": torch,
            "machine": machine, "threads": threads,
            "configs": [{"config": c.describe(),
                         "runs": sorted(runs, key=lambda r: (r["seed"], r["gamma"]))}
                        for c, runs in groups.items()]}


def dumps(record: dict[str, Any]) -> str:
    """One run per line: a diff of the record shows which runs changed."""
    lines = []
    for group in record["configs"]:
        runs = ",\n".join("    " + json.dumps(r, separators=(",", ":"), allow_nan=False)
                          for r in group["runs"])
        lines.append('  {"config": ' + json.dumps(group["config"], separators=(",", ":"))
                     + ', "runs": [\n' + runs + "\n  ]}")
    head = {k: v for k, v in record.items() if k != "configs"}
    return (json.dumps(head, ensure_ascii=False, allow_nan=False)[:-1]
            + ', "configs": [\n' + ",\n".join(lines) + "\n]}\n")


def load(path: str | Path) -> tuple[dict[str, Any], Results]:
    """The record and its runs as :class:`Results` (what the cache would give), each run
    checked to be what a run with its parameters writes."""
    path = Path(path)
    try:
        record = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as err:
        raise InputError("record", str(path), f"expected a depth record ({err})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputError("record", str(path), f"expected a depth record of format {FORMAT}")
    results = Results()
    made = {name: record[name] for name in ("version", "torch", "machine", "threads")}
    for group in record["configs"]:
        config = DepthConfig(**group["config"])
        for run in group["runs"]:
            parameters = {**config.describe(), "seed": run["seed"],
                          "gamma": canonical_gamma(run["gamma"]), **made}
            full = {"parameters": parameters,
                    **{k: v for k, v in run.items() if k not in ("seed", "gamma")}}
            if "finetune" in full:
                full["finetune"] = {**full["finetune"], "source_curve": []}
            if not well_formed(full, config.run_parameters(run["seed"], run["gamma"])
                               | made):
                raise InputError("record", str(path), f"run {config.describe()}, seed "
                                 f"{run['seed']}, γ = {run['gamma']} is not a run's record")
            results.records[(config, run["seed"], parameters["gamma"])] = full
    return record, results


def current(record: dict[str, Any]) -> bool:
    """Were the record's runs made by this code's protocol version?"""
    return record.get("version") == PROTOCOL_VERSION
