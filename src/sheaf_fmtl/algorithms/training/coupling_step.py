"""The coupling's own step: how far the exchange pulls a model each round, whatever the local
optimizer does (config key ``coupling_step``).

With local epochs (``local_epochs = E > 0``) a round is local work, then the exchange and one
coupling step (paper eq. (18) ``thetaupdate`` without the gradient):

    ``theta_i <- theta_i - c_i lam sum_j a_ij P_ij^T (P_ij theta_i - P_ji theta_j)``

(dFedU: ``P_ij = I``). Its *pull per round* is ``c_i lam``. The paper's SGD ties ``c`` to the local
step ``alpha``; under another optimizer that ties the pull to a number that means something else
(AdamW at ``1e-3`` pulls 50 times less than SGD at 0.05 while its models move about 8 times less),
and a pull passed through Adam's normalisation or momentum would be rescaled per coordinate by
statistics of the data gradients alone. So the coupling step is taken outside the optimizer, with a
step of its own:

- ``coupling_step = c`` (a number): ``c`` every round, for every client (``coupling_step = alpha``
  is the coupling of the earlier releases, tied to the optimizer's learning rate);
- ``coupling_step = null`` (the default): the local optimizer's *effective step* ``s_i``, what plain
  SGD's step size would have moved client ``i`` as far along its gradients this round,

      ``s_i = -<Delta_i, G_i> / ||G_i||^2``,   ``Delta_i`` the round's local displacement,
      ``G_i`` the sum of the gradients its optimizer was given

  (:func:`effective_step`; exactly ``alpha`` for plain SGD, which is not measured: ``alpha``;
  ``alpha / (1 - momentum)`` for heavy-ball SGD once its buffer is warm; for Adam a gradient-weighted
  mean of ``lr / sqrt(v)``, and a learning-rate schedule's current rate), times the *work factor*
  ``w = sqrt(max(1, S / 16))`` of a round of ``S`` local steps (:func:`work_factor`): the pulls of the
  map modes were chosen on the built-in problems, whose rounds take 2 to 13 steps, and the noise a
  round's local steps add to a model grows as the square root of their number (a random walk), so a
  CNN client taking 50 steps a round is pulled 1.8 times harder than one taking 3 (the same pull up to
  16 steps: the paper's protocol on its tabular data keeps its numbers).

Why the effective step: the models of a round of local SGD move ``alpha S`` along their gradients and
are pulled back by ``c lam``, so where the two balance (the fixed point) the coupling weighs
``c lam / (alpha S)`` against the local losses. Matching ``c`` to what the optimizer actually does
keeps that balance, and so the collaboration, under any optimizer and learning rate.

Stability: the step is capped so that ``c_i lam`` stays within the mode's largest stable pull,
``max_pull`` (exact averaging along the top eigenvector, ``1 / lambda_S``, as the ``lam`` rule; with
estimates, the rule's consensus-step limit); the run counts the client-rounds the cap held.

Where the coupling is a term of the objective differentiated in every local step (``local_epochs =
0``, the paper's learned maps ``maps = learned`` / ``fixed``, Ditto's and pFedMe's proximal terms), its
pull scales with ``alpha`` by construction and its fixed point does not depend on it: those keep
``alpha``, and ``maps = learned`` stays the paper's Algorithm 1 exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...config import RunConfig
from ..protocol.algorithm import Context, State
from .optim import plain

#: Local steps a round up to which the pull per round is the rule's as chosen (``sqrt`` beyond).
REFERENCE_STEPS = 16


def work_factor(steps: int) -> float:
    """``sqrt(max(1, steps / REFERENCE_STEPS))``: how much harder a round of ``steps`` local steps pulls."""
    return math.sqrt(max(1.0, steps / REFERENCE_STEPS))


def effective_step(before: torch.Tensor, after: torch.Tensor, grad_sum: torch.Tensor) -> torch.Tensor:
    """``[C]``: ``-<after_i - before_i, G_i> / ||G_i||^2`` per row (the SGD step size that moves each
    row as far along the sum of its gradients ``G_i`` as the local optimizer did), at least 0; NaN
    where a row was given no gradient."""
    moved = (after - before).flatten(1).double()
    g = grad_sum.flatten(1).double()
    norm = (g * g).sum(1)
    step = -(moved * g).sum(1) / norm.clamp(min=torch.finfo(torch.float64).tiny)
    return torch.where(norm > 0, step.clamp(min=0.0), torch.full_like(step, math.nan))


def measured(config: RunConfig) -> bool:
    """Whether the coupling step is measured from the local work (``coupling_step = null`` with an
    optimizer or schedule other than plain SGD at ``alpha``)."""
    return config.coupling_step is None and not plain(config)


def reference_step(config: RunConfig) -> float:
    """The step the start-up rules and checks take for ``c``: ``coupling_step`` when set, else
    ``alpha`` (a measured step is capped at run time instead)."""
    return config.coupling_step if config.coupling_step is not None else config.alpha


@dataclass
class CouplingStep:
    """The coupling step of one run: ``c_i`` per client and round (:meth:`steps`), capped at
    ``max_pull / lam``, and what ran (:meth:`totals`, :meth:`record`)."""

    config: RunConfig
    lam: float
    max_pull: float = math.inf  # the largest stable c lam (set by the algorithm at start-up)
    factor: float = 1.0  # work_factor of the round's local steps (set at start-up)

    def start(self, ctx: Context, largest: Callable[[], float]) -> None:
        """The work factor of a round's local steps and the largest stable pull ``c lam``
        (``largest()``, asked only where a cap can bind: a measured step or a work factor above 1)."""
        self.factor = work_factor(ctx.local_steps()) if ctx.epoch_mode else 1.0
        if self.lam > 0 and (measured(self.config) or self.factor > 1.0):
            self.max_pull = largest()

    @property
    def fixed(self) -> float | None:
        """The step when it is one number for every client and round (``None``: measured)."""
        if measured(self.config):
            return None
        if self.config.coupling_step is not None:  # as given
            return self.config.coupling_step
        step = self.config.alpha * self.factor
        if self.factor > 1.0 and self.lam > 0 and math.isfinite(self.max_pull):
            step = min(step, max(self.config.alpha, self.max_pull / self.lam))
        return step

    def steps(self, state: State, thetas: list[torch.Tensor]) -> list[torch.Tensor] | float:
        """This round's ``c`` per cohort ``[C, 1]`` (measured: from ``state.local_rate``, ``alpha``
        for a client given no gradient), or one number; added to the state's totals (on the
        device: nothing is read back)."""
        fixed = self.fixed
        clients = sum(len(t) for t in thetas)
        state.coupling_count += clients
        if fixed is not None:
            state.coupling_sum = state.coupling_sum + fixed * clients
            return fixed
        rates = state.local_rate or [torch.full((len(t),), math.nan) for t in thetas]
        cap = self.max_pull / self.lam if self.lam > 0 else math.inf
        out = []
        for t, rate in zip(thetas, rates, strict=True):
            c = torch.nan_to_num(rate.to(t.device, torch.float64), nan=self.config.alpha) * self.factor
            state.coupling_capped = state.coupling_capped + (c > cap).sum()
            c = c.clamp(max=cap)
            state.coupling_sum = state.coupling_sum + c.sum()
            out.append(c.to(t.dtype).view(-1, *[1] * (t.dim() - 1)))
        return out

    def record(self, totals: torch.Tensor) -> dict[str, object]:
        """``coupling_step`` (the rule that ran), ``coupling_step_mean`` (mean ``c`` over clients and
        rounds), ``pull_per_round`` (its ``c lam``) and ``coupling_step_capped`` (client-rounds the
        cap held), from every process's :func:`totals` summed."""
        total, count, capped = (float(v) for v in totals)
        fixed = self.fixed
        mean = total / count if count else (fixed if fixed is not None else math.nan)
        if self.config.coupling_step is not None:
            rule = f"coupling_step = {self.config.coupling_step:g}"
        elif fixed is None:
            rule = "the local optimizer's effective step, measured each round (-<Delta, G>/||G||^2)"
        else:
            rule = f"alpha = {self.config.alpha:g} (plain SGD)"
        if self.factor > 1.0 and self.config.coupling_step is None:
            rule += f", times the work factor sqrt(S/{REFERENCE_STEPS}) = {self.factor:.3g}"
        out: dict[str, object] = {
            "coupling_step": rule,
            "coupling_step_mean": float(f"{mean:.4g}"),
            "pull_per_round": float(f"{mean * self.lam:.4g}"),
        }
        if capped:
            out["coupling_step_capped"] = int(capped)
        return out


def totals(state: State) -> torch.Tensor:
    """``[sum of c, client-rounds, capped]`` (float64, on the CPU) of the coupling steps held here."""
    values = [state.coupling_sum, state.coupling_count, state.coupling_capped]
    return torch.stack([torch.as_tensor(v, dtype=torch.float64).cpu() for v in values])
