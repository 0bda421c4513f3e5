"""A finished run folder as trained models: :func:`load` (``sheaf_fmtl.load``) and ``sheaf-fmtl
export``.

``load(run).client(i)`` is client ``i``'s ``torch.nn.Module`` with its final parameters and, for a
model with BatchNorm, its own running statistics (``checkpoint.pt``; ``load(run, round="best")``:
the best validation evaluation's, ``best.pt``, which early stopping keeps), wrapped with the
preprocessing the data pipeline applied to its features (``preprocessing.json``: the
standardisation with its training data's mean and std), so that it takes raw features:
``load(run).client(i)(x_raw)`` gives the outputs the run evaluated.
``load(run).evaluate(split="test")`` (``sheaf-fmtl evaluate RUN``) scores the models on the run's
test split, e.g. those a validation split chose, ``load(run, round="best")``.

Loading never runs code from the folder: ``checkpoint.pt`` is read with ``torch.load(...,
weights_only=True)``, the config and the preprocessing are YAML and JSON, built-in models are
built by name, and a model the config names as ``module:function`` (or a Python object's
placeholder) is imported only when the caller names it again, ``load(run, model="mypkg.nets:cnn")``,
or hands the object over, ``load(run, model=make_model)``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .config import read_config_file
from .data import preprocessing
from .data.base import DatasetError
from .federation.user import is_user_model
from .loaded_models import build_modules
from .metrics.final import BEST, FINAL, check_vouched, read_best, read_final, read_summary, save_state
from .models import default_model
from .models.batchnorm import set_buffers
from .plugins import hold, is_held
from .preprocessed import Preprocessed
from .score_objects import object_keys
from .spelling import option
from .user import UserObjects

EXPORT_FORMAT = 1
#: What ``load(run, round=...)`` reads: the final checkpoint, or the best validation evaluation's models.
ROUNDS = {"final": FINAL, "best": BEST}


@dataclass
class TrainedRun:
    """What :func:`load` returns.

    Attributes:
        config: ``config.yaml`` as a mapping (not validated: validating would import the user code
            it may name).
        summary: ``summary.json``.
        preprocessing: ``preprocessing.json`` (:mod:`sheaf_fmtl.data.preprocessing`).
        out: the run folder.
        round: the round the models are from (``None``: the final checkpoint).
    """

    config: dict[str, Any]
    summary: dict[str, Any]
    preprocessing: dict[str, Any]
    out: Path
    thetas: list[torch.Tensor] = field(repr=False)
    modules: list[nn.Module] = field(repr=False)
    round: int | None = None
    given_model: Any = field(default=None, repr=False)  # load(..., model=...): what builds the models
    #: ``load(..., data=..., metric=...)``: the Python objects the run was made from, to score
    given_objects: dict[str, Any] = field(default_factory=dict, repr=False)
    norms: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict, repr=False)  # BatchNorm's

    def evaluate(
        self,
        split: str = "test",
        *,
        trust_plugins: bool = False,
        data_dir: str | Path | None = None,
        device: str = "cpu",
        data: Any = None,  # noqa: ANN401 - the user's data, as sheaf_fmtl.run takes them
        metric: Any = None,  # noqa: ANN401 - the user's metric function
    ) -> dict[str, Any]:
        """These models' metric on ``split`` (``test``, or ``validation`` for a run that held one out)
        of the run's data, read as the run read them (the same training data and standardisation), as
        the run's evaluations compute it: ``{"split", "metric", "mean", "per_client", "clients",
        "not_joined", "round"}``: ``mean`` over the clients present at the models' round (the run's
        last, or the best one's), as ``summary.json``'s ``final`` and ``per_client``.
        After early stopping, ``load(run, round="best").evaluate()`` is the chosen models' test score.

        Args:
            trust_plugins: import the ``module:function`` code (data, loss, metric) the run's config
                names; by default a run folder never runs its own code.
            data_dir: where the data lie now, if not where the run read them.
            device: where to compute (``cpu``, ``cuda``, ``cuda:N``).
            data: for a run made from Python data (``sheaf_fmtl.run(data=...)``), those data again,
                as ``run`` took them (else those given to :func:`load`); they are read as the run
                read them, so the same data give the run's scores.
            metric: for a run given a metric function as an object, that function again (else the
                one given to :func:`load`). A loss given as an object needs nothing: a score does
                not use it.
        Raises:
            ConfigError: the config names code not named again and ``trust_plugins`` is false, or
                the run was made from Python data (or a metric object) and none is given.
            DatasetError: the data cannot be read, or do not fit the models.
        """
        from .runtime.run.scoring.scoring import folder_config, last_round, score

        keys: dict[str, Any] = {"device": device, **({"data_dir": str(data_dir)} if data_dir else {})}
        spelled = str(self.config.get("model", "auto"))
        held = (
            None
            if self.given_model is None or isinstance(self.given_model, str)
            else hold(self.given_model, "model")
        )
        if self.given_model is not None:
            given = self.given_model if held is None else held.token
            parts = [p.strip() for p in spelled.split(",")]
            named = [given if is_user_model(p) and (held is not None or is_held(p)) else p for p in parts]
            keys["model"] = ",".join(named)
        objects = UserObjects()  # (holds the data while they are scored)
        asked = {"data": data, "metric": metric}
        given = {k: self.given_objects.get(k) if v is None else v for k, v in asked.items()}
        keys.update(object_keys(self.config, self.out, objects, given))
        config = folder_config(self.out, keys, trust_plugins)
        after = self.round if self.round is not None else last_round(self.summary, self.out)
        scored = score(config, self.thetas, split, self.norms, after_round=after)
        del held, objects
        return {**scored, "round": self.round}

    @property
    def num_clients(self) -> int:
        return len(self.modules)

    @property
    def metric(self) -> str:
        """``accuracy``, ``mse`` or the user's metric's name (``summary.json``'s ``metric``)."""
        return str(self.summary.get("metric", ""))

    def model(self, i: int) -> nn.Module:
        """Client ``i``'s trained module as trained: it takes preprocessed features."""
        self._check(i)
        return self.modules[i]

    def client(self, i: int) -> Preprocessed:
        """Client ``i``'s trained module behind its preprocessing (in eval mode): it takes raw features."""
        self._check(i)
        entry = self.preprocessing["clients"][i]
        if entry.get("elsewhere"):  # read in another silo: its standardisation is on that machine
            raise DatasetError(
                f"client {i} was read in another silo: its preprocessing is in the run folder of the "
                "machine that held it; load the run there (or use model(i) on features you standardise)"
            )
        return Preprocessed(self.modules[i], entry["standardize"], entry["feature_shape"]).eval()

    def _check(self, i: int) -> None:
        if not 0 <= i < self.num_clients:
            raise IndexError(f"client {i}: the run has clients 0 .. {self.num_clients - 1}")


def load(  # noqa: ANN401 - a spec or the user's objects
    run_dir: str | Path, *, model: Any = None, round: str = "final", data: Any = None, metric: Any = None
) -> TrainedRun:
    """A finished run folder's config, summary and per-client trained models (see the module docstring).

    Args:
        run_dir: a run folder (``config.yaml``, ``summary.json``, ``checkpoint.pt``,
            ``preprocessing.json``).
        model: only for a run whose ``model`` names user code: that ``module:function`` again (it is
            then imported), or the object itself (a factory ``i -> nn.Module``, a class, a module or
            a list of modules, as :class:`sheaf_fmtl.Federation` takes).
        round: ``final`` (``checkpoint.pt``) or ``best``: the models of the best validation
            evaluation (``best.pt``, kept by early stopping or :class:`~sheaf_fmtl.callbacks.BestCheckpoint`).
        data: only for a run made from Python data: that data again, as :func:`sheaf_fmtl.run`
            took it, for :meth:`TrainedRun.evaluate` (which takes it too).
        metric: only for a run given a metric function: that function again, likewise.
    Raises:
        ConfigError: the config names user code and ``model`` does not name or give it.
        DatasetError: a file of the folder is missing or cannot be read, ``checkpoint.pt`` differs
            from what ``summary.json`` recorded of it, or the run did not finish (one line naming it).
    """
    if round not in ROUNDS:
        raise ValueError(
            f"{option('round', round)} is not allowed; allowed: {', '.join(ROUNDS)} "
            f"(e.g. {option('round', 'final')}, the default)"
        )
    folder = _run_folder(run_dir)
    config = read_config_file(folder / "config.yaml")
    summary = read_summary(folder)
    record = preprocessing.read(folder)
    check_vouched(folder, summary)  # config.yaml and preprocessing.json are this run's
    path = folder / ROUNDS[round]
    if round == "final":
        state = read_final(folder)  # checked against summary.json; a run that did not finish is refused
    else:
        state = read_best(folder, summary)  # checked against summary.json's best
    thetas = list(state["thetas"]) if isinstance(state, dict) and "thetas" in state else None
    if thetas is None or len(thetas) != len(record["clients"]):
        raise DatasetError(
            f"{path} does not hold one parameter vector per client of {folder / preprocessing.FILE}"
        )
    modules = build_modules(config, record, model)
    norms = {i: b for i, b in enumerate(state.get("batchnorm") or []) if b}  # each client's own
    _fill(modules, thetas, norms, path)
    best = int(state["round"]) if round == "best" else None
    objects = {"data": data, "metric": metric}
    return TrainedRun(config, summary, record, folder, thetas, modules, best, model, objects, norms)


def _run_folder(run_dir: str | Path) -> Path:
    """``run_dir`` as a path, refused in one line unless it is a folder holding a ``config.yaml``."""
    folder = Path(run_dir)
    if not folder.is_dir() or not (folder / "config.yaml").is_file():
        what = (
            "no such folder"
            if not folder.exists()
            else "a file, not a folder"
            if not folder.is_dir()
            else "no config.yaml in it"
        )
        raise DatasetError(
            f"{folder} is not a run folder ({what}); give the folder a run wrote (its {option('out')})"
        )
    return folder


def _fill(
    modules: list[torch.nn.Module], thetas: list[torch.Tensor], norms: dict[int, Any], path: Path
) -> None:
    """Each client's trained parameters (and batch-norm buffers) into its module, put in eval
    mode; a parameter count or buffer that does not fit is refused naming ``path`` and the client."""
    for i, (module, theta) in enumerate(zip(modules, thetas, strict=True)):
        count = sum(p.numel() for p in module.parameters())
        if count != theta.numel():
            raise DatasetError(f"{path}: client {i} has {theta.numel()} parameters, its model {count}")
        torch.nn.utils.vector_to_parameters(theta.to(torch.float32), module.parameters())
        try:
            set_buffers(module, norms.get(i))
        except ValueError as e:
            raise DatasetError(f"{path}: client {i}: {e}") from None
        module.eval()


def _program(trained: TrainedRun, i: int, path: Path) -> Path | None:
    """Client ``i``'s model behind its preprocessing as a ``torch.export`` program with a dynamic
    batch size, saved to ``path``; ``None`` (and a warning naming the client) when ``torch.export``
    cannot trace the model (data-dependent control flow, ...): its state_dict is still written."""
    import warnings

    shape = trained.preprocessing["clients"][i]["feature_shape"]
    example = torch.zeros(2, *shape)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.export's notes on weights it packs
            program = torch.export.export(
                trained.client(i), (example,), dynamic_shapes=({0: torch.export.Dim.AUTO},)
            )
            buffer = io.BytesIO()  # (torch.export.save aborts the interpreter when a write fails)
            torch.export.save(program, buffer)
    except Exception as e:  # noqa: BLE001 - whatever torch.export refuses, the state_dict stays
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        warnings.warn(f"client {i}: no {path.name} (torch.export: {first})", stacklevel=3)
        path.unlink(missing_ok=True)
        return None
    with open(path, "wb") as f:  # a full disk: an OSError, reported in one line by export()
        f.write(buffer.getbuffer())
        f.flush()
        os.fsync(f.fileno())
    return path


def export(
    run_dir: str | Path,
    out: str | Path,
    *,
    model: Any = None,  # noqa: ANN401 - a spec or the user's object
    round: str = "final",
    programs: bool = True,
) -> list[Path]:
    """Write client ``i``'s trained ``state_dict`` to ``out/client-IIIII.pt`` (``torch.save``; read it
    back with ``torch.load(..., weights_only=True)``), with ``programs`` its model behind its
    preprocessing as a ``torch.export`` program, ``out/client-IIIII.pt2``, which loads without the
    code that defined the model (``torch.export.load(path).module()(x_raw)``, any batch size), and
    ``out/preprocessing.json`` (the run's, each client with its ``file``, ``program`` and ``model``);
    ``out`` must be new or empty; ``round`` as :func:`load` takes it. Everything is written into a
    temporary folder beside ``out``, renamed onto it once whole: a failed write (a full disk) leaves
    no part of an export, and is refused in one line naming the folder. Returns the paths written."""
    trained = load(run_dir, model=model, round=round)
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "a file" if not target.is_dir() else "not an empty folder"
        raise DatasetError(f"export folder {target} exists and is {what}; choose another {option('out')}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        names = _write_export(trained, tmp, programs)
        if target.exists():
            target.rmdir()  # (new or empty, checked above)
        os.replace(tmp, target)
    except (OSError, RuntimeError) as e:  # (torch.save reports a full disk as a RuntimeError)
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip().split("\n")[0][:120]
        raise OSError(
            f"export to {target} failed ({why}); nothing of it was kept (the run folder is unchanged): "
            f"free space or choose another {option('out')}"
        ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # (gone once renamed)
    return [target / name for name in names]


def _write_export(trained: TrainedRun, folder: Path, programs: bool) -> list[str]:
    """The client files and ``preprocessing.json`` of :func:`export`, into ``folder``; their names."""
    spelled = str(trained.config.get("model", "auto"))
    task = str(trained.preprocessing["task"])
    parts = [default_model(task) if m.strip() == "auto" else m.strip() for m in spelled.split(",")]
    record = json.loads(json.dumps(trained.preprocessing))
    written = []
    for i in range(trained.num_clients):
        name = f"client-{i:05d}.pt"
        with open(folder / name, "wb") as f:
            save_state(trained.modules[i].state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        record["clients"][i].update(file=name, model=parts[i % len(parts)])
        written.append(name)
        if programs:
            program = _program(trained, i, folder / f"client-{i:05d}.pt2")
            record["clients"][i]["program"] = None if program is None else program.name
            written += [] if program is None else [program.name]
    record["export_format"] = EXPORT_FORMAT
    record["metric"] = trained.metric
    if trained.round is not None:
        record["round"] = trained.round
    with open(folder / preprocessing.FILE, "w") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return [*written, preprocessing.FILE]
