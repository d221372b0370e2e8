import numpy as np
import pytest


def random_orthonormal(rng: np.random.Generator, d: int, K: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, K)))
    return q * np.sign(np.diag(r))


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)
