"""The examples in the package's docstrings (``>>>``) run and print what they say: every module of
``src/sheaf_fmtl`` that holds one is run by :mod:`doctest` (``ELLIPSIS`` on), and each public name
of :data:`EXAMPLES` must keep an example of its own, so that none goes missing unnoticed."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sheaf_fmtl"

#: The public names whose docstrings show how they are used (a module: its own docstring).
EXAMPLES = (
    "sheaf_fmtl.RunConfig",
    "sheaf_fmtl.RunConfig.replace",
    "sheaf_fmtl.load_config",
    "sheaf_fmtl.run",
    "sheaf_fmtl.sheaf.graph",  # make_graph
    "sheaf_fmtl.sheaf.graph.ClientGraph",
    "sheaf_fmtl.sheaf.layout",  # build_layout
    "sheaf_fmtl.sheaf.maps.init_maps",
    "sheaf_fmtl.sheaf.ops.energy",
    "sheaf_fmtl.sheaf.ops.laplacian_action",
    "sheaf_fmtl.sheaf.stalks.edge_dim",
    "sheaf_fmtl.spelling.option",
    "sheaf_fmtl.spelling.setting",
)


def _modules_with_examples() -> list[str]:
    """The package's modules whose source holds ``>>>``, as dotted names."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text():
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _resolve(name: str) -> object:
    """The object a dotted public name names (``sheaf_fmtl.RunConfig.replace``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{name} names nothing")


def _run(tests: list[doctest.DocTest]) -> tuple[int, int, str]:
    """(examples failed, examples run, the report of the failures)."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    return runner.failures, runner.tries, "".join(report)


@pytest.mark.parametrize("module", _modules_with_examples())
def test_the_examples_of_a_module_print_what_they_say(module: str) -> None:
    mod: ModuleType = importlib.import_module(module)
    tests = [t for t in doctest.DocTestFinder().find(mod) if t.examples]
    assert tests, f"{module} holds '>>>' outside its docstrings, where doctest does not run it"
    failed, attempted, report = _run(tests)
    assert attempted and not failed, report


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_public_name_keeps_its_example(name: str) -> None:
    obj = _resolve(name)
    own = [t for t in doctest.DocTestFinder(recurse=False).find(obj, name) if t.examples]
    assert own, f"{name}'s docstring has no example (>>>); give it one, it is run by this test's module"


def test_the_run_finds_a_failing_example() -> None:
    wrong = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "wrong", None, 0)
    failed, attempted, report = _run([wrong])
    assert (failed, attempted) == (1, 1) and "Expected:\n    3\nGot:\n    2" in report
