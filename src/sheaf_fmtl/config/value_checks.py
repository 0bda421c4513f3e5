"""Checks of one config key's value that need no schema: a key's Python types from its annotation,
``join_round``'s spelling, and the user code a key may name (``module:function``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..plugins import PluginError, is_held, is_spec, load_spec
from ..spelling import on_command_line, setting
from . import registry
from .errors import ConfigError, shown
from .values import MAX_JOIN_ROUND, join_round_values


def key_types(annotation: str) -> tuple[type, ...]:
    if annotation.startswith("int"):
        return (int,)
    if annotation.startswith("float"):
        return (int, float)
    if annotation.startswith("bool"):
        return (bool,)
    return (dict,) if annotation.startswith("dict") else (str,)


def check_join_round(value: str) -> None:
    """``join_round``'s spelling and numbers (its count per client is checked against the clients
    once they are known, :func:`sheaf_fmtl.runtime.engine.schedule.join_rounds`)."""
    try:
        join_round_values(value)
    except ValueError:
        raise ConfigError(
            f"config key 'join_round' = {shown(value)} is not allowed; allowed: one first round per "
            "client (comma-separated) or late:K@R (K clients join at round R), each number a whole one "
            f"from 0 to {MAX_JOIN_ROUND} (2^63 - 1), e.g. {setting('join_round', 'late:2@50')}"
        ) from None


def check_code(name: str, value: str, fix_text: str) -> None:
    """Import the ``module:function`` a key names (config keys naming user code, ``plugins``)."""
    for part in value.split(",") if name == "model" else [value]:
        if is_spec(part.strip()):
            try:
                load_spec(name, part.strip())
            except PluginError as e:
                raise ConfigError(str(e)) from None
    if name in ("loss", "metric") and value != "auto" and not is_spec(value) and not is_held(value):
        raise ConfigError(
            f"config key '{name}': {shown(value)} is not allowed; allowed: auto, or module:function "
            + (
                f"(your own, e.g. {setting(name, f'mypkg.code:my_{name}')})"
                if on_command_line()
                else f"or a function (your own, e.g. {name}=my_{name})"
            )
            + fix_text
        )
    if name == "transform" and value not in ("none", "random-crop-flip") and not is_spec(value):
        if not is_held(value):
            raise ConfigError(
                f"config key 'transform': {shown(value)} is not allowed; allowed: none, random-crop-flip, or "
                + (
                    f"module:function (e.g. {setting(name, 'mypkg.aug:flip')})"
                    if on_command_line()
                    else "a callable on a batched tensor (e.g. transform=v2.RandomHorizontalFlip())"
                )
            )


def own_algorithm(values: Mapping[str, Any]) -> None:
    """Import the module of ``algorithm = module:Class`` before the keys are read: it declares the
    algorithm's own keys."""
    value = values.get("algorithm")
    if isinstance(value, str) and is_spec(value):
        registered_algorithm(value)


def registered_algorithm(value: str) -> str:
    """``algorithm = module:Class``, once its module registered the class (kept as given, so a run
    folder, a resume and the ranks import it again)."""
    try:
        registry.registered_name(value)
    except PluginError as e:
        raise ConfigError(str(e)) from None
    return value
