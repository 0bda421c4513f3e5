"""The heap policy (:mod:`sheaf_fmtl.heap`): with it a large tensor comes from the heap, without it
glibc maps it afresh; each case in a fresh interpreter, read back through glibc's ``mallinfo2``."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import warnings

import pytest

PROBE = """
import ctypes, json
import torch
from sheaf_fmtl.heap import keep_freed_pages

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
applied = keep_freed_pages()
before = libc.mallinfo2().hblks
big = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB: above glibc's largest mmap threshold
print(json.dumps({"applied": applied, "mapped": libc.mallinfo2().hblks - before, "sum": int(big.sum())}))
"""


def _has_mallinfo2() -> bool:
    try:
        ctypes.CDLL(None).mallinfo2  # noqa: B018 - glibc >= 2.33
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(), reason="glibc >= 2.33 only")
@pytest.mark.parametrize(
    ("policy", "applied", "mapped"),
    [("", True, 0), ("lean", True, 1), ("system", False, 1)],
)
def test_large_tensors_come_from_the_heap_unless_the_system_or_lean_policy_is_asked(
    policy: str, applied: bool, mapped: int
) -> None:
    env = {**os.environ, "SHEAF_FMTL_HEAP": policy}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"applied": applied, "mapped": mapped, "sum": 64 << 20}


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _has_mallinfo2(), reason="glibc >= 2.33 only")
def test_the_lean_policy_serves_tensors_below_its_threshold_from_the_heap() -> None:
    small = PROBE.replace("64 << 20", "16 << 20")
    env = {**os.environ, "SHEAF_FMTL_HEAP": "lean"}
    out = subprocess.run([sys.executable, "-c", small], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"applied": True, "mapped": 0, "sum": 16 << 20}


def test_an_unknown_policy_warns_and_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from sheaf_fmtl import heap

    monkeypatch.setenv("SHEAF_FMTL_HEAP", "greedy")
    with pytest.warns(UserWarning, match="greedy"):
        assert heap.heap_policy() == "kept"


def test_the_policy_applied_is_named_and_an_unknown_one_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from sheaf_fmtl import heap

    monkeypatch.setenv("SHEAF_FMTL_HEAP", "greedy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        named = heap.applied_policy()
    assert [str(w.message).count("greedy") for w in caught] == [1]
    assert named == ("kept" if heap._libc() is not None else "system")
    monkeypatch.setenv("SHEAF_FMTL_HEAP", "system")
    assert heap.applied_policy() == "system"  # (nothing applied: glibc's own policy)


def test_the_heap_policies_add_their_glibc_tunables_after_any_already_set() -> None:
    from sheaf_fmtl.heap import TUNABLES, _is_glibc, tunables_env

    if not _is_glibc():
        pytest.skip("glibc only: elsewhere nothing is to change")
    ours = ":".join(TUNABLES)
    assert tunables_env({})["GLIBC_TUNABLES"] == ours
    assert tunables_env({"SHEAF_FMTL_HEAP": "lean", "X": "1"}) == {
        "SHEAF_FMTL_HEAP": "lean", "X": "1", "GLIBC_TUNABLES": ours
    }  # fmt: skip
    other = "glibc.malloc.arena_max=2"
    assert tunables_env({"GLIBC_TUNABLES": other})["GLIBC_TUNABLES"] == f"{other}:{ours}"
    name = TUNABLES[0].split("=")[0]
    assert tunables_env({"GLIBC_TUNABLES": f"{name}=5"}) is None  # the user's own value stays
    assert tunables_env({"GLIBC_TUNABLES": ours}) is None
    assert tunables_env({"SHEAF_FMTL_HEAP": "system"}) is None
    assert tunables_env({"SHEAF_FMTL_HEAP": "no-such-policy"}) is None


RESTART = """
import os, sys
print("started", os.environ.get("GLIBC_TUNABLES"), flush=True)
from sheaf_fmtl.heap import run_under_tunables
run_under_tunables()
print("ran", os.environ.get("GLIBC_TUNABLES"), os.getpid(), sys.argv[1:])
"""


@pytest.mark.parametrize("policy", ["", "system"])
def test_a_process_starts_again_under_the_tunables_with_its_own_arguments(policy: str) -> None:
    from sheaf_fmtl.heap import TUNABLES, _is_glibc

    if not _is_glibc():
        pytest.skip("glibc only")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | {"SHEAF_FMTL_HEAP": policy}
    done = subprocess.run(
        [sys.executable, "-c", RESTART, "a b", "c"], env=env, capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    if policy == "system":  # glibc's own policy: no restart, no tunables
        assert lines[0] == "started None" and lines[1].startswith("ran None ")
        return
    ours = ":".join(TUNABLES)
    assert lines[:2] == ["started None", f"started {ours}"]  # the same program, started once more
    assert lines[2].startswith(f"ran {ours} ") and lines[2].endswith("['a b', 'c']")


def test_the_command_line_starts_under_the_tunables(tmp_path) -> None:
    from sheaf_fmtl.heap import TUNABLES, _is_glibc

    if not _is_glibc():
        pytest.skip("glibc only")
    program = tmp_path / "sheaf-fmtl"  # the name the package knows its command line by
    program.write_text("import os, sheaf_fmtl\nprint(os.environ.get('GLIBC_TUNABLES'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "SHEAF_FMTL_HEAP")}
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [":".join(TUNABLES)]
