#!/usr/bin/env bash
# Warm node cache vs local table, alternated (issue 44): COUNT demo cubes converted into
# SeaweedFS on 127.0.0.1 (direct, no proxy) and into a local table, the cache filled by one
# epoch, then ROUNDS rounds of `voxlake bench --shuffle --seed 1 --json` on each, both read into
# the page cache first. Prints samples/s, first batch (s), CPU s per 1,000 samples, cache hits
# and store bytes per run. PERF=1 also records `perf` profiles of 3 epochs of each
# (/tmp/warm.perf, /tmp/local.perf) and of the S3 table read without a cache (/tmp/cold.perf). BASE=folder of other release binaries (a build before a
# change) runs them too in each round, side by side.
#   benches/cache/warm_vs_local.sh [ROUNDS=5] [COUNT=1000]     (BIN: the release binaries' folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/release_bins.sh
source benches/machine.sh
machine
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r benches/remote/requirements.txt
source scripts/services.sh
rounds=${1:-5}
count=${2:-1000}
data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/cache$count"
[ -d $data/table ] || "$bin/compact" demo --dir "$data" --count "$count" > /dev/null
store=$(mktemp -d)
start_seaweedfs "$store" bench
export AWS_ENDPOINT_URL="http://127.0.0.1:$seaweedfs_s3_port" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=voxlake AWS_SECRET_ACCESS_KEY=voxlake-secret
"$PWD/.venv/bin/python" -c "import boto3; boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL', aws_access_key_id='voxlake', aws_secret_access_key='voxlake-secret', region_name='us-east-1').create_bucket(Bucket='bench')" 2>/dev/null || true
"$bin/compact" convert $data/cubes s3://bench/table --labels $data/labels.csv > /dev/null
cache=$(mktemp -d)
# Both removed when this shell exits (stop_services).
voxlake_service_dirs="${voxlake_service_dirs:-} $store $cache"
"$bin/voxlake" bench s3://bench/table --shuffle --seed 1 --cache-dir $cache --json > /dev/null 2>&1
run() { "${voxlake:-$bin/voxlake}" bench "$@" --shuffle --seed 1 --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f %.3f %.4f %s %s" % (d["samples_per_s"], d.get("first_batch_s", -1), 1000*(d["cpu_user_s"]+d["cpu_system_s"])/d["samples"], d.get("cache_hits"), d.get("store_bytes_read")))'; }
for ((i = 0; i < rounds; i++)); do
  find "$data/table" "$cache" -type f -exec cat {} + > /dev/null
  echo "round $i local: $(run $data/table)   warm: $(run s3://bench/table --cache-dir $cache)"
  if [ -n "${BASE:-}" ]; then
    echo "round $i base local: $(voxlake=$BASE/voxlake run $data/table)   base warm: $(voxlake=$BASE/voxlake run s3://bench/table --cache-dir $cache)"
  fi
done
if [ -n "${PERF:-}" ]; then
  perf record -F 999 -g -o /tmp/warm.perf -- "$bin/voxlake" bench s3://bench/table --shuffle --seed 1 --epochs 3 --cache-dir $cache > /dev/null 2>&1
  perf record -F 999 -g -o /tmp/local.perf -- "$bin/voxlake" bench $data/table --shuffle --seed 1 --epochs 3 > /dev/null 2>&1
  perf record -F 999 -g -o /tmp/cold.perf -- "$bin/voxlake" bench s3://bench/table --shuffle --seed 1 --epochs 3 --no-cache > /dev/null 2>&1
fi
