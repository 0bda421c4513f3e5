"""Mini-batch augmentation (``transform``): the built-in crop and flip against a hand-made crop, the
same draws on every run and in every process layout (each client's own stream), resume exact with
it, and refusals in one line."""

from __future__ import annotations

import re
import threading

import pytest
import torch
import torch.nn.functional as F

import sheaf_fmtl
from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.transforms import BatchTransform, random_crop_flip

KEYS = {"dataset": "synthetic", "clients": 4, "rounds": 2, "batch_size": 8, "local_epochs": 1}


def flip_sign(x: torch.Tensor) -> torch.Tensor:
    """A random transform of a batched tensor from the global generator (``tests...:flip_sign``)."""
    return torch.where(torch.rand(len(x), *[1] * (x.ndim - 1)) < 0.5, -x, x)


def test_random_crop_flip_is_a_padded_crop_at_the_drawn_offsets() -> None:
    x = torch.randn(5, 3, 6, 7)
    torch.manual_seed(4)
    out = random_crop_flip(x, padding=2, flip=True)
    torch.manual_seed(4)  # the same draws, by hand: offsets, then flips
    top, left = torch.randint(0, 5, (5,)), torch.randint(0, 5, (5,))
    flipped = torch.rand(5) < 0.5
    padded = F.pad(x, (2, 2, 2, 2))
    for i in range(5):
        crop = padded[i, :, top[i] : top[i] + 6, left[i] : left[i] + 7]
        assert torch.equal(out[i], crop.flip(-1) if flipped[i] else crop)
    assert random_crop_flip(torch.randn(2, 6, 7), padding=1).shape == (2, 6, 7)  # one channel


def test_each_client_draws_from_its_own_stream_whoever_it_is_stacked_with() -> None:
    x = torch.randn(3, 4, 5)
    mask = torch.tensor([[1.0] * 4, [1.0, 1.0, 0, 0], [1.0] * 4])
    all_three = BatchTransform(flip_sign, 0, [7, 8, 9]).apply(x, mask, [7, 8, 9])
    alone = BatchTransform(flip_sign, 0, [8]).apply(x[1:2], mask[1:2], [8])
    assert torch.equal(all_three[1], alone[0])
    assert torch.equal(all_three[1, 2:], x[1, 2:])  # padding untouched


def test_a_transform_changes_training_and_runs_repeat_exactly() -> None:
    a = sheaf_fmtl.run(transform=flip_sign, **KEYS)
    b = sheaf_fmtl.run(transform=flip_sign, **KEYS)
    plain = sheaf_fmtl.run(**KEYS)
    assert all(torch.equal(p, q) for p, q in zip(a.thetas, b.thetas, strict=True))
    assert not any(torch.equal(p, q) for p, q in zip(a.thetas, plain.thetas, strict=True))
    first = [{k: v for k, v in r.metrics[0].items() if k != "wall_seconds"} for r in (a, plain)]
    assert first[0] == first[1]  # round 0: evaluation is not augmented


def test_an_unknown_transform_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="config key 'transform'.*allowed: none, random-crop-flip"):
        sheaf_fmtl.run(transform="crop", **KEYS)


@pytest.mark.slow  # (two processes)
def test_two_processes_draw_the_transforms_of_one_and_keep_the_same_batchnorm_statistics(tmp_path) -> None:  # noqa: ANN001
    keys = {
        **KEYS,
        "transform": "tests.algorithms.training.test_transform:flip_sign",
        "model": "tests._baselines_problems:mlp_bn",
        "algorithm": "dfedu",
        "checkpoint_every": 0,
    }
    one = sheaf_fmtl.run(out=tmp_path / "one", **keys)
    two = sheaf_fmtl.run(out=tmp_path / "two", processes=2, **keys)
    for a, b in zip(two.state["thetas"], one.state["thetas"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(two.state["batchnorm"], one.state["batchnorm"], strict=True):  # gathered on rank 0
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-5)


#: What :func:`fails_when_told` raises, from which of its calls (``None``: never).
TOLD: dict[str, object] = {"error": None, "from_call": 0, "calls": 0}


def fails_when_told(x: torch.Tensor) -> torch.Tensor:
    """A transform that raises ``TOLD["error"]`` from its ``TOLD["from_call"]``-th call on
    (``tests.algorithms.training.test_transform:fails_when_told``)."""
    TOLD["calls"] = int(TOLD["calls"]) + 1  # type: ignore[call-overload]
    error = TOLD["error"]
    if isinstance(error, BaseException) and int(TOLD["calls"]) >= int(TOLD["from_call"]):  # type: ignore[call-overload]
        raise error
    return x


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (TypeError("unsupported operand type(s) for +: 'Tensor' and 'str'"), "raised TypeError: unsupported"),
        (RuntimeError("first line\n\n  second line"), "raised RuntimeError: first line | second line"),
        (KeyError("size"), "raised KeyError: 'size'"),
        (ZeroDivisionError(), "raised ZeroDivisionError ("),
    ],
)
def test_an_error_of_the_transform_is_one_line_naming_it_and_the_error(error: Exception, said: str) -> None:
    from sheaf_fmtl.transforms import TransformError

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise error

    with pytest.raises(TransformError) as err:
        sheaf_fmtl.run(transform=broken, **KEYS)
    text = str(err.value)
    assert "\n" not in text and "config key 'transform' = <python: broken" in text and said in text
    assert "on client 0's training batch [" in text and "transform='none'" in text
    assert err.value.__cause__ is error  # the user's error itself, with its traceback


