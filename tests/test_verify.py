"""The ledger: every claim's numeric check runs real GD and passes under the quick budget;
the checks have teeth (a wrong closed form fails); the statistics behave."""

import pytest

from oodcalc import theory, verify
from oodcalc.claims import CLAIMS, get_claim


@pytest.fixture(scope="module")
def quick_ledger():
    return verify.ledger(verify.QUICK)


def test_every_claim_has_a_numeric_check():
    assert [c.number for c in CLAIMS if c.numeric_check] == list(range(1, 10))
    for c in CLAIMS[:9]:
        assert callable(c.load("numeric_check"))


@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6, 7, 9])
def test_claim_passes_against_simulation(quick_ledger, number):
    row = quick_ledger.rows[number - 1]
    assert row.number == number
    assert row.population.max_abs is not None and row.population.max_rel is not None
    assert row.prompts is not None and len(row.prompts.points) == len(verify.QUICK.Ns)
    assert row.population.passed, row.population.details
    assert row.prompts.passed, row.prompts.details
    assert row.to_dict()["verdict"] == "PASS"


def test_claim_8_fails_on_a_K3_counterexample(quick_ledger):
    """A finding, not a bug: for γ = (−0.7, 0.9, 0.95) the forgetting condition
    −γ1γ2 = 0.63 > γ1² = 0.49 holds, yet L_(v1) falls at every fine-tuning step of the exact
    population dynamics. Every K = 2 case and the finite-prompt sign check agree."""
    row = quick_ledger.rows[7]
    assert not row.passed and not row.population.passed
    mismatches = [d for d in row.population.details if "theorem" in d]
    assert mismatches == ["γ=(-0.7, 0.9, 0.95) k=1: theorem forgetting, simulator (a) falling"]
    assert row.population.max_abs <= verify.EXACT_TOL   # F_k of (a) = exact dynamics
    assert row.prompts.passed
    assert any("FINDING" in f for f in row.findings)


def test_exact_identities_hold_to_rounding(quick_ledger):
    """Claims 1, 2, 6, 7 are identities: simulator (a) agrees to float64 rounding."""
    for n in (1, 2, 6, 7):
        assert quick_ledger.rows[n - 1].population.max_abs <= verify.EXACT_TOL
    for n in (2, 7):   # and they stay exact for finite prompts and mini-batches
        assert quick_ledger.rows[n - 1].prompts.kind == "exact"


def test_claim_4_exponents(quick_ledger):
    text = " ".join(quick_ledger.rows[3].population.details)
    p_eta = float(text.split("(1/η)^")[1].split(":")[0])
    assert p_eta == pytest.approx(1.0, abs=0.02)   # T1 ∝ 1/η: GD follows the flow


def test_ledger_json(quick_ledger):
    data = quick_ledger.to_dict()
    assert data["passed"] is False and data["mode"] == "quick"   # claim 8, see above
    assert [r["verdict"] for r in data["rows"]].count("FAIL") == 1
    assert [r["claim"] for r in data["rows"]] == list(range(1, 10))
    assert all(r["symbolic"] for r in data["rows"])


# --- the checks can fail --------------------------------------------------------------

def test_wrong_alpha_star_fails_claim_3(monkeypatch):
    assert verify.population_claim_3(verify.Context(verify.QUICK)).passed
    true = theory.alpha_star
    monkeypatch.setattr(theory, "alpha_star", lambda K, eps: 1.01 * true(K, eps))
    assert not verify.population_claim_3(verify.Context(verify.QUICK)).passed


def test_wrong_ood_formula_fails_claim_5(monkeypatch):
    true = theory.ood_logits
    monkeypatch.setattr(theory, "ood_logits", lambda M, a: true(M, a) * (1 + 1e-6))
    ctx = verify.Context(verify.QUICK)
    ctx.budget = verify.Budget(**{**vars(verify.QUICK), "Ns": (8, 16), "seeds": 2})
    population, _, _ = verify.check_claim_5(ctx)
    assert not population.passed


def test_wrong_regime_fails_claim_8(monkeypatch):
    true = theory.forgetting_regimes

    def flipped(gamma):
        swap = {"forgetting": "backward-transfer", "backward-transfer": "forgetting"}
        return [theory.Regime(r.k, swap.get(r.regime, r.regime), r.condition, r.m0, r.m1)
                for r in true(gamma)]
    monkeypatch.setattr(theory, "forgetting_regimes", flipped)
    ctx = verify.Context(verify.Budget(**{**vars(verify.QUICK), "Ns": (8, 16), "seeds": 2,
                                          "gamma_grid": ((1, -0.9),)}))
    population, prompts, _ = verify.check_claim_8(ctx)
    assert not population.passed and not prompts.passed


# --- statistics -----------------------------------------------------------------------

def test_fit_rate_recovers_a_power_law():
    pts = [verify.Point(N, 3.0 * N ** -0.5, 0.01 * N ** -0.5, 8) for N in (8, 16, 32, 64)]
    p, se = verify.fit_rate(pts)
    assert p == pytest.approx(0.5, abs=1e-9) and se < 0.05


def test_monte_carlo_check_fails_a_persistent_bias():
    pts = [verify.Point(N, 0.1, 0.001, 8) for N in (8, 16, 32)]
    assert not verify.monte_carlo_check("constant bias", pts).passed
    shrinking = [verify.Point(N, 1.0 / N, 0.001, 8) for N in (8, 16, 32)]
    assert verify.monte_carlo_check("1/N bias", shrinking).passed
    noise = [verify.Point(N, 0.001, 0.002, 8) for N in (8, 16, 32)]
    assert verify.monte_carlo_check("within error", noise).passed


def test_exact_check_threshold():
    assert verify.exact_check("x", {8: [1e-15]}, 1e-10).passed
    assert not verify.exact_check("x", {8: [1e-15], 16: [1e-6]}, 1e-10).passed


def test_get_claim_by_key_runs_one_row():
    ledger = verify.ledger(verify.QUICK, [get_claim("aggregated-attention")])
    assert [r.number for r in ledger.rows] == [1] and ledger.passed
