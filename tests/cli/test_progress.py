"""Progress: a bar on a terminal only; elsewhere a plain line every tenth of the run, none with
``--quiet``; never a carriage return in a file or a CI log."""

from __future__ import annotations

import io

from tqdm import tqdm

from sheaf_fmtl import progress
from sheaf_fmtl.cli import main

RUN = ["run", "--set", "rounds=20", "eval_every=5", "--clients", "6"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_run_without_a_terminal_writes_lines_and_no_carriage_return(tmp_path, capsys):
    assert main([*RUN, "--out", str(tmp_path / "run")]) == 0
    out, err = capsys.readouterr()
    assert "\r" not in out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("sheaf-fmtl on synthetic-clusters: round")]
    assert [ln.split(",")[0].rsplit(" ", 1)[1] for ln in lines] == [f"{k}/20" for k in range(2, 21, 2)]
    assert "accuracy 0." in lines[-1] and lines[-1].endswith(" s")


def test_quiet_writes_no_progress(tmp_path, capsys):
    assert main([*RUN, "--out", str(tmp_path / "run"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "round" not in err and "\r" not in out + err
    assert "final mean test accuracy" in out


def test_a_terminal_gets_a_bar_and_a_resumed_run_counts_from_its_round():
    with progress.bar(range(3), desc="x", unit="round", stream=Terminal()) as live:
        assert isinstance(live, tqdm)
    log = io.StringIO()
    lines = progress.bar(range(10, 20), desc="run", unit="round", initial=10, total=20, stream=log)
    assert not isinstance(lines, tqdm)
    for k in lines:
        lines.set_postfix({"accuracy": f"{k / 20:.2f}"})
    assert [ln.split(",")[0] for ln in log.getvalue().splitlines()] == [
        f"run: round {k}/20" for k in range(12, 21, 2)
    ]
    assert "accuracy 0.95" in log.getvalue().splitlines()[-1]


def test_inner_and_disabled_bars_are_silent_off_a_terminal():
    log = io.StringIO()
    for _ in progress.bar(range(5), desc="inner", unit="round", transient=True, stream=log):
        pass
    for _ in progress.bar(range(5), desc="quiet", unit="round", enabled=False, stream=log):
        pass
    assert log.getvalue() == ""


def test_lines_say_how_long_is_left_at_the_pace_so_far(monkeypatch):
    """Two seconds a round from round 10 of 20: at round 12, 4 s gone and 16 s left; none at the end."""
    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    log = io.StringIO()
    for k in progress.bar(range(10, 20), desc="run", unit="round", initial=10, total=20, stream=log):
        clock[0] = 2.0 * (k + 1 - 10)
    lines = log.getvalue().splitlines()
    assert lines[0] == "run: round 12/20, 4 s, about 16 s left"
    assert lines[-1] == "run: round 20/20, 20 s"
