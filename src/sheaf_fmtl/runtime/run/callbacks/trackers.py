"""The MLflow and W&B loggers the config keys ask for (``log_mlflow``, ``log_wandb``); each needs
its optional package, and a run without it is refused before it starts, naming the extra; so is a
destination the logger refuses (:class:`.reach.Refused`: a server that does not answer, ...),
naming the config key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....config import ConfigError, RunConfig
from ....spelling import setting
from .mlflow_logger import MLflowLogger
from .reach import Refused
from .wandb_logger import WandbLogger


def from_config(config: RunConfig) -> list[Any]:
    """The MLflow and W&B loggers ``log_mlflow`` and ``log_wandb`` ask for (ConfigError in one line
    naming the extra to install when the package is missing)."""
    out: list[Any] = []
    if config.log_mlflow:
        uri, experiment = config.mlflow_tracking_uri, config.mlflow_experiment
        out.append(_installed("log_mlflow", "mlflow-skinny", "mlflow", MLflowLogger, uri, experiment))
    if config.log_wandb:
        args = (config.wandb_project, config.wandb_mode, config.wandb_dir)
        out.append(_installed("log_wandb", "wandb", "wandb", WandbLogger, *args))
    return out


#: The config key of each logger argument.
KEYS = {"tracking_uri": "mlflow_tracking_uri", "experiment": "mlflow_experiment", "mode": "wandb_mode"}


def _installed(key: str, package: str, extra: str, make: Callable[..., Any], *args: Any) -> Any:  # noqa: ANN401
    """``make(*args)``, or ConfigError in one line when the logger's package is not installed or
    it refuses a destination (named by its config key)."""
    try:
        return make(*args)
    except ImportError:
        raise ConfigError(
            f"{setting(key, True)} needs the {package} package: pip install 'sheaf-fmtl[{extra}]'"
        ) from None
    except Refused as e:
        named = setting(KEYS[e.argument], e.value) if e.argument in KEYS else f"{e.argument}={e.value}"
        raise ConfigError(f"{named}: {e.reason}") from None
