"""The two architectures, stacked 1, 2 or 3 times (torch).

A prompt arrives as ``(context, query)``: ``context`` (B, N, width) holds the tokens
``[x_i; y_i]``, ``query`` (B, width) holds ``[x_q; 0]``. Every position (context tokens
and query alike) attends to the N context tokens only, so the query never sees itself and
no label leaks into the prediction except through attention. The last layer only updates
the query, since nothing reads the context after it (the same function, computed faster).

``attention``: the theory's model, stacked. Per layer one softmax head with query, key,
value and output matrices (width × width, no bias), logits ``(W_Q h_q)ᵀ(W_K h_i)`` without
the 1/√width factor (as ``xᵀQx`` in the theory), and a residual connection; no LayerNorm,
no MLP. The prediction is the query's label slot.

``standard``: a conventional pre-LayerNorm block (one head with biases and the 1/√width
factor, then an MLP width → 4·width → width with GELU, each in a residual branch), a final
LayerNorm and a linear head reading the query.

Initialisation is PyTorch's default for every ``nn.Linear`` and ``nn.LayerNorm``.

Two more models, the lowest rungs of the ladder (``oodcalc reproduce ladder``):

``theory``: the literal model of docs/theory.md. One merged ``Q`` (features × features,
zero at the start) acting on the tokens' feature coordinates only, the value of a token is
its label and nothing reads it out: ``ŷ = Σ_i softmax_i(x_iᵀ Q x_q) y_i``.

``readout``: the same merged ``Q`` (zero at the start, features only), with learned value
and output matrices (width × width, no bias, PyTorch's default initialisation, drawn as the
``attention`` layer draws its own, so that at the same seed they start equal) and the
residual connection; the prediction is the query's label slot, as in ``attention``.

Every model has ``feature_logits(tokens)``: for ``tokens`` (K, width) = ``[f_k; 0]``, one
K × K matrix per layer, ``z[n, k]`` = the logit of key ``f_n`` for query ``f_k`` computed by
that layer's score function on the bare feature tokens (after the block's LayerNorm in
``standard``), whatever the earlier layers would have added to them.
"""

from __future__ import annotations

import math

import torch
from torch import nn


__all__ = [
    "AttentionLayer", "AttentionOnly", "MergedQ", "Readout", "Standard", "StandardBlock",
    "Theory", "build", "feature_logits",
]


class AttentionLayer(nn.Module):
    def __init__(self, width: int, bias: bool = False, scale: float = 1.0) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=bias) for _ in range(4))
        self.scale = scale

    def feature_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """``z[n, k] = (W_Q t_k)ᵀ(W_K t_n)``, scaled as in ``forward``."""
        return self.k(tokens) @ self.q(tokens).T * self.scale

    def forward(self, context: torch.Tensor, query: torch.Tensor, last: bool):
        """The attention branch's output for the query and (unless ``last``) the context."""
        k, v = self.k(context), self.v(context)
        weights = torch.softmax(torch.einsum("bnd,bd->bn", k, self.q(query)) * self.scale, -1)
        out_query = self.o(torch.einsum("bn,bnd->bd", weights, v))
        if last:
            return None, out_query
        weights = torch.softmax(self.q(context) @ k.transpose(1, 2) * self.scale, -1)
        return self.o(weights @ v), out_query


class AttentionOnly(nn.Module):
    """The theory's one-layer model, stacked: residual softmax attention, nothing else."""

    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(AttentionLayer(width) for _ in range(layers))

    def forward(self, context: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            last = i == len(self.blocks) - 1
            out_context, out_query = block(context, query, last)
            query = query + out_query
            if not last:
                context = context + out_context
        return query[:, -1]

    def feature_logits(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        return [block.feature_logits(tokens) for block in self.blocks]


class MergedQ(nn.Module):
    """The theory's score: ``x_iᵀ Q x_q`` on the feature coordinates (all but the label
    slot), ``Q`` zero at the start."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.Q = nn.Parameter(torch.zeros(width - 1, width - 1))

    def weights(self, context: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        logits = torch.einsum("bnd,de,be->bn", context[..., :-1], self.Q, query[:, :-1])
        return torch.softmax(logits, -1)

    def feature_logits(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        x = tokens[:, :-1]
        return [x @ self.Q @ x.T]


class Theory(MergedQ):
    """docs/theory.md's model: ``ŷ = Σ_i softmax_i(x_iᵀ Q x_q) y_i``."""

    def forward(self, context: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return (self.weights(context, query) * context[..., -1]).sum(-1)


class Readout(MergedQ):
    """The merged ``Q`` with a learned value and output read-out and the residual."""

    def __init__(self, width: int) -> None:
        super().__init__(width)
        layer = AttentionLayer(width)       # drawn as attention's layer draws (q, k, v, o)
        self.v, self.o = layer.v, layer.o

    def forward(self, context: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        attended = torch.einsum("bn,bnd->bd", self.weights(context, query), self.v(context))
        return query[:, -1] + self.o(attended)[:, -1]


class StandardBlock(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = AttentionLayer(width, bias=True, scale=1 / math.sqrt(width))
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, context: torch.Tensor, query: torch.Tensor, last: bool):
        normed = self.norm1(context)
        out_context, out_query = self.attention(normed, self.norm1(query), last)
        query = query + out_query
        query = query + self.mlp(self.norm2(query))
        if not last:
            context = context + out_context
            context = context + self.mlp(self.norm2(context))
        return context, query

    def feature_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.attention.feature_logits(self.norm1(tokens))


class Standard(nn.Module):
    """Pre-LayerNorm transformer blocks with an MLP, a final LayerNorm and a linear head."""

    def __init__(self, layers: int, width: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = 4 * width if hidden is None else hidden
        self.blocks = nn.ModuleList(StandardBlock(width, hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 1)

    def forward(self, context: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            context, query = block(context, query, i == len(self.blocks) - 1)
        return self.head(self.norm(query))[:, 0]

    def feature_logits(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        return [block.feature_logits(tokens) for block in self.blocks]


def build(arch: str, layers: int, width: int, seed: int) -> nn.Module:
    """A freshly initialised model; the same seed gives the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch == "theory":
            return Theory(width)
        if arch == "readout":
            return Readout(width)
        if arch == "attention":
            return AttentionOnly(layers, width)
        return Standard(layers, width)


def feature_logits(model: nn.Module, features: torch.Tensor) -> list[list[list[float]]]:
    """Per layer, the K × K logits on the bare feature tokens ``[f_k; 0]`` (``features``
    is D × K, one column per feature)."""
    tokens = torch.cat([features.T, torch.zeros(features.shape[1], 1, dtype=features.dtype)], 1)
    with torch.inference_mode():
        return [z.double().tolist() for z in model.feature_logits(tokens.to(
            next(model.parameters()).dtype))]
