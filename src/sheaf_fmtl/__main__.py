"""``python -m sheaf_fmtl`` (e.g. ``torchrun --nproc-per-node K -m sheaf_fmtl run CONFIG``): the CLI."""

from .cli import entry

entry()
