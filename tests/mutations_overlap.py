"""The mutation tables of claims 13e–13g (oodcalc/claims/claim13_overlap_finetune.py), in
tests/test_mutations.py's format. test_mutations.py merges them into its own tables, so its
tests run them: the committed claim passes first, then each mutation (a wrong factor, a
dropped term, a flipped sign, a transposed M) fails the checks it names, every check of
13e–13g is killed by some mutation, and each ledger row fails under its numeric mutation.
Run them with ``python -m pytest -q tests/test_mutations.py -k 13``."""

from __future__ import annotations

import importlib

import numpy as np
import sympy as sp

C13 = "claim13_overlap_finetune"


def _mod():
    return importlib.import_module(f"oodcalc.claims.{C13}")


def claimed(**changes):
    """A mutation of claim 13e–g's CLAIMED dict (the derivations take it as ``claimed``)."""
    return lambda monkeypatch: {"claimed": {**_mod().CLAIMED, **changes}}


def linked(module: str, **changes):
    """A mutation of another claim's CLAIMED that 13e–g read (claims 7, 8c)."""
    def apply(monkeypatch):
        mod = importlib.import_module(f"oodcalc.claims.{module}")
        monkeypatch.setattr(mod, "CLAIMED", {**mod.CLAIMED, **changes})
        return {}
    return apply


def _k2_C(**how):
    """13f's closed form with one piece changed: ``power`` of (1 − ρ), the ``sign`` of the ρ
    term, the OOD margin ``own`` (αγ_k² instead of αγ_k(γ_k + γ_m)), or the whole ``flip``."""
    h_default = _mod()._h

    def C(rho, g_k, g_m, alpha, h=h_default):
        s_k = alpha * g_k ** 2 if how.get("own") else alpha * g_k * (g_k + g_m)
        s_m = alpha * g_m * (g_k + g_m)
        value = (-(1 - rho) ** how.get("power", 2) * (1 - rho * g_k * g_m) * h(2 * alpha) / 2
                 * (g_k + g_m) * (g_k * h(s_k) - how.get("sign", 1) * rho * g_m * h(s_m)))
        return -value if how.get("flip") else value
    return C


