"""The user's own code in a config: ``module:function`` (the usual plug-in spelling, e.g.
``model: mypkg.nets:resnet8``), imported when the config is loaded, and Python objects handed to
:func:`sheaf_fmtl.run`, held in this process under a placeholder that the config records
(``<python: make_model #2>``).

A placeholder stands for its object only in the process that holds it, and only while the object
that handed it over (a :class:`sheaf_fmtl.Federation`) is alive: a config with placeholders cannot
be run again from its file, resumed by ``sheaf-fmtl run --resume``, nor run over ``processes > 1``
(each process re-creates the run from its config). A ``module:function`` can: it is re-imported.

A run folder is data: resuming one imports the ``module:function`` its ``config.yaml`` names only
when the user names the same plug-in again (``--set model=mypkg.nets:resnet8``) or trusts the
folder (``--trust-plugins``); :func:`untrusted_specs` says which it names beyond those.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import re
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .spelling import setting

SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
HELD_PREFIX = "<python: "
#: Config keys that may name user code.
PLUGIN_KEYS = (
    "algorithm",
    "dataset",
    "model",
    "loss",
    "metric",
    "graph",
    "optimizer",
    "lr_scheduler",
    "transform",
)


class PluginError(ValueError):
    """One line naming the config key, the value and what was expected."""


def is_spec(value: str) -> bool:
    """Whether ``value`` spells ``module:function`` (``file:PATH`` is a dataset, not a spec)."""
    return not value.startswith("file:") and SPEC.fullmatch(value) is not None


def is_held(value: str) -> bool:
    """Whether ``value`` is the placeholder of a Python object handed to :func:`sheaf_fmtl.run`."""
    return value.startswith(HELD_PREFIX) and value.endswith(">")


def specs_in(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``module:function`` specs the plug-in keys of ``values`` (a config's mapping) name, each
    with its key."""
    out: dict[str, str] = {}
    for key in PLUGIN_KEYS:
        value = values.get(key)
        parts = value.split(",") if isinstance(value, str) and key == "model" else [value]
        for part in parts:
            if isinstance(part, str) and is_spec(part.strip()):
                out.setdefault(part.strip(), key)
    return out


def untrusted_specs(saved: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, str]:
    """The specs ``saved`` (a run folder's config) names that ``given`` (the user's keys) does not."""
    named = specs_in(given)
    return {spec: key for spec, key in specs_in(saved).items() if spec not in named}


def load_spec(key: str, spec: str) -> Any:
    """The callable ``module:function`` names (the working directory is searched after the Python
    path, as ``python -m`` would); :class:`PluginError` when the module or the name is missing or
    the object is not callable."""
    module_name, _, attr = spec.partition(":")
    where = f"config key '{key}' = '{spec}'"
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise PluginError(
            f"{where}: cannot import module '{module_name}' ({e}); expected module:function, the module "
            "importable from the working directory or the Python path"
        ) from None
    except Exception as e:  # the user's module failed while importing
        raise PluginError(
            f"{where}: importing '{module_name}' raised {type(e).__name__}: {first_line(e)}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{where}: '{module_name}' has no attribute '{attr}'; expected module:function")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PluginError(f"{where}: names a {type(obj).__name__}, expected a callable (module:function)")
    return obj


def spec_of(obj: Any) -> str | None:
    """``module:qualname`` when importing it gives ``obj`` back (a function or class defined at
    the top of an importable module, not ``__main__``); ``None`` otherwise."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or module == "__main__" or "<" in name:
        return None
    spec = f"{module}:{name}"
    if not is_spec(spec):
        return None
    try:
        return spec if load_spec("", spec) is obj else None
    except PluginError:
        return None


class Held:
    """A strong reference to one object handed over (the registry itself keeps weak ones)."""

    def __init__(self, obj: Any, token: str) -> None:
        self.obj = obj
        self.token = token


_REGISTRY: weakref.WeakValueDictionary[str, Held] = weakref.WeakValueDictionary()
_COUNTER = itertools.count(1)


def hold(obj: Any, label: str) -> Held:
    """Register ``obj`` under a new placeholder ``<python: label #n>``; it resolves while the
    returned :class:`Held` is referenced."""
    clean = re.sub(r"[^\w .+-]", "_", label.replace("<", "").replace(">", ""))[:60]  # no commas, no '>'
    held = Held(obj, f"{HELD_PREFIX}{clean} #{next(_COUNTER)}>")
    _REGISTRY[held.token] = held
    return held


def resolve(key: str, value: str) -> Any:
    """The object a ``module:function`` or a placeholder of config key ``key`` stands for."""
    if is_held(value):
        held = _REGISTRY.get(value)
        if held is None:
            raise PluginError(
                f"config key '{key}' = '{value}' stands for a Python object given to sheaf_fmtl.run() that "
                "this process does not hold (a config file, a resumed run or processes > 1 re-create a run "
                f"from its config); name it as module:function instead ({setting(key, 'mypkg.code:' + key)})"
            )
        return held.obj
    return load_spec(key, value)


def held_keys(values: dict[str, Any]) -> list[str]:
    """The keys of ``values`` (a config's) whose values are placeholders."""
    out = []
    for key in PLUGIN_KEYS:
        value = values.get(key)
        if isinstance(value, str) and any(is_held(p) for p in value.split(",")):
            out.append(key)
    return out


def call_with(fn: Callable[..., Any], args: tuple[Any, ...], named: dict[str, Any]) -> Any:
    """``fn(*args, **k)`` with the entries of ``named`` that ``fn`` takes by name."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature (a builtin): positional arguments only
        return fn(*args)
    return fn(*args, **{k: v for k, v in named.items() if k in params})


def first_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    return lines[0][:200] if lines else ""


def higher_is_better(goal: str, metric: str, name: str) -> bool | None:
    """Whether a higher test metric is better: ``goal`` (config key ``metric_goal``) ``max`` or
    ``min`` when given; for ``metric = auto`` the built-in metric ``name`` (accuracy: higher, MSE:
    lower); for your own metric its function's attribute ``higher_is_better``, ``None`` without one."""
    if goal != "auto":
        return goal == "max"
    if metric == "auto":
        return name == "accuracy"
    flag = getattr(resolve("metric", metric), "higher_is_better", None)
    return flag if isinstance(flag, bool) else None
