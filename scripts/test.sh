#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (the Python interop environment), then
# runs every Rust test: unit, integration, doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds live outside the clone so CI runs on this machine reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
source scripts/prune_target.sh

# Python interop: the real deltalake and pyarrow from PyPI, pinned, in a project-local venv.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
export VOXLAKE_PYTHON="$PWD/.venv/bin/python"
# libtorch for the `tch` feature: the PyPI torch wheel matching tch 0.26, found by tch's build
# script through the active venv.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
export VIRTUAL_ENV="$PWD/.venv" LIBTORCH_USE_PYTORCH=1 PATH="$PWD/.venv/bin:$PATH"

# Azurite and moto's S3 server on 127.0.0.1, each with a fresh container/bucket, for the
# object store suite.
source scripts/azurite.sh
source scripts/s3.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-features --all-targets --quiet -- -D warnings
# The binaries the CLI tests run, built with the same feature selection as the tests.
cargo build --workspace --bins
cargo test --workspace --all-features "$@"
