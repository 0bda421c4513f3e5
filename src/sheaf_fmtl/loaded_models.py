"""The fresh client modules a loaded run folder's parameters go into (:func:`build_modules`), built
as the run built them from its config key ``model``; a model that is user code is built only when
the caller names it again or hands it over (a run folder never runs its own code)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from .config import ConfigError
from .data.base import ClientSplit, FederatedDataset, Task
from .federation.user import UserModels, is_user_model
from .models import build_model, default_model
from .plugins import hold, is_held, is_spec
from .spelling import on_command_line, option


def build_modules(config: dict[str, Any], record: dict[str, Any], model: Any) -> list[nn.Module]:  # noqa: ANN401
    """One fresh module per client, as the run built them (config key ``model``, round-robin)."""
    task, clients = str(record["task"]), record["clients"]
    outputs = int(record["num_classes"]) if task == "classification" else 1
    spelled = str(config.get("model", "auto"))
    parts = [default_model(task) if m.strip() == "auto" else m.strip() for m in spelled.split(",")]
    user = sorted({p for p in parts if is_user_model(p)})
    held = None
    objects = all(is_held(p) for p in user)  # Python objects of the script that ran: no name to import
    if not user and model is not None:  # (it would be ignored)
        given = option("model", model) if isinstance(model, str) else option("model")
        raise ConfigError(
            f"{given}: the run's model is '{spelled}', built in (no code to name); "
            f"leave {option('model')} out"
        )
    if user:
        if model is None:
            raise ConfigError(_unnamed(spelled, user[0], objects))
        if isinstance(model, str) and objects and len(user) == 1 and is_spec(model):
            parts = [model if p in user else p for p in parts]  # the user's word: code building it
        elif isinstance(model, str):
            if model not in (spelled, *user) or (model != spelled and len(user) > 1):
                raise ConfigError(
                    f"{option('model', model)}: the run's config key 'model' is '{spelled}'; name that code "
                    f"({option('model', spelled)})"
                )
        else:
            held = hold(model, "model")  # kept referenced while the modules are built
            parts = [held.token if p in user else p for p in parts]
    shapes = [tuple(int(s) for s in c["feature_shape"]) for c in clients]
    dataset = _shapes_only(record, shapes)
    made = UserModels.build(parts, dataset, outputs)
    out = []
    for i, shape in enumerate(shapes):
        module = made.modules.get(i)
        out.append(module if module is not None else build_model(parts[i % len(parts)], shape, outputs))
    del held
    return out


def _unnamed(spelled: str, first: str, objects: bool) -> str:
    """The refusal of a run whose model is user code that ``load`` was not given."""
    if not objects:
        return (
            f"config key 'model' = '{spelled}' names user code, which a run folder never imports by itself: "
            f"name it again, {_given_model(first)}"
        )
    given = _given_model("MODULE:FUNCTION")
    if not on_command_line():
        given += " or the object itself, sheaf_fmtl.load(run, model=make_model)"
    return (
        f"config key 'model' = '{spelled}' was a Python object of the script that ran it, which no file "
        f"holds: give a function i -> nn.Module that builds it, in a module importable from here, as {given}"
    )


def _given_model(spec: str) -> str:
    """How the user names the run's model code again: ``--model SPEC`` (the command line) or
    ``sheaf_fmtl.load(run, model='SPEC')``."""
    return option("model", spec) if on_command_line() else f"sheaf_fmtl.load(run, model={spec!r})"


def _shapes_only(record: dict[str, Any], shapes: list[tuple[int, ...]]) -> FederatedDataset:
    """A dataset without samples, of the clients' feature shapes (what builds their models)."""
    task: Task = "classification" if record["task"] == "classification" else "regression"
    ydtype = np.int64 if task == "classification" else np.float32
    splits = []
    for shape in shapes:
        x, y = np.zeros((0, *shape), np.float32), np.zeros(0, ydtype)
        splits.append(ClientSplit(x, y, x, y))
    return FederatedDataset(str(record.get("dataset", "")), task, int(record["num_classes"]), tuple(splits))
