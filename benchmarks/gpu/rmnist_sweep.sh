#!/usr/bin/env bash
# R-MNIST (40 clients, `cnn`, ER p=0.15, one local epoch of batch-32 SGD per round) on one GPU:
# every run of the sweep in parallel (each is launch-bound), each under its own time limit, then
# one JSON with every run's metrics (partial ones too) in $OUT/rmnist_sweep.json.
# Usage: OUT=dir [RUN_FILE=benchmarks/gpu/rmnist_*.runs] [DATA_DIR=dir] [LIMIT=seconds] [ROUNDS=200] [DEVICE=cuda] bash benchmarks/gpu/rmnist_sweep.sh
set -u
OUT=${OUT:?set OUT}
LIMIT=${LIMIT:-240}
ROUNDS=${ROUNDS:-200}
DEVICE=${DEVICE:-cuda}
DATA_DIR=${DATA_DIR:-.gpudata}
EXTRA=${EXTRA:-}  # e.g. "clients=8" for a CPU dry run
WORK=${WORK:-/tmp/rmnist_sweep}
SHEAF_FMTL=${SHEAF_FMTL:-sheaf-fmtl}
rm -rf "$WORK"; mkdir -p "$WORK" "$OUT"
common="dataset=rmnist model=cnn graph_p=0.15 local_epochs=1 batch_size=32 alpha=0.05 rounds=$ROUNDS eval_every=10 device=$DEVICE data_dir=$DATA_DIR save_maps=false $EXTRA"
RUN_FILE=${RUN_FILE:-benchmarks/gpu/rmnist_baselines.runs}  # lines: NAME KEY=VALUE ...
declare -A RUNS=()
while read -r name rest; do
  case "$name" in ''|'#'*) continue ;; esac
  RUNS[$name]=$rest
done <"$RUN_FILE"
for name in "${!RUNS[@]}"; do
  args=()
  for kv in $common ${RUNS[$name]}; do args+=(--set "$kv"); done
  OMP_NUM_THREADS=2 timeout "$LIMIT" $SHEAF_FMTL run "${args[@]}" --out "$WORK/$name" --quiet \
    >"$WORK/$name.log" 2>&1 &
done
wait
python3 - "$WORK" "$OUT/rmnist_sweep.json" <<'PY'
import csv, json, pathlib, sys
work, out = pathlib.Path(sys.argv[1]), sys.argv[2]
result = {}
for d in sorted(p for p in work.iterdir() if p.is_dir()):
    entry = {"log_tail": (work / f"{d.name}.log").read_text()[-1500:] if (work / f"{d.name}.log").exists() else ""}
    if (d / "metrics.csv").exists():
        entry["metrics"] = list(csv.DictReader(open(d / "metrics.csv")))
    if (d / "summary.json").exists():
        entry["summary"] = json.loads((d / "summary.json").read_text())
        entry["summary"].pop("per_client", None)
    if (d / "config.yaml").exists():
        entry["config"] = (d / "config.yaml").read_text()
    result[d.name] = entry
pathlib.Path(out).write_text(json.dumps(result, indent=1))
for name, e in result.items():
    rows = e.get("metrics", [])
    last = rows[-1] if rows else {}
    s = e.get("summary", {})
    print(f"{name:24s} rounds={last.get('round')} acc={last.get('test_metric')} bits={s.get('transmitted_bits')} wall={s.get('wall_seconds')} status={s.get('status')}")
PY
