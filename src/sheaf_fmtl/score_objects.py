"""The Python objects a run was made from (``sheaf_fmtl.run(data=..., metric=...)``), given again
to score its loaded models (:meth:`sheaf_fmtl.export.TrainedRun.evaluate`): a folder records only
their placeholders, so its data and metric are the caller's to hand over once more."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import ConfigError
from .plugins import is_held, is_spec
from .spelling import option
from .user import UserObjects


def object_keys(
    config: Mapping[str, Any], out: Path, objects: UserObjects, given: Mapping[str, Any]
) -> dict[str, Any]:
    """The config keys that score the run of folder ``out`` (its ``config.yaml``: ``config``) with
    the Python objects ``given`` (``data``, ``metric``; held by ``objects``) in place of the code
    the run was made from (a placeholder or ``module:function`` in ``config.yaml``); ConfigError
    when the run was made from a placeholder and nothing is given, or an object is given for a key
    the run read by name (``synthetic``, ``accuracy``).
    A loss plays no part in a score: ``auto`` stands in for the run's (nothing imported)."""
    keys: dict[str, Any] = {}
    for key, name in (("dataset", "data"), ("metric", "metric")):
        spelled, obj = str(config.get(key, "")), given[name]
        code = is_held(spelled) or is_spec(spelled)
        if not code and obj is not None:
            raise ConfigError(
                f"{option(name)}: the run's {key} is {spelled}, not a Python object; leave {name} out"
                + (" (data_dir= says where its files lie now)" if name == "data" else "")
            )
        if is_held(spelled) and obj is None:
            raise ConfigError(
                f"{out}: the run was made from a Python object as its {key} ({spelled}); give it "
                f"again, as sheaf_fmtl.run took it: sheaf_fmtl.load(run, {name}=...).evaluate() or "
                f".evaluate({name}=...)"
            )
        if name == "data" and isinstance(obj, Mapping):
            raise ConfigError(
                f"{option('data')}: a mapping is a dataset's options; give the clients' data as "
                "sheaf_fmtl.run took them: [(x_train, y_train, x_test, y_test), ...] or a pooled (x, y)"
            )
        if obj is not None:
            keys.update(objects.as_keys(**{name: obj}))
    if str(config.get("loss", "auto")) != "auto":
        keys["loss"] = "auto"
    return keys


def held_objects(config: Mapping[str, Any]) -> list[str]:
    """The keys of a run's ``config.yaml`` whose Python objects a score needs again (``dataset``,
    ``metric`` placeholders): none can be given on the command line."""
    return [key for key in ("dataset", "metric") if is_held(str(config.get(key, "")))]
