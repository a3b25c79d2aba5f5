#!/usr/bin/env bash
# The local path against the page cache (issue 44): `cat` of a table's files (one process) and
# `voxlake bench TABLE --shuffle` with row checksums verified (the default), without them, and
# without reading the values, alternated for ROUNDS rounds; each as GB/s of the files' bytes
# read and as a fraction of `cat`'s GB/s in the same round.
#   benches/local/vs_cat.sh [TABLE=the 4,000-cube demo table] [ROUNDS=5]   (BIN: release binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/release_bins.sh
table=${1:-}
if [ -z "$table" ]; then
  data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/demo4000"
  [ -d "$data/table/_delta_log" ] || "$bin/compact" demo --dir "$data" --count 4000 >/dev/null
  table=$data/table
fi
rounds=${2:-5}
files=("$table"/*.parquet)
bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
cat "${files[@]}" >/dev/null
gbps() { # extra bench arguments; prints tensor GB/s
  "$bin/voxlake" bench "$table" --shuffle --seed 1 --json "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % (d["bytes_fetched"] / d["seconds"] / 1e9))'
}
echo "table: $table, $((bytes / 1000000)) MB in ${#files[@]} files"
for ((i = 0; i < rounds; i++)); do
  t0=$(date +%s.%N)
  cat "${files[@]}" >/dev/null
  t1=$(date +%s.%N)
  cat_gbps=$(awk "BEGIN {printf \"%.2f\", $bytes / ($t1 - $t0) / 1e9}")
  verified=$(gbps)
  unverified=$(gbps --no-verify)
  untouched=$(gbps --no-touch)
  ratio() { awk "BEGIN {printf \"%.2f\", $1 / $cat_gbps}"; }
  echo "round $i: cat $cat_gbps GB/s; bench verified $verified ($(ratio "$verified")), --no-verify $unverified ($(ratio "$unverified")), --no-touch $untouched ($(ratio "$untouched"))"
done
