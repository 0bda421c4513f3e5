#!/usr/bin/env bash
# Three silos over gRPC with mutual TLS on this machine's loopback (OUT/tls), the same run over
# Gloo (OUT/gloo), then three attacks on a silo's server, one line each in OUT/refusals.txt:
# a certificate of another authority, a valid certificate of a silo that is not a neighbour, and a
# tampered payload. OUT/equal.txt says whether the two runs' models and metrics are the same.
#   examples/authenticated_silos.sh OUT        (PYTHON=... to choose the interpreter)
set -euo pipefail
OUT=${1:?usage: examples/authenticated_silos.sh OUT}
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
# six clients, silo R holding clients 2R and 2R+1: silo 0 - silo 1 - silo 2 (0 and 2 not neighbours)
printf '0 1\n1 2\n2 3\n3 4\n4 5\n0 2\n3 5\n' > "$OUT/edges.txt"
[ -f "$OUT/certs/ca.pem" ] || "$PY" -m sheaf_fmtl certs init --clients 3 --out "$OUT/certs"
run=(dataset=synthetic clients=6 graph=file "graph_file=$OUT/edges.txt" rounds=20 eval_every=5 processes=3)
"$PY" -m sheaf_fmtl run --set "${run[@]}" transport=tls "tls_certs=$OUT/certs" --out "$OUT/tls" --overwrite
"$PY" -m sheaf_fmtl run --set "${run[@]}" --out "$OUT/gloo" --overwrite
"$PY" - "$OUT" <<'PYTHON'
import csv, sys
from pathlib import Path
import torch
out = Path(sys.argv[1])
a, b = (torch.load(out / r / "checkpoint.pt", weights_only=False)["thetas"] for r in ("tls", "gloo"))
models = all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
rows = [list(csv.DictReader(open(out / r / "metrics.csv"))) for r in ("tls", "gloo")]
clock = {"wall_seconds"}
metrics = all({k: v for k, v in x.items() if k not in clock} == {k: v for k, v in y.items() if k not in clock}
              for x, y in zip(*rows, strict=True))
(out / "equal.txt").write_text(f"models equal: {models}\nmetrics equal (but wall time): {metrics}\n")
print((out / "equal.txt").read_text(), end="")
PYTHON
"$PY" "$HERE/silo_attacks.py" "$OUT/certs" "$OUT/refusals.txt"
