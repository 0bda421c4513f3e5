"""A refusal names the key, the value, the rule and the fix in the user's own spelling: the same bad
input given on the command line (``main`` called in this process) and to ``sheaf_fmtl.run`` is
refused with the same words, save that the fix reads ``--set KEY=VALUE`` (or the command's flag) on
the command line and ``KEY=VALUE`` (``data={'KEY': VALUE}``) in Python; no Python hint names a flag,
and no hint names a function the package does not export."""

from __future__ import annotations

import ast
import functools
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.spelling import command_line, on_command_line, option, setting

KEYS = {"clients": 4, "rounds": 1, "batch_size": 4}

# (id, keys given, what both messages name, the fix on the command line, the fix in Python)
CASES: list[tuple[str, dict[str, Any], list[str], str, str]] = [
    ("range", {"rounds": 0}, ["'rounds'", "= 0", "rounds >= 1"], "--set rounds=200", "rounds=200"),
    ("range-flag", {"seed": -1}, ["'seed'", "= -1", "seed >= 0"], "--seed 0", "seed=0"),
    ("range-open-default", {"lam": -1.0}, ["'lam'", "-1.0", "lam >= 0"], "leave lam out", "leave lam out"),
    (
        "clients-per-round-above-clients",
        {"clients_per_round": 5},
        ["'clients_per_round'", "= 5", "the 4 clients", "clients_per_round <= clients"],
        "--set clients_per_round=1",
        "clients_per_round=1",
    ),
    (
        "clients-per-round-below-one",
        {"clients_per_round": 0},
        ["'clients_per_round'", "= 0", "clients_per_round >= 1"],
        "leave clients_per_round out",
        "leave clients_per_round out",
    ),
    ("type", {"rounds": "ten"}, ["'rounds'", "'ten'", "expected int"], "--set rounds=200", "rounds=200"),
    (
        "choice-close",
        {"maps": "learnt"},
        ["'maps'", "'learnt'", "allowed:"],
        "--set maps=learned",
        "maps='learned'",
    ),
    ("choice-flag", {"device": "gpu"}, ["'device'", "'gpu'", "cuda:N"], "--device cpu", "device='cpu'"),
    ("unknown-key", {"lamda": 0.1}, ["'lamda'"], "--set lam=0.1", "lam=0.1"),
    (
        "rule-ignored",
        {"graph_file": "e.txt", "graph": "complete"},
        ["'graph_file'", "ignores it"],
        "--set graph=file",
        "graph='file'",
    ),
    ("rule-needs", {"graph": "file"}, ["'graph_file'", "graph = file"], "--set graph_file=", "graph_file="),
    (
        "rule-validation",
        {"early_stop_patience": 3},
        ["'early_stop_patience'", "= 3", "validation = 0"],
        "--set validation=0.2",
        "validation=0.2",
    ),
    (
        "rule-owner",
        {"momentum": 0.5},
        ["'momentum'", "optimizer = sgd"],
        "--set optimizer=momentum",
        "optimizer='momentum'",
    ),
    (
        "rule-algorithm",
        {"maps": "fixed", "algorithm": "dfedu"},
        ["'maps'", "= fixed", "sheaf-fmtl only"],
        "--set algorithm=sheaf-fmtl",
        "algorithm='sheaf-fmtl'",
    ),
    (
        "rule-compressor",
        {"compressor": "top-k"},
        ["'compressor'", "= top-k", "dfedu or dpsgd"],
        "--set algorithm=dfedu",
        "algorithm='dfedu'",
    ),
    (
        "rule-local-epochs",
        {"optimizer": "adam", "algorithm": "dfedu", "local_epochs": 0},
        ["'optimizer'", "= adam", "local_epochs > 0"],
        "--set local_epochs=1",
        "local_epochs=1",
    ),
    (
        "data-option-rule",
        {"dataset": "synthetic", "data": {"classes": 1}},
        ["data.classes", "= 1", "classes >= 2"],
        "--set data.classes=",
        "data={'classes': ",
    ),
    (
        "data-option-kind",
        {"dataset": "synthetic", "data": {"min_samples": "many"}},
        ["data.min_samples", "'many'", "an integer"],
        "--set data.min_samples=",
        "data={'min_samples': ",
    ),
    (
        "data-option-unknown",
        {"dataset": "synthetic-clusters", "data": {"group": 2}},
        ["data.group", "options:"],
        "--set data.groups=2",
        "data={'groups': 2}",
    ),
    (
        "clients-above-the-dataset",
        {"dataset": "file:two.npz", "clients": 3},
        ["'clients'", "= 3", "has 2"],
        "--clients 2",
        "clients=2",
    ),
]


