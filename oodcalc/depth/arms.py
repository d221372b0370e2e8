"""Intervention arms for the torch experiments (issue 31): what each does to a fine-tuning
step, its parameter, and the theory's exact counterpart at the rung where the theory
applies (docs/theory.md's model, the ladder's ``theory`` rung).

One module for every torch experiment: :class:`Arm` is the specification (no torch; the
CLI validates it before importing torch), :class:`Intervention` acts on a torch model's
fine-tuning step given the source features, source prompts and the pretrained weights:

==================== ========= ==============================================================
arm (CLI name)       parameter what it does to a fine-tuning step
==================== ========= ==============================================================
plain                —         nothing (the depth protocol as it is)
replay               λ = 0.25  round(λ·batch) of each batch's prompts come from the source V
l2                   μ = 0.01  adds μ(θ − θ₀) to every gradient: the loss μ‖θ − θ₀‖²/2
reweight             —         per-sample loss × c(x_q) = max(cos(x_q, v̄), 0) / mean_k of it
                               over the fine-tuning features (v̄: the source features' mean)
drop-negative        τ = 0     per-sample loss × [cos(x_q, v̄) >= τ]: the rest are dropped
project-input        —         every weight's gradient off span{[v_k; 0]} on its input side
                               (weights reading the width-dim stream; the paper's advice)
project-activations  e = 0.99  every weight's gradient off the top directions (energy share
                               e) of that weight's own inputs on the source prompts (GPM /
                               OGD-style)
project-qk           —         project-input on W_Q and W_K only (the merged Q: both sides)
project-value        —         project-input on W_V and W_O only (nothing in the theory model)
project-all          e = 0.99  every weight off span{[v_k; 0]} and its source activations
==================== ========= ==============================================================

Biases and LayerNorm gains have no input side and are never projected; a weight whose input
is not the width-dim stream (the MLP's second layer) is projected by ``project-activations``
and ``project-all`` only. With Adam the projection applies to the gradient (as OGD does);
Adam's per-coordinate scaling can take the update out of the subspace.

The stopping rule of a fine-tuning with an arm covers the target features the arm trains:
those with a positive sample weight (``reweight``, ``drop-negative``), and, for the
projections that touch the query side, those whose query is not inside span(V) (the
theory's frozen columns: :func:`oodcalc.finetune.terms.frozen_columns`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import InputError, param

__all__ = [
    "ARMS", "Arm", "COS_ROUND_OFF", "Intervention", "PARAMETERS", "PROJECTIONS", "Projection",
    "ROUND_OFF", "arms_text", "by_name", "check_replay_batch", "parse", "replay_count",
    "theory_text", "top_directions", "torch_where_small", "weighted_loss",
]

#: name → (parameter name, default, accepted range text, check) ; None: no parameter
PARAMETERS: dict[str, tuple[str, float, str, Callable[[float], bool]] | None] = {
    "plain": None,
    "replay": ("share", 0.25, "a share λ with 0 < λ < 1", lambda x: 0 < x < 1),
    "l2": ("mu", 0.01, "a finite μ >= 0", lambda x: x >= 0),
    "reweight": None,
    "drop-negative": ("threshold", 0.0, "a cosine threshold τ with -1 <= τ < 1",
                      lambda x: -1 <= x < 1),
    "project-input": None,
    "project-activations": ("energy", 0.99, "an energy share e with 0 < e <= 1",
                            lambda x: 0 < x <= 1),
    "project-qk": None,
    "project-value": None,
    "project-all": ("energy", 0.99, "an energy share e with 0 < e <= 1", lambda x: 0 < x <= 1),
}
ARMS = tuple(PARAMETERS)
PROJECTIONS = ("project-input", "project-activations", "project-qk", "project-value",
               "project-all")
#: The eigen-directions of a weight's source inputs below this share of the largest are
#: round-off, never kept (float32 activations).
ROUND_OFF = 1e-6


@dataclass(frozen=True)
class Arm:
    """One arm and its parameter (None for the arms without one)."""

    name: str = "plain"
    value: float | None = None

    def __post_init__(self) -> None:
        if self.name not in PARAMETERS:
            raise InputError("arm", self.name, f"expected one of {', '.join(ARMS)}")
        spec = PARAMETERS[self.name]
        if spec is None:
            if self.value is not None:
                raise InputError("arm", f"{self.name}:{self.value}",
                                 f"{self.name} takes no parameter")
            return
        key, default, accepted, ok = spec
        value = default if self.value is None else self.value
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise InputError("arm", f"{self.name}:{self.value}",
                             f"expected {accepted} ({key})") from None
        if isinstance(self.value, bool) or not math.isfinite(value) or not ok(value):
            raise InputError("arm", f"{self.name}:{self.value}", f"expected {accepted} ({key})")
        object.__setattr__(self, "value", value + 0.0)

    @property
    def plain(self) -> bool:
        return self.name == "plain"

    @property
    def label(self) -> str:
        spec = PARAMETERS[self.name]
        return self.name if spec is None else f"{self.name} ({spec[0]} {self.value:g})"

    def describe(self) -> dict[str, Any]:
        """What enters a run's parameters (and so its cache key)."""
        spec = PARAMETERS[self.name]
        return {"name": self.name} if spec is None else {"name": self.name, spec[0]: self.value}

    def theory(self) -> dict[str, Any] | None:
        """The theory's intervention for this arm at the theory rung (``oodcalc.predict``'s
        Protocol fields), or None: no theory counterpart."""
        n, x = self.name, self.value
        if n in ("plain", "project-value"):   # the theory model has no value path
            return {}
        if n == "replay":
            return {"replay": x}
        if n == "l2":
            return {"l2": x}
        if n == "reweight":
            return {"weights": "cosine"}
        if n == "drop-negative":
            return {"weights": "drop-negative"} if x == 0 else None
        return {"project": "both"}           # the merged Q reads features on both sides


