"""The node kernel of large-K parallel shifts (``oodcalc.finetune._kernels``) against the
direct per-column kernel it replaces (kept callable as ``finetune_diagonal_direct``): the
same above-ε flags step by step (hence T2), logits, source losses, trends and snapshots
to 1e-12, on random γ up to K = 256; a wrong weight or too few nodes is caught.

The full ``predict`` at K = 256 (796,399 fine-tuning steps) is compared in
``benchmarks/bench_predict.py`` (T2 identical, F_k to 1e-12); here the kernels run a few
hundred steps from a point of the pretrained ray, and ``predict`` itself at K = 48.
"""

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.finetune import compiled
from oodcalc.finetune.dynamics import ray_logits

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


def _kernels():
    from oodcalc.finetune import _kernels
    return _kernels


def _start(K: int, gamma: np.ndarray, own: float = 9.0):
    """The kernel's inputs from a point ``(own, −own/(K−1))`` of the pretrained ray."""
    z1 = ray_logits(K, own, -own / (K - 1))
    z0 = np.diag(gamma) @ z1 @ np.diag(gamma)
    return np.ascontiguousarray(z0.T), np.ascontiguousarray(z1.T)


def _run(kernel, X0, Z1, gamma, steps, *, eta=0.1, eps=0.01, blocks=1, stride=50):
    """``steps`` steps in ``blocks`` calls; flags, losses, trends, snapshots, final X."""
    K = gamma.size
    X = X0.copy()
    first, prev = np.zeros(K), np.zeros(K)
    rises, falls = np.zeros(K, dtype=bool), np.zeros(K, dtype=bool)
    above, snaps = [], []
    bounds = np.linspace(0, steps, blocks + 1).astype(int)
    for t, end in zip(bounds[:-1], bounds[1:]):
        flags = np.empty((end - t, K), dtype=bool)
        start = -(-t // stride) * stride
        snap = np.empty((max(0, (end - 1 - start) // stride + 1), K, K))
        kernel(X, X0, Z1, gamma, eta / K, eps, t, end - t, True, flags, first, prev, rises,
               falls, 1e-15, snap, start, stride)
        above.append(flags)
        snaps.append(snap)
    return dict(X=X, above=np.concatenate(above), first=first, prev=prev, rises=rises,
                falls=falls, snaps=np.concatenate(snaps))


def _agree(a, b, tol=1e-12):
    """The checks of the issue: flags identical, values within ``tol`` (losses: ``tol/K``,
    the units of F_k)."""
    K = a["X"].shape[0]
    assert np.array_equal(a["above"], b["above"])
    assert np.array_equal(a["rises"], b["rises"]) and np.array_equal(a["falls"], b["falls"])
    assert np.abs(a["X"] - b["X"]).max() <= tol
    assert np.abs(a["snaps"] - b["snaps"]).max() <= tol
    for key in ("first", "prev"):
        assert np.abs(a[key] - b[key]).max() <= tol / K


@pytest.mark.parametrize("K, steps, seed", [(48, 400, 1), (100, 400, 2), (256, 300, 0)])
def test_nodes_match_the_direct_kernel_on_random_gamma(K, steps, seed):
    k = _kernels()
    gamma = np.random.default_rng(seed).uniform(-1, 1, K).round(3)
    gamma[0] = 1.0
    X0, Z1 = _start(K, gamma)
    plan = k._plan(X0, Z1, gamma)
    assert plan is not None and plan[0].shape[1] < K // 4         # the nodes really ran
    # the own logits start spread out (γ_k² · 9): some columns start above ε, some below,
    # and cross it within the steps
    direct = _run(k.finetune_diagonal_direct, X0, Z1, gamma, steps)
    nodes = _run(k.finetune_diagonal, X0, Z1, gamma, steps)
    assert direct["above"][0].any() and not direct["above"][0].all()
    _agree(nodes, direct)


def test_few_distinct_gammas_take_every_value_as_a_node():
    """At most ``m`` distinct γ among a column's others: all are nodes, weighted by their
    counts (the quadrature is then exact)."""
    k = _kernels()
    gamma = np.resize([0.9, -0.4, 0.2, -1.0, 0.55], 64)
    X0, Z1 = _start(64, gamma)
    index, weights, _ = k._plan(X0, Z1, gamma)
    assert sorted(np.unique(weights[0])) == [0.0, 12.0, 13.0]    # 63 others: 13,13,13,12,12
    _agree(_run(k.finetune_diagonal, X0, Z1, gamma, 300),
           _run(k.finetune_diagonal_direct, X0, Z1, gamma, 300))


def test_blocks_do_not_change_the_node_kernel():
    """The state between calls is X at the nodes: one call or seven give the same bits."""
    k = _kernels()
    gamma = np.random.default_rng(3).uniform(-1, 1, 80).round(3)
    X0, Z1 = _start(80, gamma)
    one = _run(k.finetune_diagonal, X0, Z1, gamma, 350)
    seven = _run(k.finetune_diagonal, X0, Z1, gamma, 350, blocks=7)
    _agree(one, seven, tol=0.0)


def test_other_logits_not_a_function_of_gamma_go_direct():
    k = _kernels()
    gamma = np.random.default_rng(4).uniform(-1, 1, 64).round(3)
    X0, Z1 = _start(64, gamma)
    assert k._plan(X0, Z1, gamma) is not None
    X0[5, 9] += 1e-6                                             # not γ_9's value any more
    assert k._plan(X0, Z1, gamma) is None
    assert k._plan(*_start(40, gamma[:40]), gamma[:40]) is None  # small K: direct


@pytest.mark.parametrize("mutation", ["weight", "nodes", "squares"])
def test_the_comparison_catches_a_wrong_node_kernel(mutation, monkeypatch):
    """A quadrature weight off by 1e-9, three nodes where the bound asks for seven, the
    squares' sum with the plain weights' order swapped: each is caught."""
    k = _kernels()
    K = 256
    gamma = np.random.default_rng(0).uniform(-1, 1, K).round(3)
    gamma[0] = 1.0
    X0, Z1 = _start(K, gamma)
    direct = _run(k.finetune_diagonal_direct, X0, Z1, gamma, 300)
    plan = k.node_plan
    if mutation == "weight":
        def wrong(gamma, m):
            index, weights, interp = plan(gamma, m)
            weights[:, 1] *= 1 + 1e-9
            return index, weights, interp
        monkeypatch.setattr(k, "node_plan", wrong)
    elif mutation == "nodes":
        monkeypatch.setattr(k, "node_plan", lambda gamma, m: plan(gamma, 3))
    else:
        def wrong(gamma, m):
            index, weights, interp = plan(gamma, m)
            return index, weights[:, ::-1].copy(), interp
        monkeypatch.setattr(k, "node_plan", wrong)
    monkeypatch.setattr(k, "_plans", {})
    with pytest.raises(AssertionError):
        _agree(_run(k.finetune_diagonal, X0, Z1, gamma, 300), direct)


def test_predict_through_the_nodes_matches_the_direct_kernel(monkeypatch):
    """``predict`` end to end (K = 48, ε = 0.1, η = 1: a short run): T2 identical, F_k,
    trends, logits and trajectories as by the direct kernel."""
    k = _kernels()
    monkeypatch.setattr(oc.estimates, "compiled_pays", lambda K, steps: True)
    gamma = np.random.default_rng(5).uniform(-1, 1, 48).round(3)
    setting = oc.Setting(oc.parallel_shift(gamma), oc.Protocol(eps=0.1, eta=1.0))
    nodes = oc.predict(setting)
    monkeypatch.setattr(k, "NODES_FROM_K", 10**9)
    direct = oc.predict(setting)
    assert nodes.finetune.T2 == direct.finetune.T2 > 100
    for a, b in zip(nodes.forgetting, direct.forgetting):
        assert a.trend == b.trend and abs(a.F_k - b.F_k) <= 1e-12
    np.testing.assert_allclose(nodes.finetune.z_ood, direct.finetune.z_ood, rtol=0, atol=1e-12)
    for key in ("finetune_ood", "finetune_source", "finetune_source_loss"):
        np.testing.assert_allclose(nodes.trajectories[key], direct.trajectories[key], rtol=0,
                                   atol=1e-12)


# --- the symmetric ray's loop: one exp a step, the fixed source column's loss once ------

import math  # noqa: E402

from oodcalc.finetune.ray_loop import ray_step_loop  # noqa: E402


def _ray_reference(own: float, other: float, K: int, eta: float, eps: float,
                  max_steps: int, stride: int, path: np.ndarray,
                  src_own: float, src_other: float, scale: float) -> tuple:
    """The loop before one exp a step and the fixed source (verbatim otherwise)."""
    m = K - 1.0
    rate = eta / K
    own0, other0 = own, other
    recorded = 0
    prev = 0.0
    first = 0.0
    rises = False
    falls = False
    t = 0
    while True:
        if stride > 0 and t % stride == 0:
            if recorded < path.shape[0]:
                path[recorded, 0] = own
                path[recorded, 1] = other
            recorded += 1
        # the column's attention, error and gradient (softmax with max subtracted)
        top = own if own >= other else other
        wo = math.exp(own - top)
        wb = math.exp(other - top)
        total = wo + m * wb
        p = wo / total
        q = wb / total
        r = p - 1.0
        e = 0.5 * (r * r + m * q * q)
        # the source column's loss, for the trend
        so = src_own + scale * (own - own0)
        sb = src_other + scale * (other - other0)
        stop = so if so >= sb else sb
        sw = math.exp(so - stop)
        sv = math.exp(sb - stop)
        stotal = sw + m * sv
        sr = sw / stotal - 1.0
        sq = sv / stotal
        loss = 0.5 * (sr * sr + m * sq * sq) / K
        if t == 0:
            first = loss
        elif loss - prev > 1e-15:
            rises = True
        elif prev - loss > 1e-15:
            falls = True
        prev = loss
        if e <= eps or t >= max_steps:
            break
        S = p * r + m * q * q
        own -= (r - S) * p * rate
        other -= (q - S) * q * rate
        t += 1
    if stride > 0 and (t % stride) != 0:
        if recorded < path.shape[0]:
            path[recorded, 0] = own
            path[recorded, 1] = other
        recorded += 1
    return own, other, t, e <= eps, recorded, first, prev, rises, falls


_RAY_CASES = [(0.0, 0.0, 64, 0.1, 0.01, 10**6, 0, 0.0, 0.0, 0.0),        # pretraining
              (0.0, 0.0, 5, 2.0, 0.01, 10**6, 3, 0.0, 0.0, 0.0),
              (-1.5, 0.7, 3, 0.5, 0.01, 10**6, 7, -1.5, 0.7, 0.0),     # own below other
              (2.0, -0.2, 8, 0.3, 0.01, 10**6, 5, 1.1, -0.1, 0.6),     # fine-tuning
              (-0.4, 0.3, 2, 1.0, 0.01, 10**6, 0, 0.2, 0.9, -0.8),
              (3.0, -1.0, 16, 0.1, 0.001, 200, 9, 0.5, 0.5, 0.3)]      # stops at the cap


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_ray_loop_gives_the_bits_of_the_previous_loop(engine):
    """Skipping exp(0) = 1 and the fixed source's repeated loss changes no bit: steps,
    logits, recorded path, losses and trend, plain Python and compiled alike."""
    loop = ray_step_loop if engine == "python" else compiled.ray_step_loop()
    for case in _RAY_CASES:
        path_a, path_b = np.empty((20000, 2)), np.empty((20000, 2))
        a = loop(*case[:7], path_a, *case[7:])
        b = _ray_reference(*case[:7], path_b, *case[7:])
        assert a == b and np.array_equal(path_a[:a[4]], path_b[:b[4]])
        # the comparison can fail: a source 1e-12 away changes the losses
        moved = _ray_reference(*case[:7], path_b, case[7], case[8] + 1e-12, case[9])
        assert moved[5:7] != a[5:7]


def test_cost_model_knows_where_the_nodes_start():
    """The cost model (no Numba import) and the kernel agree on the K of the switch, and
    it prices the node kernel below the direct one there."""
    from oodcalc import estimates
    assert estimates.NODES_FROM_K == _kernels().NODES_FROM_K
    K = estimates.NODES_FROM_K
    nodes = estimates.finetune_seconds(K, 12.0, "compiled")
    direct = estimates.finetune_seconds(K - 1, 12.0, "compiled") * (K / (K - 1)) ** 2
    assert nodes < direct
