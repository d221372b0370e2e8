"""Run oodcalc as if on another CPU: every result of the floating-point functions whose last
bits differ between machines (the transcendental functions of numpy and math, numpy's
linear algebra and matrix products, numpy's sums) is moved by a few units in the last
place, and the committed generated files are regenerated and compared.

    python tools/other_machine.py            # every generated block, file and derivation
    python tools/other_machine.py --ulps 4   # a larger nudge

Exit 1 and a diff per file when a committed document would read differently: such a
document prints a round-off residual (or a value at a rounding boundary) and would fail
its staleness test on some machine. The tests run the same: tests/test_docs.py on every
generated block (the run that checks it is current), tests/test_any_machine.py on the
generated files, the notebook's outputs and the derivation documents.

Why these functions: IEEE 754 fixes +, −, ×, ÷ and sqrt to the bit, but not exp, log and
their kin (numpy dispatches to SIMD versions chosen by the CPU, libm differs by version),
and BLAS picks its kernels (and its summation order) by CPU, so a dot product, a matrix
product or an eigenvalue moves in its last bits from one machine to the next; numpy's
pairwise sums do too where its SIMD width differs.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import json
import math
import struct
import sys
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: numpy functions (module attribute, name) whose float64 results are nudged.
NUMPY_FUNCTIONS = [(np, name) for name in ("exp", "expm1", "log", "log1p", "log2", "log10",
                                           "tanh", "sinh", "cosh", "power", "sum", "dot",
                                           "matmul", "einsum", "logaddexp")] + [
    (np.linalg, name) for name in ("solve", "eigvalsh", "eigh", "norm", "inv")]
#: math functions nudged (their results are Python floats).
MATH_FUNCTIONS = ("exp", "expm1", "log", "log1p", "log2", "log10", "tanh", "pow")


_PACK_FLOAT, _PACK_INT = struct.Struct("<d"), struct.Struct("<q")


def _nudge_array(a: np.ndarray, ulps: int) -> None:
    """Move every finite nonzero float64 entry of ``a`` by ``ulps`` units in the last
    place, in place, up or down by the parity of its own last bit (so the direction varies
    from entry to entry but the run is reproducible). A few whole-array operations, the
    mask only when an entry needs it: the nudged functions run in the inner loops of the
    documents' computations, on arrays of a few entries."""
    if a.dtype != np.float64 or a.size == 0:
        return
    bits = a.view(np.int64)
    step = bits & 1
    step *= 2 * ulps
    step -= ulps                                      # +ulps if odd, −ulps if even
    finite = np.isfinite(a)
    if np.count_nonzero(a) + np.count_nonzero(finite) != 2 * a.size:
        step *= finite & (a != 0)                     # 0, ±inf and nan stay as they are
    bits += step


def _nudge(value, ulps: int):
    if isinstance(value, tuple):              # eigh: (values, vectors)
        return tuple(_nudge(v, ulps) for v in value)
    if isinstance(value, np.ndarray):
        if value.dtype == np.float64 and value.flags.writeable:
            _nudge_array(value, ulps)
        return value
    if isinstance(value, (float, np.float64)) and math.isfinite(value) and value != 0:
        return type(value)(_nudge_float(value, ulps))
    return value


def _nudge_float(value: float, ulps: int) -> float:
    """A finite nonzero float moved as an entry of :func:`_nudge_array` would be."""
    bits = _PACK_INT.unpack(_PACK_FLOAT.pack(value))[0]
    bits += ulps if bits & 1 else -ulps
    return _PACK_FLOAT.unpack(_PACK_INT.pack(bits))[0]


class _Nudged:
    """``function`` with its float64 results nudged; its other attributes (a ufunc's
    ``reduce``, ``outer``, ``nin``, ...) are the original's, unnudged."""

    def __init__(self, function: Callable, ulps: int) -> None:
        self._function, self._ulps = function, ulps
        functools.update_wrapper(self, function)

    def __call__(self, *args, **kwargs):
        result = self._function(*args, **kwargs)
        out = kwargs.get("out")
        if isinstance(out, tuple) and len(out) == 1:
            out = out[0]
        if isinstance(out, np.ndarray):
            _nudge(out, self._ulps)
            return result
        return _nudge(result, self._ulps)

    def __getattr__(self, name):
        return getattr(self._function, name)


class _NudgedMath(_Nudged):
    """A math function (a float in, a float out) nudged as :func:`_nudge` does, without its
    type dispatch: claim 8e's recurrence calls ``math.exp`` 10⁶ times per derivation."""

    def __call__(self, *args):
        value = self._function(*args)
        if value != 0 and value - value == 0:              # finite and nonzero
            return _nudge_float(value, self._ulps)
        return value


