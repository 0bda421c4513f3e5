"""Legend text that names what differs between the runs of a figure, and nothing else."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from .. import algorithms  # noqa: F401 - registers the entries that name each algorithm and map mode
from ..config.registry import MapModeSpec, algorithm_spec, map_mode_spec, unrecorded_map_mode
from ..config.usage import reads
from ..metrics.groups import differing_keys, run_keys

# Named first when they differ (then any other differing key, in config order).
LEGEND_FIRST = (
    "dataset",
    "maps",
    "map_kind",
    "estimates",
    "gamma",
    "lam",
    "eta",
    "alpha",
    "model",
    "graph",
    "seed",
)
#: Keys only Sheaf-FMTL reads (its edge stalks and maps): not named in another algorithm's label.
SHEAF_ONLY = (
    "maps",
    "map_kind",
    "estimates",
    "gamma",
    "eta",
    "map_init",
    "map_scale",
    "map_dtype",
    "shared_maps",
    "map_draw",
    "message_mode",
    "map_defer",
    "proxy_model",
    "distill",
    "probe_size",
    "probe_data",
)

_HELD = re.compile(r"<python: (.*?) #\d+>")
#: The widest title line of one panel (characters); longer titles wrap.
TITLE_WIDTH = 60


def object_name(value: str) -> str:
    """A config value as a reader knows it: the placeholder of a Python object handed to
    :func:`sheaf_fmtl.run` (``<python: make_model #2>``) by the object's name (``make_model``)."""
    return _HELD.sub(r"\1", value)


def title(text: str, width: int = TITLE_WIDTH) -> str:
    """``text`` wrapped to ``width`` characters a line (panel titles side by side never overlap)."""
    return "\n".join(textwrap.wrap(text, width)) or text


def algorithm_name(config: Mapping[str, Any]) -> str:
    """``sheaf-fmtl`` -> ``Sheaf-FMTL``, ``dfedu`` -> ``dFedU`` ... (unknown names as given)."""
    name = str(config.get("algorithm", "?"))
    spec = algorithm_spec(name)
    return spec.display if spec is not None else name


def run_reads(config: Mapping[str, Any], key: str) -> bool:
    """Whether the run of ``config`` read the flat ``key``: not one its ``config.yaml`` lists under
    ``unused``, nor a key of Sheaf-FMTL's maps in another algorithm or another map mode, nor ``lam``
    where the algorithm has no coupling, nor a key its selectors leave unread
    (:func:`sheaf_fmtl.config.usage.reads`)."""
    unused = config.get("unused")
    if isinstance(unused, list) and key in unused:
        return False
    algorithm = config.get("algorithm")
    if key in SHEAF_ONLY and algorithm != "sheaf-fmtl":
        return False
    if key in SHEAF_ONLY and key != "maps":  # a key of one map mode: read by that mode only
        spec_of_mode = _map_mode(config)[1]
        if spec_of_mode is not None and key not in spec_of_mode.reads:
            return False
    spec = algorithm_spec(str(algorithm))
    if key == "lam" and spec is not None and "lam" not in spec.reads:
        return False
    return "." in key or reads(config, key)


def legend_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The config keys (flat, ``data.*`` included) whose values differ between the ``configs`` that
    read them (:func:`run_reads`), without the algorithm (always named); ``LEGEND_FIRST`` keys first."""
    flats = [run_keys(c) for c in configs]

    def differs(key: str) -> bool:
        values = {repr(f.get(key)) for c, f in zip(configs, flats, strict=True) if run_reads(c, key)}
        return len(values) > 1

    keys = [k for k in differing_keys(configs) if k != "algorithm" and differs(k)]
    return [k for k in LEGEND_FIRST if k in keys] + [k for k in keys if k not in LEGEND_FIRST]


def value_text(v: Any) -> str:
    """A config value in a legend: numbers to 3 significant digits (``0.0333``, ``0.333``), lists
    comma-joined, Python objects by name."""
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, tuple):
        return ",".join(map(value_text, v))
    return object_name(str(v))


def describe(config: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``Sheaf-FMTL, gamma=0.1, lam=0.01``: the algorithm, then ``key=value`` for those of ``keys``
    that the run read (:func:`run_reads`: no ``gamma`` for dFedU, no ``lam`` for local training)
    and that hold a value (a key left open, ``None``, is not named)."""
    flat = run_keys(config)
    named = [f"{k}={value_text(flat[k])}" for k in keys if run_reads(config, k) and flat.get(k) is not None]
    return ", ".join([algorithm_name(config), *named])


def setting_label(config: Mapping[str, Any], among: Sequence[Mapping[str, Any]]) -> str:
    """A run's title among the runs ``among`` of one figure: what sets it apart from them
    (:func:`describe`), or the algorithm and its maps (:func:`long_label`) when nothing does."""
    keys = [k for k in legend_keys(among) if k not in ("dataset", "seed")]
    return title(describe(config, keys) if keys else long_label(config))


def long_label(config: Mapping[str, Any]) -> str:
    """``Sheaf-FMTL (gamma=0.1, the paper's learned maps)``, ``Sheaf-FMTL (gamma=0.1, maps redrawn
    each round, selection, estimates)``, ``dFedU``, ``local training`` ..."""
    name = algorithm_name(config)
    if config.get("algorithm") != "sheaf-fmtl":
        return name
    mode, spec = _map_mode(config)
    reads = spec.reads if spec is not None else ()
    parts = [spec.label if spec is not None else mode]
    if "gamma" in reads:
        parts.insert(0, f"gamma={config.get('gamma', 0):g}")
    if "map_kind" in reads:
        parts.append(str(config.get("map_kind", "selection")))
    if "estimates" in reads and config.get("estimates"):
        parts.append("estimates")
    return f"{name} ({', '.join(parts)})"


def _map_mode(config: Mapping[str, Any]) -> tuple[str, MapModeSpec | None]:
    """The map mode a recorded config ran and its registry entry: without the ``maps`` key the mode
    written before the key existed; a mode whose maps did not move (``eta`` or ``lam`` 0) as the
    mode its entry then runs as (:attr:`~sheaf_fmtl.config.registry.MapModeSpec.idle_as`)."""
    mode = str(config.get("maps", unrecorded_map_mode()))
    spec = map_mode_spec(mode)
    if spec is not None and spec.idle_as and not (config.get("eta", 0) > 0 and config.get("lam", 0) > 0):
        return spec.idle_as, map_mode_spec(spec.idle_as)
    return mode, spec
