"""Silo-local data: each rank reads only the clients it holds (a ``module:function`` taking
``clients=``, a folder of per-client CSVs), the ranks exchange their start-up numbers, and the run
gives the one-process run's numbers on the union of the silos."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sheaf_fmtl
from sheaf_fmtl.algorithms.maps.auto import resolve_coupling
from sheaf_fmtl.config import RunConfig, load_config
from sheaf_fmtl.data import preprocessing
from sheaf_fmtl.data.base import DataRequest, DatasetError
from sheaf_fmtl.data.census import census, merge, placeholder
from sheaf_fmtl.data.registry import load_raw
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.shard import contiguous
from sheaf_fmtl.runtime.engine.simulate import build_graph, load_dataset
from sheaf_fmtl.runtime.run.launching.spawn import free_port
from sheaf_fmtl.runtime.run.loop import execute

from .test_distributed import _compare

N = 6
#: A dataset function in the style of the guide's: client i's arrays from its own file in the
#: silo's folder (here picked by RANK, as each machine's own disk would be); every file it opens is
#: logged, and a file of another silo is not there to open.
SILO_MODULE = """
import os
from pathlib import Path

import numpy as np


def silo(root, clients=None):
    rank = os.environ.get("RANK")
    folder = Path(root) / (f"silo-{rank}" if rank is not None else "union")
    ids = sorted(int(p.stem[7:]) for p in folder.glob("client_*.npz")) if clients is None else clients
    out = []
    for i in ids:
        with open(Path(root) / f"opened-{rank}.txt", "a") as log:
            log.write(f"{i}\\n")
        z = np.load(folder / f"client_{i:02d}.npz")
        out.append((z["x"], z["y"], z["x_test"], z["y_test"]))
    return out


def whole(root):
    return silo(root, None)
