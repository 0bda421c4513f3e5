"""Mini-batch augmentation (config key ``transform``): a batched tensor transform applied to each
client's training batch on the device, before the forward pass of local training (never in
evaluation).

A transform is a callable ``x [B, ...] -> x' [B, ...]`` of the same shape (e.g. a
``torchvision.transforms.v2.Compose`` of batched random crops and flips, or any function of torch
operations): the built-in ``random-crop-flip`` (:func:`random_crop_flip`, pure torch), a
``module:function`` (``transform_args`` its keyword arguments), or a Python callable. It is applied
client by client to that client's real samples (the rows before its padding), outside the batched
gradient, under ``torch.random.fork_rng`` seeded from the client's own stream (kind
:data:`TRANSFORM`): the same draws whichever process holds the client, and on resume (the streams
are checkpointed). A run without a transform takes none of this path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .plugins import call_with, first_line, load_spec, resolve
from .spelling import setting
from .streams import stream

TRANSFORM = 5  # stream kind of each client's augmentation seeds (sheaf_fmtl.streams)
Transform = Callable[[torch.Tensor], torch.Tensor]


def random_crop_flip(x: torch.Tensor, padding: int = 4, flip: bool = True) -> torch.Tensor:
    """Per sample of ``x [B, C, H, W]`` (or ``[B, H, W]``): zero-pad ``padding`` pixels on each side,
    crop ``H x W`` at a uniformly random offset, and flip left-right with probability 1/2 (the
    CIFAR recipe; torchvision's ``RandomCrop(padding=p)`` + ``RandomHorizontalFlip()``), drawn from
    torch's global generator."""
    if x.ndim not in (3, 4):
        raise ValueError(
            f"random-crop-flip needs image batches [B, C, H, W] or [B, H, W]; got {list(x.shape)}"
        )
    img = x if x.ndim == 4 else x.unsqueeze(1)
    b, c, h, w = img.shape
    padded = F.pad(img, (padding,) * 4)
    top = torch.randint(0, 2 * padding + 1, (b,), device=x.device)
    left = torch.randint(0, 2 * padding + 1, (b,), device=x.device)
    rows = (top[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (left[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    out = padded.gather(2, rows.expand(b, c, h, padded.shape[3])).gather(3, cols.expand(b, c, h, w))
    if flip:
        flipped = torch.rand(b, device=x.device) < 0.5
        out = torch.where(flipped[:, None, None, None], out.flip(-1), out)
    return out if x.ndim == 4 else out.squeeze(1)


BUILT_IN: dict[str, Callable[..., torch.Tensor]] = {"random-crop-flip": random_crop_flip}


def resolve_transform(spec: str, args: dict[str, Any]) -> Transform | None:
    """The transform config key ``transform`` names (``none``: ``None``), with ``transform_args``."""
    if spec in ("", "none"):
        return None
    if spec in BUILT_IN:
        fn, kwargs = BUILT_IN[spec], dict(args)
        return lambda x: fn(x, **kwargs)
    obj = resolve("transform", spec) if not args else load_spec("transform", spec)
    if args:
        try:
            return call_with(obj, (), dict(args))  # type: ignore[no-any-return]
        except Exception as e:
            raise ValueError(
                f"{setting('transform', spec)} with transform_args {args}: building it raised "
                f"{type(e).__name__}: {first_line(e)}"
            ) from None
    return obj  # type: ignore[no-any-return]


class TransformError(ValueError):
    """The run's transform raised (one line naming it, the client, and the error's type and whole
    message; the error itself is its ``__cause__``)."""


def whole_message(e: BaseException) -> str:
    """``e``'s type and its whole message on one line (its lines joined by `` | ``)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {' | '.join(lines)}" if lines else type(e).__name__


class BatchTransform:
    """``transform`` applied to each client's batch, seeded from the client's own stream (``name``:
    how the config spells it, for an error it raises)."""

    def __init__(
        self, transform: Transform, seed: int, clients: Iterable[int], name: str = "transform"
    ) -> None:
        self.transform = transform
        self.name = name
        self.gens = {int(c): stream(seed, TRANSFORM, int(c)) for c in clients}

    def apply(self, x: torch.Tensor, mask: torch.Tensor, clients: Sequence[int]) -> torch.Tensor:
        """``x [C', B, ...]`` with each client's real rows (``mask``) transformed; padding as it was."""
        counts = mask.sum(1).to("cpu", torch.long).tolist()  # (host read: only with a transform)
        out = x.clone()
        devices = [x.device] if x.is_cuda else []
        for k, (client, n) in enumerate(zip(clients, counts, strict=True)):
            seed = int(torch.randint(2**62, (), generator=self.gens[int(client)]))
            if n == 0:
                continue
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                done = self._call(x[k, :n], int(client))
            if not isinstance(done, torch.Tensor) or done.shape != x[k, :n].shape:
                got = list(done.shape) if isinstance(done, torch.Tensor) else type(done).__name__
                raise TransformError(
                    f"config key 'transform' returned {got} for a batch {list(x[k, :n].shape)}; a transform "
                    "must keep the batch's shape (e.g. pad before cropping)"
                )
            out[k, :n] = done.to(x.dtype)
        return out

    def _call(self, x: torch.Tensor, client: int) -> Any:  # noqa: ANN401 - what the user's code returns
        """The transform of client ``client``'s batch ``x``; what it raises, as a :class:`TransformError`."""
        try:
            return self.transform(x)
        except Exception as e:  # noqa: BLE001 - the user's code: any error, named in one line
            raise TransformError(
                f"config key 'transform' = {self.name} raised {whole_message(e)} (on client {client}'s "
                f"training batch {list(x.shape)} of {x.dtype}); fix the transform, or "
                f"{setting('transform', 'none')}"
            ) from e

    def state(self) -> dict[int, torch.Tensor]:
        return {c: g.get_state() for c, g in self.gens.items()}

    def load_state(self, state: dict[int, torch.Tensor]) -> None:
        for c, g in self.gens.items():
            g.set_state(state[c])


def batch_transform(
    spec: str, args: dict[str, Any], seed: int, clients: Iterable[int]
) -> BatchTransform | None:
    """The run's :class:`BatchTransform` (config keys ``transform``, ``transform_args``; the run's
    ``seed``, the ``clients`` held here); ``None`` without a transform."""
    fn = resolve_transform(spec, args)
    return None if fn is None else BatchTransform(fn, seed, clients, spec)
