"""The Python API: ``sheaf_fmtl.run(...)`` for notebooks, validated exactly like the command line.

Example (the README's)::

    import sheaf_fmtl
    result = sheaf_fmtl.run(dataset="school", algorithm="sheaf-fmtl", rounds=50)
    print(result.metric, result.final)      # mse 0.0...
    result.metrics[-1]                      # the last evaluated round, as a dict
    result.summary["maps"]                  # the coupling that ran (maps=auto's choice: redrawn)
    result.thetas[3]                        # client 3's model
    sheaf_fmtl.run(dataset="school", maps="learned").maps[(3, 7)]  # Algorithm 1: the map P_37

Bring your own data, models, loss, metric and graph: :class:`Federation`, what
:func:`run` builds when given Python objects.

Example::

    import sheaf_fmtl
    fed = sheaf_fmtl.Federation(
        data=[(x_train, y_train, x_test, y_test), ...],   # or [(train_dataset, test_dataset), ...]
        model=make_model,                                 # i -> fresh nn.Module of client i
        loss=loss_fn, metric=metric_fn, graph=G,          # optional
    )
    ours = fed.run(algorithm="sheaf-fmtl", rounds=50)
    theirs = fed.run(algorithm="dfedu", rounds=50)

The objects are held for this process, under placeholders that the config records (``model:
<python: make_model #2>``; :mod:`sheaf_fmtl.plugins`); a function or class importable from a module
(not ``__main__``) is recorded as ``module:function`` instead. What a placeholder cannot do: the
run's ``config.yaml`` does not re-create it (``sheaf-fmtl run``, ``run --resume`` and
``processes > 1`` re-create a run from its config, and refuse in one line); a run is resumed only
in the process, and with the :class:`Federation`, that started it. Name such objects as
``module:function`` to lift all three limits.

Why one module: :func:`run` and :class:`Federation` call each other (a run given objects goes
through a Federation, whose ``run`` is :func:`run`); apart, they would import each other.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import torch

from .config import ConfigError, RunConfig, load_config
from .data.objects import from_objects
from .plugins import Held, held_keys, hold, spec_of
from .sheaf.graph import ClientGraph, GraphError

if TYPE_CHECKING:
    import pandas

ConfigSource = RunConfig | Mapping[str, Any] | str | Path | None


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns.

    Attributes:
        config: the config as run (resolved: ``clients`` the real number; a special case's
            fixed keys).
        summary: what ``summary.json`` holds (``final``, ``metric``, ``status``, bits, times, ...).
        metrics: one dict per evaluated round (``metrics.csv``'s rows: ``round``,
            ``test_accuracy`` or ``test_mse``, ``train_loss``, ``objective``, ...).
        state: what ``checkpoint.pt`` holds (``thetas``, ``edges``, Sheaf-FMTL's ``maps`` per
            shape bucket and ``map_norms``).
        out: the run folder, or ``None`` when nothing was written.
    """

    config: RunConfig
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    state: dict[str, Any] = field(repr=False)
    out: Path | None = None

    @property
    def metric(self) -> str:
        """``accuracy`` (classification) or ``mse`` (regression)."""
        return str(self.summary["metric"])

    @property
    def final(self) -> float | None:
        """The final mean test metric over the clients (``None`` if the run had no evaluation)."""
        return self.summary["final"]

    @property
    def thetas(self) -> list[torch.Tensor]:
        """Each client's final flat parameter vector (on the CPU)."""
        return list(self.state["thetas"])

    @property
    def maps(self) -> dict[tuple[int, int], torch.Tensor]:
        """Sheaf-FMTL's final restriction maps ``P_ij`` (``[d_ij, d_i]``) keyed by ``(i, j)``;
        empty for the baselines or with ``save_maps=false``."""
        if "maps" not in self.state:
            return {}
        edges = self.state["edges"].tolist()
        out = {}
        for half_edges, stack in zip(self.state["bucket_half_edges"], self.state["maps"], strict=True):
            for h, p in zip(half_edges.tolist(), stack, strict=True):
                i, j = edges[h // 2]
                out[(i, j) if h % 2 == 0 else (j, i)] = p
        return out

    def to_pandas(self) -> pandas.DataFrame:
        """:attr:`metrics` as a ``pandas.DataFrame`` (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("RunResult.to_pandas needs pandas: pip install pandas") from None
        return pandas.DataFrame(self.metrics)


def resolve_config(config: ConfigSource = None, **keys: Any) -> RunConfig:
    """A validated :class:`RunConfig` from a config (object, mapping or YAML path) and keys on top
    (``data`` merged key by key), checked as the command line checks it (:class:`ConfigError`)."""
    if isinstance(config, RunConfig):
        return load_config(None, None, {**config.to_dict(), **_merge_data(config.data, keys)})
    if isinstance(config, Mapping):
        return load_config(None, None, {**config, **_merge_data(config.get("data") or {}, keys)})
    if config is None or isinstance(config, str | Path):
        return load_config(config, None, keys)
    raise ConfigError(f"config must be a RunConfig, a mapping or a YAML path, not {type(config).__name__}")


def _merge_data(base: Any, keys: dict[str, Any]) -> dict[str, Any]:
    if isinstance(keys.get("data"), Mapping) and isinstance(base, Mapping):
        return {**keys, "data": {**base, **keys["data"]}}
    return keys


def run(
    config: ConfigSource = None,
    /,
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = False,
    resume: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    **keys: Any,
) -> RunResult:
    """Run one experiment, as ``sheaf-fmtl run`` does; on the user's own data, models, loss,
    metric or graph when keywords give them as Python objects (:class:`sheaf_fmtl.Federation`)::

        sheaf_fmtl.run(data=[(x_train, y_train, x_test, y_test), ...], model=make_model,
                       loss=loss_fn, metric=metric_fn, graph=G, algorithm="sheaf-fmtl", rounds=50)

    Args:
        config: a :class:`RunConfig`, a mapping of config keys, or a YAML file; optional.
        out: write the run folder there (``config.yaml``, ``metrics.csv``, ``summary.json``,
            ``checkpoint.pt``); ``None``: nothing is written.
        overwrite: accept and clear a non-empty ``out``.
        progress: show a progress bar.
        resume: a stopped run's folder: continue it from its last checkpoint with its saved
            config (``config`` and ``out`` not given; ``keys`` may only change ``rounds`` and the
            keys that leave the mathematics alone, as ``sheaf-fmtl run --resume``).
        callbacks: objects with ``on_round_end(round, metrics, view)`` and/or ``on_run_end(summary)``
            (:mod:`sheaf_fmtl.callbacks`: loggers, early stopping, the best round); one returning a
            ``Stop`` ends the run after that round, resumable (``summary["status"] == "stopped"``).
        **keys: config keys (`sheaf-fmtl run --help-keys`), applied on top of ``config``; ``data`` (a
            list, one entry per client), ``model``, ``loss``, ``metric``, ``graph`` may be Python
            objects instead (:class:`sheaf_fmtl.Federation` says which; such a run's config cannot
            re-create them: ``resume`` only in this process, ``processes = 1``).
    Returns:
        A :class:`RunResult`. A run stopped by SIGINT/SIGTERM returns what it has, with
        ``summary["status"] == "interrupted"``; one stopped by a callback, ``"stopped"``.
    Raises:
        ConfigError: a bad key, type or range (before any work); ``DatasetError``, ``GraphError``,
            ``ModelError`` (all ``ValueError``): the user's data, graph, model, loss or metric
            refused before training, in one line.
        sheaf_fmtl.runtime.engine.simulate.DivergenceError: the loss became NaN or infinite.
    """
    from .runtime.run.loop import execute
    from .runtime.run.resume import resume as resume_run
    from .runtime.run.rundir import claim
    from .scenarios import build

    if has_objects(keys):
        if resume is not None:
            raise ConfigError(
                "resume= continues a run with its own config, not with Python objects given again; a run "
                "given objects resumes through the sheaf_fmtl.Federation that started it: fed.run(resume=...)"
            )
        fed = Federation()
        return fed.run(config, out=out, overwrite=overwrite, progress=progress, callbacks=callbacks, **keys)
    if resume is not None:
        if config is not None or out is not None or overwrite:
            raise ConfigError(
                "resume= continues a run folder with its own config: give no config, out or overwrite"
            )
        outcome = resume_run(resume, keys=keys, progress=progress, build=build, callbacks=callbacks)
        out = resume
    else:
        resolved = resolve_config(config, **keys)
        if resolved.processes > 1:  # the command line's dispatch: K ranks on this machine
            return _run_processes(resolved, out, overwrite=overwrite, progress=progress, callbacks=callbacks)
        with claim(out, overwrite=overwrite) if out is not None else contextlib.nullcontext():
            outcome = execute(
                resolved, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks
            )
    where = None if out is None else Path(out)
    return RunResult(outcome.config, outcome.summary, outcome.rows, outcome.final, where)


def _run_processes(
    config: RunConfig, out: str | Path | None, *, overwrite: bool, progress: bool, callbacks: Sequence[Any]
) -> RunResult:
    """``processes = K > 1``: the ranks the command line starts (:func:`.runtime.launch.spawn`),
    each its own process, which write the run folder ``out``; the result is read back from it."""
    from .runtime.run.launch import spawn

    if out is None:
        raise ConfigError(
            f"config key 'processes' = {config.processes}: the ranks hand their results over in the run "
            "folder; give out=FOLDER (or run with processes=1)"
        )
    if callbacks:
        raise ConfigError(
            f"config key 'processes' = {config.processes}: callbacks run in this process, not in the ranks; "
            "run with processes=1 to use them"
        )
    spawn(config, Path(out), progress=progress, overwrite=overwrite)
    return read_result(out)


def read_result(out: str | Path) -> RunResult:
    """The :class:`RunResult` of a finished run folder ``out`` (``config.yaml``, ``summary.json``,
    ``metrics.csv``, ``checkpoint.pt`` read back)."""
    import csv
    import json

    import torch

    folder = Path(out)
    rows = []
    with open(folder / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            rows.append({k: _number(v) for k, v in row.items()})
    summary = json.loads((folder / "summary.json").read_text())
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)
    return RunResult(load_config(folder / "config.yaml"), summary, rows, state, folder)


def _number(text: str) -> Any:  # noqa: ANN401 - a metrics.csv cell: int, float or text as written
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


#: The keywords of :func:`sheaf_fmtl.run` that may carry Python objects.
OBJECT_KEYS = ("data", "dataset", "model", "loss", "metric", "graph")


def has_objects(keys: Mapping[str, Any]) -> bool:
    """Whether ``keys`` (:func:`sheaf_fmtl.run`'s) carry Python objects rather than config values."""
    data = keys.get("data")
    if data is not None and not isinstance(data, Mapping):
        return True
    return any(k in keys and not isinstance(keys[k], str) for k in OBJECT_KEYS if k != "data")


class Federation:
    """Clients' own data, models, loss, metric and graph, read and checked once for many runs.

    Args:
        data: one entry per client, ``(x_train, y_train, x_test, y_test)`` (arrays or tensors) or
            ``(train_dataset, test_dataset)`` (``torch.utils.data.Dataset`` of ``(x, y)`` items,
            read once into memory); integer targets classify, float targets regress
            (:mod:`sheaf_fmtl.data.objects`). ``None``: the config's ``dataset``.
        model: a factory ``make_model(i) -> nn.Module`` (or with no argument), an ``nn.Module``
            class or instance, or a list with one per client (:mod:`sheaf_fmtl.models.user`);
            clients whose modules share class, ``repr`` and parameter shapes form one cohort,
            batched with ``torch.func``. A string is the config key (``cnn``, ``mod:fn``, ...).
        loss: ``(outputs, targets) -> scalar`` (a mean over the samples) or per-sample ``[B]``;
            default: cross-entropy / squared loss by task.
        metric: ``(outputs, targets) -> float`` over one client's test set; default accuracy / MSE.
        graph: a ``networkx.Graph`` on nodes ``0..N-1`` (edge attribute ``weight`` optional), or an
            edge list of ``(i, j)`` or ``(i, j, weight)``; connected. A string is the config key.
    Raises:
        ValueError (``DatasetError``, ``GraphError``, ``ConfigError``): one line naming the problem.
    """

    def __init__(
        self, data: Any = None, model: Any = None, *, loss: Any = None, metric: Any = None, graph: Any = None
    ) -> None:
        self._held: list[Held] = []  # keeps the placeholders' objects alive as long as this object
        self.num_clients: int | None = None
        self.keys = self._as_keys(data=data, model=model, loss=loss, metric=metric, graph=graph)

    def _as_keys(self, **given: Any) -> dict[str, Any]:
        """Config keys for ``given``: objects held (their placeholders), importable functions as
        ``module:function``, strings and ``data`` options as they are; ``None`` left out."""
        keys: dict[str, Any] = {}
        data = given.pop("data", None)
        if given.get("dataset") is not None and not isinstance(given["dataset"], str | Mapping):
            if not callable(given["dataset"]):  # the clients' data itself
                data = given.pop("dataset")
        if data is not None and isinstance(data, Mapping):
            keys["data"] = data
        elif data is not None:
            raw = from_objects(data)
            self.num_clients = len(raw.clients)
            keys["dataset"] = self._hold(raw, f"{self.num_clients} {raw.task} clients")
        for key, obj in given.items():
            if obj is None or isinstance(obj, str) or key not in OBJECT_KEYS:
                if obj is not None:
                    keys[key] = obj
            elif key == "graph":
                keys[key] = self._hold_graph(obj)
            else:
                keys[key] = spec_of(obj) or self._hold(obj, _label(obj))
        return keys

    def _hold(self, obj: Any, label: str) -> str:
        held = hold(obj, label)
        self._held.append(held)
        return held.token

    def _hold_graph(self, graph: Any) -> str:
        try:
            if isinstance(graph, nx.Graph):
                g = _networkx(graph)
            elif isinstance(graph, ClientGraph):
                g = graph
            else:
                g = _edge_list(graph, self.num_clients)
        except GraphError as e:  # the graph's own checks (repeated edges, self-loops, ...): name the key
            raise GraphError(str(e) if str(e).startswith("graph") else f"graph: {e}") from None
        if self.num_clients is not None and g.num_nodes != self.num_clients:
            raise GraphError(f"the graph has {g.num_nodes} nodes but the data has {self.num_clients} clients")
        if not g.is_connected():
            raise GraphError(f"the graph on {g.num_nodes} clients is not connected")
        return self._hold(g, f"{g.num_nodes} nodes {g.num_edges} edges")

    def config(self, config: ConfigSource = None, **keys: Any) -> RunConfig:
        """The run's config: ``config`` and ``keys`` (as :func:`sheaf_fmtl.run` takes them; objects
        among them replace this federation's, e.g. ``model=`` another factory) on top of this
        federation's objects; :class:`ConfigError` as the command line checks it."""
        resolved = resolve_config(config, **{**self.keys, **self._as_keys(**keys)})
        held = held_keys(resolved.to_dict())
        if resolved.processes > 1 and held:
            raise ConfigError(
                f"config key 'processes' = {resolved.processes}: each process re-creates the run from its "
                f"config, which cannot re-create the Python objects given as {', '.join(held)}; name them "
                "as module:function (importable) or run with processes=1"
            )
        return resolved

    def run(
        self,
        config: ConfigSource = None,
        /,
        *,
        out: str | Path | None = None,
        overwrite: bool = False,
        progress: bool = False,
        resume: str | Path | None = None,
        callbacks: Sequence[Any] = (),
        **keys: Any,
    ) -> RunResult:
        """One run on this federation, as :func:`sheaf_fmtl.run` (same arguments and result);
        ``resume`` continues a run this federation started in this process; ``callbacks`` run after
        every round and at the end (:mod:`sheaf_fmtl.callbacks`)."""
        if resume is not None:
            return run(resume=resume, progress=progress, callbacks=callbacks, **keys)
        config = self.config(config, **keys)
        return run(config, out=out, overwrite=overwrite, progress=progress, callbacks=callbacks)


def _label(obj: Any) -> str:
    if isinstance(obj, Sequence):
        return f"{len(obj)} models"
    return str(getattr(obj, "__name__", None) or type(obj).__name__)


def _node(v: Any, where: str) -> int:
    """A node id: an integer (or an integral number), as the command line's edge-list reader takes."""
    if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real) or not float(v).is_integer():
        raise GraphError(f"graph: {where} has node id {v!r}; node ids must be integers 0..N-1")
    return int(float(v))


def _weight(a: Any, where: str) -> float:
    if isinstance(a, bool | np.bool_) or not isinstance(a, numbers.Real):
        raise GraphError(f"graph: {where} has weight {a!r} ({type(a).__name__}); expected a positive number")
    return float(a)


def _networkx(g: nx.Graph) -> ClientGraph:
    """:meth:`ClientGraph.from_networkx` after the checks that name what is wrong with ``g``."""
    if g.is_directed():
        raise GraphError(
            f"graph: a directed {type(g).__name__}; the coupling is symmetric: give an undirected "
            "networkx.Graph (G.to_undirected() keeps an edge given in either direction)"
        )
    if g.is_multigraph():
        raise GraphError(
            f"graph: a {type(g).__name__} (parallel edges); give a simple networkx.Graph, one edge per pair"
        )
    for v in g.nodes:
        _node(v, f"node {v!r}")
    for i, j, a in g.edges(data="weight", default=1.0):
        _weight(a, f"edge ({i!r}, {j!r})")
    return ClientGraph.from_networkx(g)


def _edge_list(edges: Any, num_clients: int | None) -> ClientGraph:
    """A :class:`ClientGraph` from ``[(i, j), ...]`` or ``[(i, j, weight), ...]``."""
    shape = getattr(edges, "shape", None)
    if shape is not None and len(shape) == 2 and shape[0] == shape[1] > 1:
        a = np.asarray(edges.detach().cpu() if isinstance(edges, torch.Tensor) else edges)
        if np.array_equal(a, a.T) and not np.any(np.diag(a)):
            raise GraphError(
                f"graph: a {shape[0]} x {shape[1]} symmetric array with zero diagonal, an adjacency matrix; "
                "give networkx.from_numpy_array(A) or a list of (i, j[, weight]) edges"
            )
    try:
        rows = [tuple(e) for e in edges]
    except TypeError:
        raise GraphError(
            f"graph: a {type(edges).__name__}; expected a networkx.Graph or a list of (i, j[, weight]) edges"
        ) from None
    if not rows or any(len(r) not in (2, 3) for r in rows):
        raise GraphError("graph: expected a non-empty list of (i, j) or (i, j, weight) edges")
    rows = [tuple(x.item() if isinstance(x, torch.Tensor | np.generic) else x for x in r) for r in rows]
    pairs = np.array([[_node(v, f"edge {k} {r!r}") for v in r[:2]] for k, r in enumerate(rows)], np.int64)
    weights = np.array([_weight(r[2], f"edge {k} {r!r}") if len(r) == 3 else 1.0 for k, r in enumerate(rows)])
    n = num_clients if num_clients is not None else int(pairs.max()) + 1
    return ClientGraph(n, pairs, weights)
