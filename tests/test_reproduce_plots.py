"""reproduce and plot, end to end (the numbers they print are checked in test_theory)."""

import json

import pytest

from oodcalc.cli import main
from oodcalc.experiments import K2_GAMMA2, reproduce

pytest.importorskip("matplotlib")


def test_reproduce_tables_cover_the_seed():
    tables = reproduce()
    k4, k2 = tables.values()
    assert {r.quantity.experiment for r in k4} == {"θ = 0", "θ = π/6", "θ = π/3",
                                                   "mean query", "orthogonal"}
    assert len(k2) == len(K2_GAMMA2)
    for row in k4 + k2:
        # simulation (plain GD on the full Q) agrees with the theory on every row
        for value in row.simulations.values():
            assert value == pytest.approx(row.theory, abs=1e-12)
    corollary = [r for r in k4 if r.quantity.experiment in ("mean query", "orthogonal")]
    assert all(r.magnitude == "agrees" for r in corollary)
    # the seed's K = 2 forgetting magnitudes do not follow from the protocol, and we say so
    assert all(r.magnitude != "agrees" for r in k2)
    assert [r.sign for r in k2][:4] == ["same sign"] * 4


def test_reproduce_cli_formats(capsys, tmp_path):
    assert main(["reproduce"]) == 0
    assert "seed" in capsys.readouterr().out
    target = tmp_path / "tables.json"
    target.write_text("old")
    assert main(["reproduce", "synthetic", "-f", "json", "-o", str(target)]) == 0
    data = json.loads(target.read_text())
    assert data["parameters"]["eps"] == 0.01 and len(data["tables"]) == 2
    assert main(["reproduce", "synthetic", "-f", "markdown"]) == 0
    assert "| experiment |" in capsys.readouterr().out
    assert main(["reproduce", "synthetic", "-o", str(target)]) == 2   # a file needs markdown or json
    assert json.loads(target.read_text()) == data        # and the old file is intact


@pytest.mark.parametrize("args", [
    ["losses", "--gamma", "1,-0.9"],
    ["weights", "--theta", "pi/4", "--K", "3"],
    ["ood-vs-theta", "--K", "3"],
])
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_the_named_format(tmp_path, capsys, args, suffix):
    target = tmp_path / f"figure{suffix}"
    assert main(["plot", *args, "-o", str(target)]) == 0
    head = target.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in head or b"<?xml" in head


@pytest.mark.parametrize("args, fragment", [
    (["losses", "--gamma", "1,-0.9", "-o", "{tmp}/f.txt"], "--output"),
    (["losses", "--gamma", "1,-0.9", "-o", "{tmp}/missing/f.png"], "does not exist"),
    (["losses", "-o", "{tmp}/f.png"], "geometry"),
    (["ood-vs-theta", "--K", "1", "-o", "{tmp}/f.png"], "--K"),
])
def test_plot_bad_input(tmp_path, capsys, args, fragment):
    assert main(["plot", *[a.format(tmp=tmp_path) for a in args]]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
