"""The bench's memory check: the maps it counts without building anything are the maps a built
setting holds, a setting larger than the free memory is refused naming ``--quick``, and a child the
out-of-memory killer stopped is reported as such."""

from __future__ import annotations

import dataclasses
import signal
import subprocess

import pytest

from sheaf_fmtl.bench import runner
from sheaf_fmtl.bench.memory_check import BenchMemoryError, check_fits, setting_bytes
from sheaf_fmtl.bench.settings import SETTINGS
from sheaf_fmtl.bench.synthetic import build, lower_bound_bytes


@pytest.mark.parametrize("name", ["small-smoke", "cnn-smoke"])
def test_the_counted_maps_are_the_built_settings_maps(name: str) -> None:
    s = SETTINGS[name]
    built = lower_bound_bytes(build(s))
    counted = setting_bytes(s)
    assert counted.maps == built["maps"]
    assert counted.reference == min(built["maps"], s.ref_max_bytes)


def test_a_setting_larger_than_the_free_memory_is_refused_naming_quick() -> None:
    s = SETTINGS["cnn-smoke"]
    need = setting_bytes(s).peak
    check_fits(s, "cpu", free=need)  # fits exactly
    with pytest.raises(BenchMemoryError, match=r"'cnn-smoke' needs about .* GiB.*--quick"):
        check_fits(s, "cpu", free=need - 1)
    bf16 = dataclasses.replace(s, map_dtype="bfloat16")
    assert setting_bytes(bf16).maps * 2 == setting_bytes(s).maps  # two bytes an element, not four


def test_a_child_killed_by_the_out_of_memory_killer_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    killed = subprocess.CompletedProcess(args=[], returncode=-signal.SIGKILL, stdout="")
    monkeypatch.setattr(runner.subprocess, "run", lambda *a, **k: killed)
    with pytest.raises(RuntimeError, match="out-of-memory killer.*--quick"):
        runner.run_setting_subprocess(SETTINGS["small-smoke"], "cpu")
