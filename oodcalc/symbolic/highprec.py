"""The closed forms at any precision with mpmath (no sympy), for where float64 fails.

float64 loses the stopping threshold itself at small ε: on the symmetric ray
``e_k = K(1 − a_k)²/(2(K − 1))`` and ``1 − a_k ≈ δ = √(2ε(K−1)/K)``; at ε = 1e-30,
δ ≈ 1e-15 is at the rounding level of ``a_k ≈ 1`` and float64 reports e_k ≈ 1.14e-30 at α*.
Large weights overflow ``exp`` (the step-size bound ``exp(−β)`` for β < −709) or underflow
errors to 0. Here every error is computed from ``Σ_{n≠k} a_n`` (never ``1 − a_k``) with
the softmax max-subtracted, at ``dps`` decimal digits.

Each function mirrors one of :mod:`oodcalc.theory`; the symbolic engine derives them.
"""

from __future__ import annotations

from typing import Any, Sequence

import mpmath


__all__ = [
    "alpha_star", "attention_column", "closed_forms", "conditional_error", "ood_logits",
    "parse_digits", "parse_eps", "print_high_precision", "to_strings",
]


def _mp(x: Any) -> mpmath.mpf:
    return x if isinstance(x, mpmath.mpf) else mpmath.mpf(str(x) if isinstance(x, str) else x)


def alpha_star(K: int, eps: Any) -> mpmath.mpf:
    """``α*_{K,ε} = (K−1)/K · ln((K−1)(1−δ)/δ)``, ``δ = √(2ε(K−1)/K)`` (0 when Q = 0
    already meets the rule), at the current ``mpmath.mp.dps``."""
    eps = _mp(eps)
    delta = mpmath.sqrt(2 * eps * (K - 1) / K)
    if delta >= 1:
        return mpmath.mpf(0)
    return (K - 1) * max(mpmath.mpf(0), mpmath.log((K - 1) * (1 - delta) / delta)) / K


def attention_column(column: Sequence[mpmath.mpf]) -> list[mpmath.mpf]:
    top = max(column)
    weights = [mpmath.exp(x - top) for x in column]
    total = mpmath.fsum(weights)
    return [w / total for w in weights]


def conditional_error(column: Sequence[mpmath.mpf], k: int) -> mpmath.mpf:
    """``e_k = ½[(Σ_{n≠k} a_n)² + Σ_{n≠k} a_n²]``: no cancellation in ``1 − a_k``."""
    a = attention_column(column)
    wrong = [a[n] for n in range(len(a)) if n != k]
    return (mpmath.fsum(wrong) ** 2 + mpmath.fsum(x ** 2 for x in wrong)) / 2


def ood_logits(M: Sequence[Sequence[Any]], alpha: mpmath.mpf) -> list[list[mpmath.mpf]]:
    """Claim 5: ``z[k', k] = αK/(K−1) ([MᵀM]_{k'k} − b_k b_k')``, ``b = Mᵀ1/√K``."""
    K = len(M)
    Mm = [[_mp(x) for x in row] for row in M]
    b = [mpmath.fsum(Mm[n][k] for n in range(K)) / mpmath.sqrt(K) for k in range(K)]
    c = alpha * K / (K - 1)
    return [[c * (mpmath.fsum(Mm[n][kp] * Mm[n][k] for n in range(K)) - b[k] * b[kp])
             for k in range(K)] for kp in range(K)]


def closed_forms(M: Sequence[Sequence[Any]], eps: Any, dps: int) -> dict[str, Any]:
    """Every closed form ``oodcalc predict`` prints, at ``dps`` digits: α*, β*, the OOD
    α, β and errors at α* (claims 3, 5), and the fine-tuning step-size bounds (claim 9)."""
    with mpmath.workdps(dps):
        K = len(M)
        a = alpha_star(K, eps)
        z = ood_logits(M, a)
        columns = [[z[n][k] for n in range(K)] for k in range(K)]
        bounds = [min(mpmath.exp(-z[n][k]) for n in range(K) if n != k) for k in range(K)]
        return {
            "dps": dps, "K": K, "eps": _mp(eps),
            "alpha_star": a, "beta_star": -a / (K - 1),
            "train_error_at_alpha_star": conditional_error([a] + [-a / (K - 1)] * (K - 1), 0),
            "ood_alpha": [z[k][k] for k in range(K)],
            "ood_beta": [[z[n][k] for n in range(K) if n != k] for k in range(K)],
            "ood_error": [conditional_error(columns[k], k) for k in range(K)],
            "step_size_bounds": bounds, "step_size_bound": min(bounds),
        }


