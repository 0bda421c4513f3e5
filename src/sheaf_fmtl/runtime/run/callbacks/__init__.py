"""Code the round loop runs after every round: how it calls callbacks (:mod:`.callbacks`), those the
library ships (:mod:`.shipped_callbacks`), and the MLflow and W&B loggers (:mod:`.trackers`,
:mod:`.tracking`, :mod:`.reach`, :mod:`.mlflow_logger`, :mod:`.mlflow_store`, :mod:`.wandb_logger`)."""
