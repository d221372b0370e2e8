import json
import math
import pickle

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.geometry import PARALLEL_TOL

from conftest import random_orthonormal


def assert_orthonormal(F):
    np.testing.assert_allclose(F.T @ F, np.eye(F.shape[1]), atol=1e-12)


@pytest.mark.parametrize("gamma", [[1, -0.9], [0.3, -0.7, 0.9, 0.1], [1, 1], [-1, 0, 0.5]])
def test_parallel_shift(gamma):
    g = oc.parallel_shift(gamma)
    assert_orthonormal(g.V)
    assert_orthonormal(g.U)
    np.testing.assert_allclose(g.M, np.diag(gamma), atol=1e-15)
    np.testing.assert_allclose(g.gamma, gamma)
    assert g.d == len(gamma) + sum(abs(x) < 1 for x in gamma)  # smallest d that holds it


def test_padding_to_larger_d_keeps_M():
    small, big = oc.parallel_shift([1, -0.9]), oc.parallel_shift([1, -0.9], d=10)
    assert big.d == 10
    np.testing.assert_array_equal(small.M, big.M)


@pytest.mark.parametrize("theta", [0.0, math.pi / 6, math.pi / 3, math.pi, 4.0])
def test_rotation_is_parallel_shift_by_cos(theta):
    g = oc.rotation(theta, 4)
    assert_orthonormal(g.U)
    np.testing.assert_allclose(g.M, math.cos(theta) * np.eye(4), atol=1e-12)
    assert g.d == (4 if theta in (0.0, math.pi) else 8)


def test_mean_query():
    g = oc.mean_query(4)
    assert_orthonormal(g.U)
    vbar = g.V.sum(axis=1) / 2
    np.testing.assert_allclose(g.U[:, 0], vbar, atol=1e-15)
    np.testing.assert_allclose(g.M.T @ g.M, np.eye(4), atol=1e-12)  # span(U) = span(V)
    assert g.gamma is None  # not a parallel shift


def test_orthogonal():
    g = oc.orthogonal(3)
    assert g.d == 6 and np.abs(g.M).max() == 0


def test_from_arrays_accepts_general_position(rng):
    V, U = random_orthonormal(rng, 7, 3), random_orthonormal(rng, 7, 3)
    g = oc.from_arrays(V, U)
    assert g.K == 3 and g.d == 7
    assert np.abs(g.M - np.diag(np.diag(g.M))).max() > PARALLEL_TOL and g.gamma is None


@pytest.mark.parametrize("bad, fragment", [
    (lambda: oc.parallel_shift([1.5, 0]), "[-1, 1]"),
    (lambda: oc.parallel_shift([0.5]), "at least 2"),
    (lambda: oc.parallel_shift([float("nan"), 0]), "finite"),
    (lambda: oc.parallel_shift([1, -0.9], d=2), "dimension >= 3"),
    (lambda: oc.rotation(0.1, 1), "integer >= 2"),
    (lambda: oc.from_arrays(np.eye(3, 2), 2 * np.eye(3, 2)), "column 1 of squared norm 4"),
    (lambda: oc.from_arrays(np.eye(3, 2), np.array([[1, 1], [0, 0], [0, 0.0]])),
     "smallest eigenvalue 0"),
    (lambda: oc.overlap(1.0, [1, 0.5]), "rho: got 1.0"),
    (lambda: oc.overlap(-0.5, [1, 0.5, 0.2]), "(-0.5, 1)"),
    (lambda: oc.overlap(0.5, [1, 1.5]), "gamma[1]"),
    (lambda: oc.gram([[1, 0.5], [0.4, 1]], [1, 0.5]), "symmetric"),
    (lambda: oc.gram([[1, 0.5], [0.5, 1]], [1, 0.5, 0]), "G_V is 2 × 2"),
    (lambda: oc.gram([[1, 1], [1, 1]], [1, 0.5]), "positive definite"),
    (lambda: oc.from_arrays(np.eye(3, 2), np.eye(4, 2)), "same shape"),
    (lambda: oc.from_arrays(np.eye(2, 3), np.eye(2, 3)), "d >= K"),
    (lambda: oc.from_arrays(np.full((3, 2), np.inf), np.eye(3, 2)), "finite"),
])
def test_bad_geometry_is_an_input_error(bad, fragment):
    with pytest.raises(oc.InputError) as err:
        bad()
    assert fragment in str(err.value)


def write_features(tmp_path, suffix, F, name):
    path = tmp_path / f"{name}{suffix}"
    if suffix == ".npy":
        np.save(path, F)
    elif suffix == ".csv":
        np.savetxt(path, F, delimiter=",")
    else:
        path.write_text(json.dumps(F.tolist()))
    return path


@pytest.mark.parametrize("suffix", [".npy", ".csv", ".json"])
def test_feature_files_round_trip(tmp_path, rng, suffix):
    V, U = random_orthonormal(rng, 5, 3), random_orthonormal(rng, 5, 3)
    g = oc.from_files(write_features(tmp_path, suffix, V, "V"),
                      write_features(tmp_path, suffix, U, "U"))
    np.testing.assert_allclose(g.M, V.T @ U, atol=1e-12)
    assert len(g.describe()["sha256"]) == 2


def test_pickles_are_never_loaded(tmp_path):
    sentinel = tmp_path / "ran"
    path = tmp_path / "V.npy"
    np.save(path, np.array([Exploit(str(sentinel))], dtype=object), allow_pickle=True)
    with pytest.raises(oc.InputError, match="never loaded"):
        oc.from_files(path, path)
    assert not sentinel.exists()
    pkl = tmp_path / "V.pkl"
    pkl.write_bytes(pickle.dumps(np.eye(3, 2)))
    with pytest.raises(oc.InputError, match="pickles are never loaded"):
        oc.from_files(pkl, pkl)


class Exploit:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_missing_file(tmp_path):
    with pytest.raises(oc.InputError, match="no such file"):
        oc.from_files(tmp_path / "nope.npy", tmp_path / "nope.npy")


def test_a_known_diagonal_M_is_bit_for_bit_the_product():
    """M built from the constructor's diagonal equals VᵀU exactly, signed zeros included."""
    def same(a, b):
        return np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))
    rng = np.random.default_rng(3)
    geometries = [oc.parallel_shift(g, d=d) for g, d in (
        ([1, -0.9], None), ([0.0, -0.0, 1, -1], None), ([-0.0, 0.5], 7), ([-1, -1, -1], None),
        (rng.uniform(-1, 1, 64), None), (rng.choice([-1.0, -0.0, 0.0, 1.0, -0.5], 40), 90))]
    geometries += [oc.rotation(t, K) for t, K in ((0.5, 3), (math.pi, 4), (math.pi / 2, 3),
                                                  (-2 * math.pi / 3, 5), (2 * math.pi, 2))]
    geometries += [oc.orthogonal(3), oc.orthogonal(4, d=11)]
    for g in geometries:
        assert g.known_diagonal is not None
        assert same(g.M, g.V.T @ g.U), (g.kind, g.params)
    files = oc.from_arrays(np.eye(3), np.eye(3)[:, ::-1])    # not known: the product
    assert files.known_diagonal is None and same(files.M, files.V.T @ files.U)
