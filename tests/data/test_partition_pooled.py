"""A partition applied to a pooled dataset end to end: Python's ``data=(x, y)``, R-MNIST's rotation
groups, the refusals (per-client data, regression, no partition), ``data describe``'s figure, and the
former ``partition=contiguous|community`` read as ``placement``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from sheaf_fmtl.cli.data import run
from sheaf_fmtl.config import ConfigError, load_config, renamed_keys
from sheaf_fmtl.data.base import DatasetError, PartitionSpec
from sheaf_fmtl.data.images import rotation_groups
from sheaf_fmtl.data.partition import split_pool
from sheaf_fmtl.data.registry import DataRequest, load, load_raw
from sheaf_fmtl.plots.label_mix import label_counts, label_mix_figure
from sheaf_fmtl.user import UserObjects

from ..conftest import NO_DATA, shared_data_dir
from .test_data_formats import write_cifar, write_mnist_idx


def _pool(n: int = 400, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, k, n)
    x = np.column_stack([y, np.arange(n)]).astype(np.float32)  # column 1: the sample's id
    return x, y


_KEEP: list[UserObjects] = []  # a held object lives as long as its holder


def _held(data: object) -> str:
    _KEEP.append(UserObjects())
    return str(_KEEP[-1].as_keys(data=data)["dataset"])


def test_python_pool_split_by_classes_keeps_each_clients_test_split_in_its_classes() -> None:
    x, y = _pool()
    spec = PartitionSpec("classes", classes_per_client=2)
    request = DataRequest(clients=5, seed=1, partition=spec)
    ds = load(_held((x, y)), request)
    parts = split_pool(y, spec, 5, 1)  # the oracle's clients, by sample id
    for c, part in zip(ds.clients, parts, strict=True):
        assert set(c.y_train.tolist()) == set(c.y_test.tolist()) == set(y[part].tolist())
        assert len(c.y_train) + len(c.y_test) == len(part)  # 75/25 of its own samples, none reduced
        assert abs(len(c.y_test) - 0.25 * len(part)) <= 2
    assert sum(len(p) for p in parts) == len(y)


def test_a_pool_needs_a_partition_and_class_labels_and_per_client_data_refuses_one() -> None:
    x, y = _pool()
    with pytest.raises(DatasetError, match="pooled dataset.*partition='dirichlet'"):
        load(_held((x, y)), DataRequest(clients=4))
    with pytest.raises(DatasetError, match="regression targets.*partition='iid'"):
        load(_held((x, y.astype(np.float32))), DataRequest(clients=4, partition=PartitionSpec("dirichlet")))
    iid = load(_held((x, y.astype(np.float32))), DataRequest(clients=4, partition=PartitionSpec("iid")))
    assert iid.task == "regression" and iid.num_clients == 4
    with pytest.raises(DatasetError, match="already split per client"):
        load("synthetic", DataRequest(partition=PartitionSpec("iid")))


def test_rmnist_rotation_groups_stay_four_equal_groups() -> None:
    turns = rotation_groups(np.random.default_rng(0), 20)
    assert np.bincount(turns).tolist() == [5, 5, 5, 5]


def test_rmnist_partitioned_keeps_its_rotation_groups_and_every_image_once(tmp_path) -> None:
    arrays = write_mnist_idx(tmp_path, n_train=96)
    src = arrays["train-images-idx3-ubyte"].astype(np.uint8)
    spec = PartitionSpec("iid")
    raw = load_raw("rmnist", DataRequest(clients=8, seed=2, data_dir=tmp_path, partition=spec))
    assert len(raw.clients) == 8 and not raw.reduce
    order = split_pool(arrays["train-labels-idx1-ubyte"], spec, 8, 2)  # the oracle's ids per client
    turns = []
    for c, ids in zip(raw.clients, order, strict=True):
        img = np.rint(c.x[:, 0] * 255).astype(np.uint8)
        turn = [k for k in range(4) if np.array_equal(np.rot90(img, -k, axes=(1, 2)), src[ids])]
        assert len(turn) == 1  # one rotation for all of the client's images, the pool's images
        turns.append(turn[0])
    assert np.bincount(turns).tolist() == [2, 2, 2, 2]


def test_hcifar10_partitioned_by_classes_holds_exactly_two_each_and_every_image_once(tmp_path) -> None:
    data = write_cifar(tmp_path, per_class=20)
    spec = PartitionSpec("classes", classes_per_client=2)
    raw = load_raw("hcifar10", DataRequest(clients=10, seed=0, data_dir=tmp_path, partition=spec))
    assert [len(np.unique(c.y)) for c in raw.clients] == [2] * 10
    assert sum(len(c.y) for c in raw.clients) == len(data) and not raw.reduce


def test_label_mix_figure_stacks_each_clients_counts() -> None:
    counts = label_counts([np.array([0, 0, 1]), np.array([2, 2, 2, 1])], 3)
    assert counts.tolist() == [[2, 1, 0], [0, 1, 3]]
    fig = label_mix_figure(counts, "t")
    heights = [[p.get_height() for p in c] for c in fig.axes[0].containers]  # one container a class
    assert heights == [[2, 0], [1, 1], [0, 3]]


def test_a_saved_label_mix_figure_holds_its_whole_title_and_legend(tmp_path) -> None:
    """The saved image spans everything drawn: a title wider than the figure and the legend
    beside the axes (the figure's own width cut both off)."""
    import matplotlib.image

    from sheaf_fmtl.plots.style import save_figure

    title = "rmnist: training labels per client, partition dirichlet (partition_alpha=0.5)"
    fig = label_mix_figure(label_counts([np.array([0, 1, 2, 2])] * 5, 3), title)
    fig.canvas.draw()
    ax = fig.axes[0]
    drawn = [ax.title.get_window_extent(), ax.get_legend().get_window_extent(), ax.get_window_extent()]
    span = (max(b.x1 for b in drawn) - min(b.x0 for b in drawn)) / fig.dpi  # inches
    assert span > fig.get_figwidth()  # (the title alone is wider than the figure)
    (png,) = save_figure(fig, tmp_path / "labels", ("png",), dpi=100)
    assert matplotlib.image.imread(png).shape[1] / 100 >= span


@pytest.mark.skipif(shared_data_dir() is None, reason=NO_DATA)
@pytest.mark.slow
def test_describe_rmnist_partitioned_prints_the_partition_and_saves_the_figure(tmp_path, capsys) -> None:
    png = tmp_path / "labels.png"
    args = ["describe", "rmnist", "--set", "partition=classes", "--clients", "10", "--plot", str(png)]
    assert run([*args, "--data-dir", str(shared_data_dir())]) == 0
    out = capsys.readouterr().out
    assert "partition: classes (classes_per_client=2, first-deterministic)" in out
    assert "classes per client: 2..2" in out and png.stat().st_size > 0


def test_a_sweep_cell_recorded_with_the_former_key_is_still_the_same_cell() -> None:
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.experiments.cells import _key, _same_config

    config = RunConfig(seed=2)
    saved = {k: v for k, v in _key(config).items() if k not in ("partition", "partition_alpha")}
    saved["partition"] = saved.pop("placement")  # as an older cell.json holds it
    assert _same_config(saved, config)
    assert not _same_config({**saved, "partition": "community"}, config)


def test_former_partition_key_is_read_as_placement_with_one_warning() -> None:
    with pytest.warns(FutureWarning, match="read as placement"):
        config = load_config(None, ["partition=community"])
    assert (config.placement, config.partition) == ("community", "none")
    with pytest.raises(ConfigError, match="former name of 'placement'"):
        load_config(None, ["partition=contiguous", "placement=community"])
    assert renamed_keys({"partition": "contiguous", "seed": 1}) == {"placement": "contiguous", "seed": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(None, ["partition=dirichlet"]).partition == "dirichlet"


def test_run_on_a_python_pool_records_the_partition(tmp_path) -> None:
    import sheaf_fmtl

    x, y = _pool(300, 3)
    result = sheaf_fmtl.run(
        data=(x, y), partition="classes", classes_per_client=2, clients=4, rounds=1, out=tmp_path / "r"
    )
    assert (result.config.partition, result.config.classes_per_client, result.config.clients) == (
        "classes",
        2,
        4,
    )
    assert len(result.thetas) == 4


def test_rmnist_pool_samples_a_seeded_subset_of_distinct_images_and_only_with_a_partition(tmp_path) -> None:
    write_mnist_idx(tmp_path, n_train=96)
    spec = PartitionSpec("iid")

    def images(seed: int) -> list[float]:
        """The pooled images' pixel sums (a rotation keeps them), sorted."""
        request = DataRequest(clients=4, seed=seed, data_dir=tmp_path, partition=spec, options={"pool": 40})
        raw = load_raw("rmnist", request)
        assert sum(len(c.x) for c in raw.clients) == 40
        return sorted(round(float(x.sum()), 3) for c in raw.clients for x in c.x)

    assert images(3) != images(4)
    with pytest.raises(DatasetError, match=r"data.pool = 40 .* partition"):
        load_raw("rmnist", DataRequest(clients=4, seed=3, data_dir=tmp_path, options={"pool": 40}))
    with pytest.raises(DatasetError, match="2 <= pool <= 96"):
        load_raw(
            "rmnist", DataRequest(clients=4, seed=3, data_dir=tmp_path, partition=spec, options={"pool": 97})
        )


@pytest.mark.parametrize("pool", [500, 2, "many", 1e30])
def test_a_pool_without_a_partition_is_refused_by_the_config_before_any_data_are_read(tmp_path, pool) -> None:
    """No MNIST files here at all: the config's refusal comes first, in one line naming both keys."""
    import sheaf_fmtl

    with pytest.raises(ConfigError, match=r"config key 'data.pool' = .* partition = none") as err:
        sheaf_fmtl.run(dataset="rmnist", data={"pool": pool}, data_dir=str(tmp_path), rounds=1)
    assert "\n" not in str(err.value) and "partition='dirichlet'" in str(err.value)
    assert load_config(keys={"dataset": "rmnist", "data": {"pool": 0}}).data == {"pool": 0}  # off
    keys = {"dataset": "rmnist", "data": {"pool": 40}, "partition": "iid"}
    assert load_config(keys=keys).data == {"pool": 40}
