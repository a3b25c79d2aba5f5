#!/usr/bin/env bash
# The wheel as a user without Rust gets it (issue 45): scripts/wheel.sh's wheel installed into a
# fresh venv of another CPython than the build's (3.13 or 3.12, from pyenv; else the system's
# python3), numpy from PyPI,
# then tests/python/wheel_check.py run there with a PATH that holds no cargo.
#   scripts/check_wheel.sh [WHEEL]   (default: build one with scripts/wheel.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=${1:-}
if [ -z "$wheel" ]; then
  bash scripts/wheel.sh "$work/wheels" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
  wheel=$(ls "$work"/wheels/voxlake-*.whl)
fi
# abi3 (one wheel for every CPython from 3.10); manylinux_2_28 as released, linux_x86_64 as
# scripts/test.sh builds it for this host.
case "$(basename "$wheel")" in
  voxlake-*-cp310-abi3-manylinux_2_28_x86_64.whl | voxlake-*-cp310-abi3-linux_x86_64.whl) ;;
  *) echo "not an abi3 wheel for x86_64 Linux: $wheel" >&2; exit 1 ;;
esac
python=""
for v in 3.13 3.12; do
  python=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v.*/bin/python3 2>/dev/null | tail -1 || true)
  [ -n "$python" ] && break
done
if [ -z "$python" ]; then
  # A fresh machine without pyenv: the system's CPython, in a venv of its own all the same.
  python=$(command -v python3)
  echo "no CPython 3.13 or 3.12 under pyenv: the wheel is checked on $("$python" --version)" >&2
fi
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel" "numpy==$(.venv/bin/python -c 'import numpy; print(numpy.__version__)')"
# Only the venv and the system's tools: no cargo, no rustup, no build tree.
(cd "$work" && env -i HOME="$work" PATH="$work/venv/bin:/usr/bin:/bin" \
  "$work/venv/bin/python" "$OLDPWD/tests/python/wheel_check.py" "$OLDPWD/tests/fixtures/foreign" \
  "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')")
