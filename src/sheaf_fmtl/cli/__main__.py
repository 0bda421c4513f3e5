"""``python -m sheaf_fmtl.cli``: the command line, as ``python -m sheaf_fmtl``."""

from . import entry

entry()
