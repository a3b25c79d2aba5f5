# Sourced: starts Azurite (pinned in package.json) on a free port of 127.0.0.1 with a fresh
# container, exports AZURITE_BLOB_STORAGE_URL and VOXLAKE_AZURITE_CONTAINER, and stops it when
# the sourcing shell exits.
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
