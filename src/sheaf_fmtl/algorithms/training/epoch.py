"""A round's local epochs (``local_epochs = E > 0``) as one step function of static shapes, run
eagerly or under ``torch.compile(fullgraph=True)`` (config key ``compile``).

The loop (:func:`loop_epochs`, ``compile = false``) gathers at step ``s`` the batch of the
clients with samples left, so the shapes change within an epoch (fewer clients, a shorter last
batch). The static step (``compile = true``) gives every step of a pass the same shapes: every
client of a cohort, ``B`` positions, zero-weight rows where a client has no sample left (past its
``n_i``, or once its pass is over). A zero-weight row adds nothing to the loss and a client
without a sample has a zero gradient and ``f_i = 0``, so the iterates are the loop's up to the
order of float sums, whether the epoch divides evenly or not; what changes is the work: a client
that ran out of samples still takes its share of the step's arithmetic (``benchmarks/
compile_step.py`` measures what that costs). A step's indices, masks and active flags are built
from the ``n_i`` and the epoch's permutation before the pass, so a step reads no tensor value on
the host (no sync) and takes the same graph each time; with another optimizer than plain SGD
the compiled step gives the gradients and :func:`.optim.step_cohort` steps the clients with a
sample (their flags known on the CPU from the ``n_i``), as :func:`.optim.local_step` does.

Which algorithms take it: those whose local epochs are plain local steps of their models
(:attr:`STATIC_EPOCH`); the others (two models a step: ``proxy``, ``ditto``; inner loops:
``pfedme``, ``perfedavg``; one part of the model a step: ``partial``; ``functional``), cohorts with
dropout or BatchNorm, and ``local_epochs = 0`` keep the loop, and the run says so (:func:`resolve_compile`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ...federation import Batch, EpochPlan
from ..protocol.algorithm import Context, State
from .coupling_step import effective_step
from .optim import init_state, local_step, plain, round_rate, step_cohort

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...federation import Cohort, Cohorts

#: ``algorithm`` (or ``sheaf-fmtl``'s ``maps`` mode) whose local epochs take the static step.
STATIC_EPOCH = frozenset(
    {"local", "dfedu", "dpsgd", "fedavg", "learned", "fixed", "redrawn", "features", "aligned"}
    | {"fedavg-ft", "dpsgd-ft"}  # their federations' local epochs (fine-tuning before scoring: the loop)
)
#: ``compile = null`` (auto) per device type: whether the static step runs compiled. On the CPU the
#: compiled step measured slower than the loop (``benchmarks/compile_step.py``); a GPU has no
#: side-by-side yet, so it keeps the loop too.
COMPILE_AUTO = {"cpu": False, "cuda": False}

#: ``(theta, x rows, y rows, idx [C, B], mask [C, B], lr) -> (new theta, or the gradients, f)``
StepFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
#: Per step of a pass: rows ``[C, B]``, weights ``[C, B]``, active flags ``[C]`` on the CPU.
Inputs = tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


def static_unsupported(config: RunConfig, fed: Cohorts) -> str | None:
    """Why the static step cannot run this config (``None``: it can)."""
    mode = config.maps if config.algorithm == "sheaf-fmtl" else config.algorithm
    if config.local_epochs <= 0:
        return "local_epochs = 0 (the local steps are coupled)"
    if mode not in STATIC_EPOCH:
        return f"{mode!r} (its local epochs are not plain local steps)"
    if any(getattr(c, "dropout", None) for c in fed.cohorts):
        return "models with dropout"
    if config.transform not in ("", "none"):
        return "a transform (applied to each client's batch outside the graph)"
    if any(getattr(c, "norms", None) is not None for c in fed.cohorts):
        return "models with BatchNorm (each client's statistics are updated outside the graph)"
    return None


def resolve_compile(config: RunConfig, fed: Cohorts) -> tuple[bool, str | None]:
    """``(compile, note)``: ``compile = null`` resolved for the device (:data:`COMPILE_AUTO`),
    ``False`` where the static step does not apply, with a one-line note when the config asked
    for it."""
    device = torch.device(config.device).type
    wanted = COMPILE_AUTO.get(device, False) if config.compile is None else config.compile
    why = static_unsupported(config, fed) if wanted else None
    if why is None:
        return wanted, None
    return False, f"compile: the local epochs run uncompiled for {why}" if config.compile else None


def local_epochs(ctx: Context, state: State, thetas: list[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    """A round's local epochs of every cohort stack: the static step when the run set one up
    (``ctx.static_epoch``: ``compile`` resolved to true) and the gradients come from batches, else
    the loop. Under an optimizer other than plain SGD, each client's effective step of the round
    goes to ``state.local_rate`` (:func:`.coupling_step.effective_step`, what the coupling step
    answers); plain SGD measures nothing (its step is ``alpha``)."""
    grad_sum = None if plain(ctx.config) else [torch.zeros_like(t) for t in thetas]
    runner = ctx.static_epoch
    if isinstance(runner, StaticEpoch) and ctx.gradient_source is None:
        after = runner.run(ctx, state, thetas, alpha, grad_sum)
    else:
        after = loop_epochs(ctx, state, thetas, alpha, grad_sum)
    if grad_sum is not None:
        state.local_rate = [effective_step(b, a, g) for b, a, g in zip(thetas, after, grad_sum, strict=True)]
    return after


def loop_epochs(
    ctx: Context,
    state: State,
    thetas: list[torch.Tensor],
    alpha: float,
    grad_sum: list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """``ctx.local_steps()`` steps, each on :meth:`Context.stochastic_gradients` (the batches of the
    clients with samples left) and :func:`.optim.local_step`; the gradients added into ``grad_sum``
    (per cohort, in place) when given."""
    for _ in range(ctx.local_steps()):
        grads, state.batch_loss = ctx.stochastic_gradients(thetas)
        if grad_sum is not None:
            for total, g in zip(grad_sum, grads, strict=True):
                total.add_(g)
        thetas = local_step(ctx, state, thetas, grads, alpha)
        del grads  # before the next step's: its memory serves the next gradients
    return thetas


@dataclass(eq=False)
class StaticEpoch:
    """The static step of each cohort (compiled once per cohort and shape) and the per-step
    masks, built from the ``n_i`` once per batch size."""

    compiled: bool = True
    _steps: dict[int, StepFn] = field(default_factory=dict, repr=False)
    _masks: dict[tuple[int, int], tuple[list[torch.Tensor], list[torch.Tensor]]] = field(
        default_factory=dict, repr=False
    )

    def run(
        self,
        ctx: Context,
        state: State,
        thetas: list[torch.Tensor],
        alpha: float,
        grad_sum: list[torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        """The round's ``local_epochs`` passes; the same iterates, losses, optimizer state, random
        streams and gradient sums as :func:`loop_epochs`."""
        config, fed = ctx.config, ctx.fed
        thetas = list(thetas)
        sgd = plain(config)
        if not sgd:
            init_state(config, state, thetas)
        for _ in range(config.local_epochs):
            plans = ctx.epoch_plans()
            per_cohort = [
                self._inputs(k, cohort, plan, config.batch_size)
                for k, (cohort, plan) in enumerate(zip(fed.cohorts, plans, strict=True))
            ]
            for s in range(ctx.steps_per_epoch()):
                lr = config.alpha if sgd else round_rate(ctx, state)
                losses = []
                for k, (cohort, (idx, masks, active)) in enumerate(zip(fed.cohorts, per_cohort, strict=True)):
                    if s >= len(idx):  # the cohort's pass is over: no step
                        losses.append(thetas[k].new_zeros(len(thetas[k])))
                        continue
                    rate = torch.full((), lr, dtype=thetas[k].dtype, device=thetas[k].device)
                    out, f = self._step(k, cohort, config)(
                        thetas[k], cohort.train.x, cohort.train.y, idx[s], masks[s], rate
                    )
                    if grad_sum is not None and not sgd:
                        grad_sum[k].add_(out)
                    thetas[k] = out if sgd else step_cohort(config, state, k, thetas[k], out, active[s], lr)
                    losses.append(f)
                state.batch_loss = fed.per_client(losses)
        ctx.last_batches = []
        return thetas

    def _inputs(self, k: int, cohort: Cohort, plan: EpochPlan, batch_size: int) -> Inputs:
        """Per step of ``plan``: stored rows ``[C, B]`` of ``cohort.train``, weights ``[C, B]`` and
        active flags ``[C]`` on the CPU (the masks from the ``n_i``, once per batch length)."""
        b = cohort.batch_len(batch_size)
        size, n_max = plan.order.shape
        flat = torch.nn.functional.pad(cohort.train.rows(plan.order), (0, plan.steps * b - n_max))
        idx = list(flat.view(size, plan.steps, b).transpose(0, 1).contiguous().unbind(0))
        if (k, b) not in self._masks:
            pos = torch.arange(plan.steps * b).view(plan.steps, 1, b)
            mask = (pos < cohort.n_host.view(1, -1, 1)).to(cohort.train.x.dtype)
            device = cohort.device
            self._masks[(k, b)] = (
                [m.to(device) for m in mask.unbind(0)],
                [m.sum(1) > 0 for m in mask.unbind(0)],
            )
        masks, active = self._masks[(k, b)]
        return idx, masks, active

    def _step(self, k: int, cohort: Cohort, config: RunConfig) -> StepFn:
        if k not in self._steps:
            fn = static_step(cohort, config)
            self._steps[k] = torch.compile(fn, fullgraph=True, dynamic=False) if self.compiled else fn
        return self._steps[k]


def static_step(cohort: Cohort, config: RunConfig) -> StepFn:
    """One local step of every client of ``cohort`` on the rows ``idx`` with weights ``mask``: a
    function of tensors alone (no host read, the same shapes every step). Plain SGD returns the new
    theta; another optimizer, the gradients (it steps outside the graph, :func:`.optim.step_cohort`)."""
    sgd = plain(config)

    def step(
        theta: torch.Tensor,
        x_rows: torch.Tensor,
        y_rows: torch.Tensor,
        idx: torch.Tensor,
        mask: torch.Tensor,
        lr: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        flat = idx.reshape(-1)
        x = x_rows.index_select(0, flat).view(*idx.shape, *x_rows.shape[1:])
        y = y_rows.index_select(0, flat).view(idx.shape)
        g, f = cohort.gradients(theta, Batch(x, y, mask))
        if sgd:  # a client without a sample has g = 0: theta stays as it is
            return theta - lr * g, f
        return g, f

    return step
