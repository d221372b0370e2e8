"""The paper's TinyTransformer experiment: forgetting F of 1-3 layer transformers of width
16, fine-tuned on U = [q1, γ q2 + √(1−γ²) q3] after pretraining on V = [q1, q2], beside the
one-layer theory and the paper's figures (arXiv 2609.36448).

``protocol`` (every choice, no torch), ``models`` and ``training`` (torch, imported only
when a run must be computed), ``cache`` (JSON per run), ``experiment`` (cache or train, in
worker processes), ``statistics`` (t intervals, tests), ``table`` and ``plot``. Install torch with
``pip install "oodcalc[nn]"``. The names below load on first use, so that importing the
package (as the CLI does at start-up) costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .protocol import (ARCHITECTURES, OPTIMIZERS, PAPER_GAMMAS, PAPER_LAYERS, DepthConfig)

if TYPE_CHECKING:
    from .cache import Cache
    from .experiment import Progress, Results, collect
    from .table import DepthTable

_LAZY = {"Cache": "cache", "Results": "experiment", "collect": "experiment",
         "DepthTable": "table", "build_table": "table"}

__all__ = ["ARCHITECTURES", "OPTIMIZERS", "PAPER_GAMMAS", "PAPER_LAYERS", "Cache",
           "DepthConfig", "DepthTable", "Results", "collect", "configs", "reproduce"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configs(archs: Iterable[str] = ARCHITECTURES, optimizers: Iterable[str] = OPTIMIZERS,
            layers: Iterable[int] = PAPER_LAYERS, **protocol) -> list[DepthConfig]:
    """Every (architecture, optimizer, depth), sharing one protocol."""
    return [DepthConfig(arch=a, optimizer=o, layers=n, **protocol)
            for a in archs for o in optimizers for n in layers]


def reproduce(configs: Sequence[DepthConfig], seeds: Sequence[int] = range(10),
              gammas: Sequence[float] = PAPER_GAMMAS, cache: "Cache | None" = None,
              workers: int = 1, progress: "Progress | None" = None,
              executor=None) -> "DepthTable":
    """The depth table for these configurations, from the cache where it can."""
    from .cache import Cache
    from .experiment import collect
    from .table import build_table
    cache = cache if cache is not None else Cache(enabled=False)
    results = collect(configs, list(seeds), gammas, cache, workers, progress, executor)
    return build_table(results, configs, list(seeds), gammas)
