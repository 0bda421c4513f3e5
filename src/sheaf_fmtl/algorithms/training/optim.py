"""The optimizer and learning-rate schedule of the local steps (config keys ``optimizer``,
``optimizer_args``, ``weight_decay``, ``grad_clip``, ``lr_schedule``, ``lr_scheduler``): PyTorch's own
optimizer (:mod:`sheaf_fmtl.config.optimizers`), one instance over each cohort's stacked thetas.

An elementwise optimizer (the config checks it by a probe) moves each row of the stacked ``[C, d]``
parameter as it would move that client's parameters alone, so one ``step()`` serves every client of
a cohort. What is per client besides the rows is kept per client: the optimizer's single numbers
(the step count, NAdam's ``mu_product``, ...) ``[C, S]`` and the steps taken ``[C]``. A step runs
on the clients that have a batch, grouped by those numbers (one group, one ``step()``, when they
agree, as when every client steps every time); a client without a batch (no sample left in a local
epoch) is in no group and keeps its model and optimizer state, as ``torch.optim`` would with no
``step()`` call; a client's first step starts from the optimizer's own fresh state.

The state lives in the algorithm's state (``opt_rows``, ``opt_scalars``, ``opt_t``, ``opt_calls``),
so checkpoints carry it and a resumed run continues it bit for bit; each step replaces these tensors
(never writes them in place), so a client that sits a round out is put back whole (faults).

``grad_clip`` scales each client's gradient row to norm at most ``grad_clip`` (``torch.nn.utils.
clip_grad_norm_`` on that client's parameters alone). The learning rate of round ``r = 0, 1, ...``
(counted by the local steps taken, ``opt_calls // local steps per round``) is ``alpha``
(``constant``), ``alpha * lr_step_gamma ** (r // lr_step_every)`` (``step``), ``alpha * (1 + cos(pi
r / rounds)) / 2`` (``cosine``), or ``lr_scheduler``'s, stepped once per round. With the defaults
(``sgd``, ``constant``, nothing else set) :func:`local_step` is :func:`.steps.sgd_step` itself: the
same numbers as before these keys existed. Which algorithms take another optimizer or schedule is
checked with the config (:mod:`sheaf_fmtl.config.rules`).
"""

from __future__ import annotations

import math

import torch

from ...config import RunConfig
from ...config.optimizers import Layout, build, custom, layout
from ...config.schedulers import lr_table
from ...federation import Batch, Cohort
from ..protocol.algorithm import Context, State
from .steps import gradient, sgd_step, sgd_steps

#: ``(rows on the CPU or None for every row, whether these clients take their first step)``
Group = tuple[torch.Tensor | None, bool]


def plain(config: RunConfig) -> bool:
    """Whether the local steps are the paper's: plain SGD at the constant step size ``alpha``."""
    return not custom(config)


