#!/usr/bin/env bash
# The performance checks that need a GPU, in one device call (its limits add up to 9 min 15 s):
#   env      nvidia-smi, torch and CUDA, the commit
#   tests    tests/test_cuda.py, then every test named `cuda` in the other files (-k cuda)
#   round    benchmarks/gpu-round.sh: an R-MNIST-shaped round, ms and kernel launches a step
#   cnn4096  4,096 CNN clients on one device (benchmarks/step_ops.py, 200 samples a client)
#   bn       model=cnn-bn against model=cnn a round, and the device's peak memory of each
#   flute    FLUTE's LR-MNIST protocol on the device (benchmarks/flute_lr_mnist.py; needs mnist.npz
#            in $SHEAF_FMTL_DATA, else the step is skipped)
# Usage on the device machine: OUT=dir bash benchmarks/gpu/performance_checks.sh
#   GPU_DRY_RUN=1 OUT=/tmp/perf bash benchmarks/gpu/performance_checks.sh   (here: cpu, toy sizes)
# Python packages the device's image lacks: their wheels in .whl/ (ignored; carried with the call)
# are installed into a temporary folder first. Each step has its own time limit and a failing step
# does not stop the next; files in $OUT: summary.txt, tests.log, one JSON (and log) per benchmark.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/performance-checks}
mkdir -p "$OUT"
DRY=${GPU_DRY_RUN:-0}
PY=${PYTHON:-python3}
if [ "$DRY" = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
SITE=$(mktemp -d)
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl
fi
export PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TQDM_DISABLE=1
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
START=$(date +%s)
log() { echo "[+$(($(date +%s) - START))s] $*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S LOGFILE CMD...: CMD under `timeout`, its output appended to LOGFILE
step() {
  local name=$1 limit=$2 logf=$3 rc
  shift 3
  log "$name: start (limit ${limit}s)"
  echo "===== $name: $* =====" >>"$logf"
  timeout -k 5 "$limit" "$@" >>"$logf" 2>&1
  rc=$?
  case $rc in
    0) log "$name: ok" ;;
    124 | 137) log "$name: TIMEOUT after ${limit}s" ;;
    *) log "$name: FAILED (exit $rc), see $(basename "$logf")" ;;
  esac
  tail -n 3 "$logf"
}

if [ "$DRY" = 1 ]; then
  DEVICE=cpu MANY=(--clients 8 --samples 80 --rounds 1) BN=(--clients 3) BN_ROUNDS=(--rounds 1) FLUTE=(--rounds 2)
  log "GPU_DRY_RUN=1: device cpu, toy sizes (checks the script, not a GPU)"
else
  DEVICE=cuda MANY=(--clients 4096 --samples 200 --rounds 2) BN=(--clients 40) BN_ROUNDS=(--rounds 3) FLUTE=()
fi

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cpus"
} 2>&1 | tee -a "$SUMMARY"

TESTS=(-m '' -o addopts='' -q -rs --no-header -p no:cacheprovider)
step tests 150 "$OUT/tests.log" "$PY" -m pytest "${TESTS[@]}" tests/test_cuda.py
step tests-k-cuda 50 "$OUT/tests.log" "$PY" -m pytest "${TESTS[@]}" -k cuda \
  tests/runtime/test_faults.py tests/metrics/test_flops.py tests/plots/test_plots.py tests/cli/test_cli_errors.py
step round 90 "$OUT/round.log" env OUT="$OUT/round" bash benchmarks/gpu-round.sh
step cnn4096 90 "$OUT/cnn4096.log" \
  "$PY" benchmarks/step_ops.py --device "$DEVICE" "${MANY[@]}" --kernels fused --out "$OUT/cnn4096.json"
step bn 60 "$OUT/bn.log" "$PY" benchmarks/batchnorm_round.py --device "$DEVICE" "${BN[@]}" "${BN_ROUNDS[@]}"
step bn-memory 45 "$OUT/bn.log" "$PY" benchmarks/batchnorm_round.py --device "$DEVICE" "${BN[@]}" --memory
if [ -f "${SHEAF_FMTL_DATA:-/nonexistent}/mnist.npz" ]; then
  step flute 70 "$OUT/flute.log" "$PY" benchmarks/flute_lr_mnist.py --device "$DEVICE" "${FLUTE[@]}"
else
  log "flute: skipped (no mnist.npz in \$SHEAF_FMTL_DATA)"
fi
log "done"
exit 0
