"""The Python API refuses what it cannot take with its own error (an ``InputError`` that
names the parameter, the value and what is accepted), never a foreign exception from
deep inside (AttributeError, OverflowError, a string iterated character by character)."""

from __future__ import annotations

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.errors import InputError, item_name
from oodcalc.prediction import expected_seconds
from oodcalc.sweep import gamma_grid

SETTING = oc.Setting(oc.parallel_shift([1, -0.9]))

REFUSED = {
    "Setting(None)": (lambda: oc.Setting(None), "Setting.geometry: got None; expected a Geometry"),
    "Setting(geometry, 3)": (lambda: oc.Setting(SETTING.geometry, 3),
                             "Setting.protocol: got 3; expected a Protocol"),
    "predict(None)": (lambda: oc.predict(None), "setting: got None; expected a Setting"),
    "predict(geometry)": (lambda: oc.predict(SETTING.geometry),
                          "setting: got Geometry(kind='parallel-shift'"),
    "expected_seconds(None)": (lambda: expected_seconds(None), "setting: got None"),
    "max_steps 10**30": (lambda: oc.Protocol(max_steps=10 ** 30),
                         'max_steps: got 1000000000000000000000000000000; expected an integer '
                         'from 1 to 2^53 or "auto"'),
    "max_steps 2**53 + 1": (lambda: oc.Protocol(max_steps=2 ** 53 + 1), "max_steps: got"),
    "ft_steps 10**30": (lambda: oc.Protocol(ft_steps=10 ** 30),
                        "ft_steps: got 1000000000000000000000000000000"),
    "parallel_shift('1,-0.9')": (lambda: oc.parallel_shift("1,-0.9"),
                                 "gamma: got '1,-0.9'; expected a sequence of numbers"),
    "parallel_shift(0.5)": (lambda: oc.parallel_shift(0.5), "gamma: got 0.5; expected a sequence"),
    "parallel_shift(None)": (lambda: oc.parallel_shift(None), "gamma: got None"),
    "parallel_shift(0-d array)": (lambda: oc.parallel_shift(np.array(1.0)), "gamma: got array(1.)"),
    "parallel_shift([1.2, 0.3])": (lambda: oc.parallel_shift([1.2, 0.3]),
                                   "gamma[0]: got 1.2; each γ must lie in [-1, 1]"),
    "parallel_shift([0.3, nan])": (lambda: oc.parallel_shift([0.3, float("nan")]), "gamma[1]: got nan"),
    "gamma_grid(eta='x')": (lambda: gamma_grid([[0.1], [0.2]], eta="x"),
                            "eta: got x; expected finite numbers > 0"),
    "gamma_grid(eps=None)": (lambda: gamma_grid([[0.1], [0.2]], eps=None), "eps: got None"),
    "gamma_grid('1,2')": (lambda: gamma_grid("1,2"), "gamma: got '1,2'; expected a sequence"),
    "gamma_grid([[0.1], 'ab'])": (lambda: gamma_grid([[0.1], "ab"]),
                                  "gamma[1]: got ab; expected real numbers in [-1, 1]"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_the_api_refuses_with_its_own_error(case):
    call, message = REFUSED[case]
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value).startswith(message), str(caught.value)
    assert len(str(caught.value)) < 300


def test_a_geometry_given_for_a_setting_is_told_how_to_wrap_it():
    with pytest.raises(InputError, match=r"wrap the geometry: oc\.Setting\(geometry"):
        oc.predict(SETTING.geometry)


def test_what_the_guards_let_through_still_works():
    """The guards refuse only what they should: numpy integers, a tuple, a numpy array,
    the largest step count."""
    assert oc.Protocol(max_steps=np.int64(5)).max_steps == 5
    assert oc.Protocol(ft_steps=2 ** 53).ft_steps == 2 ** 53
    assert oc.parallel_shift((1, -0.9)).K == oc.parallel_shift(np.array([1, -0.9])).K == 2
    assert oc.predict(SETTING).pretrain.T1 == 357


def test_an_entry_is_named_as_its_caller_counts():
    """Python indexes from 0 (``gamma[0]`` is the first); a command line counts values
    from 1 (``--gamma value 1``)."""
    assert item_name("gamma", 0) == "gamma[0]"
    assert item_name("--gamma", 0) == "--gamma value 1"
    with pytest.raises(InputError, match=r"^--gamma value 2: got 1\.5"):
        oc.parallel_shift([0.3, 1.5], name="--gamma")
