#!/usr/bin/env bash
# Builds the Python package as one wheel that installs without Rust: abi3 (every CPython from
# 3.10), manylinux_2_28 x86_64 (glibc 2.28: RHEL 8, Debian 10, Ubuntu 20.04 and later), linked
# against that glibc by zig (maturin --zig), so the build machine's newer glibc does not leak in;
# maturin checks the symbols it links (auditwheel's rules) before writing the wheel.
#   scripts/wheel.sh [OUT=target/wheels] [PROFILE=release] [PLATFORM=manylinux_2_28]
#   then: pip install OUT/voxlake-*.whl
# PLATFORM `host`: this machine's toolchain and glibc, tagged linux_x86_64 (installs here only),
# built in the target directory `cargo test` uses for the same host, so no dependency is built
# twice: what scripts/test.sh checks (with PROFILE dev). The zig build for manylinux_2_28 has a
# target directory of its own (the target triple's, other C compiler): from empty, a second
# full build of the tree, 453 s of CPU (CONTRIBUTING.md, "The cold build").
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
case "${3:-manylinux_2_28}" in
  manylinux_2_28) platform=(--zig --compatibility manylinux_2_28) ;;
  host) platform=(--compatibility linux) ;;
  *) echo "scripts/wheel.sh: PLATFORM is manylinux_2_28 or host, not $3" >&2; exit 2 ;;
esac
.venv/bin/python -m maturin build --profile "$profile" "${strip[@]}" "${platform[@]}" \
  --interpreter .venv/bin/python -o "$out"
