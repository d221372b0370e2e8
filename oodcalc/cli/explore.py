"""``oodcalc explore -o explorer.html``: one self-contained HTML page (maps computed here,
a point's exact dynamics run in the browser)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import InputError
from . import options
from .app import app
from .setting_options import Eps, Eta, EtaFt, MaxSteps, build_protocol


@app.command()
def explore(
    output: Annotated[str, typer.Option("--output", "-o", metavar="FILE",
        help="Where to write the page (.html; written atomically).")],
    grid: Annotated[str, typer.Option("--grid", metavar="N",
        help="K = 2 map: N × N points of (γ1, γ2) over [-1, 1]².")] = "201",
    k3_grid: Annotated[str, typer.Option("--k3-grid", metavar="N",
        help="K = 3 slices: N × N points of (γ2, γ3) per slice.")] = "101",
    gamma1: Annotated[str, typer.Option("--gamma1", metavar="G1[,G1...]",
        help="γ1 of each K = 3 slice, in [-1, 1].")] = "1,0.75,0.5,0.25,-0.7",
    overlap_grid: Annotated[str, typer.Option("--overlap-grid", metavar="N",
        help="Overlap map (K = 2, ⟨v1, v2⟩ = ρ, γ1 = 1): N points of γ2 over [-1, 1], ρ the "
             "same step within [-0.8, 0.8].")] = "41",
    eps: Eps = None, eta: Eta = None, eta_ft: EtaFt = None, max_steps: MaxSteps = None,
) -> None:
    """Write one self-contained HTML page to explore the theory: the K = 2, K = 3 and
    overlap maps, and any point's exact dynamics run in the browser (no network needed).

    Example: oodcalc explore -o explorer.html
    """
    from ..explore import MAX_GRID, MAX_SLICES, SUFFIXES, write_page
    from ..io import check_output
    from ..errors import shorten
    from ..k3maps import check_gamma1
    check_output(output, "--output", suffixes=SUFFIXES)
    protocol = build_protocol(eps, eta, eta_ft, max_steps)
    why = f"the page's size grows as N² (at most {MAX_GRID})"
    n2 = options.integer("--grid", grid, 2, MAX_GRID, why)
    n3 = options.integer("--k3-grid", k3_grid, 2, MAX_GRID, why)
    from ..overlap_map import MAX_GRID as OVERLAP_MAX
    n_overlap = options.integer("--overlap-grid", overlap_grid, 3, OVERLAP_MAX,
                                "N × N points of exact Gram dynamics")
    slices = check_gamma1(options.numbers("--gamma1", gamma1), "--gamma1")
    if len(slices) > MAX_SLICES:
        raise InputError("--gamma1", f"{len(slices):,} values ({shorten(gamma1)})",
                         f"at most {MAX_SLICES} slices")
    options.name_parameters({"grid": ("--grid", grid),
                             "lower grid": "lower --grid or --k3-grid"})
    from .progress import rows_progress
    with rows_progress("computing the maps") as progress:
        written = write_page(output, n2, n3, slices, protocol, overlap_grid=n_overlap,
                             progress=progress)
    print(written)
