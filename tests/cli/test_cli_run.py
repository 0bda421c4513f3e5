"""End-to-end runs through the CLI: files written, determinism, bad input, divergence."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
import yaml

from sheaf_fmtl.cli import main

FAST = ["--set", "rounds=6", "--set", "eval_every=3", "--set", "clients=8", "--set", "graph_p=0.5", "--quiet"]


def _summary(path):
    return json.loads((path / "summary.json").read_text())


def test_run_on_the_default_dataset_writes_every_file(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *FAST, "--out", str(out)]) == 0
    for name in ("config.yaml", "metrics.csv", "summary.json", "checkpoint.pt"):
        assert (out / name).is_file(), name
    s = _summary(out)
    for key in (
        "algorithm",
        "dataset",
        "num_clients",
        "rounds",
        "seed",
        "metric",
        "final",
        "per_client",
        "transmitted_bits",
        "wall_seconds",
        "peak_rss_bytes",
    ):
        assert key in s, key
    assert s["dataset"] == "synthetic-clusters" and s["metric"] == "accuracy" and s["num_clients"] == 8
    assert len(s["per_client"]) == 8 and 0.0 <= s["final"] <= 1.0
    assert math.isclose(s["final"], sum(s["per_client"]) / 8, rel_tol=1e-6)
    assert s["transmitted_bits"] > 0 and s["peak_rss_bytes"] > 0
    assert len(set(s["model_dims"])) > 1  # heterogeneous model sizes
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["round"]) for r in rows] == [0, 3, 6]
    for r in rows:
        for key, value in r.items():
            assert math.isfinite(float(value)), (key, value)
    assert int(rows[-1]["transmitted_bits"]) == s["transmitted_bits"]
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["rounds"] == 6 and cfg["algorithm"] == "sheaf-fmtl"
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert len(ckpt["thetas"]) == 8 and ckpt["map_norms"].shape == (2 * len(ckpt["edges"]),)
    assert "results:" in capsys.readouterr().out


def test_same_config_and_seed_give_identical_numbers(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main(["run", *FAST, "--out", str(a)]) == 0
    assert main(["run", *FAST, "--out", str(b)]) == 0
    assert main(["run", *FAST, "--set", "seed=1", "--out", str(c)]) == 0
    volatile = {"wall_seconds", "peak_rss_bytes"}
    sa, sb, sc = (_summary(p) for p in (a, b, c))
    assert {k: v for k, v in sa.items() if k not in volatile} == {
        k: v for k, v in sb.items() if k not in volatile
    }
    assert sa["per_client"] != sc["per_client"]


def test_resolved_config_reruns_identically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", *FAST, "--set", "lam=0.05", "--out", str(a)]) == 0
    assert main(["run", str(a / "config.yaml"), "--quiet", "--out", str(b)]) == 0
    assert _summary(a)["per_client"] == _summary(b)["per_client"]


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("gamma=1.5", "0 < gamma <= 1"),
        ("lam=-0.1", "lam >= 0"),
        ("alpha=0", "alpha > 0"),
        ("eta=-1", "eta >= 0"),
        ("clients=1", "clients >= 2"),
        ("graph_p=1.5", "0 < graph_p <= 1"),
        ("graph_p=0", "0 < graph_p <= 1"),
        ("bogus=3", "unknown config key 'bogus'"),
        ("rounds=ten", "expected int"),
        ("map_init=zeros", "never learn"),
        ("map_scale=0", "never learn"),
        ("graph=ring", "allowed:"),
    ],
)
def test_bad_input_fails_before_work_with_one_line(tmp_path, capsys, override, fragment):
    out = tmp_path / "bad"
    assert main(["run", "--set", override, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
    assert not out.exists()  # no work done, no folder


def test_divergence_stops_with_round_and_keeps_good_metrics(tmp_path, capsys):
    out = tmp_path / "nan"
    code = main(
        [
            "run",
            *FAST,
            "--set",
            "alpha=1e4",
            "--set",
            "eval_every=1",
            "--set",
            "stability_check=false",
            "--set",
            "maps=learned",
            "--set",
            "local_epochs=0",
            "--out",
            str(out),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "round" in err and "alpha" in err and "2/(N L)" in err
    s = _summary(out)
    assert s["status"] == "diverged" and s["final"] is None and s["per_client"] is None
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert rows, "the initial evaluation is kept"
    assert all(math.isfinite(float(v)) for r in rows for v in r.values())
    assert int(rows[-1]["round"]) < s["diverged_at_round"]


@pytest.mark.slow
def test_plot_writes_pngs(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", *FAST, "--out", str(a)]) == 0
    assert main(["run", *FAST, "--set", "algorithm=local", "--out", str(b)]) == 0
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "plots")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert "metric_vs_rounds_and_bits.png" in pngs and "map_norms_a.png" in pngs
    assert all((tmp_path / "plots" / p).stat().st_size > 1000 for p in pngs)


def test_metrics_csv_names_its_metric_with_plain_newlines_and_old_files_still_read(tmp_path):
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.metrics.results import read_metrics
    from sheaf_fmtl.runtime.run.folder.recorder import Recorder

    rec = Recorder(tmp_path / "new", RunConfig(), metric="mse")
    rec.log(
        {
            "round": 0,
            "test_metric": 2.5,
            "train_loss": 1.0,
            "objective": 1.0,
            "sheaf_energy": None,
            "transmitted_bits": 0,
            "wall_seconds": 0.1,
        }
    )
    rec.close()
    raw = (tmp_path / "new" / "metrics.csv").read_bytes()
    assert b"\r" not in raw and raw.startswith(b"round,test_mse,train_loss")
    assert rec.rows[0]["test_mse"] == 2.5
    m = read_metrics(tmp_path / "new")
    assert m["test_mse"] == [2.5] and math.isnan(m["sheaf_energy"][0])
    old = tmp_path / "old"  # written before the rename: the metric from summary.json
    old.mkdir()
    (old / "metrics.csv").write_text("round,test_metric,train_loss\r\n0,0.5,1.0\r\n10,0.75,0.5\r\n")
    (old / "summary.json").write_text(json.dumps({"metric": "accuracy"}))
    m = read_metrics(old)
    assert m["test_accuracy"] == [0.5, 0.75] and m["round"] == [0.0, 10.0]


def test_saved_config_is_resolved_and_records_versions(tmp_path):
    import sheaf_fmtl

    out = tmp_path / "run"
    assert main(["run", "--set", "rounds=1", "eval_every=1", "--quiet", "--out", str(out)]) == 0
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    s = _summary(out)
    assert cfg["clients"] == s["num_clients"] >= 2  # the dataset's own number, not null
    want = {"sheaf_fmtl": sheaf_fmtl.__version__, "torch": str(torch.__version__)}
    assert cfg["versions"] == s["versions"] == want
    b = tmp_path / "rerun"
    assert main(["run", str(out / "config.yaml"), "--quiet", "--out", str(b)]) == 0  # versions ignored
    assert _summary(b)["per_client"] == s["per_client"]


def test_set_takes_several_pairs_and_flags_equal_their_keys(tmp_path):
    from sheaf_fmtl.cli import build_parser
    from sheaf_fmtl.commandline import config_keys
    from sheaf_fmtl.config import load_config

    args = build_parser().parse_args(
        [
            "run",
            "--set",
            "rounds=2",
            "eval_every=1",
            "--set",
            "lam=0.5",
            "--seed",
            "3",
            "--clients",
            "5",
            "--data-dir",
            str(tmp_path),
            "--device",
            "cpu",
        ]
    )
    assert args.set == ["rounds=2", "eval_every=1", "lam=0.5"]
    flags = load_config(None, args.set, config_keys(args))
    sets = load_config(None, [*args.set, "seed=3", "clients=5", f"data_dir={tmp_path}"])
    assert flags == sets and flags.rounds == 2 and flags.eval_every == 1 and flags.seed == 3


def test_version_help_and_one_registrar_per_subcommand(capsys):
    import sheaf_fmtl
    from sheaf_fmtl.cli import REGISTRARS

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"sheaf-fmtl {sheaf_fmtl.__version__}"
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in ("run", "demo", "plot", "data", "bench"))
    assert len(REGISTRARS) >= 5 and all(callable(r) for r in REGISTRARS)


def test_cuda_index_is_a_valid_device_name_and_checked_when_run():
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.runtime.engine.simulate import resolve_device

    assert RunConfig(device="cuda:1").device == "cuda:1"
    with pytest.raises(ValueError, match="cuda:99"):  # absent here (no CUDA, or fewer devices)
        resolve_device("cuda:99")
    assert resolve_device("cpu") == "cpu"


def test_data_describe_takes_the_shared_options(capsys):
    assert (
        main(
            [
                "data",
                "describe",
                "synthetic-hetero",
                "--clients",
                "5",
                "--seed",
                "2",
                "--set",
                "data.relatedness=0.5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "5 clients" in out and "seed 2" in out


def test_data_describe_summarises_many_clients_instead_of_listing_them(capsys):
    assert main(["data", "describe", "synthetic", "--clients", "300"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if s.startswith("per-client n_train"))
    assert "median" in line and "max" in line and len(line.split()) < 20  # quantiles, not 300 numbers
    bars = [s for s in out.splitlines() if "#" in s]
    assert len(bars) >= 5 and sum(int(s.split()[-1]) for s in bars if s.split()[-1].isdigit()) <= 300
    assert "300 clients; --per-client lists each" in out
    assert main(["data", "describe", "synthetic", "--clients", "300", "--per-client"]) == 0
    listed = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("per-client n_train"))
    assert len(listed.split(":")[1].split()) == 300


def test_describe_histogram_counts_every_client():
    from sheaf_fmtl.cli.data import count_summary

    counts = np.array([5] * 7 + [50] * 3)
    lines = count_summary(counts, bins=3)
    assert lines[0] == "per-client n_train: min 5, 10% 5, 25% 5, median 5, 75% 50, 90% 50, max 50"
    assert [int(s.split()[-1]) for s in lines[1:4]] == [7, 0, 3]
