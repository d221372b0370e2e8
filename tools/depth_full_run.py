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
The record's own runs count as done (when this machine would make them again: the same
protocol version, torch version and kind of machine), so a fresh clone trains only what
the record lacks; the record keeps them and adds every complete selection's runs; a
selection with runs missing is named and left out.
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
from oodcalc.errors import InputError  # noqa: E402
from oodcalc.io import write_text_atomic  # noqa: E402

COMMAND = "python tools/depth_full_run.py --workers 2"
IMAGES = ROOT / "docs" / "images"


def gather(parts: list[str], workers: int, train: bool,
           kept: Results) -> tuple[Results, list[str]]:
    """Every run of the chosen selections: from the record's runs (``kept``), then the
    caches, training the rest when asked."""
    from oodcalc.depth.experiment import plan
    start = time.perf_counter()

    def progress(done: int, total: int, label: str) -> None:
        if label:
            print(f"[{time.perf_counter() - start:7.0f} s] {done}/{total} {label}", flush=True)

    found, incomplete = Results(), []
    for name in parts:
        selection = documents.SELECTIONS[name]
        cache = record.WithRecord(LadderCache() if name == "ladder" else Cache(), kept)
        if train:
            part = collect(selection.configs, selection.seeds, selection.gammas, cache,
                           workers, progress)
        else:
            part, _ = plan(selection.configs, selection.seeds, selection.gammas, cache)
        if selection.present(part):
            found.records.update(part.records)
        else:
            incomplete.append(name)
    return found, incomplete


def saved_runs() -> Results:
    """The record's runs, if this machine would make them again (else none, said)."""
    if not documents.RECORD.exists():
        return Results()
    try:
        saved, runs = record.load(documents.RECORD)
    except InputError as err:
        print(f"docs/depth.json is not read ({err.render({})}): rebuilt from the caches",
              file=sys.stderr)
        return Results()
    if not record.reusable(saved):
        print(f"docs/depth.json holds {len(runs.records)} runs of protocol version "
              f"{saved['version']}, torch {saved['torch']} on {saved['machine']}: not this "
              "machine's; rebuilt from the caches", file=sys.stderr)
        return Results()
    return runs


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
        try:
            _, results = record.load(documents.RECORD)
        except InputError as err:
            raise SystemExit(f"depth_full_run: {err.render({})}") from None
        drawn = documents.figures(results)
        for name, figure in drawn.items():
            plots.save(figure, IMAGES / f"{name}.png")
            print(f"wrote docs/images/{name}.png")
        for name in {"depth", "ladder"} - set(drawn):
            print(f"not drawn: {name}.png (the record lacks its runs)", file=sys.stderr)
        return

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in documents.SELECTIONS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; expected some of "
                     + ", ".join(documents.SELECTIONS))
    kept = saved_runs()
    found, incomplete = gather(parts, args.workers, not args.no_train, kept)
    kept.records.update(found.records)
    if not kept.records:
        raise SystemExit("depth_full_run: no runs to record (train them: drop --no-train)")
    text = record.dumps(record.build(kept, COMMAND))
    write_text_atomic(documents.RECORD, text)
    print(f"wrote docs/depth.json: {len(kept.records)} runs ({len(text) / 1e6:.2f} MB)")
    for name in incomplete:
        print(f"left out (runs missing): {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
