#!/usr/bin/env bash
# The main job on the embedded default: synthetic reference cubes on the local filesystem,
# converted into a Delta table. No cloud, no GPU, no libtorch.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo run --release --quiet -p voxlake-compact --bin compact -- demo "$@"
