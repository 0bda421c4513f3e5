"""Sheaf-FMTL: decentralized federated multi-task learning with cellular sheaves.

For notebooks::

    import sheaf_fmtl
    result = sheaf_fmtl.run(dataset="school", algorithm="sheaf-fmtl", rounds=50)
    result.final, result.metrics[-1], result.thetas[0]
    sheaf_fmtl.run(data=[(x_train, y_train, x_test, y_test), ...], model=make_model, graph=G)

(:func:`run`, :class:`Federation` for one's own data and models; the command line is ``sheaf-fmtl``.)
"""

from ._version import __version__
from .api import RunResult, run
from .config import ConfigError, RunConfig, load_config
from .own import Federation

__all__ = ["ConfigError", "Federation", "RunConfig", "RunResult", "__version__", "load_config", "run"]
