"""Aten ops that a call dispatches, counted with ``torch.profiler`` on the CPU: the number a GPU would
launch kernels for, give or take (``benchmarks/step_ops.py`` reports it per mini-batch step).

* ``dispatched``: ``aten::*`` events called from outside aten (from Python or the autograd engine,
  not from inside another aten op) that do work; an op that only makes a view, allocates or reads
  metadata (:data:`NO_WORK`: ``view``, ``reshape`` of a contiguous tensor, ``empty``, ``to`` of a
  tensor already there, ...) counts only when something inside it does work (a copy);
* ``inner``: the innermost ops that do work (a composite op once per kernel it calls);
* ``all``: every ``aten::*`` event at any depth, views included;
* ``names``: ``dispatched`` by op name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NO_WORK = frozenset(
    "aten::" + name
    for name in (
        "view _unsafe_view reshape _reshape_alias as_strided as_strided_ transpose t permute expand "
        "expand_as unsqueeze squeeze slice select split split_with_sizes narrow unflatten flatten "
        "alias detach detach_ lift_fresh unbind chunk view_as contiguous empty empty_like "
        "empty_strided new_empty set_ result_type is_nonzero item _local_scalar_dense resolve_conj "
        "resolve_neg size stride dim is_same_size _has_compatible_shallow_copy_type to resize_ "
        "zeros_like new_zeros new_full full"
    ).split()
)


def count_aten_ops(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run ``fn()`` once under the profiler and count its aten ops (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    busy: dict[int, bool] = {}

    def works(e: Any) -> bool:
        if id(e) not in busy:
            kids = [c for c in e.cpu_children if c.name.startswith("aten::")]
            busy[id(e)] = e.name not in NO_WORK or any(works(c) for c in kids)
        return busy[id(e)]

    def outer(e: Any) -> bool:
        return e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")

    dispatched = [e for e in events if outer(e) and works(e)]
    inner = [
        e
        for e in events
        if works(e) and not any(c.name.startswith("aten::") and works(c) for c in e.cpu_children)
    ]
    names: dict[str, int] = {}
    for e in dispatched:
        names[e.name] = names.get(e.name, 0) + 1
    return {
        "dispatched": len(dispatched),
        "inner": len(inner),
        "all": len(events),
        "names": dict(sorted(names.items(), key=lambda kv: -kv[1])),
    }
