"""``advise``: every intervention side by side, λ* and μ*, the paper's advice judged.

The thresholds and verdicts are checked against an independent full-Q gradient descent
doing the same intervention on Q (oodcalc.simulate.simulate_population), not against the
engine that found them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import oodcalc as oc
from oodcalc.prescribe import Arm, advise, pareto_front
from oodcalc.errors import InputError
from oodcalc.simulate import simulate_population

from cli_run import one_line, run
from schema_paths import attribute_at, json_leaves

#: The issue's counterexample to the paper's advice (1)–(2): plain fine-tuning does not
#: forget (F = −3.25e-3), dropping or down-weighting the negatively correlated features
#: does (F = +3.9e-5), measured by `oodcalc advise --gamma -0.44,-0.55,0.05,-0.14`.
COUNTEREXAMPLE = (-0.44, -0.55, 0.05, -0.14)


@pytest.fixture(scope="module")
def shift():
    return advise(oc.Setting(oc.parallel_shift([1, -0.9])))


@pytest.fixture(scope="module")
def counterexample():
    return advise(oc.Setting(oc.parallel_shift(COUNTEREXAMPLE)))


def _simulated(gamma, **interventions):
    return simulate_population(oc.Setting(oc.parallel_shift(gamma),
                                          oc.Protocol(**interventions)))


def test_the_smallest_replay_prevents_forgetting_and_a_smaller_one_does_not(shift):
    """λ* is bracketed to 1e-6; full-Q GD with replay at λ* does not forget, at the
    bracket's low end (and on a grid below it) it does."""
    t = shift.replay
    assert t.value is not None and 0 < t.value - t.low <= 1e-6
    at, below = _simulated([1, -0.9], replay=t.value), _simulated([1, -0.9], replay=t.low)
    assert at.F <= 0 < below.F
    assert abs(at.F - t.arm.F) <= 1e-12 and at.finetune.T2 == t.arm.steps
    # the first sign change: no λ on a grid below the bracket prevents forgetting
    for lam in np.linspace(0, t.low, 6):
        report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9]),
                                       oc.Protocol(replay=float(lam))))
        assert report.F > 0, lam


def test_every_features_replay_threshold_keeps_each_source_feature(shift):
    """λₖ*: the smallest share with every F_k <= 0, checked by full-Q GD at both ends of
    its bracket; it lies above λ* (the total hides feature 2's forgetting below it)."""
    t = shift.replay_each
    assert t.criterion == "each" and 0 < t.value - t.low <= 1e-6
    assert t.value > shift.replay.value
    at, below = _simulated([1, -0.9], replay=t.value), _simulated([1, -0.9], replay=t.low)
    # at λₖ* the worst F_k is the search's residual (here ~1e-14): full-Q GD agrees with
    # the engine to 1e-12, so that is the resolution of this check
    assert max(f.F_k for f in at.forgetting) <= 1e-12 < max(f.F_k for f in below.forgetting)
    assert "every F_k <= 0" in t.why


def test_no_pull_prevents_forgetting_while_the_rule_is_met(shift):
    t = shift.l2
    assert t.value is None and "no μ on the grid" in t.why and "no longer met" in t.why
    # the strongest μ tried that still meets the rule forgets, by full-Q GD too
    strongest = float(t.why.split("… ")[1].split(" ")[0]) / 4
    assert _simulated([1, -0.9], l2=strongest).F > 0


def test_projections_remove_forgetting_exactly(shift, counterexample):
    for advice in (shift, counterexample):
        for name in ("project key", "project query", "project both"):
            assert advice.arm(name).F == 0.0 and all(f == 0.0 for f in advice.arm(name).F_k)
        assert advice.verdicts[2].verdict == "removes forgetting exactly"
    # at γ = (1, −0.9) the query side freezes u1 = v1: the rule on U is never met
    assert not shift.arm("project query").reached and shift.arm("project key").reached
    assert "backward transfer" in counterexample.verdicts[2].reason


def test_the_papers_advice_backfires_on_the_counterexample(counterexample):
    """(1) and (2) turn a geometry without forgetting into one with forgetting, and
    full-Q GD with the same query weights agrees."""
    plain = counterexample.arm("plain")
    assert plain.F < -3e-3
    for i, rule in ((0, "cosine"), (1, "drop-negative")):
        arm = counterexample.arm(f"weights {rule}")
        assert counterexample.verdicts[i].verdict == "backfires here"
        assert arm.F > 0 and abs(_simulated(COUNTEREXAMPLE, weights=rule).F - arm.F) <= 1e-12
        assert arm.unlearned == (1, 2, 4)        # the dropped features stay unlearned
    # plain fine-tuning does not forget: nothing to search
    assert counterexample.replay.value == 0 and counterexample.replay.arm is None


def test_dropping_features_helps_only_by_not_learning_them(shift):
    v = shift.verdicts[0]
    assert v.verdict == "helps here only by not learning U" and "u2 not learned" in v.reason


