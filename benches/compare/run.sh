#!/usr/bin/env bash
# The side-by-side comparison, from a fresh checkout, one command:
#   benches/compare/run.sh [COUNT=4000] [RUNS=3]
# Builds voxlake (release) and its Python package (maturin, into .venv), installs the Python peers (deltalake/pyarrow/torch in .venv;
# Petastorm, which needs pyarrow < 15 and numpy < 2, in .venv-petastorm), generates the
# reference cubes, converts them, runs every loader alternately and writes
# docs/benchmarks-compare.json and docs/benchmarks.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-4000}
runs=${2:-3}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet -p voxlake-cli --bin compact --bin voxlake
bin="$CARGO_TARGET_DIR/release"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt \
  -r benches/compare/requirements.txt
# The voxlake Python package, a release build, into .venv.
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements-package.txt
.venv/bin/python -m maturin develop --release --quiet
[ -x .venv-petastorm/bin/python ] || python3 -m venv .venv-petastorm
.venv-petastorm/bin/python -m pip install --quiet --disable-pip-version-check \
  -r benches/compare/requirements-petastorm.txt
data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/compare$count"
if [ ! -f "$data/labels.csv" ]; then
  "$bin/compact" generate "$data" --count "$count"
fi
[ -d "$data/table/_delta_log" ] || "$bin/compact" convert "$data/cubes" "$data/table" --labels "$data/labels.csv"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python benches/compare/compare.py --voxlake "$bin/voxlake" --table "$data/table" \
  --cubes "$data/cubes" --petastorm-python .venv-petastorm/bin/python --runs "$runs" \
  --out-json "${OUT_JSON:-docs/benchmarks-compare.json}" --out-png "${OUT_PNG:-docs/benchmarks.png}" ${COMPARE_ARGS:-}
echo
echo "conversion (compact convert vs numpy + pyarrow + write_deltalake):"
.venv/bin/python benches/compare/convert_bench.py "$bin/compact" .venv/bin/python "$data" --runs "$runs"
