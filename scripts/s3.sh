# Sourced after the venv is installed: starts moto's S3 server (pinned in
# tests/python/requirements.txt) on a free port of 127.0.0.1 with a fresh bucket, exports
# VOXLAKE_S3_ENDPOINT and VOXLAKE_S3_BUCKET, and stops it when the sourcing shell exits.
source "$(dirname "${BASH_SOURCE[0]}")/services.sh"
port=$(free_port)
# Through the venv's python: a console script's #! names the clone that installed it, which may be gone.
.venv/bin/python -m moto.server -H 127.0.0.1 -p "$port" > "${TMPDIR:-/tmp}/voxlake-moto.log" 2>&1 &
track_service $!
wait_port "$port" "moto S3 server"
export VOXLAKE_S3_ENDPOINT="http://127.0.0.1:$port"
export VOXLAKE_S3_BUCKET=voxlake-test
.venv/bin/python - "$VOXLAKE_S3_ENDPOINT" "$VOXLAKE_S3_BUCKET" <<'PY'
import sys
import boto3

# moto accepts any key; these are the ones the tests use.
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="voxlake", aws_secret_access_key="voxlake-secret")
s3.create_bucket(Bucket=sys.argv[2])
print(f"bucket {sys.argv[2]} ready at {sys.argv[1]}")
PY
