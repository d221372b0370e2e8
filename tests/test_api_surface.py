"""The package's namespace as scientific-Python users expect it (issue 33, item 4): no
public name hides a submodule of the same name (``import oodcalc.predict`` once gave the
function ``oc.predict``; the module is now ``oodcalc.prediction``)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types

import oodcalc


def packages(root: types.ModuleType) -> list[types.ModuleType]:
    """``root`` and every subpackage under it (imported; plain modules are not)."""
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".",
                                      onerror=lambda name: None):
        if info.ispkg:
            found.append(importlib.import_module(info.name))
    return found


def shadowed(package: types.ModuleType) -> list[str]:
    """Submodules of ``package`` whose name, as an attribute of the package, is something
    other than the submodule (checked before and after importing the submodule: the
    shadow is set by the package's own ``from .x import x``, which runs first)."""
    bad = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "__main__":                      # importing it runs the command
            continue
        full = f"{package.__name__}.{info.name}"
        before = getattr(package, info.name, None)      # a lazy __getattr__ may answer
        if before is not None and not isinstance(before, types.ModuleType):
            bad.append(full)
            continue
        module = importlib.import_module(full)
        if getattr(package, info.name, module) is not module:
            bad.append(full)
    return bad


def test_no_public_name_shadows_a_submodule():
    everything = packages(oodcalc)
    assert {"oodcalc", "oodcalc.cli", "oodcalc.finetune", "oodcalc.simulate"} <= {
        p.__name__ for p in everything}
    assert [name for p in everything for name in shadowed(p)] == []


def test_the_module_of_predict_is_importable_by_its_name():
    import oodcalc.prediction as prediction
    assert oodcalc.predict is prediction.predict
    assert isinstance(oodcalc.prediction, types.ModuleType)


def test_the_shadow_check_sees_a_function_named_like_its_module(tmp_path, monkeypatch):
    """The check is not vacuous: a package that does ``from .tool import tool`` (the old
    ``from .predict import predict``) is caught, and one that does not is passed."""
    for name, init in (("shadowpkg", "from .tool import tool\n"), ("cleanpkg", "")):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text(init)
        (package / "tool.py").write_text("def tool():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert shadowed(importlib.import_module("shadowpkg")) == ["shadowpkg.tool"]
        assert shadowed(importlib.import_module("cleanpkg")) == []
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in ("shadowpkg", "cleanpkg")]:
            del sys.modules[name]