def parse(text: str, option: str = "--arms") -> tuple[Arm, ...]:
    """``NAME[:VALUE],...`` → arms, plain first (every contrast is against it); one-line
    errors naming ``option``."""
    arms = [Arm()]
    for part in (p.strip() for p in text.split(",")):
        name, _, value = part.partition(":")
        if name not in PARAMETERS:
            raise InputError(option, repr(text), f"unknown arm {name!r}; expected "
                             f"NAME[:VALUE] with NAME one of {', '.join(ARMS)}")
        spec = PARAMETERS[name]
        if value and spec is None:
            raise InputError(option, repr(text), f"{name} takes no parameter")
        try:
            number = float(value) if value else None
        except ValueError:
            number = math.nan
        try:
            arm = Arm(name, number)
        except InputError:
            raise InputError(option, repr(text), f"{name}: expected {spec[2]} "
                             f"({spec[0]}, default {spec[1]:g})") from None
        if arm not in arms:
            arms.append(arm)
    return tuple(arms)


def replay_count(arm: Arm | None, batch: int) -> int:
    """Prompts of a batch of ``batch`` that replay draws from the source."""
    return 0 if arm is None or arm.name != "replay" else round(arm.value * batch)


def check_replay_batch(arm: Arm | None, batch: int) -> None:
    if arm is not None and arm.name == "replay":
        share = arm.value * batch
        if abs(share - round(share)) > 1e-9 or round(share) in (0, batch):
            raise InputError(param("DepthConfig.arm"), arm.label, f"replay: expected a share "
                             f"λ with λ × batch a whole "
                             f"number of prompts strictly between 0 and batch = {batch}")


# --- torch -------------------------------------------------------------------------------

def _projector_off(directions, n: int):
    """``I − B Bᵀ`` for an orthonormal basis ``B`` (n × r) of the directions (n × m)."""
    import torch
    if directions is None or directions.shape[1] == 0:
        return torch.eye(n, dtype=torch.float64)
    q, r = torch.linalg.qr(directions.double())
    keep = torch.abs(torch.diagonal(r)) > ROUND_OFF * torch.abs(torch.diagonal(r)).max()
    q = q[:, keep]
    return torch.eye(n, dtype=torch.float64) - q @ q.T