def test_a_run_whose_transform_fails_keeps_its_folder_and_resumes(tmp_path, capsys) -> None:  # noqa: ANN001
    from sheaf_fmtl.cli import main

    out, spec = tmp_path / "run", "tests.algorithms.training.test_transform:fails_when_told"
    keys = ["dataset=synthetic", "clients=3", "rounds=4", "eval_every=1", "batch_size=8", f"transform={spec}"]
    TOLD.update(error=None, calls=0)
    counted = ["--out", str(tmp_path / "count"), "--set", *keys, "rounds=1"]
    assert main(["run", "--quiet", *counted]) == 0  # how many calls a round makes
    TOLD.update(error=TypeError("bad operand"), from_call=2 * int(TOLD["calls"]) + 1, calls=0)  # round 3
    try:
        assert main(["run", "--quiet", "--out", str(out), "--set", *keys]) == 2
    finally:
        TOLD["error"] = None
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error: "), err
    assert f"config key 'transform' = {spec} raised TypeError: bad operand" in err
    kept = re.search(r"kept metrics.csv to round 2 and the checkpoint of round (\d), every file whole", err)
    assert kept is not None and int(kept.group(1)) in (1, 2), err  # (round 2's: maybe still pending)
    assert f"once fixed, sheaf-fmtl run --resume {out} --trust-plugins" in err
    assert not (out / "summary.json").exists()
    assert main(["run", "--quiet", "--resume", str(out), "--trust-plugins"]) == 0
    rows = (out / "metrics.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2", "3", "4"]


def test_a_transform_that_changes_the_shape_is_refused_with_what_the_folder_kept(tmp_path) -> None:  # noqa: ANN001
    from sheaf_fmtl.transforms import TransformError

    said = r"returned \[.*must keep the batch's shape.*stopped and kept"
    with pytest.raises(TransformError, match=said) as err:
        sheaf_fmtl.run(out=tmp_path / "r", transform=lambda x: x[:, :1], **KEYS)
    assert "\n" not in str(err.value)


def test_a_failed_run_leaves_no_checkpoint_write_running(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """With a slow disk (a manifest written 0.5 s after its shard): the error is raised once the
    checkpoint write in flight has finished, so no write runs behind it, what the error says was
    kept is there, and a resume at once in the same process does not race the write (which would
    remove the checkpoint being resumed)."""
    import time

    from sheaf_fmtl.cli import main
    from sheaf_fmtl.runtime.run.checkpoints import checkpoint

    manifest = checkpoint.write_manifest

    def slow(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.5)
        return manifest(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "write_manifest", slow)
    out, spec = tmp_path / "run", "tests.algorithms.training.test_transform:fails_when_told"
    keys = ["dataset=synthetic", "clients=3", "rounds=4", "eval_every=1", "batch_size=8", f"transform={spec}"]
    TOLD.update(error=None, calls=0)
    assert main(["run", "--quiet", "--out", str(tmp_path / "count"), "--set", *keys, "rounds=1"]) == 0
    TOLD.update(error=TypeError("bad operand"), from_call=2 * int(TOLD["calls"]) + 1, calls=0)  # round 3
    try:
        assert main(["run", "--quiet", "--out", str(out), "--set", *keys]) == 2
    finally:
        TOLD["error"] = None
    assert not any(t.name.startswith("checkpoint-") and t.is_alive() for t in threading.enumerate())
    assert main(["run", "--quiet", "--resume", str(out), "--trust-plugins"]) == 0
