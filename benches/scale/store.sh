# Sourced by benches/scale/run.sh and alternate.sh (from the project's root): builds the
# release `voxlake` and the latency proxy (their folder in $bin), readies the venv, and starts
# a SeaweedFS S3 store on 127.0.0.1 in a fresh folder, bucket $1 (its port in
# $seaweedfs_s3_port), stopped when the sourcing shell exits.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo build --release --quiet -p voxlake-cli --bin voxlake -p voxlake-testkit --bin latency_proxy
bin="$CARGO_TARGET_DIR/release"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt \
  -r benches/remote/requirements.txt
source scripts/services.sh
store=$(mktemp -d "${TMPDIR:-/tmp}/voxlake-$1-store.XXXXXX")
track_dir "$store"
start_seaweedfs "$store" "$1"
