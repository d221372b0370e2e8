"""The package's namespace as scientific-Python users expect it (issue 33, item 4): no
public name hides a submodule of the same name (``import oodcalc.predict`` once gave the
function ``oc.predict``; the module is now ``oodcalc.prediction``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types

import oodcalc


#: Optional dependencies (the extras): a module that needs a missing one is skipped, as on
#: the plain install; any other import error fails.
OPTIONAL = {"torch", "transformers", "tokenizers", "safetensors", "matplotlib", "numba",
            "dask", "distributed", "pandas", "xarray", "nbclient", "ipykernel"}


def import_or_none(name: str) -> types.ModuleType | None:
    """The module, or None when an optional dependency it needs is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] in OPTIONAL:
            return None
        raise


def packages(root: types.ModuleType) -> list[types.ModuleType]:
    """``root`` and every subpackage under it (imported; plain modules are not)."""
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".",
                                      onerror=lambda name: None):
        if info.ispkg and (package := import_or_none(info.name)) is not None:
            found.append(package)
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
        module = import_or_none(full)
        if module is None:
            continue
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


# ---------------------------------------------------------------------------------------
# __all__: every public module declares its names. Public = not starting with "_" anywhere
# in its dotted name, and not a command module of the CLI (oodcalc.cli's submodules are the
# command line's internals: its docstring says so; oodcalc.cli itself has __all__).

def public_modules() -> list[str]:
    names = ["oodcalc"]
    for info in pkgutil.walk_packages(oodcalc.__path__, "oodcalc.", onerror=lambda n: None):
        parts = info.name.split(".")
        if any(part.startswith("_") for part in parts):
            continue
        if parts[:2] == ["oodcalc", "cli"] and len(parts) > 2:
            continue
        names.append(info.name)
    return names


def all_problems(module: types.ModuleType) -> list[str]:
    """What is wrong with ``module``'s ``__all__``: missing, naming what does not exist, or
    leaving out a public function or class the module defines."""
    if not hasattr(module, "__all__"):
        return [f"{module.__name__} has no __all__"]
    listed = list(module.__all__)
    problems = [f"{module.__name__}.__all__ names {n!r}, which does not exist"
                for n in listed if not hasattr(module, n)]
    problems += [f"{module.__name__}.__all__ lists {n!r} twice"
                 for n in sorted(set(listed)) if listed.count(n) > 1]
    for name, obj in vars(module).items():
        if name.startswith("_") or name in listed:
            continue
        if (inspect.isfunction(obj) or inspect.isclass(obj)) \
                and getattr(obj, "__module__", None) == module.__name__:
            problems.append(f"{module.__name__}.{name} is public but not in __all__ "
                            "(list it, or name it with a leading _)")
    return problems


def test_every_public_module_has_a_complete_all():
    names = public_modules()
    assert {"oodcalc", "oodcalc.prediction", "oodcalc.cli", "oodcalc.claims.claim1_attention",
            "oodcalc.finetune.terms"} <= set(names)
    assert "oodcalc.cli.predict" not in names and "oodcalc.finetune._kernels" not in names
    modules = [m for m in map(import_or_none, names) if m is not None]
    problems = [p for module in modules for p in all_problems(module)]
    assert problems == [], "\n".join(problems)


def test_the_all_check_sees_each_fault():
    """Each fault the check exists for is caught: no ``__all__``, a name that does not
    exist, a duplicate, a public function left out. A private one is not a fault."""
    def module_with(all_names=None, **defs):
        module = types.ModuleType("fake")
        if all_names is not None:
            module.__all__ = all_names
        for name, obj in defs.items():
            obj.__module__ = "fake"
            setattr(module, name, obj)
        return module

    def public():
        pass

    def _private():
        pass

    assert all_problems(module_with(None)) == ["fake has no __all__"]
    assert all_problems(module_with(["public"], public=public, _private=_private)) == []
    assert "does not exist" in all_problems(module_with(["public", "gone"], public=public))[0]
    assert "twice" in all_problems(module_with(["public", "public"], public=public))[0]
    assert "not in __all__" in all_problems(module_with([], public=public))[0]


# ---------------------------------------------------------------------------------------
# Help texts name documentation by topic: a wheel has no docs/ (only a clone's own files,
# said to be a clone's, may be named by path).

def help_texts(command, path=("oodcalc",)):
    """(where, text) for a click command's help, epilog, every option's help, default
    text and panel, and the same for its subcommands."""
    where = " ".join(path)
    yield where, command.help or ""
    yield where, command.epilog or ""
    for param in command.params:
        for attribute in ("help", "show_default", "rich_help_panel"):
            value = getattr(param, attribute, None)
            if isinstance(value, str):
                yield f"{where} {param.name}", value
    for name, sub in getattr(command, "commands", {}).items():
        yield from help_texts(sub, (*path, name))


def dead_paths(texts) -> list[str]:
    return [f"{where}: {text[:80]}" for where, text in texts
            if "docs/" in text and "clone" not in text]


def test_no_help_text_points_to_a_file_a_wheel_lacks():
    from oodcalc.cli import root_command
    texts = list(help_texts(root_command()))
    assert len(texts) > 100 and any("report guide" in t for _, t in texts)
    assert dead_paths(texts) == []


def test_the_help_check_sees_a_dead_path():
    assert dead_paths([("x", "schema in docs/report.md")]) == ["x: schema in docs/report.md"]
    assert dead_paths([("x", "a clone's docs/depth.json")]) == []