def top_directions(second_moment, energy: float):
    """The leading eigenvectors of an (uncentred) second moment ``XᵀX`` whose eigenvalues
    hold the share ``energy`` of its trace (round-off directions never kept)."""
    import torch
    values, vectors = torch.linalg.eigh(second_moment.double())
    values, vectors = values.flip(0).clamp_min(0), vectors.flip(1)
    if values[0] <= 0:
        return vectors[:, :0]
    share = torch.cumsum(values, 0) / values.sum()
    r = int(torch.searchsorted(share, torch.tensor(energy * (1 - 1e-12), dtype=share.dtype))) + 1
    r = min(r, int((values > ROUND_OFF * values[0]).sum()))
    return vectors[:, :r]


#: a cosine ``|cos|`` at or below this is round-off of a zero cosine (float32 features: ~1e-8)
COS_ROUND_OFF = 1e-6


def torch_where_small(cos):
    import torch
    return torch.where(cos.abs() <= COS_ROUND_OFF, torch.zeros_like(cos), cos)


@dataclass
class Projection:
    """``grad ← L grad R`` on one parameter (None: the identity on that side)."""

    parameter: Any
    left: Any = None
    right: Any = None

    def apply(self) -> None:
        g = self.parameter.grad
        if g is None:
            return
        out = g.double()
        if self.left is not None:
            out = self.left @ out
        if self.right is not None:
            out = out @ self.right
        g.copy_(out.to(g.dtype))


