#!/usr/bin/env bash
# One-shot GPU checks (CUDA tests, paper-scale bench, cohort gradients).
#
#   OUT=/some/dir bash benchmarks/gpu/run_checks.sh        # on the GPU machine (python3 holds torch+CUDA)
#   GPU_DRY_RUN=1 OUT=/tmp/gpuout bash benchmarks/gpu/run_checks.sh   # here: cpu, tiny sizes, same steps
#
# Steps (each under `timeout` with its own budget; a failing step does not stop the next):
#   env    nvidia-smi, python/torch/CUDA versions, which Python packages are missing
#   tests  python -m pytest -m '' tests/test_cuda.py   (sync check, cpu == cuda, batched CNN == loop)
#   bench  sheaf-fmtl bench --device cuda: map-product kernels, settings small and paper (11.6 GiB of
#          maps), cohort gradients for cnn, cnn-small, cnn-medium, cnn-large and the mixed cohort
#   g003   sheaf-fmtl bench --device cuda, setting paper-g0.03 alone (float32, ~35 GiB of maps), after
#          the others so that a surprise there cannot cost the rest
#   ratios every ratio against its target, into summary.txt (from partial results if need be)
# Files in $OUT (7): summary.txt (env, step status, ratios), tests.log, bench.log (both benches),
# bench.json + ratios.json (first bench), g003/bench.json + g003/ratios.json (the gamma 0.03 setting).
# Expected wall time on an H200: about 3 minutes. Every step has a budget and the script stops
# starting steps once GPU_CHECKS_SECONDS (default 320) have passed, so it ends within about 330 s.
# Always exits 0 (the lead's commands can follow it). GPU_STEPS=env,tests runs only those steps;
# SUMMARY_APPEND=1 appends to summary.txt instead of starting it afresh.
set -u
cd "$(dirname "$0")/../.." || exit 0
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
DRY=${GPU_DRY_RUN:-0}
if [ "$DRY" = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export TQDM_DISABLE=1 # progress bars only where the code does not decide itself
SUMMARY=$OUT/summary.txt
STEPS=${GPU_STEPS:-env,tests,bench,g003,ratios} # a comma list: run only these steps
[ "${SUMMARY_APPEND:-0}" = 1 ] || : >"$SUMMARY"
START=$(date +%s)
TOTAL=${GPU_CHECKS_SECONDS:-320}
RESERVE=15 # kept for the last step (ratios), which reads whatever the others left
STATUS=()

log() { echo "[run_checks +$(($(date +%s) - START))s] $*" | tee -a "$SUMMARY"; }

# step NAME BUDGET_S LOGFILE CMD... : run CMD under timeout, full output to LOGFILE, a filtered copy
# (no progress-bar lines) to stdout.
step() {
  local name=$1 budget=$2 logf=$3 left
  shift 3
  case ",$STEPS," in *",$name,"*) ;; *) return ;; esac
  left=$((START + TOTAL - RESERVE - $(date +%s)))
  if [ "$left" -lt 10 ]; then
    log "step $name: SKIPPED (only ${left}s left of ${TOTAL}s)"
    STATUS+=("$name: skipped, out of time")
    return
  fi
  if [ "$left" -lt "$budget" ]; then budget=$left; fi
  log "step $name: start, budget ${budget}s, log $(basename "$logf")"
  echo "===== $name: $* =====" >>"$logf"
  local t0 rc dt st
  t0=$(date +%s)
  timeout -k 5 "$budget" "$@" 2>&1 | tee -a "$logf" | tr '\r' '\n' |
    grep --line-buffered -v -E '(it/s|s/it|round/s|s/round|setting/s|s/setting)\]|^\s*$'
  rc=${PIPESTATUS[0]}
  dt=$(($(date +%s) - t0))
  case $rc in
    0) st=ok ;;
    124 | 137) st="TIMEOUT after ${budget}s" ;;
    *) st="FAILED (exit $rc)" ;;
  esac
  log "step $name: $st in ${dt}s"
  STATUS+=("$name: $st (${dt}s)")
}

if [ "$DRY" = 1 ]; then
  DEVICE=cpu
  BENCH_ARGS=(--smoke --settings small-smoke,cnn-smoke --threads 2)
  BIG_ARGS=(--smoke --settings cnn-smoke --threads 2)
  log "GPU_DRY_RUN=1: device cpu, smoke sizes (checks the script, not the GPU)"
else
  DEVICE=cuda
  BENCH_ARGS=(--settings small,paper)
  BIG_ARGS=(--settings paper-g0.03)
fi

