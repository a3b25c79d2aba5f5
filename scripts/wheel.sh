#!/usr/bin/env bash
# Builds the Python package as one wheel that installs without Rust: abi3 (every CPython from
# 3.10), manylinux_2_28 x86_64 (glibc 2.28: RHEL 8, Debian 10, Ubuntu 20.04 and later), linked
# against that glibc by zig (maturin --zig), so the build machine's newer glibc does not leak in;
# maturin checks the symbols it links (auditwheel's rules) before writing the wheel.
#   scripts/wheel.sh [OUT=target/wheels] [PROFILE=release]    then: pip install OUT/voxlake-*.whl
# (scripts/test.sh builds it in the `dev` profile: the same packaging, unoptimized.)
# The version is the workspace's (Cargo.toml); the project's metadata is pyproject.toml's.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/wheels}
profile=${2:-release}
strip=()
[ "$profile" = release ] && strip=(--strip)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r scripts/requirements-wheel.txt
# maturin finds zig through the ziglang package (its `python-zig`) on PATH.
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/python -m maturin build --profile "$profile" "${strip[@]}" --zig --compatibility manylinux_2_28 \
  --interpreter .venv/bin/python -o "$out"
