"""SweepResult.to_pandas() and .to_xarray(): the same numbers as to_csv and grid(), on the
grid's axes. pandas and xarray are optional (the `frames` extra): tests skip without them."""

from __future__ import annotations

import doctest
import inspect
import io
import sys

import numpy as np
import pytest

from oodcalc.sweep import SweepResult, gamma_grid, gamma_rows, read_result, sweep, theta_grid


@pytest.fixture(scope="module")
def phase():
    """As `oodcalc sweep --gamma=-1:1:5,-1:1:5` (25 rows, default ε = 0.01, η = 0.1)."""
    axis = np.linspace(-1, 1, 5)
    return sweep(gamma_grid([axis, axis]))


def test_to_pandas_is_the_csv(phase):
    pd = pytest.importorskip("pandas", reason="pandas is optional (the frames extra)")
    df = phase.to_pandas()
    assert list(df.columns) == list(phase.columns) and len(df) == len(phase) == 25
    assert df.index.name == "config" and list(df.index) == list(range(25))
    csv = pd.read_csv(io.StringIO(phase.to_csv()), keep_default_na=False)
    assert list(csv.columns) == list(df.columns)
    for name, column in phase.columns.items():
        if column.dtype.kind in "fiu":     # the CSV's floats round-trip exactly
            assert np.array_equal(df[name].to_numpy(), csv[name].to_numpy(), equal_nan=True)
            assert np.array_equal(df[name].to_numpy(), column, equal_nan=True), name
        elif column.dtype.kind == "b":
            assert (csv[name].astype(str).str.lower() == df[name].astype(str).str.lower()).all()
        else:
            assert df[name].astype(str).tolist() == csv[name].astype(str).tolist(), name


def test_to_xarray_is_the_grid(phase):
    pytest.importorskip("xarray", reason="xarray is optional (the frames extra)")
    ds = phase.to_xarray()
    assert tuple(ds.sizes) == ("eps", "eta", "gamma_1", "gamma_2") == tuple(phase.meta["axes"])
    assert tuple(ds.sizes.values()) == phase.shape == (1, 1, 5, 5)
    assert ds["gamma_1"].values.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert ds["eps"].values.tolist() == [0.01] and ds["eta"].values.tolist() == [0.1]
    axes = set(phase.meta["axes"])
    assert set(ds.data_vars) == set(phase.columns) - axes
    for name in ds.data_vars:
        expected = phase.grid(name)
        expected = expected.astype(str) if expected.dtype == object else expected
        assert np.array_equal(ds[name].values, expected, equal_nan=expected.dtype.kind == "f")
    # a point chosen by its coordinates is that configuration's row (axis order matters:
    # γ = (1, -0.5) forgets feature 2, γ = (-0.5, 1) feature 1)
    for g1, g2 in [(1.0, -0.5), (-0.5, 1.0), (0.5, 0.0)]:
        row = np.flatnonzero((phase["gamma_1"] == g1) & (phase["gamma_2"] == g2))
        assert row.size == 1
        point = ds.sel(gamma_1=g1, gamma_2=g2).squeeze()
        for name in ("T1", "T2", "F", "F_1", "F_2", "regime_1", "regime_2"):
            assert point[name].item() == phase[name][row[0]], (g1, g2, name)
    assert ds.attrs["seed"] == 0 and ds.attrs["rows"] == 25


def test_to_xarray_on_other_axes_and_from_a_file(tmp_path):
    pytest.importorskip("xarray", reason="xarray is optional (the frames extra)")
    result = sweep(theta_grid([0.0, 0.4, 0.8], K=3, eps=[0.02, 0.05]))
    ds = result.to_xarray()
    assert dict(ds.sizes) == {"eps": 2, "eta": 1, "theta": 3}
    assert ds["eps"].values.tolist() == [0.02, 0.05]
    assert np.array_equal(ds["T1"].values, result.grid("T1"))
    assert ds["T1"].sel(eps=0.05).values.ravel().tolist() == \
        result["T1"][result["eps"] == 0.05].tolist()
    # what `oodcalc sweep ... -o x.npz` writes keeps its axes
    back = read_result(result.write(tmp_path / "theta.npz"))
    assert back.to_xarray().equals(ds)


def test_to_xarray_without_a_product_has_one_config_dimension():
    pytest.importorskip("xarray", reason="xarray is optional (the frames extra)")
    rows = sweep(gamma_rows([[1.0, -0.9], [0.5, 0.5]]))
    two = sweep([gamma_grid([[1.0], [-0.9]]), gamma_grid([[0.5], [0.5], [-0.2]])])
    for result in (rows, two):
        ds = result.to_xarray()
        assert list(ds.sizes) == ["config"] and ds.sizes["config"] == len(result)
        assert set(ds.data_vars) == set(result.columns)
        assert np.array_equal(ds["F"].values, result["F"])
    # rows of the K = 2 grid hold NaN in the third feature's column
    assert np.isnan(two.to_xarray()["gamma_3"].values[0])


@pytest.mark.parametrize("method, module", [("to_pandas", "pandas"), ("to_xarray", "xarray")])
def test_a_missing_library_names_the_extra(monkeypatch, phase, method, module):
    monkeypatch.setitem(sys.modules, module, None)      # `import module` now fails
    with pytest.raises(ImportError, match=rf'needs {module}.*oodcalc\[frames\]'):
        getattr(phase, method)()


@pytest.mark.parametrize("method, module", [("to_pandas", "pandas"), ("to_xarray", "xarray")])
def test_docstring_example_runs(method, module):
    pytest.importorskip(module, reason=f"{module} is optional (the frames extra)")
    obj = getattr(SweepResult, method)
    doc = inspect.getdoc(obj)
    for part in ("Parameters", "Returns", "Example", ">>>"):
        assert part in doc, part
    tests = doctest.DocTestFinder(recurse=False).find(obj, method, globs={})
    runner = doctest.DocTestRunner(verbose=False,  # not "-v" in sys.argv: pytest -v
                                    optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures = []
    for test in tests:
        runner.run(test, out=failures.append)
    assert runner.tries >= 4 and runner.failures == 0, "".join(failures)
