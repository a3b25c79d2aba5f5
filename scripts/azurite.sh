# Sourced: starts Azurite (pinned in package.json) on a free port of 127.0.0.1 with a fresh
# container, exports AZURITE_BLOB_STORAGE_URL and VOXLAKE_AZURITE_CONTAINER, and stops it when
# the sourcing shell exits.
source "$(dirname "${BASH_SOURCE[0]}")/services.sh"
npm install --no-audit --no-fund --silent
port=$(free_port)
node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --inMemoryPersistence \
  --disableTelemetry --skipApiVersionCheck --loose --silent > "${TMPDIR:-/tmp}/voxlake-azurite.log" 2>&1 &
track_service $!
wait_port "$port" Azurite
export AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$port"
export VOXLAKE_AZURITE_CONTAINER=voxlake-test
python3 scripts/azurite_container.py "$AZURITE_BLOB_STORAGE_URL" "$VOXLAKE_AZURITE_CONTAINER"
