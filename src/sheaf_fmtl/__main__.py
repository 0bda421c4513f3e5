"""``python -m sheaf_fmtl`` (e.g. ``torchrun --nproc-per-node K -m sheaf_fmtl run CONFIG``): the CLI."""

import sys

from .cli import main

sys.exit(main())
