#!/usr/bin/env bash
# The main job on the embedded default: synthetic reference cubes on the local filesystem,
# converted into a Delta table, then streamed for one shuffled epoch with the bench report.
# No cloud, no GPU, no libtorch.  Options go to `compact demo` (--dir, --count, --seed).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
source scripts/own_target.sh
# Without the `cloud` feature (Azure, S3 and GCS stores): the demo's tables are local, and a
# cold build is a third shorter; the `demo` profile (Cargo.toml) compiles the crates off the
# read path for a shorter build. `cargo build --release -p voxlake-cli` builds the full binaries.
cargo build --profile demo --quiet -p voxlake-cli --bin compact --bin voxlake --no-default-features
dir=demo-data
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "--dir" ] && dir="${args[$((i + 1))]}"
done
"$CARGO_TARGET_DIR/demo/compact" demo "$@"
echo
echo "streaming one shuffled epoch of $dir/table:"
"$CARGO_TARGET_DIR/demo/voxlake" bench "$dir/table" --shuffle --seed 1
