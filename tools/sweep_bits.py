"""Do two versions of oodcalc give the same sweeps, bit for bit? For performance work on
the engines, which must not move a single number.

    python tools/sweep_bits.py save DIR      # with the version before the change
    python tools/sweep_bits.py check DIR     # with the version after it: OK or the columns

Eleven sweeps cover the engine's paths: the 201×201 K = 2 phase diagram (all margins),
ε × η grids, ``eps_ft`` and ``ft_steps``, one-row chunks with η_ft varying, random γ at
K = 3 and 5 (full columns, shared columns), equal γ at K = 4 (two-valued columns beside
full ones), rotations, and mixed geometries (mean query, orthogonal, non-diagonal M
through rotations). Every column is compared: floats by their bits (signed zeros and NaN
payloads included), the rest by value. DIR holds one ``.npz`` per sweep (no pickles).
To check against an older commit, save from a worktree of it::

    git worktree add /tmp/before REV && (cd /tmp/before && python tools/sweep_bits.py save /tmp/bits)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from oodcalc import geometry
from oodcalc.sweep import gamma_grid, gamma_rows, geometry_grid, sweep, theta_grid


def cases() -> dict:
    line, coarse = np.linspace(-1, 1, 201), np.linspace(-1, 1, 41)
    rng = np.random.default_rng(5)
    return {
        "phase_diagram": lambda: sweep(gamma_grid([line, line])),
        "eps_eta": lambda: sweep(gamma_grid([np.linspace(-1, 1, 31), np.linspace(-1, 1, 29)],
                                            eps=[0.01, 0.05], eta=[0.1, 0.3])),
        "ft_steps": lambda: sweep(gamma_grid([coarse, coarse]), ft_steps=50),
        "eps_ft": lambda: sweep(gamma_grid([coarse, coarse]), eps_ft=0.02),
        "one_row_chunks": lambda: sweep(gamma_grid([np.linspace(-1, 1, 13)] * 2,
                                                   eta_ft=[0.1, 0.4]), chunk_size=1),
        "k3_chunks": lambda: sweep(gamma_rows(rng.uniform(-1, 1, (40, 3)), eta_ft=0.3),
                                   chunk_size=3),
        "k3": lambda: sweep(gamma_rows(rng.uniform(-1, 1, (300, 3)))),
        "k4_equal": lambda: sweep(gamma_grid([np.linspace(-1, 1, 21), [0.5], [0.5], [0.5]])),
        "rotations": lambda: sweep(theta_grid(np.linspace(0, np.pi, 50), 3)),
        "k5_shared": lambda: sweep(gamma_rows(np.round(rng.uniform(-1, 1, (100, 5)), 1))),
        "geometries": lambda: sweep(geometry_grid([
            geometry.rotation(0.3, 3), geometry.rotation(1.2, 3), geometry.mean_query(3),
            geometry.orthogonal(3), geometry.parallel_shift([0.5, -0.2, 0.9])])),
    }


def arrays(result) -> dict[str, np.ndarray]:
    return {name: column.astype(str) if column.dtype == object else column
            for name, column in result.columns.items()}


def differing(saved: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> list[str]:
    if list(saved) != list(now):
        return [f"columns {sorted(set(saved) ^ set(now))}"]
    out = []
    for name, a in saved.items():
        b = now[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            out.append(f"{name} ({a.dtype}{a.shape} vs {b.dtype}{b.shape})")
        elif a.dtype.kind == "f":
            if not np.array_equal(a.view(np.int64), b.view(np.int64)):
                out.append(name)
        elif not np.array_equal(a, b):
            out.append(name)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("save", "check"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    mode, folder = argv[0], Path(argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, run in cases().items():
        now, path = arrays(run()), folder / f"{name}.npz"
        if mode == "save":
            np.savez(path, **now)
            continue
        with np.load(path, allow_pickle=False) as data:
            saved = {key: data[key] for key in data.files}
        diff = differing(saved, now)
        failed += bool(diff)
        print(f"{name}: {'OK' if not diff else 'DIFFERENT: ' + ', '.join(diff)}")
    if mode == "save":
        print(f"saved {len(cases())} sweeps in {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
