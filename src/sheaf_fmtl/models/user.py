"""The user's own models, losses and metrics (config keys ``model``, ``loss``, ``metric`` naming
``module:function`` or a Python object handed to :func:`sheaf_fmtl.run`).

- A model is a factory of fresh ``nn.Module``: a function ``make_model(i)`` called with the client
  id ``i`` (when it has a required positional parameter) or with none; a ``nn.Module`` class,
  called with no argument; a module instance, copied for every client; or a list of these, one per
  client. Parameters named ``input_shape`` / ``num_outputs`` are filled in by keyword. A client's
  initial parameters are those of the module the factory builds under a seed drawn from the run's
  seed and the client's id (so the factory must build its modules from torch's random generator).
  Every client's forward pass is batched with ``torch.func``; ``nn.Dropout`` layers train (each
  replaced by :class:`SeededDropout`, the same law with each client's mask drawn from the client's
  own stream), other dropout kinds are refused in one line, and evaluation runs without dropout.
- A loss is ``(outputs [B, ...], targets [B]) -> scalar``, the mean over the samples (PyTorch's
  default ``reduction="mean"``), or a per-sample ``[B]``; it is evaluated per sample, so that the
  padding of smaller clients stays out. A metric is ``(outputs, targets) -> float`` over one
  client's whole test set. With one output per sample (``[B, 1]``), regression targets are passed
  as ``[B, 1]`` too (so ``F.mse_loss`` and its kin compare sample with sample).
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.func import vmap

from ..plugins import call_with, first_line
from . import batchnorm

ModelFactory = Callable[[int, tuple[int, ...], int], nn.Module]
SHAPE_KEYWORDS = ("input_shape", "num_outputs")


class ModelError(ValueError):
    """One line naming the config key, the client and what was expected."""


def _wants_client(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has a required positional parameter besides :data:`SHAPE_KEYWORDS`."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional and p.default is p.empty and p.name not in SHAPE_KEYWORDS for p in params)


def model_factory(label: str, obj: Any, num_clients: int) -> ModelFactory:
    """``(i, input_shape, num_outputs) -> fresh module`` for the object config key ``model`` names
    (``label``: how the config spells it, for errors)."""
    where = f"config key 'model' = '{label}'"
    if isinstance(obj, Sequence) and not isinstance(obj, str | nn.Module):
        if len(obj) != num_clients:
            raise ModelError(
                f"{where}: {len(obj)} models for {num_clients} clients (one per client expected)"
            )
        per = [model_factory(label, o, num_clients) for o in obj]
        return lambda i, shape, out: per[i](i, shape, out)
    if isinstance(obj, nn.Module):
        return lambda i, shape, out: copy.deepcopy(obj)
    if not callable(obj):
        raise ModelError(f"{where}: a {type(obj).__name__}; expected an nn.Module factory (i -> nn.Module)")
    client = not (isinstance(obj, type) and issubclass(obj, nn.Module)) and _wants_client(obj)

    def make(i: int, shape: tuple[int, ...], out: int) -> nn.Module:
        named = {"input_shape": shape, "num_outputs": out}
        try:
            module = call_with(obj, (i,) if client else (), named)
        except Exception as e:
            raise ModelError(
                f"{where}: building client {i}'s model raised {type(e).__name__}: {first_line(e)}"
            ) from None
        if not isinstance(module, nn.Module):
            raise ModelError(
                f"{where}: returned a {type(module).__name__} for client {i}; expected a torch.nn.Module"
            )
        return module

    return make


class SeededDropout(nn.Module):
    """``nn.Dropout(p)`` whose random numbers are given: with ``noise`` (uniform ``[0, 1)``, the
    input's shape; set per client by :meth:`sheaf_fmtl.federation.Cohort.gradients`) it zeroes the
    entries whose noise is below ``p`` and scales the others by ``1 / (1 - p)``; without (evaluation)
    it is the identity, as ``nn.Dropout`` in eval mode."""

    noise: torch.Tensor

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.register_buffer("noise", torch.empty(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = self.noise
        if noise.numel() == 0:
            return x
        return x * (noise >= self.p).to(x.dtype) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


#: Dropout layers whose masks are not elementwise (channels, alpha dropout): refused.
OTHER_DROPOUT = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _seed_dropout(module: nn.Module, what: str) -> nn.Module:
    """``module`` with every ``nn.Dropout(p > 0)`` replaced by :class:`SeededDropout` (p = 0: the
    identity, kept); other dropout kinds refused in one line naming the layer."""
    for name, m in list(module.named_modules()):
        if isinstance(m, OTHER_DROPOUT):
            raise ModelError(
                f"{what} has a {type(m).__name__} layer ({name}): only nn.Dropout (elementwise) trains here, "
                "each client's mask drawn from its own stream; use nn.Dropout or remove the layer"
            )
        if name and type(m) is nn.Dropout and m.p > 0:
            parent = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            setattr(parent, name.rpartition(".")[2], SeededDropout(float(m.p)))
    return module


def dropout_layers(module: nn.Module) -> list[str]:
    """The names of ``module``'s :class:`SeededDropout` layers."""
    return [n for n, m in module.named_modules() if isinstance(m, SeededDropout)]


def check_module(module: nn.Module, what: str) -> nn.Module:
    """``module`` in eval mode with float32 parameters and seeded dropout (:class:`SeededDropout`);
    :class:`ModelError` for what the stacked federation cannot train (lazy parameters, buffers other
    than BatchNorm's, no parameters, dropout other than ``nn.Dropout``)."""
    lazy = [n for n, p in module.named_parameters() if isinstance(p, nn.parameter.UninitializedParameter)]
    if lazy:
        raise ModelError(
            f"{what} has parameters whose shape is set by its first input ({lazy[0]}; lazy modules): a "
            "client's parameter vector needs a fixed size; give the layer sizes explicitly"
        )
    refused = batchnorm.refusal(module)
    if refused:
        raise ModelError(f"{what} {refused}")
    if not any(True for _ in module.parameters()):
        raise ModelError(f"{what} has no parameters; there is nothing to train")
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    if frozen:
        raise ModelError(
            f"{what} has frozen parameters (requires_grad=False: {', '.join(frozen[:3])}): every parameter "
            "of a client's model is trained and exchanged here; unfreeze them, or apply the frozen part to "
            "the data beforehand and leave it out of the model"
        )
    first: dict[int, str] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            raise ModelError(
                f"{what} holds one parameter under two names ({first[id(p)]} and {n}: a submodule or "
                "parameter registered twice); a client's parameter vector holds each parameter once: "
                "register each layer once (reuse it in forward, not as a second attribute)"
            )
        first[id(p)] = n
    return _seed_dropout(module, what).float().eval()


def architecture(module: nn.Module) -> tuple[Any, ...]:
    """What makes two modules one cohort: their class, ``repr`` and parameter names and shapes."""
    params = tuple((n, tuple(p.shape)) for n, p in module.named_parameters())
    return (type(module).__module__, type(module).__qualname__, repr(module), params)


def shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in module.named_parameters()}