def to_strings(values: dict[str, Any], digits: int) -> dict[str, Any]:
    """The same dictionary with every mpf as a decimal string of ``digits`` digits."""
    def fmt(x):
        if isinstance(x, mpmath.mpf):
            return mpmath.nstr(x, digits, min_fixed=-5, max_fixed=8)
        if isinstance(x, list):
            return [fmt(y) for y in x]
        return x
    return {key: fmt(value) for key, value in values.items()}


# --- `oodcalc predict --precision DIGITS` ---------------------------------------------

def parse_digits(text: str) -> int:
    from ..errors import InputError
    try:
        digits = int(text)
    except ValueError:
        digits = 0
    if not 5 <= digits <= 10_000:
        raise InputError("--precision", text, "expected an integer number of digits, 5..10000")
    return digits


def parse_eps(text: str | None, dps: int) -> mpmath.mpf:
    """``--eps`` read at ``dps`` digits: any positive number, even below float64's range."""
    from ..errors import InputError
    from ..setting import DEFAULT_EPS
    if text is None:
        return mpmath.mpf(DEFAULT_EPS)
    with mpmath.workdps(dps):
        try:
            eps = mpmath.mpf(text.strip())
        except (ValueError, TypeError):
            eps = mpmath.mpf("nan")
        if not (mpmath.isfinite(eps) and eps > 0):
            raise InputError("--eps", repr(text), "expected a finite number > 0")
        return eps


def print_high_precision(setting, eps_text: str | None, digits_text: str,
                         as_json: bool) -> None:
    """Print the closed forms for ``setting``'s geometry at the requested precision."""
    import json
    digits = parse_digits(digits_text)
    dps = digits + 10
    eps = parse_eps(eps_text, dps)
    M = setting.geometry.M.tolist()
    values = to_strings(closed_forms(M, eps, dps), digits)
    parameters = setting.describe()
    parameters["eps"] = values["eps"]
    out = {"source": "closed forms (mpmath)", "digits": digits, "parameters": parameters,
           **{k: v for k, v in values.items() if k not in ("dps", "K", "eps")}}
    if as_json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    console = Console(highlight=False, soft_wrap=True, markup=False)   # numbers, no markup
    p = parameters
    console.print(f"Closed forms at {digits} significant digits (mpmath); K = {p['K']}, "
                  f"d = {p['d']}, ε = {values['eps']}, η = {p['eta']:g}, "
                  f"η_ft = {p['eta_ft']:g}, geometry {p['geometry']['kind']}. The float64 "
                  "dynamics are not run in this mode.")
    console.print(f"α*_(K,ε) = {values['alpha_star']}")
    console.print(f"β* = −α*/(K−1) = {values['beta_star']}")
    console.print(f"e_k at α* (= ε) = {values['train_error_at_alpha_star']}")
    console.print("OOD features at α* (claim 5) and the step-size bound (claim 9):")
    for k in range(p["K"]):
        console.print(f"  k = {k + 1}: α_(u_k) = {values['ood_alpha'][k]}")
        console.print(f"         β_(u_n,u_k), n≠k = {', '.join(values['ood_beta'][k])}")
        console.print(f"         e_k = {values['ood_error'][k]}")
        console.print(f"         min_(n≠k) exp(−β_(u_n,u_k)) = {values['step_size_bounds'][k]}")
    console.print(f"Fine-tuning step-size bound min_k min_(n≠k) exp(−β) = "
                  f"{values['step_size_bound']}")
