"""Data-layer errors and warnings a user meets and the data layer's import structure:
every message names the file, line, option or clients it is about."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.cli.data import DATASET_FILES
from sheaf_fmtl.data import files
from sheaf_fmtl.data.base import READERS, DatasetError, RawClient, RawFederated
from sheaf_fmtl.data.files import find_file, search_dirs
from sheaf_fmtl.data.protocol import ProtocolOptions, apply_protocol
from sheaf_fmtl.data.registry import DataRequest, dataset_files, load, load_raw

pytestmark = pytest.mark.usefixtures("only_given_folders")

DATA_PKG = Path(files.__file__).parent
READER_MODULES = ("har", "images", "mocha", "school", "synthetic", "user")


# ------------------------------------------------------------------------------ import structure
def _relative_imports(module: str) -> tuple[set[str], bool]:
    """Sibling modules ``data/MODULE.py`` imports, and whether any import sits inside a function."""
    tree = ast.parse((DATA_PKG / f"{module}.py").read_text())
    siblings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            siblings |= {node.module} if node.module else {a.name for a in node.names}
    nested = any(
        isinstance(inner, ast.Import | ast.ImportFrom)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef)
        for inner in ast.walk(fn)
    )
    return siblings, nested


@pytest.mark.parametrize("module", READER_MODULES)
def test_readers_import_only_base_files_options_and_partition(module):
    siblings, nested = _relative_imports(module)
    allowed = {"base", "files", "options", "partition"}
    assert siblings <= allowed, f"data/{module}.py imports {sorted(siblings)}"
    assert not nested


def test_partition_imports_only_base():
    """The readers' one shared helper beside ``files`` and ``options`` sits on ``base`` alone."""
    siblings, nested = _relative_imports("partition")
    assert siblings == {"base"} and not nested


def test_registry_imports_readers_at_top_level():
    siblings, nested = _relative_imports("registry")
    assert set(READER_MODULES) <= siblings and not nested


def test_reader_files_are_declared_once_and_listed_by_the_cli():
    assert DATASET_FILES == dataset_files()
    assert set(DATASET_FILES) == {"gleam", "har", "hcifar10", "rmnist", "school", "vehicle"}
    assert (
        "mnist.npz" in DATASET_FILES["rmnist"]
        and "vehicle_ditto_train_subset.npz" in DATASET_FILES["vehicle"]
    )
    assert READERS["synthetic"].files == ()


# ----------------------------------------------------------------------------- option types
@pytest.mark.parametrize(
    ("name", "key", "value", "words"),
    [
        ("synthetic-hetero", "relatedness", "abc", "a number"),
        ("synthetic", "min_samples", "abc", "an integer"),
        ("synthetic", "min_samples", 12.5, "an integer"),
        ("synthetic-clusters", "homogeneous", "yes", "true or false"),
        ("synthetic-clusters", "feature_counts", ["a"], "an integer or a list of integers"),
        ("synthetic-hetero", "feature_counts", 3, "a list of integers"),
        ("rmnist", "use_test", 1, "true or false"),
    ],
)
def test_option_of_the_wrong_type_names_option_and_type(name, key, value, words):
    with pytest.raises(DatasetError) as e:
        load_raw(name, DataRequest(options={key: value}))
    said = str(e.value)  # the option as Python gives it, and its default as the fix
    assert said.startswith(f"{name}: data.{key} must be {words}, got {value!r}; e.g. data={{'{key}': "), said
    assert said.endswith("} (its default)"), said


def test_user_data_option_types(tmp_path):
    path = _npz(tmp_path / "u.npz", 2)
    with pytest.raises(
        DatasetError, match="data.task must be a string or null, got 3; or leave data.task out"
    ):
        load_raw(f"file:{path}", DataRequest(options={"task": 3}))
    with pytest.raises(DatasetError, match="data.reduce must be true or false, got 'no'; e.g. data="):
        load_raw(f"file:{path}", DataRequest(options={"reduce": "no"}))


# ------------------------------------------------------------------------------ search order
def test_env_then_user_data_folder_and_a_named_data_dir_alone(tmp_path, monkeypatch):
    given, env, user = tmp_path / "given", tmp_path / "env", tmp_path / "xdg" / "sheaf-fmtl"
    for d in (given, env, user):
        d.mkdir(parents=True)
        (d / "f.bin").write_bytes(b"x")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(files.ENV_VAR, str(env))
    assert search_dirs() == [env, user] and search_dirs(given) == [given]
    assert search_dirs(given, search=True) == [given, env, user]
    assert find_file("x", ["f.bin"]) == env / "f.bin"
    (env / "f.bin").unlink()
    assert find_file("x", ["f.bin"]) == user / "f.bin"
    assert find_file("x", ["f.bin"], given) == given / "f.bin"
    (given / "f.bin").unlink()  # a named folder lacking the file is an error, not a search
    with pytest.raises(DatasetError) as e:
        find_file("school", ["f.bin"], given)
    assert f"no data file in data_dir {given} (looked" in str(e.value) and "data_search=True" in str(e.value)
    with pytest.raises(DatasetError, match="no data file in data_dir .*typo \\(no such folder\\)"):
        find_file("school", ["f.bin"], tmp_path / "typo")  # a folder that is not there says so
    assert find_file("school", ["f.bin"], given, search=True) == user / "f.bin"


