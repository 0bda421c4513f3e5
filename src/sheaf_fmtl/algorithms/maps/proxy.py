"""Sheaf-FMTL between clients of different architectures through proxies: ``maps = proxy``
(ProxyFL, Kalra et al. 2023; deep mutual learning, Zhang et al. 2018).

Each client ``i`` holds its private model ``theta_i`` (any architecture) and a proxy ``phi_i`` of
one architecture common to every client (``proxy_model``; default the run's model with the fewest
parameters). The node stalk is ``theta_i (+) phi_i`` and the restriction maps of every edge select
the proxy, ``P_ij (theta_i, phi_i) = S_(e,t) phi_i``: the proxies are coupled by the coordinate
machinery of :mod:`.sheaf_coordinates` (``maps = redrawn`` selections over the proxies with
``gamma = proxy_gamma``; the default 1 couples the whole proxy every round, dFedU on the proxies),
and the private model never leaves the client.

Inside ``f_i`` the two models learn from each other on the client's own mini-batches:
    ``CE(theta_i) + CE(phi_i) + distill (KL(p_phi || p_theta) + KL(p_theta || p_phi))``
(per batch mean, plus ``l2/2 (||theta_i||^2 + ||phi_i||^2)``). As in deep mutual learning each KL
term teaches one model with the other's prediction as a fixed target: the first term's gradient
reaches ``theta_i`` only, the second's ``phi_i`` only. Regression takes the squared difference
of the two outputs in place of each KL term (the Gaussian KL).

A round (paper eq. (18) ``thetaupdate`` with these maps): local steps on both models, then
    ``phi_i <- phi_i - alpha lam sum_j a_ij (phi_i - phi_j)``
over the neighbours heard (``proxy_gamma < 1``: on the round's selected coordinates; with
``local_epochs = 0`` each step also carries the gradient, as :mod:`.sheaf_coordinates`). Bits:
``max(1, floor(proxy_gamma d_proxy))`` floats per half-edge and round.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...component_keys import Keys, key
from ...config import ConfigError, RunConfig
from ...config.registry import MapModeSpec, edge_weights_of
from ...federation import Batch, Cohort, Cohorts
from ...federation.initial import draw_initial
from ...messages import Payload
from ...models import MODELS, build_model, default_model
from ..protocol.algorithm import Algorithm, Context, PerSampleFlops, State, register_maps
from .coordinate_state import CoordinateState
from .coordinates import CoordinateSheaf

PROXY_STREAM = {False: 11, True: 12}  # seed stream of the proxies' initial models: per client, common


@dataclass
class ProxyState(State):
    """``thetas``: the private models per cohort; ``coupling``: the coordinate state whose thetas
    are the proxies ``[C, d_proxy]`` per cohort; ``samples``: real samples per cohort so far (FLOPs)."""

    coupling: CoordinateState | None = field(default=None, repr=False)
    samples: list[torch.Tensor] = field(default_factory=list)
    proxy_module: nn.Module | None = field(default=None, repr=False)  # the proxies' architecture (FLOPs)
    client_rows: ClassVar[tuple[str, ...]] = ("thetas", "proxies")

    @property
    def lambda_max(self) -> float | None:
        """The coupling's start-up bound (the graph Laplacian's: dFedU on the proxies)."""
        return None if self.coupling is None else self.coupling.lambda_max

    @property
    def coupling_state_bytes(self) -> int:
        return 0 if self.coupling is None else self.coupling.coupling_state_bytes

    def flop_terms(
        self, config: RunConfig, fed: Cohorts, samples: list[int], rounds: int, per_sample: PerSampleFlops
    ) -> tuple[int | None, int | None]:
        """Local training: one forward and backward pass of the private model and of the proxy per
        sample the joint gradients used (the distillation terms are elementwise); the coupling: the
        proxies' (their coordinate coupling's count)."""
        assert self.proxy_module is not None and self.coupling is not None
        local = 0
        for cohort, n in zip(fed.cohorts, self.samples, strict=True):
            shape = cohort.feature_shape
            per = per_sample(cohort.module, shape, cohort.task, cohort.loss_fn)
            per += per_sample(self.proxy_module, shape, cohort.task, cohort.loss_fn)
            local += per * int(n)
        return local, self.coupling.flop_terms(config, fed, samples, rounds, per_sample)[1]

    @property
    def proxies(self) -> list[torch.Tensor]:
        assert self.coupling is not None
        return self.coupling.thetas

    @proxies.setter
    def proxies(self, value: list[torch.Tensor]) -> None:
        assert self.coupling is not None
        self.coupling.thetas = value

    def checkpoint(self) -> dict[str, Any]:
        assert self.coupling is not None
        return {**super().checkpoint(), "coupling": self.coupling.checkpoint()}

    def restore(self, saved: dict[str, Any], device: torch.device | str) -> None:
        assert self.coupling is not None
        rest = dict(saved)
        self.coupling.restore(rest.pop("coupling"), device)
        super().restore(rest, device)


def proxy_name(config: RunConfig, fed: Cohorts) -> str:
    """``proxy_model``, or the run's built-in architecture with the fewest parameters (``model``'s
    names are assigned round-robin, so name ``k`` is client ``k``'s)."""
    allowed = ", ".join(sorted(MODELS))
    if config.proxy_model:
        if config.proxy_model not in MODELS:
            raise ConfigError(
                f"config key 'proxy_model' = {config.proxy_model!r} is not a built-in model; "
                f"allowed: {allowed}"
            )
        return str(config.proxy_model)
    names = [default_model(fed.task) if n.strip() == "auto" else n.strip() for n in config.model.split(",")]
    dims = fed.node_dims()
    sizes = sorted((int(dims[k]), n) for k, n in enumerate(names[: len(dims)]) if n in MODELS)
    if not sizes:
        raise ConfigError(
            f"maps=proxy needs a built-in proxy architecture; set proxy_model (allowed: {allowed})"
        )
    return sizes[0][1]


