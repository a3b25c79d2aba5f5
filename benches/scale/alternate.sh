#!/usr/bin/env bash
# Two builds of `voxlake` alternated on one local S3 store behind the latency proxy (see
# benches/scale/alternate.py), e.g. this checkout against an older commit:
#   git worktree add /tmp/old <rev> && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#     cargo build --release -p voxlake --bin voxlake)
#   benches/scale/alternate.sh /tmp/old-target/release/voxlake [ROUNDS=3]
# (a worktree sharing this checkout's target folder can leave it a stale library: give it its own).
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$1
rounds=${2:-3}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet -p voxlake --bin voxlake -p voxlake-testkit --bin latency_proxy
bin="$CARGO_TARGET_DIR/release"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt \
  -r benches/remote/requirements.txt
source scripts/services.sh
store=$(mktemp -d "${TMPDIR:-/tmp}/voxlake-alternate-store.XXXXXX")
track_dir "$store"
start_seaweedfs "$store" alternate
.venv/bin/python benches/scale/alternate.py --old "$old" --new "$bin/voxlake" --proxy "$bin/latency_proxy" \
  --s3 "http://127.0.0.1:$seaweedfs_s3_port" --rounds "$rounds" --out-json "${OUT_JSON:-/tmp/voxlake-alternate.json}"
