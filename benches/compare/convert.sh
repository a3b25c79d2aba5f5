#!/usr/bin/env bash
# Conversion benchmark: `compact convert` vs numpy + pyarrow + deltalake.write_deltalake on the
# same synthetic reference cubes, alternating runs, warm page cache.
# usage: benches/compare/convert.sh [COUNT=4000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-4000}
runs=${2:-3}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet -p voxlake-cli --bin compact
compact="$CARGO_TARGET_DIR/release/compact"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/ref$count"
if [ ! -f "$data/labels.csv" ] || [ "$(ls "$data/cubes" | wc -l)" != "$count" ]; then
  rm -rf "$data"
  "$compact" generate "$data" --count "$count"
fi
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python benches/compare/convert_bench.py "$compact" .venv/bin/python "$data" --runs "$runs"
