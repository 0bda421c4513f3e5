#!/usr/bin/env bash
# An R-MNIST-shaped round on a GPU (40 clients, `cnn`, local_epochs=1, batch 32; generated data, no
# download): ms per round and kernel launches per mini-batch step, for dFedU and redrawn selections,
# with the library's default CNN kernel and with each of `fused` (grouped cuDNN convolutions,
# hand-written backward) and `im2col` (bmm convolutions, torch.func.grad), side by side in one call.
# Writes benchmarks/results/gpu-DEVICE/round.json (DEVICE: the GPU's name, lower case, dashes) with
# the keys `device`, `ms_per_round`, `launches_per_step` (dFedU, default kernel) and everything
# measured under `variants`; OUT=dir also gets a copy.
# Usage on the device machine: bash benchmarks/gpu-round.sh   (GPU_DRY_RUN=1: here, on CPU, tiny)
set -eu
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DEVICE=cuda
SIZE=(--clients 40 --samples 1500 --rounds 5)
if [ "${GPU_DRY_RUN:-0}" = 1 ]; then
  PY=.venv/bin/python DEVICE=cpu SIZE=(--clients 4 --samples 80 --rounds 1)
fi
NAME=$($PY -c "import torch; print(torch.cuda.get_device_name().lower().replace(' ', '-') if torch.cuda.is_available() else 'cpu')")
DIR=benchmarks/results/gpu-$NAME
if [ "${GPU_DRY_RUN:-0}" = 1 ]; then DIR=$(mktemp -d); fi  # a dry run writes nothing into the checkout
mkdir -p "$DIR"
RAW=$(mktemp)
$PY benchmarks/step_ops.py --device "$DEVICE" "${SIZE[@]}" --kernels fused,im2col --out "$RAW" | tee "$DIR/round.log"
$PY - "$RAW" "$DIR/round.json" "$NAME" <<'PY'
import json, sys
raw, out, name = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
d = raw["variants"]["dfedu"]["new"][0]
res = {
    "device": d.get("device_name", name),
    "ms_per_round": 1000 * d["s_per_round"],
    "launches_per_step": d.get("launches_per_step"),  # None on a CPU dry run
    "ops_per_step": d["ops_per_step"],
    "variants": raw["variants"],
    "setting": {k: raw[k] for k in ("clients", "samples", "device")},
}
json.dump(res, open(out, "w"), indent=1)
print(f"{out}: {res['device']}: {res['ms_per_round']:.1f} ms/round, {res['launches_per_step']} launches/step")
PY
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$DIR"/round.* "$OUT"/; fi
