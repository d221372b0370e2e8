"""``oodcalc explore``: one self-contained HTML page to explore the theory in a browser.

The page embeds maps computed here by the batched sweep (the K = 2 phase map of F, F_k and
the paper's regimes over (γ1, γ2), and the K = 3 slices of :mod:`oodcalc.k3maps`), and runs
a picked point itself: ``dynamics.js`` is a port of the exact K×K logit dynamics
(pretraining on the symmetric ray, fine-tuning by the K×K descent, claim 7's source view)
with the floating-point operations of ``oodcalc.finetune.dynamics`` in the same order, so that its
T1 and T2 equal ``predict``'s and its F_k agree to rounding (the tests check both in
headless Chromium). The point may carry fine-tuning interventions (replay λ, the L2 pull μ,
a projection off span(V), query weights c_k or a cosine rule), run by a port of the terms
engine (``oodcalc.finetune.terms`` and ``engine``: both logits, the stopping rule on the
covered features, blocked and stalled runs) with the same agreement, the reached flag and
predict's note included; the embedded maps stay plain fine-tuning, and the page says so
when an intervention is set. A K = 2 point may have overlapping training features
(⟨v1, v2⟩ = ρ, ``oodcalc predict --overlap``), run by a port of the Gram dynamics
(:mod:`oodcalc.finetune.gram`), beside the overlap map of :mod:`oodcalc.overlap_map`
over (γ2, ρ). Everything is inlined: no network, no library, works from
``file://``.
"""

from __future__ import annotations

import base64
import json
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .._version import __version__
from .. import limits
from ..errors import InputError
from ..io import write_text_atomic
from ..setting import Protocol

__all__ = [
    "DEFAULT_GAMMA1", "DEFAULT_GRID", "DEFAULT_K3_GRID", "DEFAULT_OVERLAP_GRID", "MAX_GRID",
    "MAX_SLICES", "OVERLAP_RHO_MAX", "SUFFIXES", "build_page", "page_data", "write_page",
]


