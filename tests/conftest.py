import sys

import numpy as np
import pytest


def random_orthonormal(rng: np.random.Generator, d: int, K: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, K)))
    return q * np.sign(np.diag(r))


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


@pytest.fixture(scope="module", autouse=True)
def no_figure_outlives_its_module():
    """A test file that draws and inspects Figures (shared by its tests) leaves them open;
    closed when the file is done, so a later file never meets matplotlib's more-than-20-figures warning (an error under this suite's
    filterwarnings) because of what ran before it."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(scope="session", autouse=True)
def derivations_once_per_session():
    """The ledger runs each claim's derivation once per session, shared with the symbolic
    tests (``derivation_of``), and writes nothing to the user's derivation cache
    (tests/test_derivation_cache.py tests that cache in temporary directories)."""
    from oodcalc import verify
    from oodcalc.symbolic.cache import from_derivation
    from oodcalc.symbolic.documents import derivation_of
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify, "cached_derivation",
                      lambda claim: from_derivation(claim, derivation_of(claim.id)))
        yield


@pytest.fixture(scope="session")
def quick_context():
    """One verification context (quick budget) for the whole session: the ledger test and
    the numeric mutation tests share its simulations (the mutations change only what the
    simulations are compared with)."""
    from oodcalc import checks
    return checks.Context.shared(checks.QUICK)


@pytest.fixture(scope="session")
def quick_ledger(quick_context):
    from oodcalc import checks, verify
    from oodcalc.claims import CLAIMS
    return verify.Ledger(checks.QUICK, [verify.run_claim(c, quick_context) for c in CLAIMS], 0.0)
