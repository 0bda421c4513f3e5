"""The package's import graph points down only: data, models, messages -> federation ->
sheaf -> config -> algorithms -> metrics, plots -> runtime -> scenarios, reference -> api, demo, bench,
experiments -> cli. A module
named ``cli`` (a command-line entry point, e.g. ``bench/cli.py``) sits at the top, whatever its folder;
the options every command shares (``commandline.py``) sit a floor lower, outside the ``cli`` package,
with the commands of other packages that use them: ``bench/cli.py`` imports them without importing
the package that imports it.
A new top-level module or package must be given its floor in :data:`RANK` (the test says so), and
no two top-level modules or packages import each other (a cycle within a floor, or a circle through
a package's modules: ``cli`` -> ``experiments/cli.py`` -> ``cli/...``). A module named by a
string (``importlib.import_module("sheaf_fmtl.x")``, ``__import__``) counts as imported: config, below
the algorithms, reads their registries as the entry points filled them and names none of them.
Inside ``runtime`` the round engine (``runtime/engine``) sits below the run (``runtime/run``): the
engine imports nothing of the run, and the silo links (``runtime/silonet``) nothing of either.
No module is over 400 lines unless its docstring says why (``Why one module ...``), and no function
in ``runtime``, ``algorithms`` or ``sheaf`` is over 60 lines (:data:`LONG_FUNCTIONS` lists those
still to be split)."""

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
    "spelling": 0,
    "component_keys": 0,
    "streams": 0,
    "heap": 0,
    "transforms": 0,
    "plugins": 0,
    "progress": 0,
    "warn": 0,
    "federation": 1,
    "sheaf": 2,
    "compression": 2,
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
    "commandline": 8,
    "demo": 8,
    "bench": 8,
    "experiments": 8,
    "export": 8,
    "score_objects": 8,
    "loaded_models": 8,
    "preprocessed": 0,
    "cli": 9,
}
#: Floors inside a top-level package: its sub-packages, lower below higher.
SUBRANK = {
    "runtime": {"silonet": 0, "engine": 1, "run": 2},
    # the protocol, the training step every algorithm shares, then the families over it
    "algorithms": {"protocol": 0, "training": 1, "gossip": 2, "maps": 2, "baselines": 3},
}
ROOT = Path(sheaf_fmtl.__file__).parent
MAX_LINES = 400
REASON = "Why one module"
MAX_FUNCTION_LINES = 60
SHORT_FUNCTION_PACKAGES = ("runtime", "algorithms", "sheaf")
#: Functions over :data:`MAX_FUNCTION_LINES` lines that are still to be split (path, name): none.
LONG_FUNCTIONS: set[tuple[str, str]] = set()


def _rank(parts: list[str]) -> int | None:
    if parts and parts[-1] == "cli":
        return RANK["cli"]
    return RANK.get(parts[0]) if parts else None


def _imports(path: Path, text: str | None = None) -> list[list[str]]:
    """Package-relative module paths that ``path`` (its source, or ``text`` in its place) imports
    from ``sheaf_fmtl``: with ``import`` and ``from ... import`` statements, or named by a string
    (:func:`_named_module`)."""
    rel = list(path.relative_to(ROOT).with_suffix("").parts)
    pkg = rel[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Call):
            named = _named_module(node, rel)
            out.extend([named] if named is not None else [])
            continue
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
            out.extend(n[1:] for n in names if n[0] == "sheaf_fmtl" and len(n) > 1)
            continue
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