def proxy_dim(config: RunConfig, fed: Cohorts) -> int | None:
    """Parameters of the proxy on the clients' one input shape, or ``None`` where no proxy can run
    (several input shapes, no built-in architecture to take, or one that does not fit the inputs)."""
    shapes = {tuple(fed.dataset.feature_shape(i)) for i in range(fed.num_clients)}
    if len(shapes) != 1:
        return None
    try:
        name = proxy_name(config, fed)
        outputs = fed.dataset.num_classes if fed.task == "classification" else 1
        module = build_model(name, shapes.pop(), outputs)
    except (ConfigError, ValueError, RuntimeError, TypeError):
        return None
    return sum(p.numel() for p in module.parameters())


@dataclass(eq=False)
class _ProxyContext(Context):
    """The context the coordinate coupling is built in: the proxies are its models."""

    proxies: list[torch.Tensor] = field(default_factory=list)

    def init_thetas(self) -> list[torch.Tensor]:
        return [p.clone() for p in self.proxies]


@dataclass(frozen=True)
class ProxyKeys(Keys):
    """``maps = proxy``: the proxy's architecture, its coupled share and the distillation."""

    proxy_model: str = key(
        "",
        "`maps=proxy`: the proxy's architecture, a built-in model name; empty: the run's model with the "
        "fewest parameters.",
    )
    proxy_gamma: float = key(
        1.0,
        "`maps=proxy`: fraction of the proxy's coordinates an edge couples each round, redrawn from the seed "
        "(1: the whole proxy, dFedU on the proxies; below 1, `lam` reads as `1/proxy_gamma` times dFedU's).",
        rule="0 < proxy_gamma <= 1",
    )
    distill: float = key(
        1.0,
        "`maps=proxy`: weight of the mutual distillation `KL(proxy || private) + KL(private || proxy)` "
        "between a client's two models (0: each learns alone).",
        rule="distill >= 0",
    )