# ------------------------------------------------------------------------------------------ env
env_report() {
  date -u
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi
    nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.max.sm,clocks.max.mem --format=csv
  else
    echo "nvidia-smi: not found"
  fi
  echo "python: $PY"
  "$PY" - <<'EOF'
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine(), "cpus", __import__("os").cpu_count())
missing = []
for name in ["torch", "numpy", "scipy", "networkx", "matplotlib", "yaml", "tqdm", "pytest", "hypothesis"]:
    try:
        m = importlib.import_module(name)
        print(f"  {name} {getattr(m, '__version__', '?')}")
    except Exception as e:  # noqa: BLE001
        missing.append(f"{name} ({type(e).__name__}: {e})")
print("MISSING PACKAGES: " + "; ".join(missing) if missing else "all needed packages present")
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("torch.cuda.is_available():", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    print(f"device: {p.name}, {p.multi_processor_count} SMs, capability {p.major}.{p.minor}, "
          f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} free)")
    try:
        print("tf32: matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32)
    except Exception as e:  # noqa: BLE001
        print("tf32 flags:", e)
import sheaf_fmtl
print("sheaf_fmtl from", sheaf_fmtl.__file__)
EOF
}
export PY OUT
export -f env_report
step env 20 "$OUT/summary.txt" bash -c env_report

# ---------------------------------------------------------------------------------------- tests
PER_TEST=()
if "$PY" -c "import pytest_timeout" 2>/dev/null; then PER_TEST=(--timeout 60); fi
step tests 95 "$OUT/tests.log" \
  "$PY" -m pytest -m '' tests/test_cuda.py -q -s -rs --tb=short -p no:cacheprovider --durations=12 \
  -o addopts='' "${PER_TEST[@]}"

# ---------------------------------------------------------------------------------------- bench
step bench 120 "$OUT/bench.log" \
  "$PY" -m sheaf_fmtl.cli bench --device "$DEVICE" "${BENCH_ARGS[@]}" \
  --cohort-models 'cnn;cnn-small;cnn-medium;cnn-large;cnn-small,cnn-medium,cnn-large' \
  --no-scaling --map-init-on-device --map-kernels --keep-going --out "$OUT"

step g003 70 "$OUT/bench.log" \
  "$PY" -m sheaf_fmtl.cli bench --device "$DEVICE" "${BIG_ARGS[@]}" --cohort-models none \
  --no-scaling --map-init-on-device --keep-going --out "$OUT/g003"

# --------------------------------------------------------------------------------------- ratios
ratios_report() {
  "$PY" - "$OUT" "$OUT/g003" <<'EOF'
import json, sys
from pathlib import Path


def load(out: Path):
    path = out / "ratios.json"
    if path.exists():
        return json.loads(path.read_text())
    part = out / "bench.json"  # the bench was stopped: take what bench.json holds so far
    if not part.exists():
        print(f"{out}: no ratios.json and no bench.json: that bench wrote nothing")
        return None
    from sheaf_fmtl.bench.report import ratios, summarize

    res = json.loads(part.read_text())
    for r in res.get("settings", {}).values():
        r["summary"] = summarize(r, res["bandwidth_bytes_per_s"])
    data = {**ratios(res), "partial": True}
    path.write_text(json.dumps(data, indent=2))
    print(f"{out}: partial (from bench.json; the bench did not finish)")
    return data


def ok(flag):
    return "ok" if flag else "MISSED"


for out in map(Path, sys.argv[1:]):
    data = load(out)
    if data is None:
        continue
    print(f"{out}: device {data['device']} ({data.get('gpu')}), copy bandwidth "
          f"{data['bandwidth_GBps']:.0f} GB/s; targets {data['targets']}")
    for name, s in data["settings"].items():
        print(f"  {name:<12} maps {s['maps_GiB']:.1f} GiB {s['map_dtype']}: floor {s['floor_s'] * 1e3:.2f} ms, "
              f"map work {s['map_work_s'] * 1e3:.2f} ms -> R {s['floor_ratio']:.2f} [{ok(s['floor_ratio_ok'])}]; "
              f"round {s['round_s'] * 1e3:.2f} ms (gradients {s['gradients_s'] * 1e3:.2f} ms), loop reference "
              f"{s['reference_s'] * 1e3:.1f} ms{' (edge subset, scaled)' if s['reference_subset'] else ''} -> "
              f"S {s['speedup']:.1f} [{ok(s['speedup_ok'])}]; memory ratio {s['memory_ratio']:.2f}; "
              f"build {s['build_s']:.1f} s")
    for model, c in data["cohorts"].items():
        print(f"  cohort {model:<32} batched {c['batched_s'] * 1e3:.2f} ms, loop {c['loop_s'] * 1e3:.2f} ms -> "
              f"{c['speedup']:.1f}x [{ok(c['speedup_ok'])}], max rel diff {c['max_rel_diff']:.1e}")
EOF
}
export -f ratios_report
RESERVE=0
step ratios 15 "$OUT/summary.txt" bash -c ratios_report

log "done in $(($(date +%s) - START))s; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
for s in "${STATUS[@]}"; do log "  $s"; done
exit 0
