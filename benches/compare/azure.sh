#!/usr/bin/env bash
# Azure benchmark: starts Azurite on 127.0.0.1, then examples/azure_latency.rs (convert
# Azurite → Azurite; loader direct vs +20 ms per request; first batch on 3,000 files).
# usage: benches/compare/azure.sh [COUNT=4000] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet --example azure_latency
source scripts/azurite.sh
"$CARGO_TARGET_DIR/release/examples/azure_latency" "$@"