@register_maps(
    MapModeSpec(
        "proxy",
        "proxy models",
        1.0,
        reads=("edge_weights",),
        keys=(ProxyKeys,),
        pull=math.inf,
        learns_weights=False,  # a proxy of another task costs more than a fresh one, yet averaging helps
    )
)
class ProxySheaf(Algorithm[ProxyState]):
    """``algorithm = sheaf-fmtl`` with ``maps = proxy`` (see the module docstring)."""

    name = "sheaf-fmtl"

    def __init__(self, config: RunConfig) -> None:
        self.alpha, self.lam, self.distill = config.alpha, config.lam_value, config.distill
        self.local_steps = config.local_steps
        self.inner_config = config.replace(
            maps="redrawn",
            map_kind="selection",
            gamma=config.proxy_gamma,
            edge_weights=edge_weights_of(config),
        )
        self.coupler = CoordinateSheaf(self.inner_config)
        self.proxy_cohorts: list[Cohort] = []

    # -- start-up ---------------------------------------------------------------------------------
    def init(self, ctx: Context) -> ProxyState:
        fed, cfg = ctx.fed, ctx.config
        name = proxy_name(cfg, fed)
        shapes = {tuple(fed.dataset.feature_shape(i)) for i in range(fed.num_clients)}
        outputs = fed.dataset.num_classes if fed.task == "classification" else 1
        try:
            modules = {s: build_model(name, s, outputs) for s in shapes}
        except (ValueError, RuntimeError, TypeError) as err:
            raise ConfigError(
                f"maps=proxy: proxy_model={name} does not fit inputs of shape {sorted(shapes)[0]} ({err})"
            ) from err
        dims = {sum(p.numel() for p in m.parameters()) for m in modules.values()}
        if len(dims) > 1:
            raise ConfigError(
                f"maps=proxy: proxy_model={name} has {sorted(dims)} parameters on the clients' input "
                "shapes; the proxies must have one architecture (clients with one input shape)"
            )
        self.proxy_cohorts = []
        for c in fed.cohorts:
            module = modules[c.feature_shape].to(c.device)
            proxy = dataclasses.replace(c, module=module, model_name=name)
            proxy.use_objective(c.loss_fn, c.metric_fn)
            self.proxy_cohorts.append(proxy)
        common = cfg.init == "common"
        proxies = [self._initial_proxies(p, cfg.seed, common) for p in self.proxy_cohorts]
        view = copy.copy(fed)
        view.all_dims = np.full(fed.num_clients, dims.pop(), np.int64)
        inner_ctx = _ProxyContext(fed=view, graph=ctx.graph, config=self.inner_config, proxies=proxies)
        self.coupler.models = self.proxy_cohorts  # the relatedness of two clients: their proxies' losses
        coupling = self.coupler.init(inner_ctx)
        samples = [torch.zeros((), dtype=torch.int64, device=t.device) for t in proxies]
        module = next(iter(modules.values()))
        return ProxyState(thetas=ctx.init_thetas(), coupling=coupling, samples=samples, proxy_module=module)

    @staticmethod
    def _initial_proxies(proxy: Cohort, seed: int, common: bool) -> torch.Tensor:
        """One draw for every client (``init = common``: from client 0's seed) or one per client."""
        clients = [0] if common else proxy.clients.tolist()
        rows = draw_initial(proxy.module, None, clients, seed, PROXY_STREAM[common])
        rows = rows.expand(proxy.size, -1) if common else rows
        return rows.to(proxy.x_train.device).clone()

    # -- local computation -------------------------------------------------------------------------
    def joint_losses(
        self, private: Cohort, proxy: Cohort, theta: torch.Tensor, phi: torch.Tensor, batch: Batch
    ) -> torch.Tensor:
        """``f_i`` per client ``[C]`` of both models on one batch (module docstring); differentiable
        in ``theta [C, d]`` and ``phi [C, d_proxy]``."""
        x, y, mask = batch.x, batch.y, batch.mask
        a = private._predict(theta, x)
        b = proxy._predict(phi, x)
        flat_a, flat_b, yy = a.reshape(-1, *a.shape[2:]), b.reshape(-1, *b.shape[2:]), y.reshape(-1)
        per = private._per_sample(flat_a, yy) + proxy._per_sample(flat_b, yy)
        if self.distill > 0:
            if private.task == "classification":
                la, lb = F.log_softmax(flat_a, -1), F.log_softmax(flat_b, -1)
                ta, tb = la.detach(), lb.detach()
                mutual = (tb.exp() * (tb - la)).sum(-1) + (ta.exp() * (ta - lb)).sum(-1)
            else:
                mutual = 0.5 * ((flat_a - flat_b.detach()) ** 2 + (flat_b - flat_a.detach()) ** 2).sum(-1)
            per = per + self.distill * mutual
        per = per.view(mask.shape)
        count = mask.sum(1)
        f = (per * mask).sum(1) / count.clamp(min=1)
        norms = (theta * theta).sum(1) + (phi * phi).sum(1)
        return f + (count > 0).to(theta.dtype) * 0.5 * private.l2 * norms

    def _cohort_gradients(
        self, k: int, private: Cohort, theta: torch.Tensor, phi: torch.Tensor, batch: Batch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(grad theta [C, d], grad phi [C, d_proxy], f [C])``, in groups of ``private.group``
        clients (as the cohort's own gradients); clients outside ``batch.active`` get zeros."""
        proxy = self.proxy_cohorts[k]
        active = batch.active
        t, p = (theta, phi) if active is None else (theta[active], phi[active])
        gt, gp, fs = [], [], []
        g = private.group
        with torch.enable_grad():
            for s in range(0, len(t), g):
                tt = t[s : s + g].detach().requires_grad_(True)
                pp = p[s : s + g].detach().requires_grad_(True)
                part = Batch(batch.x[s : s + g], batch.y[s : s + g], batch.mask[s : s + g])
                f = self.joint_losses(private, proxy, tt, pp, part)
                dt, dp = torch.autograd.grad(f.sum(), [tt, pp])
                gt.append(dt)
                gp.append(dp)
                fs.append(f.detach())
        d_t, d_p, f_all = torch.cat(gt), torch.cat(gp), torch.cat(fs)
        if active is None:
            return d_t, d_p, f_all
        return (
            torch.zeros_like(theta).index_copy_(0, active, d_t),
            torch.zeros_like(phi).index_copy_(0, active, d_p),
            theta.new_zeros(len(theta)).index_copy_(0, active, f_all),
        )

    def gradients(
        self, state: ProxyState, ctx: Context
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Gradients of both models on the next mini-batches, and the batch losses ``[N]``."""
        grads_t, grads_p, losses = [], [], []
        batches = ctx.next_batches()
        for k, (cohort, theta, phi, batch) in enumerate(
            zip(ctx.fed.cohorts, state.thetas, state.proxies, batches, strict=True)
        ):
            if batch is None:
                gt, gp, f = torch.zeros_like(theta), torch.zeros_like(phi), theta.new_zeros(len(theta))
            else:
                state.samples[k] = state.samples[k] + batch.mask.detach().sum().to(torch.int64)
                gt, gp, f = self._cohort_gradients(k, cohort, theta, phi, batch)
            grads_t.append(gt)
            grads_p.append(gp)
            losses.append(f)
        return grads_t, grads_p, ctx.fed.per_client(losses)

    def _step_private(self, state: ProxyState, ctx: Context) -> list[torch.Tensor]:
        """One step: the private models take theirs now (they are not coupled); the proxies'
        gradients are returned for the coupling step."""
        gt, gp, state.batch_loss = self.gradients(state, ctx)
        state.thetas = [t - self.alpha * g for t, g in zip(state.thetas, gt, strict=True)]
        return gp

    def local(self, state: ProxyState, ctx: Context) -> ProxyState:
        coupling = state.coupling
        assert coupling is not None
        if ctx.epoch_mode:  # E passes of SGD on both models; the proxies' coupling follows the exchange
            for _ in range(ctx.local_steps()):
                gp = self._step_private(state, ctx)
                state.proxies = [p - self.alpha * g for p, g in zip(state.proxies, gp, strict=True)]
            coupling.grads = None
        else:
            coupling.grads = self._step_private(state, ctx)
            coupling.batch_loss = state.batch_loss
        return state

    def send(self, state: ProxyState, phase: int, ctx: Context) -> Payload:
        assert state.coupling is not None
        return self.coupler.send(state.coupling, phase, ctx)

    def receive(self, state: ProxyState, incoming: Payload, phase: int, ctx: Context) -> ProxyState:
        assert state.coupling is not None
        inner = copy.copy(ctx)  # further local steps (local_steps > 1): both models step, the proxies couple

        def source(proxies: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
            state.proxies = proxies
            gp = self._step_private(state, ctx)
            assert state.batch_loss is not None
            return gp, state.batch_loss

        inner.gradient_source = source
        state.coupling = self.coupler.receive(state.coupling, incoming, phase, inner)
        return state

    # -- reporting ---------------------------------------------------------------------------------
    def penalty(self, state: ProxyState, ctx: Context) -> tuple[float, float]:
        assert state.coupling is not None
        return self.coupler.penalty(state.coupling, ctx)

    def diagnose(self, state: ProxyState, ctx: Context) -> list[str]:
        assert state.coupling is not None
        return self.coupler.diagnose(state.coupling, ctx)

    def checkpoint(self, state: ProxyState, ctx: Context) -> dict[str, Any]:
        """The coupling's ``shared_parameters`` / ``map_norms`` (over the proxies)."""
        assert state.coupling is not None
        return self.coupler.checkpoint(state.coupling, ctx)
