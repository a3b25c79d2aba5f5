#!/usr/bin/env bash
# The main job on the embedded default: synthetic reference cubes on the local filesystem,
# converted into a Delta table, then streamed for one shuffled epoch with the bench report.
# No cloud, no GPU, no libtorch.  Options go to `compact demo` (--dir, --count, --seed), except
# `--release`, first: the binaries optimized, for the figures of the release's pace.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
source scripts/own_target.sh
if [ "${1:-}" = "--release" ]; then
  shift
  # The `demo` profile (Cargo.toml): release, with the crates off the read path compiled for a
  # shorter build; without the `cloud` feature (Azure, S3, GCS), which local tables do not need.
  cargo build --profile demo --quiet -p voxlake-cli --bin compact --bin voxlake --no-default-features
  bin="$CARGO_TARGET_DIR/demo"
else
  # The binaries scripts/test.sh builds first, in the same debug tree: a fresh clone's demo
  # then its tests compile each crate once (CONTRIBUTING.md, "The cold build"). Their pace is
  # not the release's, and the report says so.
  cargo build --quiet --workspace --bins
  bin="$CARGO_TARGET_DIR/debug"
fi
dir=demo-data
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "--dir" ] && dir="${args[$((i + 1))]}"
done
"$bin/compact" demo "$@"
echo
echo "streaming one shuffled epoch of $dir/table:"
"$bin/voxlake" bench "$dir/table" --shuffle --seed 1
