"""``sheaf_fmtl.load(run).client(i)`` takes raw features and gives back the run's per-client test
metric (the standardisation of the data pipeline is kept in the run folder); ``sheaf-fmtl export``
writes loadable state_dicts and ``torch.export`` programs that load without the model's code;
loading never imports code the folder names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.data.registry import dataset_files
from sheaf_fmtl.runtime.engine.simulate import load_dataset

GENERATED = ["synthetic", "synthetic-clusters", "synthetic-hetero"]
REAL = ["school", "vehicle", "har", "gleam", "rmnist", "hcifar10"]
SMALL = {"rmnist": {"clients": 4}, "hcifar10": {"clients": 4}}  # fewer images: seconds, not minutes


def _available(name: str) -> bool:
    root = os.environ.get("SHEAF_FMTL_DATA")
    return root is not None and any((Path(root) / f).exists() for f in dataset_files()[name])


def raw_metric(trained: sheaf_fmtl.TrainedRun, config: sheaf_fmtl.RunConfig) -> list[float]:
    """Every client's test metric from its raw test features (the split without standardisation),
    computed independently of the run's batched evaluation."""
    raw = load_dataset(config.replace(standardize=False))
    values = []
    for i, client in enumerate(raw.clients):
        with torch.no_grad():
            out = trained.client(i)(torch.from_numpy(client.x_test)).double()
        y = torch.from_numpy(client.y_test)
        if trained.metric == "accuracy":
            values.append(float((out.argmax(-1) == y).double().mean()))
        else:
            values.append(float(((out.squeeze(-1) - y.double()) ** 2).mean()))
    return values


@pytest.mark.parametrize(
    "name", [*GENERATED, *(pytest.param(n, marks=pytest.mark.slow) if n in SMALL else n for n in REAL)]
)
@pytest.mark.filterwarnings("ignore:vehicle. vehicle.mat not found:UserWarning")  # (the subset will do)
def test_a_loaded_client_reproduces_its_test_metric_on_raw_data(name, tmp_path):
    if name in REAL and not _available(name):
        pytest.skip(f"{name}: its files are not under $SHEAF_FMTL_DATA")
    keys = {"clients": 6, **SMALL.get(name, {})} if name in GENERATED + list(SMALL) else {}
    result = sheaf_fmtl.run(dataset=name, rounds=3, lam=0.01, out=tmp_path / "run", **keys)
    trained = sheaf_fmtl.load(tmp_path / "run")
    assert trained.summary == result.summary and trained.config["dataset"] == name
    want = result.summary["per_client"]
    assert raw_metric(trained, result.config) == pytest.approx(want, rel=1e-6, abs=1e-6)
    assert trained.preprocessing["clients"][0]["standardize"] is not None