def _named_module(node: ast.Call, rel: list[str]) -> list[str] | None:
    """The package-relative module that a call ``import_module("...")`` (``importlib``'s) or
    ``__import__("...")`` in module ``rel`` names by a string, or ``None`` (another call, a name
    computed at run time, a module outside ``sheaf_fmtl``). A relative name is resolved against its
    ``package`` argument: ``__package__``, ``__name__`` or a string."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    first = node.args[0] if node.args else None
    if called not in ("import_module", "__import__") or not isinstance(first, ast.Constant):
        return None
    name = str(first.value)
    if not name.startswith("."):
        parts = name.split(".")
        return parts[1:] if parts[0] == "sheaf_fmtl" else None
    given = node.args[1] if len(node.args) > 1 and called == "import_module" else None
    given = given or next((k.value for k in node.keywords if k.arg == "package"), None)
    package = rel[:-1]
    if isinstance(given, ast.Constant) and str(given.value).split(".")[0] == "sheaf_fmtl":
        package = str(given.value).split(".")[1:]
    elif isinstance(given, ast.Name) and given.id == "__name__" and rel[-1] != "__init__":
        package = rel
    elif not (isinstance(given, ast.Name) and given.id in ("__name__", "__package__")):
        return None
    level = len(name) - len(name.lstrip("."))
    rest = name.lstrip(".")
    return package[: len(package) - level + 1] + (rest.split(".") if rest else [])


def test_every_top_level_module_has_a_floor() -> None:
    names = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    unplaced = sorted(names - set(RANK) - {"__init__", "__main__"})
    assert not unplaced, f"give these modules a floor in RANK: {unplaced}"


def _upward(path: Path, targets: list[list[str]]) -> list[str]:
    """Those of ``targets`` (imported by ``path``) that sit on a floor above it."""
    me = list(path.relative_to(ROOT).with_suffix("").parts)
    mine = _rank(me[:-1] if me[-1] == "__init__" else me)
    return [
        f"{'/'.join(me)} imports {'.'.join(target)}"
        for target in targets
        if mine is not None and (theirs := _rank(target)) is not None and target[0] != me[0] and theirs > mine
    ]


def test_imports_point_down_only() -> None:
    upward = [line for path in sorted(ROOT.rglob("*.py")) for line in _upward(path, _imports(path))]
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
    assert ["algorithms", "maps", "learned_state"] in _imports(ROOT / "runtime" / "engine" / "simulate.py")
    assert _rank(["sheaf", "layout"]) < _rank(["runtime", "engine", "simulate"])  # type: ignore[operator]
    assert _rank(["commandline"]) < _rank(["cli", "run"]) == _rank(["bench", "cli"])  # type: ignore[operator]
    assert _unit(["cli", "run"]) == "cli" and _unit(["experiments", "cli"]) == "experiments"


def test_the_check_sees_a_module_named_by_a_string() -> None:
    """A module imported by name (``importlib.import_module``, ``__import__``) is an import: one of a
    higher floor is refused like an ``import`` statement (also read); names computed at run time are
    not read."""
    path = ROOT / "config" / "registry.py"
    snippet = (
        "import importlib\n"
        "from importlib import import_module\n"
        "def fill(name):\n"
        "    importlib.import_module('sheaf_fmtl.algorithms')\n"
        "    import_module('..runtime.engine', __package__)\n"
        "    import_module('.schema', __name__.rpartition('.')[0])\n"  # computed: not resolved
        "    importlib.import_module('.plots.labels', package='sheaf_fmtl')\n"
        "    __import__('sheaf_fmtl.metrics.flops')\n"
        "    import_module('.files', __name__)\n"  # a module's __name__: relative to the module itself
        "    importlib.import_module(name)\n"
        "    importlib.import_module('numpy')\n"
        "    import sheaf_fmtl.runtime.run.loop\n"
    )
    found = _imports(path, snippet)
    assert sorted(found) == [
        ["algorithms"],
        ["config", "registry", "files"],
        ["metrics", "flops"],
        ["plots", "labels"],
        ["runtime", "engine"],
        ["runtime", "run", "loop"],
    ]
    assert sorted(_upward(path, found)) == [
        "config/registry imports algorithms",
        "config/registry imports metrics.flops",
        "config/registry imports plots.labels",
        "config/registry imports runtime.engine",
        "config/registry imports runtime.run.loop",
    ]
    init = ROOT / "config" / "__init__.py"  # a package's __name__ is the package
    assert _imports(init, "import importlib\nimportlib.import_module('.usage', __name__)\n") == [
        ["config", "usage"]
    ]
    assert ["algorithms"] in _imports(ROOT / "__init__.py")  # the package's public names fill the registries


def _too_long(text: str) -> bool:
    """Over :data:`MAX_LINES` lines with no reason (:data:`REASON`) in the module docstring."""
    doc = ast.get_docstring(ast.parse(text)) or ""
    return len(text.splitlines()) > MAX_LINES and REASON not in doc


def test_no_module_over_400_lines_without_a_reason() -> None:
    long = [str(p.relative_to(ROOT)) for p in sorted(ROOT.rglob("*.py")) if _too_long(p.read_text())]
    assert not long, f"split these modules or say why in their docstring ({REASON} ...): {long}"


#: Packages split by idea, each module under this many lines (config, the command line, a run).
SPLIT_PACKAGES, SPLIT_MAX_LINES = ("config", "cli", "runtime/run"), 300


def test_the_split_packages_keep_every_module_under_300_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in SPLIT_PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > SPLIT_MAX_LINES
    }
    assert not long, f"split these modules by idea (at most {SPLIT_MAX_LINES} lines each): {long}"


def test_the_size_check_sees_a_long_module() -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    assert _too_long(f'"""A module."""\n{body}')
    assert not _too_long(f'"""A module.\n\n{REASON} of this size: data."""\n{body}')
    assert not _too_long('"""A module."""\nx = 1\n')


def _unit_graph(texts: dict[Path, str] | None = None) -> nx.DiGraph:
    """Top-level modules and packages (the floors' units) and the sub-packages of :data:`SUBRANK`,
    an arrow for each import between two (imports inside functions included); ``texts`` replaces
    some modules' source."""
    texts = texts or {}
    graph = nx.DiGraph()
    names = _top_level_names()
    for path in sorted(ROOT.rglob("*.py")):
        me = _unit(list(path.relative_to(ROOT).with_suffix("").parts))
        for target in _imports(path, texts.get(path)):
            if target and target[0] in names and _unit(target) != me:
                graph.add_edge(me, _unit(target))
    return graph


def _unit(parts: list[str]) -> str:
    """A top-level module or package, or a sub-package of one with floors inside (:data:`SUBRANK`):
    every module of a package counts as the package, so a circle through two packages' modules is
    a circle."""
    if len(parts) > 2 and parts[1] in SUBRANK.get(parts[0], {}):
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


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
    assert _unit(["runtime", "run", "loop"]) == "runtime.run"
    assert graph.has_edge("runtime.run", "runtime.engine")  # the run drives the engine
    graph.add_edge("runtime.engine", "runtime.run")
    assert ["runtime.engine", "runtime.run"] in _cycles(graph)


def test_the_cycle_check_sees_a_circle_through_a_packages_command():
    """The ``cli`` package imports the commands of ``experiments`` (``experiments/cli.py``); such a
    command taking the shared options from inside ``cli`` again closes a circle between the two
    packages, though ``experiments/cli.py`` itself sits on the top floor."""
    assert _unit_graph().has_edge("cli", "experiments")
    assert not _unit_graph().has_edge("experiments", "cli")
    command = ROOT / "experiments" / "cli.py"
    back = command.read_text().replace("from ..commandline import", "from ..cli.options import")
    assert back != command.read_text()
    assert ["cli", "experiments"] in _cycles(_unit_graph({command: back}))
    assert not _upward(command, _imports(command, back))  # (the floors alone do not see it)


def test_sub_packages_import_down_only() -> None:
    """The engine imports nothing of the run, the training step nothing of the algorithms over it
    (:data:`SUBRANK`)."""
    upward = []
    for top, floors in SUBRANK.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            me = list(path.relative_to(ROOT).parts)
            mine = floors.get(me[1]) if len(me) > 2 else None
            for target in _imports(path):
                theirs = floors.get(target[1]) if len(target) > 1 and target[0] == top else None
                if mine is not None and theirs is not None and theirs > mine:
                    upward.append(f"{'/'.join(me)} imports {'.'.join(target)}")
    assert not upward, "imports pointing up inside a package:\n" + "\n".join(upward)


def test_every_runtime_module_sits_in_the_engine_or_the_run() -> None:
    loose = [p.name for p in (ROOT / "runtime").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"put these in runtime/engine or runtime/run: {loose}"
    assert {p.name for p in (ROOT / "runtime").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        SUBRANK["runtime"]
    )


#: The rooms of the run (``runtime/run``), lower below higher; ``""``: the modules of the package
#: itself, the round loop and its preparation, which the launching of runs alone sits above.
RUN_ROOMS = {
    "folder": 0,
    "checkpoints": 1,
    "stopping": 2,
    "callbacks": 2,
    "scoring": 3,
    "": 4,
    "launching": 5,
}
#: The modules the run keeps outside its rooms.
RUN_TOP = {"__init__", "loop", "prepare", "disks"}


def _run_room(parts: list[str]) -> str | None:
    """The room of the run that a package-relative module path sits in (``""``: the package's own
    modules), or ``None`` outside ``runtime/run``."""
    if parts[:2] != ["runtime", "run"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in RUN_ROOMS else ""


def _upward_in_run(path: Path, targets: list[list[str]]) -> list[str]:
    """Those of ``targets`` (imported by ``path``) in a room of the run above ``path``'s."""
    me = list(path.relative_to(ROOT).with_suffix("").parts)
    mine = _run_room(me)
    if mine is None:
        return []
    return [
        f"{'/'.join(me)} imports {'.'.join(target)}"
        for target in targets
        if (theirs := _run_room(target)) is not None and RUN_ROOMS[theirs] > RUN_ROOMS[mine]
    ]


def test_the_runs_rooms_import_down_only() -> None:
    """The run folder below the checkpoints, below the stops and the callbacks, below the scores,
    below the loop and its preparation, below the launching of runs (:data:`RUN_ROOMS`)."""
    run = ROOT / "runtime" / "run"
    upward = [line for path in sorted(run.rglob("*.py")) for line in _upward_in_run(path, _imports(path))]
    assert not upward, "imports pointing up among the run's rooms:\n" + "\n".join(upward)
    loose = sorted(p.stem for p in run.glob("*.py") if p.stem not in RUN_TOP)
    assert not loose, f"put these in a room of the run ({', '.join(r for r in RUN_ROOMS if r)}): {loose}"
    rooms = {p.name for p in run.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(RUN_ROOMS) - {""}


def test_the_room_check_sees_an_upward_import() -> None:
    rundir = ROOT / "runtime" / "run" / "folder" / "rundir.py"
    back = rundir.read_text() + "\nfrom ..checkpoints.integrity import CheckpointError\n"
    assert _upward_in_run(rundir, _imports(rundir, back)) == [
        "runtime/run/folder/rundir imports runtime.run.checkpoints.integrity"
    ]
    loop = ROOT / "runtime" / "run" / "loop.py"
    assert not _upward_in_run(loop, _imports(loop))  # the loop imports its rooms
    assert _upward_in_run(loop, _imports(loop, "from .launching.launch import launch\n"))


def test_the_sub_package_check_sees_the_engine_below_the_run() -> None:
    engine = _imports(ROOT / "runtime" / "engine" / "simulate.py")
    assert ["runtime", "engine", "faults"] in engine  # relative imports resolve inside runtime
    assert ["runtime", "run", "simulate"] not in engine
    assert ["runtime", "engine", "simulate"] in _imports(ROOT / "runtime" / "run" / "loop.py")
    assert SUBRANK["runtime"]["engine"] < SUBRANK["runtime"]["run"]


def test_sizes_of_functions_in_the_core() -> None:
    """No function in ``runtime``, ``algorithms`` or ``sheaf`` is over :data:`MAX_FUNCTION_LINES`
    lines (decorators and docstring included), but those of :data:`LONG_FUNCTIONS`."""
    long = _long_functions()
    assert long <= LONG_FUNCTIONS, f"split these functions into named steps: {sorted(long - LONG_FUNCTIONS)}"
    stale = LONG_FUNCTIONS - long
    assert not stale, f"these are short now: remove them from LONG_FUNCTIONS: {sorted(stale)}"


def _long_functions(text: str | None = None, name: str = "") -> set[tuple[str, str]]:
    files = (
        [(name, text)]
        if text is not None
        else [
            (str(p.relative_to(ROOT)), p.read_text())
            for top in SHORT_FUNCTION_PACKAGES
            for p in sorted((ROOT / top).rglob("*.py"))
        ]
    )
    return {
        (path, node.name)
        for path, source in files
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    }


def test_the_function_size_check_sees_a_long_function() -> None:
    body = "    x = 1\n" * MAX_FUNCTION_LINES
    assert _long_functions(f"def f():\n{body}", "m.py") == {("m.py", "f")}
    assert not _long_functions(f"def f():\n{body[10:]}", "m.py")


def _module_of(target: list[str]) -> str | None:
    """The module file ``target`` (from :func:`_imports`) names, dotted; ``None`` for a package's
    ``__init__`` or a name outside the package's files."""
    path = ROOT.joinpath(*target)
    if path.with_suffix(".py").exists():
        return ".".join(target)
    if (path / "__init__.py").exists() or not target:
        return None
    parent = ROOT.joinpath(*target[:-1])
    return ".".join(target[:-1]) if parent.with_suffix(".py").exists() else None


def _room_cycles(texts: dict[Path, str] | None = None) -> list[list[str]]:
    """Circles of imports among the modules of one top-level package (``from .b import x`` in ``a``
    and ``from .a import y`` in ``b``), counting imports inside functions and under
    ``TYPE_CHECKING``; ``texts`` replaces some modules' source."""
    texts = texts or {}
    graph = nx.DiGraph()
    for path in sorted(ROOT.rglob("*.py")):
        rel = list(path.relative_to(ROOT).with_suffix("").parts)
        if rel[-1] == "__init__":
            continue
        me = ".".join(rel)
        for target in _imports(path, texts.get(path)):
            other = _module_of(target)
            if other is not None and other != me and other.split(".")[0] == rel[0]:
                graph.add_edge(me, other)
    return [sorted(c) for c in nx.simple_cycles(graph)]


def test_no_circle_of_imports_inside_a_package() -> None:
    """Inside a package the modules import each other along one direction: no two of them (nor a
    longer ring: ``data/files`` -> ``data/sizes`` -> ``data/synthetic`` -> ``data/files``) import
    each other, not even for a type."""
    assert _room_cycles() == []


def test_the_circle_check_sees_a_circle() -> None:
    rules = ROOT / "config" / "rules.py"
    typed = (
        rules.read_text()
        + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .schema import RunConfig\n"
    )
    assert ["config.rules", "config.schema"] in _room_cycles({rules: typed})
    options = ROOT / "data" / "options.py"
    ring = options.read_text() + "\ndef f():\n    from .files import find_file\n"
    assert any("data.options" in c and "data.files" in c for c in _room_cycles({options: ring}))
