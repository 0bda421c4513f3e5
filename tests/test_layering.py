"""The package's import graph points down only: data, models, messages -> federation ->
sheaf -> config -> algorithms -> metrics, plots -> runtime -> scenarios, reference -> api, demo, bench,
experiments -> cli. A module
named ``cli`` (a command-line entry point, e.g. ``bench/cli.py``) sits at the top, whatever its folder.
A new top-level module or package must be given its floor in :data:`RANK` (the test says so), and
no two top-level modules or packages import each other (a cycle within a floor).
No module is over 400 lines unless its docstring says why (``Why one module ...``)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import sheaf_fmtl

RANK = {
    "_version": 0,
    "data": 0,
    "models": 0,
    "messages": 0,
    "streams": 0,
    "plugins": 0,
    "progress": 0,
    "federation": 1,
    "sheaf": 2,
    "config": 3,
    "algorithms": 4,
    "metrics": 5,
    "plots": 5,
    "runtime": 6,
    "scenarios": 7,
    "reference": 7,
    "api": 8,
    "user": 8,
    "callbacks": 8,
    "cli_options": 8,
    "cli_data": 9,
    "demo": 8,
    "bench": 8,
    "experiments": 8,
    "export": 8,
    "cli": 9,
}
ROOT = Path(sheaf_fmtl.__file__).parent
MAX_LINES = 400
REASON = "Why one module"


def _rank(parts: list[str]) -> int | None:
    if parts and parts[-1] == "cli":
        return RANK["cli"]
    return RANK.get(parts[0]) if parts else None


def _imports(path: Path) -> list[list[str]]:
    """Package-relative module paths that ``path`` imports from ``sheaf_fmtl``."""
    rel = list(path.relative_to(ROOT).with_suffix("").parts)
    pkg = rel[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = pkg[: len(pkg) - node.level + 1]
        elif node.module and node.module.split(".")[0] == "sheaf_fmtl":
            base = []
        else:
            continue
        module = (node.module or "").split(".")[0 if node.level else 1 :]  # drop "sheaf_fmtl"
        out.extend([base + module] if node.module else [base + [a.name] for a in node.names])
    return out


def test_every_top_level_module_has_a_floor() -> None:
    names = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    unplaced = sorted(names - set(RANK) - {"__init__", "__main__"})
    assert not unplaced, f"give these modules a floor in RANK: {unplaced}"


def test_imports_point_down_only() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        me = list(path.relative_to(ROOT).with_suffix("").parts)
        mine = _rank(me[:-1] if me[-1] == "__init__" else me)
        for target in _imports(path):
            theirs = _rank(target)
            if mine is not None and theirs is not None and target[0] != me[0] and theirs > mine:
                upward.append(f"{'/'.join(me)} imports {'.'.join(target)}")
    assert not upward, "imports pointing up a layer:\n" + "\n".join(upward)


def _top_level_names() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}


def test_no_module_imports_the_package_root() -> None:
    """``sheaf_fmtl/__init__`` imports the API, which imports the runtime: a module below it that
    took a name from the root (``from .. import __version__``) would close a cycle."""
    names = _top_level_names()
    rooted = [
        f"{'/'.join(path.relative_to(ROOT).parts)} imports sheaf_fmtl.{target[0]}"
        for path in sorted(ROOT.rglob("*.py"))
        for target in _imports(path)
        if target and target[0] not in names
    ]
    assert not rooted, "names taken from the package root:\n" + "\n".join(rooted)


def test_the_check_sees_an_upward_import() -> None:
    """The parser finds relative imports (so the test above can fail)."""
    path = ROOT / "sheaf" / "layout.py"
    assert ["messages"] in _imports(path)
    assert ["sheaf", "graph"] in _imports(path)
    assert ["algorithms", "sheaf_fmtl"] in _imports(ROOT / "runtime" / "simulate.py")
    assert _rank(["sheaf", "layout"]) < _rank(["runtime", "simulate"])  # type: ignore[operator]


def _too_long(text: str) -> bool:
    """Over :data:`MAX_LINES` lines with no reason (:data:`REASON`) in the module docstring."""
    doc = ast.get_docstring(ast.parse(text)) or ""
    return len(text.splitlines()) > MAX_LINES and REASON not in doc


def test_no_module_over_400_lines_without_a_reason() -> None:
    long = [str(p.relative_to(ROOT)) for p in sorted(ROOT.rglob("*.py")) if _too_long(p.read_text())]
    assert not long, f"split these modules or say why in their docstring ({REASON} ...): {long}"


def test_the_size_check_sees_a_long_module() -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    assert _too_long(f'"""A module."""\n{body}')
    assert not _too_long(f'"""A module.\n\n{REASON} of this size: data."""\n{body}')
    assert not _too_long('"""A module."""\nx = 1\n')


def _unit_graph() -> nx.DiGraph:
    """Top-level modules and packages (the floors' units), an arrow for each import between two."""
    graph = nx.DiGraph()
    names = _top_level_names()
    for path in sorted(ROOT.rglob("*.py")):
        me = path.relative_to(ROOT).with_suffix("").parts[0]
        for target in _imports(path):
            if target and target[0] in names and target[0] != me:
                graph.add_edge(me, target[0])
    return graph


def _cycles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.simple_cycles(graph))


def test_no_import_cycle_between_modules_of_a_floor() -> None:
    """Upward imports are refused above; two units of one floor must not import each other either."""
    cycles = _cycles(_unit_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = _unit_graph()
    assert graph.has_edge("config", "sheaf")  # config imports sheaf: an import back closes a cycle
    graph.add_edge("sheaf", "config")
    assert ["config", "sheaf"] in _cycles(graph)