def test_pareto_front_keeps_what_no_other_arm_beats():
    def arm(name, F, loss, steps):
        return Arm(name, {}, F, (F,), loss, steps, True)
    arms = [arm("a", 0.1, 0.01, 100), arm("b", -0.1, 0.01, 200), arm("c", -0.1, 0.02, 300),
            arm("d", 0.1, 0.01, 100 + 1), arm("e", 0.1 + 1e-15, 0.01, 100),
            Arm("f", {}, math.nan, (), math.nan, 0, False)]
    # c is beaten by b; d by a (more steps); e ties a within SAME_LOSS; f did not run
    assert pareto_front(arms) == ["a", "b", "e"]


def test_advise_refuses_what_it_would_override():
    geometry = oc.parallel_shift([1, -0.9])
    with pytest.raises(InputError, match="advise compares every intervention itself"):
        advise(oc.Setting(geometry, oc.Protocol(replay=0.1)))
    with pytest.raises(InputError, match="no fixed number"):
        advise(oc.Setting(geometry, oc.Protocol(ft_steps=10)))
    with pytest.raises(InputError, match="advise's tolerance: got 0.5; expected a width 0 < w <= 0.01"):
        advise(oc.Setting(geometry), tolerance=0.5)


def test_the_json_carries_every_arm_and_threshold(shift):
    data = shift.to_dict()
    assert [a["name"] for a in data["arms"]][-2:] == ["replay λ*", "replay λₖ*"]
    assert data["thresholds"]["replay"]["value"] == shift.replay.value
    assert data["thresholds"]["l2"]["value"] is None and len(data["verdicts"]) == 3
    assert set(data["thresholds"]) == {"replay", "l2", "replay_each", "l2_each"}
    json.dumps(data, allow_nan=False)


def test_cli_text_at_80_columns_markdown_and_json(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "advise", "--gamma", "1,-0.9")
    assert code == 0 and "λ* (replay) = 0.01241" in out
    assert max(map(len, out.splitlines())) <= 80
    assert "restrict fine-tuning updates" in out and "removes forgetting" in out
    monkeypatch.delenv("COLUMNS")
    code, out, _ = run(capsys, "advise", "--gamma", "1,-0.9", "-f", "markdown")
    assert code == 0 and "| arm | F |" in out and "**plain**" in out
    code, out, _ = run(capsys, "advise", "--gamma", "1,-0.2", "-f", "json")
    assert code == 0 and json.loads(out)["thresholds"]["replay"]["value"] == 0


@pytest.mark.parametrize("args, says", [
    (["--search-tol", "0"], "--search-tol: got 0.0; expected a width 0 < w <= 0.01"),
    (["--search-tol", "x"], "--search-tol"),
    (["--format", "html"], "html"),
    (["--gamma", "1,-1.5"], "--gamma"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, args, says):
    gamma = [] if "--gamma" in args else ["--gamma", "1,-0.9"]
    code, _, err = run(capsys, "advise", *gamma, *args)
    assert code == 2 and says in one_line(err)


def _documented_keys(heading: str) -> set[str]:
    """The keys of the table under ``heading`` in docs/report.md."""
    from pathlib import Path
    text = (Path(__file__).parents[1] / "docs" / "report.md").read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys |= {k.strip("` ") for k in line.split("|")[1].split(",")}
    return keys


def test_every_json_key_is_the_attribute_of_the_same_name(shift):
    """``advice.arms[i]`` and ``advice.thresholds[name]`` are what the JSON's ``arms`` and
    ``thresholds`` hold (they once were the fixed arms only, and a tuple), value for value;
    the same for a sequence's result (``untrained_loss`` was ``reference``)."""
    from oodcalc.report import jsonable
    sequence = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
    for result in (shift, sequence):
        leaves = list(json_leaves(result.to_dict()))
        assert len(leaves) > 40
        for path, value in leaves:
            assert jsonable(attribute_at(result, path)) == jsonable(value), path
    assert [a.name for a in shift.arms][-2:] == ["replay λ*", "replay λₖ*"]
    with pytest.warns(DeprecationWarning):
        assert shift.all_arms == shift.arms
    with pytest.warns(DeprecationWarning):
        assert sequence.reference is sequence.untrained_loss


def test_the_attribute_rule_fails_on_a_key_without_its_attribute(shift):
    """Not vacuous: a JSON key with no attribute of its name, a run the attribute's list
    lacks (the old ``advice.arms``), thresholds in a tuple (the old ``advice.thresholds``)
    are each caught."""
    data = shift.to_dict()
    with pytest.raises(AttributeError):
        attribute_at(shift, ("arms", 0, "loss_source"))
    fixed = len(shift.fixed_arms)
    assert len(data["arms"]) > fixed                 # the JSON lists the threshold runs too
    with pytest.raises(IndexError):
        attribute_at(shift.fixed_arms, (fixed,))     # the old advice.arms lacked them
    with pytest.raises(AttributeError):              # a tuple of thresholds, by name
        attribute_at(tuple(shift.thresholds.values()), ("replay",))


def test_the_json_is_the_documented_schema(shift):
    assert set(shift.to_dict()) == _documented_keys("## `oodcalc advise --format json`")
    sequence = oc.sequence(oc.parallel_shifts([[1, -0.9], [1, 0.5]]))
    assert set(sequence.to_dict()) == _documented_keys("## `oodcalc sequence --json`")
