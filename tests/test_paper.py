"""The paper's figures as data: one record per printed number, each with its table row."""

import math
import re

import pytest

from oodcalc import paper


def test_figures_are_complete_records():
    figs = paper.figures()
    assert len(figs) == len(set(figs))
    for f in figs.values():
        assert f.experiment and f.quantity and f.printed and f.where
        assert f.value is None or math.isfinite(f.value)
        assert f.source.startswith("arXiv 2609.36448, ")


def test_every_value_is_a_number_the_paper_prints():
    """``value`` is read off ``printed`` (a percentage as a fraction): a typo in either
    shows here."""
    for f in paper.figures().values():
        if f.value is None:
            continue
        text = f.printed.replace("−", "-")
        numbers = [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?", text)]
        if text.rstrip().endswith("%"):
            numbers = [x / 100 for x in numbers]
        assert any(math.isclose(f.value, x, rel_tol=1e-12, abs_tol=1e-15) for x in numbers), f


def test_a_figure_by_id_and_a_clear_error_otherwise():
    figs = paper.figures()
    assert all(paper.figure(i) == f for i, f in figs.items())
    try:
        paper.figure("no-such-figure")
    except KeyError as err:
        assert "synthetic-k4-t1-loss" in str(err)
    else:
        raise AssertionError("expected a KeyError")


def test_angles_of_settings_are_read_as_multiples_of_pi():
    assert paper.radians("pi/6") == math.pi / 6
    assert paper.radians("-2pi/3") == -2 * math.pi / 3
    assert paper.radians("pi") == math.pi
    assert paper.radians(0.0) == 0.0
    with pytest.raises(ValueError, match="sixty degrees"):
        paper.radians("sixty degrees")
