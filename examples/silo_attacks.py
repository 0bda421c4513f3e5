"""Mount the authenticated silos example's three attacks on silo 0's server and write one line each
to the file given: python silo_attacks.py CERTS_DIR OUT_FILE. Exit status 1 if any was accepted."""

import sys
from pathlib import Path

from sheaf_fmtl.runtime.run.launching.spawn import free_port
from sheaf_fmtl.runtime.silonet.attacks import run_attacks

certs, out = Path(sys.argv[1]), Path(sys.argv[2])
# silo 0's only neighbour is silo 1 in the example's graph; silo 2 holds a valid certificate
lines = run_attacks(certs, target=0, neighbour=1, outsider=2, address=f"127.0.0.1:{free_port()}")
out.write_text("".join(f"{line}\n" for line in lines))
print("".join(f"{line}\n" for line in lines), end="")
sys.exit(1 if any("accepted" in line or "APPLIED" in line for line in lines) else 0)
