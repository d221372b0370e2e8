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
"""

from __future__ import annotations

import math

import torch
from torch import nn


class AttentionLayer(nn.Module):
    def __init__(self, width: int, bias: bool = False, scale: float = 1.0) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=bias) for _ in range(4))
        self.scale = scale

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


def build(arch: str, layers: int, width: int, seed: int) -> nn.Module:
    """A freshly initialised model; the same seed gives the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch == "attention":
            return AttentionOnly(layers, width)
        return Standard(layers, width)
