#!/usr/bin/env bash
# MapDataset on S3 through the testkit's latency proxy, one command:
#   benches/take/remote.sh TABLE [LATENCY_MS=20] [remote.py's options…]
# TABLE: a local voxlake table (benches/take/map_dataset.py makes one: /tmp/voxlake-take/cubes-4000).
# Starts SeaweedFS on 127.0.0.1 and a proxy holding every request LATENCY_MS before it is
# forwarded, uploads TABLE, then runs benches/take/remote.py with the installed voxlake package.
# Everything runs on this machine: the store and the proxy share its cores with the reader.
set -euo pipefail
cd "$(dirname "$0")/../.."
table=$1
latency=${2:-20}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --profile demo --quiet -p voxlake-testkit --bin latency_proxy
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r benches/remote/requirements.txt
source scripts/services.sh
store=$(mktemp -d)
track_dir "$store"
start_seaweedfs "$store" bench
log="$store/proxy.log"
# PROXY_LOG=FILE: every request the proxy forwarded (latency_proxy --log).
"$CARGO_TARGET_DIR/demo/latency_proxy" "127.0.0.1:$seaweedfs_s3_port" --latency-ms "$latency" \
  ${PROXY_LOG:+--log "$PROXY_LOG"} > "$log" &
track_service $!
for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
endpoint="http://$(awk '/listening on/ {print $3}' "$log")"
echo "machine: $(nproc) cores; proxy $latency ms"
.venv/bin/python benches/take/remote.py --table "$table" --upload "http://127.0.0.1:$seaweedfs_s3_port" \
  --endpoint "$endpoint" "${@:3}"