def _argv(keys: dict[str, Any]) -> list[str]:
    argv = []
    for key, value in {**KEYS, **keys}.items():
        if isinstance(value, dict):
            argv += [a for k, v in value.items() for a in ("--set", f"{key}.{k}={v}")]
        else:
            argv += ["--set", f"{key}={value}"]
    return argv


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A working folder with a two-client ``.npz`` dataset."""
    import numpy as np

    x = np.zeros((10, 3))
    y = np.arange(10) % 2
    np.savez(tmp_path / "two.npz", num_clients=2, x_0=x, y_0=y, x_1=x, y_1=y)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("keys, named, cli_fix, python_fix", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_a_refusal_names_the_key_and_the_fix_in_each_spelling(
    folder, capsys, keys, named, cli_fix, python_fix
):
    with pytest.raises(ValueError) as refused:
        sheaf_fmtl.run(**{**KEYS, **keys})
    said = str(refused.value)
    assert main(["run", *_argv(keys), "--quiet", "--out", str(folder / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error: "), err
    cli = err.removeprefix("sheaf-fmtl: error: ")
    for text in (said, cli):
        assert all(n in text for n in named), (text, named)
    assert cli_fix in cli, cli
    assert python_fix in said and "--" not in said, said
    assert said[: said.index(python_fix)] == cli[: cli.index(cli_fix)]  # the same fault in the same words
    assert not (folder / "r").exists()


def test_the_spellings_of_a_setting():
    assert setting("lam", 0.1) == "lam=0.1"
    assert setting("graph", "file") == "graph='file'"
    assert setting("data.groups", 2) == "data={'groups': 2}"
    assert setting("rounds") == "rounds=..."
    assert option("overwrite", True) == "overwrite=True" and option("out") == "out=..."
    assert option("resume", Path("runs/a")) == "resume='runs/a'"
    assert not on_command_line()
    with command_line({"seed": "--seed"}):
        assert on_command_line()
        assert setting("lam", 0.1) == "--set lam=0.1"
        assert setting("graph", "file") == "--set graph=file"
        assert setting("estimates", True) == "--set estimates=true"
        assert setting("data.groups", 2) == "--set data.groups=2"
        assert setting("data.feature_counts", [1, 2]) == "--set data.feature_counts=[1, 2]"
        assert setting("seed", 3) == "--seed 3"
        assert setting("clients", 3) == "--set clients=3"  # a flag this command does not have
        assert option("overwrite", True) == "--overwrite" and option("out") == "--out"
        assert option("resume", Path("runs/a")) == "--resume runs/a"
        assert option("trust_plugins", True) == "--trust-plugins"
        assert setting("lam", list(range(10**6))) == "--set lam=..."  # a huge value is not echoed
    assert not on_command_line()


def test_the_command_line_spelling_stays_with_the_command():
    """A thread started outside a command (a user's callback, a server) writes Python's spelling."""
    seen = []
    with command_line():
        thread = threading.Thread(target=lambda: seen.append(on_command_line()))
        thread.start()
        thread.join()
    assert seen == [False]


ROOT = Path(sheaf_fmtl.__file__).parent
NAMED = re.compile(r"sheaf_fmtl\.(\w+)")


@functools.cache
def _refusal_texts() -> list[tuple[str, str]]:
    """Every string written into a ``raise``'s message in the package: (where, text)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                for part in ast.walk(node.exc):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        found.append((f"{path.relative_to(ROOT)}:{node.lineno}", part.value))
    return found


def test_no_refusal_points_at_a_name_the_package_does_not_export():
    exported = set(sheaf_fmtl.__all__)
    wrong = [
        (where, text)
        for where, text in _refusal_texts()
        for name in NAMED.findall(text)
        if name not in exported
    ]
    assert not wrong, wrong


def test_no_refusal_hard_codes_one_spelling_for_both():
    """A fix reads in one spelling, chosen by the entry point (:mod:`sheaf_fmtl.spelling`): no message
    spells a config key as ``--set`` for every reader, nor adds a ``(Python: ...)`` aside."""
    both = [(w, t) for w, t in _refusal_texts() if "--set " in t or "Python:" in t]
    assert not both, both


def test_the_check_sees_a_name_not_exported():
    assert NAMED.findall("use sheaf_fmtl.resume(...)") == ["resume"]
    assert "resume" not in sheaf_fmtl.__all__


def test_resume_refusals_read_alike_in_each_spelling(tmp_path, capsys):
    """``trust_plugins`` without ``resume``, and ``resume`` with a folder of one's own: the same
    words from the command line and from ``sheaf_fmtl.run``, each naming its own arguments."""
    ways = [
        ("trust_plugins=True", "--trust-plugins"),
        ("resume='RUN_DIR'", "--resume RUN_DIR"),
        ("out=", "--out"),
    ]
    cases = [
        ({"trust_plugins": True, **KEYS}, ["run", "--trust-plugins", *_argv({}), "--quiet"]),
        (
            {"resume": tmp_path / "r", "out": tmp_path / "o"},
            ["run", "--resume", str(tmp_path / "r"), "--out", "o"],
        ),
    ]
    for keys, argv in cases:
        with pytest.raises(ValueError) as refused:
            sheaf_fmtl.run(**keys)
        said = str(refused.value)
        assert "--" not in said, said
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        for python, flag in ways:
            said = said.replace(python, flag)
        assert err == f"sheaf-fmtl: error: {said}", err
    assert not (tmp_path / "o").exists()
