#!/usr/bin/env bash
# Issue 11's measurements in one run, on the GPU machine (see ../shared/gpu.md: binaries built
# here, carried in .gpu/), e.g.
#   bash .gpu/run-on-device.sh 'bash benches/gpu/check.sh 24000 3 cuda'
# or anywhere with `voxlake`, `compact` (and, for a CUDA device, `gpu_check`) on PATH:
#   benches/gpu/check.sh [COUNT=24000] [ROUNDS=3] [DEVICE=cuda]
# DEVICE `cpu` runs every step but gpu_check on the CPU tensor path (a dry run of the script).
#
# Steps, each logged as JSON lines under $OUT (default /tmp/voxlake-gpu-check), then a summary:
# 1. `compact demo` of COUNT reference cubes (kept between runs);
# 2. `cat` of the table's files: one process, and one per core at once;
# 3. `gpu_check` (device batches and labels equal the CPU batches bit for bit);
# 4. ROUNDS alternating rounds of one process, 2 shuffled epochs: the ndarray path, the DEVICE
#    path, the DEVICE path with OMP_NUM_THREADS=1 (libtorch's CPU threads must not matter);
#    and, where the Python package imports (or its wheel lies in .gpu/: `maturin build --release
#    --strip -o .gpu` here), python_feed.py: the Python loader into DEVICE through
#    voxlake.torch.to_device, then through pin_memory() in the loop (issue 31), and the
#    device path and to_device again over 6 epochs;
# 5. 1, 4 and 8 ranks at once (ndarray path), aggregate samples/s.
set -euo pipefail
count=${1:-24000}
rounds=${2:-3}
device=${3:-cuda}
out=${OUT:-/tmp/voxlake-gpu-check}
here=$(cd "$(dirname "$0")" && pwd)
data=${VOXLAKE_BENCH_DIR:-/tmp/voxlake-bench}/gpu$count
mkdir -p "$out"
runs="$out/runs.jsonl"
: >"$runs"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; device $device"

[ -d "$data/table/_delta_log" ] || compact demo --dir "$data" --count "$count" >"$out/demo.log"
files=("$data"/table/*.parquet)
cat "${files[@]}" >/dev/null # warm the page cache

# `cat`: seconds for one process, then for one process per core.
t0=$(date +%s.%N)
cat "${files[@]}" >/dev/null
t1=$(date +%s.%N)
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "$(nproc)" cat >/dev/null
t2=$(date +%s.%N)
bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
echo "{\"step\":\"cat\",\"bytes\":$bytes,\"one_s\":$(awk "BEGIN {print $t1 - $t0}"),\"parallel_s\":$(awk "BEGIN {print $t2 - $t1}")}" >>"$runs"

if [ "$device" != cpu ]; then
  gpu_check "$data/table" 2>&1 | tee "$out/gpu_check.log"
fi

# The Python package: installed, or its wheel carried in .gpu/ (no network there).
wheel=$(ls "$here"/../../.gpu/voxlake-*.whl 2>/dev/null | head -1 || true)
if [ -n "$wheel" ]; then
  python3 -m pip install --quiet --no-deps --no-index --target "$out/py" "$wheel"
  export PYTHONPATH="$out/py${PYTHONPATH:+:$PYTHONPATH}"
fi
python_feed=0
python3 -c 'import voxlake, torch' 2>/dev/null && python_feed=1

bench() { # step, then voxlake bench arguments
  local step=$1
  shift
  voxlake bench "$data/table" --shuffle --epochs "${EPOCHS:-2}" --json "$@" 2>>"$out/stderr.log" |
    sed "s/^{/{\"step\":\"$step\",/" >>"$runs"
}
for r in $(seq 1 "$rounds"); do
  bench ndarray --seed "$r"
  bench device --seed "$r" --device "$device"
  OMP_NUM_THREADS=1 bench device_omp1 --seed "$r" --device "$device"
  if [ "$python_feed" = 1 ]; then
    for feed in staged pin_memory; do
      python3 "$here/python_feed.py" "$data/table" --seed "$r" --device "$device" --feed "$feed" \
        2>>"$out/stderr.log" >>"$runs"
    done
    # The Rust and the Python feed over 6 epochs: a process's start (CUDA, pinned buffers,
    # threads) weighs less than in a run of 2 (~1.5 s).
    EPOCHS=6 bench device_long --seed "$r" --device "$device"
    python3 "$here/python_feed.py" "$data/table" --seed "$r" --device "$device" --feed staged \
      --epochs 6 --step python_staged_long 2>>"$out/stderr.log" >>"$runs"
  fi
done

# The Python feeds compared (docs/python.md): the loader in the training process with
# to_device against 2 and 4 DataLoader workers with pin_memory.
if [ "$python_feed" = 1 ]; then
  python3 "$here/../compare/workers.py" "$data/table" --device "$device" --rounds 1 \
    2>>"$out/stderr.log" | tee "$out/workers.jsonl"
fi

# The ranks of each run are one job (one version for all; the marker goes beside the table).
job="check-$$-$(date +%s)"
for n in 1 4 8; do
  for rank in $(seq 0 $((n - 1))); do
    bench "ranks$n" --seed 1 --rank "$rank" --world-size "$n" --job "$job-$n" &
  done
  wait
done

python3 "$here/summary.py" "$runs" | tee "$out/summary.txt"
# Anything on stderr is a warning the issue says must not be there.
if [ -s "$out/stderr.log" ]; then
  echo "stderr was not quiet ($(wc -l <"$out/stderr.log") lines), first ones:"
  head -5 "$out/stderr.log"
fi
