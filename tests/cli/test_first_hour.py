"""What a new user meets in the first hour: a mistyped key gets a suggestion, ``--set a=b
CONFIG.yaml`` keeps the config path, ``--help`` starts without torch, plots name the user's own
objects, and a zero-width terminal gets progress lines."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import sheaf_fmtl
from sheaf_fmtl import progress
from sheaf_fmtl.cli import COMMANDS, build_parser, main
from sheaf_fmtl.config import ConfigError, load_config
from sheaf_fmtl.plots.curves import metric_figure
from sheaf_fmtl.plots.labels import object_name
from sheaf_fmtl.plots.records import load_run


def test_a_mistyped_key_gets_did_you_mean():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["lamda=0.1"])
    assert str(e.value).startswith("unknown config key 'lamda'; did you mean lam=0.1")  # its value kept
    assert "known keys" not in str(e.value)
    with pytest.raises(ConfigError, match=r"did you mean eval_every=5( or [a-z_]+=5)?\?"):
        load_config(None, ["eval-every=5"])
    with pytest.raises(ConfigError, match="known keys: .*rounds"):  # nothing close: every key
        load_config(None, ["zzzzqqq=1"])


def test_set_before_the_config_path_keeps_the_path(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dataset: synthetic-hetero\nclients: 4\nrounds: 2\nlam: 0.05\n")
    out = tmp_path / "run"
    assert main(["run", "--set", "rounds=3", str(cfg), "--out", str(out), "--quiet"]) == 0
    saved = (out / "config.yaml").read_text()
    assert "rounds: 3" in saved and "clients: 4" in saved and "lam: 0.05" in saved


def test_help_imports_no_torch_and_lists_every_command():
    code = "import sys; from sheaf_fmtl.cli import main; main(['--help']); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False")
    for name in COMMANDS:
        assert f"\n    {name}" in done.stdout


def _help_lines(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: str(a.help) for a in sub._choices_actions}


def test_the_help_lines_are_those_of_the_parsers():
    full = _help_lines(build_parser())
    assert full == {name: text for name, (text, _) in COMMANDS.items()}
    assert _help_lines(build_parser(None)) == full
    for name in COMMANDS:  # the command given is built in full, the others by name
        assert _help_lines(build_parser(name)) == full


def test_a_zero_width_terminal_gets_progress_lines():
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 0, 0, 0))
    with os.fdopen(slave, "w") as stream:
        assert progress.on_terminal(stream) and progress.columns(stream) == 0
        live = progress.bar(range(10), desc="run", unit="round", total=10, stream=stream)
        assert isinstance(live, progress.Lines)
        for _ in live:
            pass
        stream.flush()
        text = ""
        while select.select([master], [], [], 1.0)[0] and "10/10" not in text:
            text += os.read(master, 4096).decode()
    os.close(master)
    assert "run: round 10/10" in text and "\r" not in text.replace("\r\n", "\n")
    wide = os.openpty()
    fcntl.ioctl(wide[1], termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with os.fdopen(wide[1], "w") as stream:
        assert not isinstance(progress.bar(range(2), desc="x", unit="round", stream=stream), progress.Lines)
    os.close(wide[0])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_plots_name_the_users_objects_and_titles_do_not_overlap(tmp_path):
    rng = np.random.default_rng(0)
    data = []
    for _ in range(4):
        x = rng.standard_normal((20, 3)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        data.append((x[:15], y[:15], x[15:], y[15:]))

    def small_net(i: int) -> nn.Module:  # local functions: held under placeholders
        return Net()

    def other_net(i: int) -> nn.Module:
        return Net()

    runs = []
    for name, factory in (("small", small_net), ("other", other_net)):
        out = tmp_path / name
        sheaf_fmtl.Federation(data=data, model=factory).run(algorithm="sheaf-fmtl", rounds=2, out=out)
        runs.append(load_run(out))
    assert "model: '<python: small_net" in (tmp_path / "small" / "config.yaml").read_text()
    fig = metric_figure(runs)
    fig.canvas.draw()
    titles = [ax.get_title() for ax in fig.axes]
    legend = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("model=small_net" in t for t in legend) and any("model=other_net" in t for t in legend)
    assert not any("<python" in t for t in [*titles, *legend])
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    left, right = (ax.title.get_window_extent(renderer) for ax in fig.axes[:2])
    assert left.x1 <= right.x0  # side by side, not overlapping
    assert object_name("<python: make_model #12>") == "make_model"
    assert object_name("file:x.npz") == "file:x.npz"


def test_long_titles_wrap_instead_of_overlapping():
    from sheaf_fmtl.plots.labels import TITLE_WIDTH, title

    long = "synthetic-clusters-with-a-long-name, another-dataset-name, and-a-third: test accuracy vs rounds"
    lines = title(long).splitlines()
    assert len(lines) > 1 and all(len(line) <= TITLE_WIDTH for line in lines)
    assert " ".join(lines) == long


def test_the_readme_says_what_torch_pulls_and_how_to_take_the_cpu_wheels():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "pinned to its CPU build" not in readme
    assert "2.5 GB" in readme and "--index-url https://download.pytorch.org/whl/cpu" in readme


def test_a_word_without_equals_that_is_no_file_is_still_refused(capsys):
    assert main(["run", "--set", "lam"]) == 2
    assert "must look like KEY=VALUE" in capsys.readouterr().err
