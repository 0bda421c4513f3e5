#!/usr/bin/env bash
# "Which coupling works" (docs/results/notes/coupling.md): for one dataset (school or vehicle), each row is tuned by
# `sheaf-fmtl sweep` on a validation split (20% of each client's training data, the sweep's default;
# never the test split), then run for 5 seeds on the test split with the chosen lam and alpha.
# Rerunning reuses finished cells and seeds. Usage: bash docs/configs/coupling-runs.sh school [ROW...]
# One thread per process: on a 2-core machine shared with other jobs, torch's default threads make
# a School round about 10x slower.
set -euo pipefail
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
ds=$1; shift
cfg=docs/configs/coupling-$ds.yaml
out=${OUT:-runs/coupling}/$ds
rows=${*:-local dfedu redrawn-selection redrawn-selection-est dpsgd learned fixed redrawn-orthonormal redrawn-orthonormal-est redrawn-gaussian redrawn-gaussian-est}

row_settings() {  # the row's fixed keys, then its grid
  case $1 in
    local) echo "algorithm=local|--grid alpha=0.01,0.05" ;;
    dpsgd) echo "algorithm=dpsgd|--grid alpha=0.01,0.05" ;;
    dfedu) echo "algorithm=dfedu|--grid lam=0.03,0.1,0.3 --grid alpha=0.01,0.05" ;;
    learned) echo "algorithm=sheaf-fmtl maps=learned|--grid lam=0.001,0.01,0.1 --grid alpha=0.01,0.05" ;;
    fixed) echo "algorithm=sheaf-fmtl maps=fixed|--grid lam=0.01,0.1,1 --grid alpha=0.01,0.05" ;;
    redrawn-*-est) k=${1#redrawn-}; k=${k%-est}
      echo "algorithm=sheaf-fmtl maps=redrawn map_kind=$k estimates=true|--grid lam=0.03,0.1,0.3 --grid alpha=0.01,0.05" ;;
    redrawn-*) k=${1#redrawn-}
      echo "algorithm=sheaf-fmtl maps=redrawn map_kind=$k|--grid lam=0.3,1,3 --grid alpha=0.01,0.05" ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
  esac
}

for row in $rows; do
  s=$(row_settings "$row"); keys=${s%%|*}; grid=${s#*|}
  # shellcheck disable=SC2086
  sheaf-fmtl sweep "$cfg" --set $keys $grid --out "$out/sweep/$row" --quiet
  chosen=$(python3 -c "import yaml,sys; b=yaml.safe_load(open(sys.argv[1])); print(' '.join(f'{k}={b[k]}' for k in ('lam','alpha') if k in b))" "$out/sweep/$row/best.yaml")
  echo "== $ds $row: chosen on validation: $chosen"
  # shellcheck disable=SC2086
  sheaf-fmtl run "$cfg" --set $keys $chosen --seeds 0-4 --out "$out/seeds/$row" --quiet
done
