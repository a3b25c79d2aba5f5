# Sourced by the benchmark scripts: from the project's root, the release binaries `compact` and
# `voxlake` in $bin (built here, or BIN's where set: another build to compare, or one built
# already).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p voxlake-cli --bin compact --bin voxlake
fi
bin=${BIN:-$CARGO_TARGET_DIR/release}
