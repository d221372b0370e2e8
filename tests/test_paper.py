"""The paper's figures as data: one record per printed number, each with its table row."""

import math

import pytest

from oodcalc import paper


def test_figures_are_complete_records():
    figs = paper.figures()
    assert len(figs) == len(set(figs))
    for f in figs.values():
        assert f.experiment and f.quantity and f.printed and f.where
        assert f.value is None or math.isfinite(f.value)
        assert f.source.startswith("arXiv 2609.36448, ")


def test_a_figure_by_id_and_a_clear_error_otherwise():
    assert paper.figure("synthetic-k4-rotation-pi6").value == 0.0182
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
