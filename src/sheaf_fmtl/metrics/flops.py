"""Floating-point operations of a run: local training, measured; the coupling, counted analytically.

Convention (the same for every term): one multiply-add is 2 FLOPs, and only matrix products count,
as :class:`torch.utils.flop_counter.FlopCounterMode` does (it counts matmuls and convolutions, no
elementwise op). Evaluation (test metric, reported training loss) is not training and is excluded.

- ``flops_local``: one sample's forward + backward pass of each architecture is counted by
  ``FlopCounterMode`` on a CPU copy of the model (gradients w.r.t. the parameters only, as the
  stacked gradients take them), times the number of real samples (padding excluded) every gradient
  call of the run used, counted per cohort on the device by :class:`SampleCounter`. For the
  tabular models (``Flatten`` + one ``Linear``) the count is its closed form ``4 in out`` (forward
  ``W x`` and ``grad W``, what ``FlopCounterMode`` counts, checked in the tests): the counter's first
  use imports ``torch._dynamo``, several seconds that a tabular run would otherwise spend on it.
- ``flops_sheaf`` (Sheaf-FMTL): with ``M = sum_{half-edges i->j} d_ij d_i`` (every map's elements),
  each message ``P_ij theta_i`` costs ``2 M`` over the graph (paper eq. (18) ``thetaupdate``, the terms
  exchanged), each coupling term ``sum_j P_ij^T (P_ij theta_i - P_ji theta_j)`` ``2 M`` (eq.
  (18) ``thetaupdate``), and each map step's rank-one update ``P_ij - eta lam r_ij theta_i^T`` ``2 M``
  (eq. (19) ``pijaupdate``). :func:`sheaf_products` says how many of each a run takes.
- ``flops_aggregation`` (baselines): combining whole models, 2 FLOPs per coordinate combined:
  dFedU ``2 d H`` per coupling step (``theta_i - theta_j`` and the sum over neighbours, ``H``
  half-edges), D-PSGD ``2 d (H + N)`` per round (the mixing ``sum_j w_ij x_j``; ``partial`` mixes
  its body's ``d_u`` coordinates only), the server baselines ``2 d N`` per round (the weighted
  average). Their proximal terms and SGD updates are elementwise and not counted, like Sheaf-FMTL's
  residuals and SGD updates. Fine-tuning before scoring (``fedavg-ft``, ``dpsgd-ft``) is local
  training: its gradients are in ``flops_local``.

The paper's FLOPs column is in units of 1e12.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..algorithms.protocol.algorithm import State
from ..config.registry import algorithm_spec
from ..models.linear import linear_shape

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..federation import Cohorts
    from ..sheaf.graph import ClientGraph


def per_sample_flops(
    module: nn.Module, input_shape: tuple[int, ...], task: str, loss: Callable[..., Any] | None = None
) -> int:
    """FLOPs of one sample's forward and backward pass: ``4 in out`` for ``Flatten`` + ``Linear``
    with the task's loss, :func:`measured_flops` for any other model or a user loss."""
    io = linear_shape(module)
    if io is not None and loss is None:
        return 4 * io[0] * io[1]
    if loss is not None:  # measured each time: a loss has no key that outlives it
        return measured_flops(module, input_shape, task, loss)
    key = (type(module).__module__, repr(module), input_shape, task)
    if key not in _MEASURED:
        _MEASURED[key] = measured_flops(module, input_shape, task, loss)
    return _MEASURED[key]


_MEASURED: dict[tuple[Any, ...], int] = {}  # per architecture, in this process


def measured_flops(
    module: nn.Module, input_shape: tuple[int, ...], task: str, loss: Callable[..., Any] | None = None
) -> int:
    """FLOPs of one sample's forward pass, loss and backward pass (parameter gradients only).

    Args:
        module: the model (a CPU copy is measured; the original is left untouched).
        input_shape: one sample's feature shape.
        task: ``classification`` (cross-entropy on class 0) or ``regression`` (squared loss).
        loss: a user loss, per sample (``(outputs, targets) -> [B]``), in place of the task's.
    Returns:
        FLOPs counted by ``FlopCounterMode`` (matmuls and convolutions, 2 per multiply-add).
    """
    model = copy.deepcopy(module).cpu().float()
    x = torch.zeros((1, *input_shape))
    target = torch.zeros(1, dtype=torch.long if task == "classification" else torch.float32)
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if loss is not None:
            value = loss(out, target).sum()
        elif task == "classification":
            value = F.cross_entropy(out, target)
        else:
            value = (out.reshape(-1) ** 2).sum()
        value.backward()
    return int(counter.get_total_flops())