"""


def _client(i: int) -> dict[str, np.ndarray]:
    """Client ``i``: 3 or 5 features (models of two sizes: maps = auto chooses), labels 0..1 on the
    first silo's clients and 0..2 on the second's (the number of classes is the exchange's)."""
    rng = np.random.default_rng(i)
    d, k = (3 if i % 2 else 5), (2 if i < N // 2 else 3)
    x, xt = rng.normal(size=(30, d)), rng.normal(size=(10, d))
    return {"x": x, "y": rng.integers(0, k, 30), "x_test": xt, "y_test": rng.integers(0, k, 10)}


def _silos(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``root/union`` with every client's file, ``root/silo-R`` with rank R's only; the module
    importable here and in the ranks."""
    owner = contiguous(N, 2)
    for i in range(N):
        for folder in ("union", f"silo-{owner[i]}"):
            (root / folder).mkdir(parents=True, exist_ok=True)
            np.savez(root / folder / f"client_{i:02d}.npz", **_client(i))
    (root / "siloed_data.py").write_text(textwrap.dedent(SILO_MODULE))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def _settings(root: Path) -> dict[str, object]:
    return {
        "algorithm": "sheaf-fmtl",
        "dataset": "siloed_data:silo",
        "data.root": str(root),
        "clients": N,
        "rounds": 4,
        "eval_every": 2,
        "graph_p": 0.6,
        "local_epochs": 1,
    }


def _config(settings: dict[str, object]) -> RunConfig:
    plain = {k: v for k, v in settings.items() if not k.startswith("data.")}
    return RunConfig(**plain).replace(data={k[5:]: v for k, v in settings.items() if k.startswith("data.")})  # type: ignore[arg-type]


@pytest.mark.slow  # two spawned ranks: about 50 s on two busy cores
def test_two_silos_with_disjoint_folders_give_the_one_process_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ranks, each reading only its own folder (the other silo's files are not there), match one
    process on the union (the process-layout tolerance); each rank opened its own clients' files only."""
    root = tmp_path / "data"
    _silos(root, monkeypatch)
    _compare(tmp_path, _settings(root), 2)
    assert sorted(map(int, (root / "opened-0.txt").read_text().split())) == [0, 1, 2]
    assert sorted(map(int, (root / "opened-1.txt").read_text().split())) == [3, 4, 5]
    summary = json.loads((tmp_path / "ranks" / "summary.json").read_text())
    one = _config(_settings(root))
    ran, why, rule = resolve_coupling(one, build_federation(load_dataset(one)), build_graph(one, N))
    assert (summary["maps"], summary["maps_auto"], summary["lam_rule"]) == (ran.maps, why, rule)
    assert summary["lam"] == pytest.approx(ran.lam, rel=1e-12)
    # the folder both ranks share records every client's standardisation, as one process's read
    recorded = preprocessing.read(tmp_path / "ranks")
    assert recorded == json.loads(json.dumps(preprocessing.describe(load_dataset(one))))


def test_start_up_numbers_give_each_rank_the_one_process_federation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one process, rank by rank: each read of the held clients only, completed by the merged
    census, builds the federation of the whole read (sizes, model sizes, classes), the same
    ``maps = auto`` choice and ``lam``, and the held clients' very arrays (the protocol's streams
    by global id); the census is plain numbers."""
    root = tmp_path / "data"
    _silos(root, monkeypatch)
    config = _config(_settings(root))
    graph = build_graph(config, N)
    full = load_dataset(config)
    whole_fed = build_federation(full)
    want = resolve_coupling(config, whole_fed, graph)
    owner = contiguous(N, 2)
    held = [[int(i) for i in np.flatnonzero(owner == r)] for r in range(2)]
    local = [load_dataset(config, held=ids) for ids in held]
    numbers = [census(part) for part in local]
    assert all(json.loads(json.dumps(c.as_dict())) == json.loads(json.dumps(c.as_dict())) for c in numbers)
    assert set(numbers[0].as_dict()) == {
        "name",
        "task",
        "num_classes",
        "ids",
        "shapes",
        "n_train",
        "features",
    }
    assert [c.num_classes for c in numbers] == [2, 3]  # each silo's labels show only its classes
    merged = merge(numbers, N)
    for r in range(2):
        seen = placeholder(local[r], merged)
        fed = build_federation(seen, clients=held[r])
        assert seen.num_classes == full.num_classes == 3
        np.testing.assert_array_equal(fed.train_sizes, whole_fed.train_sizes)
        np.testing.assert_array_equal(fed.node_dims(), whole_fed.node_dims())
        got = resolve_coupling(config, fed, graph)
        assert (got[0].maps, got[0].lam, got[1], got[2]) == (want[0].maps, want[0].lam, want[1], want[2])
        for i in held[r]:
            a, b = seen.clients[i], full.clients[i]
            for name in ("x_train", "y_train", "x_test", "y_test"):
                np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
            assert seen.standardization is not None and full.standardization is not None
            np.testing.assert_array_equal(seen.standardization[i][0], full.standardization[i][0])  # type: ignore[index]
        others = [i for i in range(N) if i not in held[r]]
        assert all(len(seen.clients[i].x_train) == 0 for i in others)
        assert all(seen.standardization[i] is None for i in others)  # type: ignore[index]


def test_a_function_without_clients_is_read_whole_and_kept_to_the_held_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    _silos(root, monkeypatch)
    request = DataRequest(clients=N, held=(1, 4), options={"root": str(root)})
    raw = load_raw("siloed_data:whole", request)
    assert raw.ids == (1, 4) and raw.total == N and len(raw.clients) == 2
    np.testing.assert_array_equal(raw.clients[1].x, _client(4)["x"].astype(np.float32))
    (root / "opened-None.txt").unlink()
    read = load_raw("siloed_data:silo", request)  # with clients=: only those are opened, in order
    assert read.ids == (1, 4) and (root / "opened-None.txt").read_text().split() == ["1", "4"]


def _csv(path: Path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = np.column_stack([rng.normal(size=(rows, 2)), rng.integers(0, 2, rows)])
    path.write_text("\n".join(",".join(f"{v:g}" for v in row) for row in table) + "\n")


def test_a_silo_folder_of_csvs_reads_its_clients_files_by_id(tmp_path: Path) -> None:
    """A silo's own folder holds only its clients' files, named by id; a folder of every client's
    files is read by position, and the files of clients held elsewhere are never opened."""
    silo = tmp_path / "silo"
    silo.mkdir()
    for i in (1, 3):
        _csv(silo / f"client_{i}.csv", 8, i)
    raw = load_raw(f"file:{silo}", DataRequest(clients=4, held=(1, 3)))
    assert raw.ids == (1, 3) and [len(c.y) for c in raw.clients] == [8, 8]
    shared = tmp_path / "shared"
    shared.mkdir()
    for i in range(4):
        _csv(shared / f"c{i}.csv", 8, i)
    for i in (0, 2):  # held elsewhere: a read of them would fail
        (shared / f"c{i}.csv").write_text("not,numbers\nat,all\n")
    kept = load_raw(f"file:{shared}", DataRequest(clients=4, held=(1, 3)))
    for a, b in zip(kept.clients, raw.clients, strict=True):
        np.testing.assert_array_equal(a.x, b.x)
    (silo / "notes.csv").write_text("1,2\n")
    with pytest.raises(DatasetError, match="names each file by its client's id"):
        load_raw(f"file:{silo}", DataRequest(clients=4, held=(1, 3)))
    (silo / "notes.csv").unlink()
    with pytest.raises(DatasetError, match=r"no file for client\(s\) 2"):
        load_raw(f"file:{silo}", DataRequest(clients=4, held=(1, 2)))


def test_preprocessing_of_a_silo_names_the_clients_read_elsewhere_and_resumes_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's record has its clients' statistics only; records of one folder combine into the
    one-process record; a resume checks its own clients' statistics (not the others')."""
    root = tmp_path / "data"
    _silos(root, monkeypatch)
    config = _config(_settings(root))
    owner = contiguous(N, 2)
    held = [[int(i) for i in np.flatnonzero(owner == r)] for r in range(2)]
    local = [load_dataset(config, held=ids) for ids in held]
    merged = merge([census(part) for part in local], N)
    seen = [placeholder(part, merged) for part in local]
    records = [json.loads(json.dumps(preprocessing.describe(s))) for s in seen]
    assert [bool(e.get("elsewhere")) for e in records[0]["clients"]] == [i not in held[0] for i in range(N)]
    one = json.loads(json.dumps(preprocessing.describe(load_dataset(config))))
    assert preprocessing.combine(records) == one
    preprocessing.write(tmp_path, records[0])
    preprocessing.check_same(tmp_path, seen[0])  # its own clients: the same
    preprocessing.check_same(tmp_path, seen[1])  # the other rank's clients: not compared here ...
    changed = dict(records[0], clients=[dict(e) for e in records[0]["clients"]])
    changed["clients"][0]["standardize"] = {"mean": [0.0] * 5, "std": [1.0] * 5}
    preprocessing.write(tmp_path, changed)
    with pytest.raises(DatasetError, match="client 0"):
        preprocessing.check_same(tmp_path, seen[0])  # ... but its own are


def _torchrun(port: int, node: int, folder: Path, out: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """The guide's command for silo ``node`` (the address the loopback's)."""
    argv = [str(Path(sys.executable).with_name("torchrun")), "--nnodes", "2", "--nproc-per-node", "1"]
    argv += ["--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    argv += ["-m", "sheaf_fmtl", "run", "silos.yaml", "--set", f"data.folder={folder}", "--out", str(out)]
    package = Path(sheaf_fmtl.__file__).resolve().parents[1]  # this checkout's, from any working directory
    env = dict(os.environ, PYTHONPATH=f"{cwd}{os.pathsep}{package}")
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow  # two torchrun agents and their ranks: about a minute on two busy cores
def test_the_guides_two_machine_command_trains_one_federation_from_disjoint_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guide's data function, config and torchrun commands (each silo its own data folder and
    its own --out) give the metrics of one process on the union of the silos."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "silos.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    config = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert code is not None and config is not None and "--node-rank 1" in text
    (tmp_path / "hospital_data.py").write_text(code.group(1))
    (tmp_path / "silos.yaml").write_text(config.group(1).replace("rounds: 200", "rounds: 4"))
    for i in range(N):
        for folder in ("union", "silo-a" if i < N // 2 else "silo-b"):
            (tmp_path / folder).mkdir(exist_ok=True)
            np.savez(tmp_path / folder / f"client_{i:02d}.npz", **_client(i))
    port = free_port()
    ranks = [
        _torchrun(port, r, tmp_path / s, tmp_path / f"out-{s}", tmp_path)
        for r, s in enumerate(("silo-a", "silo-b"))
    ]
    for proc in ranks:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
    union = {"data": {"folder": str(tmp_path / "union")}}
    monkeypatch.syspath_prepend(str(tmp_path))
    one = execute(load_config(tmp_path / "silos.yaml", keys=union), None)
    lines = (tmp_path / "out-silo-a" / "metrics.csv").read_text().splitlines()[1:]
    assert len(lines) == len(one.rows) == 2
    for row, line in zip(one.rows, lines, strict=True):
        cells = line.split(",")
        assert int(cells[5]) == row["transmitted_bits"]
        assert float(cells[1]) == pytest.approx(row["test_accuracy"], rel=1e-5)
        assert float(cells[3]) == pytest.approx(row["objective"], rel=1e-5)
    record = json.loads((tmp_path / "out-silo-b" / "preprocessing.json").read_text())
    assert [bool(c.get("elsewhere")) for c in record["clients"]] == [i < N // 2 for i in range(N)]


def _page_blocks() -> tuple[str, list[list[str]]]:
    """The silos guide's CSV example: its config (the ``silos-csv.yaml`` block) and its two
    ``torchrun`` commands, each as words."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "silos.md").read_text()
    config = re.search(r"```yaml\n(# silos-csv.yaml.*?)```", text, re.S)
    bash = re.search(r"```bash\n([^`]*?data_dir=/srv/silo-a.*?)```", text, re.S)
    assert config is not None and bash is not None
    joined = bash.group(1).replace("\\\n", " ")
    commands = [shlex.split(line) for line in joined.splitlines() if line.startswith("torchrun")]
    assert len(commands) == 2
    return config.group(1), commands


def _csv_silos(root: Path) -> None:
    """The guide's layout: ``root/silo-a/clients`` with clients 0-2, ``root/silo-b/clients`` with
    3-5, ``root/all/clients`` with every client's file; each file a header and three features."""
    for i in range(N):
        rng = np.random.default_rng(i)
        x = rng.normal(size=(40, 3))
        y = (x[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
        text = "f0,f1,f2,label\n" + "".join(
            f"{a:.4f},{b:.4f},{c:.4f},{t}\n" for (a, b, c), t in zip(x, y, strict=True)
        )
        for silo in ("silo-a" if i < N // 2 else "silo-b", "all"):
            (root / silo / "clients").mkdir(parents=True, exist_ok=True)
            (root / silo / "clients" / f"client_{i:02d}.csv").write_text(text)


def test_the_guides_csv_config_reads_the_folder_in_data_dir(tmp_path: Path) -> None:
    config, _ = _page_blocks()
    _csv_silos(tmp_path)
    (tmp_path / "silos-csv.yaml").write_text(config.replace("rounds: 200", "rounds: 2"))
    loaded = load_config(tmp_path / "silos-csv.yaml", keys={"data_dir": str(tmp_path / "all")})
    result = execute(loaded, None)
    assert result.summary["num_clients"] == N and result.summary["dataset"] == "file:clients"
    one = load_raw("file:clients", DataRequest(clients=N, held=(4,), data_dir=tmp_path / "silo-b"))
    assert one.ids == (4,) and len(one.clients[0].y) == 40


@pytest.mark.slow  # two torchrun agents and their ranks: about a minute on two busy cores
def test_the_guides_csv_commands_train_one_federation_from_each_silos_data_dir(tmp_path: Path) -> None:
    """The guide's CSV config and torchrun commands (the machines' paths under ``tmp_path``, the
    address the loopback's) give the one-process run's metrics on a folder of every client's files."""
    config, commands = _page_blocks()
    _csv_silos(tmp_path)
    (tmp_path / "silos-csv.yaml").write_text(config.replace("rounds: 200", "rounds: 4"))
    port, package = str(free_port()), Path(sheaf_fmtl.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(package))
    ranks = []
    for r, words in enumerate(commands):
        words = [w.replace("/srv/", f"{tmp_path}/").replace("10.0.0.1", "127.0.0.1") for w in words]
        words = [port if w == "29500" else w for w in words]
        words[0] = str(Path(sys.executable).with_name("torchrun"))
        words[words.index("--out") + 1] = str(tmp_path / f"out-{r}")
        ranks.append(
            subprocess.Popen(words, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        )
    for proc in ranks:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()[-2000:]
    one = execute(load_config(tmp_path / "silos-csv.yaml", keys={"data_dir": str(tmp_path / "all")}), None)
    lines = (tmp_path / "out-0" / "metrics.csv").read_text().splitlines()[1:]
    assert len(lines) == len(one.rows)
    for row, line in zip(one.rows, lines, strict=True):
        cells = line.split(",")
        assert int(cells[5]) == row["transmitted_bits"]
        assert float(cells[1]) == pytest.approx(row["test_accuracy"], rel=1e-5)
