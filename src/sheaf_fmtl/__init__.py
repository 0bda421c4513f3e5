"""Sheaf-FMTL: decentralized federated multi-task learning with cellular sheaves.

For notebooks::

    import sheaf_fmtl
    result = sheaf_fmtl.run(dataset="school", algorithm="sheaf-fmtl", rounds=50)
    result.final, result.metrics[-1], result.thetas[0]

(:func:`run`; the command line is ``sheaf-fmtl``.)
"""

from ._version import __version__
from .api import RunResult, run
from .config import ConfigError, RunConfig, load_config

__all__ = ["ConfigError", "RunConfig", "RunResult", "__version__", "load_config", "run"]
