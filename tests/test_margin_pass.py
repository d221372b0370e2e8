"""The compiled margin pass (K = 2 and rotations: every column a margin) against the NumPy
margin engine it replaces when Numba is there, and against the plain K×K descent: T2
identical, the logits to 1e-12; whatever the margins' order or the rules beside a row;
and the comparison fails when a margin is read one step off or a stop is off by one.
Then the K = 2 sweep's measures computed entry by entry (F_k from the final margins, the
first step, D_k) against the (K, K, B) formulas they replace: the same bits, signs of
zeros included, and not when an input is one ulp off."""

import math

import numpy as np
import pytest

from oodcalc import sweep as sw
from oodcalc.finetune import compiled, dynamics
from oodcalc.finetune.dynamics import descend, descend_columns, ood_start, ray_logits

needs_numba = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def assert_same_descent(a, b, atol=1e-12):
    assert np.array_equal(a.steps, b.steps)
    assert np.array_equal(a.converged, b.converged)
    np.testing.assert_allclose(a.z, b.z, rtol=0, atol=atol)


def phase_cases(seed: int):
    """A 9×9 parallel-shift grid (shared margins: γ's on a lattice), random K = 2
    columns (each margin its own) and rotations at K = 3; one (η, ε) each."""
    rng = np.random.default_rng(seed)
    g = np.linspace(-1, 1, 9)
    grid = sw.gamma_grid([g, g], eta=0.3)
    z1 = sw._pretrain(grid, 10**5)[0]
    yield ood_start(z1, grid.M), 0.3, 0.01
    yield rng.normal(scale=2.0, size=(60, 2, 2)), 0.5, 0.02
    own = rng.normal(scale=1.0, size=40)
    yield ray_logits(3, own, -own / 2), 0.1, 0.01


@needs_numba
@pytest.mark.parametrize("seed", [0, 1])
def test_the_pass_matches_the_numpy_engine_and_the_plain_descent(seed):
    for z0, eta, eps in phase_cases(seed):
        numpy_run = descend_columns(z0, eta, eps, 10**5)
        fast = descend_columns(z0, eta, eps, 10**5, compiled_margins=True)
        assert_same_descent(fast, numpy_run)
        assert_same_descent(fast, descend(z0, eta, eps, 10**5))
        for cap in (5, int(numpy_run.steps.max()) - 1):     # some stop at the cap
            assert_same_descent(descend_columns(z0, eta, eps, cap, compiled_margins=True),
                                descend_columns(z0, eta, eps, cap))


