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

:func:`run` and :class:`Federation` call each other (a run given objects goes through a Federation,
whose ``run`` is :func:`run`), so they share this module; the objects are turned into config keys
in :mod:`sheaf_fmtl.user`, which imports nothing of this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from . import algorithms  # noqa: F401 - registers what configs are checked against
from .config import ConfigError, RunConfig, load_config
from .plugins import held_keys
from .spelling import on_command_line, option
from .user import UserObjects, has_objects

if TYPE_CHECKING:
    import pandas

    from .runtime.run.launching.launch import Launched, Resume

ConfigSource = RunConfig | Mapping[str, Any] | str | Path | None


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns.

    Attributes:
        config: the config as run (resolved: ``clients`` the real number; a special case's
            fixed keys).
        summary: what ``summary.json`` holds (``final``, ``metric``, ``status``, bits, times, ...).
        metrics: one dict per evaluated round (``metrics.csv``'s rows: ``round``,
            ``test_accuracy`` or ``test_mse``, ``train_loss``, ``objective``, ...; ``val_accuracy``
            or ``val_mse`` when a validation split is scored, ``validation > 0``).
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
        """The final mean metric over the clients (``None`` if the run had no evaluation), on the
        test split, or on the validation split when one is held out (``summary["evaluated_on"]``)."""
        return cast("float | None", self.summary["final"])

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


def trust_without_resume() -> str:
    """The refusal of ``trust_plugins`` / ``--trust-plugins`` without a run folder to resume."""
    return (
        f"{option('trust_plugins', True)} applies to {option('resume', 'RUN_DIR')} (a run folder's own "
        "code, which it never imports by itself); a new run imports the code its keys name anyway: drop it"
    )


