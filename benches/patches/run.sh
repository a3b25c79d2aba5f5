#!/usr/bin/env bash
# Patches of large volumes against whole volumes (docs/benchmarks.md, "How fast are patches of
# large volumes?"): N volumes of 256³ (f32 image, u8 mask with a 20³ lesion) as .npy, converted
# twice by COMPACT_BIN (bricks of 32³; a row a volume, a row group each), then VOXLAKE_BIN's
# bench alternated ROUNDS times: whole volumes (batches of 1) and 64³ label-balanced patches
# (16 a volume, batches of 4). Local, warm page cache.
# Usage: benches/patches/run.sh COMPACT_BIN VOXLAKE_BIN [VOLUMES] [ROUNDS] [EPOCHS]
set -euo pipefail
compact=$1 voxlake=$2 volumes=${3:-8} rounds=${4:-3} epochs=${5:-6}
python=${VOXLAKE_PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" - "$work/src" "$volumes" <<'PY'
import os, sys
import numpy as np
src, n = sys.argv[1], int(sys.argv[2])
for field in ("image", "mask"):
    os.makedirs(f"{src}/{field}", exist_ok=True)
rng = np.random.default_rng(0)
for i in range(n):
    mask = np.zeros((256, 256, 256), np.uint8)
    c = rng.integers(40, 216, 3)
    mask[c[0] - 10:c[0] + 10, c[1] - 10:c[1] + 10, c[2] - 10:c[2] + 10] = 1
    np.save(f"{src}/image/ct_{i}.npy", rng.standard_normal((256, 256, 256), dtype=np.float32))
    np.save(f"{src}/mask/ct_{i}.npy", mask)
PY
"$compact" convert "$work/src" "$work/bricked" --fields image,mask --brick 32,32,32 | head -1
"$compact" convert "$work/src" "$work/whole" --fields image,mask --row-group-rows 1 | head -1
for r in $(seq "$rounds"); do
  echo "round $r"
  "$voxlake" bench "$work/whole" --batch-size 1 --epochs "$epochs" --shuffle | grep "samples in" | sed 's/^/  whole volumes: /'
  "$voxlake" bench "$work/bricked" --patch 64,64,64 --patches-per-volume 16 --label-field mask \
    --label-probabilities 0:1,1:1 --batch-size 4 --epochs "$epochs" --shuffle | grep "samples in" | sed 's/^/  patches: /'
done
