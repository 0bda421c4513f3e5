"""The keys of the loggers (TensorBoard, MLflow, W&B: ``runtime/run``'s trackers) and of early
stopping (``runtime/run``'s shipped callbacks), declared as components
(:mod:`sheaf_fmtl.component_keys`): they sit here, in config, because the run's callbacks are
imported only by a run, and a config is read before one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..component_keys import Keys, declare_keys, key
from ..spelling import setting
from .errors import ConfigError


@declare_keys("logger tensorboard")
@dataclass(frozen=True)
class TensorBoardKeys(Keys):
    """The TensorBoard logger."""

    log_tensorboard: str = key(
        "", "Write every evaluated number as a TensorBoard scalar into this folder (needs `[tensorboard]`)."
    )


@declare_keys("logger mlflow")
@dataclass(frozen=True)
class MLflowKeys(Keys):
    """The MLflow logger."""

    log_mlflow: bool = key(
        False,
        "Log the run to MLflow (needs `[mlflow]`): the config as parameters, every evaluated number by "
        "round, the per-edge series, the summary and the run folder's files.",
    )
    mlflow_tracking_uri: str = key(
        "",
        "`log_mlflow`: where MLflow records the run; empty: `$MLFLOW_TRACKING_URI`, else a file store in "
        "the run folder (`file:RUN_DIR/mlruns`); a server not answering within 5 s is refused.",
    )
    mlflow_experiment: str = key("sheaf-fmtl", "`log_mlflow`: the MLflow experiment (1-500 characters).")


@declare_keys("logger wandb")
@dataclass(frozen=True)
class WandbKeys(Keys):
    """The Weights & Biases logger."""

    log_wandb: bool = key(
        False,
        "Log the run to Weights & Biases (needs `[wandb]`): the config, every evaluated number by round, "
        "the per-edge series and the summary.",
    )
    wandb_project: str = key("sheaf-fmtl", "`log_wandb`: the W&B project.")
    wandb_mode: str = key(
        "offline",
        "`log_wandb`: `offline` (files only, nothing sent; `wandb sync` uploads them later), `online` "
        "(sends to the W&B server; one not answering within 5 s is refused) or `disabled`.",
        choices=("offline", "online", "disabled"),
    )
    wandb_dir: str = key(
        "", "`log_wandb`: the folder W&B writes its `wandb/` folder into; empty: the run folder."
    )


@declare_keys("early stopping")
@dataclass(frozen=True)
class EarlyStopKeys(Keys):
    """Early stopping on the validation split."""

    early_stop_patience: int = key(
        0,
        "`N > 0`: stop when the metric on the validation split (it needs `validation > 0`: the test split "
        "never chooses) has not improved for `N` evaluations in a row (`status: stopped`, resumable), and "
        "keep the best evaluation's models in `best.pt` (`sheaf_fmtl.load(run, round='best')`); 0: never.",
        rule="early_stop_patience >= 0 (0: never)",
    )
    early_stop_min_delta: float = key(
        0.0,
        "What counts as an improvement for `early_stop_patience`.",
        rule="early_stop_min_delta >= 0",
    )

    def check(self, config: Any) -> None:  # noqa: ANN401 - the run's config
        """Early stopping watches the validation split: refused without one (never the test split)."""
        if config.early_stop_patience > 0 and config.validation == 0:
            raise ConfigError(
                f"config key 'early_stop_patience' = {config.early_stop_patience} watches the validation "
                "split, and validation = 0 holds none out (stopping on the test split would choose by test "
                f"data); add {setting('validation', 0.2)} (a fraction of each client's training data), or "
                f"{setting('early_stop_patience', 0)} to never stop early"
            )
