"""The local steps' optimizer as PyTorch defines it (config keys ``optimizer``, ``optimizer_args``,
``weight_decay``, ``grad_clip``; the earlier ``sgd``, ``momentum``, ``adam``), and whether the
local steps are other than plain SGD (:func:`custom`).

``optimizer`` names a ``torch.optim`` class (``AdamW``) or ``module:Class``; the algorithms run one
instance of it over a cohort's stacked ``[C, d]`` parameters (``algorithms/training/optim.py``), which is
each client's own optimizer only when the update is elementwise. :func:`layout` checks that by a
probe, once per setting: a few steps on a stacked ``[2, 3]`` parameter against each row alone, and
state that is either shaped like the parameter (a row per client) or one number (a step count,
kept per client). LBFGS (it needs a closure), optimizers with per-tensor norms or factored moments
(Adafactor and the like) fail the probe and are refused in one line.

The scheduler (``lr_scheduler``): :mod:`.schedulers`.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..component_keys import Keys, declare_keys, key
from ..plugins import PluginError, is_spec, load_spec
from ..spelling import setting
from .errors import ConfigError, shown

#: The earlier spellings (their numbers unchanged): the torch class each stands for.
LEGACY = {"sgd": torch.optim.SGD, "momentum": torch.optim.SGD, "adam": torch.optim.Adam}
_PROBE_STEPS = 3


@dataclass(frozen=True)
class Layout:
    """An optimizer's state per parameter: ``rows`` (keys of tensors shaped like the parameter: a
    row per client) and ``scalars`` (keys of single numbers, e.g. the step count: one per client),
    with the type each scalar is kept as (a torch dtype, or ``int``/``float``)."""

    rows: tuple[str, ...]
    scalars: tuple[str, ...]
    kinds: tuple[torch.dtype | type, ...]
    on_device: bool  # scalars on the parameter's device (fused or capturable), else on the CPU


def custom(config: Any) -> bool:
    """Whether the local steps are other than the paper's plain SGD at ``alpha``."""
    return bool(
        config.optimizer != "sgd"
        or config.optimizer_args
        or config.weight_decay
        or config.grad_clip > 0
        or config.lr_schedule != "constant"
        or config.lr_scheduler
    )


def _torch_names(module: Any, base: type, refused: Iterable[str]) -> list[str]:
    """The public subclasses of ``base`` in ``module``, less those ``refused``."""
    return sorted(
        n
        for n, c in vars(module).items()
        if isinstance(c, type) and issubclass(c, base) and c is not base
        if not n.startswith("_") and n not in refused
    )


def load_class(key: str, name: str, module: Any, base: type, refused: Iterable[str] = ()) -> type:
    """The class ``name`` (a class of ``module`` or ``module:Class``) for config key ``key``; the
    refusal lists ``module``'s classes less ``refused``."""
    if is_spec(name):
        try:
            cls = load_spec(key, name)
        except PluginError as e:
            raise ConfigError(str(e)) from None
    else:
        cls = getattr(module, name, None) if name and not name.startswith("_") else None
    if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
        return cls
    names = _torch_names(module, base, refused)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    close += [n for n in names if n.lower() == name.lower()]
    hint = f"did you mean {setting(key, close[-1])}? " if close else ""
    legacy = "sgd, momentum, adam, " if key == "optimizer" else ""
    raise ConfigError(
        f"config key '{key}': {shown(name)} is not allowed; {hint}allowed: {legacy}a {module.__name__} "
        f"class ({', '.join(names)}) or module:Class"
    )


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The optimizer class ``optimizer`` names (:data:`LEGACY`, a ``torch.optim`` class or
    ``module:Class``)."""
    return LEGACY.get(name) or load_class("optimizer", name, torch.optim, torch.optim.Optimizer)


_ARGS: dict[type, frozenset[str]] = {}


def accepted_args(cls: type) -> frozenset[str]:
    """The keyword arguments a class's constructor names (read once per class)."""
    if cls not in _ARGS:
        _ARGS[cls] = frozenset(inspect.signature(cls).parameters)
    return _ARGS[cls]


def optimizer_kwargs(config: Any) -> dict[str, Any]:
    """Keyword arguments of the optimizer besides its parameters and ``lr`` (``alpha``, or the
    schedule's): the earlier keys' (``momentum``, ``adam_*``), ``optimizer_args``, ``weight_decay``,
    and ``foreach=True`` where the class takes it (one kernel per op over the tensors)."""
    accepted = accepted_args(optimizer_class(config.optimizer))
    out: dict[str, Any] = {}
    if config.optimizer == "momentum":
        out["momentum"] = config.momentum
    elif config.optimizer == "adam":
        out.update(betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)
    out.update(config.optimizer_args)
    if config.weight_decay is not None:
        out["weight_decay"] = config.weight_decay
    if "foreach" in accepted and "foreach" not in out and not out.get("fused"):
        out["foreach"] = True
    return out


