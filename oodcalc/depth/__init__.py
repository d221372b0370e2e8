"""The paper's TinyTransformer experiment: forgetting F of 1-3 layer transformers of width
16, fine-tuned on U = [q1, γ q2 + √(1−γ²) q3] after pretraining on V = [q1, q2], beside the
one-layer theory and the paper's figures (arXiv 2609.36448).

``protocol`` (every choice, no torch), ``models`` and ``training`` (torch, imported only
when a run must be computed), ``cache`` (JSON per run), ``experiment`` (cache or train, in
worker processes), ``statistics`` (bootstrap), ``table`` and ``plot``. Install torch with
``pip install "oodcalc[nn]"``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .cache import Cache
from .experiment import Progress, Results, collect
from .protocol import (ARCHITECTURES, OPTIMIZERS, PAPER_GAMMAS, PAPER_LAYERS, DepthConfig)
from .table import DepthTable, build_table

__all__ = ["ARCHITECTURES", "OPTIMIZERS", "PAPER_GAMMAS", "PAPER_LAYERS", "Cache",
           "DepthConfig", "DepthTable", "Results", "collect", "configs", "reproduce"]


def configs(archs: Iterable[str] = ARCHITECTURES, optimizers: Iterable[str] = OPTIMIZERS,
            layers: Iterable[int] = PAPER_LAYERS, **protocol) -> list[DepthConfig]:
    """Every (architecture, optimizer, depth), sharing one protocol."""
    return [DepthConfig(arch=a, optimizer=o, layers=n, **protocol)
            for a in archs for o in optimizers for n in layers]


def reproduce(configs: Sequence[DepthConfig], seeds: Sequence[int] = range(10),
              gammas: Sequence[float] = PAPER_GAMMAS, cache: Cache | None = None,
              workers: int = 1, progress: Progress | None = None) -> DepthTable:
    """The depth table for these configurations, from the cache where it can."""
    cache = cache if cache is not None else Cache(enabled=False)
    results = collect(configs, list(seeds), gammas, cache, workers, progress)
    return build_table(results, configs, list(seeds), gammas)
