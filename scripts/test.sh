#!/usr/bin/env bash
# The whole test suite. Installs what the tests need (the Python interop environment), then
# runs every Rust test: unit, integration, doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds live outside the clone so CI runs on this machine reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/voxlake/target}"

# Python interop: the real deltalake and pyarrow from PyPI, pinned, in a project-local venv.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
export VOXLAKE_PYTHON="$PWD/.venv/bin/python"

# Azurite (pinned in package.json) on 127.0.0.1 with a fresh container, for the Azure tests.
npm install --no-audit --no-fund --silent
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --inMemoryPersistence \
  --disableTelemetry --skipApiVersionCheck --loose --silent > "${TMPDIR:-/tmp}/voxlake-azurite.log" 2>&1 &
azurite_pid=$!
trap 'kill $azurite_pid 2>/dev/null || true' EXIT
python3 - "$port" <<'PY'
import socket, sys, time
deadline = time.time() + 30
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit("Azurite did not start")
PY
export AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$port"
export VOXLAKE_AZURITE_CONTAINER=voxlake-test
python3 scripts/azurite_container.py "$AZURITE_BLOB_STORAGE_URL" "$VOXLAKE_AZURITE_CONTAINER"

cargo fmt --all -- --check
# The binaries the CLI tests run, built with the same feature selection as the tests.
cargo build --workspace --bins
cargo test --workspace --all-features "$@"
