"""The depth experiment behind docs/depth.md: train every run its tables and figures use,
save them as the record docs/depth.json, and draw the figures from that record.

    nice -n 10 python tools/depth_full_run.py --workers 2      # train what is missing; write the record
    python tools/depth_full_run.py --parts table,ladder         # only these selections
    python tools/depth_full_run.py --figures                    # docs/images/depth.png, ladder.png
    python tools/generate_docs.py                               # the generated blocks

The selections (oodcalc/depth/documents.py): ``table`` (every architecture, optimizer and
depth at ε = 0.01, 10 seeds, γ = −0.75, 0, 0.75), ``protocols`` (attention·SGD and
standard·Adam at ε = 0.05, 0.02, 0.01, 0.005 and 500 fine-tuning steps), ``ladder`` (every
rung, 10 seeds) and ``curve`` (17 γ, 5 seeds, for the figure). Runs already in the caches
(``oodcalc reproduce depth`` and ``reproduce ladder`` share them) are read, not retrained.
The record keeps the runs of the current code version it held and adds every complete
selection's runs; a selection with runs missing is named and left out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oodcalc.depth import Cache, Results, collect  # noqa: E402
from oodcalc.depth import documents, record  # noqa: E402
from oodcalc.depth.ladder import LadderCache  # noqa: E402
from oodcalc.io import write_text_atomic  # noqa: E402

COMMAND = "python tools/depth_full_run.py --workers 2"
IMAGES = ROOT / "docs" / "images"


def gather(parts: list[str], workers: int, train: bool) -> tuple[Results, list[str]]:
    """Every run of the chosen selections, from the caches (trained first when asked)."""
    start = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        if label:
            print(f"[{time.perf_counter() - start:7.0f} s] {done}/{total} {label}", flush=True)

    found, incomplete = Results(), []
    for name in parts:
        selection = documents.SELECTIONS[name]
        cache = LadderCache() if name == "ladder" else Cache()
        if train:
            part = collect(selection.configs, selection.seeds, selection.gammas, cache,
                           workers, progress)
        else:
            from oodcalc.depth.experiment import plan
            part, _ = plan(selection.configs, selection.seeds, selection.gammas, cache)
        if selection.present(part):
            found.records.update(part.records)
        else:
            incomplete.append(name)
    return found, incomplete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(documents.SELECTIONS),
                        help="selections to gather (default: all): "
                             + ", ".join(documents.SELECTIONS))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--no-train", action="store_true",
                        help="use only what the caches hold")
    parser.add_argument("--figures", action="store_true",
                        help="only draw the figures from docs/depth.json")
    args = parser.parse_args()

    if args.figures:
        from oodcalc import plots
        _, results = record.load(documents.RECORD)
        for name, figure in documents.figures(results).items():
            plots.save(figure, IMAGES / f"{name}.png")
            print(f"wrote docs/images/{name}.png")
        return

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in documents.SELECTIONS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; expected some of "
                     + ", ".join(documents.SELECTIONS))
    found, incomplete = gather(parts, args.workers, not args.no_train)
    kept = Results()
    if documents.RECORD.exists():
        import json
        if json.loads(documents.RECORD.read_text("utf-8")).get("format") != record.FORMAT:
            print("docs/depth.json is of another record format: rebuilt from the caches",
                  file=sys.stderr)
        else:
            saved, kept = record.load(documents.RECORD)
            if not record.current(saved):
                kept = Results()          # runs of another code version are not kept
    kept.records.update(found.records)
    text = record.dumps(record.build([kept], COMMAND))
    write_text_atomic(documents.RECORD, text)
    print(f"wrote docs/depth.json: {len(kept.records)} runs ({len(text) / 1e6:.2f} MB)")
    for name in incomplete:
        print(f"left out (runs missing): {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