def learning_rate(config: RunConfig, round_index: int) -> float:
    """The step size of round ``round_index`` (0-based) under ``lr_schedule`` or ``lr_scheduler``."""
    if config.lr_scheduler:
        table = lr_table(config)
        return table[min(round_index, len(table) - 1)]
    if config.lr_schedule == "step":
        return float(config.alpha * config.lr_step_gamma ** (round_index // config.lr_step_every))
    if config.lr_schedule == "cosine":
        return (
            config.alpha * 0.5 * (1.0 + math.cos(math.pi * min(round_index, config.rounds) / config.rounds))
        )
    return config.alpha


def round_rate(ctx: Context, state: State) -> float:
    """The learning rate of the coming local step; counts it (``opt_calls``)."""
    lr = learning_rate(ctx.config, state.opt_calls // max(1, ctx.local_steps()))
    state.opt_calls += 1
    return lr


def local_step(
    ctx: Context, state: State, thetas: list[torch.Tensor], grads: list[torch.Tensor], alpha: float
) -> list[torch.Tensor]:
    """One local step of every cohort stack from the gradients ``grads``: ``theta <- theta - alpha g``
    (:func:`.steps.sgd_step`) by default, else the configured optimizer and schedule."""
    config = ctx.config
    if plain(config):
        return sgd_step(thetas, grads, alpha)
    init_state(config, state, thetas)
    lr = round_rate(ctx, state)
    batches = ctx.last_batches if len(ctx.last_batches) == len(thetas) else [True] * len(thetas)
    fed = getattr(ctx, "fed", None)  # (None: a bare context, e.g. a test's)
    cohorts = fed.cohorts if fed is not None and len(fed.cohorts) == len(thetas) else [None] * len(thetas)
    return [
        step_cohort(config, state, k, theta, g, stepping(b, len(theta), c), lr)
        for k, (theta, g, b, c) in enumerate(zip(thetas, grads, batches, cohorts, strict=True))
    ]


def init_state(config: RunConfig, state: State, thetas: list[torch.Tensor]) -> None:
    """Empty optimizer state for every cohort before the first step (no client has stepped)."""
    if state.opt_t:
        return
    lay = layout(config)
    state.opt_t = [torch.zeros(len(t), dtype=torch.int64) for t in thetas]
    state.opt_rows = [t.new_zeros(len(t), len(lay.rows), *t.shape[1:]) for t in thetas]
    state.opt_scalars = [torch.zeros(len(t), len(lay.scalars), dtype=torch.float64) for t in thetas]


def stepping(batch: Batch | bool | None, size: int, cohort: Cohort | None = None) -> torch.Tensor | None:
    """Which of the ``size`` clients a gradient step on ``batch`` moves, on the CPU (``None``: all of
    them; a gradient not drawn from batches, ``True``: all of them too); ``cohort``: the batch's,
    which knows its epoch steps' clients on the CPU (no device read)."""
    if batch is None:
        return torch.zeros(size, dtype=torch.bool)
    if isinstance(batch, bool) or batch.active is None:
        return None
    rows = batch.active.cpu() if cohort is None else cohort.active_host(batch.active)
    return torch.zeros(size, dtype=torch.bool).index_fill_(0, rows, True)


def clip_rows(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Each row of ``g`` scaled to norm at most ``max_norm`` (``clip_grad_norm_``'s formula)."""
    if max_norm <= 0:
        return g
    norms = torch.linalg.vector_norm(g.flatten(1), dim=1)
    coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    return g * coef.view(-1, *[1] * (g.dim() - 1))


def groups(counts: torch.Tensor, scalars: torch.Tensor, active: torch.Tensor | None) -> list[Group]:
    """The clients that step (``active``, ``None``: all), grouped by what their optimizers' state
    must agree on to share a ``step()``: a first step or not, and the single numbers."""
    key = torch.cat([(counts == 0).to(torch.float64)[:, None], scalars], 1)
    rows = torch.arange(len(counts)) if active is None else active.nonzero().flatten()
    if len(rows) == 0:
        return []
    picked = key.index_select(0, rows)
    if bool((picked == picked[0]).all()):
        return [(None if len(rows) == len(counts) else rows, bool(picked[0, 0]))]
    unique, inverse = torch.unique(picked, dim=0, return_inverse=True)
    return [(rows[inverse == u], bool(unique[u, 0])) for u in range(len(unique))]


def step_cohort(
    config: RunConfig,
    state: State,
    k: int,
    theta: torch.Tensor,
    g: torch.Tensor,
    active: torch.Tensor | None,
    lr: float,
) -> torch.Tensor:
    """One optimizer step of cohort ``k``'s stack ``theta`` from its gradients ``g`` on the clients
    ``active`` (on the CPU; ``None``: all); the new theta, its optimizer state replaced in ``state``.
    Each group of clients is one parameter of one optimizer instance (one ``step()``, the state of
    each group its own)."""
    lay = layout(config)
    g = clip_rows(g, config.grad_clip)
    counts, scalars = state.opt_t[k].cpu(), state.opt_scalars[k].cpu()
    rows = state.opt_rows[k]
    grouped = groups(counts, scalars, active)
    parts = [_gather(lay, theta, g, rows, scalars, idx, first) for idx, first in grouped]
    new_theta, new_rows, new_scalars = theta, rows, scalars
    if parts:
        opt = build(config, [p for p, _, _, _ in parts], lr)
        for p, grad, _, saved in parts:
            p.grad = grad
            if saved is not None:
                opt.state[p] = saved
        opt.step()
    for (idx, _), (p, _, buf, _) in zip(grouped, parts, strict=True):
        values = _collect(lay, opt.state[p], buf)
        if idx is None:  # every client: the group's tensors are the new ones
            new_theta, new_rows, new_scalars = p, buf, values.expand(len(counts), -1).clone()
            continue
        if new_theta is theta:  # (copies, written in place from here on: the state's are kept)
            new_theta, new_rows, new_scalars = theta.clone(), rows.clone(), scalars.clone()
        where = to_device(idx, theta.device)
        new_theta.index_copy_(0, where, p)
        new_rows.index_copy_(0, where, buf)
        new_scalars.index_copy_(0, idx, values.expand(len(idx), -1))
    state.opt_t = _replaced(state.opt_t, k, counts + (1 if active is None else active.to(torch.int64)))
    state.opt_rows = _replaced(state.opt_rows, k, new_rows)
    state.opt_scalars = _replaced(state.opt_scalars, k, new_scalars)
    return new_theta


def to_device(idx: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host index on ``device``, without waiting for the device (pinned, non-blocking on CUDA)."""
    if device.type != "cuda":
        return idx.to(device)
    return idx.pin_memory().to(device, non_blocking=True)


def _replaced(items: list[torch.Tensor], k: int, value: torch.Tensor) -> list[torch.Tensor]:
    """A new list: ``items`` with entry ``k`` replaced (the old list may be a fault snapshot's)."""
    return [value if j == k else t for j, t in enumerate(items)]


def _gather(
    lay: Layout,
    theta: torch.Tensor,
    g: torch.Tensor,
    rows: torch.Tensor,
    scalars: torch.Tensor,
    idx: torch.Tensor | None,
    first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, object] | None]:
    """The clients ``idx`` (``None``: all), whose single numbers agree, as one parameter: copies of
    their rows of theta, of the gradients and of the state ``[n, J, d]``, and the optimizer's state
    over views of the latter (``None`` for a first step: the optimizer's own fresh state)."""
    if idx is None:
        p, grad, buf, one = theta.clone(), g.clone(), rows.clone(), 0
    else:
        where = to_device(idx, theta.device)
        p, grad, buf = theta.index_select(0, where), g.index_select(0, where), rows.index_select(0, where)
        one = int(idx[0])
    if first:
        return p, grad, buf, None
    saved: dict[str, object] = {name: buf[:, j] for j, name in enumerate(lay.rows)}
    for j, (name, kind) in enumerate(zip(lay.scalars, lay.kinds, strict=True)):
        value = scalars[one, j]
        if isinstance(kind, torch.dtype):
            saved[name] = value.to(p.device if lay.on_device else "cpu", kind, copy=True)
        else:
            saved[name] = kind(value.item())
    return p, grad, buf, saved


def _collect(lay: Layout, after: dict[str, object], buf: torch.Tensor) -> torch.Tensor:
    """A group's state after the step: its tensors into ``buf`` (where the optimizer did not
    update the views in place, or made them afresh), its single numbers as ``[1, S]`` float64."""
    for j, name in enumerate(lay.rows):
        view, now = buf[:, j], after[name]
        assert isinstance(now, torch.Tensor)
        if now.data_ptr() != view.data_ptr() or now.stride() != view.stride():
            view.copy_(now)
    values = [torch.as_tensor(after[name]).to("cpu", torch.float64) for name in lay.scalars]
    return torch.stack(values).view(1, -1) if values else torch.zeros(1, 0, dtype=torch.float64)


def local_steps(ctx: Context, state: State, theta: torch.Tensor, steps: int, alpha: float) -> torch.Tensor:
    """``steps`` local steps of a one-cohort stack from fresh mini-batches (:func:`.steps.sgd_steps`
    with the configured optimizer)."""
    if plain(ctx.config):
        return sgd_steps(ctx, state, theta, steps, alpha)
    for _ in range(steps):
        theta = local_step(ctx, state, [theta], [gradient(ctx, theta, state)], alpha)[0]
    return theta
