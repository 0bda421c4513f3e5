"""More of the bad-input catalogue (as in ``test_cli_errors``): each case ends with exit status 2,
one line on stderr (``sheaf-fmtl: error: ...``, no traceback), and nothing written or overwritten."""

from __future__ import annotations

import time

import pytest

from sheaf_fmtl.cli import main

from .test_cli_errors import TINY, _files, sandbox  # noqa: F401 - the catalogue's working folder


@pytest.fixture
def inputs(sandbox):  # noqa: F811
    """The catalogue's folder with this file's inputs."""
    (sandbox / "recursive_list.yaml").write_text("rounds: &a [*a]\n")
    (sandbox / "recursive_map.yaml").write_text("data: &a {x: *a}\n")
    return sandbox


# (id, argv, a fragment of the message)
CASES = [
    ("yaml-recursive-list", ["run", "recursive_list.yaml"], "line 1 contains itself through an alias"),
    ("yaml-recursive-map", ["run", "recursive_map.yaml"], "line 1 contains itself through an alias"),
    ("set-recursive-map", ["run", "--set", "data=&a {x: *a}"], "contains itself through an alias"),
    ("set-recursive-nested", ["run", "--set", "data=&a {x: [1, {y: *a}]}"], "contains itself"),
]


@pytest.mark.parametrize("argv, fragment", [pytest.param(*rest, id=name) for name, *rest in CASES])
def test_refused_at_once_in_one_line_and_nothing_written(inputs, capsys, argv, fragment):
    before = _files(inputs)
    t0 = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - t0 < 10  # at once (a recursive alias used to hang or exhaust memory)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err and len(err.splitlines()) == 1, err
    assert err.startswith("sheaf-fmtl: error: ") and fragment in err, err
    assert _files(inputs) == before


def test_an_alias_used_twice_is_no_cycle():
    """The oracle for the cycle check: a shared (not self-containing) anchor still reads."""
    from sheaf_fmtl.config import parse_yaml

    assert parse_yaml("a: &x [1, {k: 2}]\nb: [*x, *x]\n", "f") == {
        "a": [1, {"k": 2}],
        "b": [[1, {"k": 2}], [1, {"k": 2}]],
    }