SYMBOLIC_OVERLAP = {
    "13e": {
        "gradient U gᵀ Uᵀ": (claimed(gradient=lambda U, g: U * g.T * U.T),
                             {"gradient-span"}),
        "Δz_U without G_U": (claimed(**{"dz-U": lambda G, g: g}), {"dz-U"}),
        "Δz_V = MᵀgM": (claimed(**{"dz-V": lambda M, g: M.T * g * M}), {"dz-V"}),
        "source view MᵀWM": (claimed(**{"source-view": lambda M, W: M.T * W * M}),
                             {"source-view", "claim-7-limit", "overlap-explicit"}),
        "OOD view G_U W": (claimed(**{"ood-view": lambda G, W: G * W}), {"ood-view"}),
    },
    "13f": {
        "first order sign flipped": (claimed(**{"first-order": lambda H, M, g: sp.Trace(
            H.T * M * g * M.T)}), {"first-order"}),
        # the criterion reads 13e's Δz_V: a transposed M there fails it and the closed form
        "13e's Δz_V = MᵀgM": (claimed(**{"dz-V": lambda M, g: M.T * g * M}),
                              {"first-order", "k2-closed-form"}),
        "error (1 − p)²": (claimed(**{"k2-error": lambda p, s: (1 - p) ** 2
                                      * (1 + sp.exp(s)) ** -2}),
                           {"k2-error", "k2-closed-form"}),
        "Gram step with a stray G": (claimed(**{"gram-step": lambda G, g: G * g * G + G}),
                                     {"t1-form"}),
        "OOD start without G_V⁻¹": (claimed(**{"ood-start": lambda M, G, z: M.T * z * M}),
                                    {"ood-margins", "k2-closed-form"}),
        "(1 − ρ) for (1 − ρ)²": (claimed(**{"k2-C": _k2_C(power=1)}),
                                 {"k2-closed-form", "matches-theory"}),
        "ρ term sign flipped": (claimed(**{"k2-C": _k2_C(sign=-1)}),
                                {"k2-closed-form", "matches-theory"}),
        "margin αγ_k²": (claimed(**{"k2-C": _k2_C(own=True)}),
                         {"k2-closed-form", "paper-limit", "matches-theory"}),
        "C_k sign flipped": (claimed(**{"k2-C": _k2_C(flip=True)}),
                             {"k2-closed-form", "paper-limit", "rule-fails"}),
        "paper's rule flipped": (claimed(**{"paper-forgets": lambda gk, gm: -gk * gm
                                            < gk ** 2}), {"rule-fails"}),
    },
    "13g": {
        "error without ½": (claimed(**{"gram-error": lambda r, G: r.T * G * r}), {"error"}),
        "s = 2Gr": (claimed(**{"gram-s": lambda G, r: 2 * G * r}), {"gradient"}),
        "Gram step with a stray G": (claimed(**{"gram-step": lambda G, g: G * g * G + G}),
                                     {"step"}),
        "OOD start MzMᵀ": (claimed(**{"ood-start": lambda M, G, z: M * z * M.T}),
                           {"ood-start"}),
        "source view MᵀWM": (claimed(**{"source-view": lambda M, W: M.T * W * M}),
                             {"finetune-views"}),
        "C_k = gD_k/(K − 1)": (claimed(**{"orthonormal-C": lambda D, g, K: g * D / (K - 1)}),
                               {"criterion"}),
        # the limit is read against 8c's D_k and claim 7's entries: a wrong one fails it
        "8c's (K − 1) → K": (linked("claim8_forgetting", D=lambda gk, g, Lam, Delta, K, n:
                                    sp.Sum(-gk * g[n] * Lam[n], (n, 1, K - 1))
                                    - K * gk ** 2 * Delta), {"criterion"}),
        "claim 7 γ_n²": (linked("claim7_finetune_projection", entry=lambda gn, gk, w:
                                gn * gn * w), {"criterion"}),
        "margin αγ_k²": (claimed(**{"k2-C": _k2_C(own=True)}), {"k2-limit"}),
    },
}


def numeric(**changes):
    return lambda: {**_mod().NUMERIC_CLAIMED, **changes}


def _source_change_transposed(M, G_U, dz_U):
    return _mod().source_change(M.T, G_U, dz_U)


def _k2_C_numeric(power=2, flip=1.0):
    def C(rho, gamma, alpha):
        g = np.asarray(gamma, dtype=np.float64)
        base = _mod().k2_C(rho, g, alpha)
        return flip * base * (1 - rho) ** (power - 2)
    return C


NUMERIC_OVERLAP = {
    # M ↔ Mᵀ in the source change (M = G_V diag(γ) is not symmetric)
    "13e": (numeric(source_change=_source_change_transposed), ("population",)),
    # (1 − ρ) for (1 − ρ)²: the first step and theory.overlap_first_order disagree
    "13f": (numeric(k2_C=_k2_C_numeric(power=1)), ("population",)),
    # 13f's C_k at G = I against g·D_k/(K − 1)
    "13g": (numeric(orthonormal_C=lambda D, g, K: g * D / (K - 1)), ("population",)),
}

NUMERIC_PART_OVERLAP = {
    # the sign of C_k flipped: the first steps disagree (and the counterexamples)
    "13f: C_k sign flipped": ("13f", numeric(k2_C=_k2_C_numeric(flip=-1.0))),
    # the paper's rule flipped: the counterexamples no longer read as counterexamples
    "13f: paper's rule flipped": ("13f", numeric(paper_forgets=lambda gk, gm: -gk * gm
                                                  < gk ** 2)),
    # the source change off by 1e-6: the identity is exact, so even that fails
    "13e: source change × (1 + 1e-6)": ("13e", numeric(source_change=lambda M, G, dz: (
        1 + 1e-6) * _mod().source_change(M, G, dz))),
}