def build(config: Any, params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """The configured optimizer over ``params`` at learning rate ``lr``."""
    cls: Any = optimizer_class(config.optimizer)  # (a subclass: its own keyword arguments)
    return cls(params, lr=lr, **optimizer_kwargs(config))  # type: ignore[no-any-return]


_LAYOUTS: dict[str, Layout] = {}


def _setting(config: Any) -> str:
    return repr((config.optimizer, sorted(optimizer_kwargs(config).items(), key=lambda kv: kv[0])))


def layout(config: Any) -> Layout:
    """The state layout of the configured optimizer, from the probe (cached per setting);
    ConfigError in one line when it cannot serve stacked clients."""
    key = _setting(config)
    if key not in _LAYOUTS:
        try:
            found = _probe(config)
        except Exception as e:  # noqa: BLE001 - any failure of the user's optimizer is its refusal
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
            found = f"it cannot step a tensor from its gradient alone ({shown(why, 160)})"
        if isinstance(found, str):
            raise ConfigError(
                f"config key 'optimizer' = {config.optimizer} is refused: {found}; the local steps run one "
                "optimizer over every client's stacked parameters, which needs an elementwise update (each "
                "client's row moved by its own gradient and state alone); use an elementwise one, e.g. "
                "optimizer=AdamW, SGD, RMSprop, Adagrad"
            )
        _LAYOUTS[key] = found
    return _LAYOUTS[key]


def _check_args(config: Any) -> None:
    cls = optimizer_class(config.optimizer)
    for bad, fix in (("lr", "the learning rate is alpha"), ("params", "the parameters are the clients'")):
        if bad in config.optimizer_args:
            raise ConfigError(f"config key 'optimizer_args' sets {bad!r}, which the run sets: {fix}")
    if config.weight_decay is not None and "weight_decay" in config.optimizer_args:
        raise ConfigError(
            "config key 'weight_decay' and optimizer_args.weight_decay are both set; keep one of them"
        )
    accepted = accepted_args(cls)
    if config.weight_decay is not None and "weight_decay" not in accepted:
        raise ConfigError(
            f"config key 'weight_decay' = {config.weight_decay}: optimizer={config.optimizer} takes no "
            "weight_decay; remove it, or choose an optimizer that takes one (SGD, Adam, AdamW, RMSprop)"
        )


def _probe(config: Any) -> Layout | str:
    """A few steps on a stacked ``[2, 3]`` parameter and on each row alone: the same rows, and
    state rows or single numbers, or why not (a string)."""
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    grads = torch.randn(_PROBE_STEPS, 2, 3, generator=gen, dtype=torch.float64)
    stacked, alone = p0.clone(), [p0[i].clone() for i in range(2)]
    opt, opts = build(config, [stacked], 0.01), [build(config, [a], 0.01) for a in alone]
    for g in grads:
        stacked.grad = g.clone()
        opt.step()
        for a, o, gi in zip(alone, opts, g, strict=True):
            a.grad = gi.clone()
            o.step()
    if not torch.allclose(stacked, torch.stack(alone), rtol=1e-9, atol=1e-12):
        return "its update of one row depends on the others (stepped stacked it differs from each row alone)"
    if not _separate(config, p0, grads, torch.stack(alone)):
        return "its update of one tensor depends on the others it is given (a norm or mean over them)"
    rows: list[str] = []
    scalars: list[str] = []
    kinds: list[torch.dtype | type] = []
    for name, value in sorted(opt.state[stacked].items()):
        if isinstance(value, torch.Tensor) and value.shape == stacked.shape and value.dtype == stacked.dtype:
            rows.append(name)
        elif isinstance(value, torch.Tensor) and value.numel() == 1:
            scalars.append(name)
            kinds.append(value.dtype)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            scalars.append(name)
            kinds.append(type(value))
        else:
            return f"it keeps state {name!r} that is neither shaped like the parameter nor one number"
    on_device = bool(opt.defaults.get("fused") or opt.defaults.get("capturable"))
    return Layout(tuple(rows), tuple(scalars), tuple(kinds), on_device)


def _separate(config: Any, p0: torch.Tensor, grads: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether one instance over the rows as separate tensors (clients grouped by their step
    counts, ``algorithms/training/optim.py``) moves them as each alone."""
    rows = [p0[i].clone() for i in range(len(p0))]
    opt = build(config, rows, 0.01)
    for g in grads:
        for r, gi in zip(rows, g, strict=True):
            r.grad = gi.clone()
        opt.step()
    return torch.allclose(torch.stack(rows), want, rtol=1e-9, atol=1e-12)


def check(config: Any) -> None:
    """Refuse (ConfigError, one line) an optimizer the stacked local steps cannot run."""
    if custom(config):
        _check_args(config)
        layout(config)


@declare_keys("optimizer")
@dataclass(frozen=True)
class OptimizerKeys(Keys):
    """The built-in optimizers' own keys and a named optimizer's arguments (``optimizer`` picks one)."""

    optimizer_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Keyword arguments of `optimizer`, `optimizer_args.KEY=VALUE` (e.g. "
            "`optimizer_args.betas=[0.9,0.99]`, `optimizer_args.momentum=0.9`); not `lr` (that is `alpha`)."
        },
    )
    momentum: float = key(
        0.9,
        "`optimizer=momentum`: the momentum `mu` (`buf <- mu buf + g`).",
        rule="0 <= momentum < 1",
    )
    adam_beta1: float = key(
        0.9,
        "`optimizer=adam`: decay of the first moment.",
        rule="0 <= adam_beta1 < 1",
    )
    adam_beta2: float = key(
        0.999,
        "`optimizer=adam`: decay of the second moment.",
        rule="0 <= adam_beta2 < 1",
    )
    adam_eps: float = key(
        1e-8,
        "`optimizer=adam`: added to the root of the second moment.",
        rule="adam_eps > 0",
    )
