"""The claims of arXiv 2609.36448 that oodcalc derives and checks: one entry per statement.

Everything about claim N lives in one module, ``oodcalc/claims/claimN_<key>.py``: the
paper's formula as the claim states it (``CLAIMED``), the symbolic derivation that
produces the formula from the model's definitions and compares (``derive``), and the
numeric check against gradient descent that the ledger runs (``check``). This registry
names them; ``oodcalc derive``, the derivation documents, ``oodcalc verify`` and the tests
iterate it. It imports nothing heavy: the claim modules load (with sympy) when used.

Levels (what a derivation earns, computed from its decisive checks and kept equal to the
registry's ``level`` by the tests): ``symbolic K`` — sympy derived the decisive step with
the number of features K a Symbol (inequalities by certificates that can fail: a
polynomial in quantities known ≥ 0 with nonnegative coefficients, checked equal to the
expression); ``... + lemma in prose`` — a decisive step is argued in prose, not derived; ``K = a..b`` — derived for each K in that range;
``numeric`` — only numbers support it; ``rests on the paper`` — the decisive argument is the
paper's and is not reproduced; ``refuted`` — a counterexample to the paper's statement
stands (exactly, and in full gradient descent).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import InputError


__all__ = ["CLAIMS", "Claim", "get_claim", "get_claims"]


@dataclass(frozen=True)
class Claim:
    id: str                     # "3", "8a": number plus part letter
    key: str                    # short slug, accepted wherever a claim is named
    title: str
    statement: str              # the statement as checked, one line, plain Unicode
    level: str                  # what the derivation earns (see the module docstring)
    decisive_step: str          # the step the statement rests on, one line
    module: str                 # "oodcalc.claims.claimN_key"
    derive: str = "derive"      # function names in the module
    check: str = "check"
    refutes: bool = False       # the statement is the paper's and the ledger refutes it
    #: the decisive steps argued in prose (the derivation's "prose lemma" checks, in order);
    #: any makes the level "... + lemma in prose"; `oodcalc derive --list` names them
    lemmas: tuple[str, ...] = ()

    @property
    def number(self) -> int:
        return int(self.id.rstrip("abcdefgh"))

    def load(self, attribute: str) -> Callable[..., Any]:
        """The derivation (``"derive"``) or numeric check (``"check"``) function."""
        return getattr(importlib.import_module(self.module), getattr(self, attribute))


_M = "oodcalc.claims."

CLAIMS: tuple[Claim, ...] = (
    Claim("1", "aggregated-attention", "Aggregated attention",
          "Attn_v = e^{α_v} / (e^{α_v} + Σ_{v'≠v} e^{β_{v',v}}) in the population limit, and "
          "e_k = ½[(1 − Attn_k)² + Σ_{n≠k} Attn_n²].",
          "symbolic K",
          "the token softmax of a prompt with symbolic counts c_n, summed over each feature's "
          "tokens, is c_n e^{z_n}/Σ_m c_m e^{z_m}; balanced counts cancel",
          _M + "claim1_attention"),
    Claim("2", "conservation", "Conservation law",
          "At every GD step the growth of α_{v_k} equals the total decrease of the "
          "β_{v_n,v_k}, n ≠ k: Δ_{k,α} = Σ_{n≠k} Λ_{k,n,β}.",
          "symbolic K",
          "GD on Q moves the logits by −η∂L/∂z, and the closed-form gradient of e_k sums to "
          "zero down each column",
          _M + "claim2_conservation"),
    Claim("3", "convergence", "Convergence at T1",
          "At T1 every α equals α*_{K,ε} (closed form from the stopping rule) and every "
          "β equals −α*_{K,ε}/(K−1); Q^(T1) = α*K/(K−1)(VVᵀ − v̄v̄ᵀ).",
          "symbolic K",
          "the gradient at Z = αI + β(11ᵀ − I) has the same form with zero column sums, so "
          "GD from Q = 0 stays on the ray β = −α/(K−1); e_k = ε solved on it",
          _M + "claim3_convergence"),
    Claim("4", "t1-growth", "T1 is polynomial",
          "T1 = poly(1/ε, K, 1/η).",
          "symbolic K",
          "on the ray the margin follows s ← s + h(s); the flow time T_flow is derived in "
          "closed form and brackets the discrete T1; T_flow ~ (K−1)/(4ηε) as ε → 0 and "
          "~ K²/η as K → ∞",
          _M + "claim4_t1_growth"),
    Claim("5", "ood-weights", "OOD weights at T1",
          "α_{u_k} = Kα*/(K−1)([MᵀM]_kk − ⟨u_k,v̄⟩²), β_{u_k',u_k} = Kα*/(K−1)"
          "([MᵀM]_k'k − ⟨u_k,v̄⟩⟨u_k',v̄⟩), with M = VᵀU.",
          "symbolic K",
          "claim 3 ⇒ claim 5: with Q^(T1) = VZVᵀ from claim 3, UᵀQ^(T1)U = MᵀZM "
          "= Kα/(K−1)(MᵀM − bbᵀ), b = Mᵀ1/√K (given Q^(T1) it is an identity)",
          _M + "claim5_ood_weights"),
    Claim("6", "corollary", "Two failure cases",
          "span(V) ⊥ span(U), or u_k = v̄ with span(U) = span(V), gives α = β = 0, "
          "attention 1/K and the error of random guessing.",
          "symbolic K",
          "in claim 5's form, M = 0 or (UᵀU = I, VVᵀU = U, u_k = v̄) makes column k of "
          "MᵀM − bbᵀ zero; a zero column gives attention 1/K and e_k = (K−1)/(2K)",
          _M + "claim6_failure_cases"),
    Claim("7", "finetune-projection", "Fine-tuning seen from the source",
          "Under a parallel shift, α_{v_k} gains γ_k² Δ_{k,α} and β_{v_n,v_k} changes by "
          "−γ_kγ_n Λ_{n,k,β} over fine-tuning.",
          "symbolic K",
          "the OOD gradient is U G Uᵀ, so Q = VZ₁Vᵀ + UWUᵀ and VᵀQV = Z₁ + MWMᵀ for any "
          "orthonormal V, U; M = diag(γ) gives entries γ_nγ_k W_nk",
          _M + "claim7_finetune_projection"),
    Claim("8a", "forgetting-k2", "Forgetting threshold, K = 2",
          "K = 2: −γ_kγ_m > γ_k² makes L_{v_k} rise monotonically through fine-tuning "
          "(forgetting); −γ_kγ_m < γ_k² makes it fall (backward transfer).",
          "K = 2",
          "the source margin changes by γ_k(γ_k + γ_m)Δ_t at every step with Δ_t > 0, and e_k "
          "falls with the margin",
          _M + "claim8_forgetting", "derive_k2", "check_k2"),
    Claim("8b", "forgetting-paper-k3", "Forgetting threshold as stated, K > 2",
          "K > 2: with m0 = argmax_{m≠k} γ_kγ_m, −γ_kγ_m0 > γ_k² makes L_{v_k} rise "
          "monotonically through fine-tuning.",
          "refuted",
          "γ = (0.5, −0.9, −0.9), k = 1: −γ_1γ_m0 = 0.45 > γ_1² = 0.25, yet D_1 < 0 for "
          "every α > 0 and the source margin grows by δW_11/40 > 0 at every step, so L_{v_1} "
          "falls monotonically (exact, any η and ε)",
          _M + "claim8_forgetting", "derive_paper_k3", "check_paper_k3", refutes=True),
    Claim("8c", "forgetting-criterion", "Forgetting criterion (derived)",
          "Any K: the first fine-tuning step changes e_k on v_k by (η/K)·g·D_k + O(η²), g > 0, "
          "D_k = Σ_{n≠k}(−γ_kγ_n)Λ_n − (K−1)γ_k²Δ; so −γ_kγ_m0 > (K−1)γ_k² starts "
          "forgetting, and for K = 2 the paper's theorem follows.",
          "symbolic K",
          "at T1 the source column is symmetric: ∂e_k/∂z_nk = g > 0 for every n ≠ k and "
          "−(K−1)g on the diagonal; the step moves it by γ_k²Δ and −γ_kγ_nΛ_n; and "
          "D_k = Σ c_nΛ_n ≥ c_min·Δ at T1, since c_n = −γ_kγ_n − (K−1)γ_k² increases with the "
          "OOD logit, each (c_n − τ)Λ_n is a positive multiple of t(e^t − 1) ≥ 0, and "
          "D_k − c_minΔ = Σ(c_n − τ)Λ_n + λ(w − z_min)Δ (a certificate)",
          _M + "claim8_forgetting", "derive_criterion", "check_criterion"),
    Claim("8d", "backward-transfer", "Backward-transfer threshold, any K",
          "Any K: with m1 = argmin_{m≠k} γ_kγ_m, −γ_kγ_m1 < γ_k² makes L_{v_k} fall "
          "monotonically through fine-tuning (the paper's second condition; every ε and η).",
          "symbolic K",
          "the condition makes u_k's own OOD logit the largest at T1, and every step widens "
          "each gap by (η/K)(Δ + Λ_n) (induction); a largest own logit gives S ≤ a_k "
          "(certificate; the rest by induction over its entries), so every share "
          "Λ_n ≥ a_n² > 0, every source margin grows by (η/K)(γ_k²Δ + γ_kγ_nΛ_n) > 0, and e_k "
          "falls with every margin",
          _M + "claim8_forgetting", "derive_backward_transfer", "check_backward_transfer"),
    Claim("8e", "long-finetuning", "Long fine-tuning, K = 2",
          "K = 2, fine-tuning for t steps without the stopping rule: each OOD margin follows "
          "m ← m + 2ηe^m/(1 + e^m)³ (flow time T(m) = [−e^{−m} + 3m + 3e^m + e^{2m}/2]/(2η), "
          "m_t = ½ln(4ηt) + o(1)); F_k(t) = [f(s_k(t)) − f(2α)]/2 with s_k = 2α + "
          "(c_k/2)(m_k(t) − m_k(0)), c_k = γ_k(γ_k + γ_n), f(s) = (1 + e^s)^{−2}: F_k → "
          "−f(2α)/2 (c_k > 0), (1 − f(2α))/2 (c_k < 0), 0 (c_k = 0). At every t, e_k = "
          "(1 + X)^{−2} to a relative O(|c_k|/√(ηt)), X = e^{α(2 − c_k²/2)}(4ηt)^{c_k/4}: "
          "for c_k < 0 the error grows like t^{|c_k|/2} while X >> 1 (every reachable t), and "
          "1 − e_k ~ 2X (exponent c_k/4 ∈ [−1/16, 0)) holds only past X = 1, "
          "4ηt = e^{4α(2 − c_k²/2)/|c_k|}.",
          "K = 2",
          "the OOD margin's recurrence and its flow time in closed form; the discrete clock "
          "T(m_t) − T(m_0) lies in [t, t + φ(H)(m_t − m_0)] for m_0 ≥ −ln 2 (power-series "
          "certificates); the source margin is 2α + (c_k/2)(m_k(t) − m_k(0)) at every step",
          _M + "claim8e_long_finetuning"),
    Claim("9a", "step-size", "Fine-tuning step size (paper)",
          "η <= min_{n≠k} exp(−β_{u_n,u_k}^(T1)) suffices for fine-tuning.",
          "rests on the paper",
          "the paper's argument (not reproduced); its value at T1 is derived from claim 5",
          _M + "claim9_step_size", "derive_paper_bound", "check_paper_bound"),
    Claim("9b", "step-size-smoothness", "Step size from smoothness (derived)",
          "Any K, any start: ‖∇²e_k‖ ≤ 1 in the logits, so L = Σ e_k/K is (1/K)-smooth and "
          "every GD step with η < 2K lowers L (descent lemma). Loose by a factor 3.25: "
          "sup ‖∇²e_k‖ = (39 + 55√33)/1152 ≈ 0.3081 for K = 2 (derived), the largest value "
          "found for K = 3..8 (measured).",
          "symbolic K + lemma in prose",
          "the second derivative of e_k along v is Σ_n a_n c_n (v_n − ⟨a,v⟩)²; |c_n| ≤ 2 on "
          "the simplex (Polya certificates, with Σ_rest a_m² ≤ (Σ_rest a_m)² by induction) "
          "and Σ_n a_n (v_n − ⟨a,v⟩)² ≤ ‖v‖²/2 (the mean and the spread, by certificates); "
          "the chain to ‖v‖² ∓ vᵀ∇²e_k v ≥ 0 is one certificate with the sums over n symbolic, "
          "and the descent step −η‖∇L‖²(1 − η/(2K)) is Taylor's remainder integrated by sympy",
          _M + "claim9_step_size", "derive_smoothness", "check_smoothness",
          lemmas=("∇²L is block-diagonal with blocks ∇²e_k/K: e_k is a function of column k "
                  "of z alone (the softmax of that column), so the mixed second derivatives "
                  "across columns vanish",
                  "Taylor's theorem with integral remainder, g(1) = g(0) + g'(0) + "
                  "∫₀¹(1 − t)g''(t) dt, for g(t) = L(z − tη∇L), which is smooth in t")),
    Claim("10", "interventions", "Interventions in the logits",
          "Fine-tuning with replay λ, an L2 pull μ toward Q^(T1), key/query projections off "
          "span(V) and query weights c moves (z_U, z_V) = (UᵀQU, VᵀQV) by the closed system "
          "Δz_U = −η[(1−λ)A_l(g_U c)A_r + λMᵀg_V M + μ(z_U − z_U1)], Δz_V = −η[(1−λ)B_l(g_U c)"
          "B_rᵀ + λg_V + μ(z_V − z_V1)] (A = I or I − MᵀM, B = M or 0); any projection leaves "
          "z_V fixed (F = 0 exactly, every geometry); under a rotation (M = γI) projected "
          "fine-tuning is plain fine-tuning with step η(1 − γ²) (one side) or η(1 − γ²)² "
          "(both sides).",
          "symbolic K",
          "ΔQ's terms read in UᵀΔQU and VᵀΔQV with VᵀV = UᵀU = I as rewriting rules (matrix "
          "symbols); Vᵀ(I − VVᵀ) = 0 removes the fit from Δz_V; M = γI gives A = (1 − γ²)I",
          _M + "claim10_interventions"),
    Claim("11a", "replay-first-step", "Replay's first step, K = 2",
          "K = 2 parallel shift, replay λ: the first fine-tuning step moves source margin k by "
          "η[(1 − λ)c_k h(αc_k)/2 + λh(2α)] (c_k = γ_k(γ_k + γ_n), h(s) = 2e^s/(1 + e^s)³, α "
          "the T1 logit), so ΔL_V^(1) = ½Σ_k[e(2α + Δs_k) − e(2α)] exactly, e(s) = "
          "(1 + e^s)^(−2); to first order in η, ΔL_V^(1) = −ηh(2α)[(1 − λ)A + λh(2α)], "
          "A = (1/4)Σ_k c_k h(αc_k), which changes sign at λ_first = −A/(h(2α) − A) (λ_first = 0 "
          "when A >= 0).",
          "K = 2",
          "K = 2 errors depend on the column margin alone; claim 10's Δz_V at Q^(T1) (the pull "
          "0 there) moves the source margins by the stated amounts, and the first-order term "
          "is ⟨∇L_V, Δz_V⟩ derived from L_V",
          _M + "claim11_replay_first_step", "derive_first_step", "check_first_step"),
    Claim("11b", "first-step-not-threshold", "The first step does not decide λ*",
          "λ_first < λ*: at γ = (1, −0.5) (ε = 0.01, η = 0.1) A > 0, so λ_first = 0, yet "
          "λ = 0, 0.03, 0.05 forget (F > 0, full-Q GD with replay on Q): L_V falls for the "
          "first 12 steps, then rises to F = +9.2e-4; at γ = (1, −0.9) A ≈ 8e-7 > 0, λ_first "
          "= 0, F > 0 at λ = 0 and 0.01, and the exact first step at λ = 0 rises (the O(η²) "
          "term outweighs the first-order one).",
          "numeric",
          "A > 0 exactly at α* = ln 3 (ε = 1/100, algebraic numbers), so the first-order term "
          "is negative at every λ >= 0; the dip then rise of L_V is measured (terms engine, "
          "full-Q GD)",
          _M + "claim11_replay_first_step", "derive_counterexample", "check_counterexample"),
    Claim("11c", "pull-threshold", "L2's effect on the threshold",
          "The pull μ(Q − Q^(T1)) is 0 at Q^(T1): the first step and every first-step "
          "criterion (8c's D_k, the paper's −γ_kγ_m0 > γ_k², λ_first) are independent of μ. "
          "With a pull and no replay z_V − z_V1 = M(z_U − z_U1)Mᵀ at every step (any K); for "
          "K = 2 each OOD margin follows s ← s + η[h(s) − μ(s − αc_k)], so the rule on U is "
          "met iff μ < μ_stall = min_k 2ε(1 − √ε)/(s_ε − αc_k), s_ε = ln((1 − √ε)/√ε), and a "
          "feature with c_k < 0 forgets at least ½[e(2α + (c_k/2)(s_ε − αc_k)) − e(2α)] for "
          "every such μ. Measured: F keeps its sign on 0 <= μ < μ_stall at γ = (1, −0.9), "
          "(1, −0.5), (1, −0.2) (no μ* with F <= 0 where plain fine-tuning forgets).",
          "K = 2 + lemma in prose",
          "the pull vanishes at Q^(T1) and keeps z_V − z_V1 = MWMᵀ (matrix symbols); K = 2: "
          "the margin recurrence with the pull, h(s_ε) = 2ε(1 − √ε), the fixed point at s_ε; "
          "the monotone-map step to 'never reached' is argued in prose",
          _M + "claim11_replay_first_step", "derive_pull", "check_pull",
          lemmas=("for μ >= μ_stall,k margin k never reaches s_ε: the map "
                  "s → s + η[h(s) − μ(s − s_0)] is increasing (1 + η(h' − μ) > 0 at η = 0.1, "
                  "|h'| <= 2h <= 16/27) and fixes a point <= s_ε, so iterates below it stay below; "
                  "for μ < μ_stall the step is bounded below by a positive number on [s_0, s_ε], "
                  "so the rule is met in finitely many steps",)),
    Claim("12a", "advice-cosine", "Cosine weighting (paper)",
          "Weighting the fine-tuning samples by their cosine similarity to the pretraining "
          "centre (c_k = max(cos(u_k, v̄), 0), mean 1) reduces forgetting.",
          "refuted",
          "K = 2, γ = (3/10, −9/10): the weights are (2, 0), source feature 2 never moves and "
          "the kept one's margin moves by γ_1(γ_1 + γ_2)δW_11 < 0 at every step, so "
          "F_advice > 0 (exact, any η and ε), while plain fine-tuning has F < 0",
          _M + "claim12_advice", "derive_cosine", "check_cosine", refutes=True),
    Claim("12b", "advice-drop-negative", "Dropping negative features (paper)",
          "Leaving out the fine-tuning data negatively correlated with the source features "
          "(c_k = 0 where cos(u_k, v̄) < 0) reduces forgetting.",
          "refuted",
          "K = 2, γ = (3/10, −9/10): the weights are (1, 0), source feature 2 never moves and "
          "the kept one's margin moves by γ_1(γ_1 + γ_2)δW_11 < 0 at every step, so "
          "F_advice > 0 (exact, any η and ε), while plain fine-tuning has F < 0",
          _M + "claim12_advice", "derive_drop_negative", "check_drop_negative", refutes=True),
    Claim("12c", "advice-projection", "Orthogonal projection (paper)",
          "Restricting the fine-tuning updates to the complement of span(V) (key, query or "
          "both sides) prevents forgetting: F = 0 exactly in every geometry; under a rotation "
          "it takes (1 − γ²)^(−p) times plain fine-tuning's steps (p sides, measured), and "
          "with u_k ∈ span(V) the query side freezes z_U's column k (the rule on U is then "
          "never met unless it holds at T1).",
          "symbolic K",
          "claim 10's Vᵀ(I − VVᵀ) = 0 removes the fit from Δz_V on each projected side; "
          "UᵀP u_k = UᵀP V m = 0 for u_k = V m zeroes column k of A_r",
          _M + "claim12_advice", "derive_projection", "check_projection"),
    Claim("13a", "overlap-loss", "Population loss with overlapping features",
          "Unit-norm features F = [f_1 … f_K], G = FᵀF, z = FᵀQF: with w ~ N(0, I_d), labels "
          "y = wᵀx and balanced tokens (or the population limit), query f_k has "
          "e_k = ½‖Fa_k − f_k‖² = ½(a_k − δ_k)ᵀG(a_k − δ_k), a_k the column softmax of z; "
          "at G = I it is claim 1's form.",
          "symbolic K",
          "every token equal to f_n scores z_n = f_nᵀQf_k, so claim 1's grouping holds "
          "unchanged; E_w[wwᵀ] = I with FᵀF = G turns E_w(ŷ − wᵀf_k)² into "
          "(a_k − δ_k)ᵀG(a_k − δ_k) (matrix symbols)",
          _M + "claim13_overlap", "derive_loss", "check_loss"),
    Claim("13b", "overlap-conservation", "Conservation with overlapping features",
          "A GD step moves z_V by Δz_V = −ηG·g·G, g = ∂L/∂z with zero column sums; with "
          "Q = VWVᵀ the column sums of ΔW = G⁻¹Δz_VG⁻¹ = −ηg vanish (the law holds for W); "
          "the law on z_V itself (Δα_k = Σ_{n≠k} Λ_{k,n}) holds when every row of G has the "
          "same sum (1ᵀG = r1ᵀ: every equal overlap) and fails for unequal overlaps "
          "(G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]]: first step from Q = 0 has column sums "
          "(7/216, 7/216, −7/162)η).",
          "symbolic K",
          "∇_Q L = F·g·Fᵀ gives Δz = −ηG·g·G; e_k(z + c1) = e_k(z) for any G (shift invariance, "
          "symbolic K) gives 1ᵀg = 0; then G⁻¹Δz_VG⁻¹ = −ηg and 1ᵀG = r1ᵀ ⇒ 1ᵀΔz_V = 0 "
          "(matrix symbols); the counterexample in exact rationals",
          _M + "claim13_overlap", "derive_conservation", "check_conservation"),
    Claim("13c", "overlap-t1", "T1 state with equal overlaps",
          "K = 2, ⟨v_1, v_2⟩ = ρ: GD from Q = 0 stays on β = −α and stops at "
          "α*(ρ) = ½ln((1−q*)/q*), q* = √(ε/(1−ρ)) (e_k = (1−ρ)q² on the ray). Any K "
          "with equal overlaps G = (1−ρ)I + ρ11ᵀ: pretraining is the orthonormal one at "
          "ε/(1−ρ) with step η(1−ρ)³ (α* = α*_{K,ε/(1−ρ)}, β = −α/(K−1)); K = 2, ε = 0.01, "
          "η = 0.1: T1 = 150, 357, 1575, 10869 at ρ = −0.5, 0, 0.5, 0.8. Unequal overlaps, "
          "K ≥ 3: GD leaves the symmetric ray and no closed form is known (measured only: "
          "G = [[1, ½, 0], [½, 1, 0], [0, 0, 1]] stops at T1 = 2655, z_V(T1) not symmetric).",
          "symbolic K",
          "Σ_n a_n = 1 makes G act on the error directions as (1−ρ)I, so e_k(G) = "
          "(1−ρ)e_k(I) and g(G) = (1−ρ)g(I) for every z; on the symmetric ray g has zero "
          "row and column sums (claim 3), so G·g·G = (1−ρ)²g and the step is η(1−ρ)³; "
          "(1−ρ)e_k = ε solved with claim 3's α*",
          _M + "claim13_overlap", "derive_t1", "check_t1"),
    Claim("13d", "overlap-ood-weights", "OOD weights at T1 with overlapping features",
          "Pretraining keeps Q = VWVᵀ, so z_U(T1) = Mᵀ G_V⁻¹ z_V(T1) G_V⁻¹ M (M = VᵀU); "
          "M = G_VΓ (oc.overlap, oc.gram) gives z_U = Γz_VΓ; equal overlaps give "
          "z_U = Kα/((K−1)(1−ρ)²)(MᵀM − bbᵀ), b = Mᵀ1/√K, α = α*_{K,ε/(1−ρ)}; G_V = I "
          "is claim 5.",
          "symbolic K",
          "the gradient is V·g·Vᵀ, so Q = VWVᵀ with z_V = G_V·W·G_V and z_U = Mᵀ·W·M (matrix "
          "symbols); G_V⁻¹ZG_V⁻¹ = Kα/((K−1)(1−ρ)²)(I − 11ᵀ/K) in the algebra of I and "
          "11ᵀ (symbolic K) with claim 3's Z",
          _M + "claim13_overlap", "derive_ood", "check_ood"),
    # 13e–g: claim13_overlap_finetune
    Claim("13e", "overlap-finetune-source", "Fine-tuning seen from the source, overlap",
          "Unit-norm V, U (G_V = VᵀV, G_U = UᵀU, M = VᵀU, any K): a fine-tuning step moves Q "
          "by −ηU g_U Uᵀ, so Δz_U = −ηG_U g_U G_U and Δz_V = −ηM g_U Mᵀ; over fine-tuning "
          "z_V(t) − z_V(T1) = M W Mᵀ with z_U(t) − z_U(T1) = G_U W G_U (W = −ηΣ g_U). At "
          "G = I, M = diag(γ) this is claim 7.",
          "symbolic K",
          "the OOD gradient is U g_U Uᵀ, and UᵀU = G_U, VᵀU = M as rewriting rules (matrix "
          "symbols) give both views of each step and of Q^(T1) + UWUᵀ",
          _M + "claim13_overlap_finetune", "derive_source", "check_source"),
    Claim("13f", "overlap-forgetting", "Forgetting criterion with overlap",
          "Any K: the first fine-tuning step changes e_k on v_k by ηC_k + O(η²), C_k = "
          "−⟨∇_{z_V}e_k, M g_U Mᵀ⟩. K = 2, ⟨v_1, v_2⟩ = ρ, u_k = γ_k v_k + √(1 − γ_k²)w_k: "
          "C_k = −(1 − ρ)²(1 − ργ_1γ_2)h(2α)(γ_1 + γ_2)(γ_k h(s_k) − ργ_m h(s_m))/2, s_j = "
          "αγ_j(γ_1 + γ_2), h(s) = 2e^s/(1 + e^s)³, α the T1 logit; at ρ = 0 the paper's "
          "K = 2 rule. With overlap the rule fails: ρ = 0.8, γ = (1, 0.5): C_2 > 0 at α* "
          "(F_2 = +8.19e-4) though it says backward transfer; ρ = −0.5, γ = (1, −0.2): C_2 < 0 "
          "(F_2 = −1.31e-3) though it says forgetting. C_k gives the first step's sign, not "
          "always the whole run's (ρ = 0.8, γ = (1, 0.7): C_2 < 0, F_2 > 0).",
          "K = 2",
          "13e's Δz_V in the first-order term (matrix symbols); K = 2: the Gram error is "
          "(1 − G_12)(1 + e^s)^(−2) in the column margin, the T1 state α(2I − 11ᵀ) and the OOD "
          "margins αγ_j(γ_1 + γ_2) from Mᵀ G_V⁻¹ z_V G_V⁻¹ M; exact signs at α*",
          _M + "claim13_overlap_finetune", "derive_forgetting", "check_forgetting"),
    Claim("13g", "overlap-orthonormal-limit", "The orthonormal limit",
          "At G_V = G_U = I every overlap formula is the orthonormal one: the Gram error and "
          "its gradient are claims 1 and 2's, the step −ηG g G is claim 2's −ηg (conservation), "
          "the OOD start Mᵀ G_V⁻¹ z G_V⁻¹ M is claim 5's MᵀzM, 13e is claim 7 and 13f's C_k is "
          "8c's (g/K)D_k (8a for K = 2). Measured: the Gram path forced on orthonormal arrays "
          "gives the orthonormal path's T1, T2 and F (within 1e-12).",
          "symbolic K",
          "G = I substituted in each form (matrix symbols, symbolic K) and compared with the "
          "orthonormal claims' CLAIMED forms",
          _M + "claim13_overlap_finetune", "derive_orthonormal", "check_orthonormal"),
)


def get_claims(name: str | int) -> list[Claim]:
    """The entries a name selects: a number selects every part (``8`` → 8a, 8b, 8c); an
    id (``8b``) or a key (``convergence``) selects one."""
    text = str(name).strip().lower()
    chosen = [c for c in CLAIMS if text in (c.id, c.key)]
    chosen = chosen or [c for c in CLAIMS if text == str(c.number)]
    if not chosen:
        accepted = ", ".join(f"{c.id} ({c.key})" for c in CLAIMS)
        raise InputError("claim", repr(name), f"expected a number 1–13 or one of {accepted}")
    return chosen


def get_claim(name: str | int) -> Claim:
    """One entry by id or key (``"3"``, ``"8b"``, ``"convergence"``)."""
    chosen = get_claims(name)
    if len(chosen) > 1:
        raise InputError("claim", repr(name), "names several parts: " +
                         ", ".join(c.id for c in chosen))
    return chosen[0]
