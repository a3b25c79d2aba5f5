#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (the Python interop environment), then
# runs every Rust test: unit, integration, doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests where another local user attacks (a process as `nobody` through setpriv) need root;
# run as another user they are skipped, and said to be, never green unseen.
if [ "$(id -u)" != 0 ]; then
  echo "WARNING: not root: the tests where another local user acts (setpriv as nobody) are SKIPPED; CI runs them as root" >&2
  export VOXLAKE_SKIP_ROOT_TESTS=1
fi

# Builds live outside the clone so CI runs on this machine reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
source scripts/prune_target.sh
source scripts/own_target.sh

# Python interop: the real deltalake and pyarrow from PyPI, pinned, and the torch wheel, in a
# venv that lives beside the builds, at one path for every clone: tch's build script records
# libtorch's path, and a clone's own venv would leave the shared builds pointing into a clone
# that is gone. `.venv` in the clone links to it (an existing `.venv` is used as it is).
if [ ! -e .venv ]; then
  venv="${VOXLAKE_VENV:-$HOME/.cache/voxlake/venv}"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  ln -s "$venv" .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
export VOXLAKE_PYTHON="$PWD/.venv/bin/python"
# libtorch for the `tch` feature: the PyPI torch wheel matching tch 0.26, named to tch's build
# script by its resolved path.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
LIBTORCH="$(.venv/bin/python -c 'import pathlib, torch; print(pathlib.Path(torch.__file__).resolve().parent)')"
export LIBTORCH
export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
unset LIBTORCH_USE_PYTORCH

# Azurite and moto's S3 server on 127.0.0.1, each with a fresh container/bucket, for the
# object store suite.
source scripts/azurite.sh
source scripts/s3.sh
source scripts/gcs.sh
# Chromium and ChromeDriver, for the report pages' browser tests.
source scripts/chromium.sh

# Each step's wall time, said as it ends (where a cold run's minutes go: CONTRIBUTING.md).
step_start=0
step() { echo "[test.sh] $1: $((SECONDS - step_start)) s" >&2; step_start=$SECONDS; }
step "set-up (venv, torch wheel, store servers, chromium)"

cargo fmt --all -- --check
# The walls between the crates and between files (docs/architecture.md).
bash scripts/check_walls.sh
# The binaries, cargo test and the wheel build one dependency tree (no crate compiled twice).
bash scripts/check_features.sh
cargo clippy --workspace --all-features --all-targets --quiet -- -D warnings
# The API docs build without a broken or private link.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --lib --quiet
step "fmt, walls, clippy, docs"
# What `scripts/demo.sh --release` builds: the binaries without the `cloud` feature (local
# tables only).
cargo clippy -p voxlake-cli --bin compact --bin voxlake --no-default-features --quiet -- -D warnings
# The binaries the CLI and Python tests run (default features: none of them needs `--device`);
# after scripts/demo.sh, built already (the demo runs these).
cargo build --workspace --bins
step "the binaries"
cargo test --workspace --all-features "$@"
step "cargo test"
# The Python package (crates/python + python/voxlake) as users install it: one abi3 wheel
# (scripts/wheel.sh in the dev profile for this host: built on the tree `cargo test` built, where
# the manylinux_2_28 build by zig builds every dependency again; the release wheel is that one),
# installed into .venv for its tests (they run the binaries built above and the S3 server
# started above), then by a user without Rust into a fresh venv of another CPython (issue 45).
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements-package.txt
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
bash scripts/wheel.sh "$wheels" dev host >"$wheels/build.log" 2>&1 || { tail -30 "$wheels/build.log"; exit 1; }
wheel=$(ls "$wheels"/voxlake-*.whl)
.venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
step "the wheel"
.venv/bin/python -m pytest -q tests/python/test_package.py tests/python/test_torch.py tests/python/test_map.py tests/python/test_report.py \
  tests/python/test_monitor.py tests/python/test_volumes.py
.venv/bin/python -m mypy --strict examples/train_torch.py python/voxlake
step "pytest, mypy"
bash scripts/check_wheel.sh "$wheel"
step "the wheel in a fresh venv"
