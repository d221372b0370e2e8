"""The frozen lower part of the encoder, run once; its hidden states are cached on disk.

The network is a BertModel (all-MiniLM-L6-v2: 6 layers, hidden 384). Layers
``0 .. layer-1`` and the embeddings are frozen: their output at every token,
``hidden_states[layer]`` in transformers' numbering, is computed once and cached; the
layers ``layer ..`` on top and a linear head are trained (:mod:`oodcalc.real.top`), so
the rotations of the experiment act on the input of a trainable softmax-attention layer.

The cache is a numpy ``.npz`` without pickles (float32 hidden states of the real tokens
only, concatenated, with offsets), written atomically, named by a key that hashes the
model's weights, the data file, the texts, the layer and the truncation length.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import ComputationError, InputError
from ..io import open_input, write_atomic
from .assets import missing

__all__ = [
    "CACHE_FORMAT", "Encoder", "Hidden", "cache_key", "extended_mask", "hidden_states",
    "load_minilm", "lower_hidden", "pad", "read_cache", "require", "run_layers", "tokenize",
    "torch_setup",
]


#: Bump when the cached arrays would change for the same key inputs.
CACHE_FORMAT = 1


def require() -> None:
    """torch, transformers and tokenizers, or a one-line error naming the install step."""
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise missing("torch and transformers") from None


def torch_setup() -> None:
    """No hub access, ever; quiet transformers."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class Encoder:
    """A BertModel and its tokenizer; ``identity`` names the weights in cache keys."""

    model: object            # transformers.BertModel, eval mode
    tokenizer: object        # tokenizers.Tokenizer
    identity: str
    name: str

    @property
    def hidden(self) -> int:
        return self.model.config.hidden_size

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers


def load_minilm(folder: Path, identity: str, name: str = "all-MiniLM-L6-v2") -> Encoder:
    """Build the BertModel from ``config.json`` and load ``model.safetensors`` into it
    (no hub code path is involved); the tokenizer from ``tokenizer.json``."""
    torch_setup()
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel

    config = BertConfig.from_json_file(str(folder / "config.json"))
    model = BertModel(config, add_pooling_layer=False)
    state = load_file(str(folder / "model.safetensors"))
    wanted = model.state_dict()
    absent = sorted(set(wanted) - set(state))
    if absent:
        raise ComputationError(f"model weights in {folder} lack {len(absent)} tensors "
                               f"(first: {absent[0]})")
    model.load_state_dict({k: v for k, v in state.items() if k in wanted})
    model.eval()
    return Encoder(model, Tokenizer.from_file(str(folder / "tokenizer.json")), identity, name)


@dataclass
class Hidden:
    """Hidden states at the cut: ``X[i, :lengths[i]]`` are review i's tokens."""

    X: np.ndarray           # (n, max_len, d) float32, zero padded
    lengths: np.ndarray     # (n,) int64
    key: str

    def pooled(self) -> np.ndarray:
        """Mean over each review's tokens (the head's pooling): (n, d)."""
        return self.X.sum(axis=1) / self.lengths[:, None]


def cache_key(encoder: Encoder, data_sha256: str, texts: Sequence[str], layer: int,
              max_len: int) -> str:
    text_hash = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
    blob = json.dumps({"model": encoder.identity, "data": data_sha256, "texts": text_hash,
                       "layer": layer, "max_len": max_len, "format": CACHE_FORMAT},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def tokenize(encoder: Encoder, texts: Sequence[str], max_len: int) -> list[list[int]]:
    tok = encoder.tokenizer
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return [e.ids for e in tok.encode_batch(list(texts))]


def extended_mask(mask):
    """(B, S) 1/0 → additive (B, 1, 1, S): 0 where attended, the dtype's min elsewhere."""
    import torch
    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def run_layers(layers, h, mask):
    """BertLayer stack on hidden states (transformers 4 returns tuples, 5 tensors)."""
    ext = extended_mask(mask)
    for layer in layers:
        out = layer(h, attention_mask=ext)
        h = out[0] if isinstance(out, tuple) else out
    return h


def lower_hidden(encoder: Encoder, ids: list[list[int]], layer: int, batch: int,
                 progress: Callable[[int], None]) -> list[np.ndarray]:
    """hidden_states[layer] at every real token, by batches of similar length."""
    import torch
    model = encoder.model
    order = np.argsort([len(x) for x in ids], kind="stable")
    out: list[np.ndarray | None] = [None] * len(ids)
    with torch.no_grad():
        for start in range(0, len(order), batch):
            chunk = order[start:start + batch]
            S = max(len(ids[i]) for i in chunk)
            input_ids = torch.zeros((len(chunk), S), dtype=torch.long)
            mask = torch.zeros((len(chunk), S), dtype=torch.long)
            for row, i in enumerate(chunk):
                input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
                mask[row, :len(ids[i])] = 1
            h = model.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))
            h = run_layers(model.encoder.layer[:layer], h, mask)
            for row, i in enumerate(chunk):
                out[i] = h[row, :len(ids[i])].numpy().astype(np.float32)
            progress(len(chunk))
    return out  # type: ignore[return-value]