#: K = 2 map: N × N points over [−1, 1]².
DEFAULT_GRID = 201
#: K = 3 slices: N × N points of (γ2, γ3) per slice, at these γ1.
DEFAULT_K3_GRID = 101
DEFAULT_GAMMA1 = (1.0, 0.75, 0.5, 0.25, -0.7)
#: Overlap map (K = 2, ⟨v1, v2⟩ = ρ, γ1 = 1): N points of γ2, ρ the same step within
#: ±OVERLAP_RHO_MAX (0.8: T1 = 10,869 at the edge, a few seconds; 0.9 would quadruple it).
DEFAULT_OVERLAP_GRID = 41
OVERLAP_RHO_MAX = 0.8
#: Largest grids the page takes (its size grows as N²: 201 and 101 make about 1.3 MB).
MAX_GRID = 801
MAX_SLICES = 16
SUFFIXES = (".html", ".htm")


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def page_data(grid: int = DEFAULT_GRID, k3_grid: int = DEFAULT_K3_GRID,
              gamma1: Sequence[float] = DEFAULT_GAMMA1,
              protocol: Protocol | None = None, *,
              overlap_grid: int = DEFAULT_OVERLAP_GRID,
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The maps the page embeds, computed by the exact batched dynamics (``sweep``; the
    overlap map by :func:`oodcalc.overlap_map.compute`): float32 values and uint8 codes,
    base64. ``progress(done, total)`` is told of the configurations of the maps together
    as they finish."""
    from .. import k3maps, plots
    from .. import overlap_map as om
    from ..sweep import gamma_grid, sweep
    protocol = protocol or Protocol()
    for name, n in (("grid", grid), ("k3_grid", k3_grid)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= MAX_GRID:
            raise InputError(name, n, f"expected an integer from 2 to {MAX_GRID}")
    gamma1 = k3maps.check_gamma1(gamma1)
    if len(gamma1) > MAX_SLICES:
        raise InputError("gamma1", f"{len(gamma1):,} slices", f"at most {MAX_SLICES}")
    limits.check_maps({2: grid * grid, 3: len(gamma1) * k3_grid * k3_grid}, 16,
                      "the explorer's maps (one sweep per map)")
    overlap_grid, _ = om.check_grid(overlap_grid, OVERLAP_RHO_MAX)
    for K in (2, 3):    # predict's refusal, as k3maps.slices: no row would be scored
        limits.pretrain_cap(K, protocol, auto=False)
    n_overlap = len(om.axes(overlap_grid, OVERLAP_RHO_MAX)[0]) * overlap_grid
    total = grid * grid + len(gamma1) * k3_grid * k3_grid + n_overlap

    def counted(offset: int):     # each sweep counts its own rows; the page counts both
        return None if progress is None else lambda done, _: progress(offset + done, total)
    axis = np.linspace(-1.0, 1.0, grid)
    k2 = sweep(gamma_grid([axis, axis], eps=protocol.eps, eta=protocol.eta,
                          eta_ft=protocol.eta_ft), max_steps=protocol.max_steps,
               progress=counted(0))
    verdicts = list(k3maps.VERDICT_CODES)
    directions = list(k3maps.DIRECTION_CODES)

    def verdict_codes(names: np.ndarray) -> np.ndarray:
        out = np.zeros(names.shape, dtype=np.uint8)
        for name, code in k3maps.VERDICT_CODES.items():
            out[names == name] = code
        return out

    data: dict[str, Any] = {
        "version": __version__,
        "protocol": {"eps": protocol.eps, "eta": protocol.eta, "eta_ft": protocol.eta_ft},
        "codes": {"verdict": verdicts, "direction": directions},
        "colors": {"verdict": plots.K3_VERDICT_COLORS, "direction": plots.K3_DIRECTION_COLORS,
                   "classes": list(plots.K3_CLASS_COLORS)},
        "k2": {"n": grid, "F": _b64(k2["F"].astype(np.float32)),
               **{f"F_{k}": _b64(k2[f"F_{k}"].astype(np.float32)) for k in (1, 2)},
               **{f"regime_{k}": _b64(verdict_codes(k2[f"regime_{k}"])) for k in (1, 2)}},
    }
    maps = k3maps.slices(gamma1, k3_grid, protocol, progress=counted(grid * grid))
    data["k3"] = {
        "n": k3_grid, "rules": list(k3maps.RULES),
        "labels": {r: k3maps.LABELS[r] for r in k3maps.RULES}, "short": k3maps.SHORT,
        "slices": [{"gamma1": s.gamma1, "F_1": _b64(s.F1.astype(np.float32)),
                    **{name: _b64(code) for name, code in s.codes().items()},
                    "scored": _b64(s.scored.astype(np.uint8)),
                    "fractions": s.fractions(),
                    "counterexamples": [list(c) for c in s.counterexamples]}
                   for s in maps]}
    m = om.compute(overlap_grid, protocol, rho_max=OVERLAP_RHO_MAX,
                   progress=counted(total - n_overlap))
    F_sign = m.F_sign + 1
    data["overlap"] = {
        "rho": m.rho.tolist(), "gamma2": m.gamma2.tolist(), "rho_max": OVERLAP_RHO_MAX,
        "scored": _b64(m.scored.astype(np.uint8)),
        "counterexamples": [list(c) for c in m.counterexamples],
        **{f"F_{k}": _b64(m.F[..., k - 1].astype(np.float32)) for k in (1, 2)},
        **{f"F_sign_{k}": _b64(F_sign[..., k - 1].astype(np.uint8)) for k in (1, 2)},
        **{f"paper_{k}": _b64(verdict_codes(m.verdicts["paper"][..., k - 1])) for k in (1, 2)},
        **{f"C_sign_{k}": _b64(_codes(m.verdicts["C_sign"][..., k - 1],
                                      k3maps.DIRECTION_CODES)) for k in (1, 2)},
        "fractions": {str(k): m.fractions(k) for k in (1, 2)}}
    return data


def _codes(names: np.ndarray, table: dict[str, int]) -> np.ndarray:
    out = np.zeros(names.shape, dtype=np.uint8)
    for name, code in table.items():
        out[names == name] = code
    return out


def build_page(data: dict[str, Any]) -> str:
    """The HTML page for :func:`page_data`'s maps: the template with the style, the data and
    both scripts inlined."""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")
    p = data["protocol"]
    protocol = f"ε = {p['eps']:g}, η = {p['eta']:g}, η_ft = {p['eta_ft']:g}"
    page = _asset("page.html")
    for key, value in (("/*STYLE*/", _asset("page.css")), ("__VERSION__", data["version"]),
                       ("__PROTOCOL__", protocol), ("/*DYNAMICS*/", _asset("dynamics.js")),
                       ("/*EXPLORER*/", _asset("explorer.js")), ("/*DATA*/", payload)):
        page = page.replace(key, value)
    return page


def write_page(path: str | Path, grid: int = DEFAULT_GRID, k3_grid: int = DEFAULT_K3_GRID,
               gamma1: Sequence[float] = DEFAULT_GAMMA1, protocol: Protocol | None = None,
               *, overlap_grid: int = DEFAULT_OVERLAP_GRID, option: str = "--output",
               progress: Callable[[int, int], None] | None = None) -> Path:
    """Compute the maps and write the page atomically; returns ``path``."""
    page = build_page(page_data(grid, k3_grid, gamma1, protocol, overlap_grid=overlap_grid,
                                progress=progress))
    return write_text_atomic(path, page, option=option)
