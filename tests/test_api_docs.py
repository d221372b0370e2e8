"""The Python API teaches itself: help() on every public entry point gives parameters,
returns and an example that runs; reports and derivations display in Jupyter."""

from __future__ import annotations

import doctest
import inspect
import re

import pytest

import oodcalc as oc
from oodcalc import display, sweep as sweep_module
from oodcalc.finetune.sequence import SequenceResult
from oodcalc.prescribe import Advice
from oodcalc.simulate import simulate_population, simulate_prompts

DOCUMENTED = {
    "predict": oc.predict, "advise": oc.advise, "expected_seconds": oc.expected_seconds, "Setting": oc.Setting, "Protocol": oc.Protocol,
    "parallel_shift": oc.parallel_shift, "rotation": oc.rotation, "mean_query": oc.mean_query,
    "orthogonal": oc.orthogonal, "from_arrays": oc.from_arrays, "from_files": oc.from_files,
    "Report": oc.Report, "sweep": sweep_module.sweep,
    "simulate_population": simulate_population, "simulate_prompts": simulate_prompts,
    "sequence": oc.sequence, "parallel_shifts": oc.parallel_shifts,
    "shifts_from_arrays": oc.shifts_from_arrays,
}


@pytest.mark.parametrize("name", DOCUMENTED)
def test_docstring_has_parameters_returns_and_an_example(name):
    obj = DOCUMENTED[name]
    doc = inspect.getdoc(obj) or ""
    assert ("Attributes" if name == "Report" else "Parameters") in doc, name
    if inspect.isfunction(obj):
        assert "Returns" in doc, name
    assert "Example" in doc and ">>>" in doc, name


#: The other public objects whose help() must show an example that runs: the rest of
#: ``oodcalc.__all__`` and the methods users call on what the entry points return.
EXAMPLED = {
    "Geometry": oc.Geometry, "Geometry.describe": oc.Geometry.describe,
    "OodcalcError": oc.OodcalcError, "InputError": oc.InputError,
    "ComputationError": oc.ComputationError, "gram": oc.gram, "overlap": oc.overlap,
    "Report.F": oc.Report.F.fget, "Report.__str__": oc.Report.__str__,
    "Report.to_dict": oc.Report.to_dict, "Report.arrays": oc.Report.arrays,
    "Report.forgetting_curve": oc.Report.forgetting_curve,
    "Setting.describe": oc.Setting.describe, "Protocol.describe": oc.Protocol.describe,
    "SweepResult": sweep_module.SweepResult, "SweepResult.grid": sweep_module.SweepResult.grid,
    "SweepResult.rows": sweep_module.SweepResult.rows,
    "SweepResult.to_csv": sweep_module.SweepResult.to_csv,
    "SweepResult.to_pandas": sweep_module.SweepResult.to_pandas,
    "SweepResult.to_xarray": sweep_module.SweepResult.to_xarray,
    "SweepResult.write": sweep_module.SweepResult.write,
    "Advice": Advice, "Advice.arm": Advice.arm, "Advice.to_dict": Advice.to_dict,
    "SequenceResult": SequenceResult, "SequenceResult.to_dict": SequenceResult.to_dict,
}


def run_examples(obj, name: str) -> tuple[int, list[str]]:
    """How many examples ``obj``'s own docstring has, and the report of each that fails
    (run as a reader runs them: a fresh namespace, nothing imported beforehand)."""
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={})
    runner = doctest.DocTestRunner(verbose=False,  # not "-v" in sys.argv: pytest -v
                                    optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failures: list[str] = []
    for test in tests:
        runner.run(test, out=failures.append)
    return sum(len(t.examples) for t in tests), failures


def test_every_public_name_is_documented_with_an_example():
    assert set(oc.__all__) <= set(DOCUMENTED) | set(EXAMPLED), \
        set(oc.__all__) - set(DOCUMENTED) - set(EXAMPLED)


#: Examples that need an optional extra (``frames``): skipped on the plain install.
NEEDS = {"SweepResult.to_pandas": "pandas", "SweepResult.to_xarray": "xarray"}


@pytest.mark.parametrize("name", [*DOCUMENTED, *EXAMPLED])
def test_docstring_example_runs(name):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name], reason=f"{NEEDS[name]} (the frames extra) runs it")
    count, failures = run_examples({**DOCUMENTED, **EXAMPLED}[name], name)
    assert count > 0, f"help({name}) shows no example"
    assert failures == [], "".join(failures)


def test_the_example_check_sees_a_missing_and_a_wrong_example():
    def silent():
        """No example here."""

    def wrong():
        """
        >>> 1 + 1
        3
        """

    def right():
        """
        >>> round(2 / 3, 3)
        0.667
        """
    assert run_examples(silent, "silent") == (0, [])
    count, failures = run_examples(wrong, "wrong")
    assert count == 1 and failures and "Expected:" in "".join(failures)
    assert run_examples(right, "right") == (1, [])


