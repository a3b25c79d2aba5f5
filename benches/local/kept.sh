#!/usr/bin/env bash
# Row groups kept in the memory budget between epochs (issue 44): `voxlake bench TABLE --shuffle
# --epochs EPOCHS` with row groups kept (the default) and with `--no-keep`, alternated for
# ROUNDS rounds, each at the default budget and at BUDGET_MB; samples/s, kept/not per round,
# peak RSS and the row groups taken back without a read.
#   benches/local/kept.sh TABLE [EPOCHS=3] [ROUNDS=3]   (BIN: release binaries; BUDGET_MB)
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/release_bins.sh
table=$1
epochs=${2:-3}
rounds=${3:-3}
run() { # extra bench arguments; prints samples/s, peak RSS MB, row groups reused
  "$bin/voxlake" bench "$table" --shuffle --seed 1 --epochs "$epochs" --json "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f %.0f %d" % (d["samples_per_s"], d["peak_rss_bytes"] / 1e6, d["row_groups_reused"]))'
}
cat "$table"/*.parquet >/dev/null
for budget in 1024 "${BUDGET_MB:-4096}"; do
  for ((i = 0; i < rounds; i++)); do
    read -r kept_rate kept_rss reused < <(run --memory-budget-mb "$budget")
    read -r none_rate none_rss _ < <(run --memory-budget-mb "$budget" --no-keep)
    echo "budget $budget MiB, round $i: kept $kept_rate/s ($reused row groups not read, peak RSS $kept_rss MB), none $none_rate/s (peak RSS $none_rss MB): $(awk "BEGIN {printf \"%.2f\", $kept_rate / $none_rate}")"
  done
done