@contextlib.contextmanager
def other_machine(ulps: int = 2) -> Iterator[None]:
    """Within the block, numpy's and math's machine-dependent functions return results
    ``ulps`` units in the last place away from this machine's (see the module docstring).
    The ``@`` operator and ufunc methods are not reached; ``np.matmul``/``np.dot`` are."""
    saved = []
    try:
        for module, name in NUMPY_FUNCTIONS:
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, _Nudged(getattr(module, name), ulps))
        for name in MATH_FUNCTIONS:
            saved.append((math, name, getattr(math, name)))
            setattr(math, name, _NudgedMath(getattr(math, name), ulps))
        _refill_lambdify_namespaces(lambda namespace, default: namespace != default)
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
        _refill_lambdify_namespaces(
            lambda namespace, default: any(isinstance(v, _Nudged) for v in namespace.values()))


def _refill_lambdify_namespaces(which: Callable[[dict, dict], bool]) -> None:
    """sympy's lambdify copies numpy's and math's functions into a namespace it keeps for
    the process, filled at its first use. Filled before the block, it would hand the block's
    lambdified code the un-nudged functions; filled inside, it would hand the nudged ones to
    every later lambdify (the test suite's mutation tests ran 10⁶-step recurrences through
    the wrapper, slowly and nudged). So the namespaces ``which`` selects are refilled from
    the modules as they are now: on entry those already filled, on exit those holding a
    wrapper."""
    lambdify_module = importlib.import_module("sympy.utilities.lambdify")
    for name, (namespace, default, *_rest) in lambdify_module.MODULES.items():
        if which(namespace, default):
            lambdify_module._import(name, reload=True)


def nudged_leftovers() -> list[str]:
    """Names in sympy's lambdify namespaces still bound to a nudged function (none after
    :func:`other_machine` exits)."""
    lambdify_module = importlib.import_module("sympy.utilities.lambdify")
    return [f"{module}.{key}" for module, (namespace, *_rest) in lambdify_module.MODULES.items()
            for key, value in namespace.items() if isinstance(value, _Nudged)]


def _load_generate_docs():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import generate_docs
    finally:
        sys.path.pop(0)
    return generate_docs


def generated_texts(derivations: bool = True, blocks: bool = True
                    ) -> dict[str, tuple[Callable[[], str], Callable[[], str]]]:
    """Every committed generated text: label → (its text as committed, a function that
    regenerates it). The derivation documents come from one run of every derivation."""
    generate_docs = _load_generate_docs()
    out = {}
    for block in generate_docs.BLOCKS if blocks else ():
        out[f"{block.file}:{block.name}"] = (functools.partial(generate_docs.current, block),
                                             lambda block=block: block.generate().strip())
    for name, generate in generate_docs.FILES.items():
        out[name] = (functools.partial(_read, ROOT / name), generate)
    for name in generate_docs.NOTEBOOKS:           # the outputs, re-made in this process
        cells = generate_docs.code_cells(ROOT / name)
        out[f"{name} (outputs)"] = (
            lambda cells=cells: json.dumps([generate_docs.comparable(c["outputs"])
                                            for c in cells], indent=1, ensure_ascii=False),
            lambda cells=cells: json.dumps(generate_docs.run_cells(cells), indent=1,
                                           ensure_ascii=False))
    if derivations:
        from oodcalc.symbolic import documents
        fresh: dict[str, str] = {}

        def derived(name: str) -> str:
            if not fresh:                          # every derivation, once per comparison
                documents.derivation_of.cache_clear()
                fresh.update(documents.render_all())
            return fresh[name]
        for path in sorted(documents.DEFAULT_DIR.glob("*.*")):
            out[f"derivations/{path.name}"] = (functools.partial(_read, path),
                                               functools.partial(derived, path.name))
    return out


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def diff(committed: str, elsewhere: str) -> str:
    """The lines a text regenerated on another machine changes, as a unified diff."""
    return "".join(difflib.unified_diff(committed.splitlines(True), elsewhere.splitlines(True),
                                        "committed", "another machine", n=0))


def differences(labels: list[str] | None = None, ulps: int = 2, blocks: bool = True
                ) -> dict[str, str]:
    """Label → unified diff of each generated text (``labels``, else every one; without
    the generated blocks unless ``blocks``) that reads differently when regenerated under
    :func:`other_machine` (empty: nothing committed depends on the last bits)."""
    texts = generated_texts(derivations=labels is None
                            or any(label.startswith("derivations/") for label in labels),
                            blocks=blocks or labels is not None)
    found = {}
    try:
        with other_machine(ulps):
            for label in labels if labels is not None else list(texts):
                committed, regenerate = texts[label]
                before, fresh = committed(), regenerate()
                if fresh != before:
                    found[label] = diff(before, fresh)
    finally:
        from oodcalc.symbolic import documents
        documents.derivation_of.cache_clear()      # nothing nudged outlives the block
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/other_machine.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--ulps", type=int, default=2, help="units in the last place (2)")
    parser.add_argument("labels", nargs="*", help="only these (e.g. README.md:predict-example)")
    args = parser.parse_args(argv)
    found = differences(args.labels or None, args.ulps)
    for label, diff in found.items():
        print(f"== {label} reads differently on another machine:\n{diff}")
    if not found:
        print("every generated file reads the same on another machine")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
