#!/usr/bin/env bash
# Copy what docs/configs/coupling-runs.sh wrote (runs/coupling) into docs/results/coupling, keeping
# only the small files: sweep.csv, best.yaml, aggregate.{json,md}, each run's summary.json,
# metrics.csv and config.yaml (no checkpoints). Usage: bash docs/results/coupling/collect.sh
set -euo pipefail
src=${1:-runs/coupling}; dst=docs/results/coupling
cd "$src" && find . \( -name sweep.csv -o -name best.yaml -o -name 'aggregate.*' -o -name summary.json \
  -o -name metrics.csv -o -name config.yaml -o -name cell.json \) -print0 | \
  while IFS= read -r -d '' f; do mkdir -p "$OLDPWD/$dst/$(dirname "$f")"; cp "$f" "$OLDPWD/$dst/$f"; done
