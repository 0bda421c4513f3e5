#!/bin/bash
# The School and Vehicle sweep (docs/results/notes/school-vehicle-sweeps.md, "School and Vehicle"): 72 runs, one seed, 2 at a time.
# Usage: docs/configs/school-vehicle-sweep.sh [OUT_DIR]   (from the repository root; default /tmp/school-vehicle-sweep)
# Each run goes to OUT_DIR/runs/NAME (summary.json, metrics.csv); the last lines of each log to OUT_DIR/logs/NAME.log.
# OMP_NUM_THREADS=1: these problems are tiny and, on a shared 2-core machine, torch's default thread count made
# runs many times slower (same numbers either way).
set -u
OUT=${1:-/tmp/school-vehicle-sweep}
mkdir -p "$OUT/runs" "$OUT/logs"
# Settings of every run; shared_maps=false: the sweep ran before shared maps became the default.
COMMON="graph_p=0.2 local_epochs=1 rounds=500 eval_every=10 shared_maps=false"
one() {
  local name=$1; shift
  local sets=()
  for kv in $COMMON "$@"; do sets+=(--set "$kv"); done
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/sheaf-fmtl run "${sets[@]}" --out "$OUT/runs/$name" --quiet \
    > "$OUT/logs/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/logs/$name.log"
}
export -f one; export OUT COMMON
xargs -P 2 -L 1 bash -c 'one "$@"' _ <<'RUNS'
s_sheaf_g0.1_l0.01_a0.05 dataset=school algorithm=sheaf-fmtl lam=0.01 gamma=0.1
s_sheaf_g0.3_l0.01_a0.05 dataset=school algorithm=sheaf-fmtl lam=0.01 gamma=0.3
s_dfedu_l0.01_a0.05 dataset=school algorithm=dfedu lam=0.01
s_dpsgd_a0.05 dataset=school algorithm=dpsgd
s_local_a0.05 dataset=school algorithm=local
s_sheaf_g0.1_l0.01_a0.05_ms1 dataset=school algorithm=sheaf-fmtl lam=0.01 gamma=0.1 map_scale=1
s_sheaf_g0.3_l0.01_a0.05_ms1 dataset=school algorithm=sheaf-fmtl lam=0.01 gamma=0.3 map_scale=1
v_sheaf_g0.1_l0.001_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.1
v_sheaf_g0.3_l0.001_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.3
v_dfedu_l0.001_a0.05 dataset=vehicle algorithm=dfedu lam=0.001
v_dpsgd_a0.05 dataset=vehicle algorithm=dpsgd
v_local_a0.05 dataset=vehicle algorithm=local
v_sheaf_g0.1_l0.001_a0.05_ms1 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.1 map_scale=1
v_sheaf_g0.3_l0.001_a0.05_ms1 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.3 map_scale=1
s_sheaf_g0.1_l0.1_a0.05 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.1
v_sheaf_g0.1_l0.1_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=0.1 gamma=0.1
s_sheaf_g0.3_l0.1_a0.05 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3
v_sheaf_g0.3_l0.1_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=0.1 gamma=0.3
s_sheaf_g0.1_l1_a0.05 dataset=school algorithm=sheaf-fmtl lam=1 gamma=0.1
v_sheaf_g0.1_l1_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=1 gamma=0.1
s_sheaf_g0.3_l1_a0.05 dataset=school algorithm=sheaf-fmtl lam=1 gamma=0.3
v_sheaf_g0.3_l1_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=1 gamma=0.3
s_sheaf_g0.1_l10_a0.05 dataset=school algorithm=sheaf-fmtl lam=10 gamma=0.1
v_sheaf_g0.1_l10_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=10 gamma=0.1
s_sheaf_g0.3_l10_a0.05 dataset=school algorithm=sheaf-fmtl lam=10 gamma=0.3
v_sheaf_g0.3_l10_a0.05 dataset=vehicle algorithm=sheaf-fmtl lam=10 gamma=0.3
s_dfedu_l0.1_a0.05 dataset=school algorithm=dfedu lam=0.1
s_dfedu_l1_a0.05 dataset=school algorithm=dfedu lam=1
v_dfedu_l0.01_a0.05 dataset=vehicle algorithm=dfedu lam=0.01
v_dfedu_l0.1_a0.05 dataset=vehicle algorithm=dfedu lam=0.1
v_dfedu_l1_a0.05 dataset=vehicle algorithm=dfedu lam=1
s_sheaf_g0.1_l0.1_a0.01 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.1 alpha=0.01
s_sheaf_g0.3_l0.1_a0.01 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3 alpha=0.01
s_dfedu_l0.1_a0.01 dataset=school algorithm=dfedu lam=0.1 alpha=0.01
s_dpsgd_a0.01 dataset=school algorithm=dpsgd alpha=0.01
s_local_a0.01 dataset=school algorithm=local alpha=0.01
v_sheaf_g0.1_l0.001_a0.01 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.1 alpha=0.01
v_sheaf_g0.3_l0.001_a0.01 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.3 alpha=0.01
v_dfedu_l0.1_a0.01 dataset=vehicle algorithm=dfedu lam=0.1 alpha=0.01
v_dpsgd_a0.01 dataset=vehicle algorithm=dpsgd alpha=0.01
v_local_a0.01 dataset=vehicle algorithm=local alpha=0.01
s_sheaf_g0.1_l0.1_a0.03 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.1 alpha=0.03
s_sheaf_g0.3_l0.1_a0.03 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3 alpha=0.03
s_dfedu_l0.1_a0.03 dataset=school algorithm=dfedu lam=0.1 alpha=0.03
s_dpsgd_a0.03 dataset=school algorithm=dpsgd alpha=0.03
s_local_a0.03 dataset=school algorithm=local alpha=0.03
v_sheaf_g0.1_l0.001_a0.03 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.1 alpha=0.03
v_sheaf_g0.3_l0.001_a0.03 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.3 alpha=0.03
v_dfedu_l0.1_a0.03 dataset=vehicle algorithm=dfedu lam=0.1 alpha=0.03
v_dpsgd_a0.03 dataset=vehicle algorithm=dpsgd alpha=0.03
v_local_a0.03 dataset=vehicle algorithm=local alpha=0.03
s_sheaf_g0.1_l0.1_a0.1 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.1 alpha=0.1
s_sheaf_g0.3_l0.1_a0.1 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3 alpha=0.1
s_dfedu_l0.1_a0.1 dataset=school algorithm=dfedu lam=0.1 alpha=0.1
s_dpsgd_a0.1 dataset=school algorithm=dpsgd alpha=0.1
s_local_a0.1 dataset=school algorithm=local alpha=0.1
v_sheaf_g0.1_l0.001_a0.1 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.1 alpha=0.1
v_sheaf_g0.3_l0.001_a0.1 dataset=vehicle algorithm=sheaf-fmtl lam=0.001 gamma=0.3 alpha=0.1
v_dfedu_l0.1_a0.1 dataset=vehicle algorithm=dfedu lam=0.1 alpha=0.1
v_dpsgd_a0.1 dataset=vehicle algorithm=dpsgd alpha=0.1
v_local_a0.1 dataset=vehicle algorithm=local alpha=0.1
s_sheaf_g0.3_l0.1_a0.05_eta0 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3 eta=0
s_sheaf_g0.3_l1_a0.05_eta0 dataset=school algorithm=sheaf-fmtl lam=1 gamma=0.3 eta=0
s_sheaf_g0.3_l1_a0.05_eta1e-4 dataset=school algorithm=sheaf-fmtl lam=1 gamma=0.3 eta=0.0001
s_sheaf_g0.3_l0.1_a0.05_idnoise dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=0.3 map_init=identity-noise
s_sheaf_g1_l0.1_a0.05_identity_eta0 dataset=school algorithm=sheaf-fmtl lam=0.1 gamma=1 map_init=identity eta=0
v_sheaf_g0.3_l0.1_a0.05_eta0 dataset=vehicle algorithm=sheaf-fmtl lam=0.1 gamma=0.3 eta=0
v_sheaf_g0.3_l0.1_a0.05_idnoise dataset=vehicle algorithm=sheaf-fmtl lam=0.1 gamma=0.3 map_init=identity-noise
v_sheaf_g1_l0.1_a0.05_identity_eta0 dataset=vehicle algorithm=sheaf-fmtl lam=0.1 gamma=1 map_init=identity eta=0
s_sheaf_g0.3_l0.01_a0.05_eta0.1 dataset=school algorithm=sheaf-fmtl lam=0.01 gamma=0.3 eta=0.1
s_sheaf_g0.3_l0.3_a0.05_idnoise_eta1e-3 dataset=school algorithm=sheaf-fmtl lam=0.3 gamma=0.3 map_init=identity-noise eta=0.001
v_sheaf_g0.3_l1_a0.05_idnoise dataset=vehicle algorithm=sheaf-fmtl lam=1 gamma=0.3 map_init=identity-noise
RUNS