def resume_with(given: str) -> str:
    """The refusal of ``resume`` / ``--resume`` given with ``given`` (``config``, ``out``, ...)."""
    if given == "config":
        name = "CONFIG" if on_command_line() else "the config (the first argument)"
    else:
        name = option(given) if on_command_line() else f"{given}="
    return f"{option('resume', 'RUN_DIR')} continues RUN_DIR with its own config and folder; drop {name}"


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
    trust_plugins: bool = False,
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
            ``Stop`` ends the run after that round, resumable (``summary["status"] == "stopped"``;
            at the last round the run ran all its rounds: ``"ok"``, with ``stop_at_last_round``).
        trust_plugins: with ``resume``, import the ``module:function`` code the folder's config
            names (as ``sheaf-fmtl run --resume --trust-plugins``); by default a run folder never
            runs its own code.
        **keys: config keys (`sheaf-fmtl run --help-keys`), applied on top of ``config``; ``data`` (a
            list, one entry per client, or a pooled ``(x, y)`` with ``partition``), ``model``,
            ``loss``, ``metric``, ``graph`` may be Python objects instead (:class:`sheaf_fmtl.Federation`
            says which; such a run's config cannot re-create them: ``resume`` only in this process,
            ``processes = 1``).
    Returns:
        A :class:`RunResult`. A run stopped by SIGINT/SIGTERM returns what it has, with
        ``summary["status"] == "interrupted"``; one stopped by a callback, ``"stopped"``. As one
        rank of a group (torchrun, a silo) rank 0 returns the run's result, the other ranks its
        config alone (rank 0 holds the results).
    Raises:
        ConfigError: a bad key, type or range (before any work); ``DatasetError``, ``GraphError``,
            ``ModelError`` (all ``ValueError``): the user's data, graph, model, loss or metric
            refused before training, in one line.
        sheaf_fmtl.runtime.engine.simulate.DivergenceError: the loss became NaN or infinite.

    Examples:
        Two rounds on four clients of a small synthetic problem, kept in memory (no ``out``):

        >>> import sheaf_fmtl
        >>> result = sheaf_fmtl.run(dataset="synthetic", clients=4, rounds=2, eval_every=1, seed=0)
        >>> result.summary["status"], result.metric, result.out
        ('ok', 'accuracy', None)
        >>> [row["round"] for row in result.metrics], len(result.thetas)
        ([0, 1, 2], 4)
        >>> 0.0 <= result.final <= 1.0
        True
    """
    from .runtime.run.launching.launch import launch
    from .scenarios import build

    if has_objects(keys):
        options = {"out": out, "overwrite": overwrite, "progress": progress, "callbacks": callbacks}
        return _run_objects(config, resume, keys, options)
    what, folder = _what_to_launch(config, out, overwrite, resume, trust_plugins, keys)
    ran = launch(what, folder, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks)
    return _result(ran, what, folder)


def _run_objects(
    config: ConfigSource, resume: str | Path | None, keys: dict[str, Any], options: dict[str, Any]
) -> RunResult:
    """:func:`run` given Python objects among ``keys``: a run of a :class:`Federation` of them (a
    resume, which takes its folder's own config, is refused)."""
    if resume is not None:
        raise ConfigError(
            "resume= continues a run with its own config, not with Python objects given again; a run "
            "given objects resumes through the sheaf_fmtl.Federation that started it: fed.run(resume=...)"
        )
    return Federation().run(config, **options, **keys)


def _what_to_launch(
    config: ConfigSource,
    out: str | Path | None,
    overwrite: bool,
    resume: str | Path | None,
    trust: bool,
    keys: dict[str, Any],
) -> tuple[RunConfig | Resume, Path | None]:
    """What :func:`run` launches and into which folder: a new run (``keys`` on ``config``) into
    ``out``, or the stopped run of the folder ``resume`` (:class:`Resume`); keywords that do not
    go together are refused in one line."""
    from .runtime.run.launching.launch import Resume

    if resume is None:
        if trust:
            raise ConfigError(trust_without_resume())
        return resolve_config(config, **keys), None if out is None else Path(out)
    given = [name for name, value in (("config", config), ("out", out), ("overwrite", overwrite)) if value]
    if given:
        raise ConfigError(resume_with(given[0]))
    return Resume(keys=keys, trust=trust), Path(resume)


#: The keywords of :func:`run` that are not config keys (:meth:`Federation.run` passes them on).
RUN_OPTIONS = ("out", "overwrite", "progress", "resume", "callbacks", "trust_plugins")


def _result(ran: Launched, what: RunConfig | Resume, folder: Path | None) -> RunResult:
    """:func:`run`'s result from what :func:`launch` returned: the outcome of a run in this process;
    after ranks, what rank 0 wrote in the run folder; on a rank other than 0, the config alone."""
    from .runtime.run.launching.resume import resume_config

    if isinstance(ran, dict):  # ranks: rank 0's summary; the results are in the run folder
        assert folder is not None  # (launch refuses ranks without one)
        return read_result(folder)
    if ran is not None:
        return RunResult(ran.config, ran.summary, ran.rows, ran.final, folder)
    if isinstance(what, RunConfig):  # a rank other than 0: rank 0 holds the results
        return RunResult(what, {}, [], {}, folder)
    assert folder is not None
    config = resume_config(folder, keys=what.keys, group_member=True, trust=what.trust)
    return RunResult(config, {}, [], {}, folder)


def read_result(out: str | Path) -> RunResult:
    """The :class:`RunResult` of a finished run folder ``out`` (``config.yaml``, ``summary.json``,
    ``metrics.csv``, ``checkpoint.pt`` read back)."""
    import csv
    import io

    from .data.bounded import LARGE, read_text_bounded
    from .metrics.final import read_final, read_summary

    folder = Path(out)
    rows = []
    text = read_text_bounded(folder / "metrics.csv", LARGE)  # (a received folder: bounded)
    for row in csv.DictReader(io.StringIO(text, newline="")):
        rows.append({k: _number(v) for k, v in row.items()})
    summary = read_summary(folder)
    state = read_final(folder, finished=False)  # checked against summary.json's record of it
    return RunResult(load_config(folder / "config.yaml"), summary, rows, state, folder)


def _number(text: str) -> Any:  # noqa: ANN401 - a metrics.csv cell: int, float or text as written
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class Federation:
    """Clients' own data, models, loss, metric and graph, read and checked once for many runs.

    Args:
        data: one entry per client, ``(x_train, y_train, x_test, y_test)`` (arrays or tensors) or
            ``(train_dataset, test_dataset)`` (``torch.utils.data.Dataset`` of ``(x, y)`` items,
            read once into memory); integer targets classify, float targets regress
            (:mod:`sheaf_fmtl.data.user`); or one pooled ``(x, y)`` that the config's ``partition``
            splits over ``clients`` (:mod:`sheaf_fmtl.data.partition`). ``None``: the config's
            ``dataset``.
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
        self._objects = UserObjects()  # keeps the placeholders' objects alive as long as this object
        self.keys = self._objects.as_keys(data=data, model=model, loss=loss, metric=metric, graph=graph)

    @property
    def num_clients(self) -> int | None:
        """The number of clients of the data given as objects (``None``: the config's dataset)."""
        return self._objects.num_clients

    def config(self, config: ConfigSource = None, **keys: Any) -> RunConfig:
        """The run's config: ``config`` and ``keys`` (as :func:`sheaf_fmtl.run` takes them; objects
        among them replace this federation's, e.g. ``model=`` another factory) on top of this
        federation's objects; :class:`ConfigError` as the command line checks it."""
        resolved = resolve_config(config, **{**self.keys, **self._objects.as_keys(**keys)})
        held = held_keys(resolved.to_dict())
        if resolved.processes > 1 and held:
            raise ConfigError(
                f"config key 'processes' = {resolved.processes}: each process re-creates the run from its "
                f"config, which cannot re-create the Python objects given as {', '.join(held)}; name them "
                "as module:function (importable) or run with processes=1"
            )
        return resolved

    def run(self, config: ConfigSource = None, /, **options: Any) -> RunResult:
        """One run on this federation, as :func:`sheaf_fmtl.run` (the same keywords and result:
        ``out``, ``overwrite``, ``progress``, ``resume``, ``callbacks`` and config keys, objects among
        them replacing this federation's); ``resume`` continues a run this federation started in this
        process; ``callbacks`` run after every round and at the end (:mod:`sheaf_fmtl.callbacks`)."""
        given = {name: options.pop(name) for name in RUN_OPTIONS if name in options}
        if given.get("resume") is not None:
            return run(config, **given, **options)
        return run(self.config(config, **options), **given)
