"""Mini-batch augmentation (``transform``): the built-in crop and flip against a hand-made crop, the
same draws on every run and in every process layout (each client's own stream), resume exact with
it, and refusals in one line."""

from __future__ import annotations

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
        "transform": "tests.algorithms.test_transform:flip_sign",
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