def test_the_standardisation_is_what_makes_the_raw_data_work(tmp_path):
    result = sheaf_fmtl.run(dataset="synthetic-hetero", clients=6, rounds=5, out=tmp_path / "run")
    trained = sheaf_fmtl.load(tmp_path / "run")
    raw = load_dataset(result.config.replace(standardize=False)).clients[0]
    ready = load_dataset(result.config).clients[0]
    mean, std = (np.asarray(trained.preprocessing["clients"][0]["standardize"][k]) for k in ("mean", "std"))
    x = torch.from_numpy(raw.x_test)
    assert np.allclose(raw.x_train.mean(0), mean, atol=1e-5) and np.allclose(
        raw.x_train.std(0), std, atol=1e-5
    )
    with torch.no_grad():  # the bare model on raw data is another function than the wrapped one
        wrapped, bare = trained.client(0)(x), trained.model(0)(x)
        assert torch.equal(wrapped, trained.model(0)(torch.from_numpy(ready.x_test)))
    assert not torch.allclose(wrapped, bare)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _own_data() -> list[tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(1)
    data = []
    for i in range(4):
        x = rng.normal(3.0 * i, 1.0 + i, (40, 3)).astype(np.float32)  # far from standardised
        y = (x[:, 0] > 3.0 * i).astype(np.int64)
        data.append((x[:30], y[:30], x[30:], y[30:]))
    return data


def test_own_model_and_data_load_only_with_the_model_given(tmp_path):
    def make(i: int) -> nn.Module:
        return Tiny()

    data = _own_data()
    result = sheaf_fmtl.run(data=data, model=make, algorithm="sheaf-fmtl", rounds=4, out=tmp_path / "run")
    with pytest.raises(ConfigError, match="was a Python object of the script that ran it"):
        sheaf_fmtl.load(tmp_path / "run")
    trained = sheaf_fmtl.load(tmp_path / "run", model=make)
    for i, (_, _, x_test, y_test) in enumerate(data):
        with torch.no_grad():
            acc = float((trained.client(i)(torch.from_numpy(x_test)).argmax(-1).numpy() == y_test).mean())
        assert acc == pytest.approx(result.summary["per_client"][i], abs=1e-6)


@pytest.mark.parametrize("pooled", [False, True])
def test_a_run_from_python_data_evaluates_with_those_data_given_again(tmp_path, pooled):
    """The oracle: the run's own recorded final metric and per-client scores (``summary.json``).
    The model, loss and metric are the script's own objects (no module:function names them)."""

    def make(i: int) -> nn.Module:
        return Tiny()

    def error_rate(outputs: torch.Tensor, targets: torch.Tensor) -> float:  # (not accuracy)
        return float((outputs.argmax(-1) != targets).float().mean())

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    clients = _own_data()
    data = (
        (np.concatenate([c[0] for c in clients]), np.concatenate([c[1] for c in clients]))
        if pooled
        else clients
    )
    extra = {"clients": 4, "partition": "iid"} if pooled else {}
    out = tmp_path / "run"
    sheaf_fmtl.run(data=data, model=make, loss=loss, metric=error_rate, rounds=4, out=out, **extra)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "error_rate" and summary["final"] > 0
    with pytest.raises(
        ConfigError, match=r"made from a Python object as its dataset .*load\(run, data=\.\.\.\)"
    ):
        sheaf_fmtl.load(out, model=make).evaluate()
    with pytest.raises(ConfigError, match=r"as its metric .*\.evaluate\(metric=\.\.\.\)"):
        sheaf_fmtl.load(out, model=make, data=data).evaluate()
    for scored in (
        sheaf_fmtl.load(out, model=make, data=data, metric=error_rate).evaluate(),
        sheaf_fmtl.load(out, model=make).evaluate(data=data, metric=error_rate),
    ):
        assert scored["metric"] == "error_rate" and scored["mean"] == pytest.approx(
            summary["final"], abs=1e-6
        )
        assert scored["per_client"] == pytest.approx(summary["per_client"], abs=1e-6)


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A loss this module names (the run records ``tests.cli.test_export:cross_entropy``)."""
    return nn.functional.cross_entropy(outputs, targets)


def test_a_named_loss_is_not_imported_to_score(tmp_path):
    out = tmp_path / "run"
    result = sheaf_fmtl.run(dataset="synthetic", clients=3, rounds=2, loss=cross_entropy, out=out)
    assert result.config.loss == "tests.cli.test_export:cross_entropy"
    assert sheaf_fmtl.load(out).evaluate()["mean"] == pytest.approx(result.final, abs=1e-6)  # (untrusted)


def test_data_given_to_a_run_of_its_own_dataset_or_as_options_is_refused(tmp_path):
    sheaf_fmtl.run(dataset="synthetic", clients=3, rounds=1, out=tmp_path / "named")
    with pytest.raises(ConfigError, match=r"^data=...: the run's dataset is synthetic, not a Python object"):
        sheaf_fmtl.load(tmp_path / "named").evaluate(data=_own_data())
    sheaf_fmtl.run(data=_own_data(), rounds=1, out=tmp_path / "own")
    with pytest.raises(ConfigError, match=r"^data=...: a mapping is a dataset's options"):
        sheaf_fmtl.load(tmp_path / "own").evaluate(data={"groups": 2})


def test_a_module_function_model_is_imported_only_when_named(tmp_path, monkeypatch, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    marker = tmp_path / "imported"
    (package / "netmod.py").write_text(
        "import pathlib, torch\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "def make(i):\n    return torch.nn.Linear(3, 2)\n"
    )
    monkeypatch.syspath_prepend(str(package))
    sheaf_fmtl.run(data=_own_data(), model="netmod:make", rounds=2, out=tmp_path / "run")
    marker.unlink()
    sys.modules.pop("netmod", None)
    with pytest.raises(ConfigError) as refused:
        sheaf_fmtl.load(tmp_path / "run")
    said = str(refused.value)  # Python's message names the keyword, no flag
    assert "name it again, sheaf_fmtl.load(run, model='netmod:make')" in said and "--" not in said, said
    assert not marker.exists()  # refused without importing
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "exp")]) == 2
    err = capsys.readouterr().err.strip()  # the command line's message names its flag
    assert (
        len(err.splitlines()) == 1 and "name it again, --model netmod:make" in err and "load(" not in err
    ), err
    assert not marker.exists() and not (tmp_path / "exp").exists()
    with pytest.raises(ConfigError, match="name that code"):
        sheaf_fmtl.load(tmp_path / "run", model="othermod:make")
    assert not marker.exists()
    trained = sheaf_fmtl.load(tmp_path / "run", model="netmod:make")
    assert marker.exists() and isinstance(trained.model(0), nn.Linear)


def test_export_writes_state_dicts_and_the_preprocessing(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--set",
                "dataset=synthetic-hetero",
                "clients=4",
                "rounds=3",
                "--out",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["export", str(run), "--out", str(tmp_path / "exp")]) == 0
    record = json.loads((tmp_path / "exp" / "preprocessing.json").read_text())
    trained = sheaf_fmtl.load(run)
    x = torch.randn(7, *record["clients"][2]["feature_shape"]) * 5 + 2
    state = torch.load(tmp_path / "exp" / record["clients"][2]["file"], weights_only=True)
    fresh = nn.Sequential(nn.Flatten(), nn.Linear(x.shape[1], record["num_classes"]))
    fresh.load_state_dict(state)
    std = record["clients"][2]["standardize"]
    mean, scale = torch.tensor(std["mean"]), torch.tensor(std["std"])
    with torch.no_grad():
        assert torch.allclose(fresh((x - mean) / scale), trained.client(2)(x), atol=1e-6)
    assert record["clients"][2]["model"] == "logistic" and record["metric"] == "accuracy"
    assert "export:" in capsys.readouterr().out
    # a second export into the same folder is refused in one line, and leaves it as it was
    before = sorted(p.name for p in (tmp_path / "exp").iterdir())
    assert main(["export", str(run), "--out", str(tmp_path / "exp")]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == before
    assert main(["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "e2")]) == 2
    assert not (tmp_path / "e2").exists()


@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_a_script_model_exports_from_the_cli_as_programs_that_need_no_code(tmp_path, monkeypatch, capsys):
    """A run whose model was a function of the user's script: ``export`` names the flag to give,
    takes ``--model MODULE:FUNCTION``, and each ``.pt2`` loads in a fresh interpreter that never
    imports that module, with the run's preprocessing folded in."""

    def make(i: int) -> nn.Module:
        return Tiny()

    run, out = tmp_path / "run", tmp_path / "exp"
    sheaf_fmtl.run(data=_own_data(), model=make, algorithm="local", rounds=2, out=run)
    assert main(["export", str(run), "--out", str(out)]) == 2
    assert "as --model MODULE:FUNCTION" in capsys.readouterr().err and not out.exists()
    (tmp_path / "mynets.py").write_text(
        "import torch.nn as nn\n"
        "class Tiny(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))\n"
        "    def forward(self, x):\n"
        "        return self.net(x)\n"
        "def make(i):\n"
        "    return Tiny()\n"
    )
    monkeypatch.chdir(tmp_path)  # the module is found from the working folder
    assert main(["export", str(run), "--out", str(out), "--model", "mynets:make"]) == 0
    record = json.loads((out / "preprocessing.json").read_text())
    trained = sheaf_fmtl.load(run, model=make)
    x = torch.randn(5, 3) * 4 + 3
    torch.save(x, tmp_path / "x.pt")
    expected = torch.stack([trained.client(i)(x).detach() for i in range(4)])
    code = (
        "import sys, torch; x = torch.load(sys.argv[1]); "
        "out = [torch.export.load(p).module()(x).detach() for p in sys.argv[2:]]; "
        "torch.save(torch.stack(out), sys.argv[1] + '.out'); print('mynets' in sys.modules)"
    )
    programs = [str(out / c["program"]) for c in record["clients"]]
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.pt"), *programs],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
    assert torch.allclose(torch.load(tmp_path / "x.pt.out"), expected, atol=1e-6)