class SampleCounter:
    """Counts the real samples (mask entries) of every gradient call of a federation's cohorts.

    Wraps each cohort's ``gradients`` while attached; the counts stay on the device (no host-device
    sync in a round) until :meth:`samples` reads them.
    """

    def __init__(self, fed: Cohorts) -> None:
        self.fed = fed
        self.counts = [torch.zeros((), dtype=torch.int64, device=c.device) for c in fed.cohorts]
        for k, cohort in enumerate(fed.cohorts):
            cohort.gradients = self._wrap(k, cohort.gradients)  # type: ignore[method-assign]

    def _wrap(self, k: int, gradients: Any) -> Any:
        def counted(thetas: torch.Tensor, batch: Any, *noise: Any) -> tuple[torch.Tensor, torch.Tensor]:
            self.counts[k] += batch[2].detach().sum().to(torch.int64)  # batch = (x, y, mask, ...)
            return cast("tuple[torch.Tensor, torch.Tensor]", gradients(thetas, batch, *noise))

        return counted

    def detach(self) -> None:
        """Restore the cohorts' own ``gradients``."""
        for cohort in self.fed.cohorts:
            cohort.__dict__.pop("gradients", None)

    def samples(self) -> list[int]:
        """Samples processed per cohort so far."""
        return [int(c) for c in self.counts]


def local_flops(fed: Cohorts, samples: list[int]) -> int:
    """``sum_c per_sample_flops(cohort c) * samples[c]`` (see :func:`per_sample_flops`)."""
    total = 0
    for cohort, n in zip(fed.cohorts, samples, strict=True):
        if n:
            shape = cohort.feature_shape
            total += per_sample_flops(cohort.module, shape, cohort.task, cohort.loss_fn) * n
    return total


def map_elements(layout: Any) -> int:
    """``M = sum_{half-edges} d_ij d_i``: the elements of every restriction map of a sheaf layout."""
    return sum(b.size * b.edge_dim * b.node_dim for b in layout.buckets)


def sheaf_products(config: RunConfig, rounds: int) -> dict[str, int]:
    """How many graph-wide map products Sheaf-FMTL (``algorithms/maps/learned.py``) takes in ``rounds``
    rounds: ``messages`` (``P_ij theta_i``), ``coupling`` (``P_ij^T r_ij``), ``map_steps`` (rank-one).

    Local-epochs mode: a round sends the messages once (twice in ``literal`` mode with learned maps:
    again after the map step), takes one map step and one coupling step. Otherwise: ``local_steps``
    theta steps a round, each after the first with fresh own messages; the messages for the first
    step are exchanged every round, except in ``compact`` mode with learned maps, where after round
    1 they are rebuilt from the map step's messages (no product).
    """
    learn = config.learns_maps
    compact = config.message_mode == "compact"
    if config.local_epochs > 0:
        return {
            "messages": rounds * (1 + int(learn and not compact)),
            "coupling": rounds,
            "map_steps": rounds * int(learn),
        }
    s = config.local_steps
    greetings = min(rounds, 1) if learn and compact else rounds
    return {
        "messages": greetings + rounds * int(learn) + rounds * (s - 1),
        "coupling": rounds * s,
        "map_steps": rounds * int(learn),
    }


def sheaf_flops(config: RunConfig, layout: Any, rounds: int) -> int:
    """``2 M (messages + coupling + map_steps)`` (module docstring; eqs. 18-19)."""
    return 2 * map_elements(layout) * sum(sheaf_products(config, rounds).values())


def aggregation_flops(config: RunConfig, dim: int, graph: ClientGraph, rounds: int) -> int:
    """The baselines' model combinations (module docstring; each algorithm's registry entry counts
    a round's); 0 for Sheaf-FMTL and local training."""
    spec = algorithm_spec(config.algorithm)
    if spec is None or spec.aggregation is None:
        return 0
    return spec.aggregation(config, dim, graph.num_nodes, graph.num_half_edges) * rounds


def run_flops(
    config: RunConfig, fed: Cohorts, graph: ClientGraph, state: Any, samples: list[int], rounds: int
) -> dict[str, int]:
    """The summary's FLOP fields for ``rounds`` completed rounds.

    Returns:
        ``flops`` (the sum), ``flops_local``, ``flops_sheaf``, ``flops_aggregation``.
    """
    own_local, own_sheaf = (
        state.flop_terms(config, fed, samples, rounds, per_sample_flops)
        if isinstance(state, State)
        else (None, None)
    )
    local = own_local if own_local is not None else local_flops(fed, samples)
    layout = getattr(state, "layout", None)
    if own_sheaf is not None:  # a state that counts its coupling itself (maps=redrawn, proxy, ...)
        sheaf = own_sheaf
    else:
        sheaf = sheaf_flops(config, layout, rounds) if layout is not None else 0
    mixed = getattr(state, "mixed_dim", None)  # a model averaged in part (algorithm=partial): that part
    agg = aggregation_flops(config, mixed or fed.cohorts[0].dim, graph, rounds)
    total = local + sheaf + agg
    return {"flops": total, "flops_local": local, "flops_sheaf": sheaf, "flops_aggregation": agg}
