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

# A second Azurite that takes Entra ID bearer tokens only (`--oauth basic`, which needs HTTPS):
# the identity tests (managed identity, workload identity, service principal, Azure CLI) read
# through it with tokens from tests/python/token_server.py. Its certificate is made here,
# self-signed for 127.0.0.1 (clients are told to accept it: allow_invalid_certificates).
oauth_dir=$(mktemp -d "${TMPDIR:-/tmp}/voxlake-azurite-oauth.XXXXXX")
track_dir "$oauth_dir"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$oauth_dir/key.pem" -out "$oauth_dir/cert.pem" \
  -days 2 -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
oauth_port=$(free_port)
node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$oauth_port" --inMemoryPersistence \
  --disableTelemetry --skipApiVersionCheck --loose --silent --oauth basic \
  --cert "$oauth_dir/cert.pem" --key "$oauth_dir/key.pem" > "${TMPDIR:-/tmp}/voxlake-azurite-oauth.log" 2>&1 &
track_service $!
wait_port "$oauth_port" "Azurite (OAuth)"
export VOXLAKE_AZURITE_OAUTH_URL="https://127.0.0.1:$oauth_port"
python3 - "$VOXLAKE_AZURITE_OAUTH_URL" "$(python3 tests/python/token_server.py --token)" <<'PY'
import ssl, sys, urllib.request
url, token = sys.argv[1], sys.argv[2]
req = urllib.request.Request(f"{url}/devstoreaccount1/identity?restype=container", method="PUT",
                             headers={"Authorization": f"Bearer {token}", "x-ms-version": "2021-08-06",
                                      "Content-Length": "0"})
urllib.request.urlopen(req, context=ssl._create_unverified_context()).read()
print(f"container identity ready at {url} (OAuth)")
PY
