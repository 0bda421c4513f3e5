"""Refusals a user meets with a generated dataset's options or a wrong folder name the option as it
is set (``data.KEY``), its value, the rule and how to set it; ``export`` of a path that is no folder
says so instead of naming a ``config.yaml`` inside it."""

from __future__ import annotations

import pytest

from sheaf_fmtl.cli import main


@pytest.mark.parametrize(
    "dataset, option, value, rule",
    [
        ("synthetic-clusters", "features", "0", "features >= 1"),
        ("synthetic-clusters", "groups", "0", "groups >= 1"),
        ("synthetic-clusters", "relatedness", "1.5", "0 <= relatedness <= 1"),
        ("synthetic-clusters", "max_samples", "3", "max_samples >= min_samples"),
        ("synthetic", "classes", "1", "classes >= 2"),
        ("synthetic", "alpha", "-1.0", "alpha >= 0"),
        ("synthetic-hetero", "relatedness", "-0.5", "0 <= relatedness <= 1"),
        ("synthetic-hetero", "feature_counts", "[0]", "counts in [1, features"),
    ],
)
def test_a_generated_datasets_option_is_named_with_its_value(tmp_path, capsys, dataset, option, value, rule):
    argv = ["run", "--set", f"dataset={dataset}", "--set", f"data.{option}={value}", "--set", "rounds=1"]
    assert main([*argv, "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    shown = value.replace("[", "").replace("]", "")
    assert f"data.{option} = " in err and shown in err and rule in err and f"set data.{option}=" in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_export_of_a_path_that_is_no_folder_says_so(tmp_path, capsys, kind):
    run = tmp_path / "run"
    if kind == "file":
        run.write_text("mine")
    assert main(["export", str(run), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{run} is not a run folder" in err and "config.yaml" not in err, err
