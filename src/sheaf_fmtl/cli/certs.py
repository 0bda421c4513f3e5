"""``sheaf-fmtl certs init --clients N --out DIR``: the federation's authority and one key and
certificate per silo, for ``transport = tls`` (:mod:`sheaf_fmtl.runtime.silonet.certs`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = "make the federation's authority and each silo's key and certificate (transport=tls)"


def cmd_certs_init(args: argparse.Namespace) -> int:
    try:
        from ..runtime.silonet.certs import init_certs
    except ImportError as e:
        raise ValueError(
            f"certs init needs the cryptography package ({e}); pip install 'sheaf-fmtl[silos]'"
        ) from None
    out = Path(args.out)
    init_certs(out, args.clients, days=args.days)
    print(f"certs: authority {out / 'ca.pem'} (keep {out / 'ca.key'} off the silos' machines)")
    for rank in range(args.clients):
        print(f"certs: silo {rank}: {out / f'silo-{rank}'}/ (copy to silo {rank}'s machine only)")
    return 0


def add_certs_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("certs", help=HELP)
    sub = p.add_subparsers(dest="certs_command", required=True)
    init = sub.add_parser("init", help="a new authority and N silo identities (silo-0 .. silo-N-1)")
    init.add_argument("--clients", type=int, required=True, metavar="N", help="the number of silos")
    init.add_argument("--out", required=True, metavar="DIR", help="a folder without an authority yet")
    init.add_argument("--days", type=int, default=365, help="how long the certificates are valid (days)")
    init.set_defaults(func=cmd_certs_init)
