"""The trainable part on top of the cached hidden states: the encoder's upper layers
(copied from the pretrained weights), mean pooling over tokens and a linear head, trained
with cross-entropy. Rotations of pairs of hidden dimensions act on its input.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .encoder import Encoder, Hidden, extended_mask


__all__ = [
    "L2_GRID", "PARTS", "Rotation", "Training", "batches", "dimension_pairs",
    "head_difference", "init_head", "logistic", "losses", "make_top", "pooled_outputs",
    "probe", "train", "train_batches",
]


#: The parts of the trained top a fine-tuning can move on their own, by the prefixes of
#: their parameters' names: the attention block (scores, values, output projection and
#: LayerNorm), the linear head, the block's scores alone (W_Q, W_K: what the theory's
#: logits are) and the rest of the block (W_V, the output projection, LayerNorm).
PARTS = {"attention": ("attention.",), "head": ("head.",),
         "scores": ("attention.self.query.", "attention.self.key."),
         "values": ("attention.self.value.", "attention.output.")}


@dataclass(frozen=True)
class Training:
    """Fine-tuning protocol (AdamW, constant learning rate): a fixed number of epochs, or,
    with ``steps``, exactly that many optimizer steps (batches drawn epoch after epoch)."""

    epochs: int = 4
    lr: float = 1e-4
    batch: int = 16
    weight_decay: float = 0.01
    steps: int | None = None

    def describe(self) -> dict:
        length = {"epochs": self.epochs} if self.steps is None else {"steps": self.steps}
        return {"optimizer": "AdamW", **length, "lr": self.lr, "batch": self.batch,
                "weight_decay": self.weight_decay}


@dataclass(frozen=True)
class Rotation:
    """Turn each pair (a_i, b_i) of hidden dimensions by θ:
    h_a ← cos θ h_a − sin θ h_b, h_b ← sin θ h_a + cos θ h_b (an orthogonal map)."""

    a: np.ndarray
    b: np.ndarray
    theta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", np.array(self.a, dtype=np.int64))   # contiguous copies
        object.__setattr__(self, "b", np.array(self.b, dtype=np.int64))

    def matrix(self, d: int) -> np.ndarray:
        R = np.eye(d)
        c, s = np.cos(self.theta), np.sin(self.theta)
        R[self.a, self.a], R[self.a, self.b] = c, -s
        R[self.b, self.a], R[self.b, self.b] = s, c
        return R

    def apply(self, h):
        """On a torch tensor (..., d) or a numpy array (..., d); returns a new one."""
        c, s = float(np.cos(self.theta)), float(np.sin(self.theta))
        out = h.clone() if hasattr(h, "clone") else h.copy()
        ha, hb = h[..., self.a], h[..., self.b]
        out[..., self.a] = c * ha - s * hb
        out[..., self.b] = s * ha + c * hb
        return out


def make_top(encoder: Encoder, layer: int, seed: int):
    """The pretrained attention block of layer ``layer`` (self-attention, output
    projection, residual and LayerNorm; a deep copy), then mean pooling over the tokens,
    dropout and a fresh 2-class head. The block's feed-forward part is left out: the top
    is one softmax-attention layer with a linear read-out. (Not the theory's model: that
    has one head, one trained matrix Q = W_Kᵀ W_Q, labels as values and a squared loss.)"""
    import torch
    from torch import nn

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = copy.deepcopy(encoder.model.encoder.layer[layer].attention)
            self.dropout = nn.Dropout(encoder.model.config.hidden_dropout_prob)
            self.head = nn.Linear(encoder.hidden, 2)

        def pooled(self, h, mask):
            out = self.attention(h, attention_mask=extended_mask(mask))
            h = out[0] if isinstance(out, tuple) else out
            m = mask.unsqueeze(-1).to(h.dtype)
            return (h * m).sum(1) / m.sum(1)

        def forward(self, h, mask):
            return self.head(self.dropout(self.pooled(h, mask)))

    torch.manual_seed(seed)
    return Top()


def init_head(top, hidden: Hidden, labels: np.ndarray, idx: np.ndarray) -> None:
    """Linear probe first, then fine-tune (LP-FT): the head starts at the logistic
    regression on the untrained block's pooled outputs, so that fine-tuning starts from a
    sensible read-out instead of a random one."""
    import torch
    w, bias = probe(pooled_outputs(top, hidden, idx), labels[idx])
    with torch.no_grad():
        top.head.weight.copy_(torch.from_numpy(np.stack([-w / 2, w / 2])).float())
        top.head.bias.copy_(torch.tensor([-bias / 2, bias / 2], dtype=torch.float32))


def head_difference(top, hidden: Hidden, idx: np.ndarray) -> np.ndarray:
    """What the trained head leans on, per hidden dimension: the difference of its two
    rows (positive minus negative) times the spread of the block's pooled output over
    examples ``idx``. The residual connection carries each input dimension to the same
    output dimension, so this ranks the rotations' dimensions by the read-out's use."""
    import torch
    with torch.no_grad():
        w = (top.head.weight[1] - top.head.weight[0]).numpy().astype(np.float64)
    return w * pooled_outputs(top, hidden, idx).std(axis=0)


def pooled_outputs(top, hidden: Hidden, idx: np.ndarray) -> np.ndarray:
    """The block's mean-pooled output on examples ``idx`` (eval mode, no rotation)."""
    import torch
    top.eval()
    with torch.no_grad():
        return np.concatenate([top.pooled(*_batch(hidden, b, None)).numpy()
                               for b in np.array_split(idx, max(1, len(idx) // 64))])


def _batch(hidden: Hidden, idx: np.ndarray, rotation: Rotation | None):
    import torch
    S = int(hidden.lengths[idx].max())
    h = torch.from_numpy(hidden.X[idx, :S])
    mask = torch.from_numpy((np.arange(S)[None, :] < hidden.lengths[idx, None]).astype(np.int64))
    return (rotation.apply(h) if rotation is not None else h), mask


def train_batches(lengths: np.ndarray, idx: np.ndarray, batch: int,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar length: shuffle, sort chunks of 4 batches by length,
    cut, shuffle the batches (less padding, still random)."""
    idx = rng.permutation(idx)
    chunk = 4 * batch
    ordered = np.concatenate([c[np.argsort(lengths[c], kind="stable")]
                              for c in np.array_split(idx, max(1, -(-len(idx) // chunk)))])
    batches = [ordered[i:i + batch] for i in range(0, len(ordered), batch)]
    return [batches[i] for i in rng.permutation(len(batches))]


def batches(lengths: np.ndarray, idx: np.ndarray, training: Training,
            rng: np.random.Generator):
    """The training's batches in order: ``epochs`` shuffled passes, or exactly ``steps``
    batches taken from as many passes as they need."""
    if training.steps is None:
        for _ in range(training.epochs):
            yield from train_batches(lengths, idx, training.batch, rng)
        return
    if len(idx) == 0:
        raise ValueError("no examples to fine-tune on")
    left = training.steps
    while left:
        epoch = train_batches(lengths, idx, training.batch, rng)[:left]
        yield from epoch
        left -= len(epoch)


def train(top, hidden: Hidden, labels: np.ndarray, idx: np.ndarray, training: Training,
          seed: int, rotation: Rotation | None = None, moving: str | None = None) -> None:
    """Fine-tune ``top`` in place on examples ``idx`` (optionally rotated); ``moving``
    (a key of :data:`PARTS`) moves that part alone, the rest keeps its weights."""
    import torch
    import torch.nn.functional as F

    if moving is not None and moving not in PARTS:
        raise ValueError(f"moving: expected one of {', '.join(PARTS)} or None, got {moving!r}")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    y = torch.from_numpy(labels.astype(np.int64))
    held = [p for name, p in top.named_parameters()
            if moving is not None and not name.startswith(PARTS[moving])]
    for p in held:
        p.requires_grad_(False)
    try:
        opt = torch.optim.AdamW([p for p in top.parameters() if p.requires_grad],
                                lr=training.lr, weight_decay=training.weight_decay)
        top.train()
        for b in batches(hidden.lengths, idx, training, rng):
            h, mask = _batch(hidden, b, rotation)
            loss = F.cross_entropy(top(h, mask), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        for p in held:
            p.requires_grad_(True)
        top.eval()


def losses(top, hidden: Hidden, labels: np.ndarray, idx: np.ndarray,
           rotation: Rotation | None = None, batch: int = 64) -> np.ndarray:
    """Per-example cross-entropy (nats) of ``top`` on examples ``idx``."""
    import torch
    import torch.nn.functional as F

    out = np.empty(len(idx))
    order = np.argsort(hidden.lengths[idx], kind="stable")
    y = torch.from_numpy(labels.astype(np.int64))
    top.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch):
            pos = order[start:start + batch]
            b = idx[pos]
            h, mask = _batch(hidden, b, rotation)
            out[pos] = F.cross_entropy(top(h, mask), y[b], reduction="none").numpy()
    return out


L2_GRID = (0.01, 0.1, 1.0)


def logistic(X: np.ndarray, y: np.ndarray, l2: float, iterations: int = 30) -> np.ndarray:
    """L2-regularised logistic regression by Newton's method (float64); X carries a last
    column of ones, whose weight (the bias) is not penalised."""
    n, p = X.shape
    reg = np.full(p, l2)
    reg[-1] = 0.0
    w = np.zeros(p)
    for _ in range(iterations):
        prob = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -30, 30)))
        grad = X.T @ (prob - y) / n + reg * w
        H = (X * (prob * (1 - prob))[:, None]).T @ X / n + np.diag(reg)
        step = np.linalg.solve(H, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w


def probe(pooled: np.ndarray, labels: np.ndarray, inner_folds: int = 3
          ) -> tuple[np.ndarray, float]:
    """Linear probe on pooled representations: logistic regression on standardised
    features, its L2 strength chosen from ``L2_GRID`` by inner cross-validation on these
    examples only. Returns (w, b) on the raw features: w is the difference of the two
    classes' weight vectors (positive minus negative), one entry per hidden dimension."""
    mu, sd = pooled.mean(axis=0), pooled.std(axis=0) + 1e-6
    X = np.hstack([(pooled - mu) / sd, np.ones((len(pooled), 1))])
    y = labels.astype(np.float64)
    folds = np.arange(len(y)) % inner_folds

    def held_out_loss(l2: float) -> float:
        total = 0.0
        for f in range(inner_folds):
            w = logistic(X[folds != f], y[folds != f], l2)
            z = X[folds == f] @ w
            total += float(np.sum(np.logaddexp(0, z) - y[folds == f] * z))
        return total

    w = logistic(X, y, min(L2_GRID, key=held_out_loss))
    w_raw = w[:-1] / sd
    return w_raw, float(w[-1] - w_raw @ mu)


def dimension_pairs(weights: np.ndarray, pairs: int, rng: np.random.Generator
                    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pairs of dimensions, by the probe's |weight difference|:
    scenario 1: the ``pairs`` largest, each with one of the ``pairs`` smallest;
    scenario 2: the ``2·pairs`` smallest, paired among themselves;
    all: every dimension, in a random perfect matching (then cos(h, Rh) = cos θ for every h)."""
    d = len(weights)
    if d < 4 * pairs:
        pairs = d // 4
    order = np.argsort(-np.abs(weights), kind="stable")       # largest first
    large, small = order[:pairs], order[::-1][:2 * pairs]
    perm = rng.permutation(d)[: d - d % 2]
    return {
        "scenario 1": (large, small[:pairs]),
        "scenario 2": (small[:pairs], small[pairs:]),
        "all": (perm[0::2], perm[1::2]),
    }
