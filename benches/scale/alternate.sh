#!/usr/bin/env bash
# Two builds of `voxlake` alternated on one local S3 store behind the latency proxy (see
# benches/scale/alternate.py), e.g. this checkout against an older commit:
#   git worktree add /tmp/old <rev> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#     cargo build --release -p voxlake-cli --bin voxlake)
#   benches/scale/alternate.sh /tmp/old-target/release/voxlake [ROUNDS=3]
# (a worktree sharing this checkout's target folder can leave it a stale library: give it its own).
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1
rounds=${2:-3}
source benches/scale/store.sh alternate
.venv/bin/python benches/scale/alternate.py --old "$old" --new "$bin/voxlake" --proxy "$bin/latency_proxy" \
  --s3 "http://127.0.0.1:$seaweedfs_s3_port" --rounds "$rounds" --out-json "${OUT_JSON:-/tmp/voxlake-alternate.json}"
