"""The registry of MODEL.md's claims: one entry per claim.

``derive``, the derivation documents, ``verify`` and the tests all iterate ``CLAIMS``;
adding a claim means adding one entry here. Each entry names its symbolic derivation and
its numeric check by dotted path (``"module:function"``), imported only when used, so
``oodcalc predict`` never pays for sympy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .errors import InputError


@dataclass(frozen=True)
class Claim:
    number: int
    key: str                    # short slug, accepted wherever a claim is named
    title: str
    statement: str              # one line, plain Unicode
    derivation: str | None = None   # "module:function" → symbolic derivation
    numeric_check: str | None = None  # "module:function" → numeric check vs simulation
    #: what the symbolic engine proves: "symbolic K", "explicit K", "numeric only" or
    #: "rests on the paper" (tests keep it equal to the derivation's own status)
    proof: str | None = None

    def load(self, attribute: str) -> Callable[..., Any] | None:
        target = getattr(self, attribute)
        if target is None:
            return None
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)


CLAIMS: tuple[Claim, ...] = (
    Claim(1, "aggregated-attention", "Aggregated attention",
          "Attn_v = e^{α_v} / (e^{α_v} + Σ_{v'≠v} e^{β_{v',v}}) in the population limit.",
          numeric_check="oodcalc.verify:check_claim_1",
          derivation="oodcalc.symbolic.aggregated:derive", proof="symbolic K"),
    Claim(2, "conservation", "Conservation law",
          "At every GD step the growth of α_{v_k} equals the total decrease of the "
          "β_{v_n,v_k}, n ≠ k: Δ_{k,α} = Σ_{n≠k} Λ_{k,n,β}.",
          numeric_check="oodcalc.verify:check_claim_2",
          derivation="oodcalc.symbolic.conservation:derive", proof="symbolic K"),
    Claim(3, "convergence", "Convergence at T1",
          "At T1 every α equals α*_{K,ε} (closed form from the stopping rule) and every "
          "β equals −α*_{K,ε}/(K−1); Q^(T1) = α*K/(K−1)(VVᵀ − v̄v̄ᵀ).",
          numeric_check="oodcalc.verify:check_claim_3",
          derivation="oodcalc.symbolic.convergence:derive", proof="symbolic K"),
    Claim(4, "t1-growth", "T1 is polynomial",
          "T1 = poly(1/ε, K, 1/η).",
          numeric_check="oodcalc.verify:check_claim_4",
          derivation="oodcalc.symbolic.growth:derive", proof="numeric only"),
    Claim(5, "ood-weights", "OOD weights at T1",
          "α_{u_k} = Kα*/(K−1)([MᵀM]_kk − ⟨u_k,v̄⟩²), β_{u_k',u_k} = Kα*/(K−1)"
          "([MᵀM]_k'k − ⟨u_k,v̄⟩⟨u_k',v̄⟩), with M = VᵀU.",
          numeric_check="oodcalc.verify:check_claim_5",
          derivation="oodcalc.symbolic.ood:derive", proof="symbolic K"),
    Claim(6, "corollary", "Two failure cases",
          "span(V) ⊥ span(U), or u_k = v̄ with span(U) = span(V), gives α = β = 0, "
          "attention 1/K and the error of random guessing.",
          numeric_check="oodcalc.verify:check_claim_6",
          derivation="oodcalc.symbolic.corollary:derive", proof="symbolic K"),
    Claim(7, "finetune-projection", "Fine-tuning seen from the source",
          "Under a parallel shift, α_{v_k} gains γ_k² Δ_{k,α} and β_{v_n,v_k} changes by "
          "−γ_kγ_n Λ_{n,k,β} over fine-tuning.",
          numeric_check="oodcalc.verify:check_claim_7",
          derivation="oodcalc.symbolic.finetune:derive", proof="symbolic K"),
    Claim(8, "forgetting-threshold", "Forgetting threshold",
          "−γ_kγ_m0 > γ_k² (m0 = argmax γ_kγ_m) makes L_{v_k} rise through fine-tuning; "
          "−γ_kγ_m1 < γ_k² (m1 = argmin) makes it fall.",
          numeric_check="oodcalc.verify:check_claim_8",
          derivation="oodcalc.symbolic.forgetting:derive", proof="symbolic K"),
    Claim(9, "step-size", "Fine-tuning step size",
          "η <= min_{n≠k} exp(−β_{u_n,u_k}^(T1)).",
          numeric_check="oodcalc.verify:check_claim_9",
          derivation="oodcalc.symbolic.stepsize:derive", proof="rests on the paper"),
)


def get_claim(name: str | int) -> Claim:
    """A claim by number (``3``, ``"3"``) or key (``"convergence"``)."""
    text = str(name).strip().lower()
    for claim in CLAIMS:
        if text in (str(claim.number), claim.key):
            return claim
    accepted = ", ".join(f"{c.number} ({c.key})" for c in CLAIMS)
    raise InputError("claim", repr(name), f"expected one of {accepted}")