def pad(tokens: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    X = np.zeros((len(tokens), int(lengths.max()), tokens[0].shape[1]), dtype=np.float32)
    for i, t in enumerate(tokens):
        X[i, :len(t)] = t
    return X, lengths


def read_cache(path: Path, n: int, hidden: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The cached ``(hidden, offsets)`` if ``path`` holds what :func:`hidden_states` writes
    for ``n`` texts of ``hidden`` dimensions; None if there is no file or it is damaged
    (truncated, foreign, wrong shapes: recomputed and replaced atomically). An entry that is
    not a regular file is refused before the frozen layers run (it could not be replaced)."""
    import stat
    import zipfile
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError("--cache-dir", str(path.parent), f"cannot read the cache entry "
                         f"{path.name} ({err.strerror}); remove it") from None
    if not stat.S_ISREG(mode):
        raise InputError("--cache-dir", str(path.parent), f"the cache entry {path.name} is "
                         "not a regular file; remove it")
    try:   # opened as a regular file only (it could have become a FIFO since the stat)
        with open_input(path, "--cache-dir") as f, np.load(f, allow_pickle=False) as z:
            flat, offsets = z["hidden"], z["offsets"]
    except (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile):
        # TypeError: a .npy there, not an .npz (no context manager)
        return None
    ok = (flat.ndim == 2 and flat.shape[1] == hidden and flat.dtype == np.float32
          and offsets.shape == (n + 1,) and offsets.dtype.kind == "i" and offsets[0] == 0
          and offsets[-1] == len(flat) and bool(np.all(np.diff(offsets) >= 1))
          and bool(np.isfinite(flat).all()))
    return (flat, offsets) if ok else None


def hidden_states(encoder: Encoder, texts: Sequence[str], data_sha256: str, *, layer: int,
                  max_len: int, cache_dir: Path | None, batch: int = 32,
                  progress: Callable[[int], None] = lambda n: None) -> tuple[Hidden, bool]:
    """Hidden states at ``layer`` for every text, from the cache when it holds them.
    Returns ``(hidden, from_cache)``."""
    if not 1 <= layer < encoder.num_layers:
        raise InputError("--layer", layer, f"expected 1 .. {encoder.num_layers - 1} (the "
                         "cut must leave at least one trainable layer on top)")
    key = cache_key(encoder, data_sha256, texts, layer, max_len)
    path = cache_dir / f"hidden-{key}.npz" if cache_dir is not None else None
    cached = read_cache(path, len(texts), encoder.hidden) if path is not None else None
    if cached is not None:
        flat, offsets = cached
        tokens = [flat[offsets[i]:offsets[i + 1]] for i in range(len(texts))]
        progress(len(texts))
        return Hidden(*pad(tokens), key), True
    tokens = lower_hidden(encoder, tokenize(encoder, texts, max_len), layer, batch, progress)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64)
        flat = np.concatenate(tokens)

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, hidden=flat, offsets=offsets)
        write_atomic(path, write, option="--cache-dir", follow_symlinks=False)   # replace a link
    return Hidden(*pad(tokens), key), False
