"""The full depth experiment: every architecture, optimizer and depth, ≥ 10 seeds, the
γ-curve (17 values, which include the table's -0.75, 0 and 0.75), then the table, the plot
and the generated blocks of README.md and docs/depth.md.

    nice -n 10 python tools/depth_full_run.py --workers 2          # ~1-2 h on 2 busy cores
    python tools/depth_full_run.py --write                         # from the cache: seconds

Runs already in the cache are read, not retrained (same cache as ``oodcalc reproduce
depth``). ``--write`` rewrites the generated blocks and the image; without it the script
only prints them. The runtime it prints is the wall time of this invocation and the
summed per-run training time stored in the records.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oodcalc.depth import PAPER_GAMMAS, Cache, Results, collect, configs  # noqa: E402
from oodcalc.depth.protocol import CURVE_POINTS, CURVE_SEEDS, canonical_gamma  # noqa: E402
from oodcalc.depth.table import (build_table, header, make_cell, markdown,  # noqa: E402
                                  summary_markdown, usable)

CURVE = np.linspace(-1, 1, CURVE_POINTS)
#: The γ-curve is computed in this order: the theory's model and optimizer, then practice.
PRIORITY = [("attention", "sgd"), ("standard", "adam"), ("attention", "adam"), ("standard", "sgd")]
BLOCKS = {ROOT / "README.md": "depth", ROOT / "docs" / "depth.md": "depth-table"}
IMAGE = ROOT / "docs" / "images" / "depth.png"


def replace_block(path: Path, name: str, text: str) -> None:
    from oodcalc.io import write_text_atomic
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    source = path.read_text("utf-8")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(source):
        raise SystemExit(f"{path}: no {start} ... {end} block")
    write_text_atomic(path, pattern.sub(lambda _: f"{start}\n{text.rstrip()}\n{end}", source))


def training_seconds(results) -> float:
    """Wall time stored in the records: each pretraining once, every fine-tuning (on a
    busy machine this is wall time, not CPU time)."""
    pretrain = {}
    finetune = 0.0
    for (config, seed, _), record in results.records.items():
        pretrain[(config, seed)] = record["pretrain"]["seconds"]
        finetune += record.get("finetune", {}).get("seconds", 0.0)
    return sum(pretrain.values()) + finetune


def bimodality(results, chosen, seeds, gamma: float) -> str:
    """Per configuration at γ: which feature forgets, seed by seed."""
    lines = [f"Per-seed F_1 · F_2 at γ = {gamma:+.2f} (×1000; * marks the feature that forgets more):",
             ""]
    for config in chosen:
        cell = make_cell(results, config, seeds, gamma)
        runs = " ".join(
            f"{1000 * r['F_k'][0]:+.1f}{'*' if r['F_k'][0] > r['F_k'][1] else ''}·"
            f"{1000 * r['F_k'][1]:+.1f}{'*' if r['F_k'][1] >= r['F_k'][0] else ''}"
            for r in cell.per_seed)
        p = cell.patterns
        lines.append(f"- {config.arch}, {config.optimizer}, {config.layers} L — forgets only 1: "
                     f"{p['only 1']}, only 2: {p['only 2']}, both: {p['both']}, neither: "
                     f"{p['neither']}; runs: {runs}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--curve-seeds", type=int, default=CURVE_SEEDS,
                        help="seeds of the γ-curve (default %(default)s, as `oodcalc plot depth`)")
    parser.add_argument("--table-only", action="store_true",
                        help="only the table's γ values (-0.75, 0, 0.75); no γ-curve")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--write", action="store_true",
                        help="rewrite the README/docs blocks and docs/images/depth.png")
    args = parser.parse_args()

    chosen = configs()
    seeds = list(range(args.seeds))
    cache = Cache(args.cache_dir)
    start = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        if label:
            print(f"[{time.perf_counter() - start:7.0f} s] {done}/{total} {label}", flush=True)

    results = collect(chosen, seeds, PAPER_GAMMAS, cache, args.workers, progress)
    computed = results.computed
    curve_seeds = list(range(args.curve_seeds))
    curve = None
    if not args.table_only:
        curve = Results()
        for group in PRIORITY:     # the theory's model first, should the run be cut short
            part = collect([c for c in chosen if (c.arch, c.optimizer) == group], curve_seeds,
                           CURVE, cache, args.workers, progress)
            curve.records.update(part.records)
            computed += part.computed
        results.records.update(curve.records)
    wall = time.perf_counter() - start
    table = build_table(results, chosen, seeds, PAPER_GAMMAS)
    text = markdown(table)
    runs = len(results.records)
    failed = sum(not usable(r) for r in results.records.values())
    trained = (f"{computed} trained in this invocation ({wall / 60:.1f} min wall)" if computed
               else "all read from the cache")
    runtime = (f"{runs} runs ({len(chosen)} configurations; table: {len(seeds)} seeds × "
               f"{len(PAPER_GAMMAS)} γ; curve: {len(curve_seeds)} seeds × {len(CURVE)} γ), "
               f"{failed} left out; {trained}; the runs' own wall times, summed: "
               f"{training_seconds(results) / 3600:.2f} h")
    print(text)
    print(bimodality(results, chosen, seeds, canonical_gamma(-0.75)))
    print()
    print(runtime)
    if args.write:
        from oodcalc import plots
        from oodcalc.depth.plot import gamma_curves
        if curve is not None:
            plots.save(gamma_curves(curve, chosen, curve_seeds, CURVE), IMAGE)
        blocks = {"depth": header(table, verdicts=False) + "\n\n" + summary_markdown(table),
                  "depth-table": text + "\n" + bimodality(results, chosen, seeds, -0.75)
                  + f"\n\nRuntime: {runtime}.\n"}
        for path, name in BLOCKS.items():
            replace_block(path, name, blocks[name])
        print(f"wrote {IMAGE.relative_to(ROOT)} and the blocks of "
              + ", ".join(str(p.relative_to(ROOT)) for p in BLOCKS))


if __name__ == "__main__":
    main()
