#!/usr/bin/env bash
# Every GPU check in one call: the R-MNIST sweep in the background while the CUDA tests run
# (neither is timed against the other), then the benchmarks alone on the GPU.
# Usage on the device machine: OUT=dir bash benchmarks/gpu/all.sh   (GPU_DRY_RUN=1: here, on CPU, tiny)
set -u
cd "$(dirname "$0")/../.." || exit 1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ "${GPU_DRY_RUN:-0}" = 1 ]; then
  PY=.venv/bin/python
  SWEEP_ENV=(DEVICE=cpu ROUNDS=2 LIMIT=60 "EXTRA=dataset=synthetic model=auto clients=6 graph_p=0.7 eval_every=1")
else
  SWEEP_ENV=(LIMIT=${SWEEP_LIMIT:-280})
fi
START=$(date +%s)
env OUT="$OUT" SHEAF_FMTL="$PY -m sheaf_fmtl.cli" "${SWEEP_ENV[@]}" \
  bash benchmarks/gpu/rmnist_sweep.sh >/tmp/rmnist_sweep.out 2>&1 &
SWEEP=$!
GPU_STEPS=env,tests PYTHON=$PY bash benchmarks/gpu/run_checks.sh
wait $SWEEP
echo "===== R-MNIST sweep (finished at +$(($(date +%s) - START))s) ====="
tail -n 12 /tmp/rmnist_sweep.out | tee -a "$OUT/summary.txt"
GPU_STEPS=bench,g003,ratios SUMMARY_APPEND=1 PYTHON=$PY GPU_CHECKS_SECONDS=${BENCH_SECONDS:-230} \
  bash benchmarks/gpu/run_checks.sh
echo "all done at +$(($(date +%s) - START))s"