class Intervention:
    """An arm acting on one fine-tuning of one torch model.

    ``source`` (D × K) are the source features, ``target`` (D × K) the fine-tuning features
    (the sample weights' normaliser and the rule's coverage read them), ``source_inputs``
    a callable feeding source prompts through the model (``project-activations`` records
    every weight's inputs during it), all at the start of fine-tuning (``model`` holds the
    pretrained weights θ₀)."""

    def __init__(self, arm: Arm | None, model, source, target,
                 source_inputs: Callable[[], None] | None = None) -> None:
        import torch
        self.arm = arm if arm is not None else Arm()
        self.model = model
        self.source = source.double()
        self.target = target.double()
        name = self.arm.name
        self.anchor = ([(p, p.detach().clone()) for p in model.parameters()]
                       if name == "l2" else [])
        centre = self.source.mean(1)
        self.centre = centre / centre.norm()
        self.normaliser = 1.0
        if name == "reweight":
            cos = self.cosines(self.target.T)
            self.normaliser = float(torch.clamp_min(cos, 0).mean())
        self.projections: list[Projection] = (
            self._projections(source_inputs) if name in PROJECTIONS else [])

    # the per-sample weights (reweight, drop-negative) --------------------------------
    def cosines(self, x):
        """``cos(x, v̄)`` of each row of ``x`` (the query's features), a round-off from 0
        (``|cos| <= COS_ROUND_OFF``: float32 features, e.g. u2 ⟂ v̄ at γ = 0) set to 0 exactly,
        as the theory's exact geometry has it."""
        x = x.double()
        cos = (x @ self.centre) / x.norm(dim=-1).clamp_min(1e-300)
        return torch_where_small(cos)

    def sample_weights(self, queries):
        """Per-sample loss weights for target queries (their feature coordinates), or None."""
        import torch
        if self.arm.name == "reweight":
            return torch.clamp_min(self.cosines(queries), 0) / self.normaliser
        if self.arm.name == "drop-negative":
            return (self.cosines(queries) >= self.arm.value).double()
        return None

    def covered(self):
        """The target features the stopping rule covers (a bool per feature)."""
        import torch
        K = self.target.shape[1]
        keep = torch.ones(K, dtype=torch.bool)
        w = self.sample_weights(self.target.T)
        if w is not None:
            keep &= w > 0
        if self.arm.name in ("project-input", "project-activations", "project-qk",
                             "project-all"):
            P = _projector_off(self.source, self.source.shape[0])
            keep &= (P @ self.target).norm(dim=0) ** 2 > 1e-12   # u_k not inside span(V)
        return keep.numpy()

    # the gradient's changes ------------------------------------------------------------
    def after_backward(self) -> None:
        """Project the gradients, then add the pull μ(θ − θ₀) (an l2 of μ = 0 adds zeros:
        the same numbers as plain)."""
        for projection in self.projections:
            projection.apply()
        for p, p0 in self.anchor:
            if p.grad is not None:
                p.grad.add_(p.detach() - p0, alpha=self.arm.value)

    def _projections(self, source_inputs) -> list[Projection]:
        import torch
        from torch import nn

        from .models import MergedQ
        name, model = self.arm.name, self.model
        D = self.source.shape[0]
        stream = torch.cat([self.source, torch.zeros(1, self.source.shape[1],
                                                     dtype=torch.float64)])   # [v_k; 0]
        uses_span = name in ("project-input", "project-qk", "project-value", "project-all")
        uses_acts = name in ("project-activations", "project-all")
        moments = self._input_moments(source_inputs) if uses_acts else {}

        def wanted(role: str) -> bool:
            return (name in ("project-input", "project-activations", "project-all")
                    or (name == "project-qk" and role in ("q", "k"))
                    or (name == "project-value" and role in ("v", "o")))

        def off(n: int, key) -> Any:
            parts = []
            if uses_span and n == stream.shape[0]:
                parts.append(stream)
            elif uses_span and n == D:
                parts.append(self.source)
            if uses_acts and key in moments:
                parts.append(top_directions(moments[key], self.arm.value))
            if not parts:
                return None
            return _projector_off(torch.cat(parts, 1), n)

        out = []
        for module_name, module in model.named_modules():
            role = module_name.rsplit(".", 1)[-1]
            if isinstance(module, MergedQ) and wanted("q"):
                # logits = x_keyᵀ Q x_query: rows read keys (context), columns queries
                left = off(D, (module_name, "key"))
                right = off(D, (module_name, "query"))
                if left is not None or right is not None:
                    out.append(Projection(module.Q, left, right))
            elif isinstance(module, nn.Linear) and wanted(role):
                right = off(module.in_features, module_name)
                if right is not None:
                    out.append(Projection(module.weight, None, right))
        return out

    def _input_moments(self, source_inputs) -> dict:
        """Every weight's uncentred input second moment ``XᵀX`` on the source prompts."""
        import torch
        from torch import nn

        from .models import MergedQ
        moments: dict = {}

        def add(key, x):
            x = x.detach().reshape(-1, x.shape[-1]).double()
            moments[key] = moments.get(key, 0) + x.T @ x

        hooks = []
        for module_name, module in self.model.named_modules():
            if isinstance(module, nn.Linear):
                hooks.append(module.register_forward_hook(
                    lambda m, args, out, key=module_name: add(key, args[0])))
            elif isinstance(module, MergedQ):
                hooks.append(module.register_forward_hook(
                    lambda m, args, out, key=module_name: (
                        add((key, "key"), args[0][..., :-1]),
                        add((key, "query"), args[1][..., :-1]))))
        try:
            with torch.inference_mode():
                source_inputs()
        finally:
            for h in hooks:
                h.remove()
        return moments


def weighted_loss(prediction, target, weights=None):
    """``½ mean_b w_b (ŷ_b − y_b)²`` (``weights`` None: the plain loss, bit for bit)."""
    squared = (prediction - target) ** 2
    if weights is not None:
        squared = squared * weights.to(squared.dtype)
    return 0.5 * squared.mean()


def arms_text(arms: Iterable[Arm]) -> str:
    return ", ".join(a.label for a in arms)


def theory_text(arm: Arm) -> str:
    t = arm.theory()
    if t is None:
        return "no theory counterpart"
    return "plain" if not t else ", ".join(f"{k}={v}" for k, v in t.items())


def by_name(arms: Sequence[Arm], name: str) -> Arm:
    return next(a for a in arms if a.name == name)