@pytest.fixture(scope="module")
def report():
    return oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))


def test_report_displays_as_markdown_and_html(report):
    md, page = report._repr_markdown_(), report._repr_html_()
    for text in (md, page):
        assert f"T1 = {report.pretrain.T1}" in text and f"T2 = {report.finetune.T2}" in text
        assert f"{report.F:+.5g}" in text
        assert "backward-transfer" in text and "forgetting" in text
    assert md.count("\n|---|") == 3                    # three tables
    assert page.startswith('<div class="oodcalc-report">') and page.count("<table>") == 3


def test_the_display_follows_the_report(report):
    """Change a number of the report: the rendering changes with it."""
    import dataclasses
    moved = dataclasses.replace(report, pretrain=dataclasses.replace(report.pretrain, T1=12345))
    assert "T1 = 12345" in moved._repr_markdown_() and "T1 = 12345" in moved._repr_html_()
    assert "T1 = 12345" not in report._repr_markdown_()


def test_html_escapes_and_simulator_reports_render():
    sim = simulate_population(oc.Setting(oc.rotation(0.5, 3)))
    md = sim._repr_markdown_()
    assert sim.source in md
    assert re.search(r"\| α \(every v_k\) \| [-\d.]+ \| — \|", md)   # no closed form: "—"
    assert "&lt;= ε" in display.to_html(sim)          # "<=" escaped in HTML


def test_a_contradicted_regime_is_marked():
    counterexample = oc.predict(oc.Setting(oc.parallel_shift([-0.7, 0.9, 0.95])))
    text = counterexample._repr_markdown_()
    assert "✗ (contradicts the verdict)" in text
    first = counterexample.forgetting[0]
    assert f"| {first.initial_direction} ({first.first_step:+.3g}) |" in text   # exact step
    assert f"| {first.D_k:+.4g} ✓ |" in text          # the first-order criterion agrees


def test_derivation_displays_as_its_markdown_document():
    from oodcalc.claims import get_claim
    from oodcalc.symbolic.documents import derivation_of
    from oodcalc.symbolic.render import to_markdown

    derivation = derivation_of("1")
    text = derivation._repr_markdown_()
    assert text == to_markdown(derivation, get_claim("1"))
    assert text.startswith("# Claim 1") and "$$" in text


def _attribute_of(report, path):
    """The attribute behind a JSON path, by the one rule the Report's docstring states:
    the same names, dicts by key, and ``forgetting.{F, per_feature, curve}`` laid out as
    ``report.F``, the list ``report.forgetting`` and ``report.forgetting_curve()``."""
    if path[0] == "forgetting":
        if path[1] == "F":
            return report.F
        if path[1] == "per_feature":
            return getattr(report.forgetting[path[2]], path[3])
        if path[1] == "curve":
            return report.forgetting_curve()[path[2]]
    value = report
    for key in path:
        value = value[key] if isinstance(value, dict) else getattr(value, key)
    return value


def _json_leaves(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _json_leaves(value, (*path, key))
    elif isinstance(tree, list) and path == ("forgetting", "per_feature"):
        for i, entry in enumerate(tree):
            yield from _json_leaves(entry, (*path, i))
    else:
        yield path, tree


@pytest.mark.parametrize("gamma", [[1, -0.9], [0.5, -0.9, -0.9]])
def test_every_json_key_is_an_attribute_of_the_same_name(gamma):
    """`report.ood.loss` exists because `to_dict()['ood']['loss']` does (issue: the names
    differed); every JSON leaf is the attribute it names, value for value."""
    from oodcalc.report import jsonable
    report = oc.predict(oc.Setting(oc.parallel_shift(gamma), oc.Protocol(ft_steps=5)))
    leaves = list(_json_leaves(report.to_dict()))
    assert ("ood", "loss") in dict(leaves) and ("pretrain", "beta_star") in dict(leaves)
    for path, value in leaves:
        if path[:2] == ("forgetting", "curve"):
            continue                                 # the JSON keeps up to 1,000 points
        assert jsonable(_attribute_of(report, path)) == value, path


def test_the_attribute_rule_fails_on_a_renamed_key():
    """The check above is not vacuous: a JSON key without its attribute is caught."""
    report = oc.predict(oc.Setting(oc.parallel_shift([1, -0.9])))
    with pytest.raises(AttributeError):
        _attribute_of(report, ("ood", "losses"))


def test_expected_seconds_is_at_the_top_level_and_suggests_numba_only_when_it_pays():
    from oodcalc import prediction  # noqa: F401  (the module, as a reader imports it)
    setting = oc.Setting(oc.parallel_shift([1, -0.9]))
    seconds, words = oc.expected_seconds(setting)
    assert seconds < 1 and "oodcalc[fast]" not in words
    from oodcalc.prediction import FAST_HINT_SECONDS
    assert FAST_HINT_SECONDS >= 1
