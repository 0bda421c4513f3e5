"""The algorithm protocol and registry.

A round, in both runtimes: ``local`` (computation without communication) -> for each phase:
``send`` (payload per half-edge) -> ``transport.exchange`` -> ``receive``. Algorithms see other
clients only through what the transport hands them, and never touch files or build graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import torch

from ...config import registry
from ...config.registry import AlgorithmSpec, MapModeSpec
from ...federation import Batch, EpochPlan
from ...messages import Comm, LocalComm, Payload
from .snapshot import data_fields, host_copy, load_fields, to_device

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...federation import Cohorts
    from ...sheaf.graph import ClientGraph
    from ...streams import ClientStreams


@dataclass
class State:
    """Stacked per-cohort parameters ``thetas[c]: [C, d_c]``; algorithms subclass to add fields."""

    thetas: list[torch.Tensor]
    batch_loss: torch.Tensor | None = None  # last mini-batch losses (divergence check)
    # The local optimizer's state per cohort (algorithms/training/optim.py; empty for plain SGD): its state
    # tensors shaped like the parameters, stacked [C, J, d]; its single numbers per client [C, S]
    # (float64, on the CPU: e.g. the step count); steps taken [C] (int64, on the CPU); local steps so far.
    opt_rows: list[torch.Tensor] = field(default_factory=list)
    opt_scalars: list[torch.Tensor] = field(default_factory=list)
    opt_t: list[torch.Tensor] = field(default_factory=list)
    opt_calls: int = 0
    # The coupling step (algorithms/training/coupling_step.py): each client's effective local step of this
    # round's local epochs per cohort [C] (float64, measured under an optimizer other than plain SGD;
    # empty otherwise); the sum of the steps taken, the client-rounds and how many the cap held
    # (numbers, or tensors on the device where the steps are measured: nothing is read back).
    local_rate: list[torch.Tensor] = field(default_factory=list)
    coupling_sum: float | torch.Tensor = 0.0
    coupling_count: int = 0
    coupling_capped: int | torch.Tensor = 0
    # Per-client fields (per-cohort stacks, or one [N, ...] stack) that a client sitting a round out
    # keeps as they were (drop_prob, runtime/engine/faults.py); replaced each round, never written in place.
    client_rows: ClassVar[tuple[str, ...]] = ("thetas", "opt_rows", "opt_scalars", "opt_t")
    # A field's name in checkpoints saved before it was renamed -> its name now (both are read).
    saved_names: ClassVar[dict[str, str]] = {}

    def checkpoint(self) -> dict[str, Any]:
        """Host copies of every data field a later round may read (tensors, lists of tensors,
        numbers, flags); structure that ``init`` rebuilds (layouts, indices) is left out."""
        return data_fields(self)

    def restore(self, saved: dict[str, Any], device: torch.device | str) -> None:
        """Put back what :meth:`checkpoint` returned, on ``device`` (a resumed run); fields saved
        under an earlier name (:attr:`saved_names`) are read under their name now. The optimizer
        state of checkpoints from before ``torch.optim`` ran the local steps (``opt_m``, ``opt_v``) is
        read when empty (plain SGD kept none) and refused otherwise."""
        earlier = [k for k in ("opt_m", "opt_v") if k in saved]
        if any(len(saved[k]) for k in earlier):
            raise ValueError(
                "checkpoint holds the local optimizer's state in an earlier layout (opt_m, opt_v); resume it "
                "with the version that saved it, or start the run afresh"
            )
        saved = {self.saved_names.get(k, k): v for k, v in saved.items() if k not in earlier}
        load_fields(self, saved, device)

    def flop_terms(
        self, config: RunConfig, fed: Cohorts, samples: list[int], rounds: int, per_sample: PerSampleFlops
    ) -> tuple[int | None, int | None]:
        """``(local training, coupling)`` FLOPs over ``rounds`` rounds that this state counts itself;
        ``None`` each: the default count (``metrics.flops.run_flops``). ``per_sample``: one sample's
        forward and backward pass of a module (``metrics.flops.per_sample_flops``)."""
        return None, None


#: ``(module, one sample's input shape, task, loss or None) -> FLOPs`` of its forward and backward pass.
PerSampleFlops = Callable[[torch.nn.Module, tuple[int, ...], str, Any], int]
# ``thetas -> (gradients per cohort, batch losses [N])``, the signature of Context.stochastic_gradients.
GradientSource = Callable[[list[torch.Tensor]], tuple[list[torch.Tensor], torch.Tensor]]


@dataclass(eq=False)
class Context:
    """What an algorithm may use: the federation (its clients' data), the graph, hyper-parameters
    and two generators, one for initialisation and one for mini-batches (so algorithms that
    draw different initial state still see the same batches).

    Mini-batches come from :meth:`next_batches`: with ``local_epochs = E > 0`` they walk through
    ``E`` passes over every client's own data per round (a fresh random order per pass; a client
    with ``n_i`` samples takes ``ceil(n_i / B)`` steps a pass, then sits out until the pass ends),
    otherwise each is a fresh random mini-batch. :meth:`local_steps` says how many steps a round's
    local phase takes."""

    fed: Cohorts
    graph: ClientGraph
    config: RunConfig
    init_gen: torch.Generator = field(default_factory=torch.Generator)
    batch_gen: torch.Generator = field(default_factory=torch.Generator)
    _plans: list[EpochPlan] = field(default_factory=list, repr=False)
    _cursor: int = 0
    # Optional replacement for the mini-batch gradients: when set,
    # :meth:`stochastic_gradients` returns ``gradient_source(thetas)`` and draws no batch. The bench
    # sets it to freeze the local gradients while it times the rest of a round; runs leave it None.
    gradient_source: GradientSource | None = field(default=None, repr=False)
    # Cross-process sums and uncounted exchanges for reporting (the runtime's transport; in one
    # process a LocalComm): penalties, norms and evaluation means go through it.
    comm: Comm = field(default_factory=LocalComm, repr=False)
    # The batches of the last gradients (None: that cohort had none), for the optimizers that must
    # leave a client without a batch as it was (algorithms/training/optim.py).
    last_batches: list[Batch | None] = field(default_factory=list, repr=False)
    # The static local-epoch step and its compiled graphs (algorithms/training/epoch.py): set at start-up
    # when the config's ``compile`` resolves to true; None: the loop.
    static_epoch: Any = field(default=None, repr=False)
    # Augmentation of each client's training batches (config key ``transform``, sheaf_fmtl.transforms;
    # a BatchTransform), None without: then no batch is touched.
    transform: Any = field(default=None, repr=False)
    # Client sampling (config key ``clients_per_round``): ``[N]`` bool, by global id, the clients not
    # drawn to take part in this round (set by the runtime each round); None: every client takes part.
    left_out: Any = field(default=None, repr=False)

    @property
    def batch_source(self) -> ClientStreams | torch.Generator:
        """Each client's own mini-batch stream (``fed.with_streams``), else ``batch_gen``."""
        return self.fed.batch_streams if self.fed.batch_streams is not None else self.batch_gen

    @property
    def epoch_mode(self) -> bool:
        return self.config.local_epochs > 0

    def steps_per_epoch(self) -> int:
        """Steps of one pass over the largest client's data, over every client of the federation
        (also those held by other processes)."""
        return self.fed.steps_per_epoch(self.config.batch_size)

    def local_steps(self) -> int:
        """Local SGD steps per round: ``local_epochs`` passes over the largest client's data, or
        ``local_steps``."""
        if self.epoch_mode:
            return self.config.local_epochs * self.steps_per_epoch()
        return self.config.local_steps

    def next_batches(self, lazy: bool = False) -> list[Batch | None]:
        """The next mini-batch of every cohort (``None``: the cohort sits this step out); ``lazy``:
        a cohort whose gradients can gathers its inputs itself (:class:`Batch` ``source``)."""
        b = self.config.batch_size
        if not self.epoch_mode:
            return [c.sample(b, self.batch_source, lazy) for c in self.fed.cohorts]
        step = self._cursor % self.steps_per_epoch()
        if step == 0:
            self._plans = [c.epoch(b, self.batch_source) for c in self.fed.cohorts]
        self._cursor += 1
        return [
            c.epoch_batch(plan, step, b, lazy) for c, plan in zip(self.fed.cohorts, self._plans, strict=True)
        ]

    def epoch_plans(self) -> list[EpochPlan]:
        """The plans of a whole pass at once, drawn as :meth:`next_batches` draws them at its first
        step, the cursor moved past the pass (the static local epoch, ``algorithms/training/epoch.py``)."""
        steps = self.steps_per_epoch()
        if self._cursor % steps != 0:  # pragma: no cover - a round's epochs start at a pass
            raise RuntimeError("a pass of local epochs must start where the last one ended")
        self._plans = [c.epoch(self.config.batch_size, self.batch_source) for c in self.fed.cohorts]
        self._cursor += steps
        return self._plans

    def gradients_on(
        self, thetas: list[torch.Tensor], batches: list[Batch | None]
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gradients of the L2-regularised local losses on given batches, per cohort (zero for a
        cohort without a batch), and the batch losses ``[N]`` in client order."""
        grads, losses = [], []
        for cohort, theta, batch in zip(self.fed.cohorts, thetas, batches, strict=True):
            if batch is None:
                g, f = torch.zeros_like(theta), theta.new_zeros(len(theta))
            else:
                if self.transform is not None:  # each client's real rows, seeded from its own stream
                    rows = batch.active.tolist() if batch.active is not None else range(cohort.size)
                    ids = [cohort._client_ids[k] for k in rows]
                    batch = batch._replace(x=self.transform.apply(batch.x, batch.mask, ids))
                noise = cohort.draw_noise(batch, self.batch_source)  # dropout's (user models)
                g, f = (
                    cohort.gradients(theta, batch) if noise is None else cohort.gradients(theta, batch, noise)
                )
            grads.append(g)
            losses.append(f)
        self.last_batches = batches
        return grads, self.fed.per_client(losses)

    def stochastic_gradients(self, thetas: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gradients on the next mini-batches (:meth:`next_batches`) and the batch losses ``[N]``,
        or ``gradient_source(thetas)`` when a gradient source is set."""
        if self.gradient_source is not None:
            return self.gradient_source(thetas)
        return self.gradients_on(thetas, self.next_batches(lazy=self.transform is None))

    def init_thetas(self) -> list[torch.Tensor]:
        """Initial models: one common model per architecture (``init = common``, the default, as
        the baselines' reference codes start) or one draw per client (``init = per-client``)."""
        common = self.config.init == "common"
        return [c.init_thetas(self.config.seed, common=common) for c in self.fed.cohorts]

    def random_state(self) -> dict[str, Any]:
        """Every random stream a later round draws from (host copies, for checkpoints): the
        federation's per-client streams, the two generators, the epoch plan being walked and the
        global torch generator."""
        fed = self.fed
        return {
            "federation": fed.random_state() if fed.batch_streams is not None else None,
            "init_gen": self.init_gen.get_state(),
            "batch_gen": self.batch_gen.get_state(),
            "plans": [host_copy(vars(p)) for p in self._plans],
            "cursor": self._cursor,
            "torch": torch.get_rng_state(),
            "transform": None if self.transform is None else self.transform.state(),
        }

    def load_random_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`random_state` (a resumed run continues every stream where it stopped)."""
        if state["federation"] is not None:
            self.fed.load_random_state(state["federation"])
        self.init_gen.set_state(state["init_gen"])
        self.batch_gen.set_state(state["batch_gen"])
        self._plans = [EpochPlan(**to_device(p, self.config.device)) for p in state["plans"]]
        self._cursor = int(state["cursor"])
        torch.set_rng_state(state["torch"])
        if self.transform is not None:
            self.transform.load_state(state["transform"])


S = TypeVar("S", bound=State)


class Algorithm(Protocol[S]):
    """One algorithm over its own state type ``S``. Subclass it explicitly (``class DFedU(
    Algorithm[GossipState])``) so that mypy checks every method against the protocol; ``phases``,
    ``penalty``, ``checkpoint`` and ``diagnose`` have defaults (one exchange a round, no coupling
    term, nothing to save, no warnings)."""

    name: str

    def init(self, ctx: Context) -> S: ...

    def local(self, state: S, ctx: Context) -> S: ...

    def phases(self, state: S) -> int:
        """Number of exchanges in the coming round."""
        return 1

    def send(self, state: S, phase: int, ctx: Context) -> Payload: ...

    def receive(self, state: S, incoming: Payload, phase: int, ctx: Context) -> S: ...

    def penalty(self, state: S, ctx: Context) -> tuple[float, float] | None:
        """``(coupling term of the objective, sheaf energy)`` or ``None`` when there is none."""
        return None

    def checkpoint(self, state: S, ctx: Context) -> dict[str, Any]:
        """What the final ``checkpoint.pt`` keeps besides the thetas."""
        return {}

    def diagnose(self, state: S, ctx: Context) -> list[str]:
        """Warnings for the user now (e.g. step-size conditions), each given once."""
        return []


AlgorithmFactory = Callable[["RunConfig"], Algorithm[Any]]
A = TypeVar("A", bound=Algorithm[Any])
#: algorithm name -> its implementation (what the package knows of it besides: ``config.registry``),
#: filled by the imports in ``algorithms/__init__.py``.
ALGORITHMS: dict[str, AlgorithmFactory] = {}
#: ``algorithm = sheaf-fmtl`` with ``maps = MODE``: the implementation of that map mode.
MAP_MODE_IMPLEMENTATIONS: dict[str, AlgorithmFactory] = {}


def register(name: str | AlgorithmSpec, **facts: Any) -> Callable[[type[A]], type[A]]:
    """Class decorator: ``make_algorithm`` builds ``cls(config)`` for ``algorithm = name``; ``name``
    is its :class:`~sheaf_fmtl.config.registry.AlgorithmSpec`, or a name and the spec's other
    fields as ``facts`` (its display name defaults to the name)."""
    spec = (
        name if isinstance(name, AlgorithmSpec) else AlgorithmSpec(name, facts.pop("display", name), **facts)
    )

    def deco(cls: type[A]) -> type[A]:
        _check_class(cls, f"algorithm '{spec.name}'")
        registry.add_algorithm(spec)  # (refuses a name registered already)
        ALGORITHMS[spec.name] = cls
        setattr(cls, "registered_as", spec.name)  # noqa: B010 - ``algorithm = module:Class`` finds its name by it
        return cls

    return deco


def register_maps(*modes: MapModeSpec) -> Callable[[type[A]], type[A]]:
    """Class decorator: ``make_algorithm`` builds ``cls(config)`` for ``algorithm = sheaf-fmtl`` with
    ``maps`` one of ``modes`` (their registry entries)."""

    def deco(cls: type[A]) -> type[A]:
        _check_class(cls, "map modes " + ", ".join(repr(getattr(m, "name", m)) for m in modes))
        for mode in modes:
            registry.add_map_mode(mode)  # (refuses a name registered already)
            MAP_MODE_IMPLEMENTATIONS[mode.name] = cls
        return cls

    return deco


def _check_class(cls: object, what: str) -> None:
    """``cls`` is a class with the methods of :class:`Algorithm` (ValueError naming ``what``)."""
    if not isinstance(cls, type):
        raise ValueError(f"{what}: register a class over the Algorithm protocol, not {type(cls).__name__}")
    missing = [m for m in ("init", "local", "send", "receive") if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"{what}: {cls.__name__} has no {', '.join(missing)} (the Algorithm protocol)")


def make_algorithm(config: RunConfig) -> Algorithm[Any]:
    if config.algorithm == "sheaf-fmtl" and config.maps in MAP_MODE_IMPLEMENTATIONS:
        return MAP_MODE_IMPLEMENTATIONS[config.maps](config)
    name = registry.registered_name(config.algorithm)
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {config.algorithm!r}; allowed: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name](config)
