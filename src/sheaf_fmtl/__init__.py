"""Sheaf-FMTL: decentralized federated multi-task learning with cellular sheaves.

For notebooks::

    import sheaf_fmtl
    result = sheaf_fmtl.run(dataset="school", algorithm="sheaf-fmtl", rounds=50)
    result.final, result.metrics[-1], result.thetas[0]
    sheaf_fmtl.run(data=[(x_train, y_train, x_test, y_test), ...], model=make_model, graph=G)

(:func:`run`, :class:`Federation` for one's own data and models; the command line is ``sheaf-fmtl``.)
"""

import os as _os
import signal as _signal
import sys as _sys


def _interrupted_at_start_up(signum: int, frame: object) -> None:
    """Ctrl-C while the command line starts (torch is imported): one line, exit status 130."""
    _sys.stderr.write("sheaf-fmtl: interrupted\n")
    _sys.stderr.flush()
    _os._exit(130)  # (nothing is written yet: no clean-up to run)


_interrupted_at_start_up.start_up = True  # type: ignore[attr-defined]  # (cli.main looks for it)


def _is_command_line() -> bool:
    """This interpreter runs ``sheaf-fmtl`` or ``python -m sheaf_fmtl``."""
    argv = getattr(_sys, "orig_argv", _sys.argv)
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    return module == "sheaf_fmtl" or _os.path.basename(_sys.argv[0] if _sys.argv else "") == "sheaf-fmtl"


if _is_command_line() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)  # cli.main restores Python's handler

from ._version import __version__  # noqa: E402
from .api import RunResult, run  # noqa: E402
from .config import ConfigError, RunConfig, load_config  # noqa: E402
from .own import Federation  # noqa: E402

__all__ = ["ConfigError", "Federation", "RunConfig", "RunResult", "__version__", "load_config", "run"]
