"""The data held once: after ``build_federation`` the dataset's arrays are views of the cohorts'
stacks (same values, no padding; a run never builds the padded ones), and the training-loss
subsample is positions into the stack, its estimate equal to the same samples gathered by hand."""

from __future__ import annotations

import copy

import numpy as np
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import build_simulation, load_dataset


def test_the_datasets_arrays_become_views_of_the_stacks() -> None:
    dataset = load_dataset(RunConfig(dataset="synthetic", clients=5))
    before = copy.deepcopy(dataset.clients)
    fed = build_federation(dataset, "auto")
    cohort = fed.cohorts[0]
    stored = {
        "x_train": cohort.train.x,
        "y_train": cohort.train.y,
        "x_test": cohort.test.x,
        "y_test": cohort.test.y,
    }
    for name, values in stored.items():  # end to end: exactly the data's bytes, no padding
        assert values.numpy().nbytes == sum(getattr(c, name).nbytes for c in before), name
    padded = {
        "x_train": cohort.x_train,
        "y_train": cohort.y_train,
        "x_test": cohort.x_test,
        "y_test": cohort.y_test,
    }
    for k, (split, old) in enumerate(zip(dataset.clients, before, strict=True)):
        for name, values in stored.items():
            array = getattr(split, name)
            assert np.array_equal(array, getattr(old, name)) and array.dtype == getattr(old, name).dtype
            assert np.shares_memory(array, values.numpy()), name
            assert torch.equal(padded[name][k, : len(array)], torch.as_tensor(array))
            assert not padded[name][k, len(array) :].any()  # the padded stack's padding: zeros
    again = build_federation(dataset, "auto")  # from the views: the same stacks
    assert torch.equal(again.cohorts[0].train.x, cohort.train.x)


def test_a_run_never_builds_the_padded_stacks() -> None:
    for keys in ({"local_epochs": 1}, {"local_epochs": 0, "local_steps": 2}):
        sim = build_simulation(RunConfig(dataset="synthetic", clients=6, rounds=2, batch_size=8, **keys))
        sim.evaluate()
        sim.step()
        sim.step()
        sim.evaluate()
        assert all(not c._padded for c in sim.ctx.fed.cohorts), keys


def test_the_train_loss_subsample_is_positions_into_the_stack(monkeypatch) -> None:
    monkeypatch.setattr("sheaf_fmtl.federation.stacked.EVAL_TRAIN_SAMPLES", 7)  # fewer than n_i
    fed = build_federation(load_dataset(RunConfig(dataset="synthetic", clients=4)), "auto")
    cohort = fed.cohorts[0]
    idx, n = cohort._eval_subsample()
    assert idx.shape == (4, 7) and idx.dtype == torch.int32 and bool((n == 7).all())
    for c in range(4):  # distinct real samples of the client
        assert len(set(idx[c].tolist())) == 7 and int(idx[c].max()) < int(cohort.n_train[c])
    thetas = cohort.init_thetas(0)
    x = torch.stack([cohort.x_train[c, idx[c]] for c in range(4)])
    y = torch.stack([cohort.y_train[c, idx[c]] for c in range(4)])
    logits = torch.stack([cohort._predict(thetas[c : c + 1], x[c : c + 1])[0] for c in range(4)])
    per = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
    expected = per.view(4, 7).mean(1) + 0.5 * cohort.l2 * (thetas * thetas).sum(1)
    torch.testing.assert_close(cohort.train_loss(thetas), expected)
