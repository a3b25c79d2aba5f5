#!/usr/bin/env bash
# The crafted-input generators of the test suite (npy/npz headers and archives, footers,
# deletion vectors, resume states, stall deadlines) run far longer than CI runs them: CASES
# cases each (default 20,000; CI runs proptest's 256 or the test's own count). A failure
# prints the minimal input and writes it to the crate's proptest-regressions/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${CASES:-20000}"
# The test suite's builds (debug: the same binaries, no second build of deltalake).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
cargo test -p voxlake-format --lib -- fuzz::
cargo test -p voxlake-table --lib -- crafted_inline_vectors a_crafted_footer
cargo test -p voxlake-loader --lib -- state::
cargo test -p voxlake-io --lib -- stall:: cache::entry