@needs_numba
def test_the_margins_order_is_a_speed_up_not_an_assumption():
    """The kernel given its margins shuffled (every step out of order: the partition
    runs) gives the same bits as sorted."""
    kernel = compiled.margin_pass()
    rng = np.random.default_rng(5)
    B, K = 300, 2
    d = rng.uniform(-3, 3, (B, K)).round(2)                  # shared margins
    distinct, inverse = np.unique(d, return_inverse=True)

    def run(w0, slots):
        flat = slots.ravel()
        by_col = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=w0.size))])
        out = np.empty(B, np.int64), np.empty(B, bool), np.empty((B, K))
        assert kernel(w0, 0.2, 0.01, 1.0, 1.0, slots, by_col,
                      np.argsort(flat, kind="stable") // K, 10**5, *out) >= 0
        return out

    ordered = run(-distinct, inverse.reshape(B, K))
    perm = rng.permutation(distinct.size)
    shuffled = run(-distinct[perm], np.argsort(perm)[inverse.reshape(B, K)])
    for a, b in zip(ordered, shuffled):
        assert np.array_equal(a, b)


def test_without_numba_the_numpy_engine_runs(monkeypatch):
    z0, eta, eps = next(phase_cases(0))
    reference = descend_columns(z0, eta, eps, 10**5)
    monkeypatch.setattr(compiled, "margin_pass", lambda: None)
    again = descend_columns(z0, eta, eps, 10**5, compiled_margins=True)
    assert_same_descent(again, reference, atol=0)                # bit for bit


def one_step_on(run, eta):
    """What a pass that read each margin one step late would return: every final margin
    moved by one more step of the margin engine's arithmetic (K = 2)."""
    B, K = run[0].size, 2

    def moved(final):
        u = np.exp(-final)
        p = 1.0 / (u + 1.0)
        r = u * p
        return final + (p * r * r) * (eta / K * 4.0)
    return run[0], run[1], moved(run[2])


@needs_numba
@pytest.mark.parametrize("mutation", ["margin one step late", "stop one step late"])
def test_the_comparison_catches_a_pass_off_by_one_step(mutation, monkeypatch):
    z0, eta, eps = next(phase_cases(0))
    reference = descend_columns(z0, eta, eps, 10**5)
    original = dynamics._margin_pass

    def mutated(*args):
        steps, converged, final = original(*args)
        if mutation == "stop one step late":
            return steps + 1, converged, final
        return one_step_on((steps, converged, final), eta)

    monkeypatch.setattr(dynamics, "_margin_pass", mutated)
    with pytest.raises(AssertionError):
        assert_same_descent(descend_columns(z0, eta, eps, 10**5, compiled_margins=True),
                            reference)


@needs_numba
def test_a_sweep_on_the_pass_equals_the_numpy_sweep(monkeypatch):
    """Every column identical but F and F_k (to 1e-12), whatever the chunking; the
    engine is named."""
    g = np.linspace(-1, 1, 7)
    grid = sw.gamma_grid([g, g], eta_ft=[0.1, 0.4])
    monkeypatch.setattr(compiled, "PAYS_FROM_MARGIN_STEPS", 0.0)
    fast = sw.sweep(grid)
    assert "margin pass" in fast.meta["engine"]
    split = sw.sweep(grid, chunk_size=10)
    for name in fast.columns:
        assert np.array_equal(fast[name], split[name]), name
    monkeypatch.setattr(compiled, "PAYS_FROM_MARGIN_STEPS", math.inf)
    monkeypatch.setattr(compiled, "loaded", lambda: False)
    reference = sw.sweep(grid)
    assert reference.meta["engine"] == "NumPy"
    for name in fast.columns:
        if name == "F" or name.startswith("F_"):
            np.testing.assert_allclose(fast[name], reference[name], rtol=0, atol=1e-12)
        else:
            assert np.array_equal(fast[name], reference[name]), name


@needs_numba
def test_several_rules_run_one_pass_each_and_a_row_does_not_see_the_others():
    rng = np.random.default_rng(8)
    z0 = rng.normal(scale=2.0, size=(80, 2, 2))
    eta, eps = rng.choice([0.1, 0.5], 80), rng.choice([0.01, 0.03], 80)
    fast = descend_columns(z0, eta, eps, 10**5, compiled_margins=True)
    assert_same_descent(fast, descend_columns(z0, eta, eps, 10**5))
    margins = descend_columns(z0, eta, eps, 10**5, compiled_margins=True, logits=False)
    assert margins.z is None and np.array_equal(margins.steps, fast.steps)
    for b in (0, 33, 79):                                      # alone: the same bits
        alone = descend_columns(z0[b:b + 1], eta[b:b + 1], eps[b:b + 1], 10**5,
                                compiled_margins=True, logits=False)
        assert alone.steps[0] == fast.steps[b]
        assert np.array_equal(alone.margins[0], margins.margins[b])


# --- the K = 2 measures entry by entry: the bits of the (K, K, B) formulas -------------

def k2_case(seed: int):
    """Parallel shifts with γ on a lattice (γ = 0, γ1 = ±γ2: zero terms) and a few
    general K = 2 geometries (M not diagonal), from the pretrained logits."""
    rng = np.random.default_rng(seed)
    gammas = rng.choice(np.linspace(-1, 1, 9), size=(60, 2))
    M = np.stack([np.diag(g) for g in gammas])
    M[:5] = rng.normal(size=(5, 2, 2)) / 2                     # general rows
    z1 = np.broadcast_to(ray_logits(2, 2.5, -2.5), (60, 2, 2))
    return gammas, M, z1, ood_start(z1, M)


def same_bits(x, y) -> bool:
    return np.array_equal(x, y) and np.array_equal(np.signbit(x), np.signbit(y))


@pytest.mark.parametrize("mutation", [None, "one ulp off"])
def test_k2_source_errors_have_the_bits_of_source_errors(mutation):
    from oodcalc.finetune.dynamics import _errors_after, first_step_moves, source_errors
    from oodcalc.model import attention_first, matrices_first
    _, M, z1, z0 = k2_case(1)
    run = descend_columns(z0, 0.1, 0.01, 10**5, logits=False)   # the NumPy engine
    z = descend_columns(z0, 0.1, 0.01, 10**5).z
    if mutation:                                                 # what the check must see
        run = dynamics.Descent(None, run.steps, run.converged,
                               margins=np.nextafter(run.margins, np.inf))
    reference = source_errors(z1, M, z0, z)
    from_margins = sw._errors_after_k2(z1, M, z0, margins=run.margins)
    assert same_bits(sw._errors_after_k2(z1, M, z0, z_ood=z), reference)
    assert same_bits(from_margins, reference) == (mutation is None)
    moves = first_step_moves(z0, np.full(60, 0.1), attention_first(matrices_first(z0)))
    assert same_bits(sw._errors_after_k2(z1, M, z0, moves=moves),
                     _errors_after(z1, M, moves.copy()))


@pytest.mark.parametrize("mutation", [None, "attention one ulp off"])
def test_k2_first_step_terms_have_the_bits_of_theory(mutation):
    from oodcalc import theory
    from oodcalc.model import attention_first, matrices_first
    gammas, M, _, z0 = k2_case(2)
    gammas, z0 = gammas[5:], z0[5:]                              # parallel shifts
    D, scale = theory.first_step_terms(gammas, z0)
    assert (D == 0).any() and np.signbit(D[D == 0]).any()        # −0 terms: signs matter
    a = attention_first(matrices_first(z0))
    if mutation:
        a = np.nextafter(a, 2.0)
    D2, scale2 = sw._first_step_terms_k2(gammas, a)
    assert (same_bits(D2, D) and same_bits(scale2, scale)) == (mutation is None)


@pytest.mark.parametrize("mutation", [None, "logits one ulp off"])
def test_k2_start_has_the_bits_of_the_kxk_formulas(mutation):
    from oodcalc.finetune.dynamics import first_step_moves
    from oodcalc.model import attention_first, loss, matrices_first
    _, _, _, z0 = k2_case(3)
    eta = np.random.default_rng(3).choice([0.1, 0.7], len(z0))
    a = attention_first(matrices_first(z0))
    expected = a, first_step_moves(z0, eta, a), loss(z0)
    got = sw._start_k2(np.nextafter(z0, np.inf) if mutation else z0, eta)
    assert all(same_bits(x, y) for x, y in zip(got, expected)) == (mutation is None)