def test_no_folder_the_user_did_not_name_is_read(tmp_path, monkeypatch):
    """A temporary home, no $SHEAF_FMTL_DATA: only the user data folder is looked at, even with a
    ``../shared/data`` holding the files beside the working directory."""
    home, work = tmp_path / "home", tmp_path / "work" / "main"
    shared = tmp_path / "work" / "shared" / "data"
    for d in (home, work, shared):
        d.mkdir(parents=True)
    np.savez(shared / "school.npz", num_clients=np.int64(1), x_0=np.zeros((2, 28)), y_0=np.zeros(2))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.chdir(work)
    looked: list[Path] = []
    exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p, **kw: looked.append(p) or exists(p, **kw))
    user = home / ".local" / "share" / "sheaf-fmtl"
    assert search_dirs() == [user]
    with pytest.raises(DatasetError, match="school: data file not found"):
        load_raw("school", DataRequest())
    assert looked and all(user in p.parents for p in looked), looked


# --------------------------------------------------------------------------------- user files
def _npz(path: Path, n_clients: int, stored: int | None = None, rows: int = 20) -> Path:
    rng = np.random.default_rng(0)
    arrays = {}
    for i in range(stored or n_clients):
        arrays[f"x_{i}"] = rng.normal(size=(rows, 3))
        arrays[f"y_{i}"] = np.arange(rows) % 2
    np.savez(path, num_clients=np.int64(n_clients), **arrays)
    return path


def test_npz_with_more_clients_than_num_clients_is_rejected(tmp_path):
    path = _npz(tmp_path / "more.npz", 2, stored=5)
    with pytest.raises(DatasetError) as e:
        load_raw(f"file:{path}", DataRequest())
    assert (
        str(path) in str(e.value) and "num_clients = 2" in str(e.value) and "stores 5 clients" in str(e.value)
    )


def test_csv_errors_name_the_line_of_the_file(tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    (folder / "a.csv").write_text("f1,f2,y\n\n1,2,0\n3,x,1\n")  # header, blank line, bad value on line 4
    with pytest.raises(DatasetError, match=r"a\.csv: line 4 is not numeric"):
        load_raw(f"file:{folder}", DataRequest())
    (folder / "a.csv").write_text("f1,f2,y\n1,2,0\n3,4\n")
    with pytest.raises(DatasetError, match=r"a\.csv: line 3 has 2 columns"):
        load_raw(f"file:{folder}", DataRequest())
    (folder / "a.csv").write_text("1,2,0\n3,4\n")  # no header
    with pytest.raises(DatasetError, match=r"a\.csv: line 2 has 2 columns"):
        load_raw(f"file:{folder}", DataRequest())


def test_user_data_reduce_false_keeps_every_training_sample(tmp_path):
    path = _npz(tmp_path / "u.npz", 4, rows=40)
    raw = ProtocolOptions(standardize=False)
    default = load(f"file:{path}", DataRequest(seed=1), raw)
    kept = load(f"file:{path}", DataRequest(seed=1, options={"reduce": False}), raw)
    assert sorted(len(c.y_train) for c in default.clients) == [6, 6, 30, 30]  # half keep 20% of 30
    assert [len(c.y_train) for c in kept.clients] == [30] * 4
    for a, b in zip(default.clients, kept.clients, strict=True):  # the same test split either way
        np.testing.assert_array_equal(a.x_test, b.x_test)
    assert len(load_raw(f"file:{path}", DataRequest(clients=2, options={"reduce": False})).clients) == 2
    assert not load_raw(f"file:{path}", DataRequest(clients=2, options={"reduce": False})).reduce


# ------------------------------------------------------------------------------ label warning
def _raw(labels: list[np.ndarray]) -> RawFederated:
    rng = np.random.default_rng(0)
    clients = tuple(RawClient(rng.normal(size=(len(y), 2)).astype(np.float32), y) for y in labels)
    return RawFederated("toy", "classification", 2, clients, reduce=False)


def test_clients_with_one_training_class_are_named_in_a_warning():
    mixed, pure = np.arange(12) % 2, np.zeros(12, np.int64)
    with pytest.warns(
        UserWarning, match=r"toy: the training labels of client\(s\) \[1, 3\] are all one class"
    ):
        apply_protocol(_raw([mixed, pure, mixed, pure]), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_protocol(_raw([mixed, mixed]), seed=0)


def test_har_ragged_rows_name_the_line_of_the_file(tmp_path):
    root = tmp_path / "UCI HAR Dataset" / "train"
    root.mkdir(parents=True)
    (root / "X_train.txt").write_text("\n" + " ".join(["1.0"] * 561) + "\n\n1.0 2.0\n")
    with pytest.raises(
        DatasetError, match=r"X_train\.txt: ragged rows \(line 4 has 2 values, line 2 has 561\)"
    ):
        load_raw("har", DataRequest(data_dir=tmp_path))


def test_a_data_dir_that_is_not_there_is_said_for_a_generated_dataset(tmp_path):
    """A generated dataset reads no folder, but a ``data_dir`` that does not exist is likely a typo:
    a warning names it (the run goes on); one that exists says nothing."""
    import warnings

    import sheaf_fmtl

    with pytest.warns(UserWarning, match=r"typo'?: no such folder \(synthetic is generated"):
        sheaf_fmtl.run(dataset="synthetic", clients=3, rounds=1, data_dir=str(tmp_path / "typo"))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*no such folder")
        sheaf_fmtl.run(dataset="synthetic", clients=3, rounds=1, data_dir=str(tmp_path))
