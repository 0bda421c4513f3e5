"""Three silos over the authenticated transport (``transport = tls``) give the Gloo run's numbers
bit for bit: models, maps, bits, counts and every metric (the sheaf energy, a sum of one number
from each silo, added in Gloo's order); faults and a resume behave as over Gloo. The example script
runs its three attacks, each refused. Slow: each run starts three processes."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("grpc", reason="the silo transport needs grpcio (pip install 'sheaf-fmtl[silos]')")
pytest.importorskip("cryptography", reason="certs init needs cryptography (pip install 'sheaf-fmtl[silos]')")

from sheaf_fmtl.config import RunConfig  # noqa: E402
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import latest_checkpoint  # noqa: E402
from sheaf_fmtl.runtime.run.launching.spawn import spawn  # noqa: E402
from sheaf_fmtl.runtime.silonet.certs import init_certs  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EDGES = "0 1\n1 2\n2 3\n3 4\n4 5\n0 2\n3 5\n"  # silo R holds clients 2R, 2R+1: silos 0 - 1 - 2
CLOCK = {"wall_seconds"}


def _settings(tmp_path: Path, **keys: Any) -> RunConfig:
    (tmp_path / "edges.txt").write_text(EDGES)
    base = dict(dataset="synthetic", clients=6, graph="file", graph_file=str(tmp_path / "edges.txt"))
    return RunConfig(**{**base, "rounds": 8, "eval_every": 4, "processes": 3, "timeout_s": 60.0, **keys})


def _both_transports(tmp_path: Path, config: RunConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config`` over TLS into ``tmp_path/tls`` (a new authority in ``tmp_path/certs``), then over
    Gloo into ``tmp_path/gloo``: their summaries."""
    init_certs(tmp_path / "certs", 3)
    tls_config = config.replace(transport="tls", tls_certs=str(tmp_path / "certs"))
    tls = spawn(tls_config, tmp_path / "tls", progress=False, overwrite=False)
    return tls, spawn(config, tmp_path / "gloo", progress=False, overwrite=False)


def _rows(folder: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((folder / "metrics.csv").open()))


def _same_run(tls: Path, gloo: Path) -> None:
    a, b = (torch.load(f / "checkpoint.pt", weights_only=False) for f in (tls, gloo))
    assert set(a) == set(b)
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        elif isinstance(a[key], list) and a[key] and isinstance(a[key][0], torch.Tensor):
            assert all(torch.equal(x, y) for x, y in zip(a[key], b[key], strict=True)), key
    for x, y in zip(_rows(tls), _rows(gloo), strict=True):
        for key in x.keys() - CLOCK:
            assert x[key] == y[key], key
    assert len(_rows(tls)) == len(_rows(gloo)) > 1


@pytest.mark.parametrize(
    "keys",
    [{}, {"algorithm": "dfedu", "link_drop_prob": 0.2, "drop_prob": 0.1}],
    ids=["sheaf-fmtl", "dfedu-with-faults"],
)
def test_three_silos_over_tls_give_the_gloo_run(tmp_path: Path, keys: dict[str, Any]) -> None:
    tls, gloo = _both_transports(tmp_path, _settings(tmp_path, **keys))
    for key in ("transmitted_bits", "rejected_messages", "dropped_messages", "per_client", "final"):
        assert tls[key] == gloo[key], key
    assert tls["transmitted_bits"] > 0
    if keys:
        assert tls["dropped_messages"] > 0
    _same_run(tmp_path / "tls", tmp_path / "gloo")


def test_early_stopping_over_tls_keeps_the_gloo_runs_best(tmp_path: Path) -> None:
    """``best.pt``'s models gathered along the silo tree, as the final ones are: the Gloo run's."""
    config = _settings(tmp_path, eval_every=1, rounds=10, validation=0.3, early_stop_patience=1)
    tls, gloo = _both_transports(tmp_path, config)
    assert tls["best_round"] == gloo["best_round"] and tls["status"] == gloo["status"]
    kept = [torch.load(tmp_path / k / "best.pt", weights_only=True) for k in ("tls", "gloo")]
    assert kept[0]["round"] == kept[1]["round"] and len(kept[0]["thetas"]) == 6
    assert all(torch.equal(a, b) for a, b in zip(kept[0]["thetas"], kept[1]["thetas"], strict=True))


def test_a_tls_run_stopped_by_sigterm_resumes_to_the_gloo_run(tmp_path: Path) -> None:
    """SIGTERM to a TLS run once a checkpoint exists; ``run --resume`` starts the three silos again
    and ends with the uninterrupted Gloo run's models and numbers."""
    init_certs(tmp_path / "certs", 3)
    (tmp_path / "edges.txt").write_text(EDGES)
    pairs = ["dataset=synthetic", "clients=6", "graph=file", f"graph_file={tmp_path / 'edges.txt'}"]
    pairs += ["rounds=300", "eval_every=10", "batch_size=4", "processes=3"]
    part = tmp_path / "part"
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(part), "--set", *pairs]
    env = _env()
    tls = [*argv, "transport=tls", f"tls_certs={tmp_path / 'certs'}"]
    parent = subprocess.Popen(tls, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while latest_checkpoint(part) is None:
        assert time.monotonic() < deadline and parent.poll() is None, parent.communicate()
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 143, err
    resumed = subprocess.run(
        [sys.executable, "-m", "sheaf_fmtl", "run", "--resume", str(part), "--quiet"], env=env
    )
    assert resumed.returncode == 0
    full = [
        sys.executable,
        "-m",
        "sheaf_fmtl",
        "run",
        "--quiet",
        "--out",
        str(tmp_path / "gloo"),
        "--set",
        *pairs,
    ]
    assert subprocess.run(full, env=env).returncode == 0
    _same_run(part, tmp_path / "gloo")


def _env() -> dict[str, str]:
    env = dict(
        os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore"
    )
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def test_the_example_runs_both_transports_and_refuses_its_three_attacks(tmp_path: Path) -> None:
    env = _env()
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "authenticated_silos.sh"), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "out" / "refusals.txt").read_text().splitlines()
    assert len(lines) == 3 and all("refused" in line for line in lines)
    assert "accepted" not in " ".join(lines) and "APPLIED" not in " ".join(lines)
    equal = (tmp_path / "out" / "equal.txt").read_text()
    assert "models equal: True" in equal and "metrics equal (but wall time): True" in equal
    for run in ("tls", "gloo"):
        assert (tmp_path / "out" / run / "checkpoint.pt").is_file()