def probe(module: nn.Module, x: torch.Tensor, what: str) -> torch.Tensor:
    """``module(x)`` on a few samples; :class:`ModelError` when it fails or changes its parameters."""
    before = shapes(module)
    try:
        with torch.no_grad():
            out = module(x)
    except Exception as e:
        raise ModelError(
            f"{what} failed on its data (input {list(x.shape)}): {type(e).__name__}: {first_line(e)}"
        ) from None
    after = shapes(module)
    if after != before:
        name = next((n for n in after if before.get(n) != after[n]), next(iter(before), "?"))
        raise ModelError(
            f"{what} changed its parameters during a forward pass ({name}: {before.get(name)} -> "
            f"{after.get(name)}); a client's parameter vector needs a fixed size"
        )
    if not isinstance(out, torch.Tensor) or out.ndim == 0 or out.shape[0] != len(x):
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(f"{what} returned {got} for {len(x)} samples; expected a tensor [{len(x)}, ...]")
    if out.is_floating_point() and not bool(torch.isfinite(out).all()):
        raise ModelError(
            f"{what} outputs NaN or infinite values on its first {len(x)} samples (finite inputs), before "
            "any training step: the model's forward pass, not the step sizes"
        )
    return out


def shaped_targets(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Regression targets ``[B]`` as ``[B, 1]`` when the outputs are ``[B, 1]`` (module docstring)."""
    if y.is_floating_point() and y.ndim == out.ndim - 1 and out.ndim >= 2 and out.shape[-1] == 1:
        return y.unsqueeze(-1)
    return y


def name_of(fn: Any) -> str:
    """A metric's name for ``metrics.csv`` (``test_NAME``): its function's name, lower case."""
    raw = getattr(fn, "__name__", None) or type(fn).__name__
    return re.sub(r"\W+", "_", str(raw)).strip("_").lower() or "metric"


class UserLoss:
    """A user loss as per-sample values ``[B]`` (module docstring); :meth:`check` decides how."""

    def __init__(self, fn: Callable[..., Any], label: str) -> None:
        self.fn, self.label, self.vector = fn, label, False

    def _one(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.fn(out.unsqueeze(0), shaped_targets(out.unsqueeze(0), y.unsqueeze(0))))

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.vector:
            return cast("torch.Tensor", self.fn(out, shaped_targets(out, y)))
        return vmap(self._one)(out, y)

    def check(self, out: torch.Tensor, y: torch.Tensor) -> None:
        """Decide scalar or per-sample from ``out`` (``B >= 2`` samples); :class:`ModelError` when
        the loss fails, is not a scalar or ``[B]``, or a scalar is not the mean of its samples."""
        where = f"config key 'loss' = '{self.label}'"
        shapes_ = f"outputs {list(out.shape)}, targets {list(shaped_targets(out, y).shape)}"
        try:
            self._check_differentiable(out, y, where, shapes_)
            whole = torch.as_tensor(self.fn(out, shaped_targets(out, y)))
            self.vector = whole.shape == (len(out),)
            if not self.vector and whole.ndim != 0:
                raise ModelError(
                    f"{where} returned {list(whole.shape)} ({shapes_}); expected a scalar or [{len(out)}]"
                )
            each = self(out, y)
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(f"{where} failed ({shapes_}): {type(e).__name__}: {first_line(e)}") from None
        if not bool(torch.isfinite(whole).all()):
            raise ModelError(f"{where} is not finite on the first samples ({shapes_})")
        if not self.vector and not math.isclose(float(whole), float(each.mean()), rel_tol=1e-4, abs_tol=1e-6):
            raise ModelError(
                f"{where}: its value on {len(out)} samples ({float(whole):.6g}) is not the mean of their "
                f"single-sample values ({float(each.mean()):.6g}; {shapes_}); the loss is taken per sample "
                "to leave padding out, so give a mean over the samples (reduction='mean')"
            )

    def _check_differentiable(self, out: torch.Tensor, y: torch.Tensor, where: str, shapes_: str) -> None:
        """The loss on outputs that require a gradient must be a floating-point tensor that
        carries it (not a Python number, an integer tensor, or a tensor cut from the outputs)."""
        live = out.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            value = self.fn(live, shaped_targets(live, y))
        if not isinstance(value, torch.Tensor):
            raise ModelError(
                f"{where} returned a {type(value).__name__} ({shapes_}); expected a floating-point tensor "
                "computed from the outputs with torch operations (a Python number carries no gradient)"
            )
        if not value.is_floating_point():
            raise ModelError(
                f"{where} returned a {value.dtype} tensor ({shapes_}); expected a floating-point tensor "
                "(an integer value, e.g. a count of errors, has no gradient)"
            )
        if not value.requires_grad:
            raise ModelError(
                f"{where} returned a tensor detached from the outputs ({shapes_}): no gradient reaches the "
                "model; compute it with torch operations on the outputs (no .detach(), .item(), numpy)"
            )


class UserMetric:
    """A user metric ``(outputs, targets) -> float`` over one client's test set."""

    def __init__(self, fn: Callable[..., Any], label: str) -> None:
        self.fn, self.label, self.name = fn, label, name_of(fn)

    def __call__(self, out: torch.Tensor, y: torch.Tensor) -> float:
        return float(self.fn(out, shaped_targets(out, y)))

    def check(self, out: torch.Tensor, y: torch.Tensor) -> None:
        try:
            value = self(out, y)
        except Exception as e:
            raise ModelError(
                f"config key 'metric' = '{self.label}' failed (outputs {list(out.shape)}): "
                f"{type(e).__name__}: {first_line(e)}; expected (outputs, targets) -> float"
            ) from None
        if not math.isfinite(value):
            raise ModelError(f"config key 'metric' = '{self.label}' is not finite on the first samples")


def dropout_input_shapes(module: nn.Module, x: torch.Tensor, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The per-sample input shape of each layer ``names`` of ``module`` on the sample batch ``x``."""
    shapes: dict[str, tuple[int, ...]] = {}
    hooks = [
        module.get_submodule(n).register_forward_pre_hook(
            lambda _m, args, n=n: shapes.__setitem__(n, tuple(args[0].shape[1:]))
        )
        for n in names
    ]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in hooks:
            h.remove()
    return shapes
