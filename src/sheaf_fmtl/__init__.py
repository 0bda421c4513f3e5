"""Sheaf-FMTL: decentralized federated multi-task learning with cellular sheaves.

For notebooks::

    import sheaf_fmtl
    result = sheaf_fmtl.run(dataset="school", algorithm="sheaf-fmtl", rounds=50)
    result.final, result.metrics[-1], result.thetas[0]
    sheaf_fmtl.run(data=[(x_train, y_train, x_test, y_test), ...], model=make_model, graph=G)
    trained = sheaf_fmtl.load("runs/school")          # a finished run folder
    trained.client(3)(x_raw)                           # client 3's model, with its preprocessing
    sheaf_fmtl.load("runs/early", round="best").evaluate(split="test")  # the chosen models on test

(:func:`run`, :class:`Federation` for one's own data and models, :func:`load` for a run folder,
:mod:`sheaf_fmtl.callbacks` for code run each round; the command line is ``sheaf-fmtl``.) The names
below are imported when first used, so that the command line's ``--help`` starts without importing
torch. Each of them imports the algorithms package first: it registers every algorithm and map
mode, the choices a config is checked against.
"""

from __future__ import annotations

import importlib
import os as _os
import signal as _signal
import sys as _sys
from typing import TYPE_CHECKING, Any

from ._version import __version__


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


if _is_command_line():  # glibc reads the heap policy's tunables only at start (sheaf_fmtl.heap)
    from .heap import run_under_tunables

    run_under_tunables()

if _is_command_line() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)  # cli.main restores Python's handler

if TYPE_CHECKING:
    from .api import Federation, RunResult, run
    from .config import ConfigError, RunConfig, load_config
    from .export import TrainedRun, load

#: Public name -> the module that defines it.
_LAZY = {
    "ConfigError": "config",
    "Federation": "api",
    "RunConfig": "config",
    "RunResult": "api",
    "TrainedRun": "export",
    "load": "export",
    "load_config": "config",
    "run": "api",
}

__all__ = [
    "ConfigError",
    "Federation",
    "RunConfig",
    "RunResult",
    "TrainedRun",
    "__version__",
    "callbacks",
    "load",
    "load_config",
    "run",
]


#: Public submodules, imported when first used (``sheaf_fmtl.callbacks.EarlyStopping(...)``).
_SUBMODULES = ("callbacks",)


def fill_registries() -> None:
    """Import the algorithms package, which registers every built-in algorithm and map mode; the
    config's registries call this on their first lookup (``sheaf_fmtl.config.registry``)."""
    importlib.import_module(".algorithms", __name__)


def __getattr__(name: str) -> Any:  # noqa: ANN401 - whatever the public name is
    if name in _SUBMODULES:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name not in _LAZY:
        raise AttributeError(f"module 'sheaf_fmtl' has no attribute {name!r}")
    importlib.import_module(".algorithms", __name__)  # fills the registries a config is checked against
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API (:data:`__all__`, imported when first used) and the module's dunders: what
    ``dir(sheaf_fmtl)`` and tab completion list."""
    dunders = [n for n in globals() if n.startswith("__") and n.endswith("__")]
    return sorted({*__all__, *dunders})
